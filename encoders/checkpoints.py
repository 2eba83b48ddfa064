"""Reading and writing checkpoints: transformers-format BERT, RoBERTa, DistilBERT, ELECTRA (its discriminator
encoder) and ModernBERT, and litbert's own format.

A transformers checkpoint is a directory with `config.json` and weights (`model.safetensors`, a sharded
`model.safetensors.index.json`, or `pytorch_model.bin`, read with `torch.load(weights_only=True)`). Each family's
parameter names are described by one `Layout` table; separate query/key/value projections are fused into litbert's
single QKV projection on load and split again on export (a family that fuses them already is copied as it is).

litbert's own format (any configuration, heads included) is `litbert.json` + `model.safetensors` with litbert's
parameter names under `encoder.` and `head.`.
"""

from __future__ import annotations

import json
import logging
import math
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from encoders.choices import check_choice
from encoders.config import EncoderConfig, global_every
from encoders.hub import local_path
from encoders.positions import sinusoidal_table

log = logging.getLogger(__name__)

LITBERT_CONFIG = "litbert.json"
WEIGHTS = "model.safetensors"


class CheckpointError(ValueError):
    """A checkpoint that cannot be read: missing, truncated, corrupt, or holding objects that are not data. The
    message names the file and says what to do."""


# Each head class's `kind`, and the transformers architecture of a checkpoint holding that head
# (`<family>ForMaskedLM`, ...): one table for loading, saving and refusing a head.
HEAD_ARCHITECTURES = {"mlm": "ForMaskedLM", "sequence_classification": "ForSequenceClassification",
                      "token_classification": "ForTokenClassification"}
HEAD_KINDS = tuple(HEAD_ARCHITECTURES)


@dataclass(frozen=True)
class Layout:
    """One transformers family as data: its config.json keys, its conventions, and where it keeps each litbert
    parameter (names without `.weight` / `.bias`). Loading and exporting read this table and nothing else."""

    model_type: str
    class_prefix: str  # transformers' class names: `{class_prefix}Model`, `{class_prefix}ForMaskedLM`, ...
    prefix: str  # the base model's attribute in the task models: `bert.`, `roberta.`, `distilbert.`
    config_keys: dict[str, str]  # EncoderConfig field -> the family's config.json key
    defaults: dict[str, Any]  # EncoderConfig field -> its value when config.json lacks the key
    embeddings: dict[str, str]  # the parameters outside the layers: embeddings, position table, a final norm
    layer: str  # the per-layer prefix, with `{i}` for the index
    qkv: tuple[str, ...]  # the query, key and value projections, or one fused projection
    block: dict[str, str]
    heads: dict[str, dict[str, str]]  # head kind -> its parameters, relative to the task model's root
    # Its classifier heads' shapes, as the heads' options by kind (a head exports only if it has them): BERT's pooler
    # and no transform before the token classifier by default. Then the config.json keys of the options it stores
    # instead of fixing them (ModernBERT's pooling and dense bias).
    head_options: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(_BERT_HEADS))
    head_option_keys: dict[str, str] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)  # EncoderConfig values the family has and does not store
    activation_key: str = "hidden_act"
    # the family's activation names -> litbert's; an export writes the first name of each
    activations: dict[str, str] = field(default_factory=lambda: dict(_BERT_ACTIVATIONS))
    positions: tuple[str, ...] = ("learned",)  # position schemes it stores; its checkpoints have the first
    sinusoidal_key: str | None = None  # the config.json flag that selects sinusoidal positions
    offset_from_pad: bool = False  # positions start at pad_token_id + 1 (RoBERTa)
    token_types: bool = True  # has a token-type table (type_vocab_size >= 1)
    required: dict[str, Any] = field(default_factory=dict)  # config.json values it must have to load (and writes)
    same_as: dict[str, str] = field(default_factory=dict)  # config.json key -> the EncoderConfig field it must equal
    # The config.json flag that gives the MLM transform's dense layer a bias (litbert's always has one; a family
    # without it loads as a zero bias).
    head_bias_key: str | None = None
    # The config.json keys of the dropout before each classifier, the first one set being the rate transformers'
    # `*ForSequenceClassification` / `*ForTokenClassification` apply (BERT's: classifier_dropout, else
    # hidden_dropout_prob).
    classifier_dropout: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(_BERT_CLASSIFIER_DROPOUT))
    # The sequence classifier's dropout also applies before its pooler (RobertaClassificationHead's).
    dropout_before_pooler: bool = False
    # Where its blocks drop out, where not as BERT's do: EncoderConfig's `attention_output_dropout`,
    # `attention_output_rate` and `feed_forward_dropout`. Training settings, loaded with the family but not checked on
    # export: the weights compute the same either way.
    dropout_sites: dict[str, Any] = field(default_factory=dict)
    # How transformers starts the family's new heads where not from N(0, initializer_range): the encoder's config
    # (as built: after a user's settings and a selection of layers) -> the standard deviations of a new head's dense
    # layer (`initializer_range`) and classifier (`classifier_std`), `encoders.heads.new_head_stds`.
    head_init: Callable[[EncoderConfig], dict[str, float]] | None = None
    # What config_keys cannot say: config.json -> further EncoderConfig values (raising ValueError for what litbert
    # cannot express), and EncoderConfig -> further config.json entries.
    read_keys: Callable[[dict[str, Any], str], dict[str, Any]] | None = None
    write_keys: Callable[[EncoderConfig], dict[str, Any]] | None = None


_BERT_CLASSIFIER_DROPOUT = dict.fromkeys(("sequence_classification", "token_classification"),
                                        ("classifier_dropout", "hidden_dropout_prob"))
_BERT_HEADS = {"sequence_classification": {"pooling": "cls", "pooler_activation": "tanh", "pooler_bias": True,
                                           "pooler_norm": False},
               "token_classification": {"transform_activation": None, "transform_bias": True, "transform_norm": False}}
# the values a family may store for an option of `head_option_keys`
_STORED_VALUES = {"pooling": ("cls", "mean"), "pooler_bias": (True, False), "transform_bias": (True, False)}
_NORM_OPTIONS = ("pooler_norm", "transform_norm")  # a head norm has the encoder's epsilon in the families

# BERT's activation names; gelu_pytorch_tanh first, as the name an export writes for gelu_tanh
_BERT_ACTIVATIONS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "relu": "relu"}


