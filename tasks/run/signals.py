"""How a run stops on a signal, with a non-zero exit status and, where training had begun, a checkpoint to resume.

During training `tasks.run.checkpoints.LastCheckpoint` catches SIGTERM, SIGINT and SLURM's requeue signal, saves at
the next step boundary and raises `RunInterrupted` (exit status 128 + the signal's number). After training,
`LateSignals` holds a SIGTERM until the next point where the run can stop cleanly, before its results are written.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Any

import lightning as L
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


class LateSignals:
    """SIGTERM after training, while the run validates, tests and exports: Lightning acts on one only between
    evaluation batches (not after the last one, nor outside them), and a run it reached there would end as if it had
    succeeded. Installed once fit has returned (before it, the default handler ends the process, and during it
    training's own handlers save and stop), and called by Lightning's evaluation handlers too; `check` stops the
    run, on every rank at once, before its results are written."""

    def __init__(self) -> None:
        self.received = False
        self.previous: Any = None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.received = True
        print("litbert: received SIGTERM after training; the run stops before writing its results", flush=True)

    def check(self, trainer: L.Trainer) -> None:
        """A collective: every rank calls it at the same points, and all stop if any received the signal."""
        if trainer.strategy.reduce_boolean_decision(self.received or trainer.received_sigterm, all=False):
            raise SIGTERMException

    def restore(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            self.previous = None


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
