"""The trained model saved for use outside litbert: `EncoderTask.export` (transformers' `save_pretrained` format
where the configuration has a transformers equivalent, litbert's own otherwise) into `<default_root_dir>/model` or
`--export_dir`, with the tokenizer beside it. Weights holding NaN or infinity are refused, not exported."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import FSDPStrategy

from tasks.base import DivergenceError, EncoderTask


def export(trainer: L.Trainer, model: EncoderTask, directory: Path, tokenizer: Any) -> EncoderTask | None:
    """`model.export` on rank 0, which gets the task it exported back (None elsewhere). Under FSDP the parameters are
    sharded across ranks: every rank takes part in gathering the full weights (the strategy's state dict), and rank
    0 exports them from an unsharded copy."""
    if isinstance(trainer.strategy, FSDPStrategy):
        state = trainer.strategy.lightning_module_state_dict()
        if not trainer.is_global_zero:
            return None
        model = rebuild(model)
        model.load_state_dict(state)
    if not trainer.is_global_zero:
        return None
    check_finite(model)
    model.export(directory, tokenizer)
    return model


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
