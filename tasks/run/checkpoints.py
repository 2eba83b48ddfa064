"""The checkpoints of a run: the newest training state, to resume from exactly, and the best model.

- `LastCheckpoint` keeps `<dirpath>/last.ckpt` the newest training state: every `every_n_steps` optimizer steps or
  `every_n_minutes`, after each validation and epoch, at the end of training, and at the first step boundary after
  SIGTERM, SIGINT or (under SLURM with auto-requeue) the requeue signal, after which the run stops with a non-zero
  exit (`tasks.run.signals.RunInterrupted`). Each checkpoint also holds every random generator's state (torch, CUDA,
  numpy, Python; per rank), restored just before the next training batch, and the W&B run's id, project and entity,
  so that a resumed run continues that run. With the data position that `data.loading.ResumableLoader` adds, a
  resumed run on CPU logs exactly the losses the uninterrupted run logs.
- `ValidateFinalStep` validates the weights of the last step of a run that ends at `max_steps`, so that they can be
  the best checkpoint.
- `BestCheckpoint` is Lightning's `ModelCheckpoint` on the task's own metric that never takes a non-finite value
  (a NaN loss, an undefined correlation) as the best.
- `resume_path` and `data_seed`: where `--ckpt_path last` resumes from, and the data seed a resumed run goes on with.

The files themselves are written and read by `tasks.run.checkpoint_io.SafeCheckpointIO`.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_warn

from tasks.run.agreement import HostAgreement
from tasks.run.checkpoint_io import LAST
from tasks.run.signals import RunInterrupted, StoppedAtOnce, requeue_on, stop_signals
from tasks.run.tracking import file_log_versions
from tasks.training_logs import log_held

# ----------------------------------------------------------------------------------------------------- best


class ValidateFinalStep(L.Callback):
    """Validates the final weights of a run that ends at `trainer.max_steps`. Lightning validates every
    `val_check_interval` batches of an epoch and at epoch ends, not when `max_steps` falls between two of those;
    the steps after the last validation were then never validated, and the best checkpoint, which train.py
    evaluates and exports, came from before them (under warmup-stable-decay: from before the decay). At the step
    that reaches `max_steps` this asks the loop to stop, which in Lightning runs the validation first. (A stop by
    `max_time` already validates.)"""

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if 0 < trainer.max_steps <= trainer.global_step:
            trainer.should_stop = True


class BestCheckpoint(ModelCheckpoint):
    """The best checkpoint by the task's metric (`best-<step>.ckpt`), one a run, across resumes. A non-finite value
    is never a candidate: a run whose metric is NaN at every validation has no best checkpoint rather than a NaN
    one."""

    def __init__(self, monitor: str, mode: str, dirpath: str | None = None) -> None:
        super().__init__(dirpath=dirpath, monitor=monitor, mode=mode, filename="best-{step}",
                         auto_insert_metric_name=False, save_top_k=1, save_last=False)

    def check_monitor_top_k(self, trainer: L.Trainer, current: torch.Tensor | None = None) -> bool:
        if current is not None and not torch.isfinite(current).all():
            rank_zero_warn(f"{self.monitor} = {float(current)} at step {trainer.global_step}: not a candidate for "
                           f"the best checkpoint.")
            return False
        return super().check_monitor_top_k(trainer, current)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # A run folder moved or copied since the checkpoint was written holds its best checkpoints in the new place.
        # Lightning reloads the best score only from the same folder, and otherwise takes the first validation after
        # the resume as the best, however bad, beside the earlier best; their paths are mapped to the new folder.
        saved, best = state_dict.get("dirpath"), state_dict.get("best_k_models") or {}
        if saved is not None and self.dirpath is not None and Path(saved).absolute() != Path(self.dirpath).absolute():
            moved = {path: os.path.join(self.dirpath, os.path.basename(path)) for path in best}
            if moved and all(os.path.isfile(path) for path in moved.values()):
                state_dict = dict(state_dict, dirpath=self.dirpath,
                                  best_k_models={moved[path]: score for path, score in best.items()},
                                  **{key: moved.get(state_dict.get(key), state_dict.get(key))
                                     for key in ("best_model_path", "kth_best_model_path")})
        super().load_state_dict(state_dict)

    def _should_remove_checkpoint(self, trainer: L.Trainer, previous: str, current: str) -> bool:
        # Lightning never removes the file the run resumed from. Resumed from its best checkpoint (`--ckpt_path
        # <run>/checkpoints/best-N.ckpt`), a run that finds a better one would keep both, and its folder two "best"
        # checkpoints: this run's own best, replaced, goes as any other would. One it did not beat stays the best.
        resumed = trainer.ckpt_path is not None and Path(previous).absolute() == Path(trainer.ckpt_path).absolute()
        if resumed and previous != current and self.dirpath is not None:
            return Path(self.dirpath).absolute() in Path(previous).absolute().parents
        return super()._should_remove_checkpoint(trainer, previous, current)


# ----------------------------------------------------------------------------------------------------- random state


def random_state() -> dict[str, Any]:
    """Every generator a training step may draw from, as tensors and plain data (loadable with weights_only)."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "position": int(position),
                       "has_gauss": int(has_gauss), "gauss": float(gauss)}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_random_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(_tuples(state["python"]))
    numpy = state["numpy"]
    np.random.set_state((numpy["kind"], numpy["keys"].numpy().astype(np.uint32), numpy["position"],
                         numpy["has_gauss"], numpy["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _tuples(value: Any) -> Any:
    # Python's generator state is a tuple of tuples; a checkpoint round trip may hand back lists.
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


# ----------------------------------------------------------------------------------------------------- last


class LastCheckpoint(Checkpoint):
    """The newest training state in `<dirpath>/last.ckpt` (see the module docstring).

    A `Checkpoint`, so that Lightning runs it after the other callbacks (a save at the end of a validation then
    holds the best checkpoint that validation chose). `saving = False` (`tasks.run.cli` sets it for
    `trainer.enable_checkpointing: false`) writes nothing; signals still stop the run at a step boundary.

    Args:
        every_n_steps: Save every N optimizer steps (None: not by steps).
        every_n_minutes: Save when this many minutes have passed since the last save (None: not by time).
        dirpath: Folder of the checkpoints; by default `<trainer.default_root_dir>/checkpoints`.
    """

    def __init__(self, every_n_steps: int | None = None, every_n_minutes: float | None = 10.0,
                 dirpath: str | None = None) -> None:
        super().__init__()
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"checkpoint.every_n_steps={every_n_steps}: give a number of steps >= 1, or null to "
                             f"save by time only.")
        if every_n_minutes is not None and every_n_minutes <= 0:
            raise ValueError(f"checkpoint.every_n_minutes={every_n_minutes}: give minutes > 0, or null to save by "
                             f"steps only.")
        self.every_n_steps = every_n_steps
        self.every_n_minutes = every_n_minutes
        self.dirpath = dirpath
        self.last_path: str | None = None
        self.saving = True
        self._trainer: L.Trainer | None = None
        self.saved_step = -1
        self._saved_time = time.monotonic()
        self._pending_random_state: list[dict[str, Any]] | None = None
        self._pending_loaders: list[dict[str, Any]] | None = None
        self._log_step: int | None = None  # a resumed run's step count for the loggers, until its first batch
        self._signal: int | None = None
        self._previous_handlers: dict[int, Any] = {}
        self._pid: int | None = None  # the training process's, where the handlers were installed
        self._agreement: HostAgreement | None = None  # built in setup, once the ranks exist

    STATE_KEY = "LastCheckpoint"

    @property
    def state_key(self) -> str:
        return self.STATE_KEY  # one key whatever the cadence, so a resumed run always finds its random state

    @property
    def path(self) -> str:
        return os.path.join(self.dirpath, LAST)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer = trainer
        if self.dirpath is None:
            self.dirpath = os.path.join(trainer.default_root_dir, "checkpoints")
        if self._agreement is None:  # a collective: every rank sets up at this point
            self._agreement = HostAgreement()

    # ---- saving -------------------------------------------------------------------------------------------------

    def save(self, trainer: L.Trainer) -> str | None:
        """Write last.ckpt now (every rank takes part; rank 0 writes). None when `saving` is off."""
        if not self.saving:
            return None
        trainer.save_checkpoint(self.path)
        self.saved_step, self._saved_time = trainer.global_step, time.monotonic()
        self.last_path = self.path
        return self.path

    def _save_if_new(self, trainer: L.Trainer) -> None:
        if trainer.global_step != self.saved_step and not trainer.sanity_checking:
            self.save(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not _ended_a_step(trainer, batch_idx):
            return  # mid gradient accumulation: no step boundary, nothing to save or stop at
        by_time = self.every_n_minutes is not None and time.monotonic() - self._saved_time >= 60 * self.every_n_minutes
        received, by_time = self._agreed(trainer, by_time)
        due = by_time or (self.every_n_steps is not None and trainer.global_step % self.every_n_steps == 0)
        if not (received or due):
            return
        if _validation_follows(trainer):
            return  # save (and stop) after it: a checkpoint taken now would resume past a validation never run
        self._save_if_new(trainer)
        if received:
            _log_step(trainer)
            self._stop(trainer, received)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn != "fit" or trainer.sanity_checking:
            return
        if not _ended_a_step(trainer, trainer.fit_loop.epoch_loop.batch_progress.current.completed - 1):
            # val_check_interval counts batches, and placed this validation between the batches of one accumulated
            # step: the gradients gathered so far are in no checkpoint, so save (and stop) at the step's end.
            return
        self._save_if_new(trainer)
        received, _ = self._agreed(trainer)
        if received:
            self._stop(trainer, received)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Written even where this step was saved at its validation's end: a best checkpoint that saves at epoch
        # ends (Lightning's choice where validation runs at them) has only now replaced, and deleted, the best one
        # that save named. A run resumed from it, or resumed once finished, would look for the deleted file.
        if trainer.sanity_checking:
            return
        if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            self.save(trainer)
            return
        # The run stops before the epoch's last batch (max_steps, early stopping): Lightning counts the epoch as
        # processed now, and would resume from this state at the next epoch, skipping the rest of this one. Saved as
        # a step inside the epoch, an extended run (a larger max_steps) goes on with the epoch's next batch.
        progress = trainer.fit_loop.epoch_progress
        progress.total.processed -= 1
        progress.current.processed -= 1
        try:
            self.save(trainer)
        finally:
            progress.total.processed += 1
            progress.current.processed += 1

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save_if_new(trainer)
        received, _ = self._agreed(trainer)  # one that came after the last step's check (the epoch-end save)
        self._restore_handlers()
        if received:
            self._stop(trainer, received)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_handlers()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore_handlers()

    # ---- random state and run identity in the checkpoint --------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        state = random_state()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            states: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(states, state)
        else:
            states = [state]
        run: dict[str, Any] = {"wandb_id": None}
        if self._trainer is not None:
            for logger in self._trainer.loggers:
                if type(logger).__name__ == "WandbLogger":
                    # W&B names a run by entity, project and id: a resumed run continues it only given all three.
                    experiment = getattr(logger, "_experiment", None)  # rank 0's, once it has logged
                    run = {"wandb_id": logger.version,
                           "wandb_project": getattr(experiment, "project", None) or logger.name,
                           "wandb_entity": getattr(experiment, "entity", None) or logger._wandb_init.get("entity")}
            run["file_logs"] = file_log_versions(self._trainer.loggers)  # rank 0's are the ones saved
        loaders = [loader.state_dict() for loader in _train_loaders(self._trainer)]
        return {"random_state": states, **run, "train_loaders": loaders}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending_random_state = state_dict.get("random_state")
        self._pending_loaders = state_dict.get("train_loaders")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The data position, given back here rather than by Lightning: Lightning restores loader states only when it
        # builds the train loader after loading the checkpoint, and a task that asks for
        # `trainer.estimated_stepping_batches` in configure_optimizers has it built before. The iteration that
        # Lightning has already created starts lazily, at the first batch, so the position still applies.
        pending, self._pending_loaders = self._pending_loaders, None
        loaders = _train_loaders(trainer)
        if pending:
            if len(pending) != len(loaders):
                rank_zero_warn(f"The checkpoint holds the position of {len(pending)} train loader(s), this run has "
                               f"{len(loaders)}: the epoch restarts from its first batch.")
            else:
                for loader, state in zip(loaders, pending, strict=True):
                    loader.load_state_dict(state)
                if len(loaders) == 1:
                    _recount_batches(trainer, int(pending[0]["batches"]), getattr(loaders[0], "resuming", None))
        if trainer.ckpt_path and self.last_path is None:  # resumed: until it saves, the newest state is that file
            self.last_path, self.saved_step = str(trainer.ckpt_path), trainer.global_step
        if trainer.fit_loop.restarted_on_epoch_end:
            # Saved at its epoch's end (`on_train_epoch_end`), the state counts that epoch as processed; Lightning,
            # resuming from it, ends the epoch again with an empty pass that counts it a second time. Each later
            # sampler epoch is that count (`set_epoch`): the run trained epoch e + 1 in epoch e + 2's order (and
            # masks), and its checkpoints read as taken at an epoch's end, whose resume skipped the epoch's rest.
            for counts in (trainer.fit_loop.epoch_progress.current, trainer.fit_loop.epoch_progress.total):
                counts.processed -= 1
        loop = trainer.fit_loop.epoch_loop
        # Saved as its fit ended, after a validation (`on_train_epoch_end`), the state counts the last step for the
        # loggers already; Lightning, resuming from it, skips that validation with an empty pass of its loop, which
        # counts it again, and every step after would be logged (CSV `step`, W&B `trainer/global_step`) one too far.
        self._log_step = loop._batches_that_stepped if trainer.ckpt_path and loop.restarted_on_last \
            and loop._batches_that_stepped == trainer.global_step else None
        self._install_handlers(trainer)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        loop = trainer.fit_loop.epoch_loop
        if self._log_step is not None and loop._batches_that_stepped == self._log_step + 1:
            loop._batches_that_stepped = self._log_step  # see on_train_start
        self._log_step = None
        if self._pending_random_state is None:
            return
        states, self._pending_random_state = self._pending_random_state, None
        if len(states) != trainer.world_size:  # dropout draws from new streams, as the resume's line says
            return
        set_random_state(states[trainer.global_rank])

    # ---- signals ------------------------------------------------------------------------------------------------

    def _install_handlers(self, trainer: L.Trainer) -> None:
        self._saved_time = time.monotonic()
        self._signal = None
        self._pid = os.getpid()
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in stop_signals(trainer):
            # Replaces Lightning's handlers for the length of training: they act mid-step (or exit with status 0).
            self._previous_handlers[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)
        # Lightning broadcasts rank 0's SIGTERM flag before every batch of a run of several ranks: a device tensor
        # that every host waits for. Lightning's handler, the flag's only writer, is replaced above for the length of
        # training, so the flag stays down; the ranks agree on any rank's signal in `_agreed`.
        vars(trainer.fit_loop.epoch_loop)["_broadcast_sigterm_tensor"] = _flag_stays_down

    def _restore_handlers(self) -> None:
        if self._trainer is not None:
            vars(self._trainer.fit_loop.epoch_loop).pop("_broadcast_sigterm_tensor", None)
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous_handlers = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:
            # A DataLoader worker, forked during training with these handlers: Ctrl+C in a terminal, or a scheduler's
            # SIGTERM to the whole job, reaches it too, and it would print the run's messages with its own copy of
            # the step and checkpoint. The run saves, stops and ends it.
            return
        if signum == signal.SIGINT and self._signal == signal.SIGINT:  # a second Ctrl+C: stop now, mid-step
            step = self._trainer.global_step if self._trainer is not None else 0
            raise StoppedAtOnce(signum, step, self.last_path, self.saved_step)
        self._signal = signum
        print(f"litbert: received {signal.Signals(signum).name}; stopping at the end of this step "
              f"(press Ctrl+C again to stop at once, without a checkpoint).", flush=True)

    def _agreed(self, trainer: L.Trainer, by_time: bool = False) -> tuple[int, bool]:
        """The signal that any rank received (0 for none), and rank 0's `by_time` (clocks differ across ranks): the
        same on every rank, from one all-reduce between the hosts that waits for no device."""
        received, by_time = self._agreement.agree_max([self._signal or 0, int(by_time and trainer.is_global_zero)])
        return received, bool(by_time)

    def _stop(self, trainer: L.Trainer, signum: int) -> None:
        path = self.last_path if self.saved_step == trainer.global_step else None
        requeued = requeue_on(trainer, signum)
        raise RunInterrupted(signum, trainer.global_step, path, requeued)


def _log_step(trainer: L.Trainer) -> None:
    """Log the step that just ended, as Lightning does once every `on_train_batch_end` has returned: a run stopped in
    one would never log it, and the resumed run starts at the step after it, so its loss would be missing from the
    run's history (at the logging cadence: a step the cadence skips stays unlogged). The task's own
    `on_train_batch_end` would have logged the values it held back (`EncoderTask.log_held_values`)."""
    log_held(trainer.lightning_module)
    connector = trainer._logger_connector
    connector.on_batch_end()
    connector.update_train_step_metrics()


def _flag_stays_down() -> None:
    """Lightning's SIGTERM broadcast while `LastCheckpoint` holds the signals: nothing to broadcast."""


def _train_loaders(trainer: L.Trainer | None) -> list[Any]:
    """The training loaders whose position can be saved (`state_dict` / `load_state_dict`, as `ResumableLoader`)."""
    combined = getattr(getattr(trainer, "fit_loop", None), "_combined_loader", None)
    loaders = combined.flattened if combined is not None else []
    return [loader for loader in loaders if callable(getattr(loader, "state_dict", None))
            and callable(getattr(loader, "load_state_dict", None))]


def _recount_batches(trainer: L.Trainer, saved: int, resumed: dict[str, int] | None) -> None:
    """Lightning counts the epoch's batches so far (`batch_progress`: when a step ends under accumulation, when the
    epoch does). A position that the loader converted to another batch size or number of processes
    (`ResumableLoader.load_state_dict`) moves those counts with it, where they count the position's batches."""
    if resumed is None or resumed["batches"] == saved:
        return
    progress = trainer.fit_loop.epoch_loop.batch_progress
    if progress.current.ready != saved:  # counts of another epoch than the position's
        return
    moved = resumed["batches"] - saved
    for counts in (progress.current, progress.total):
        counts.ready, counts.started = counts.ready + moved, counts.started + moved
        counts.processed, counts.completed = counts.processed + moved, counts.completed + moved


def _ended_a_step(trainer: L.Trainer, batch_idx: int) -> bool:
    """Whether the batch that just ended was the last of an optimizer step (always, without accumulation)."""
    last_of_epoch = bool(getattr(trainer.fit_loop.epoch_loop.batch_progress, "is_last_batch", False))
    return (batch_idx + 1) % trainer.accumulate_grad_batches == 0 or last_of_epoch


def _validation_follows(trainer: L.Trainer) -> bool:
    """Whether the training loop runs validation right after the batch that just ended (Lightning's own test)."""
    loop = trainer.fit_loop.epoch_loop
    try:
        return bool(loop._should_check_val_fx(trainer.fit_loop._data_fetcher))
    except (AttributeError, TypeError):  # another Lightning version: save at the step, before validation
        return False


# ----------------------------------------------------------------------------------------------------- resuming


def resume_path(ckpt_path: str | None, root: Path) -> str | None:
    """The checkpoint `--ckpt_path` resumes from: `last` is `<root>/checkpoints/last.ckpt` when it exists, and None
    (start afresh, for a requeued job that saved nothing yet) when it does not."""
    if ckpt_path != "last":
        return ckpt_path
    last = root / "checkpoints" / LAST
    if last.is_file():
        print(f"litbert: resuming from {last}", flush=True)
        return str(last)
    print(f"litbert: --ckpt_path last: no {last} yet, so training starts from the beginning", flush=True)
    return None


def check_same_classes(config: Any, resumed: dict[str, Any], path: str) -> None:
    """A resume continues the run its checkpoint was saved by: the same task and datamodule. Lightning restores a
    datamodule's state only from the entry of its own class, so a checkpoint of other data (SST-2's, resumed with
    the IMDB config) skipped every check of the data and went on training on it; and a task whose weights happen to
    fit (a MaskedLM run resumed as a Distillation) went on as the other task, its best checkpoint chosen by the other
    task's metric. By class name, as Lightning keys the datamodule's state; a checkpoint that does not say passes."""
    changed = []
    for section, key in (("model", "hyper_parameters"), ("data", "datamodule_hyper_parameters")):
        saved = (resumed.get(key) or {}).get("_class_path")
        now = config[section].class_path if config.get(section) is not None else None
        if saved and now and saved.rsplit(".", 1)[-1] != now.rsplit(".", 1)[-1]:
            changed.append(f"{section}.class_path: {saved} in the checkpoint, {now} now")
    if changed:
        raise ValueError(f"The checkpoint to resume, {path}, was saved by another kind of run: {'; '.join(changed)}. "
                         f"A resume continues the run it was saved by: resume with the config it was saved with "
                         f"(config.yaml in its run folder), or start a new run from its weights (--model.pretrained "
                         f"on its export).")


def data_seed(config: Any, resumed: dict[str, Any]) -> int:
    """The seed of an unset data.seed: the resumed checkpoint's (a run started with `seed_everything: true` draws
    another seed when it is relaunched, and its batches must go on in the order they began; 0 for a checkpoint
    written before the seed was kept), else the run's seed_everything, else 0 (`seed_everything: false`)."""
    if resumed:
        kept = resumed.get(config.data.class_path.rsplit(".", 1)[-1], {}).get("seed")  # Lightning's key: the class
        if kept is None:  # written before the seed was kept, when an unset data.seed was 0
            print("litbert: the checkpoint predates the kept data seed: its batches came from data.seed 0, and the "
                  "resumed run goes on with it", flush=True)
        return 0 if kept is None else kept
    seed = config.seed_everything
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0
