"""A callback that sends the run's own process a signal at one moment of a run, as a user's Ctrl+C or a scheduler's
SIGTERM would: added with `--trainer.callbacks`, in this process (`train.cli_main`) or in a `train.py` subprocess
with tests/ on its PYTHONPATH."""

from __future__ import annotations

import os
import signal
from time import sleep

import lightning as L


class SignalAt(L.Callback):
    """Sends `signum` at `when`: `built` (as the run is built, when its callbacks are: under DDP the ranks that the
    launcher starts build theirs before they join the process group), `setup` (the run's setup, once the datamodule
    has read and tokenised its data, before the fit loop), `sanity_start` or `sanity_batch` (Lightning's sanity check:
    before it, or after its first batch), `epoch_end` (the end of the training epoch, where the final checkpoint is
    saved), `last_eval_batch` (the last batch of the validation after fit), `test_batch` (the first batch of the test
    after fit) or `last_predict_batch` (the last batch of the test predictions), or `second_batch` (the end of the
    second training batch); `times` times (Ctrl+C pressed twice: 2). `group`: to the run's whole process group, its
    DataLoader workers too, as a terminal's Ctrl+C or a scheduler's SIGTERM to a job (the run must be a process group
    of its own: `runs.launch`). `rank`: from that rank only, under DDP (a signal to one node's processes; `built`
    reads it from LOCAL_RANK); every rank by default."""

    def __init__(self, when: str, signum: int = signal.SIGTERM, times: int = 1, group: bool = False,
                 rank: int | None = None) -> None:
        self.when, self.signum, self.times, self.group, self.rank = when, signum, times, group, rank
        if when == "built" and rank in (None, int(os.environ.get("LOCAL_RANK", 0))):
            os.kill(os.getpid(), signum)

    def _send(self, trainer: L.Trainer, when: str) -> None:
        if self.when == when and self.rank in (None, trainer.global_rank):
            for time in range(self.times):
                if self.group:
                    if time:
                        sleep(0.2)  # the workers handle each Ctrl+C before the next (a pending signal is not queued)
                    os.killpg(os.getpgid(0), self.signum)
                else:
                    os.kill(os.getpid(), self.signum)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._send(trainer, "setup")

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._send(trainer, "sanity_start")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx == 1:
            self._send(trainer, "second_batch")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._send(trainer, "epoch_end")

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if trainer.sanity_checking and batch_idx == 0:
            self._send(trainer, "sanity_batch")
        if trainer.state.fn == "validate" and batch_idx == trainer.num_val_batches[dataloader_idx] - 1:
            self._send(trainer, "last_eval_batch")

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if batch_idx == 0:
            self._send(trainer, "test_batch")

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if batch_idx == trainer.num_predict_batches[dataloader_idx] - 1:
            self._send(trainer, "last_predict_batch")