def _modernbert_keys(hf: dict[str, Any], source: str) -> dict[str, Any]:
    """ModernBERT's attention pattern and RoPE bases, from transformers 5's `layer_types` and nested
    `rope_parameters` or the published checkpoints' flat `global_attn_every_n_layers` and `*_rope_theta`."""
    n = hf["num_hidden_layers"]
    every = hf.get("global_attn_every_n_layers", 3)
    types = hf.get("layer_types") or ["full_attention" if i % every == 0 else "sliding_attention" for i in range(n)]
    every = global_every([kind == "full_attention" for kind in types])
    if every is None or any(kind not in ("full_attention", "sliding_attention") for kind in types):
        raise ValueError(f"{source}: layer_types={types} has no litbert equivalent; litbert's layers attend globally "
                         f"every n layers from layer 0, and within a window otherwise.")
    if hf.get("rope_scaling"):
        raise ValueError(f"{source}: rope_scaling={hf['rope_scaling']!r} has no litbert equivalent.")
    ropes = hf.get("rope_parameters") or {}
    for kind in ("full_attention", "sliding_attention"):
        if ropes.get(kind, {}).get("rope_type", "default") != "default":
            raise ValueError(f"{source}: rope_type={ropes[kind]['rope_type']!r} ({kind}; RoPE scaling) has no litbert "
                             f"equivalent; only 'default' checkpoints load.")
    rope_base = float(ropes.get("full_attention", {}).get("rope_theta", hf.get("global_rope_theta", 160_000.0)))
    cutoff = hf.get("initializer_cutoff_factor", 2.0)  # null (transformers 4): 3, as its _init_weights reads it
    values = {"rope_base": rope_base, "initializer_cutoff": 3.0 if cutoff is None else float(cutoff)}
    if every == 1:
        return values
    local_base = float(ropes.get("sliding_attention", {}).get("rope_theta", hf.get("local_rope_theta", 10_000.0)))
    return values | {"local_rope_base": None if local_base == rope_base else local_base, "global_every": every,
                     "local_window": hf.get("local_attention", 128) // 2}


def _modernbert_entries(config: EncoderConfig) -> dict[str, Any]:
    """Both spellings, for transformers 4 (flat keys) and 5 (nested). The special-token ids are left unset:
    ModernBertConfig's defaults are ModernBERT's own tokenizer's (50281, 50282), outside any other vocabulary (which
    transformers warns of on every load), the model never reads them, and the tokenizer saved beside it has its own.
    An encoder whose new weights start uncut (initializer_cutoff None: litbert's own start, which ModernBERT cannot
    state) leaves the family's cutoff, 2, to whatever a transformers fine-tune of it starts anew."""
    local_base = config.local_rope_base or config.rope_base
    types = ["full_attention" if config.is_global(i) else "sliding_attention" for i in range(config.num_layers)]
    cutoff = {} if config.initializer_cutoff is None else {"initializer_cutoff_factor": config.initializer_cutoff}
    return {**dict.fromkeys(("bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id")), **cutoff,
            "layer_types": types, "global_attn_every_n_layers": config.global_every,
            "local_attention": 2 * config.local_window if config.local_window else 128,
            "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": config.rope_base},
                                "sliding_attention": {"rope_type": "default", "rope_theta": local_base}},
            "global_rope_theta": config.rope_base, "local_rope_theta": local_base}


def _modernbert_head_init(config: EncoderConfig) -> dict[str, float]:
    """ModernBERT's `_init_weights`: a new classifier from a normal of std hidden_size ** -0.5, a new head dense layer
    (a classifier's or the MLM head's) of std initializer_range / sqrt(2 num_layers), of the layers the model has as
    built (both cut off at `initializer_cutoff` stds)."""
    return {"initializer_range": config.initializer_range / math.sqrt(2.0 * config.num_layers),
            "classifier_std": config.hidden_size ** -0.5}


# (BERT's families start new weights from uncut normals, and store no cutoff.)
_BERT_FIXED = {"norm_placement": "post", "norm": "layernorm", "bias": True, "embedding_scale": 1.0, "local_window": 0,
               "initializer_cutoff": None}
_BERT_KEYS = {"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_layers": "num_hidden_layers",
              "num_heads": "num_attention_heads", "intermediate_size": "intermediate_size",
              "max_position_embeddings": "max_position_embeddings", "type_vocab_size": "type_vocab_size",
              "pad_token_id": "pad_token_id", "norm_eps": "layer_norm_eps", "hidden_dropout": "hidden_dropout_prob",
              "attention_dropout": "attention_probs_dropout_prob", "initializer_range": "initializer_range"}
_BERT_DEFAULTS = {"type_vocab_size": 2, "pad_token_id": 0, "norm_eps": 1e-12, "hidden_dropout": 0.1,
                  "attention_dropout": 0.1, "initializer_range": 0.02}
_BERT_BLOCK = {
    "attention.out": "attention.output.dense",
    "attention_norm": "attention.output.LayerNorm",
    "feed_forward.up": "intermediate.dense",
    "feed_forward.down": "output.dense",
    "feed_forward_norm": "output.LayerNorm",
}
_BERT_EMBEDDINGS = {
    "embeddings.word": "embeddings.word_embeddings",
    "embeddings.token_type": "embeddings.token_type_embeddings",
    "embeddings.norm": "embeddings.LayerNorm",
    "position.table": "embeddings.position_embeddings",
}
_BERT = dict(config_keys=_BERT_KEYS, embeddings=_BERT_EMBEDDINGS, layer="encoder.layer.{i}.",
             qkv=("attention.self.query", "attention.self.key", "attention.self.value"), block=_BERT_BLOCK,
             # is_decoder makes transformers' BERT, RoBERTa and ELECTRA attend causally (BertLMHeadModel's configs)
             fixed=_BERT_FIXED, required={"position_embedding_type": "absolute", "is_decoder": False})

