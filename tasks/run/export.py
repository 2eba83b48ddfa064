"""The trained model saved for use outside litbert: `EncoderTask.export` (transformers' `save_pretrained` format
where the configuration has a transformers equivalent, litbert's own otherwise; `--export_format` chooses one) into
`<default_root_dir>/model` or `--export_dir`, with the tokenizer beside it. A format the model cannot take is refused
before training (`check_export_format`); weights holding NaN or infinity are refused, not exported."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.strategies import FSDPStrategy
from torch.distributed.fsdp import FullyShardedDataParallel

from data.sources import replaced_when_whole
from encoders.checkpoints import export_layout, export_mismatches, no_equivalent
from tasks.base import DivergenceError, EncoderTask

ExportFormat = Literal["auto", "transformers", "litbert"]  # encoders.checkpoints.save_checkpoint's `format`

def check_export_format(model: EncoderTask, format: ExportFormat) -> None:
    """Refuse `--export_format transformers` for a model transformers has no equivalent of, naming the settings
    that differ and the family's values, before the run trains it."""
    if format == "transformers":
        export_layout(model.encoder, model.head, instead=(
            "--export_format transformers cannot be honoured: set those model.encoder / head settings to the "
            "family's values, or export with --export_format auto (litbert's format for such a model)."))


def litbert_format_reason(model: EncoderTask) -> str:
    """Why `model` was exported in litbert's format, as the run's closing line and the model card say: what
    transformers' closest family cannot hold of it, or (a model it holds) that --export_format litbert asked so."""
    layout, reasons = export_mismatches(model.encoder, model.head)
    if not reasons:
        return (f"--export_format litbert asked for it; transformers' {layout.class_prefix} classes hold this model "
                f"too (--export_format auto)")
    return f"this configuration has {no_equivalent(layout, reasons)}"


def export(trainer: L.Trainer, model: EncoderTask, directory: Path, tokenizer: Any,
           format: ExportFormat = "auto", card: Callable[[EncoderTask, Path], Any] | None = None,
           check: Callable[[], None] | None = None) -> None:
    """`model.export` in `format` on rank 0, then `card(model, folder)` (the model card, which counts the full
    parameters). Under FSDP each rank holds a shard of every parameter: every rank takes part in gathering the full
    weights, which rank 0 alone receives, and the task's parameters are those weights while it exports
    (`summon_full_params`). The export is written beside `directory` and renamed into place once whole: a run killed
    while it exports leaves no folder of weights without their tokenizer or card, and a resumed finished run's
    earlier export stays whole until the new one replaces it. `check` (every rank calls it: the run's signal check,
    a collective) runs once the export is written and before it is renamed into place: a run that a signal stops
    while it exports puts no export in place, as one stopped in the evaluation before it."""
    # Gathered into host memory, so that rank 0's GPU need not hold a second copy; on the CPU they are there already
    # (and torch 2.13's FSDP, asked to move them there, frees the storage it was to move).
    offload = trainer.strategy.root_device.type != "cpu"
    gathered = (FullyShardedDataParallel.summon_full_params(trainer.strategy.model, writeback=False, rank0_only=True,
                                                            offload_to_cpu=offload)
                if isinstance(trainer.strategy, FSDPStrategy) else contextlib.nullcontext())
    root = Path(trainer.default_root_dir).resolve()
    # `--export_dir` holding the run itself is written in place: replacing the folder would remove its checkpoints.
    in_place = directory.resolve() == root or directory.resolve() in root.parents
    with contextlib.ExitStack() as beside:
        target = directory
        if trainer.is_global_zero and not in_place:
            target = beside.enter_context(replaced_when_whole(directory, sole_writer=True))
        with gathered:
            if trainer.is_global_zero:
                check_finite(model)
                _export(model, target, tokenizer, format, card)
        if check is not None:
            check()  # a signal came: it raises, and the export written beside `directory` is removed


def _export(model: EncoderTask, directory: Path, tokenizer: Any, format: ExportFormat,
            card: Callable[[EncoderTask, Path], Any] | None) -> None:
    model.export(directory, tokenizer, format)
    if card is not None:
        card(model, directory)


def check_finite(model: EncoderTask) -> None:
    bad = [name for name, value in model.state_dict().items()
           if value.is_floating_point() and not torch.isfinite(value).all()]
    if bad:
        raise DivergenceError(f"The trained weights hold NaN or infinite values ({', '.join(bad[:5])}"
                              f"{', ...' if len(bad) > 5 else ''}); nothing was exported.")
