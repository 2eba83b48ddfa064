"""What every task shares: building the encoder from a preset or a checkpoint, the optimizer (fused AdamW by default,
`tasks.optimizers`) with no decay on biases and norms and optionally layer-wise learning rates, linear warmup then a
linear, cosine or warmup-stable-decay schedule (the last ending with trainer.max_time when the time bounds the run),
logging of loss, learning rate and gradient norm, and a stop with a clear error when training diverges (a non-finite
loss or gradient norm) before the optimizer applies it."""

from __future__ import annotations

import dataclasses
import logging
import math
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.strategies import FSDPStrategy
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from data.tokenizers import save_tokenizer
from encoders import Encoder, EncoderConfig, Kernels
from encoders.checkpoints import Checkpoint, load_checkpoint, select_layers
from encoders.choices import check_choice
from encoders.config import check_scheme_settings
from tasks.optimizers import fusable, layer_depths, optimizer_arguments
from tasks.run.timer import HostTimer
from tasks.training_logs import HeldValues, log_value, names_a_training_metric, reaches_a_reader

log = logging.getLogger(__name__)


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss or gradient norm; the optimizer step that would apply it was not taken."""


def read_pretrained(pretrained: str | None, layers: Sequence[int] | str | None = None) -> Checkpoint | None:
    """The checkpoint directory a task starts from, read once for the encoder and its heads; `layers` keeps only
    those encoder blocks ("every_other": DistilBERT's half-depth student; `model.pretrained_layers`)."""
    if pretrained is None:
        if layers is not None:
            raise ValueError(f"model.pretrained_layers={layers!r} picks layers of a pretrained checkpoint, but "
                             f"model.pretrained is not set; set it, or remove model.pretrained_layers.")
        return None
    checkpoint = load_checkpoint(pretrained)
    return checkpoint if layers is None else select_layers(checkpoint, layers, "model.pretrained_layers")


def _encoder_spec_fields() -> list[tuple[str, typing.Any, dataclasses.Field]]:
    hints = typing.get_type_hints(EncoderConfig)
    return [(f.name, Optional[hints[f.name]], dataclasses.field(default=None))  # noqa: UP045 (runtime type)
            for f in dataclasses.fields(EncoderConfig) if f.name != "name"]


def _overrides(spec) -> dict[str, typing.Any]:
    return {k: v for k, v in dataclasses.asdict(spec).items() if k != "preset" and v is not None}


# The CLI schema of the encoder: a preset plus any EncoderConfig field, each None meaning "as in the preset" (or, over
# a pretrained checkpoint, "as in the checkpoint"). Generated from EncoderConfig so a new field is a new command-line
# option without being written twice. The preset defaults to bert-base for a new encoder.
EncoderSpec = dataclasses.make_dataclass(
    "EncoderSpec",
    [("preset", Optional[str], dataclasses.field(default=None))] + _encoder_spec_fields(),  # noqa: UP045
    namespace={
        "__module__": __name__,  # importable by name, so checkpoints can pickle it with the hyperparameters
        "__doc__": "A preset (`bert-mini`, `roberta-base`, ...; bert-base when unset) and overrides of any "
                   "EncoderConfig field.",
        "overrides": _overrides,
        # Over the preset by replace, not as from_name's overrides: settings a scheme does not read are refused by
        # `check_scheme_settings` under their command-line names (model.encoder.rope_base), not EncoderConfig's.
        "build": lambda self: dataclasses.replace(EncoderConfig.from_name(self.preset or "bert-base"),
                                                  **_overrides(self)),
    },
)


Schedule = Literal["linear", "cosine", "constant", "wsd"]


@dataclass
class Optimization:
    """The optimizer, its parameter groups and its learning-rate schedule."""

    learning_rate: float = 1e-4  # the peak; with layer_decay, the head's
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    warmup: float = 0.06  # warmup length: a fraction of the run if < 1 (rounded up), else a number of steps
    schedule: Schedule = "linear"
    # `wsd` only (warmup-stable-decay, the trapezoid of Zhai et al., 2022 and Hu et al., 2024): the length of the
    # final linear decay, a fraction of the run if < 1, else a number of steps; 0.2 when unset. Under
    # trainer.max_time the decay also ends with the time: it begins at (1 - decay) x max_time at the latest.
    decay: float | None = None
    # Where the linear, cosine and wsd decays end, a fraction of the peak (0: they decay to zero).
    min_lr_ratio: float = 0.0
    # Layer-wise learning-rate decay (ELECTRA, DeBERTa): the head at learning_rate, each encoder layer below it at
    # layer_decay times the rate of the layer above, the embeddings lowest (tasks.optimizers). None: one rate.
    layer_decay: float | None = None
    # `adamw` (fused), `adam`, `adafactor`, or the class path of a torch.optim.Optimizer (tasks.optimizers).
    optimizer: str = "adamw"
    # Further arguments of the optimizer's constructor (e.g. {momentum: 0.9} for torch.optim.SGD).
    optimizer_args: dict[str, typing.Any] | None = None

    def __post_init__(self) -> None:
        if self.learning_rate <= 0:
            raise ValueError(f"model.optimization.learning_rate={self.learning_rate:g} must be > 0.")
        for name in ("warmup", "weight_decay"):
            if getattr(self, name) < 0:
                raise ValueError(f"model.optimization.{name}={getattr(self, name):g} must be >= 0.")
        for name in ("warmup", "decay"):  # lengths: a fraction of the run below 1, else whole steps
            length = getattr(self, name)
            if length is not None and length > 1 and length != int(length):
                raise ValueError(f"model.optimization.{name}={length:g}: a length of 1 or more is a number of steps, "
                                 f"a whole number; give {math.floor(length)} or {math.ceil(length)} steps, or a "
                                 f"fraction of the run below 1.")
        check_choice("Optimization.schedule", self.schedule, Schedule)
        if self.decay is not None and self.schedule != "wsd":
            raise ValueError(f"Optimization.decay={self.decay} is the decay length of the `wsd` schedule; "
                             f"schedule={self.schedule!r} does not read it. Remove it or set schedule: wsd.")
        if self.decay is not None and self.decay <= 0:
            raise ValueError(f"Optimization.decay={self.decay} must be > 0.")
        if not 0 <= self.min_lr_ratio < 1:
            raise ValueError(f"Optimization.min_lr_ratio={self.min_lr_ratio} must lie in [0, 1): the fraction of the "
                             f"peak learning rate the decay ends at.")
        if self.min_lr_ratio and self.schedule == "constant":
            raise ValueError(f"Optimization.min_lr_ratio={self.min_lr_ratio} is where a decay ends, but "
                             f"schedule='constant' does not decay. Remove it or choose linear, cosine or wsd.")
        if self.layer_decay is not None and not 0 < self.layer_decay <= 1:
            raise ValueError(f"Optimization.layer_decay={self.layer_decay} must lie in (0, 1] (0.8-0.9 is usual); "
                             f"unset, every layer trains at learning_rate.")
        optimizer_arguments(self)  # a bad name or an argument the optimizer does not take, refused now

    @staticmethod
    def steps(length: float, total: int) -> int:
        """A length given as a fraction of the run (< 1) or a number of steps, in steps, within [1, total]."""
        return max(1, min(int(length * total) if length < 1 else int(length), total))

    def warmup_steps(self, total: int) -> int:
        """The warmup in steps, as transformers' `Trainer` counts it (`TrainingArguments.get_warmup_steps`): a
        fraction of the run rounded up, a number of steps as given, 0 for none; at most the run."""
        if self.warmup == 0:
            return 0
        steps = math.ceil(self.warmup * total) if self.warmup < 1 else int(self.warmup)
        if steps > total:
            rank_zero_warn(f"model.optimization.warmup={self.warmup:g} steps is longer than the run's {total} "
                           f"steps: the warmup ends with the run, at the peak learning rate. Give a shorter warmup "
                           f"or a fraction of the run (e.g. 0.1).")
        return min(steps, total)

    def schedule_lengths(self, total: float, max_time: float | None) -> tuple[float, int, int, float | None]:
        """(run, warmup, decay) in steps and the `wsd` decay in seconds under `max_time` (None otherwise), for a run
        of `total` optimizer steps (inf where trainer.max_time alone bounds it; then the settings that are fractions
        of the step count are refused)."""
        length = 0.2 if self.decay is None else self.decay
        if not math.isfinite(total):
            fix = "or set trainer.max_steps (or max_epochs)"
            if max_time is None:  # max_epochs and max_steps -1: a run that trains until it is stopped
                bound, fix = ("nothing bounds this run (trainer.max_epochs and trainer.max_steps are -1, and "
                              "trainer.max_time is unset: it trains until stopped)",
                              "or set trainer.max_steps, max_epochs or max_time")
                if self.schedule != "constant":
                    raise ValueError(f"model.optimization.schedule={self.schedule!r} decays towards the run's end, "
                                     f"but {bound}. Use schedule: constant, {fix}.")
            else:
                bound = "only trainer.max_time bounds this run"
            if self.schedule in ("linear", "cosine"):
                raise ValueError(f"model.optimization.schedule={self.schedule!r} decays over the run's steps, but "
                                 f"{bound}. Use schedule: wsd (its decay ends with max_time) or constant, {fix}.")
            if 0 < self.warmup < 1:
                raise ValueError(f"model.optimization.warmup={self.warmup:g} is a fraction of the run's steps, but "
                                 f"{bound}: give the warmup in steps (e.g. 500), {fix}.")
            if length >= 1:
                raise ValueError(f"model.optimization.decay={length:g} steps cannot be placed at the end of a run "
                                 f"that only trainer.max_time bounds: give it as a fraction of max_time (e.g. 0.2), "
                                 f"{fix}.")
            decay_seconds = length * max_time if self.schedule == "wsd" and max_time is not None else None
            return math.inf, self.warmup_steps(total), 0, decay_seconds
        total = max(1, int(total))
        decay = self.steps(length, total)
        decay_seconds = None
        if self.schedule == "wsd" and max_time is not None:
            decay_seconds = max_time * (length if length < 1 else decay / total)
        return total, self.warmup_steps(total), decay, decay_seconds


# Checkpoints store these with the hyperparameters; Lightning reloads checkpoints with torch.load(weights_only=True),
# which unpickles only allowlisted classes. Allowlisting these keeps resuming safe without weights_only=False.
torch.serialization.add_safe_globals([EncoderSpec, Kernels, Optimization])


def saved_optimization(checkpoint: dict[str, typing.Any]) -> Optimization | None:
    """The optimization settings a training checkpoint was written with, None where it does not say (written before
    they existed). A task built in Python saves its `Optimization`; one that LightningCLI built saves the config's
    values, a dict of its fields, or None where the config left the defaults."""
    hparams = checkpoint.get("hyper_parameters", {})
    if "optimization" not in hparams:
        return None
    saved = hparams["optimization"]
    if saved is None:
        return Optimization()
    if isinstance(saved, dict):
        fields = {field.name for field in dataclasses.fields(Optimization)}
        settings = {name: value for name, value in saved.items() if name in fields}
        if isinstance(settings.get("betas"), list):
            settings["betas"] = tuple(settings["betas"])
        return Optimization(**settings)
    return saved if isinstance(saved, Optimization) else None


def saved_epochs(checkpoint: dict[str, typing.Any]) -> tuple[int, int] | None:
    """The epochs a training checkpoint's run had begun and finished (Lightning's fit loop counts: an epoch stopped
    at max_steps is begun, not finished), None where it does not say."""
    loop = (checkpoint.get("loops") or {}).get("fit_loop") or {}
    counts = (loop.get("epoch_progress") or {}).get("total") or {}
    if "started" not in counts or "processed" not in counts:
        return None
    return int(counts["started"]), int(counts["processed"])


def parameter_shapes(config: EncoderConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every weight of an encoder with this configuration (built on the meta device: no memory)."""
    with torch.device("meta"):
        return {name: tuple(value.shape) for name, value in Encoder(config).state_dict().items()}


def _keeps_shapes(base: EncoderConfig, overrides: dict[str, typing.Any], shapes: dict[str, tuple[int, ...]]) -> bool:
    try:
        return parameter_shapes(dataclasses.replace(base, **overrides)) == shapes
    except ValueError:  # not a valid configuration alone
        return False


def over_checkpoint(encoder: EncoderSpec | None, pretrained: Checkpoint, setting: str = "model.encoder") -> Checkpoint:
    """`pretrained` with the spec's overrides applied to its configuration. Overrides that leave every weight's
    name and shape unchanged (dropouts, `rope_base`, `norm_eps`, ...) apply; the others, and a preset, are refused:
    the weights define those. `initializer_range` and `initializer_cutoff` set how the weights a task adds start
    (a new classifier or MLM head), as transformers' `from_pretrained(..., initializer_range=...)` does."""
    if encoder is None:
        return pretrained
    base = pretrained.config
    if encoder.preset is not None:
        raise ValueError(
            f"{setting}.preset={encoder.preset!r} cannot apply together with a pretrained checkpoint "
            f"({pretrained.source}): its weights define the architecture ({base.num_layers} layers, hidden size "
            f"{base.hidden_size}). Remove {setting}.preset, or drop the checkpoint to train a new {encoder.preset}."
        )
    overrides = encoder.overrides()
    if not overrides:
        return pretrained
    if overrides.get("pad_token_id", base.pad_token_id) != base.pad_token_id:
        raise ValueError(f"{setting}.pad_token_id={overrides['pad_token_id']}: the padding row of {pretrained.source} "
                         f"is {base.pad_token_id}, trained as such; remove the setting.")
    shapes = parameter_shapes(base)
    # All at once first: settings that only hold together (local_window with global_every) are valid only so.
    refused = []
    if parameter_shapes(dataclasses.replace(base, **overrides)) != shapes:
        refused = [name for name, value in overrides.items() if not _keeps_shapes(base, {name: value}, shapes)]
        refused = refused or list(overrides)
    if refused:
        changes = ", ".join(f"{name}={overrides[name]!r} (checkpoint: {getattr(base, name)!r})" for name in refused)
        raise ValueError(
            f"{setting}: {changes} would change the shapes of the pretrained weights in {pretrained.source}. Only "
            f"settings that keep every weight (dropouts, rope_base, norm_eps, ...) apply over a checkpoint; remove "
            f"these overrides, or drop the checkpoint to train a new encoder with them."
        )
    config = dataclasses.replace(base, **overrides)
    check_scheme_settings(config, overrides, setting)
    log.info("Settings applied over the checkpoint %s: %s", pretrained.source,
             ", ".join(f"{k}={v!r} (was {getattr(base, k)!r})" for k, v in overrides.items()))
    return dataclasses.replace(pretrained, config=config)


def build_encoder(
    encoder: EncoderSpec | None, pretrained: Checkpoint | None, vocab_size: int | None,
    pad_token_id: int | None = None, kernels: Kernels | None = None,
) -> Encoder:
    """An encoder from a checkpoint read with `load_checkpoint` (`pretrained`, with the spec's shape-preserving
    overrides applied) or a preset spec; `vocab_size` (from the tokenizer) sizes a new encoder's embeddings and must
    fit in a pretrained one's; `pad_token_id` (the tokenizer's) is a new encoder's padding row, the one embedding
    that starts at zero and is never trained (a pretrained encoder keeps its own: its weights were trained so).
    Either computes with `kernels`."""
    if pretrained is not None:
        pretrained = over_checkpoint(encoder, pretrained)
        model = Encoder.from_pretrained(pretrained, kernels)
        if vocab_size is not None and vocab_size > model.config.vocab_size:
            raise ValueError(
                f"The tokenizer has {vocab_size} tokens but the checkpoint {pretrained.source} embeds only "
                f"{model.config.vocab_size}; use the checkpoint's own tokenizer."
            )
        return model
    spec = encoder if encoder is not None else EncoderSpec()
    config = spec.build()
    check_scheme_settings(config, spec.overrides(), "model.encoder")
    from_data = {}  # replaced together: a preset's padding id may lie past a small tokenizer's vocabulary
    if vocab_size is not None:
        if spec.vocab_size is not None and vocab_size > spec.vocab_size:
            raise ValueError(
                f"The tokenizer has {vocab_size} tokens but model.encoder.vocab_size={spec.vocab_size}; "
                f"remove the override (the vocabulary size is taken from the tokenizer) or raise it."
            )
        from_data["vocab_size"] = spec.vocab_size or vocab_size
    if pad_token_id is not None:
        if spec.pad_token_id is not None and spec.pad_token_id != pad_token_id:
            raise ValueError(
                f"model.encoder.pad_token_id={spec.pad_token_id}, but the tokenizer pads with id {pad_token_id}; "
                f"row {spec.pad_token_id} would stay zero and untrained while it embeds a real token. Remove the "
                f"override (the padding id is taken from the tokenizer)."
            )
        from_data["pad_token_id"] = pad_token_id
    return Encoder(dataclasses.replace(config, **from_data), kernels)


def validation_prefixes(split_names: Sequence[str]) -> list[str]:
    """Log prefixes of the validation sets: the first is `val` (`validation`, MNLI's `validation_matched`, IMDB's
    `test`), each other `val_` and its name after `validation_` (MNLI's `val_mismatched`)."""
    return ["val"] + [f"val_{split.removeprefix('validation').removeprefix('_')}" for split in split_names[1:]]


def example_rows(batch: dict[str, typing.Any]) -> slice:
    """The rows of a batch that hold examples: all but the filler rows that `data.pad_last_batch` appends to an
    epoch's last batch to keep its shape, which no loss, metric, count or prediction may see. The collator counts
    the examples on the host (`num_examples`), so this is a slice, not a mask read off the device (a host sync).
    Filler rows have no label (-100): token-level losses and metrics ignore them without it."""
    return slice(batch.get("num_examples"))


def sequence_lengths(batch: dict[str, torch.Tensor]) -> list[int]:
    """Real (non-padding) tokens of each example of a batch."""
    mask = batch.get("attention_mask")
    if mask is None:
        rows = range(batch["input_ids"].shape[0])[example_rows(batch)]
        return [batch["input_ids"].shape[1]] * len(rows)
    return mask[example_rows(batch)].sum(dim=1).tolist()


def lr_lambda(step: int, warmup_steps: int, total_steps: float, schedule: str, decay_steps: int = 0,
              min_lr_ratio: float = 0.0, time_left: float = 1.0) -> float:
    """Multiplier of the peak learning rate: linear warmup from 0 at the first step (`step / warmup_steps`, as
    BERT's optimizer and transformers' schedules have it, so equal settings give the `Trainer`'s learning rates step
    for step), then linear or cosine decay to `min_lr_ratio` at the end (transformers' `cosine_with_min_lr`), or
    (`wsd`) the peak held until the last `decay_steps` steps, which decay linearly to `min_lr_ratio`. `time_left`
    is the part of a `wsd` decay timed by trainer.max_time still to go (1 until it begins, 0 at max_time): the
    decay follows the steps or the time, whichever is further along."""
    if step < warmup_steps:
        return step / warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule == "wsd":
        left = max(0.0, min(1.0, (total_steps - step) / max(1, decay_steps), time_left))
    else:
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        left = 0.5 * (1.0 + math.cos(math.pi * progress)) if schedule == "cosine" else 1.0 - progress
    return min_lr_ratio + (1.0 - min_lr_ratio) * left


def parameter_groups(module: nn.Module, weight_decay: float, learning_rate: float | None = None,
                     layer_decay: float | None = None) -> list[dict]:
    """Weight decay on matrices only: biases, norm scales and 1-d parameters are not decayed (BERT's recipe). With
    `layer_decay` (`module.encoder`'s layers, `tasks.optimizers.layer_depths`), a pair of groups per depth, each at
    learning_rate * layer_decay ** (num_layers + 1 - depth), the head's first (the rate logged as train/lr)."""
    depths = layer_depths(module.encoder) if layer_decay is not None else {}
    top = len(module.encoder.blocks) + 1 if layer_decay is not None else 0  # the head's depth
    groups: dict[tuple[int, bool], list[nn.Parameter]] = {(top, True): [], (top, False): []}
    seen = set()
    for name, param in module.named_parameters():
        if not param.requires_grad or id(param) in seen:
            continue
        seen.add(id(param))
        decays = not (param.ndim < 2 or name.endswith(".bias"))
        groups.setdefault((depths.get(id(param), top), decays), []).append(param)
    if layer_decay is None:
        return [{"params": groups[top, True], "weight_decay": weight_decay},
                {"params": groups[top, False], "weight_decay": 0.0}]
    return [{"params": params, "weight_decay": weight_decay if decays else 0.0,
             "lr": learning_rate * layer_decay ** (top - depth), "depth": depth}
            for (depth, decays), params in sorted(groups.items(), key=lambda item: (-item[0][0], not item[0][1]))
            if params]


def tuple_or_value(value: typing.Any) -> typing.Any:
    """A list as a tuple, to compare a setting read from a config (betas as a list) with one saved as a tuple."""
    return tuple(value) if isinstance(value, list) else value


def _loss_scaler(trainer: L.Trainer) -> bool:
    """Whether the precision scales the loss (fp16 mixed precision), leaving gradients scaled until the step."""
    return getattr(trainer.precision_plugin, "scaler", None) is not None


# EncoderConfig fields a resumed run may change: regularisation and initialisation (done before the weights were
# trained). Every other field, and every head option, changes what the trained weights compute. (Kernel choices are
# no fields: a run gives its own `Kernels`.)
DROPOUT_FIELDS = ("hidden_dropout", "attention_dropout", "attention_output_dropout", "attention_output_rate",
                  "feed_forward_dropout")
RESUMABLE_ENCODER_FIELDS = (*DROPOUT_FIELDS, "initializer_range", "initializer_cutoff", "name")
# The task settings that choose a head option, for the message when a resume would change one.
HEAD_SETTINGS = {"pooling": "model.pooling", "pooler_activation": "model.pooler_activation",
                 "num_labels": "the label count (the data's label set)"}


# Marks a fused AdamW's `grad_scale` as litbert's clipping factor (`EncoderTask.configure_gradient_clipping`).
CLIP_SCALE = "_litbert_clip_scale"


def _forget_grad_scale(optimizer: torch.optim.Optimizer, args: typing.Any, kwargs: typing.Any) -> None:
    """After a step: the clipping factor `EncoderTask.configure_gradient_clipping` gave the fused AdamW was that
    step's alone. A `grad_scale` that fp16's loss scaler set is the scaler's to remove (it deletes it after the step,
    and failed on a second removal)."""
    if optimizer.__dict__.pop(CLIP_SCALE, False):
        optimizer.__dict__.pop("grad_scale", None)


def _split(split: tuple[int | None, int | None, int]) -> str:
    """(processes, data.batch_size, accumulate_grad_batches) in words, for messages."""
    processes, batch, accumulation = split
    batch_text = "" if batch is None else f" x data.batch_size {batch}"
    return f"{processes} process(es){batch_text} x trainer.accumulate_grad_batches {accumulation}"


def _keeping(global_batch: int, now: tuple[int, int | None, int], saved: tuple[int, int | None, int]) -> str:
    """How a resume on this run's number of processes keeps the checkpoint's global batch: this run's batch size
    with more or fewer batches a step, else the checkpoint's, else one batch of it all."""
    processes, batch, _ = now
    if batch is None or global_batch % processes:
        return (f"The global batch of {global_batch} does not divide among {processes} process(es): resume on a "
                f"number of processes that divides it (as {saved[0]} does)")
    share = global_batch // processes
    batch = next((size for size in (batch, saved[1]) if size and share % size == 0), share)
    return (f"Resume with --data.batch_size {batch} --trainer.accumulate_grad_batches {share // batch} so that the "
            f"global batch stays {global_batch}")


def _fused_adam(optimizer: torch.optim.Optimizer) -> bool:
    return bool(optimizer.defaults.get("fused")) and isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW)


class EncoderTask(L.LightningModule):
    """Base of every litbert task. Subclasses build `self.encoder` and `self.head`, and implement the steps."""

    #: The validation metric that picks the best checkpoint, and whether lower ("min") or higher ("max") is better.
    monitor: tuple[str, Literal["min", "max"]] = ("val/loss", "min")
    #: The setting that configures `self.encoder`, for messages.
    encoder_setting = "model.encoder"

    def __init__(self, optimization: Optimization | None = None) -> None:
        super().__init__()
        self.optimization = optimization if optimization is not None else Optimization()
        # The optimizer step whose batches `log_training` averages, and each value's weighted sum and weight over them.
        self._window: tuple[int, dict[str, tuple[torch.Tensor, torch.Tensor]]] = (-1, {})
        # A token loss's scored tokens in this optimizer step's batches so far, on the device (`token_loss`); None
        # while the step's loss is no sum over tokens.
        self._tokens: torch.Tensor | None = None
        # The batch mean of a token loss whose sum `token_loss` returned, for the divergence check.
        self._token_mean: torch.Tensor | None = None
        # A resumed optimizer's groups with this run's settings (`_resume_with_own_rates`), for `on_train_start`.
        self._resumed_groups: list[dict[str, typing.Any]] | None = None
        # `self.parameters()` for the length of a fit (`on_before_optimizer_step`), gathered at its first step.
        self._fit_parameters: tuple[nn.Parameter, ...] | None = None
        # The training values of the batches that did not log, and whether a callback reads them at every batch
        # (`tasks.training_logs`; set as each fit starts).
        self._held = HeldValues()
        self._logs_every_batch = False

    def configure_optimizers(self):
        opt = self.optimization
        trainer = self.trainer
        cls, arguments = optimizer_arguments(opt)
        if fusable(cls, arguments):
            # The fused kernel: one pass over all parameters instead of a chain of per-tensor ops. On this 2-core
            # CPU an SST-2 step of MiniLM took 0.61 s with it against 0.96 s without (bench/finetune.py,
            # BENCHMARKS.md). Clipping by norm or by value keeps it (`configure_gradient_clipping`). Lightning clips
            # under fp16's loss scaler (whose gradients are still scaled when clipped, as the fused kernel unscales
            # only inside its step), and refuses a fused optimizer there.
            arguments["fused"] = not (bool(trainer.gradient_clip_val) and _loss_scaler(trainer))
        optimizer = cls(parameter_groups(self, opt.weight_decay, opt.learning_rate, opt.layer_decay), **arguments)
        optimizer.register_step_post_hook(_forget_grad_scale)
        # Lightning's Timer holds trainer.max_time and the training time so far, kept in every checkpoint.
        timer = next((c for c in trainer.callbacks if isinstance(c, Timer) and c.time_remaining() is not None), None)
        max_time = None if timer is None else timer.time_elapsed() + timer.time_remaining()
        total, warmup, decay, decay_seconds = opt.schedule_lengths(trainer.estimated_stepping_batches, max_time)
        self._timer, self._elapsed = (timer if decay_seconds is not None else None), 0.0

        def multiplier(step: int) -> float:
            time_left = 1.0 if decay_seconds is None else (max_time - self._elapsed) / decay_seconds
            return lr_lambda(step, warmup, total, opt.schedule, decay, opt.min_lr_ratio, time_left)

        # A function, not an object: LambdaLR would store an object's attributes in checkpoints and restore them
        # over a resumed run's settings. The time a resumed run goes on from is the Timer's, restored by Lightning.
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_train_start(self) -> None:
        """A resumed run's first step at this run's schedule. The restored optimizer holds the rate the checkpoint's
        schedule set for that step: a schedule, warmup or length (`trainer.max_steps`) changed on resuming would
        apply only from the next step. The rate is the schedule's at the restored step again, which an unchanged
        run's is already. A decay that ends with `trainer.max_time` keeps the restored rate: it is the one for the
        time the step was saved at."""
        self._tokens = self._token_mean = None  # a fit stopped within a step left its count
        self._fit_parameters = None  # gathered again: the strategy or a callback may have wrapped the modules
        self._held.clear()
        self._logs_every_batch = names_a_training_metric(self.trainer)
        groups, self._resumed_groups = self._resumed_groups, None
        if groups is not None and self.trainer.optimizers:
            # Under FSDP, Lightning loads the optimizer state with the checkpoint, before `on_load_checkpoint` gives
            # its groups this run's settings, and not again: the groups take them here (other strategies have them).
            optimizer = self.trainer.optimizers[0]
            if len(groups) == len(optimizer.param_groups):
                for own, saved in zip(optimizer.param_groups, groups, strict=True):
                    own.update(saved)
        if self.trainer.ckpt_path is None or getattr(self, "_timer", None) is not None:
            return
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
                rates = [base * rate(scheduler.last_epoch)
                         for base, rate in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)]
                for group, value in zip(scheduler.optimizer.param_groups, rates, strict=True):
                    group["lr"] = value
                scheduler._last_lr = rates

    def lr_scheduler_step(self, scheduler: typing.Any, metric: typing.Any) -> None:
        """Step the schedule, telling it the training time first where a `wsd` decay ends with trainer.max_time:
        rank 0's time, so that every rank sets the same learning rate (under DDP a broadcast each step, over the hosts
        with train.py's `HostTimer`, as it agrees on the stop; on one device nothing is sent)."""
        timer = getattr(self, "_timer", None)
        if timer is not None:
            self._elapsed = (timer.rank_zero_elapsed() if isinstance(timer, HostTimer)
                             else self.trainer.strategy.broadcast(timer.time_elapsed()))
        super().lr_scheduler_step(scheduler, metric)

    def architecture(self) -> dict[str, dict[str, typing.Any]]:
        """What the weights compute beyond their shapes: the encoder's configuration (less the fields a resume may
        change) and the head's options. Stored in every training checkpoint, and compared on resuming."""
        config = {k: v for k, v in self.encoder.config.to_dict().items() if k not in RESUMABLE_ENCODER_FIELDS}
        if self.encoder.config.max_sequence_length is None:  # then only a training length: nothing depends on it
            config.pop("max_position_embeddings")
        return {"encoder": config, "head": dict(getattr(self.head, "options", {}))}

    def resumable_settings(self) -> dict[str, typing.Any]:
        """The settings a resumed run may change without changing what the weights compute, by their names on the
        command line: the dropouts, the precision and gradient clipping, and the task's own (`objective_settings`).
        Stored in every training checkpoint; a resume that changes one says so, as it does for a changed learning
        rate."""
        config = self.encoder.config
        settings = {f"{self.encoder_setting}.{name}": getattr(config, name)
                    for name in DROPOUT_FIELDS}
        head_dropout = getattr(getattr(self.head, "dropout", None), "p", None)  # a classifier's
        if head_dropout is not None:
            settings["model.classifier_dropout"] = head_dropout
        if self._trainer is not None:  # how the steps compute and clip, which a resume may change (another machine)
            settings["trainer.precision"] = self.trainer.precision
            settings["trainer.gradient_clip_val"] = self.trainer.gradient_clip_val
        return settings | self.objective_settings()

    def objective_settings(self) -> dict[str, typing.Any]:
        """The training objective's settings that a resume may change (a distillation's temperature and loss
        weights), by their names on the command line."""
        return {}

    def on_save_checkpoint(self, checkpoint: dict[str, typing.Any]) -> None:
        self.check_divergence()  # no checkpoint of a run that diverged (its weights stay finite, but it failed)
        checkpoint["litbert_architecture"] = self.architecture()
        checkpoint["litbert_resumable"] = self.resumable_settings()
        if self._trainer is not None:  # with the data's batch size, what one optimizer step averages over
            checkpoint["litbert_accumulate_grad_batches"] = self.trainer.accumulate_grad_batches
            checkpoint["litbert_processes"] = self.trainer.world_size
        teacher = getattr(self, "teacher", None)
        state = checkpoint.get("state_dict")
        if teacher is not None and state is not None:
            # A distillation's frozen teacher is read from model.teacher, never trained: each checkpoint keeps a hash
            # of its weights instead of a copy (BERT-base's would add 440 MB to every file).
            for key in [key for key in state if key.startswith("teacher.")]:
                del state[key]
            checkpoint["litbert_teacher"] = teacher.digest()

    def on_load_checkpoint(self, checkpoint: dict[str, typing.Any]) -> None:
        """Refuse to resume a checkpoint into a model that computes something else with the same weights: a
        position scheme, norm or activation changed on the command line, or a head whose default changed since the
        run started (a DistilBERT classifier's pooler became ReLU). Checkpoints from before it was stored pass.
        A distillation resumes with the teacher it started with (the checkpoint holds its hash, not its weights)."""
        self._check_optimizer(checkpoint)
        self._check_global_batch(checkpoint)
        self._check_steps(checkpoint)
        rates, settings = self._resume_with_own_rates(checkpoint), self._changed_settings(checkpoint)
        states = checkpoint.get("optimizer_states") or []
        if self._trainer is not None and self.trainer.state.fn == "fit" and len(states) == 1:
            self._resumed_groups = [{key: value for key, value in group.items() if key != "params"}
                                    for group in states[0].get("param_groups", [])]
        if (rates or settings) and self._trainer is not None and self.trainer.state.fn == "fit":  # not evaluations
            schedule = " (the schedule goes on from its step, at the new rate)" if rates else ""
            print(f"litbert: resuming with {', '.join(rates + settings)}; from its next step{schedule}.", flush=True)
        teacher = getattr(self, "teacher", None)
        state = checkpoint.get("state_dict")
        if teacher is not None and state is not None:
            saved_teacher = checkpoint.get("litbert_teacher")
            if saved_teacher is not None and saved_teacher != teacher.digest():
                raise ValueError(f"The checkpoint to resume was distilled from another teacher than model.teacher="
                                 f"{self.hparams.get('teacher')}: resume with the teacher it started with, or start "
                                 f"a new run.")
            for name, tensor in teacher.state_dict().items():
                state.setdefault(f"teacher.{name}", tensor)
        saved = checkpoint.get("litbert_architecture")
        if saved is None:
            self._check_head_names(checkpoint)
            return
        now = self.architecture()
        changed = [f"{self.encoder_setting}.{name}: {value!r} in the checkpoint, {now['encoder'].get(name)!r} now"
                   for name, value in saved["encoder"].items() if now["encoder"].get(name) != value]
        changed += [f"{HEAD_SETTINGS.get(name, f'the head option {name}')}: {value!r} in the checkpoint, "
                    f"{now['head'].get(name)!r} now"
                    for name, value in saved["head"].items() if now["head"].get(name) != value]
        if changed:
            raise ValueError(
                "The checkpoint to resume was trained with a different model: " + "; ".join(changed) + ". Its "
                "weights would compute something else in this one. Resume with these set as in the checkpoint, or "
                "start a new run."
            )

    def _check_global_batch(self, checkpoint: dict[str, typing.Any]) -> None:
        """One optimizer step averages over processes x data.batch_size x accumulate_grad_batches examples, the
        global batch. A resumed run may split it otherwise (8 processes -> 4, after a node was lost) where the data's
        batch order does not depend on the split (`order_per_process`): each step then takes the examples the run's
        would have, and the data position is converted (`data.loading.ResumableLoader`). Any other change is
        refused: steps would average over other examples, or skip and repeat some. A resume that trains no step
        (at trainer.max_steps) may change them all."""
        if not self._trains_on(checkpoint):
            return
        data = self.trainer.datamodule
        now = (self.trainer.world_size, getattr(data, "batch_size", None), self.trainer.accumulate_grad_batches)
        # Values a checkpoint does not keep (written before they were) are taken as this run's.
        kept = (checkpoint.get("litbert_processes"),
                data.saved_batch_size(checkpoint) if hasattr(data, "saved_batch_size") else None,
                checkpoint.get("litbert_accumulate_grad_batches"))
        saved = tuple(own if value is None else value for value, own in zip(kept, now, strict=True))
        if saved == now:
            return
        global_batch, this_batch = (math.prod(value or 1 for value in split) for split in (saved, now))
        order = (data.order_per_process() if hasattr(data, "order_per_process") else
                 "this run's data is no litbert datamodule, which would say whether its batches depend on the split")
        if order is None and this_batch == global_batch:
            print(f"litbert: resuming on {_split(now)} (the checkpoint's: {_split(saved)}), the same global batch of "
                  f"{global_batch}: each step takes the examples the run's would, from the converted data position; "
                  f"not bit for bit: sums run in another order, dropout draws other masks, a distillation's loss "
                  f"terms average each batch's tokens, and an epoch's last, short step is split otherwise.", flush=True)
            return
        if order is None:
            why = f"each step would average over {this_batch} examples instead of {global_batch}. " + _keeping(
                global_batch, now, saved)
        else:
            why = (f"{order}, so another split trains on other batches than the run's. Resume on {saved[0]} "
                   f"process(es) with --data.batch_size {saved[1]} --trainer.accumulate_grad_batches {saved[2]}")
        raise ValueError(f"The checkpoint to resume averaged each step over {_split(saved)}; this run's is "
                         f"{_split(now)}: {why}, or start a new run from its weights "
                         f"{self._way_to_weights(checkpoint)}.")

    def _trains_on(self, checkpoint: dict[str, typing.Any]) -> bool:
        """Whether this fit continues training from `checkpoint`: not an evaluation, and not a resume at or past
        trainer.max_steps or trainer.max_epochs, which trains no step and only evaluates and exports the weights (on
        any number of processes, with any accumulation)."""
        if self._trainer is None or self.trainer.state.fn != "fit":
            return False
        return self._training_bound(checkpoint) is None

    def _training_bound(self, checkpoint: dict[str, typing.Any]) -> str | None:
        """The setting that `checkpoint` has already reached (`trainer.max_steps=N`), so that a fit resumed from it
        trains no step; None where it trains on."""
        step, max_steps, max_epochs = checkpoint.get("global_step"), self.trainer.max_steps, self.trainer.max_epochs
        if step is not None and 0 <= max_steps <= step:
            return f"trainer.max_steps={max_steps}"
        epochs = saved_epochs(checkpoint)
        if epochs is not None and max_epochs is not None and 0 <= max_epochs <= epochs[1]:
            return f"trainer.max_epochs={max_epochs}"
        return None

    @staticmethod
    def _way_to_weights(checkpoint: dict[str, typing.Any]) -> str:
        """How a new run gets a checkpoint's weights: from the run's export, which a resume that trains no step
        writes (an interrupted run has none yet)."""
        step = checkpoint.get("global_step")
        return (f"(--model.pretrained on its export; an unfinished run is exported as it is by this command with "
                f"--trainer.max_steps {step}, which trains no step)") if step else "(--model.pretrained on its export)"

    def _check_steps(self, checkpoint: dict[str, typing.Any]) -> None:
        """A resume to a trainer.max_steps below the checkpoint's step, or a trainer.max_epochs below the epochs it
        has begun, would train no step, and evaluate and export weights trained for more than the run was given. A
        resume at its bound (a finished run) trains no step either, and says so."""
        step = checkpoint.get("global_step")
        if step is None or self._trainer is None or self.trainer.state.fn != "fit":
            return
        if 0 < self.trainer.max_steps < step:
            raise ValueError(f"trainer.max_steps={self.trainer.max_steps}, but the checkpoint to resume is at step "
                             f"{step}: its weights were trained for more steps than that. Resume with "
                             f"--trainer.max_steps {step} or more, or fine-tune an earlier checkpoint's weights in a "
                             f"new run.")
        epochs, max_epochs = saved_epochs(checkpoint), self.trainer.max_epochs
        if epochs is not None and max_epochs is not None and 0 <= max_epochs < epochs[0]:
            raise ValueError(f"trainer.max_epochs={max_epochs}, but the checkpoint to resume (step {step}) has begun "
                             f"epoch {epochs[0]}: its weights were trained for more epochs than that. Resume with "
                             f"--trainer.max_epochs {epochs[0]} or more, or fine-tune an earlier checkpoint's weights "
                             f"in a new run.")
        bound = self._training_bound(checkpoint)
        if bound is not None and self.trainer.is_global_zero:
            print(f"litbert: the checkpoint to resume (step {step}) has reached {bound}: its training is done, so no "
                  f"step is trained; the run evaluates its best checkpoint and writes its results again. Raise "
                  f"{bound.split('=')[0]} to train on.", flush=True)

    def _changed_settings(self, checkpoint: dict[str, typing.Any]) -> list[str]:
        """The dropouts and objective settings (`resumable_settings`) this resume changes, each as `name=value (the
        checkpoint's: value)`: they apply from its next step."""
        saved = checkpoint.get("litbert_resumable")  # none in checkpoints from before they were kept
        if saved is None:
            return []
        return [f"{name}={value!r} (the checkpoint's: {saved[name]!r})"
                for name, value in self.resumable_settings().items() if name in saved and saved[name] != value]

    def _check_optimizer(self, checkpoint: dict[str, typing.Any]) -> None:
        """A resumed run restores the optimizer's state: it must be the same optimizer, with the same parameter
        groups (torch would refuse another group count with a message about sizes, or apply the saved layer rates
        over new ones without a word)."""
        saved = saved_optimization(checkpoint)
        if not checkpoint.get("optimizer_states") or saved is None:
            return
        # getattr with the class defaults: a checkpoint from before these settings existed used AdamW, one rate.
        changed = [f"model.optimization.{name}: {getattr(saved, name)!r} in the checkpoint, "
                   f"{getattr(self.optimization, name)!r} now"
                   for name in ("optimizer", "optimizer_args", "layer_decay")
                   if getattr(saved, name) != getattr(self.optimization, name)]
        if changed:
            raise ValueError("The checkpoint to resume was trained with another optimizer setup: " + "; ".join(changed)
                             + ". Its optimizer state does not fit this one. Resume with these set as in the "
                             "checkpoint, or start a new run from its weights (--model.pretrained on its export).")

    def _resume_with_own_rates(self, checkpoint: dict[str, typing.Any]) -> list[str]:
        """The saved optimizer state holds, in each parameter group, the learning rate, weight decay, betas and eps
        the run started with, and the schedule's base rates; torch would restore them over this run's settings.
        Lowering the rate for the rest of a run is a usual change: the groups and the schedule get this run's values
        (the current rate scaled as the base rate is, so the schedule's position is kept). Returns the settings
        changed, for the run to name them."""
        states, schedulers = checkpoint.get("optimizer_states") or [], checkpoint.get("lr_schedulers") or []
        saved = saved_optimization(checkpoint)
        if len(states) != 1 or "param_groups" not in states[0] or saved is None:
            return []  # no optimizer state in the file (a sharded one is the strategy's, an export has none)
        opt = self.optimization
        _, arguments = optimizer_arguments(opt)
        groups = parameter_groups(self, opt.weight_decay, opt.learning_rate, opt.layer_decay)
        saved_groups = states[0]["param_groups"]
        if len(groups) != len(saved_groups):
            return []  # another model: loading the state fails with torch's message
        for group, stored in zip(groups, saved_groups, strict=True):
            own = {**arguments, "lr": group.get("lr", opt.learning_rate), "weight_decay": group["weight_decay"]}
            for key, value in own.items():
                if key in stored and key != "lr":
                    stored[key] = type(stored[key])(value) if isinstance(stored[key], tuple) else value
            base = stored.get("initial_lr", stored["lr"])
            stored["lr"] = stored["lr"] * own["lr"] / base if base else own["lr"]
            stored["initial_lr"] = own["lr"]
        if len(schedulers) == 1 and "base_lrs" in schedulers[0]:
            schedulers[0]["base_lrs"] = [group["initial_lr"] for group in saved_groups]
            schedulers[0]["_last_lr"] = [group["lr"] for group in saved_groups]
        return [f"model.optimization.{name}={getattr(opt, name)!r} (the checkpoint's: {getattr(saved, name)!r})"
                for name in ("learning_rate", "weight_decay", "betas", "eps", "schedule", "warmup", "decay",
                             "min_lr_ratio")
                if tuple_or_value(getattr(opt, name)) != tuple_or_value(getattr(saved, name))]

    def _check_head_names(self, checkpoint: dict[str, typing.Any]) -> None:
        """A checkpoint from before the architecture was stored: at least its head's parameters must be this head's
        (ModernBERT's token classifier gained its transform since), else a message instead of a strict-loading
        traceback. Sharded (FSDP) model states are not in the checkpoint dict and are left to the strategy."""
        stored = {k for k in checkpoint.get("state_dict", {}) if k.startswith("head.")}
        if not stored or self._trainer is not None and isinstance(self.trainer.strategy, FSDPStrategy):
            return
        own = {f"head.{name}" for name in self.head.state_dict()}
        if stored != own:
            raise ValueError(
                f"The checkpoint's head has the parameters {sorted(stored - own)} and lacks {sorted(own - stored)} of "
                f"this model's: it was saved by an earlier litbert whose head of this kind had another shape. It "
                f"cannot be resumed by this version; start the fine-tune again."
            )

    def token_loss(self, mean: torch.Tensor, tokens: torch.Tensor | int) -> torch.Tensor:
        """What `training_step` returns for a batch whose loss is the `mean` over its `tokens` scored tokens (0
        where it has none): the optimizer step then follows the mean over all the tokens of its batches on all
        processes, as transformers' `Trainer` averages a loss computed over `num_items_in_batch`
        (`average_tokens_across_devices`), not the mean of the batches' means. Under gradient accumulation or
        several processes that is the batch's sum, its tokens counted on the device; `on_before_optimizer_step`
        divides the gradient by the step's count. One process without accumulation backpropagates the mean itself."""
        trainer = self._trainer
        if trainer is None or trainer.accumulate_grad_batches * trainer.world_size == 1:
            return mean
        if self._tokens is None:
            self._tokens = torch.zeros((), dtype=torch.long, device=mean.device)  # exact, however many
        self._tokens = self._tokens + tokens
        self._token_mean = mean.detach()
        return mean * tokens

    def _average_tokens(self, grads: list[torch.Tensor]) -> None:
        """Turn the gradient of the step's summed token losses into that of their mean over all its tokens. Lightning
        divided each batch's loss by accumulate_grad_batches (the last, short step of an epoch too) and DDP or FSDP
        averaged the gradients over the processes: x accumulate_grad_batches x processes / tokens undoes both. The
        count is summed over the processes on the device, and clamped to 1 (no token: a zero gradient); it restarts
        every step, one that fp16's loss scaler skips too."""
        tokens, self._tokens = self._tokens, None
        if tokens is None:
            return
        trainer = self.trainer
        if trainer.world_size > 1 and dist.is_initialized():
            dist.all_reduce(tokens)
        factor = (trainer.accumulate_grad_batches * trainer.world_size) / tokens.clamp(min=1)
        by_device: dict[torch.device, list[torch.Tensor]] = {}
        for grad in grads:
            by_device.setdefault(grad.device, []).append(grad)
        for device, group in by_device.items():  # (FSDP's CPU offload keeps the gradient shards on the host)
            torch._foreach_mul_(group, factor.to(device))

    def on_before_backward(self, loss: torch.Tensor) -> None:
        # A token loss backpropagates its sum: the divergence check and its message take the batch's mean.
        mean, self._token_mean = self._token_mean, None
        self._step_loss = loss.detach() if mean is None else mean

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Log the gradient norm, and make sure no non-finite loss or norm reaches the weights. Under fp16 with a
        loss scaler, infinite gradients are the scaler's business (it skips the step and lowers the scale); only the
        loss is checked then.

        With the fused AdamW (the default) the check stays on the device: a non-finite step, and every step after
        it, is skipped by the optimizer's own `found_inf` (GradScaler's protocol), and the host reads the verdict
        once per logging window (`check_divergence`), so a step does not wait for the GPU. Otherwise the host
        reads it at once and stops before the step.

        A token loss's gradient becomes the step's token mean first (`_average_tokens`): the norm, the clipping and
        the check see the gradient the step applies. (Lightning calls this hook after fp16's loss scaler unscaled the
        gradients and before it clips them.)"""
        # The module tree is walked once a fit, not every step (0.1 ms a step for MiniLM-L6's 81 parameters), in
        # its own order: the norm sums the parameters' norms in this order.
        if self._fit_parameters is None:
            self._fit_parameters = tuple(self.parameters())
        grads = [p.grad for p in self._fit_parameters if p.grad is not None]
        self._average_tokens(grads)
        if not grads:
            return
        norm = torch.nn.utils.get_total_norm(grads)
        if isinstance(self.trainer.strategy, FSDPStrategy) and dist.is_initialized():  # each rank holds a shard
            squared = norm.pow(2)
            dist.all_reduce(squared)
            norm = squared.sqrt()
        self._log_training_values({"train/grad_norm": norm})
        self._grad_norm = norm
        loss = getattr(self, "_step_loss", None)  # (a default tensor would be made, and filled, every step)
        if loss is None:
            loss = torch.zeros((), device=norm.device)
        scaled = _loss_scaler(self.trainer)
        finite = torch.isfinite(loss.float()) & (scaled | torch.isfinite(norm))
        if self.trainer.world_size > 1 and dist.is_initialized():
            finite = finite.to(torch.int32)
            dist.all_reduce(finite, op=dist.ReduceOp.MIN)  # one rank's NaN stops every rank at the same step
        # (step, loss, norm, learning rate, epoch, batch of the epoch) of the first non-finite step; step -1 while
        # there is none. The host's numbers go in as fills, not copies, so that nothing waits.
        first = getattr(self, "_divergence", None)
        if first is None or first.device != norm.device:
            first = torch.full((6,), -1.0, dtype=torch.float64, device=norm.device)
        trainer = self.trainer
        known = (trainer.global_step + 1, optimizer.param_groups[0]["lr"], trainer.current_epoch,
                 trainer.fit_loop.epoch_loop.batch_idx)
        step, lr, epoch, batch = (torch.full((), float(v), dtype=torch.float64, device=norm.device) for v in known)
        now = torch.stack([step, loss.double(), norm.double(), lr, epoch, batch])
        self._divergence = torch.where(~finite.bool() & (first[0] < 0), now, first)
        if _fused_adam(optimizer) and not scaled:
            optimizer.found_inf = (self._divergence[0] >= 0).float()
        else:
            self.check_divergence()

    def check_divergence(self) -> None:
        """Stop with `DivergenceError` if a step so far had a non-finite loss or gradient norm (a host sync: called
        once per logging window, before validation and checkpoints, at the end of training, and at once where the
        optimizer cannot skip a step itself)."""
        first = getattr(self, "_divergence", None)
        if first is None:
            return
        step, loss, norm, lr, epoch, batch = first.tolist()
        if step < 0:
            return
        trainer = self.trainer
        full_precision = str(trainer.precision).startswith(("32", "64"))
        fp32 = "" if full_precision else ", or train in fp32 (--trainer.precision 32)"
        if step == 1:  # no update yet (a resume restores its step count, and counts on)
            raise DivergenceError(
                f"The first training step gave loss {loss:.4g} and gradient norm {norm:.4g}, before any update: "
                f"the starting weights and this batch give a non-finite result, which no learning rate causes. "
                f"Check the checkpoint's weights, the labels or targets of the data, and the loss settings (a "
                f"temperature or weight out of range){fp32}.")
        raise DivergenceError(
            f"Training diverged at step {int(step)} (epoch {int(epoch)}, batch {int(batch)} of the epoch): loss "
            f"{loss:.4g}, gradient norm {norm:.4g}. Neither that optimizer step nor any after it was taken, so the "
            f"weights are still finite. "
            f"Lower the learning rate (then {lr:.3g}), lengthen the warmup, or clip gradients "
            f"(--trainer.gradient_clip_val 1.0){fp32}.")

    def on_train_batch_end(self, outputs: typing.Any, batch: typing.Any, batch_idx: int) -> None:
        self.log_held_values()
        if self.trainer._logger_connector.should_update_logs:
            self.check_divergence()

    def on_train_epoch_start(self) -> None:
        self._held.clear()  # Lightning forgets the last epoch's training values too

    def on_validation_start(self) -> None:
        if self.trainer.state.fn == "fit" and not self.trainer.sanity_checking:
            self.check_divergence()

    def on_train_epoch_end(self) -> None:
        self.check_divergence()

    def on_train_end(self) -> None:
        self._fit_parameters = None
        self.check_divergence()

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clipping by norm scales the gradients with the total norm `on_before_optimizer_step` has just computed
        (and logged), as `clip_grad_norm_` would: one pass over the gradients fewer, and no conflict with the fused
        AdamW, which Lightning's mixed-precision plugin refuses to clip for fear of fp16's loss scaling. Clipping by
        value clamps each gradient as `clip_grad_value_` does, here for the same reason: the fused AdamW stays, and
        with it the divergence check that skips a step on the device (an unfused one reads it every step). Under a
        loss scaler Lightning clips as usual."""
        if not gradient_clip_val:
            return
        if _loss_scaler(self.trainer):
            self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val,
                                gradient_clip_algorithm=gradient_clip_algorithm)
            return
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        norm, self._grad_norm = getattr(self, "_grad_norm", None), None
        if not params:
            return
        if gradient_clip_algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
            return
        norm = norm if norm is not None else torch.nn.utils.get_total_norm([p.grad for p in params])
        optimizer.__dict__.pop("grad_scale", None)
        if _fused_adam(optimizer):
            # The fused kernel divides each gradient by the optimizer's `grad_scale` as it steps, and stores the
            # quotient back (torch.amp.GradScaler's protocol for fused optimizers): clipping there spares a pass
            # over every gradient (3 ms of a 146 ms CoLA step on CPU). The factor is clip_grad_norm_'s, inverted;
            # `_forget_grad_scale` removes it once the step is taken.
            # 1 where the norm is within the bound: no branch, so the host never waits to read the norm.
            optimizer.grad_scale = ((norm + 1e-6) / gradient_clip_val).clamp(min=1.0).to(torch.float32)
            optimizer.__dict__[CLIP_SCALE] = True
            return
        torch.nn.utils.clip_grads_with_norm_(params, gradient_clip_val, norm)

    def training_flops(self, batch: dict[str, torch.Tensor]) -> int:
        """Model FLOPs of one training step on `batch` (forward and backward), for MFU (`tasks.run.throughput`): the
        encoder over each sequence's real tokens. Tasks add their large heads and teachers; small classifier heads
        (a few C x C and C x labels products per sequence) are left out."""
        return self.encoder.flops(sequence_lengths(batch), training=True)

    def log_training(self, loss: torch.Tensor, batch: dict[str, torch.Tensor], perplexity: bool = False,
                     tokens: torch.Tensor | int | None = None, **metrics: torch.Tensor) -> None:
        """Loss, learning rate and the task's own metrics (and with `perplexity`, exp of the loss). Tokens/s and MFU
        come from `tasks.run.throughput`. The values of an optimizer step are those of its whole batch, as the
        `Trainer` logs them: under gradient accumulation the mean over the step's batches (Lightning logs the value
        of its last), and under several processes the mean over the ranks, not rank 0's share: an all-reduce for
        each batch of a step that logs, none in the steps between. With `tokens`, the count of scored tokens the
        batch's values average (a token loss, `token_loss`), each batch weighs as its tokens: the step's values are
        means over its tokens, as its gradient is."""
        values = {"train/loss": loss.detach()} | {f"train/{name}": value.detach() for name, value in metrics.items()}
        trainer = self._trainer
        if trainer is not None and (trainer.accumulate_grad_batches > 1 or trainer.world_size > 1):
            sums = self._step_sums(values, trainer.global_step, tokens)
            if trainer.world_size > 1 and trainer._logger_connector.should_update_logs:
                # (reduced here: Lightning's sync_dist may not change from one step to the next)
                sums = {key: trainer.strategy.reduce(torch.stack(pair), reduce_op="sum").unbind()
                        for key, pair in sums.items()}
            values = {key: total / count for key, (total, count) in sums.items()}
        if perplexity:  # of the mean loss, not a mean of the batches' perplexities
            values["train/perplexity"] = values["train/loss"].exp()
        if self.trainer is not None and self.trainer.optimizers:
            values["train/lr"] = self.trainer.optimizers[0].param_groups[0]["lr"]
        self._log_training_values(values)  # the loss is shown by the progress bar at its refresh (tasks.run.progress)

    def log_held_values(self) -> None:
        """Log the training values held back since the last batch that logged, where the batch in progress now
        reaches a reader: a callback stopped the run at it (max_time's Timer), so Lightning writes its values once
        the batch ends. Code that reads them before then calls this first (`tasks.run.progress`, a stop by signal)."""
        if self._held and reaches_a_reader(self.trainer, self._logs_every_batch):
            self._held.log(self)

    def _log_training_values(self, values: dict[str, torch.Tensor | float]) -> None:
        """Log a training batch's values where they reach a logger, the progress bar or a callback, and hold them
        otherwise; a batch that logs also logs what earlier batches held of its other keys (`tasks.training_logs`)."""
        trainer = self._trainer
        if trainer is not None and not reaches_a_reader(trainer, self._logs_every_batch):
            for key, value in values.items():
                self._held.hold(self._current_fx_name, key, value)
            return
        for key, value in values.items():
            self._held.drop(key)
            log_value(self, key, value)
        self._held.log(self)

    def _step_sums(self, values: dict[str, torch.Tensor], step: int, tokens: torch.Tensor | int | None
                   ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Each value's weighted sum and total weight over the batches of optimizer step `step` so far, each batch
        weighing 1 or its `tokens` (on the device: no host sync). A value a batch lacks (the accuracy of a batch
        without a masked token) is the mean of the batches that have it."""
        if self._window[0] != step:
            self._window = (step, {})
        sums = self._window[1]
        for key, value in values.items():
            weight = torch.ones_like(value) if tokens is None else torch.zeros_like(value) + tokens
            total, count = sums.get(key, (0, 0))
            sums[key] = (total + value * weight, count + weight)
        return sums

    def export_labels(self) -> Sequence[str] | None:
        """The head's label names in id order, stored with an exported classifier."""
        return None

    @property
    def problem_type(self) -> str | None:
        """transformers' `problem_type` stored with an exported classifier, where its outputs do not imply it."""
        return None

    def export(self, directory: str | Path, tokenizer=None, format: str = "auto") -> Path:
        """Save the trained encoder and head with `save_pretrained` (`format` "auto": transformers format whenever it
        can express the configuration) and the tokenizer beside them, so the folder is a `--model.pretrained` of its
        own."""
        path = self.encoder.save_pretrained(directory, head=self.head, format=format, label_names=self.export_labels(),
                                            problem_type=self.problem_type)
        if tokenizer is not None:
            config = self.encoder.config
            limit = config.max_sequence_length
            if limit is None and config.position == "sinusoidal" and (path / "config.json").exists():
                limit = config.max_position_embeddings  # transformers' DistilBERT stores a table of these rows
            save_tokenizer(tokenizer, path, max_length=limit, token_types=config.type_vocab_size > 0)
        return path

