"""A bidirectional Transformer encoder (Devlin et al., 2019) whose position scheme, norm, norm placement and
feed-forward activation are chosen by `EncoderConfig`.

The encoder knows nothing of losses, optimizers, data or distribution: it maps token ids to hidden states.
Heads live in `encoders.heads`; checkpoint conversion in `encoders.checkpoints`.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from encoders.checkpoints import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from encoders.config import EncoderConfig
from encoders.kernels import (
    Dropout,
    Kernels,
    PackedAttention,
    ScoreMod,
    Unpadded,
    cu_seqlens,
    sequence_starts,
    varlen_applies,
)
from encoders.layers import AttentionInputs, Block, build_norm, normal_init_
from encoders.positions import build_position


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the blocks' matmuls run in: autocast's when it is on for `x`'s device, else `x`'s own."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


class EncoderOutput(NamedTuple):
    last_hidden_state: torch.Tensor  # (B, T, C)
    hidden_states: tuple[torch.Tensor, ...] | None  # embeddings output, then each block's output
    attentions: tuple[torch.Tensor, ...] | None  # each (B, H, T, T)


class Embeddings(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.token_type = nn.Embedding(config.type_vocab_size, config.hidden_size) if config.type_vocab_size else None
        self.norm = build_norm(config)
        self.dropout = Dropout(config.hidden_dropout)
        self.scale = config.embedding_scale

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        x = self.word(input_ids)
        if self.scale != 1.0:
            x = x * self.scale
        if self.token_type is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.token_type(token_type_ids)
        elif token_type_ids is not None:
            raise ValueError(
                "token_type_ids were given, but this encoder has no token-type embedding (type_vocab_size=0); "
                "drop them from the batch, or use a config with type_vocab_size > 0."
            )
        return x


def real_documents(document_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """`document_ids` with padding (mask 0) as document -1, the documents' own ids being >= 0."""
    if attention_mask is None:
        return document_ids
    return torch.where(attention_mask.bool(), document_ids, -1)


def same_document(document_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                  queries: int | None = None) -> torch.Tensor:
    """(B, T, T) True where query and key are in the same document (the first `queries` query rows only, when
    given). Padding is a document of its own, so real tokens never attend to it and every padding query still has
    keys (no all-masked row, no NaN)."""
    documents = real_documents(document_ids, attention_mask)
    return documents[:, :queries, None] == documents[:, None, :]


