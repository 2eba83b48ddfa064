"""How a run stops on a signal, with a non-zero exit status and, where training had begun, a checkpoint to resume.

During training `tasks.run.checkpoints.LastCheckpoint` catches SIGTERM, SIGINT and SLURM's requeue signal, saves at
the next step boundary and raises `RunInterrupted` (exit status 128 + the signal's number). After training,
`LateSignals` holds the same signals until the next point where the run can stop cleanly, before its results are
written, and raises `StoppedAfterTraining` (the same exit status; the requeue signal requeues the job).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException


class RunInterrupted(Exception):
    """The run stopped at a step boundary because of a signal; `checkpoint` holds its state (None if checkpointing
    is off). `tasks.run.errors` turns it into a message and the exit status 128 + signal number."""

    def __init__(self, signum: int, step: int, checkpoint: str | None, requeued: bool = False) -> None:
        self.signum, self.step, self.checkpoint, self.requeued = signum, step, checkpoint, requeued
        name = signal.Signals(signum).name
        where = f"saved to {checkpoint}" if checkpoint else "not saved (checkpointing is off)"
        super().__init__(f"stopped by {name} at step {step}; the training state was {where}"
                         + ("; the SLURM job was requeued" if requeued else ""))


class StoppedAfterTraining(SIGTERMException):
    """A signal stopped the run outside the training steps (Lightning's sanity check, or the evaluation, export and
    predictions after training), before its results were written. `tasks.run.errors` turns it into a message and
    the exit status 128 + `signum`; Lightning's own SIGTERMException (from the sanity check) is read as SIGTERM."""

    def __init__(self, signum: int, requeued: bool = False) -> None:
        self.signum, self.requeued = signum, requeued
        super().__init__(128 + signum)


def stop_signals(trainer: L.Trainer) -> list[int]:
    """The signals that stop a run where it can stop cleanly: SIGTERM, SIGINT and, under SLURM with auto-requeue, the
    requeue signal."""
    signals = [signal.SIGTERM, signal.SIGINT]
    environment = trainer._accelerator_connector.cluster_environment
    if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
        signals.append(environment.requeue_signal or signal.SIGUSR1)
    return signals


def requeue_on(trainer: L.Trainer, signum: int) -> bool:
    """Requeue the SLURM job where `signum` is its requeue signal (rank 0 asks; the others take it as done)."""
    environment = trainer._accelerator_connector.cluster_environment
    if not isinstance(environment, SLURMEnvironment) or signum != (environment.requeue_signal or signal.SIGUSR1):
        return False
    return requeue_slurm_job() if trainer.is_global_zero else True


class LateSignals:
    """The signals of `stop_signals` after training, while the run validates, tests and exports. Lightning acts on a
    SIGTERM only between evaluation batches (not after the last one, nor outside them), turns Ctrl+C into exit status
    1, and leaves the requeue signal's default, which ends the process without requeueing the job: a run reached
    there would end as if it had failed, or as if it had succeeded. Installed once fit has returned (before it, the
    default handlers end the process, and during it training's own handlers save and stop), and called by
    Lightning's evaluation handlers too; `check` stops the run, on every rank at once, before its results are
    written. A second Ctrl+C stops at once."""

    def __init__(self) -> None:
        self.received = 0
        self.previous: dict[int, Any] = {}

    def install(self, trainer: L.Trainer) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum in stop_signals(trainer):
                self.previous[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            raise StoppedAfterTraining(signum)
        self.received = signum
        print(f"litbert: received {signal.Signals(signum).name} after training; the run stops before writing its "
              f"results" + (" (press Ctrl+C again to stop at once)" if signum == signal.SIGINT else ""), flush=True)

    def check(self, trainer: L.Trainer) -> None:
        """A collective: every rank calls it at the same points, and all stop if any received a signal."""
        received = self.received or (signal.SIGTERM if trainer.received_sigterm else 0)
        agreed = int(trainer.strategy.reduce(torch.tensor(int(received), device=trainer.strategy.root_device),
                                             reduce_op="max"))
        if agreed:
            raise StoppedAfterTraining(agreed, requeue_on(trainer, agreed))

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self.previous = {}


def requeue_slurm_job() -> bool:
    """`scontrol requeue <job>`, as Lightning's own SLURM requeue does. True when it succeeded."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    job = f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array_job else os.environ.get("SLURM_JOB_ID", "")
    if not job.replace("_", "").isdigit():
        rank_zero_warn(f"SLURM job id {job!r} is not a number; the job was not requeued.")
        return False
    result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        rank_zero_warn(f"`scontrol requeue {job}` failed ({result.returncode}): {result.stderr.strip()}")
        return False
    rank_zero_info(f"litbert: requeued SLURM job {job}")
    return True
