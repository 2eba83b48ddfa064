"""The trained model saved for use outside litbert: `EncoderTask.export` (transformers' `save_pretrained` format
where the configuration has a transformers equivalent, litbert's own otherwise; `--export_format` chooses one) into
`<default_root_dir>/model` or `--export_dir`, with the tokenizer beside it. A format the model cannot take is refused
before training (`check_export_format`); weights holding NaN or infinity are refused, not exported."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.strategies import FSDPStrategy

from encoders.checkpoints import export_layout
from tasks.base import DivergenceError, EncoderTask

ExportFormat = Literal["auto", "transformers", "litbert"]  # encoders.checkpoints.save_checkpoint's `format`


def check_export_format(model: EncoderTask, format: ExportFormat) -> None:
    """Refuse `--export_format transformers` for a model transformers has no equivalent of, naming the settings
    that differ and the family's values, before the run trains it."""
    if format == "transformers":
        export_layout(model.encoder, model.head, instead=(
            "--export_format transformers cannot be honoured: set those model.encoder / head settings to the "
            "family's values, or export with --export_format auto (litbert's format for such a model)."))


def export(trainer: L.Trainer, model: EncoderTask, directory: Path, tokenizer: Any,
           format: ExportFormat = "auto") -> None:
    """`model.export` on rank 0. Under FSDP the parameters are sharded across ranks: every rank takes part in
    gathering the full weights (the strategy's state dict), and rank 0 exports them from an unsharded copy."""
    if isinstance(trainer.strategy, FSDPStrategy):
        state = trainer.strategy.lightning_module_state_dict()
        if not trainer.is_global_zero:
            return
        model = rebuild(model)
        model.load_state_dict(state)
    if trainer.is_global_zero:
        check_finite(model)
        model.export(directory, tokenizer, format)


def rebuild(model: EncoderTask) -> EncoderTask:
    """A new instance of the task with the same constructor arguments (LightningCLI adds its own keys to hparams)."""
    accepted = inspect.signature(type(model).__init__).parameters
    return type(model)(**{k: v for k, v in model.hparams.items() if k in accepted})


def check_finite(model: EncoderTask) -> None:
    bad = [name for name, value in model.state_dict().items()
           if value.is_floating_point() and not torch.isfinite(value).all()]
    if bad:
        raise DivergenceError(f"The trained weights hold NaN or infinite values ({', '.join(bad[:5])}"
                              f"{', ...' if len(bad) > 5 else ''}); nothing was exported.")
