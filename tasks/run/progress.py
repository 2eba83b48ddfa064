"""The progress bar of a run: Lightning's, with a training line that says something true for a run bounded by steps.

Lightning's rich bar reads `Epoch 0/2` for a run of three epochs; for a run bounded by `max_steps` or `max_time`
(`max_epochs: -1`, the README job's) it read `Epoch 0/-2`. `ProgressBar` then reads `Epoch 0, step 412/1200`,
the step counted as the run goes.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar


class ProgressBar(RichProgressBar):
    """Lightning's `RichProgressBar`, whose training line counts steps when the epochs are unbounded."""

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
