"""How a run stops on a signal, with a non-zero exit status and, where training had begun, a checkpoint to resume.

During training `tasks.run.checkpoints.LastCheckpoint` catches SIGTERM, SIGINT and SLURM's requeue signal, saves at
the next step boundary and raises `RunInterrupted` (exit status 128 + the signal's number). Outside the training
steps `RunSignals` catches them: before training, while the run is built, its data read and tokenised and Lightning's
sanity check runs, it stops the run at once (`StoppedBeforeTraining`: there is nothing to save); after training it
holds them until the next point where the run can stop cleanly, before its results are written, and raises
`StoppedAfterTraining`. Both give the same exit status, and the requeue signal requeues the job.

Under several ranks the ranks stop together. During training and after it they agree on any rank's signal at their
next common point. Before training there is none to wait for (a rank's data is read and tokenised on its own clock),
so a signal to one rank, a node's process or a scheduler's task, is passed on: a rank that Lightning's launcher
started (`trainer.devices` > 1) passes it to the launcher, the run's first process, which passes it to every rank it
started, and every rank stops at once. A rank that stops ends after the launcher (`end_after_launcher`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment
from lightning.pytorch.strategies.launchers import _SubprocessScriptLauncher
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


class StoppedAtOnce(SIGTERMException):
    """A second Ctrl+C stopped training at once, at step `step` (the optimizer steps taken), without saving;
    `checkpoint` is the newest training state saved before it (step `saved_step`), None if none. A `SystemExit`, not the
    KeyboardInterrupt that Lightning ends with exit status 1: `tasks.run.errors` gives 128 + `signum` and the
    command that resumes from `checkpoint`."""

    def __init__(self, signum: int, step: int, checkpoint: str | None, saved_step: int) -> None:
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        newest = f"the newest training state is {checkpoint} (step {saved_step})" if checkpoint else \
            "no training state was saved before it"
        super().__init__(f"stopped at once by a second {signal.Signals(signum).name} at step {step}, without "
                         f"saving; {newest}")


class StoppedBeforeTraining(SIGTERMException):
    """A signal stopped the run before its first training step: while it was built (a tokenizer trained), its data
    read and tokenised, or in Lightning's sanity check. Nothing was trained or saved. `tasks.run.errors` turns it into
    a message and the exit status 128 + `signum`. A `SystemExit`, as Lightning's SIGTERMException, so that no
    `except Exception` on the way (a data loader's, jsonargparse's while it builds the datamodule) takes it for an
    error of its own."""

    def __init__(self, signum: int, requeued: bool = False) -> None:
        self.signum, self.requeued = signum, requeued
        super().__init__(128 + signum)


class StoppedAfterTraining(SIGTERMException):
    """A signal stopped the run after training: in the evaluation, export and predictions, before its results were
    written, or (`finishing`) once they were, while rank 0 wrote the submission files, uploaded the export or printed
    the summary. `tasks.run.errors` turns it into a message and the exit status 128 + `signum`; Lightning's own
    SIGTERMException (from the evaluation loops after training) is read as SIGTERM."""

    def __init__(self, signum: int, requeued: bool = False, finishing: bool = False) -> None:
        self.signum, self.requeued, self.finishing = signum, requeued, finishing
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


# The pid of the process that starts the other ranks of its node (Lightning's launcher, the run's first process), set
# while it runs: in the environment of the ranks it starts, whose parent it is.
LAUNCHER_PID = "LITBERT_LAUNCHER_PID"


def started_by_launcher() -> bool:
    """Whether this process is a rank that Lightning's launcher started (see `LAUNCHER_PID`)."""
    return os.environ.get(LAUNCHER_PID) == str(os.getppid())


