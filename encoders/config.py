"""The encoder's architecture: one flat, typed dataclass and a table of named presets.

BERT, RoBERTa, DistilBERT and the `modern` variant are presets (data), not classes. The axes that have a registry
(`position`: `encoders.positions.POSITIONS`; `norm` and `activation`: `encoders.layers.NORMS`, `ACTIVATIONS`) are
strings checked against it, so a scheme registered there is valid everywhere at once, the command line included;
the fixed choices are `Literal`s, checked with `check_choice`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from encoders.choices import check_choice
from encoders.layers import ACTIVATIONS, NORMS
from encoders.positions import POSITIONS

log = logging.getLogger(__name__)

NormPlacement = Literal["post", "pre"]
DropoutRate = Literal["hidden", "attention"]  # hidden_dropout or attention_dropout
FeedForwardDropout = Literal["output", "inner"]


def global_every(is_global: Sequence[bool]) -> int | None:
    """The n for which layer i attends globally exactly when i % n == 0 (`EncoderConfig.global_every`; 1: every
    layer), or None when these layers' pattern is not of that form."""
    if not is_global or not is_global[0]:
        return None
    every = is_global.index(True, 1) if is_global.count(True) > 1 else len(is_global)
    return every if list(is_global) == [i % every == 0 for i in range(len(is_global))] else None


def check_scheme_settings(config: EncoderConfig, given: Mapping[str, Any], setting: str = "EncoderConfig") -> None:
    """Refuse the settings among `given` (the ones a user set; a preset's own values are not given) that `config`
    does not read: another position scheme's (`rope_base` with ALiBi, ...), and the local layers' RoPE base where
    there are no local layers. They would change nothing. `setting` prefixes their names in the message."""
    used = POSITIONS[config.position].settings
    unused = [name for scheme in POSITIONS.values() for name in scheme.settings
              if name not in used and given.get(name) is not None]
    if unused:
        names = ", ".join(f"{name}={given[name]!r}" for name in unused)
        raise ValueError(f"{setting}: {names} belong to another position scheme; position={config.position!r} does "
                         f"not read them. Remove them, or set {setting}.position to their scheme.")
    if given.get("local_rope_base") is not None and not config.local_window:
        raise ValueError(f"{setting}.local_rope_base={given['local_rope_base']} is the RoPE base of sliding-window "
                         f"layers, but there are none (local_window=0); remove it or set local_window and "
                         f"global_every.")


# Kernel choices that earlier versions stored with the architecture, which a stored config (litbert.json) may still
# hold: each with the values it could take that this version still computes. They are dropped on reading, with a
# warning for any other value. unpad_below and flex_attention are now chosen per run (`encoders.kernels.Kernels`);
# attention_groups (attention in length groups) is gone, with the outputs it gave.
RETIRED_FIELDS: dict[str, tuple[Any, ...]] = {"unpad_below": (0.8,), "flex_attention": (None, False),
                                              "attention_groups": (None, 1, 2)}