class Encoder(nn.Module):
    def __init__(self, config: EncoderConfig, kernels: Kernels | None = None) -> None:
        """An encoder of architecture `config`, computed with the run's `kernels` (by default `Kernels()`)."""
        super().__init__()
        self.config = config
        self.kernels = kernels if kernels is not None else Kernels()
        self.embeddings = Embeddings(config)
        self.position = build_position(config)
        # The local layers' RoPE, where its base differs (ModernBERT); it holds no weights. (A preset's local base is
        # unused by the other schemes and without local layers, as its rope_base is.)
        self.local_position = None
        local_base = config.local_rope_base
        if config.position == "rope" and config.local_window and local_base not in (None, config.rope_base):
            self.local_position = build_position(dataclasses.replace(config, rope_base=config.local_rope_base))
        self.blocks = nn.ModuleList(Block(config, first=i == 0) for i in range(config.num_layers))
        # Pre-norm leaves the residual stream unnormalised; one final norm closes it.
        self.final_norm = build_norm(config) if config.norm_placement == "pre" else nn.Identity()
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        std, cutoff = self.config.initializer_range, self.config.initializer_cutoff
        if isinstance(module, nn.Linear):
            normal_init_(module.weight, std, cutoff)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            normal_init_(module.weight, std, cutoff)
            if module.padding_idx is not None:
                nn.init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
            if module.weight is not None:
                nn.init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def attention_mask(
        self, attention_mask: torch.Tensor | None, seq_len: int, dtype: torch.dtype | None = None,
        document_ids: torch.Tensor | None = None, queries: int | None = None,
    ) -> torch.Tensor | None:
        """The mask `Attention` receives: None (attend everywhere), boolean (B, 1, 1, T) padding or, with
        `document_ids`, (B, 1, T, T) same-document pairs, or, when the position scheme adds a bias, a float
        (B or 1, H, T, T) bias in `dtype` (default: the bias's own) with the masked keys at that dtype's minimum.
        With `queries`, the rows of the first `queries` queries only (T of the T x T become `queries`)."""
        bias = self.position.bias(seq_len if queries is None else queries, seq_len)
        if bias is not None and dtype is not None:
            bias = bias.to(dtype)
        if document_ids is not None:
            keep = same_document(document_ids, attention_mask, queries)[:, None]  # (B, 1, T, T)
        elif attention_mask is None:
            return None if bias is None else bias[None]
        else:
            keep = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
        if bias is None:
            return keep
        return bias[None].masked_fill(~keep, torch.finfo(bias.dtype).min)  # (B, H, T, T)

    def windowed(self, mask: torch.Tensor | ScoreMod | None, seq_len: int, device: torch.device,
                 queries: int | None = None):
        """`mask` (see `attention_mask` and `score_mod`, of the first `queries` queries when given) restricted to the
        keys within `local_window` of each query, for the local layers. In a boolean mask every query keeps its own
        position, so no row of a padded batch is all masked (a padding query far from every real token would
        otherwise give NaN); a float mask holds the dtype's minimum, not -inf, and FlexAttention gives fully masked
        rows zeros."""
        window = self.config.local_window
        index = torch.arange(seq_len, device=device)
        distance = (index[:queries, None] - index[None, :]).abs()
        near = distance <= window  # (T, T)
        if mask is None:
            return near[None, None]
        if callable(mask):
            def within_window(score, batch, head, query, key):
                return torch.where((query - key).abs() <= window, mask(score, batch, head, query, key), -float("inf"))

            return within_window
        if mask.dtype == torch.bool:
            return (mask & near) | (distance == 0)
        return mask.masked_fill(~near, torch.finfo(mask.dtype).min)  # padding keys are already at the minimum

    def score_mod(self, attention_mask: torch.Tensor | None, seq_len: int, return_attentions: bool,
                  document_ids: torch.Tensor | None = None):
        """The FlexAttention score_mod (position bias and key padding) when this forward uses FlexAttention (see
        `Kernels.flex_attention`), else None."""
        if not self.kernels.flex_attention or return_attentions:
            return None
        # Asked only now: T5 builds its bias table here, work the dense-mask path would then do again.
        position_mod = self.position.score_mod(seq_len, seq_len)
        if position_mod is None:
            return None
        if self.training and self.config.attention_dropout > 0:
            raise ValueError(
                f"Kernels.flex_attention=True, but FlexAttention has no dropout and this encoder trains with "
                f"attention_dropout={self.config.attention_dropout}; set attention_dropout=0, or flex_attention=False "
                f"(SDPA with a dense bias, the default)."
            )
        # Said here, by the setting's name, rather than by torch deep inside the first training step.
        if (self.embeddings.word.weight.device.type == "cpu" and torch.is_grad_enabled()
                and any(p.requires_grad for p in self.parameters())):
            raise ValueError(
                "Kernels.flex_attention=True, but torch's FlexAttention has no backward pass on CPU and this forward "
                "records gradients; set flex_attention=False on CPU (SDPA with a dense bias, the default), or compute "
                "under torch.no_grad() or on a GPU."
            )
        if document_ids is not None:
            documents = real_documents(document_ids, attention_mask)

            def biased_within_documents(score, batch, head, query, key):
                same = documents[batch, query] == documents[batch, key]
                return torch.where(same, position_mod(score, batch, head, query, key), -float("inf"))

            return biased_within_documents
        if attention_mask is None:
            return position_mod
        keep = attention_mask.bool()

        def biased_and_padded(score, batch, head, query, key):
            return torch.where(keep[batch, key], position_mod(score, batch, head, query, key), -float("inf"))

        return biased_and_padded

    def unpadded(self, attention_mask: torch.Tensor | None, unpad_index: torch.Tensor | None = None,
                 always: bool = False) -> Unpadded | None:
        """The real tokens' layout when enough of the batch is padding to make skipping it pay
        (`Kernels.unpad_below`), or `always` where there is a mask. `unpad_index`, the real tokens' flat positions as
        the collator computed them on the host, spares the device a `nonzero` and the host the wait for it; without
        it they are read off the mask. Not under torch.compile: the token count would change the graph's shapes on
        every batch."""
        if attention_mask is None or torch.compiler.is_compiling():
            return None
        if unpad_index is None:  # read off the mask on the device: the one host sync of this path
            unpad_index = attention_mask.flatten().nonzero().squeeze(1)
        if not always and unpad_index.numel() >= self.kernels.unpad_below * attention_mask.numel():  # a shape
            return None
        return Unpadded(unpad_index, *attention_mask.shape)

    def packed_kernel(self, dtype: torch.dtype, device: torch.device, biased: bool, outputs: bool) -> str | None:
        """The `PackedAttention` kernel, as `Kernels.varlen` chooses it, of a forward computing in `dtype` on `device`
        whose position scheme adds a bias (`biased`) or not and that returns hidden states or attentions (`outputs`)
        or not; None for the padded path."""
        choice = self.kernels.varlen
        if choice is None:  # where torch's varlen_attn applies, and only there
            dropout = self.training and self.config.attention_dropout > 0
            if outputs or dropout or biased or torch.compiler.is_compiling():
                return None
            return "varlen" if varlen_applies(device, dtype, self.config.head_dim) else None
        if not choice:
            return None
        if outputs:
            raise ValueError("Kernels.varlen=True packs the batch's real tokens and returns neither per-layer hidden "
                             "states nor attention probabilities; to get them set --model.kernels.varlen null "
                             "(packs only where nothing is asked of it) or false.")
        if self.training and self.config.attention_dropout > 0:
            raise ValueError(f"Kernels.varlen=True, but neither varlen_attn nor FlexAttention has dropout and this "
                             f"encoder trains with attention_dropout={self.config.attention_dropout}; set "
                             f"attention_dropout=0, or varlen null (packs only where it can) or false.")
        if torch.compiler.is_compiling():
            raise ValueError("Kernels.varlen=True packs each batch's own number of tokens, which torch.compile would "
                             "recompile for; set --model.kernels.varlen null or false with a compiled encoder.")
        if not biased and varlen_applies(device, dtype, self.config.head_dim):
            return "varlen"
        return "flex" if device.type == "cuda" else "dense"

    def packed(self, x: torch.Tensor, attention_mask: torch.Tensor | None, document_ids: torch.Tensor | None,
               unpad_index: torch.Tensor | None, given_cu_seqlens: torch.Tensor | None,
               outputs: bool) -> tuple[Unpadded, PackedAttention] | None:
        """The layout of the real tokens and the attention over them packed (`Kernels.varlen`), for a batch the
        blocks run unpadded and for packed documents (padding or not); else None. `x` (B, T, C) gives the shapes
        and the compute dtype; `outputs`: hidden states or attentions are to be returned. `given_cu_seqlens`
        (`kernels.cu_seqlens`), built by the collator on the host, spare varlen_attn a `nonzero` on the device."""
        if self.kernels.varlen is False or (attention_mask is None and document_ids is None):
            return None  # nothing to pack: every row is one sequence without padding
        if self.kernels.varlen is None and x.device.type != "cuda":
            return None  # varlen_attn is CUDA's; asked now, T5 would build its bias table for nothing
        batch, seq_len = x.shape[:2]
        score_mod = self.position.score_mod(seq_len, seq_len)
        kernel = self.packed_kernel(compute_dtype(x), x.device, score_mod is not None, outputs)
        if kernel is None:
            return None
        unpadded = self.unpadded(attention_mask, unpad_index, always=document_ids is not None)
        if unpadded is None and document_ids is not None:  # documents without padding: every token
            unpadded = Unpadded(torch.arange(batch * seq_len, device=x.device), batch, seq_len)
        if unpadded is None:
            return None
        starts = sequence_starts(unpadded.index, seq_len, document_ids)
        if kernel == "varlen" and given_cu_seqlens is None:
            given_cu_seqlens = cu_seqlens(starts)  # a host sync: the collator gives them
        return unpadded, PackedAttention(
            kernel, self.config.num_heads, sequences=starts.cumsum(0), positions=unpadded.index % seq_len,
            cu_seqlens=given_cu_seqlens, max_seqlen=seq_len, score_mod=score_mod)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        return_hidden_states: bool = False,
        return_attentions: bool = False,
        document_ids: torch.Tensor | None = None,
        first_token_only: bool = False,
        unpad_index: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
    ) -> torch.Tensor | EncoderOutput:
        """Hidden states (B, T, C) for `input_ids` (B, T); `attention_mask` is 1 for real tokens, 0 for padding.
        Hidden states at padding are not meaningful: zeros when the blocks ran unpadded, else whatever the
        padding tokens computed. `document_ids` (B, T), when given, keeps attention within each document of a
        packed row: a token attends to the tokens with its id only (each document of a row is encoded as if alone,
        up to the positions, which still count from the row's start). Each document's tokens are one run of its
        row, as packing gives them: the packed kernels (`Kernels.varlen`) take a document to be such a run.

        With `return_hidden_states` or `return_attentions`, an `EncoderOutput` carrying them instead. `unpad_index`:
        see `unpadded`; `cu_seqlens`: see `packed`.

        With `first_token_only`, the last layer computes each sequence's first token only ([CLS], what BERT's pooler
        reads), attending over all tokens as before: (B, 1, C), equal to `[:, :1]` of the full result. The other
        tokens' last-layer work is skipped (its query side, attention output and feed-forward: 1/num_layers of
        the encoder's FLOPs, less their key and value projections), forward and backward.
        """
        outputs = return_hidden_states or return_attentions
        if first_token_only and outputs:
            raise ValueError("first_token_only skips the last layer's other tokens, so it cannot return every "
                             "token's hidden states or attentions; ask for one or the other.")
        seq_len = input_ids.shape[1]
        positions = torch.arange(seq_len, device=input_ids.device)
        x = self.position.embed(self.embeddings(input_ids, token_type_ids), positions)
        x = self.embeddings.dropout(self.embeddings.norm(x))
        layout = self.packed(x, attention_mask, document_ids, unpad_index, cu_seqlens, outputs)
        unpadded, packed = layout if layout is not None else (None, None)
        # A float bias is cast to the blocks' compute dtype once here; left in float32, every layer would cast it
        # again (autocast casts each call's float arguments to bfloat16).
        queries = None
        if packed is not None:  # the packed kernels need no mask; a first-token-only layer reads its first row
            queries = 1
            mask = self.attention_mask(attention_mask, seq_len, compute_dtype(x), document_ids, queries)
        else:
            mask = self.score_mod(attention_mask, seq_len, return_attentions, document_ids)
            if mask is None:
                mask = self.attention_mask(attention_mask, seq_len, compute_dtype(x), document_ids)
            if not outputs:
                unpadded = self.unpadded(attention_mask, unpad_index)
        if unpadded is not None:
            x = unpadded.unpad(x)  # (N, C)
        inputs = AttentionInputs(self.position, positions, mask, unpadded, return_attentions, packed)
        local = inputs
        if self.config.local_window:
            local = AttentionInputs(self.local_position or self.position, positions,
                                    self.windowed(mask, seq_len, input_ids.device, queries), unpadded,
                                    return_attentions, packed and packed.local(self.config.local_window))
        hidden_states, attentions = [x], []
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x, probs = block(x, inputs if self.config.is_global(i) else local, first_token_only and i == last)
            hidden_states.append(x)
            attentions.append(probs)
        x = self.final_norm(x)
        if unpadded is not None:  # zeros at padding, as everywhere on the unpadded path
            return unpadded.first_real(x) if first_token_only else unpadded.pad(x)
        if not outputs:
            return x
        hidden_states[-1] = x
        return EncoderOutput(
            last_hidden_state=x,
            hidden_states=tuple(hidden_states) if return_hidden_states else None,
            attentions=tuple(attentions) if return_attentions else None,
        )

    def flops_per_token(self, seq_len: int, training: bool = False) -> int:
        """Matmul FLOPs per token of one forward pass at sequence length `seq_len` (x3 with `training`: the
        backward pass costs twice the forward). Counts the projections and attention's two products over the keys
        a token attends to (all seq_len, or at most 2 * local_window + 1 in a sliding-window layer); norms,
        activations and softmax are negligible and left out, as in the usual MFU accounting."""
        return _token_flops(self._flop_terms(), seq_len, training)

    def _flop_terms(self) -> list[tuple[int, int, int, int | None]]:
        """What each layer's forward FLOPs per token depend on (see `flops_per_token`): (its key and value
        projections, its query and output projections and feed-forward, attention's two products per key, the most
        keys a token attends to: None for all)."""
        config = self.config
        c, inner = config.hidden_size, config.intermediate_size
        terms = []
        for layer, block in enumerate(self.blocks):
            up = 2 * inner if block.feed_forward.gated else inner
            window = None if config.is_global(layer) else 2 * config.local_window + 1
            terms.append((2 * 2 * c * c, 2 * (c * c + c * c + c * up + inner * c), 2 * 2 * c, window))
        return terms

    def flops(self, lengths: Sequence[int], training: bool = False, first_token_only: bool = False) -> int:
        """Model FLOPs of encoding sequences of these real lengths: `flops_per_token` at each length, per token.
        Padding does no useful work and is not counted. With `first_token_only` (see `forward`), the last layer's
        other tokens count their key and value projections only."""
        # The layers' terms are read once, not at each length: reading them off the blocks took 0.4 ms a batch of
        # MiniLM-L6, which `tasks.run.throughput` counts for each batch of a logging window.
        terms = self._flop_terms()
        counts = collections.Counter(int(length) for length in lengths)  # each length's count, computed once
        total = sum(_token_flops(terms, length, training) * length * count for length, count in counts.items())
        if first_token_only and terms:
            for length, count in counts.items():
                skipped = _layer_flops(terms[-1], length)[1]
                total -= (3 if training else 1) * max(length - 1, 0) * skipped * count
        return total

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        params = {id(p): p for p in self.parameters()}
        if exclude_embeddings:
            for p in self.embeddings.parameters():
                params.pop(id(p), None)
        return sum(p.numel() for p in params.values())

    @classmethod
    def from_pretrained(cls, directory: str | Path | Checkpoint, kernels: Kernels | None = None) -> Encoder:
        """Load a litbert checkpoint or a transformers-format BERT, RoBERTa or DistilBERT checkpoint directory
        (or a `Checkpoint` already read from one), to compute with `kernels`. It is in training mode, dropout on, as
        any module starts (transformers' `from_pretrained` returns its model in eval mode): `.eval()` to infer.
        Lightning keeps a submodule's mode, so a task's encoder left in eval mode would fine-tune without dropout."""
        checkpoint = load_checkpoint(directory)
        encoder = cls(checkpoint.config, kernels)
        own = encoder.state_dict()
        misfits = [f"{name} {tuple(tensor.shape)} where its config gives {tuple(own[name].shape)}"
                   for name, tensor in checkpoint.encoder_state.items()
                   if name in own and tensor.shape != own[name].shape]
        if misfits:
            raise CheckpointError(f"{checkpoint.source}: the weights do not have the shapes its config describes "
                                  f"(litbert's names): {'; '.join(misfits[:4])}. The config (hidden, intermediate or "
                                  f"vocabulary size, layers) is not the one these weights were saved with.")
        encoder.load_state_dict(checkpoint.encoder_state, strict=True)
        return encoder

    def save_pretrained(
        self, directory: str | Path, head: nn.Module | None = None, format: str = "auto",
        label_names: Sequence[str] | None = None, problem_type: str | None = None,
    ) -> Path:
        """Write this encoder (and optionally one head) to `directory`.

        `format="transformers"` writes a checkpoint that `transformers.AutoModel` (or the matching
        `*ForMaskedLM` / `*ForSequenceClassification` / `*ForTokenClassification` for a head) loads, and raises if
        the configuration has no transformers equivalent; `"litbert"` writes litbert's own safetensors + JSON;
        `"auto"` picks transformers whenever it can express the configuration. `label_names` (a classifier head's
        labels in id order) are stored as transformers' `id2label`, `problem_type` (`multi_label_classification`)
        as its `problem_type`.
        """
        return save_checkpoint(self, Path(directory), head=head, format=format, label_names=label_names,
                               problem_type=problem_type)


def _layer_flops(terms: tuple[int, int, int, int | None], seq_len: int) -> tuple[int, int]:
    """One token's forward matmul FLOPs in a layer of these `Encoder._flop_terms` at sequence length `seq_len`: (its
    key and value projections, the rest: query and output projections, feed-forward, and attention's two products
    over its keys)."""
    key_value, rest, per_key, window = terms
    keys = seq_len if window is None else min(seq_len, window)
    return key_value, rest + per_key * keys


def _token_flops(terms: list[tuple[int, int, int, int | None]], seq_len: int, training: bool) -> int:
    """`Encoder.flops_per_token` from the layers' `Encoder._flop_terms`."""
    forward = sum(sum(_layer_flops(layer, seq_len)) for layer in terms)
    return 3 * forward if training else forward
