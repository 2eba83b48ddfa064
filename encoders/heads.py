"""Task heads, separate from the encoder.

- `MaskedLMHead`: BERT's transform (dense, activation, norm) then a decoder tied to the word embeddings plus a
  bias. Given the masked positions it transforms and projects only those rows, so pretraining pays for the
  vocabulary projection on ~15% of tokens instead of all of them.
- `SequenceClassificationHead`: the first token or a masked mean through a pooler (BERT's dense + tanh,
  DistilBERT's dense + ReLU, or ModernBERT's dense + GELU + LayerNorm), then dropout and a linear classifier
  (num_labels=1 for regression).
- `TokenClassificationHead`: optionally a transform (dense, activation, norm: ModernBERT's), then dropout and a
  linear classifier on every token.

RoBERTa's classification head also applies its dropout before the dense layer (`dropout_before_pooler`, which a
head over a RoBERTa checkpoint takes from its family, as transformers' `RobertaForSequenceClassification` does).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from encoders.checkpoints import Checkpoint, CheckpointError, load_checkpoint
from encoders.choices import check_choice
from encoders.config import EncoderConfig
from encoders.layers import Dropout, activation_spec, build_norm, normal_init_

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # annotations only: typing.Self is Python 3.11+, and the project supports 3.10
    from typing import Self

Pooling = Literal["cls", "mean"]  # the first token through BERT's pooler, or the mean over real tokens
PoolerActivation = Literal["tanh", "relu", "gelu"]  # BERT's pooler, DistilBERT's pre-classifier, ModernBERT's head
POOLER_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}
# The heads' shapes, as a checkpoint's `head_options` carry them: a head over a checkpoint takes them unless given (a
# fresh one its family's, as transformers' `*ForSequenceClassification` / `*ForTokenClassification` of that checkpoint
# has). Pooling and the pooler for a sequence classifier; the transform before a token classifier (None: none).
POOLER_OPTIONS = ("pooling", "pooler_activation", "pooler_bias", "pooler_norm", "norm_eps")
TRANSFORM_OPTIONS = ("transform_activation", "transform_bias", "transform_norm", "norm_eps")
CLASSIFIER_DROPOUT = 0.1  # before a classifier whose checkpoint states no rate (BERT's hidden_dropout_prob)


def dense_activation_norm(hidden_size: int, activation: str, bias: bool, norm: bool, norm_eps: float) -> nn.Sequential:
    """A C x C dense layer, an activation of `POOLER_ACTIVATIONS`, and (with `norm`) a LayerNorm without bias: BERT's
    pooler (tanh), DistilBERT's pre-classifier (ReLU), ModernBERT's classifier head (GELU, norm)."""
    layers = [nn.Linear(hidden_size, hidden_size, bias=bias), POOLER_ACTIVATIONS[activation]()]
    if norm:
        layers.append(nn.LayerNorm(hidden_size, eps=norm_eps, bias=False))
    return nn.Sequential(*layers)


def _init_linears(linears: list[nn.Linear], stds: list[float], cutoff: float | None = None) -> None:
    """BERT's initialisation (normal weights, zero biases), each layer at its standard deviation, the weights cut
    off at `cutoff` standard deviations where given (ModernBERT's); after all of a head's layers are built, so a
    seed gives the weights it always gave."""
    for linear, std in zip(linears, stds, strict=True):
        normal_init_(linear.weight, std, cutoff)
        if linear.bias is not None:
            nn.init.zeros_(linear.bias)


class MaskedLMHead(nn.Module):
    kind = "mlm"  # its name in checkpoints (encoders.checkpoints.HEAD_KINDS)

    def __init__(self, config: EncoderConfig, word_embeddings: nn.Embedding | None = None,
                 activation: str | None = None, initializer_range: float | None = None) -> None:
        """`activation`: the transform's, where the family fixes it (RoBERTa's LM head always applies GELU);
        unset, the encoder's, as BERT's and DistilBERT's heads do. The transform's dense layer starts from
        N(0, initializer_range) (the config's when None; ModernBERT's smaller, `new_head_stds`), cut off at the
        config's `initializer_cutoff`."""
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.mlm_activation = activation or config.activation
        self.activation = activation_spec(self.mlm_activation).function()
        self.norm = build_norm(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        dense_std = config.initializer_range if initializer_range is None else initializer_range
        normal_init_(self.dense.weight, dense_std, config.initializer_cutoff)
        nn.init.zeros_(self.dense.bias)
        normal_init_(self.decoder.weight, config.initializer_range, config.initializer_cutoff)
        self.tied = word_embeddings is not None
        if word_embeddings is not None:
            self.decoder.weight = word_embeddings.weight

    @property
    def options(self) -> dict[str, Any]:
        """What a checkpoint stores to rebuild this head (and an export checks against the family's)."""
        return {"mlm_activation": self.mlm_activation}

    def forward(self, hidden: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, V) for all tokens, or (N, V) for the N positions selected by `positions`: a boolean
        mask (B, T) or flat indices into the B * T tokens, in row-major order."""
        if positions is not None:
            hidden = hidden.flatten(0, 1)  # (B * T, C)
            hidden = hidden[positions.flatten()] if positions.dtype == torch.bool else hidden[positions]  # (N, C)
        # One addmm with the bias: adding a float32 bias to autocast's bfloat16 logits afterwards would promote
        # the whole (N, V) product to float32 in a separate pass (112 of 1,014 ms of a bert-mini bf16 step).
        return F.linear(self.norm(self.activation(self.dense(hidden))), self.decoder.weight, self.bias)

    def flops_per_token(self, training: bool = False) -> int:
        """Matmul FLOPs per predicted token: the C x C transform and the C x V decoder (x3 with `training`)."""
        c, v = self.dense.in_features, self.decoder.out_features
        forward = 2 * (c * c + c * v)
        return 3 * forward if training else forward

    @classmethod
    def from_pretrained(cls, directory: str | Path | Checkpoint, encoder: nn.Module) -> MaskedLMHead:
        """The MLM head stored beside the encoder in `directory`, tied to `encoder`'s word embeddings."""
        checkpoint = load_checkpoint(directory)
        if checkpoint.untied_decoder:
            raise CheckpointError(f"{checkpoint.source}: its MLM decoder is a matrix of its own (tie_word_embeddings "
                                  f"false), where litbert's MLM head projects onto the word embeddings; loading it "
                                  f"tied would change every prediction. Continue from a checkpoint with tied "
                                  f"embeddings.")
        head = cls(encoder.config, encoder.embeddings.word, activation=checkpoint.head_options.get("mlm_activation"))
        _load_head(head, checkpoint, "mlm")
        return head


class ClassifierHead(nn.Module):
    """What the two classifier heads share: their options, and loading from a checkpoint."""

    kind: str  # its name in checkpoints (encoders.checkpoints.HEAD_KINDS)
    description: str  # its name in messages
    stored_options: tuple[str, ...]  # what it takes from a checkpoint's `head_options`
    num_labels: int

    @property
    def options(self) -> dict[str, Any]:
        """What a checkpoint stores to rebuild this head (and an export checks against the family's)."""
        return {"num_labels": self.num_labels, **{name: getattr(self, name) for name in self.stored_options}}

    @classmethod
    def from_pretrained(cls, directory: str | Path | Checkpoint, num_labels: int | None = None,
                        label_names: Sequence[str] | None = None, **kwargs) -> Self:
        """The head stored in `directory`, shaped by its stored options unless `kwargs` say otherwise. A classifier
        absent from the checkpoint, or of another size than `num_labels`, is freshly initialised (a pretrained
        encoder's pooler or transform alone, as when fine-tuning starts); any other misfit is an error. With
        `label_names` (the data's), a classifier whose checkpoint names its labels is used in their order
        (`_in_label_order`)."""
        checkpoint = load_checkpoint(directory)
        state, num_labels = _classifier_state(checkpoint, cls.kind, num_labels, cls.description, label_names)
        head = cls(checkpoint.config.hidden_size, num_labels, **(_stored_options(checkpoint, cls) | kwargs))
        missing, unexpected = head.load_state_dict(state, strict=False)
        # A classifier the checkpoint does not hold starts fresh; one it holds in part (a weight without its bias)
        # is a damaged checkpoint, not a new head.
        stored = any(name.startswith("classifier.") for name in state)
        fresh = [name for name in missing if name.startswith("classifier.") and not stored]
        if unexpected or len(fresh) != len(missing):
            raise ValueError(f"The {cls.description} in {checkpoint.source} does not fit the head built from its "
                             f"options ({head.options}): missing {sorted(set(missing) - set(fresh))}, unexpected "
                             f"{unexpected}.")
        return head


class SequenceClassificationHead(ClassifierHead):
    kind = "sequence_classification"
    description = "classifier"
    stored_options = POOLER_OPTIONS

    def __init__(
        self,
        hidden_size: int,
        num_labels: int,
        pooling: Pooling = "cls",
        pooler_activation: PoolerActivation = "tanh",
        dropout: float = 0.1,
        initializer_range: float = 0.02,
        pooler_bias: bool = True,
        pooler_norm: bool = False,
        norm_eps: float = 1e-5,
        dropout_before_pooler: bool = False,
        classifier_std: float | None = None,
        init_cutoff: float | None = None,
    ) -> None:
        """`pooler_bias`: the pooler's dense layer has a bias (ModernBERT's `classifier_bias`, off by default there);
        `pooler_norm`: a LayerNorm without bias, of epsilon `norm_eps`, after the activation (ModernBERT's head);
        `dropout_before_pooler`: the dropout also applies to the pooler's input (RoBERTa's head). Where the dropout
        applies changes training only, not the weights, so it is no stored option. The pooler starts from
        N(0, initializer_range), the classifier from N(0, classifier_std) (initializer_range when None), both cut
        off at `init_cutoff` standard deviations where given (ModernBERT's initialisation)."""
        super().__init__()
        check_choice("pooling", pooling, Pooling)
        check_choice("pooler_activation", pooler_activation, POOLER_ACTIVATIONS)
        if num_labels < 1:
            raise ValueError(f"num_labels={num_labels}; use 1 for regression, >= 2 for classification.")
        self.num_labels = num_labels
        self.pooling = pooling
        self.pooler_activation, self.pooler_bias, self.pooler_norm = pooler_activation, pooler_bias, pooler_norm
        self.norm_eps, self.dropout_before_pooler = norm_eps, dropout_before_pooler
        self.pooler = dense_activation_norm(hidden_size, pooler_activation, pooler_bias, pooler_norm, norm_eps)
        self.dropout = Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_labels)
        _init_linears([self.pooler[0], self.classifier], [initializer_range, classifier_std or initializer_range],
                      init_cutoff)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, num_labels) from hidden states (B, T, C)."""
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        elif attention_mask is None:
            pooled = hidden.mean(dim=1)
        else:
            weights = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        if self.dropout_before_pooler:
            pooled = self.dropout(pooled)
        return self.classifier(self.dropout(self.pooler(pooled)))


class TokenClassificationHead(ClassifierHead):
    kind = "token_classification"
    description = "token classifier"
    stored_options = TRANSFORM_OPTIONS

    def __init__(
        self,
        hidden_size: int,
        num_labels: int,
        dropout: float = 0.1,
        initializer_range: float = 0.02,
        transform_activation: PoolerActivation | None = None,
        transform_bias: bool = True,
        transform_norm: bool = False,
        norm_eps: float = 1e-5,
        classifier_std: float | None = None,
        init_cutoff: float | None = None,
    ) -> None:
        """`transform_activation`: every token first goes through a dense layer (with a bias when `transform_bias`),
        this activation and (with `transform_norm`) a LayerNorm without bias of epsilon `norm_eps`, as in
        ModernBERT's token classifier; None: the classifier reads the hidden states directly (BERT's). The transform
        starts from N(0, initializer_range), the classifier from N(0, classifier_std) (initializer_range when None),
        both cut off at `init_cutoff` standard deviations where given (ModernBERT's initialisation)."""
        super().__init__()
        if num_labels < 2:
            raise ValueError(f"num_labels={num_labels}; token classification needs at least 2 labels.")
        if transform_activation is not None:
            check_choice("transform_activation", transform_activation, POOLER_ACTIVATIONS)
        elif transform_norm or not transform_bias:
            raise ValueError(f"transform_norm={transform_norm} and transform_bias={transform_bias} shape a transform, "
                             f"but transform_activation is None (no transform); set an activation or drop them.")
        self.num_labels = num_labels
        self.transform_activation, self.transform_bias = transform_activation, transform_bias
        self.transform_norm, self.norm_eps = transform_norm, norm_eps
        self.transform = None if transform_activation is None else dense_activation_norm(
            hidden_size, transform_activation, transform_bias, transform_norm, norm_eps)
        self.dropout = Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_labels)
        classifier_std = classifier_std or initializer_range
        if self.transform is None:
            _init_linears([self.classifier], [classifier_std], init_cutoff)
        else:
            _init_linears([self.transform[0], self.classifier], [initializer_range, classifier_std], init_cutoff)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, num_labels)."""
        if self.transform is not None:
            hidden = self.transform(hidden)
        return self.classifier(self.dropout(hidden))


def new_head_stds(checkpoint: Checkpoint | None, config: EncoderConfig) -> dict[str, float]:
    """The standard deviations a new head over `checkpoint` (None: over a new encoder) starts at, as transformers
    starts it: its dense layer's (`initializer_range`) and its classifier's (`classifier_std`), both the encoder's
    initializer_range unless the checkpoint's family starts them otherwise (ModernBERT's `Layout.head_init`). From
    `config`, the encoder's as built, as transformers' `_init_weights` reads the config of the model it builds: a
    user's initializer_range and a selection of layers (`select_layers`) count."""
    stds = {"initializer_range": config.initializer_range, "classifier_std": config.initializer_range}
    if checkpoint is not None and checkpoint.head_init is not None:
        stds |= checkpoint.head_init(config)
    return stds