@dataclass
class EncoderConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072  # feed-forward width; for GLU activations, the width of each of the two branches
    # Rows of the `learned` table. The other schemes encode any length and read it at most as the rows to precompute
    # (sinusoidal); they only store it, and exports write it as transformers' max_position_embeddings. Nothing sets
    # it from the data's max_length.
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # 0 = no token-type embedding (RoBERTa-style single segment, DistilBERT)
    pad_token_id: int = 0
    position: str = "learned"  # a key of encoders.positions.POSITIONS
    position_offset: int = 0  # first row of the learned table used by token 0; RoBERTa uses pad_token_id + 1
    rope_base: float = 10000.0
    local_rope_base: float | None = None  # RoPE base of the local layers (ModernBERT: 10,000); None: rope_base
    # The sinusoidal table is added times this factor. 1 adds it as Vaswani et al.'s table (and DistilBERT) does; its
    # entries (RMS 0.71) then outweigh tokens embedded at initializer_range 0.02 by 35x at first. 0.028 (= 0.02 x
    # sqrt 2) gives both the same scale.
    sinusoidal_scale: float = 1.0
    # The token embeddings are multiplied by this factor. 1 everywhere in BERT; Vaswani et al.'s remedy for the
    # sinusoidal table's size is sqrt(hidden_size) (also Gemma's).
    embedding_scale: float = 1.0
    t5_num_buckets: int = 32
    t5_max_distance: int = 128
    # Sliding-window attention (ModernBERT, Warner et al., 2024): with local_window > 0, layer i attends globally
    # when i % global_every == 0 and otherwise only to the tokens within local_window positions of it (ModernBERT:
    # 64, i.e. its local_attention of 128, and every third layer global). 0: every layer global.
    local_window: int = 0
    global_every: int = 1
    norm: str = "layernorm"  # a key of encoders.layers.NORMS
    norm_placement: NormPlacement = "post"  # "post" as in BERT; "pre" adds a final norm after the last block
    # Pre-norm only: False leaves the first block's attention input as the embeddings' norm left it, instead of
    # normalising it a second time (ModernBERT, Warner et al., 2024).
    first_attention_norm: bool = True
    norm_eps: float = 1e-12
    activation: str = "gelu"  # a key of encoders.layers.ACTIVATIONS
    bias: bool = True  # biases on every linear layer and norm
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    # Where the blocks drop out; training alone differs, not what the weights compute. Each block's attention output
    # is dropped out before its residual, as BERT's is; DistilBERT's blocks drop out the feed-forward only.
    attention_output_dropout: bool = True
    # That dropout's rate: hidden_dropout (BERT's) or attention_dropout (ModernBERT's attention `out_drop`).
    attention_output_rate: DropoutRate = "hidden"
    # The feed-forward is dropped out at hidden_dropout on its output, before the residual (BERT's), or on its inner
    # activations, before the down projection (ModernBERT's mlp_dropout).
    feed_forward_dropout: FeedForwardDropout = "output"
    initializer_range: float = 0.02
    # New weights start from normals cut off at this many standard deviations (ModernBERT's
    # initializer_cutoff_factor, 2 in its checkpoints); None: from uncut normals (BERT's).
    initializer_cutoff: float | None = None
    name: str = field(default="custom", compare=False)  # the preset it came from; informational only

    def __post_init__(self) -> None:
        check_choice("EncoderConfig.position", self.position, POSITIONS)
        check_choice("EncoderConfig.norm", self.norm, NORMS)
        check_choice("EncoderConfig.activation", self.activation, ACTIVATIONS)
        check_choice("EncoderConfig.norm_placement", self.norm_placement, NormPlacement)
        check_choice("EncoderConfig.attention_output_rate", self.attention_output_rate, DropoutRate)
        check_choice("EncoderConfig.feed_forward_dropout", self.feed_forward_dropout, FeedForwardDropout)
        for field_name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                           "max_position_embeddings"):
            if getattr(self, field_name) <= 0:
                raise ValueError(f"EncoderConfig.{field_name}={getattr(self, field_name)} must be positive.")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"EncoderConfig.hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}; "
                f"change one so that hidden_size / num_heads is a whole head dimension."
            )
        POSITIONS[self.position].check_config(self)
        if not self.first_attention_norm and self.norm_placement != "pre":
            raise ValueError(
                "EncoderConfig.first_attention_norm=False skips the norm before the first block's attention, which "
                "only pre-norm blocks have (post-norm normalises after the residual); set norm_placement='pre' or "
                "first_attention_norm=True."
            )
        if self.local_window < 0 or self.global_every < 1:
            raise ValueError(f"EncoderConfig.local_window={self.local_window} must be >= 0 and global_every="
                             f"{self.global_every} >= 1.")
        if (self.local_window > 0) != (self.global_every > 1):
            raise ValueError(
                f"EncoderConfig.local_window={self.local_window} and global_every={self.global_every}: sliding-window "
                f"layers need both, a window (> 0) and global layers only every n > 1 layers; with one alone every "
                f"layer attends globally and the other changes nothing."
            )
        if self.local_rope_base is not None and self.local_rope_base <= 1:
            raise ValueError(f"EncoderConfig.local_rope_base={self.local_rope_base} must be > 1.")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"EncoderConfig.pad_token_id={self.pad_token_id} must lie in [0, vocab_size).")
        if self.type_vocab_size < 0 or self.position_offset < 0:
            raise ValueError("EncoderConfig.type_vocab_size and position_offset must be >= 0.")
        if self.position_offset >= self.max_position_embeddings:
            raise ValueError(
                f"EncoderConfig.position_offset={self.position_offset} leaves no rows of the "
                f"max_position_embeddings={self.max_position_embeddings} table; lower the offset."
            )
        for field_name in ("hidden_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, field_name) < 1.0:
                raise ValueError(f"EncoderConfig.{field_name}={getattr(self, field_name)} must lie in [0, 1).")
        for field_name, least in (("norm_eps", 0), ("sinusoidal_scale", 0), ("embedding_scale", 0), ("rope_base", 1)):
            if getattr(self, field_name) <= least:
                raise ValueError(f"EncoderConfig.{field_name}={getattr(self, field_name)} must be > {least}.")
        if self.initializer_cutoff is not None and self.initializer_cutoff <= 0:
            raise ValueError(f"EncoderConfig.initializer_cutoff={self.initializer_cutoff} must be > 0 (standard "
                             f"deviations), or None for normals not cut off.")
        if self.t5_num_buckets < 4 or self.t5_num_buckets % 2 or self.t5_max_distance <= self.t5_num_buckets // 4:
            raise ValueError(
                f"EncoderConfig.t5_num_buckets={self.t5_num_buckets} must be even and >= 4, and t5_max_distance="
                f"{self.t5_max_distance} larger than a quarter of it (the exact-distance buckets)."
            )

    def is_global(self, layer: int) -> bool:
        """Whether layer `layer` attends to the whole sequence (else within `local_window`)."""
        return self.local_window == 0 or layer % self.global_every == 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def max_sequence_length(self) -> int | None:
        """The longest sequence the position scheme can encode; None when it has no limit."""
        return POSITIONS[self.position].length_limit(self)

    @classmethod
    def from_name(cls, name: str, **overrides: Any) -> EncoderConfig:
        """A preset by name, with any field overridden: `from_name("roberta-base", position="alibi")`."""
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}; choose one of {sorted(PRESETS)}.")
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"Unknown EncoderConfig field(s) {sorted(unknown)} in overrides for preset {name!r}.")
        config = cls(**{"name": name, **PRESETS[name], **overrides})
        check_scheme_settings(config, overrides)
        return config

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> EncoderConfig:
        ignored = [f"{k}={v!r}" for k, v in values.items() if k in RETIRED_FIELDS and v not in RETIRED_FIELDS[k]]
        if ignored:
            log.warning("The stored encoder config sets %s, which this version chooses per run and ignores here; "
                        "give it as Encoder(config, kernels=Kernels(...)) or --model.kernels.*", ", ".join(ignored))
        values = {k: v for k, v in values.items() if k not in RETIRED_FIELDS}
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"Unknown EncoderConfig field(s) {sorted(unknown)}; was this saved by a newer litbert?")
        return cls(**values)


