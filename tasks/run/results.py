"""What a finished run leaves and says: `metrics.json` (every final metric) and the closing lines that name where
each of its results is."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from encoders.checkpoints import LITBERT_CONFIG
from tasks.run.checkpoints import LastCheckpoint
from tasks.run.tracking import WandbLogger, file_logs


def write_metrics(path: Path, metrics: dict[str, float | int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(finite_or_none(metrics), indent=2, allow_nan=False) + "\n")


def summarise_in_trackers(trainer: L.Trainer, metrics: dict[str, float | int]) -> None:
    """Each W&B run's summary holds metrics.json's values: the best checkpoint's evaluation (as its last `val/`
    point) and what the history has no point of, the step early stopping stopped at."""
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger) and logger.mode != "disabled":
            logger.experiment.summary.update(metrics)


def finite_or_none(metrics: dict[str, float | int]) -> dict[str, float | int | None]:
    """JSON has no NaN: an undefined metric (a correlation of constant predictions) is written as null."""
    out: dict[str, float | int | None] = {}
    for key, value in metrics.items():
        out[key] = value if math.isfinite(value) else None
        if out[key] is None:
            print(f"litbert: {key} is {value} (undefined); metrics.json holds null for it", flush=True)
    return out


def print_summary(trainer: L.Trainer, config_path: Path, best: str, export_dir: Path | None,
                  predictions: list[Path], metrics_path: Path, pushed: str | None = None,
                  stopped_early: str | None = None, litbert_format: str = "") -> None:
    """Rank 0's closing lines: the resolved config, the checkpoints, why training stopped early (where it did), the
    export (and why it is in litbert's format where it is: `litbert_format`) and where it was pushed, the predictions,
    the W&B run, the CSV or TensorBoard log and metrics.json. Ends the W&B run."""
    last = next((c.last_path or (c.path if c.saving and os.path.isfile(c.path) else None)  # a finished run resumed
                 for c in trainer.callbacks if isinstance(c, LastCheckpoint)), None)
    # Without a ModelCheckpoint (trainer.enable_checkpointing false) the run validated all the same, and saved none.
    why = "no validation during fit" if any(isinstance(c, ModelCheckpoint) for c in trainer.callbacks) else \
        "trainer.enable_checkpointing is false"
    print(f"litbert: resolved config  {config_path}")
    print(f"litbert: best checkpoint  {best or f'(none saved: {why}; final weights used)'}")
    print(f"litbert: last checkpoint  {last or '(none saved)'}")
    if stopped_early is not None:
        print(f"litbert: stopped early    {stopped_early}")
    if trainer.global_step == 0:  # honoured (an evaluation of the starting weights), but never taken for training
        print(f"litbert: trained          no step ({untrained_cause(trainer)}): the metrics and the export are the "
              f"starting weights', with any new head untrained")
    if export_dir is not None:
        kind = f"litbert format: {litbert_format}" if (export_dir / LITBERT_CONFIG).exists() else "transformers format"
        print(f"litbert: exported model   {export_dir} ({kind}; model card README.md)")
    if pushed is not None:
        print(f"litbert: pushed to hub    {pushed}")
    for path in predictions:
        print(f"litbert: test predictions {path}")
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            print(f"litbert: W&B run          {logger.describe()}")
            logger.finish()
    for kind, path in file_logs(trainer.loggers):  # a resumed run's parts are in one file (folder)
        print(f"litbert: {kind:<17}{path}")
    print(f"litbert: metrics          {metrics_path}")


def untrained_cause(trainer: L.Trainer) -> str:
    """The settings that let a fit take no optimizer step: `trainer.max_steps=0`, ..."""
    zeros = [f"trainer.{name}=0" for name in ("max_steps", "max_epochs", "limit_train_batches")
             if getattr(trainer, name) == 0]
    return ", ".join(zeros) or "training ended before its first optimizer step"