def fine_tuning_head(cls: type[ClassifierHead], checkpoint: Checkpoint | None, config: EncoderConfig,
                     num_labels: int, label_names: Sequence[str] | None = None, **kwargs) -> ClassifierHead:
    """The head a fine-tune of the encoder configured by `config` starts from: the checkpoint's head of `cls.kind`
    when it has one (resuming an exported fine-tuned model; a BERT pooler or a ModernBERT transform is kept either
    way, as transformers does), else a new one. Either has the shape of the checkpoint's family unless `kwargs` say
    otherwise, as transformers' `*ForSequenceClassification` / `*ForTokenClassification` of that checkpoint would:
    DistilBERT's ReLU pooler, ModernBERT's GELU and norm (and its `classifier_pooling`) before either classifier. A
    `dropout` of None is the rate those classes take from the checkpoint's config.json (DistilBERT's
    seq_classif_dropout, 0.2; ModernBERT's classifier_dropout, 0; BERT's hidden_dropout_prob where it states no
    classifier_dropout, read from `config`, so that a hidden_dropout set over the checkpoint moves it too, as
    `from_pretrained(..., hidden_dropout_prob=...)` does), else `CLASSIFIER_DROPOUT`, applied where they
    apply it (RoBERTa's also before its pooler, `dropout_before_pooler`). What the head holds anew starts as those
    classes start it (`new_head_stds`)."""
    kwargs = new_head_stds(checkpoint, config) | {"init_cutoff": config.initializer_cutoff} | kwargs
    if kwargs.get("dropout") is None:
        stored = checkpoint.classifier_dropout if checkpoint is not None else {}
        follows = checkpoint.classifier_dropout_field.get(cls.kind) if checkpoint is not None else None
        kwargs["dropout"] = getattr(config, follows) if follows else stored.get(cls.kind, CLASSIFIER_DROPOUT)
    if cls is SequenceClassificationHead and checkpoint is not None:
        kwargs.setdefault("dropout_before_pooler", checkpoint.dropout_before_pooler)
    if checkpoint is not None and cls.kind in checkpoint.head_states:
        return cls.from_pretrained(checkpoint, num_labels=num_labels, label_names=label_names, **kwargs)
    if checkpoint is not None:
        kwargs = _stored_options(checkpoint, cls) | kwargs
    return cls(config.hidden_size, num_labels, **kwargs)


