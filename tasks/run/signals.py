"""How a run stops on a signal, with a non-zero exit status and, where training had begun, a checkpoint to resume.

During training `tasks.run.checkpoints.LastCheckpoint` catches SIGTERM, SIGINT and SLURM's requeue signal, saves at
the next step boundary and raises `RunInterrupted` (exit status 128 + the signal's number).
"""

from __future__ import annotations

import os
import signal
import subprocess

from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn


class RunInterrupted(Exception):
    """The run stopped at a step boundary because of a signal; `checkpoint` holds its state (None if checkpointing
    is off). `train.py` turns it into a message and the exit status 128 + signal number."""

    def __init__(self, signum: int, step: int, checkpoint: str | None, requeued: bool = False) -> None:
        self.signum, self.step, self.checkpoint, self.requeued = signum, step, checkpoint, requeued
        name = signal.Signals(signum).name
        where = f"saved to {checkpoint}" if checkpoint else "not saved (checkpointing is off)"
        super().__init__(f"stopped by {name} at step {step}; the training state was {where}"
                         + ("; the SLURM job was requeued" if requeued else ""))


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