LAYOUTS: dict[str, Layout] = {
    "bert": Layout(
        "bert", "Bert", "bert.", defaults=_BERT_DEFAULTS, **_BERT,
        heads={"mlm": {"dense": "cls.predictions.transform.dense", "norm": "cls.predictions.transform.LayerNorm",
                       "bias": "cls.predictions.bias"},
               "sequence_classification": {"pooler.0": "bert.pooler.dense", "classifier": "classifier"},
               "token_classification": {"classifier": "classifier"}},
    ),
    "roberta": Layout(
        "roberta", "Roberta", "roberta.", defaults=_BERT_DEFAULTS | {"pad_token_id": 1}, offset_from_pad=True,
        **_BERT,
        heads={"mlm": {"dense": "lm_head.dense", "norm": "lm_head.layer_norm", "bias": "lm_head.bias"},
               "sequence_classification": {"pooler.0": "classifier.dense", "classifier": "classifier.out_proj"},
               "token_classification": {"classifier": "classifier"}},
        head_options=_BERT_HEADS | {"mlm": {"mlm_activation": "gelu"}},  # RobertaLMHead's GELU, whatever hidden_act
        dropout_before_pooler=True,
    ),
    "distilbert": Layout(
        "distilbert", "DistilBert", "distilbert.",
        config_keys={"vocab_size": "vocab_size", "hidden_size": "dim", "num_layers": "n_layers",
                     "num_heads": "n_heads", "intermediate_size": "hidden_dim",
                     "max_position_embeddings": "max_position_embeddings", "pad_token_id": "pad_token_id",
                     "hidden_dropout": "dropout", "attention_dropout": "attention_dropout",
                     "initializer_range": "initializer_range"},
        defaults={"pad_token_id": 0, "hidden_dropout": 0.1, "attention_dropout": 0.1, "initializer_range": 0.02},
        embeddings={"embeddings.word": "embeddings.word_embeddings", "embeddings.norm": "embeddings.LayerNorm",
                    "position.table": "embeddings.position_embeddings"},
        layer="transformer.layer.{i}.", qkv=("attention.q_lin", "attention.k_lin", "attention.v_lin"),
        block={"attention.out": "attention.out_lin", "attention_norm": "sa_layer_norm",
               "feed_forward.up": "ffn.lin1", "feed_forward.down": "ffn.lin2",
               "feed_forward_norm": "output_layer_norm"},
        heads={"mlm": {"dense": "vocab_transform", "norm": "vocab_layer_norm", "bias": "vocab_projector.bias"},
               "sequence_classification": {"pooler.0": "pre_classifier", "classifier": "classifier"},
               "token_classification": {"classifier": "classifier"}},
        head_options=_BERT_HEADS | {"sequence_classification": {"pooling": "cls", "pooler_activation": "relu",
                                                                "pooler_bias": True, "pooler_norm": False}},
        # DistilBERT hard-codes its LayerNorm epsilon, and adds its sinusoidal table unscaled
        fixed=_BERT_FIXED | {"type_vocab_size": 0, "norm_eps": 1e-12, "sinusoidal_scale": 1.0},
        activation_key="activation", activations={"gelu": "gelu", "relu": "relu"}, positions=("learned", "sinusoidal"),
        sinusoidal_key="sinusoidal_pos_embds", token_types=False,
        classifier_dropout={"sequence_classification": ("seq_classif_dropout",), "token_classification": ("dropout",)},
        # DistilBERT's TransformerBlock drops out its feed-forward output only
        dropout_sites={"attention_output_dropout": False},
    ),
    # ELECTRA's discriminator (Clark et al., 2020) is BERT's encoder under another name; loaded when its embeddings
    # are as wide as its hidden states (no `embeddings_project`). Its classifiers are RoBERTa's with a GELU (its
    # sequence classifier drops out before and after its dense layer); its MLM head is the generator's, not loaded.
    "electra": Layout(
        "electra", "Electra", "electra.", defaults=_BERT_DEFAULTS, **_BERT,
        heads={"sequence_classification": {"pooler.0": "classifier.dense", "classifier": "classifier.out_proj"},
               "token_classification": {"classifier": "classifier"}},
        head_options=_BERT_HEADS | {"sequence_classification": {"pooling": "cls", "pooler_activation": "gelu",
                                                                "pooler_bias": True, "pooler_norm": False}},
        same_as={"embedding_size": "hidden_size"}, dropout_before_pooler=True,
    ),
    # ModernBERT (Warner et al., 2024): pre-norm, LayerNorms and linear layers without biases, one fused QKV
    # projection, RoPE, GeGLU (the first half of `Wi` goes through the GELU, as litbert's), no norm before the first
    # layer's attention, sliding-window layers between global ones (their own RoPE base). Its blocks drop out the
    # attention output at the attention rate and the feed-forward inside, before `Wo` (its mlp_dropout). Its
    # classifiers' head (dense, GELU, norm) is the MLM transform's shape under the same names, so an
    # MLM checkpoint's transform starts a sequence classifier's pooler and a token classifier's transform, as in
    # transformers.
    "modernbert": Layout(
        "modernbert", "ModernBert", "model.",
        config_keys={"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_layers": "num_hidden_layers",
                     "num_heads": "num_attention_heads", "intermediate_size": "intermediate_size",
                     "max_position_embeddings": "max_position_embeddings", "pad_token_id": "pad_token_id",
                     "norm_eps": "norm_eps", "hidden_dropout": "embedding_dropout",
                     "attention_dropout": "attention_dropout", "initializer_range": "initializer_range"},
        defaults={"max_position_embeddings": 8192, "pad_token_id": 50283, "norm_eps": 1e-5, "hidden_dropout": 0.0,
                  "attention_dropout": 0.0, "initializer_range": 0.02},
        embeddings={"embeddings.word": "embeddings.tok_embeddings", "embeddings.norm": "embeddings.norm",
                    "final_norm": "final_norm"},
        layer="layers.{i}.", qkv=("attn.Wqkv",),
        block={"attention.out": "attn.Wo", "attention_norm": "attn_norm", "feed_forward.up": "mlp.Wi",
               "feed_forward.down": "mlp.Wo", "feed_forward_norm": "mlp_norm"},
        heads={"mlm": {"dense": "head.dense", "norm": "head.norm", "bias": "decoder.bias"},
               "sequence_classification": {"pooler.0": "head.dense", "pooler.2": "head.norm",
                                           "classifier": "classifier"},
               "token_classification": {"transform.0": "head.dense", "transform.2": "head.norm",
                                        "classifier": "classifier"}},
        head_options={"sequence_classification": {"pooling": "cls", "pooler_activation": "gelu", "pooler_bias": False,
                                                  "pooler_norm": True},
                      "token_classification": {"transform_activation": "gelu", "transform_bias": False,
                                               "transform_norm": True}},
        head_option_keys={"pooling": "classifier_pooling", "pooler_bias": "classifier_bias",
                          "transform_bias": "classifier_bias"},
        fixed={"norm_placement": "pre", "norm": "layernorm", "bias": False, "embedding_scale": 1.0,
               "type_vocab_size": 0, "first_attention_norm": False},
        activation_key="hidden_activation", activations={"gelu": "geglu"}, positions=("rope",), token_types=False,
        required={"norm_bias": False, "attention_bias": False, "mlp_bias": False, "decoder_bias": True,
                  "classifier_activation": "gelu"},
        same_as={"mlp_dropout": "hidden_dropout"}, head_bias_key="classifier_bias",
        dropout_sites={"attention_output_rate": "attention", "feed_forward_dropout": "inner"},
        classifier_dropout=dict.fromkeys(("sequence_classification", "token_classification"), ("classifier_dropout",)),
        read_keys=_modernbert_keys, write_keys=_modernbert_entries, head_init=_modernbert_head_init,
    ),
}
# The families an export may take, in the order tried: ELECTRA repeats BERT but for its sequence classifier's GELU.
EXPORT_FAMILIES = ("bert", "roberta", "distilbert", "modernbert", "electra")


