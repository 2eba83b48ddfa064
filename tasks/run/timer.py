"""`trainer.max_time` without a wait for the device at every step of a distributed run.

Lightning's `Timer` stops a run whose time is up by rank 0's clock, which it broadcasts after every training batch
over the training backend (`strategy.broadcast`); a `wsd` schedule that ends with the time takes rank 0's clock
every step too (`EncoderTask.lr_scheduler_step`). Over NCCL a broadcast pickles the value into a GPU tensor whose
size and bytes the other ranks read back: host syncs in every step (`bench.syncs`). `HostTimer` agrees over the
hosts instead (`tasks.run.agreement`, a gloo group of its own), as litbert's save by time does; the CLI puts it in
place of the `Timer` that `trainer.max_time` makes. With one process nothing is sent.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities import rank_zero_info

from tasks.run.agreement import HostAgreement


class HostTimer(Timer):
    """Lightning's `Timer`, whose ranks take rank 0's clock over the hosts rather than the training backend."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._agreement: HostAgreement | None = None  # built in setup, once the ranks exist

    @property
    def state_key(self) -> str:
        return Timer.__qualname__  # Lightning's Timer's: either resumes the time the other saved

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if self._agreement is None:  # a collective: every rank sets up at this point
            self._agreement = HostAgreement()

    def rank_zero_elapsed(self) -> float:
        """Rank 0's training time so far, in seconds, on every rank."""
        if self._agreement is None:
            return self.time_elapsed()
        return self._agreement.from_rank_zero([self.time_elapsed()])[0]

    def _check_time_remaining(self, trainer: L.Trainer) -> None:
        if self._agreement is None:  # (not set up: Lightning's own way)
            super()._check_time_remaining(trainer)
            return
        up = self.time_elapsed() >= self._duration and trainer.is_global_zero
        (should_stop,) = self._agreement.agree_max([int(up)])
        trainer.should_stop = trainer.should_stop or bool(should_stop)
        if should_stop and self._verbose:  # Lightning's words
            elapsed = timedelta(seconds=int(self.time_elapsed(RunningStage.TRAINING)))
            rank_zero_info(f"Time limit reached. Elapsed time is {elapsed}. Signaling Trainer to stop.")