def _in_label_order(state: dict[str, torch.Tensor], checkpoint: Checkpoint,
                    label_names: list[str]) -> dict[str, torch.Tensor]:
    """A stored classifier's state with its outputs in the order of `label_names` (the data's): rows permuted where
    the checkpoint names the same labels in another order, left out (a new classifier) where it names others. A
    classifier whose labels the checkpoint does not name is kept in its order, as transformers would."""
    stored = checkpoint.label_names
    if stored is None or stored == label_names:
        return state
    if sorted(stored) == sorted(label_names) and len(set(stored)) == len(stored):
        order = torch.tensor([stored.index(name) for name in label_names])
        log.info("%s: its classifier's labels %s are put in the data's order %s", checkpoint.source, stored,
                 label_names)
        return {k: v[order] if k.startswith("classifier.") else v for k, v in state.items()}
    log.warning("%s: its classifier predicts the labels %s, the data has %s: a new classifier is trained",
                checkpoint.source, stored, label_names)
    return _without_classifier(state)


def _without_classifier(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state less its classifier, which then starts fresh (the pooler or transform before it is kept)."""
    return {k: v for k, v in state.items() if not k.startswith("classifier.")}


def _stored_options(checkpoint: Checkpoint, cls: type[ClassifierHead]) -> dict[str, Any]:
    return {k: v for k, v in checkpoint.head_options.items() if k in cls.stored_options}


def _classifier_state(
    checkpoint: Checkpoint, kind: str, num_labels: int | None, description: str,
    label_names: Sequence[str] | None = None,
) -> tuple[dict[str, torch.Tensor], int]:
    """The stored state of a classifier head and the label count to build: `num_labels` when given, else the
    stored one. A stored classifier of other labels (`label_names`, where the checkpoint names its own) or of another
    size is left out of the state, so the new one starts fresh."""
    state = checkpoint.head_states.get(kind, {})
    if label_names is not None and "classifier.weight" in state:
        state = _in_label_order(state, checkpoint, list(label_names))
    stored_labels = state["classifier.weight"].shape[0] if "classifier.weight" in state else None
    num_labels = num_labels or stored_labels
    if num_labels is None:
        raise ValueError(f"{checkpoint.source} holds no {description}; pass num_labels to build a new one.")
    if stored_labels is not None and stored_labels != num_labels:
        log.warning("%s: its %s has %d output%s, the data %d: a new %s is trained", checkpoint.source, description,
                    stored_labels, "s" if stored_labels != 1 else "", num_labels, description)
        state = _without_classifier(state)
    elif stored_labels is not None:
        named = f" of the labels {', '.join(label_names)}" if label_names is not None else ""
        log.info("%s: its %s%s is kept", checkpoint.source, description, named)
    return state, num_labels


def _load_head(head: nn.Module, checkpoint: Checkpoint, kind: str) -> None:
    directory = checkpoint.source
    state = checkpoint.head_states.get(kind)
    if not state:
        raise ValueError(
            f"{directory} holds no {kind} head (found: {sorted(checkpoint.head_states) or 'none'}); "
            f"build a fresh head instead of loading one."
        )
    missing, unexpected = head.load_state_dict(state, strict=False)
    missing = [name for name in missing if not (name == "decoder.weight" and getattr(head, "tied", False))]
    if missing or unexpected:
        raise ValueError(f"The {kind} head in {directory} does not fit: missing {missing}, unexpected {unexpected}.")