def leave_process_groups() -> None:
    """Destroy this process's process groups, once its run has ended (or before it waits for the launcher). Lightning
    does so at exit for NCCL only: a gloo group (CPU runs, and `agreement`'s group on GPUs) left to the interpreter's
    shutdown is torn down with its worker threads after Python is gone, and a run that succeeded intermittently ended
    in SIGABRT ("terminate called without an active exception"). Local to the process: no collective."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def end_after_launcher(patience: float = 60.0) -> None:
    """A rank that the launcher started, ending on an error or a signal: leave the process groups and wait (up to
    `patience` seconds) for the launcher to end first. Lightning's launcher kills itself with SIGKILL a few seconds
    after one of the ranks it started ends with a non-zero status, and the run would end with status 137, without
    its message, while it writes it. Leaving the groups frees a launcher that waits in a collective for this rank."""
    if not started_by_launcher():
        return
    leave_process_groups()
    launcher, deadline = os.getppid(), time.monotonic() + patience
    while os.getppid() == launcher and time.monotonic() < deadline:
        time.sleep(0.1)


PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process receives when its parent ends


def stop_with_parent() -> bool:
    """Ask the kernel for a SIGTERM to this process when its parent ends (Linux's parent-death signal), which then
    stops it as any SIGTERM does; False where it cannot (not Linux, or refused)."""
    if not sys.platform.startswith("linux"):
        return False
    return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0


def end_with_torchrun() -> None:
    """Make a rank that torchrun started receive SIGTERM when torchrun ends without stopping it (`kill -9` of
    torchrun, an agent that crashed). torchrun starts each rank in a session of its own and leaves it running: its
    ranks went on training, unseen, to the end of the run, writing its checkpoints, export and metrics.json into the
    folder the user took for stopped (and might start again). The SIGTERM stops a rank as any does. torchrun outlives
    its ranks otherwise: it waits for them. Linux only (`prctl`); elsewhere nothing changes."""
    if not TorchElasticEnvironment.detect() or not stop_with_parent():
        return
    if os.getppid() == 1:  # torchrun ended before this process could ask (it imports for seconds first)
        os.kill(os.getpid(), signal.SIGTERM)


class RunSignals(L.Callback):
    """The signals of a run outside its training steps (`LastCheckpoint` has its own during them), from before the run
    is built to its end: `with RunSignals():` around the building, and `attach(trainer)` once there is a trainer.

    Left to Python and Lightning, Ctrl+C before training ends in a traceback (or Lightning's exit status 1 in the
    sanity check), SIGTERM ends the process without a word, and the requeue signal ends it without requeueing the
    job; after training, Lightning acts on a SIGTERM only between evaluation batches (not after the last one, nor
    outside them). A run stopped there would end as if it had crashed, or as if it had succeeded.

    Before training (until `on_train_end`, or `hold` once fit has returned) there is nothing to save, and a signal
    stops the run at once with `StoppedBeforeTraining`. After it, while the run validates, tests and exports, a signal
    is held, and `check` stops the run, on every rank at once, before its results are written (a second Ctrl+C stops
    at once). After the last check (`finish`) only rank 0's writing is left, and a signal stops it at once.
    Lightning's evaluation handlers call the handler too. A process forked from the run's (a DataLoader worker, a
    tokenising process) leaves the stopping to the run: it ignores them, but ends on SIGTERM.

    Under Lightning's launcher a signal before training stops every rank at once (see the module's docstring): the
    launcher passes its first signal on to the ranks it started, and a rank that it started passes its first to the
    launcher. Once a rank is stopping, the copies that the others pass back are ignored."""

    # The signal that this process, a rank that the launcher started, passed on to the launcher: one for the process,
    # whichever `RunSignals` received it (`train.main` has one while the run is built, another while it runs).
    passed_on = 0

    def __init__(self) -> None:
        self.received = 0
        self.holding = False
        self.finishing = False
        self.trainer: L.Trainer | None = None
        self.previous: dict[int, Any] = {}
        self.pid = os.getpid()
        self.launches = False  # this process starts the other ranks of its node
        self.stopping = False

    def __enter__(self) -> RunSignals:
        self._install([signal.SIGTERM, signal.SIGINT])
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()
        if self.launches:
            os.environ.pop(LAUNCHER_PID, None)
        if self.trainer is not None:
            vars(self.trainer._signal_connector).pop("_sigterm_notifier_fn", None)
            if self in self.trainer.callbacks:
                self.trainer.callbacks.remove(self)

    def attach(self, trainer: L.Trainer) -> None:
        """Also catch the requeue signal of a SLURM job that auto-requeues, and hold the signals once training ends."""
        self.trainer = trainer
        if isinstance(trainer.strategy.launcher, _SubprocessScriptLauncher) and \
                not trainer._accelerator_connector.cluster_environment.creates_processes_externally:
            self.launches = True  # the ranks it starts (in `trainer.fit`) copy the environment
            os.environ[LAUNCHER_PID] = str(self.pid)
        self._install(stop_signals(trainer))
        trainer.callbacks.append(self)
        # Lightning puts its own SIGTERM handler in front of this one for each of its stages (the sanity check, the
        # evaluation after training), and under several ranks it broadcasts from rank 0 there: a collective that only
        # the ranks that received the signal join. A SIGTERM to one rank other than 0 (a node's processes) left every
        # rank waiting for the others forever. It runs without the broadcast: the ranks agree in `check`.
        vars(trainer._signal_connector)["_sigterm_notifier_fn"] = self._lightning_sigterm

    def _lightning_sigterm(self, signum: int, frame: Any) -> None:
        """Lightning's `_SignalConnector._sigterm_notifier_fn` without its broadcast: pass the signal on to the ranks
        that this one started, and where one process runs, let Lightning stop an evaluation between batches."""
        if os.getpid() != self.pid or self.trainer is None:  # a process forked from the run's: see `_on_signal`
            return
        if self.trainer.strategy.launcher is not None:
            self.trainer.strategy.launcher.kill(signum)
        if self.trainer.world_size == 1:
            self.trainer._signal_connector.received_sigterm = True

    def _install(self, signums: list[int]) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in signums:
            if signum not in self.previous:
                self.previous[signum] = signal.signal(signum, self._on_signal)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.hold()  # before LastCheckpoint (a Checkpoint: Lightning runs it last) hands the signals back

    def hold(self) -> None:
        self.holding = True

    def _on_signal(self, signum: int, frame: Any) -> None:
        if os.getpid() != self.pid:  # a process forked from the run's: the run stops it
            if signum == signal.SIGTERM:  # as the run does when it stops it (a pool of tokenising processes)
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)
            return
        if not self.holding:
            self._stop_before_training(signum)  # raises, unless the signal is to be ignored or held
            return
        if self.finishing:
            requeued = self.trainer is not None and requeue_on(self.trainer, signum)
            raise StoppedAfterTraining(signum, requeued, finishing=True)
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            raise StoppedAfterTraining(signum)
        self.received = signum
        print(f"litbert: received {signal.Signals(signum).name} after training; the run stops before writing its "
              f"results" + (" (press Ctrl+C again to stop at once)" if signum == signal.SIGINT else ""), flush=True)

    def _stop_before_training(self, signum: int) -> None:
        """Stop at once, and make the other ranks of the node stop too: through the launcher, which passes the signal
        to every rank it started (`launcher.kill`)."""
        launched = started_by_launcher()
        if self.stopping and (launched or self.launches):
            return  # a copy that another rank passed back
        if launched and not RunSignals.passed_on:
            RunSignals.passed_on = signum
            os.kill(os.getppid(), signum)
            if not (dist.is_available() and dist.is_initialized()):
                # The launcher waits for this rank to join the process group, deaf to signals until it has: join it,
                # and stop when the launcher passes the signal back.
                return
        if self.launches and self.trainer is not None and self.trainer.strategy.launcher is not None:
            self.trainer.strategy.launcher.kill(signum)
        self.stopping = True
        requeued = self.trainer is not None and requeue_on(self.trainer, signum)
        raise StoppedBeforeTraining(signum, requeued)

    def check(self, trainer: L.Trainer) -> None:
        """A collective: every rank calls it at the same points, and all stop if any received a signal."""
        received = self.received or (signal.SIGTERM if trainer.received_sigterm else 0)
        agreed = int(trainer.strategy.reduce(torch.tensor(int(received), device=trainer.strategy.root_device),
                                             reduce_op="max"))
        if agreed:
            raise StoppedAfterTraining(agreed, requeue_on(trainer, agreed))

    def finish(self, trainer: L.Trainer) -> None:
        """The last `check`. What follows is rank 0's alone (the submission files, the upload, the summary): a signal
        there stops it at once, where holding it would print that the run stops and then let it finish."""
        self.check(trainer)
        self.finishing = True

    def restore(self) -> None:
        # A rank stopping with the others: the copies of the signal that they pass back, which may come after this
        # `RunSignals` has ended, would otherwise end the process with the signal's default action mid-message.
        passed_back = self.stopping and (self.launches or started_by_launcher())
        for signum, handler in self.previous.items():
            signal.signal(signum, signal.SIG_IGN if passed_back else handler if handler is not None else signal.SIG_DFL)
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
