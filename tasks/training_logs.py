"""Which training batches call `LightningModule.log`: those whose values reach a reader, not every batch.

Lightning writes a training batch's logged values to the loggers only every `log_every_n_steps` steps (and at a
step that stops the run), and litbert's progress bar reads them at those steps too (`tasks.run.progress`); a value
logged at any other batch is overwritten unread. Each `self.log` costs the host about 0.3 ms of checks and
bookkeeping, and a step logs three to seven values: on a GPU whose step takes a few milliseconds of kernels, that is
host time the device waits for. So a task logs its training values at the batches `reaches_a_reader` names, and
holds the others (`HeldValues`); a batch that logs first gives Lightning the held values of the keys it does not
log itself, so that every metric Lightning then writes is the latest value logged for it, as if every batch had
logged (a metric that a batch lacks, such as the accuracy of a batch without a masked token, keeps its last value).

What stays as before: the rows of every logger (CSV, TensorBoard, W&B), the progress bar, `trainer.callback_metrics`
at the end of each epoch and of the fit, and every batch's values for a callback or scheduler that names a `train/`
metric (a `ModelCheckpoint` or `EarlyStopping` monitoring `train/loss`, a checkpoint filename with `{train/loss}`,
`ReduceLROnPlateau` on it): those log at every batch. What changes: `trainer.callback_metrics` read by other code
between two logging steps holds the values of the last one.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch

TRAINING = "train/"


def reaches_a_reader(trainer: L.Trainer, every_batch: bool) -> bool:
    """Whether the training batch in progress logs its values: a step that Lightning writes to the loggers (every
    `log_every_n_steps`, and a step after which the run stops), the last batch of an epoch (its values stay in
    `callback_metrics`), the step that reaches `max_steps` (litbert stops there: `ValidateFinalStep`), and, with
    `every_batch`, all of them. Erring towards logging is safe: a batch that logs does what every batch once did."""
    if every_batch or trainer.fast_dev_run or trainer._logger_connector.should_update_logs:
        return True
    if 0 < trainer.max_steps <= trainer.global_step + 1:
        return True
    return bool(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch)


def log_value(module: L.LightningModule, key: str, value: Any) -> None:
    """`module.log(key, value)`, a number (the learning rate) filled on the device first: `log` would copy it
    there, which on CUDA waits for the device (a copy from pageable host memory; `bench.syncs`)."""
    module.log(key, torch.full((), value, device=module.device) if isinstance(value, float) else value)


def log_held(module: L.LightningModule) -> None:
    """Have a task log the training values it held back (`EncoderTask.log_held_values`), before code that reads them
    where the batch in progress was not going to log (a callback stopped the run at it); other modules hold none."""
    log_held_values = getattr(module, "log_held_values", None)
    if log_held_values is not None:
        log_held_values()


def names_a_training_metric(trainer: L.Trainer) -> bool:
    """Whether a callback (by its `monitor`, or a checkpoint's `filename`) or a scheduler (its `monitor`) reads a
    `train/` metric from `trainer.callback_metrics`, at batches of its own choosing."""
    settings = [getattr(callback, name, None) for callback in trainer.callbacks for name in ("monitor", "filename")]
    settings += [config.monitor for config in trainer.lr_scheduler_configs]
    return any(isinstance(setting, str) and TRAINING in setting for setting in settings)


class HeldValues:
    """The training values of the batches that did not log, the latest of each key, with the hook that made each
    (Lightning keeps a logged value per hook and key)."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[str, Any]] = {}

    def __bool__(self) -> bool:
        return bool(self._values)

    def hold(self, hook: str, key: str, value: Any) -> None:
        self._values[key] = (hook, value)

    def drop(self, key: str) -> None:
        self._values.pop(key, None)

    def clear(self) -> None:
        self._values.clear()

    def log(self, module: L.LightningModule) -> None:
        """Log every held value, in the hook that made it, and forget them."""
        if not self._values:
            return
        values, self._values = self._values, {}
        current = module._current_fx_name
        try:
            for key, (hook, value) in values.items():
                module._current_fx_name = hook
                log_value(module, key, value)
        finally:
            module._current_fx_name = current
