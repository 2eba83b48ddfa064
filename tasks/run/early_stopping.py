"""`--early_stopping.patience N`: stop training once the task's own metric (the one the best checkpoint is chosen by,
`EncoderTask.monitor`) has not improved for N validations in a row.

Lightning's `EarlyStopping`, with litbert's choices: the metric and its direction come from the task; the check runs
after each validation (never at epoch ends without one); a non-finite value (an undefined correlation) counts as no
improvement rather than stopping the run, as `BestCheckpoint` never takes one as the best; the count of validations
without improvement is saved in every checkpoint and a resumed run goes on counting with the patience it is given
now. A resumed run whose checkpoint had already stopped early stops again before its first step.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping as LightningEarlyStopping
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason


class EarlyStopping(LightningEarlyStopping):
    """Stop when the task's metric stops improving.

    Args:
        patience: Validations in a row without improvement after which training stops; None: never stop early.
        min_delta: The least change of the metric that counts as an improvement (0: any change that is better).
    """

    def __init__(self, patience: int | None = None, min_delta: float = 0.0) -> None:
        if patience is not None and patience < 1:
            raise ValueError(f"early_stopping.patience={patience}: give a number of validations >= 1, or null not to "
                             f"stop early.")
        if min_delta < 0:
            raise ValueError(f"early_stopping.min_delta={min_delta} must be >= 0: the least improvement that counts.")
        if patience is None and min_delta:
            raise ValueError(f"early_stopping.min_delta={min_delta} sets what early stopping counts as an "
                             f"improvement, but early_stopping.patience is unset, so the run never stops early. Set "
                             f"patience too, or remove min_delta.")
        # The metric is the task's, known in `setup`.
        super().__init__(monitor="", min_delta=min_delta, patience=patience or 0, check_finite=False,
                         check_on_train_epoch_end=False)
        self.requested = patience is not None  # Lightning's `patience` is 0 where unset, and 0 stops at once
        self.stopped_step: int | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        metric, mode = pl_module.monitor
        if (self.monitor, self.mode) != (metric, mode):
            self.monitor, self.mode = metric, mode
            self.min_delta = abs(self.min_delta) * (1 if mode == "max" else -1)  # as Lightning's constructor sets it
            self.best_score = self.best_score.new_tensor(float("-inf") if mode == "max" else float("inf"))
        super().setup(trainer, pl_module, stage)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning has set up the validation data by now, where the first epoch validates.
        if not trainer.enable_validation or (trainer.val_dataloaders is not None
                                             and trainer.fit_loop.epoch_loop.val_loop.skip):
            raise ValueError(f"--early_stopping.patience {self.patience} stops the run when {self.monitor} stops "
                             f"improving, but this run never validates (no validation data, or "
                             f"trainer.limit_val_batches 0). Give the data a validation set, or remove "
                             f"early_stopping.patience.")
        if self.stopped_step is not None:
            trainer.should_stop = True
            if trainer.is_global_zero:
                print(f"litbert: the run had stopped early at step {self.stopped_step}: {self.reason()} It stops "
                      f"again; raise --early_stopping.patience to train on.", flush=True)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if self.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED and self.stopped_step is None:
            self.stopped_step = trainer.global_step
            if trainer.is_global_zero:
                print(f"litbert: stopping early at step {self.stopped_step}: {self.reason()}", flush=True)

    def summary(self) -> str:
        return f"at step {self.stopped_step}: {self.reason()}"

    def reason(self) -> str:
        """Why the run stopped, in a sentence."""
        delta = f" by more than {abs(self.min_delta):g}" if self.min_delta else ""
        return (f"{self.monitor} did not improve{delta} for {self.wait_count} validation(s) in a row "
                f"(--early_stopping.patience {self.patience}); the best was {float(self.best_score):.4g}.")

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "stopped_step": self.stopped_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        patience = self.patience  # this run's setting, not the checkpoint's
        super().load_state_dict(state_dict)
        self.patience = patience
        self.stopped_step = state_dict.get("stopped_step")
        if self.wait_count < patience:  # a higher patience now: the run goes on
            self.stopped_step, self.stopping_reason = None, EarlyStoppingReason.NOT_STOPPED
