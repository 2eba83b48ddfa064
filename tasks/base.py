"""What every task shares: building the encoder from a preset or a checkpoint, AdamW with no decay on biases and
norms, linear warmup then linear or cosine decay, and logging of loss, learning rate and throughput."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import lightning as L
import torch
from torch import nn

from encoders import Encoder, EncoderConfig
from encoders.checkpoints import Checkpoint, load_checkpoint


def read_pretrained(pretrained: str | None) -> Checkpoint | None:
    """The checkpoint directory a task starts from, read once for the encoder and its heads."""
    return load_checkpoint(pretrained) if pretrained is not None else None


def _encoder_spec_fields() -> list[tuple[str, typing.Any, dataclasses.Field]]:
    hints = typing.get_type_hints(EncoderConfig)
    return [(f.name, Optional[hints[f.name]], dataclasses.field(default=None))  # noqa: UP045 (runtime type)
            for f in dataclasses.fields(EncoderConfig) if f.name != "name"]


# The CLI schema of the encoder: a preset plus any EncoderConfig field, each None meaning "as in the preset".
# Generated from EncoderConfig so a new field is a new command-line option without being written twice.
EncoderSpec = dataclasses.make_dataclass(
    "EncoderSpec",
    [("preset", str, dataclasses.field(default="bert-base"))] + _encoder_spec_fields(),
    namespace={
        "__module__": __name__,  # importable by name, so checkpoints can pickle it with the hyperparameters
        "__doc__": "A preset (`bert-mini`, `roberta-base`, ...) and overrides of any EncoderConfig field.",
        "build": lambda self: EncoderConfig.from_name(
            self.preset, **{k: v for k, v in dataclasses.asdict(self).items() if k != "preset" and v is not None}
        ),
    },
)


@dataclass
class Optimization:
    """AdamW and its schedule."""

    learning_rate: float = 1e-4
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    warmup: float = 0.06  # warmup length: a fraction of the run if < 1, else a number of steps
    schedule: Literal["linear", "cosine", "constant"] = "linear"

    def __post_init__(self) -> None:
        if self.learning_rate <= 0 or self.warmup < 0 or self.weight_decay < 0:
            raise ValueError("Optimization: learning_rate must be > 0, warmup and weight_decay >= 0.")
        if self.schedule not in ("linear", "cosine", "constant"):
            raise ValueError(f"Optimization.schedule={self.schedule!r}; choose 'linear', 'cosine' or 'constant'.")


# Checkpoints store these with the hyperparameters; Lightning reloads checkpoints with torch.load(weights_only=True),
# which unpickles only allowlisted classes. Allowlisting these two keeps resuming safe without weights_only=False.
torch.serialization.add_safe_globals([EncoderSpec, Optimization])


def build_encoder(
    encoder: EncoderSpec | None, pretrained: Checkpoint | None, vocab_size: int | None
) -> Encoder:
    """An encoder from a checkpoint read with `load_checkpoint` (`pretrained`) or a preset spec; `vocab_size`
    (from the tokenizer) sizes a new encoder's embeddings and must fit in a pretrained one's."""
    if pretrained is not None:
        model = Encoder.from_pretrained(pretrained)
        if vocab_size is not None and vocab_size > model.config.vocab_size:
            raise ValueError(
                f"The tokenizer has {vocab_size} tokens but the checkpoint {pretrained.source} embeds only "
                f"{model.config.vocab_size}; use the checkpoint's own tokenizer."
            )
        return model
    spec = encoder if encoder is not None else EncoderSpec()
    config = spec.build()
    if vocab_size is not None:
        if spec.vocab_size is not None and vocab_size > spec.vocab_size:
            raise ValueError(
                f"The tokenizer has {vocab_size} tokens but model.encoder.vocab_size={spec.vocab_size}; "
                f"remove the override (the vocabulary size is taken from the tokenizer) or raise it."
            )
        config = dataclasses.replace(config, vocab_size=spec.vocab_size or vocab_size)
    return Encoder(config)


def sequence_lengths(batch: dict[str, torch.Tensor]) -> list[int]:
    """Real (non-padding) tokens of each sequence of a batch."""
    mask = batch.get("attention_mask")
    if mask is None:
        return [batch["input_ids"].shape[1]] * batch["input_ids"].shape[0]
    return mask.sum(dim=1).tolist()


def lr_lambda(step: int, warmup_steps: int, total_steps: int, schedule: str) -> float:
    """Multiplier of the peak learning rate: linear warmup, then linear or cosine decay to zero at the end."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 - progress


def parameter_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only: biases, norm scales and 1-d parameters are not decayed (BERT's recipe)."""
    decay, no_decay, seen = [], [], set()
    for name, param in module.named_parameters():
        if not param.requires_grad or id(param) in seen:
            continue
        seen.add(id(param))
        (no_decay if param.ndim < 2 or name.endswith(".bias") else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class EncoderTask(L.LightningModule):
    """Base of every litbert task. Subclasses build `self.encoder` and `self.head`, and implement the steps."""

    #: The validation metric that picks the best checkpoint, and whether lower ("min") or higher ("max") is better.
    monitor: tuple[str, Literal["min", "max"]] = ("val/loss", "min")

    def __init__(self, optimization: Optimization | None = None) -> None:
        super().__init__()
        self.optimization = optimization if optimization is not None else Optimization()

    def configure_optimizers(self):
        opt = self.optimization
        # The fused kernel: one pass over all parameters instead of a chain of per-tensor ops. On this 2-core CPU
        # an SST-2 step of MiniLM took 0.61 s with it against 0.96 s without (bench/finetune.py, BENCHMARKS.md).
        # Lightning refuses gradient clipping with a fused optimizer under mixed precision, so clipping runs unfused.
        clipping = bool(self.trainer.gradient_clip_val) if self._trainer is not None else False
        optimizer = torch.optim.AdamW(parameter_groups(self, opt.weight_decay), lr=opt.learning_rate,
                                      betas=opt.betas, eps=opt.eps, fused=not clipping)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = int(opt.warmup * total) if opt.warmup < 1 else int(opt.warmup)
        warmup = max(1, min(warmup, total))
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_lambda(step, warmup, total, opt.schedule)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def training_flops(self, batch: dict[str, torch.Tensor]) -> int:
        """Model FLOPs of one training step on `batch` (forward and backward), for MFU (`tasks.throughput`): the
        encoder over each sequence's real tokens. Tasks add their large heads and teachers; small classifier heads
        (a few C x C and C x labels products per sequence) are left out."""
        return self.encoder.flops(sequence_lengths(batch), training=True)

    def log_training(self, loss: torch.Tensor, batch: dict[str, torch.Tensor], **metrics: torch.Tensor) -> None:
        """Loss, learning rate and the task's own metrics. Tokens/s and MFU come from `tasks.throughput`."""
        self.log("train/loss", loss, prog_bar=True)
        for name, value in metrics.items():
            self.log(f"train/{name}", value)
        if self.trainer is not None and self.trainer.optimizers:
            self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"])

    def export_labels(self) -> Sequence[str] | None:
        """The head's label names in id order, stored with an exported classifier."""
        return None

    def export(self, directory: str | Path, tokenizer=None) -> Path:
        """Save the trained encoder and head with `save_pretrained` (transformers format whenever it can express
        the configuration) and the tokenizer beside them, so the folder is a `--model.pretrained` of its own."""
        path = self.encoder.save_pretrained(directory, head=self.head, label_names=self.export_labels())
        if tokenizer is not None:
            tokenizer.save_pretrained(str(path))
        return path