@dataclass
class Checkpoint:
    config: EncoderConfig
    encoder_state: dict[str, torch.Tensor]
    head_states: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)  # "mlm", "sequence_classification"
    head_options: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the directory it was read from, for messages
    untied_decoder: bool = False  # its MLM decoder is a matrix of its own, not the word embeddings (litbert ties)
    label_names: list[str] | None = None  # its classifier's labels in output order, where the checkpoint names them
    problem_type: str | None = None  # transformers' problem_type of its classifier, where stored (multi-label)
    classifier_dropout: dict[str, float] = field(default_factory=dict)  # head kind -> its family's rate, where stored
    # head kind -> the EncoderConfig field its rate is, where config.json gives no rate of the classifier's own and
    # transformers' classifier takes the encoder's (BERT's hidden_dropout_prob, DistilBERT's token classifier's
    # `dropout`): a run that sets that field over the checkpoint moves the classifier's rate with it, as
    # `from_pretrained(..., hidden_dropout_prob=...)` does.
    classifier_dropout_field: dict[str, str] = field(default_factory=dict)
    dropout_before_pooler: bool = False  # its family's sequence classifier drops out before the pooler too (RoBERTa)
    head_init: Callable[[EncoderConfig], dict[str, float]] | None = None  # its family's Layout.head_init


# ----------------------------------------------------------------------------------------------------- reading


def read_json(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON file, with an error naming the file when it is missing or not valid JSON."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing; the checkpoint folder is incomplete.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON ({error}); the file is truncated or corrupt. Re-download "
                              f"or re-export the checkpoint.") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} holds a JSON {type(value).__name__}, not an object; is it the right file?")
    return value


def _load_safetensors(path: str) -> dict[str, torch.Tensor]:
    try:
        return load_file(path)
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing; the checkpoint folder is incomplete.") from None
    except (SafetensorError, OSError) as error:
        raise CheckpointError(f"{path} is truncated or corrupt (safetensors: {error}). Re-download or re-export the "
                              f"checkpoint.") from None


def _load_bin(path: str) -> dict[str, torch.Tensor]:
    # weights_only=True refuses pickled code: a .bin from an untrusted source cannot execute anything.
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing; the checkpoint folder is incomplete.") from None
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"{path} holds objects other than tensors ({str(error).splitlines()[0]}); litbert loads .bin weights "
            f"with torch.load(weights_only=True), which refuses to run code from a file. Use a checkpoint from a "
            f"source you trust, preferably in safetensors format."
        ) from None
    except (RuntimeError, EOFError, OSError) as error:
        raise CheckpointError(f"{path} is truncated or corrupt ({str(error).splitlines()[0]}). Re-download or "
                              f"re-export the checkpoint.") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} does not hold a state dict of tensors; is it a weights file?")
    return state


SHARD_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _shards(index: Path) -> list[str]:
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index} has no `weight_map`; the shard index is corrupt.")
    return sorted(set(weight_map.values()))


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """All tensors of a transformers-style weights file (or shards) in `directory`, looked for in transformers'
    order: model.safetensors, its shard index, pytorch_model.bin, its shard index."""
    for name, loader in ((WEIGHTS, _load_safetensors), (SHARD_INDEXES[0], _load_safetensors),
                         ("pytorch_model.bin", _load_bin), (SHARD_INDEXES[1], _load_bin)):
        path = directory / name
        if not path.exists():
            continue
        if name not in SHARD_INDEXES:
            return loader(str(path))
        state: dict[str, torch.Tensor] = {}
        for shard in _shards(path):
            state.update(loader(str(directory / shard)))
        return state
    raise CheckpointError(
        f"No weights in {directory}: expected model.safetensors, pytorch_model.bin or a sharded index of either."
    )


def _remove_other_weights(directory: Path) -> None:
    """Weights of an earlier save in `directory` that the new model.safetensors does not replace (a shard index and
    its shards, pytorch_model.bin) go, as transformers' save_pretrained removes them: left there, a loader that
    prefers them would read the earlier model."""
    removed = []
    for index in (directory / name for name in SHARD_INDEXES):
        if index.exists():
            try:
                shards = _shards(index)
            except (CheckpointError, ValueError):
                shards = []
            for shard in shards:
                if Path(shard).name == shard and (directory / shard).is_file():
                    (directory / shard).unlink()
                    removed.append(shard)
            index.unlink()
            removed.append(index.name)
    if (directory / "pytorch_model.bin").exists():
        (directory / "pytorch_model.bin").unlink()
        removed.append("pytorch_model.bin")
    if removed:
        log.warning("Removed the earlier weights in %s that the new save replaces: %s", directory, ", ".join(removed))


def config_from_transformers(hf: dict[str, Any], source: str) -> EncoderConfig:
    """An `EncoderConfig` equal to a transformers `config.json` of a family in `LAYOUTS`."""
    layout = LAYOUTS.get(hf.get("model_type"))  # type: ignore[arg-type]
    if layout is None:
        raise ValueError(f"{source}: model_type={hf.get('model_type')!r} is not supported; litbert loads "
                         f"{sorted(LAYOUTS)}.")
    for key, value in layout.required.items():
        if hf.get(key, value) != value:
            raise ValueError(f"{source}: {key}={hf[key]!r} has no litbert equivalent; only {value!r} checkpoints "
                             f"load.")
    values = {name: hf[key] if name not in layout.defaults else hf.get(key, layout.defaults[name])
              for name, key in layout.config_keys.items()}
    unset = [key for name, key in layout.config_keys.items() if values[name] is None]
    if unset:  # transformers allows a null pad_token_id (no padding row); litbert's embeddings have one
        raise ValueError(f"{source}: {', '.join(f'{key}=null' for key in unset)}; litbert needs a value for each. Set "
                         f"it in config.json (pad_token_id: the tokenizer's padding id, 0 for BERT's vocabularies).")
    for key, name in layout.same_as.items():
        if hf.get(key, values[name]) != values[name]:
            raise ValueError(f"{source}: {key}={hf[key]} differs from {layout.config_keys[name]}={values[name]}; "
                             f"litbert has one {name} for both (its embeddings are as wide as its hidden states, "
                             f"its dropouts one rate).")
    values.update(layout.fixed, position=layout.positions[0], **layout.dropout_sites)
    if layout.read_keys is not None:
        values.update(layout.read_keys(hf, source))
    if layout.offset_from_pad:
        values["position_offset"] = values["pad_token_id"] + 1
    if layout.sinusoidal_key is not None and hf.get(layout.sinusoidal_key):
        values["position"] = "sinusoidal"
    activation = hf.get(layout.activation_key, "gelu")
    if activation not in layout.activations:
        raise ValueError(f"{source}: {layout.activation_key}={activation!r} is not supported; litbert maps "
                         f"{sorted(layout.activations)} for {layout.class_prefix}.")
    return EncoderConfig(**values, activation=layout.activations[activation], name=layout.model_type)


