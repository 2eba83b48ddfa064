"""Reading and writing checkpoints: transformers-format BERT, RoBERTa and DistilBERT, and litbert's own format.

A transformers checkpoint is a directory with `config.json` and weights (`model.safetensors`, a sharded
`model.safetensors.index.json`, or `pytorch_model.bin`, read with `torch.load(weights_only=True)`). Each family's
parameter names are described by one `Layout` table; the three separate query/key/value projections are fused
into litbert's single QKV projection on load and split again on export.

litbert's own format (any configuration, heads included) is `litbert.json` + `model.safetensors` with litbert's
parameter names under `encoder.` and `head.`.
"""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from encoders.choices import check_choice
from encoders.config import EncoderConfig

log = logging.getLogger(__name__)

LITBERT_CONFIG = "litbert.json"
WEIGHTS = "model.safetensors"


class CheckpointError(ValueError):
    """A checkpoint that cannot be read: missing, truncated, corrupt, or holding objects that are not data. The
    message names the file and says what to do."""


@dataclass(frozen=True)
class Layout:
    """Where one transformers family keeps each litbert parameter (names without `.weight` / `.bias`)."""

    model_type: str
    prefix: str  # the base model's attribute in the task models: `bert.`, `roberta.`, `distilbert.`
    embeddings: dict[str, str]
    layer: str  # the per-layer prefix, with `{i}` for the index
    qkv: tuple[str, str, str]
    block: dict[str, str]
    mlm: dict[str, str]  # head parameters, relative to the task model's root
    sequence_classification: dict[str, str]
    pooler_activation: str


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
_BERT_QKV = ("attention.self.query", "attention.self.key", "attention.self.value")

LAYOUTS: dict[str, Layout] = {
    "bert": Layout(
        model_type="bert", prefix="bert.", embeddings=_BERT_EMBEDDINGS, layer="encoder.layer.{i}.", qkv=_BERT_QKV,
        block=_BERT_BLOCK,
        mlm={"dense": "cls.predictions.transform.dense", "norm": "cls.predictions.transform.LayerNorm",
             "bias": "cls.predictions.bias"},
        sequence_classification={"pooler.0": "bert.pooler.dense", "classifier": "classifier"},
        pooler_activation="tanh",
    ),
    "roberta": Layout(
        model_type="roberta", prefix="roberta.", embeddings=_BERT_EMBEDDINGS, layer="encoder.layer.{i}.",
        qkv=_BERT_QKV, block=_BERT_BLOCK,
        mlm={"dense": "lm_head.dense", "norm": "lm_head.layer_norm", "bias": "lm_head.bias"},
        sequence_classification={"pooler.0": "classifier.dense", "classifier": "classifier.out_proj"},
        pooler_activation="tanh",
    ),
    "distilbert": Layout(
        model_type="distilbert", prefix="distilbert.",
        embeddings={"embeddings.word": "embeddings.word_embeddings", "embeddings.norm": "embeddings.LayerNorm",
                    "position.table": "embeddings.position_embeddings"},
        layer="transformer.layer.{i}.", qkv=("attention.q_lin", "attention.k_lin", "attention.v_lin"),
        block={"attention.out": "attention.out_lin", "attention_norm": "sa_layer_norm",
               "feed_forward.up": "ffn.lin1", "feed_forward.down": "ffn.lin2",
               "feed_forward_norm": "output_layer_norm"},
        mlm={"dense": "vocab_transform", "norm": "vocab_layer_norm", "bias": "vocab_projector.bias"},
        sequence_classification={"pooler.0": "pre_classifier", "classifier": "classifier"},
        pooler_activation="relu",
    ),
}

_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
_EXPORT_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}


