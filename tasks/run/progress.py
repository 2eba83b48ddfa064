"""The progress bar of a run: Lightning's, with a training line that says something true for a run bounded by steps.

Lightning's rich bar reads `Epoch 0/2` for a run of three epochs; for a run bounded by `max_steps` or `max_time`
(`max_epochs: -1`, the README job's) it read `Epoch 0/-2`. `ProgressBar` then reads `Epoch 0, step 412/1200`,
the step counted as the run goes.

The training metrics it shows (`SHOWN`) are read at the steps that log, every `log_every_n_steps`, not logged with
`prog_bar=True`: Lightning turns every progress-bar metric into a Python number at the end of every batch, a host
sync per metric and step that would make each step wait for the GPU (`bench.syncs`).
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar

from tasks.training_logs import log_held

SHOWN = {"train/loss": "loss", "train/tokens_per_sec": "tokens/s", "train/mfu": "MFU"}


class ProgressBar(RichProgressBar):
    """Lightning's `RichProgressBar`, whose training line counts steps when the epochs are unbounded, and which
    shows the training metrics as of the last step that logged."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shown: dict[str, str] = {}

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        if trainer.training and trainer._logger_connector.should_update_logs:
            log_held(pl_module)  # where a callback before this one stopped the run
            logged = trainer.callback_metrics
            self._shown = {label: f"{float(logged[key]):.4g}" for key, label in SHOWN.items() if key in logged}
        return {**metrics, **self._shown}

    def _epochs_bounded(self) -> bool:
        return self.trainer.max_epochs is not None and self.trainer.max_epochs >= 0

    def _get_train_description(self, current_epoch: int) -> str:
        if self._epochs_bounded():
            return super()._get_train_description(current_epoch)
        trainer = self.trainer
        description = f"Epoch {current_epoch}, step {trainer.global_step}"
        if trainer.max_steps > 0:
            description += f"/{trainer.max_steps}"
        return f"{description:{len(self.validation_description)}}"

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.progress is not None and self.train_progress_bar_id is not None and not self._epochs_bounded():
            self.progress.update(self.train_progress_bar_id,
                                 description=self._get_train_description(trainer.current_epoch))
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