def _block_parameters(config: EncoderConfig, layout: Layout, i: int) -> dict[str, str]:
    """Layer `i`'s entries of `layout.block` that the layer has (the first has no attention norm when
    `first_attention_norm` is off)."""
    if i == 0 and not config.first_attention_norm:
        return {ours: theirs for ours, theirs in layout.block.items() if ours != "attention_norm"}
    return layout.block


# The MLM decoder of each family: absent from a tied checkpoint's file, or equal to the word embeddings.
DECODER_WEIGHTS = {"bert": "cls.predictions.decoder.weight", "roberta": "lm_head.decoder.weight",
                   "distilbert": "vocab_projector.weight", "modernbert": "decoder.weight"}
# Aliases of the MLM bias that some transformers versions saved beside it.
DECODER_BIASES = ("cls.predictions.decoder.bias", "lm_head.decoder.bias")
# Task weights transformers' own pretraining heads hold that no litbert head takes: BERT's next-sentence classifier.
IGNORED_TASK_WEIGHTS = ("cls.seq_relationship.",)


def _weight_names(names: list[str], base: str) -> list[str]:
    """The `.weight`/`.bias` (or bare) parameter names under `base` present in `names`."""
    return [n for n in (f"{base}.weight", f"{base}.bias", base) if n in names]


def _split_prefix(state: dict[str, torch.Tensor], layout: Layout) -> tuple[dict, dict]:
    """(base-model tensors without the prefix, task-model tensors); bare base-model checkpoints have no prefix."""
    if any(k.startswith(layout.prefix) for k in state):
        base = {k[len(layout.prefix):]: v for k, v in state.items() if k.startswith(layout.prefix)}
        top = {k: v for k, v in state.items() if not k.startswith(layout.prefix)}
    else:
        roots = tuple({name.split(".")[0] + "." for name in [*layout.embeddings.values(), layout.layer]})
        base = {k: v for k, v in state.items() if k.startswith(roots)}
        top = {k: v for k, v in state.items() if not k.startswith(roots)}
    # BertModel's pooler belongs to the classifier head: file it under the task model's name, prefixed or not.
    for name in ("pooler.dense.weight", "pooler.dense.bias"):
        for part in (base, top):
            if name in part:
                top[layout.prefix + name] = part.pop(name)
    return base, top


# The LayerNorm names of the first BERT checkpoints (TensorFlow's), which transformers still renames on load: the
# .bin files of bert-base-uncased and of many models fine-tuned from it hold them.
LEGACY_NAMES = {"LayerNorm.gamma": "LayerNorm.weight", "LayerNorm.beta": "LayerNorm.bias"}


def _legacy_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    renamed = {}
    for name, value in state.items():
        for old, new in LEGACY_NAMES.items():
            name = name.replace(old, new)
        renamed[name] = value
    return renamed


