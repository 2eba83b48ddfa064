"""A training batch calls `LightningModule.log` only where its values reach a reader (`tasks.training_logs`), and
every reader sees what it saw when every batch logged: the loggers' rows, `callback_metrics` at the end of a fit,
and, for a callback that monitors a `train/` metric, every batch's values."""

import csv

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from tiny import TINY, mlm_batches
from torch.utils.data import DataLoader

from tasks.base import Optimization
from tasks.mlm import MaskedLM
from tasks.run.checkpoints import ValidateFinalStep
from tasks.run.progress import ProgressBar


class StopAt(L.Callback):
    """Stops the run at the end of optimizer step `step`, as `max_time`'s Timer does once the time is up."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            trainer.should_stop = True


class RecordedBar(ProgressBar):
    """litbert's progress bar, recording what it shows at the end of each optimizer step."""

    def __init__(self) -> None:
        super().__init__()
        self.shown: dict[int, dict[str, str]] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self.shown[trainer.global_step] = dict(self._shown)


def fit(tmp_path, log_every: int, batches=None, callbacks=(), **kwargs) -> tuple[L.Trainer, list[dict[str, str]]]:
    """A tiny MLM fit logging to CSV every `log_every` steps, ending at max_steps as train.py's runs do
    (`ValidateFinalStep`: Lightning then logs the last step); the trainer and the CSV's rows."""
    torch.manual_seed(0)
    # A high rate: the accuracy moves within the few steps.
    model = MaskedLM(encoder=TINY, vocab_size=64, optimization=Optimization(learning_rate=1e-2, warmup=0))
    root = tmp_path / f"every-{log_every}"
    settings = dict(max_steps=12, enable_progress_bar=False,
                    enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks))
    trainer = L.Trainer(accelerator="cpu", logger=CSVLogger(root, name="log"), log_every_n_steps=log_every,
                        default_root_dir=root, enable_model_summary=False, callbacks=[ValidateFinalStep(), *callbacks],
                        **{**settings, **kwargs})
    trainer.fit(model, DataLoader(batches or mlm_batches(12), batch_size=None))
    (path,) = root.rglob("metrics.csv")
    with open(path) as file:
        rows = [{k: v for k, v in row.items() if v and "per_sec" not in k and "tflops" not in k}
                for row in csv.DictReader(file)]
    return trainer, rows


def at_steps(rows: list[dict[str, str]], steps: list[int]) -> list[dict[str, str]]:
    return [row for row in rows if int(row["step"]) in steps]


@pytest.mark.parametrize("log_every", [1, 5])
def test_only_the_batches_that_reach_a_reader_call_log(log_every, tmp_path, monkeypatch):
    """Every 5 steps and at the last step (max_steps), the training values are logged: 3 calls a step for the loss,
    accuracy, perplexity, learning rate and gradient norm; none at the 9 steps between. Every step with
    `log_every_n_steps 1`."""
    calls: dict[int, list[str]] = {}
    log = L.LightningModule.log

    def counted(self, name, *args, **kwargs):
        if name.startswith("train/") and self.trainer.training:
            calls.setdefault(self.trainer.global_step, []).append(name)
        return log(self, name, *args, **kwargs)

    monkeypatch.setattr(L.LightningModule, "log", counted)
    fit(tmp_path, log_every)
    logged = sorted({"train/loss", "train/accuracy", "train/perplexity", "train/lr", "train/grad_norm"})
    steps = list(range(12)) if log_every == 1 else [4, 9, 11]
    # (Throughput's values are logged at the steps after the 5th and 10th: not the task's, and not counted here.)
    assert {step: sorted(set(names) - {"train/tokens_per_sec", "train/samples_per_sec", "train/tflops"})
            for step, names in calls.items() if step in steps} == {step: logged for step in steps}
    assert [step for step in calls if step not in steps and set(calls[step]) & set(logged)] == []


def test_the_rows_are_those_of_a_run_that_logs_every_step(tmp_path):
    """The CSV rows at steps 4, 9 and 11 of a run logging every 5 steps are the rows of a run logging every step,
    value for value: also where a step that logs lacks a metric (no masked token: no accuracy) that a step before it
    had, which Lightning logs with its last value."""
    batches = mlm_batches(12)
    batches[9]["labels"].fill_(-100)  # step 9 scores no token: its row keeps step 8's accuracy
    _, every = fit(tmp_path, 1, batches)
    _, fifth = fit(tmp_path, 5, batches)
    assert [int(row["step"]) for row in fifth] == [4, 9, 11]
    assert fifth == at_steps(every, [4, 9, 11])
    assert fifth[1]["train/accuracy"] == every[8]["train/accuracy"] != fifth[0]["train/accuracy"]


def test_a_run_stopped_between_logging_steps_logs_that_step(tmp_path):
    """A callback that stops the run at a step that does not log (max_time's Timer) makes Lightning log it: its row
    holds that step's values, not those of the step that logged last, and so does the progress bar, which reads them
    after that callback (a Timer of the user's callbacks, before the bar)."""
    bars = [RecordedBar(), RecordedBar()]
    _, every = fit(tmp_path, 1, callbacks=[StopAt(7), bars[0]], enable_progress_bar=True)
    _, fifth = fit(tmp_path, 5, callbacks=[StopAt(7), bars[1]], enable_progress_bar=True)
    assert [int(row["step"]) for row in fifth] == [4, 6]
    assert fifth == at_steps(every, [4, 6])
    assert bars[1].shown[7] == bars[0].shown[7] == {"loss": f"{float(every[6]['train/loss']):.4g}"}


def test_accumulated_steps_log_the_means_of_their_batches(tmp_path):
    _, every = fit(tmp_path, 1, max_steps=6, accumulate_grad_batches=2)
    _, third = fit(tmp_path, 3, max_steps=6, accumulate_grad_batches=2)
    assert [int(row["step"]) for row in third] == [2, 5]
    assert third == at_steps(every, [2, 5])


def test_the_last_values_of_an_epoch_stay_in_the_callback_metrics(tmp_path):
    """A run bounded by epochs, whose last step is not one that logs: `callback_metrics` after the fit holds the
    last step's values, as when every step logged."""
    runs = [fit(tmp_path, every, max_steps=-1, max_epochs=2)[0] for every in (1, 5)]
    last = [{k: float(v) for k, v in run.callback_metrics.items() if k.startswith("train/")} for run in runs]
    assert last[0] and last[1] == last[0]


def test_a_checkpoint_that_monitors_a_training_metric_sees_every_step(tmp_path):
    """A ModelCheckpoint on train/loss every 3 steps reads the loss of steps that do not log: those log for it."""
    def best(log_every: int) -> tuple[float, str]:
        checkpoint = ModelCheckpoint(dirpath=tmp_path / f"checkpoints-{log_every}", monitor="train/loss",
                                     every_n_train_steps=3, filename="{step}")
        fit(tmp_path, log_every, callbacks=[checkpoint])
        return float(checkpoint.best_model_score), checkpoint.best_model_path.rsplit("/", 1)[-1]

    assert best(5) == best(1)