@dataclass
class Checkpoint:
    config: EncoderConfig
    encoder_state: dict[str, torch.Tensor]
    head_states: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)  # "mlm", "sequence_classification"
    head_options: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the directory it was read from, for messages


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


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """All tensors of a transformers-style weights file (or shards) in `directory`."""
    for index_name, loader in (("model.safetensors.index.json", _load_safetensors),
                               ("pytorch_model.bin.index.json", _load_bin)):
        index = directory / index_name
        if index.exists():
            weight_map = read_json(index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise CheckpointError(f"{index} has no `weight_map`; the shard index is corrupt.")
            state: dict[str, torch.Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                state.update(loader(str(directory / shard)))
            return state
    if (directory / WEIGHTS).exists():
        return _load_safetensors(str(directory / WEIGHTS))
    if (directory / "pytorch_model.bin").exists():
        return _load_bin(str(directory / "pytorch_model.bin"))
    raise CheckpointError(
        f"No weights in {directory}: expected model.safetensors, pytorch_model.bin or a sharded index of either."
    )


def config_from_transformers(hf: dict[str, Any], source: str) -> EncoderConfig:
    """An `EncoderConfig` equal to a transformers `config.json` of a BERT, RoBERTa or DistilBERT model."""
    model_type = hf.get("model_type")
    if model_type not in LAYOUTS:
        raise ValueError(f"{source}: model_type={model_type!r} is not supported; litbert loads {sorted(LAYOUTS)}.")
    if model_type == "distilbert":
        activation = hf.get("activation", "gelu")
        values = dict(
            vocab_size=hf["vocab_size"], hidden_size=hf["dim"], num_layers=hf["n_layers"], num_heads=hf["n_heads"],
            intermediate_size=hf["hidden_dim"], max_position_embeddings=hf["max_position_embeddings"],
            type_vocab_size=0, pad_token_id=hf.get("pad_token_id", 0),
            position="sinusoidal" if hf.get("sinusoidal_pos_embds") else "learned",
            norm_eps=1e-12,  # DistilBERT hard-codes its LayerNorm epsilon
            hidden_dropout=hf.get("dropout", 0.1), attention_dropout=hf.get("attention_dropout", 0.1),
        )
    else:
        activation = hf.get("hidden_act", "gelu")
        if hf.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(
                f"{source}: position_embedding_type={hf['position_embedding_type']!r} has no litbert equivalent; "
                f"only 'absolute' checkpoints load."
            )
        pad = hf.get("pad_token_id", 0 if model_type == "bert" else 1)
        values = dict(
            vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"], num_layers=hf["num_hidden_layers"],
            num_heads=hf["num_attention_heads"], intermediate_size=hf["intermediate_size"],
            max_position_embeddings=hf["max_position_embeddings"], type_vocab_size=hf.get("type_vocab_size", 2),
            pad_token_id=pad, position_offset=pad + 1 if model_type == "roberta" else 0,
            norm_eps=hf.get("layer_norm_eps", 1e-12),
            hidden_dropout=hf.get("hidden_dropout_prob", 0.1),
            attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
            initializer_range=hf.get("initializer_range", 0.02),
        )
    if activation not in _HF_ACTIVATIONS:
        raise ValueError(
            f"{source}: activation {activation!r} is not supported; litbert maps {sorted(_HF_ACTIVATIONS)}."
        )
    return EncoderConfig(**values, activation=_HF_ACTIVATIONS[activation], name=model_type)


def _weight_names(names: list[str], base: str) -> list[str]:
    """The `.weight`/`.bias` (or bare) parameter names under `base` present in `names`."""
    return [n for n in (f"{base}.weight", f"{base}.bias", base) if n in names]


def _split_prefix(state: dict[str, torch.Tensor], layout: Layout) -> tuple[dict, dict]:
    """(base-model tensors without the prefix, task-model tensors); bare base-model checkpoints have no prefix."""
    if any(k.startswith(layout.prefix) for k in state):
        base = {k[len(layout.prefix):]: v for k, v in state.items() if k.startswith(layout.prefix)}
        top = {k: v for k, v in state.items() if not k.startswith(layout.prefix)}
    else:
        roots = ("embeddings.", layout.layer.split(".")[0] + ".")
        base = {k: v for k, v in state.items() if k.startswith(roots)}
        top = {k: v for k, v in state.items() if not k.startswith(roots)}
    # BertModel's pooler belongs to the classifier head: file it under the task model's name, prefixed or not.
    for name in ("pooler.dense.weight", "pooler.dense.bias"):
        for part in (base, top):
            if name in part:
                top[layout.prefix + name] = part.pop(name)
    return base, top


def _from_transformers(directory: Path) -> Checkpoint:
    hf_config = read_json(directory / "config.json")
    try:
        config = config_from_transformers(hf_config, str(directory / "config.json"))
    except KeyError as error:
        raise CheckpointError(f"{directory / 'config.json'} lacks the field {error}; it is not a complete "
                              f"BERT/RoBERTa/DistilBERT config.") from None
    layout = LAYOUTS[hf_config["model_type"]]
    base, top = _split_prefix(read_weights(directory), layout)

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
            base.pop(theirs + ".weight", None)  # DistilBERT stores its fixed sinusoidal table; litbert computes it
            continue
        if ours == "embeddings.token_type" and not config.type_vocab_size:
            continue
        take(ours, theirs)
    for i in range(config.num_layers):
        layer = layout.layer.format(i=i)
        for suffix in ("weight", "bias"):
            parts = [base.pop(f"{layer}{name}.{suffix}") for name in layout.qkv]
            encoder[f"blocks.{i}.attention.qkv.{suffix}"] = torch.cat(parts, dim=0)
        for ours, theirs in layout.block.items():
            take(f"blocks.{i}.{ours}", layer + theirs)
    leftover = [k for k in base if not k.endswith("position_ids")]
    if leftover:
        raise ValueError(f"{directory}: weights litbert cannot place: {leftover[:8]}; the architecture differs.")

    heads: dict[str, dict[str, torch.Tensor]] = {}
    for kind, table in (("mlm", layout.mlm), ("sequence_classification", layout.sequence_classification),
                        ("token_classification", {"classifier": "classifier"})):
        head: dict[str, torch.Tensor] = {}
        for ours, theirs in table.items():
            for name in _weight_names(list(top), theirs):
                head[ours + name[len(theirs):]] = top[name]
        heads[kind] = head
    if "bias" not in heads["mlm"] and "cls.predictions.decoder.bias" in top:  # older BERT checkpoints
        heads["mlm"]["bias"] = top["cls.predictions.decoder.bias"]
    if "dense.weight" not in heads["mlm"]:
        del heads["mlm"]
    # A token classifier and a sequence classifier share the name `classifier` in BERT and DistilBERT; which one
    # a checkpoint holds is stated by its `architectures` entry.
    architecture = " ".join(hf_config.get("architectures") or [])
    if "TokenClassification" not in architecture:
        del heads["token_classification"]
    if "SequenceClassification" not in architecture:
        heads["sequence_classification"] = {k: v for k, v in heads["sequence_classification"].items()
                                            if k.startswith("pooler.")}
    heads = {kind: state for kind, state in heads.items() if state}
    return Checkpoint(config, encoder, heads, {"pooler_activation": layout.pooler_activation})


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
    return Checkpoint(config, encoder, heads, head_meta.get("options", {}))


def load_checkpoint(directory: str | Path | Checkpoint) -> Checkpoint:
    """Read a checkpoint directory; a `Checkpoint` already read is returned as is, so callers that build an
    encoder and its heads from one directory read its weights once."""
    if isinstance(directory, Checkpoint):
        return directory
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(
            f"Checkpoint directory {directory} does not exist. litbert loads local directories only; download a "
            f"hub model first (e.g. `huggingface-cli download NAME --local-dir DIR`)."
        )
    if (directory / LITBERT_CONFIG).exists():
        checkpoint = _from_litbert(directory)
    elif (directory / "config.json").exists():
        checkpoint = _from_transformers(directory)
    else:
        raise CheckpointError(f"{directory} holds neither {LITBERT_CONFIG} (litbert) nor config.json (transformers).")
    checkpoint.source = str(directory)
    return checkpoint


# ----------------------------------------------------------------------------------------------------- writing


def transformers_layout(config: EncoderConfig) -> Layout:
    """The transformers family that expresses `config` exactly; `ValueError` saying why when none does."""
    reasons = []
    if config.position not in ("learned", "sinusoidal"):
        reasons.append(f"position={config.position!r} (transformers' BERT family has absolute positions only)")
    if config.norm_placement != "post":
        reasons.append("norm_placement='pre' (BERT, RoBERTa and DistilBERT are post-norm)")
    if config.norm != "layernorm":
        reasons.append(f"norm={config.norm!r} (they use LayerNorm)")
    if config.activation not in _EXPORT_ACTIVATIONS:
        reasons.append(f"activation={config.activation!r} (they have no gated feed-forward)")
    if not config.bias:
        reasons.append("bias=False (they always have biases)")
    if config.type_vocab_size == 0:
        if config.position_offset:
            reasons.append("position_offset without token types (neither RoBERTa nor DistilBERT)")
        if config.norm_eps != 1e-12:
            reasons.append(f"norm_eps={config.norm_eps} with no token types (DistilBERT fixes it at 1e-12)")
        if config.activation not in ("gelu", "relu"):
            reasons.append(f"activation={config.activation!r} with no token types (DistilBERT: gelu or relu)")
        layout = LAYOUTS["distilbert"]
    elif config.position == "sinusoidal":
        reasons.append("position='sinusoidal' with token types (only DistilBERT has sinusoidal positions)")
        layout = LAYOUTS["bert"]
    elif config.position_offset:
        if config.position_offset != config.pad_token_id + 1:
            reasons.append(f"position_offset={config.position_offset} != pad_token_id + 1 (RoBERTa's convention)")
        layout = LAYOUTS["roberta"]
    else:
        layout = LAYOUTS["bert"]
    if reasons:
        raise ValueError(
            "This configuration has no transformers equivalent: " + "; ".join(reasons)
            + ". Save it with format='litbert' (or 'auto') instead."
        )
    return layout


def _transformers_config(config: EncoderConfig, layout: Layout, architecture: str, extra: dict) -> dict[str, Any]:
    common = dict(model_type=layout.model_type, architectures=[architecture], vocab_size=config.vocab_size,
                  max_position_embeddings=config.max_position_embeddings, pad_token_id=config.pad_token_id,
                  initializer_range=config.initializer_range, **extra)
    if layout.model_type == "distilbert":
        return dict(common, dim=config.hidden_size, n_layers=config.num_layers, n_heads=config.num_heads,
                    hidden_dim=config.intermediate_size, activation=_EXPORT_ACTIVATIONS[config.activation],
                    dropout=config.hidden_dropout, attention_dropout=config.attention_dropout,
                    sinusoidal_pos_embds=config.position == "sinusoidal")
    return dict(common, hidden_size=config.hidden_size, num_hidden_layers=config.num_layers,
                num_attention_heads=config.num_heads, intermediate_size=config.intermediate_size,
                hidden_act=_EXPORT_ACTIVATIONS[config.activation], hidden_dropout_prob=config.hidden_dropout,
                attention_probs_dropout_prob=config.attention_dropout, type_vocab_size=config.type_vocab_size,
                layer_norm_eps=config.norm_eps, position_embedding_type="absolute")


def _head_kind(head: nn.Module | None) -> str | None:
    from encoders.heads import MaskedLMHead, SequenceClassificationHead, TokenClassificationHead

    kinds = {MaskedLMHead: "mlm", SequenceClassificationHead: "sequence_classification",
             TokenClassificationHead: "token_classification"}
    if head is None:
        return None
    for cls, kind in kinds.items():
        if isinstance(head, cls):
            return kind
    raise TypeError(f"Cannot save a head of type {type(head).__name__}; expected one of litbert's heads.")


def _head_options(head: nn.Module) -> dict[str, Any]:
    return {k: getattr(head, k) for k in ("num_labels", "pooling", "pooler_activation") if hasattr(head, k)}


def _to_transformers(encoder: nn.Module, head: nn.Module | None, kind: str | None) -> tuple[dict, dict]:
    config: EncoderConfig = encoder.config
    layout = transformers_layout(config)
    ours = {k: v.detach().cpu() for k, v in encoder.state_dict().items()}
    prefix = layout.prefix if head is not None else ""
    state: dict[str, torch.Tensor] = {}
    for mine, theirs in layout.embeddings.items():
        for suffix in ("weight", "bias"):
            if f"{mine}.{suffix}" in ours:
                state[f"{prefix}{theirs}.{suffix}"] = ours[f"{mine}.{suffix}"]
    if config.position == "sinusoidal":
        from encoders.positions import sinusoidal_table

        state[f"{prefix}embeddings.position_embeddings.weight"] = sinusoidal_table(
            config.max_position_embeddings, config.hidden_size)
    for i in range(config.num_layers):
        layer = prefix + layout.layer.format(i=i)
        for suffix in ("weight", "bias"):
            for name, part in zip(layout.qkv, ours[f"blocks.{i}.attention.qkv.{suffix}"].chunk(3, dim=0), strict=True):
                state[f"{layer}{name}.{suffix}"] = part
            for mine, theirs in layout.block.items():
                state[f"{layer}{theirs}.{suffix}"] = ours[f"blocks.{i}.{mine}.{suffix}"]

    extra: dict[str, Any] = {}
    base_class = {"bert": "Bert", "roberta": "Roberta", "distilbert": "DistilBert"}[layout.model_type]
    architecture = f"{base_class}Model"
    if kind is not None:
        head_state = {k: v.detach().cpu() for k, v in head.state_dict().items()}
        table = {"mlm": layout.mlm, "sequence_classification": layout.sequence_classification,
                 "token_classification": {"classifier": "classifier"}}[kind]
        for mine, theirs in table.items():
            for name, value in head_state.items():
                if name == mine or name.startswith(mine + "."):
                    state[theirs + name[len(mine):]] = value
        if kind == "mlm":
            if not head.tied:
                raise ValueError("transformers ties the MLM decoder to the word embeddings; this head is untied.")
            architecture = f"{base_class}ForMaskedLM"
        else:
            if kind == "sequence_classification":
                if head.pooling != "cls" or head.pooler_activation != layout.pooler_activation:
                    raise ValueError(
                        f"transformers' {base_class}ForSequenceClassification pools the first token with "
                        f"{layout.pooler_activation}; this head uses pooling={head.pooling!r}, "
                        f"activation={head.pooler_activation!r}. Save with format='litbert'."
                    )
                if head.num_labels == 1:
                    extra["problem_type"] = "regression"
                architecture = f"{base_class}ForSequenceClassification"
            else:
                architecture = f"{base_class}ForTokenClassification"
            extra["id2label"] = {str(i): f"LABEL_{i}" for i in range(head.num_labels)}
            extra["label2id"] = {f"LABEL_{i}": i for i in range(head.num_labels)}
    return _transformers_config(config, layout, architecture, extra), state


def save_checkpoint(encoder: nn.Module, directory: Path, head: nn.Module | None = None, format: str = "auto",
                    label_names: Sequence[str] | None = None) -> Path:
    if label_names is not None and getattr(head, "num_labels", None) not in (None, len(label_names)):
        raise ValueError(f"{len(label_names)} label names for a head with {head.num_labels} outputs.")
    check_choice("format", format, ("auto", "transformers", "litbert"))
    kind = _head_kind(head)
    if format == "auto":
        try:
            transformers_layout(encoder.config)
            format = "transformers"
        except ValueError:
            format = "litbert"
    directory.mkdir(parents=True, exist_ok=True)
    if format == "transformers":
        hf_config, state = _to_transformers(encoder, head, kind)
        if label_names is not None:  # what transformers' pipelines show instead of LABEL_0, LABEL_1, ...
            hf_config["id2label"] = {str(i): name for i, name in enumerate(label_names)}
            hf_config["label2id"] = {name: i for i, name in enumerate(label_names)}
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
                "label_names": list(label_names) if label_names is not None else None}
        (directory / LITBERT_CONFIG).write_text(json.dumps(meta, indent=2) + "\n")
    # safetensors refuses tensors that share memory (the split QKV views); give each its own storage.
    save_file({k: v.contiguous().clone() for k, v in state.items()}, str(directory / WEIGHTS),
              metadata={"format": "pt"})
    log.info("Saved %s checkpoint to %s", format, directory)
    return directory