def _from_transformers(directory: Path) -> Checkpoint:
    hf_config = read_json(directory / "config.json")
    try:
        config = config_from_transformers(hf_config, str(directory / "config.json"))
    except KeyError as error:
        raise CheckpointError(f"{directory / 'config.json'} lacks the field {error}; it is not a complete "
                              f"{hf_config.get('model_type')} config.") from None
    layout = LAYOUTS[hf_config["model_type"]]
    base, top = _split_prefix(_legacy_names(read_weights(directory)), layout)

    encoder: dict[str, torch.Tensor] = {}
    names = list(base)

    def take(ours: str, theirs: str) -> None:
        found = _weight_names(names, theirs)
        if not found:
            raise ValueError(f"{directory}: the checkpoint has no {theirs!r} weights; is it truncated?")
        for name in found:
            encoder[ours + name[len(theirs):]] = base.pop(name)

    for ours, theirs in layout.embeddings.items():
        if ours == "position.table" and config.position == "sinusoidal":
            # DistilBERT stores its sinusoidal table, which litbert computes. transformers 5 trains the stored one (it
            # leaves it requires_grad); one that no longer equals the formula loads as the learned table it now is.
            table = base.get(theirs + ".weight")
            fixed = sinusoidal_table(config.max_position_embeddings, config.hidden_size)
            if table is None or table.shape == fixed.shape and torch.allclose(table.float(), fixed, rtol=0, atol=1e-6):
                base.pop(theirs + ".weight", None)
                continue
            config = replace(config, position="learned")
        if ours == "embeddings.token_type" and not config.type_vocab_size:
            continue
        take(ours, theirs)
    for i in range(config.num_layers):
        layer = layout.layer.format(i=i)
        for suffix in ("weight", "bias") if config.bias else ("weight",):
            keys = [f"{layer}{name}.{suffix}" for name in layout.qkv]  # one when fused
            absent = [key for key in keys if key not in base]
            if absent:
                raise CheckpointError(f"{directory}: the checkpoint has no {absent[0]!r} weights, which its config "
                                      f"({config.num_layers} layers) calls for; is it truncated, or the config "
                                      f"another model's?")
            parts = [base.pop(key) for key in keys]
            encoder[f"blocks.{i}.attention.qkv.{suffix}"] = torch.cat(parts, dim=0)
        for ours, theirs in _block_parameters(config, layout, i).items():
            take(f"blocks.{i}.{ours}", layer + theirs)
    leftover = [k for k in base if not k.endswith("position_ids")]
    if leftover:
        raise ValueError(f"{directory}: weights litbert cannot place: {leftover[:8]}; the architecture differs.")

    heads: dict[str, dict[str, torch.Tensor]] = {}
    for kind, table in layout.heads.items():
        head: dict[str, torch.Tensor] = {}
        for ours, theirs in table.items():
            for name in _weight_names(list(top), theirs):
                head[ours + name[len(theirs):]] = top[name]
        heads[kind] = head
    used = {name for table in layout.heads.values() for theirs in table.values()
            for name in _weight_names(list(top), theirs)}
    decoder_name = DECODER_WEIGHTS.get(hf_config["model_type"], "")
    untied = decoder_name in top and not torch.equal(top[decoder_name], encoder["embeddings.word.weight"])
    # A token classifier and a sequence classifier share the name `classifier`; which one a checkpoint holds is
    # stated by its `architectures` entry. Of a head the checkpoint is not, only its pooler or transform is kept (a
    # BERT pooler, or the MLM transform that starts ModernBERT's classifiers).
    architecture = " ".join(hf_config.get("architectures") or [])
    classifiers = {name for kind in ("token_classification", "sequence_classification")
                   for name in _weight_names(list(top), layout.heads.get(kind, {}).get("classifier", ""))}
    if classifiers and not any(HEAD_ARCHITECTURES[kind] in architecture
                               for kind in ("token_classification", "sequence_classification")):
        used -= classifiers  # another task's (ModernBERT's question answering names its own `classifier`)
    ignored = [name for name in top if name not in used and name != decoder_name and not name.endswith("position_ids")
               and not name.startswith(IGNORED_TASK_WEIGHTS) and name not in DECODER_BIASES]
    if ignored:  # a task head litbert has no use for (question answering, NSP of another name, ...), as transformers
        log.warning("%s: weights of no litbert head, not used: %s", directory, sorted(ignored)[:8])
    mlm = heads.get("mlm", {})
    if mlm and "bias" not in mlm and "cls.predictions.decoder.bias" in top:  # older BERT checkpoints
        mlm["bias"] = top["cls.predictions.decoder.bias"]
    if "dense.weight" not in mlm or layout.head_bias_key is not None and "bias" not in mlm:
        heads.pop("mlm", None)  # no MLM head; or (ModernBERT) a classifier's transform under the same names
    elif "dense.bias" not in mlm:  # a transform without a bias (ModernBERT's classifier_bias false)
        mlm["dense.bias"] = torch.zeros_like(mlm["dense.weight"][:, 0])
    for kind in ("token_classification", "sequence_classification"):
        if HEAD_ARCHITECTURES[kind] not in architecture and kind in heads:
            heads[kind] = {k: v for k, v in heads[kind].items() if not k.startswith("classifier.")}
    heads = {kind: state for kind, state in heads.items() if state}
    options = {option: value for kind in layout.head_options.values() for option, value in kind.items()}
    options |= {option: hf_config[key] for option, key in layout.head_option_keys.items() if key in hf_config}
    id2label = hf_config.get("id2label") or {}
    names = [str(id2label.get(str(i), id2label.get(i, ""))) for i in range(len(id2label))]
    generic = all(name == f"LABEL_{i}" for i, name in enumerate(names))  # transformers' default: no names given
    dropout = {kind: rate for kind, keys in layout.classifier_dropout.items()
               for rate in [next((hf_config[key] for key in keys if hf_config.get(key) is not None), None)]
               if rate is not None}
    fields = {key: name for name, key in layout.config_keys.items()}
    dropout_field = {kind: fields[key] for kind, keys in layout.classifier_dropout.items()
                     for key in [next((key for key in keys if hf_config.get(key) is not None), None)]
                     if key in fields}
    return Checkpoint(config, encoder, heads, options | {"norm_eps": config.norm_eps}, untied_decoder=untied,
                      label_names=None if generic or not all(names) else names,
                      problem_type=hf_config.get("problem_type"), classifier_dropout=dropout,
                      classifier_dropout_field=dropout_field,
                      dropout_before_pooler=layout.dropout_before_pooler,
                      head_init=layout.head_init)