def _bert(num_layers: int, hidden_size: int) -> dict[str, Any]:
    # Compact BERTs (Turc et al., 2019): heads = hidden / 64, feed-forward = 4 x hidden.
    return dict(num_layers=num_layers, hidden_size=hidden_size, num_heads=hidden_size // 64,
                intermediate_size=4 * hidden_size)


PRESETS: dict[str, dict[str, Any]] = {
    "bert-tiny": _bert(2, 128),
    "bert-mini": _bert(4, 256),
    "bert-small": _bert(4, 512),
    "bert-medium": _bert(8, 512),
    "bert-base": _bert(12, 768),
    "bert-large": _bert(24, 1024),
    # RoBERTa (Liu et al., 2019): byte-level BPE vocabulary, no segments, positions offset past the padding row.
    "roberta-base": dict(_bert(12, 768), vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                         pad_token_id=1, position_offset=2, norm_eps=1e-5),
    # DistilBERT (Sanh et al., 2019): half of bert-base's depth, no token types, no dropout on the attention output.
    "distilbert-base": dict(_bert(6, 768), type_vocab_size=0, attention_output_dropout=False),
    # The axes composed: pre-norm, RMSNorm, rotary positions, GeGLU, no biases.
    "modern": dict(_bert(12, 768), intermediate_size=2048, type_vocab_size=0, position="rope", norm="rmsnorm",
                   norm_placement="pre", norm_eps=1e-5, activation="geglu", bias=False, max_position_embeddings=1024),
    # ModernBERT-base (Warner et al., 2024): every third layer global, the others within 64 tokens; exports to
    # transformers' ModernBert classes.
    "modernbert-base": dict(_bert(22, 768), intermediate_size=1152, vocab_size=50368, type_vocab_size=0,
                            pad_token_id=50283, position="rope", rope_base=160_000.0, local_rope_base=10_000.0,
                            local_window=64, global_every=3, norm_placement="pre", norm_eps=1e-5,
                            first_attention_norm=False, activation="geglu", bias=False, hidden_dropout=0.0,
                            attention_dropout=0.0, attention_output_rate="attention", feed_forward_dropout="inner",
                            max_position_embeddings=8192),
}