def _from_litbert(directory: Path) -> Checkpoint:
    meta = read_json(directory / LITBERT_CONFIG)
    if meta.get("format") != "litbert" or not isinstance(meta.get("encoder"), dict):
        raise CheckpointError(f"{directory / LITBERT_CONFIG} is not a litbert checkpoint description.")
    config = EncoderConfig.from_dict(meta["encoder"])
    state = _load_safetensors(str(directory / WEIGHTS))
    encoder = {k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")}
    heads: dict[str, dict[str, torch.Tensor]] = {}
    head_meta = meta.get("head") or {}
    if head_meta:
        heads[head_meta["kind"]] = {k[len("head."):]: v for k, v in state.items() if k.startswith("head.")}
    return Checkpoint(config, encoder, heads, head_meta.get("options", {}), label_names=meta.get("label_names"),
                      problem_type=meta.get("problem_type"))


def load_checkpoint(directory: str | Path | Checkpoint) -> Checkpoint:
    """Read a checkpoint directory, or the hub model an id names (`encoders.hub`); a `Checkpoint` already read is
    returned as is, so callers that build an encoder and its heads from one directory read its weights once."""
    if isinstance(directory, Checkpoint):
        return directory
    directory = local_path(directory)  # a local folder, or a hub id's cached snapshot
    if not directory.is_dir():
        raise CheckpointError(f"Checkpoint {directory} is a file; a checkpoint is the folder that holds it.")
    if (directory / LITBERT_CONFIG).exists():
        checkpoint = _from_litbert(directory)
    elif (directory / "config.json").exists():
        checkpoint = _from_transformers(directory)
    else:
        raise CheckpointError(f"{directory} holds neither {LITBERT_CONFIG} (litbert) nor config.json (transformers).")
    checkpoint.source = str(directory)
    return checkpoint


def _window_pattern(checkpoint: Checkpoint, layers: list[int], setting: str) -> dict[str, Any]:
    """The sliding-window settings under which the kept layers attend as they did: global where they were global."""
    kept = [checkpoint.config.is_global(i) for i in layers]
    every = global_every(kept)
    if every == 1:
        return {"local_window": 0, "global_every": 1}
    if every is None:
        pattern = ", ".join(f"{i} ({'global' if g else 'local'})" for i, g in zip(layers, kept, strict=True))
        raise ValueError(f"{setting}={layers} of {checkpoint.source}: {pattern}; litbert's layers attend globally "
                         f"every n layers from the first and within a window otherwise, so pick layers in that "
                         f"pattern.")
    return {"global_every": every}


def select_layers(checkpoint: Checkpoint, layers: Sequence[int] | str, setting: str = "layers") -> Checkpoint:
    """The checkpoint with only these encoder blocks, in this order ("every_other": DistilBERT's half-depth student);
    embeddings, position tables, the final norm and the heads are kept as they are. Errors name `layers` as
    `setting`, the user's name for it."""
    depth = checkpoint.config.num_layers
    if isinstance(layers, str):
        if layers != "every_other":
            raise ValueError(f"{setting}={layers!r}: give 'every_other' or a list of layer indices.")
        layers = range(0, depth, 2)  # 3 of 6 layers, 6 of 12
    layers = list(layers)
    wrong = [i for i in layers if not 0 <= i < depth]
    if not layers or wrong or len(set(layers)) != len(layers):
        raise ValueError(f"{setting}={layers} must be distinct indices of the {depth} layers of {checkpoint.source} "
                         f"(0 to {depth - 1}), at least one.")
    state = {k: v for k, v in checkpoint.encoder_state.items() if not k.startswith("blocks.")}
    for new, old in enumerate(layers):
        prefix = f"blocks.{old}."
        state.update({f"blocks.{new}.{k[len(prefix):]}": v
                      for k, v in checkpoint.encoder_state.items() if k.startswith(prefix)})
    config = replace(checkpoint.config, num_layers=len(layers), **_window_pattern(checkpoint, layers, setting))
    if not config.first_attention_norm and layers[0] != 0:
        # Layer 0 alone has no attention norm (its input is the embeddings' norm); every other layer keeps its own.
        if 0 in layers:
            raise ValueError(f"{setting}={layers}: layer 0 of {checkpoint.source} has no attention norm, so it can "
                             f"only stay the first layer; put it first or leave it out.")
        config = replace(config, first_attention_norm=True)
    return replace(checkpoint, config=config, encoder_state=state)


# ----------------------------------------------------------------------------------------------------- writing


def _mismatches(config: EncoderConfig, layout: Layout, kind: str | None = None,
                head_options: dict[str, Any] | None = None) -> list[str]:
    """What in `config` (and a head of `kind` with `head_options`) the family `layout` cannot express, each with the
    reason."""
    family = layout.class_prefix
    reasons = [f"{name}={getattr(config, name)!r} ({family} has {value!r})" for name, value in layout.fixed.items()
               if getattr(config, name) != value]
    if config.position not in layout.positions:
        reasons.append(f"position={config.position!r} ({family} stores {' or '.join(layout.positions)} positions)")
    if config.activation not in layout.activations.values():
        reasons.append(f"activation={config.activation!r} ({family}: {', '.join(set(layout.activations.values()))})")
    if kind is not None and kind not in layout.heads:
        reasons.append(f"a {kind} head ({family}'s is not litbert's)")
    if kind in layout.head_options and head_options:
        expected = layout.head_options[kind]
        for option, value in expected.items():
            allowed = _STORED_VALUES[option] if option in layout.head_option_keys else (value,)
            if head_options.get(option, value) not in allowed:
                head = {"token_classification": "token classifier", "mlm": "MLM head"}.get(kind, "classifier")
                reasons.append(f"{option}={head_options[option]!r} (the {family} {head}'s is "
                               f"{' or '.join(map(repr, allowed))})")
        if any(expected.get(option) for option in _NORM_OPTIONS) and head_options.get("norm_eps") != config.norm_eps:
            reasons.append(f"a head norm_eps={head_options.get('norm_eps')} ({family}'s is the encoder's, "
                           f"{config.norm_eps})")
    if kind == "mlm" and "mlm" not in layout.head_options and head_options \
            and head_options.get("mlm_activation", config.activation) != config.activation:
        reasons.append(f"an MLM head with activation {head_options['mlm_activation']!r} ({family}'s is the "
                       f"encoder's, {config.activation!r})")
    if layout.token_types and config.type_vocab_size == 0:
        reasons.append(f"type_vocab_size=0 ({family} has token types)")
    offset = config.pad_token_id + 1 if layout.offset_from_pad else 0
    if config.position_offset != offset:
        reasons.append(f"position_offset={config.position_offset} ({family} counts positions from {offset})")
    return reasons


SAVE_INSTEAD = "Save it with format='litbert' (or 'auto') instead."


def transformers_layout(config: EncoderConfig, kind: str | None = None, head_options: dict[str, Any] | None = None,
                        instead: str = SAVE_INSTEAD) -> Layout:
    """The first family of EXPORT_FAMILIES that expresses `config` (and a head of `kind` with `head_options`)
    exactly; `ValueError` saying, for the closest family, what it cannot express (each setting with the family's
    value), then `instead`: the way on."""
    layout, reasons = closest_family(config, kind, head_options)
    if not reasons:
        return layout
    raise ValueError(f"This configuration has {no_equivalent(layout, reasons)}. {instead}")


def closest_family(config: EncoderConfig, kind: str | None = None,
                   head_options: dict[str, Any] | None = None) -> tuple[Layout, list[str]]:
    """The family of EXPORT_FAMILIES closest to `config` (and a head of `kind` with `head_options`), the first that
    expresses it exactly where one does, and what it cannot express, each setting with the family's value."""
    found = {name: _mismatches(config, LAYOUTS[name], kind, head_options) for name in EXPORT_FAMILIES}
    closest = min(found, key=lambda name: len(found[name]))  # the first of the fewest
    return LAYOUTS[closest], found[closest]


def no_equivalent(layout: Layout, reasons: list[str]) -> str:
    """What the closest family, `layout`, cannot express of a configuration (`closest_family`), as messages say it."""
    return f"no transformers equivalent: {'; '.join(reasons)} (the closest family is {layout.class_prefix})"


def export_layout(encoder: nn.Module, head: nn.Module | None = None, instead: str = SAVE_INSTEAD) -> Layout:
    """The transformers family `save_checkpoint(encoder, head=head, format="transformers")` writes; the
    `transformers_layout` error where none holds them, checkable before a model is trained."""
    return transformers_layout(encoder.config, _head_kind(head), _head_options(head), instead)


def export_mismatches(encoder: nn.Module, head: nn.Module | None = None) -> tuple[Layout, list[str]]:
    """`closest_family` of an encoder and its head: what transformers' format cannot hold of them (none: it holds
    them)."""
    return closest_family(encoder.config, _head_kind(head), _head_options(head))


def _transformers_config(config: EncoderConfig, layout: Layout, architecture: str, extra: dict) -> dict[str, Any]:
    values = {key: getattr(config, name) for name, key in layout.config_keys.items()}
    values |= {key: getattr(config, name) for key, name in layout.same_as.items()}
    if layout.sinusoidal_key is not None:
        values[layout.sinusoidal_key] = config.position == "sinusoidal"
    if layout.write_keys is not None:
        values |= layout.write_keys(config)
    activation = next(theirs for theirs, ours in layout.activations.items() if ours == config.activation)
    return dict(model_type=layout.model_type, architectures=[architecture], **values, **layout.required,
                **{layout.activation_key: activation}, **extra)


def _head_kind(head: nn.Module | None) -> str | None:
    if head is None:
        return None
    kind = getattr(head, "kind", None)
    if kind not in HEAD_KINDS:
        raise TypeError(f"Cannot save a head of type {type(head).__name__}; expected one of litbert's heads "
                        f"(kinds {list(HEAD_KINDS)}).")
    return kind


def _head_options(head: nn.Module | None) -> dict[str, Any]:
    return dict(getattr(head, "options", {}))


def _to_transformers(encoder: nn.Module, head: nn.Module | None, kind: str | None) -> tuple[dict, dict]:
    config: EncoderConfig = encoder.config
    layout = transformers_layout(config, kind, _head_options(head))
    ours = {k: v.detach().cpu() for k, v in encoder.state_dict().items()}
    prefix = layout.prefix if head is not None else ""
    state: dict[str, torch.Tensor] = {}
    for mine, theirs in layout.embeddings.items():
        for suffix in ("weight", "bias"):
            if f"{mine}.{suffix}" in ours:
                state[f"{prefix}{theirs}.{suffix}"] = ours[f"{mine}.{suffix}"]
    if config.position == "sinusoidal":  # litbert computes the fixed table; DistilBERT stores it
        state[f"{prefix}{layout.embeddings['position.table']}.weight"] = sinusoidal_table(
            config.max_position_embeddings, config.hidden_size)
    for i in range(config.num_layers):
        layer = prefix + layout.layer.format(i=i)
        for suffix in ("weight", "bias") if config.bias else ("weight",):
            qkv = ours[f"blocks.{i}.attention.qkv.{suffix}"].chunk(len(layout.qkv), dim=0)  # one part when fused
            for name, part in zip(layout.qkv, qkv, strict=True):
                state[f"{layer}{name}.{suffix}"] = part
            for mine, theirs in _block_parameters(config, layout, i).items():
                state[f"{layer}{theirs}.{suffix}"] = ours[f"blocks.{i}.{mine}.{suffix}"]

    extra: dict[str, Any] = {}
    architecture = layout.class_prefix + (HEAD_ARCHITECTURES[kind] if kind is not None else "Model")
    if kind is not None:
        head_state = {k: v.detach().cpu() for k, v in head.state_dict().items()}
        table = layout.heads[kind]
        for mine, theirs in table.items():
            for name, value in head_state.items():
                if name == mine or name.startswith(mine + "."):
                    state[theirs + name[len(mine):]] = value
        if kind == "mlm":
            if not head.tied:
                raise ValueError("transformers ties the MLM decoder to the word embeddings; this head is untied.")
            if layout.head_bias_key is not None:
                extra[layout.head_bias_key] = True
        else:
            options = _head_options(head)
            extra |= {key: options[option] for option, key in layout.head_option_keys.items() if option in options}
            if kind == "sequence_classification" and head.num_labels == 1:
                extra["problem_type"] = "regression"
            rate_key = layout.classifier_dropout.get(kind, (None,))[0]
            if rate_key is not None and rate_key not in layout.config_keys.values():  # not DistilBERT's own `dropout`
                extra[rate_key] = head.dropout.p  # what transformers' classifier of the export drops out at
            extra["id2label"] = {str(i): f"LABEL_{i}" for i in range(head.num_labels)}
            extra["label2id"] = {f"LABEL_{i}": i for i in range(head.num_labels)}
    return _transformers_config(config, layout, architecture, extra), state


PROBLEM_TYPES = ("multi_label_classification",)  # those a save stores; the others follow from the outputs


def save_checkpoint(encoder: nn.Module, directory: Path, head: nn.Module | None = None, format: str = "auto",
                    label_names: Sequence[str] | None = None, problem_type: str | None = None) -> Path:
    if label_names is not None and getattr(head, "num_labels", None) not in (None, len(label_names)):
        raise ValueError(f"{len(label_names)} label names for a head with {head.num_labels} outputs.")
    if problem_type is not None:
        check_choice("problem_type", problem_type, PROBLEM_TYPES)
        if getattr(head, "kind", None) != "sequence_classification":
            raise ValueError(f"problem_type={problem_type!r} describes a sequence classifier's outputs; the head is "
                             f"{getattr(head, 'kind', None)!r}.")
    check_choice("format", format, ("auto", "transformers", "litbert"))
    kind = _head_kind(head)
    if format == "auto":
        try:
            transformers_layout(encoder.config, kind, _head_options(head))
            format = "transformers"
        except ValueError:
            format = "litbert"
    directory.mkdir(parents=True, exist_ok=True)
    _remove_other_weights(directory)
    if format == "transformers":
        hf_config, state = _to_transformers(encoder, head, kind)
        if label_names is not None:  # what transformers' pipelines show instead of LABEL_0, LABEL_1, ...
            hf_config["id2label"] = {str(i): name for i, name in enumerate(label_names)}
            hf_config["label2id"] = {name: i for i, name in enumerate(label_names)}
        if problem_type is not None:  # what transformers' loss and pipelines read to apply a sigmoid per label
            hf_config["problem_type"] = problem_type
        (directory / LITBERT_CONFIG).unlink(missing_ok=True)
        (directory / "config.json").write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    else:
        state = {f"encoder.{k}": v.detach().cpu() for k, v in encoder.state_dict().items()}
        head_meta = None
        if head is not None:
            tied = getattr(head, "tied", False)
            state.update({f"head.{k}": v.detach().cpu() for k, v in head.state_dict().items()
                          if not (tied and k == "decoder.weight")})
            head_meta = {"kind": kind, "options": _head_options(head)}
        meta = {"format": "litbert", "version": 1, "encoder": encoder.config.to_dict(), "head": head_meta,
                "label_names": list(label_names) if label_names is not None else None, "problem_type": problem_type}
        (directory / "config.json").unlink(missing_ok=True)  # a transformers config of an earlier save would be read
        (directory / LITBERT_CONFIG).write_text(json.dumps(meta, indent=2) + "\n")
    # safetensors refuses tensors that share memory (the split QKV views); give each its own storage.
    save_file({k: v.contiguous().clone() for k, v in state.items()}, str(directory / WEIGHTS),
              metadata={"format": "pt"})
    log.info("Saved %s checkpoint to %s", format, directory)
    return directory
