"""`--early_stopping.patience`: through train.py, a run whose metric stops improving stops early, says why and
records it in metrics.json (a finished run, exit status 0); a resumed run goes on counting from its checkpoint."""

import json
import os
from pathlib import Path

import pytest
from runs import MINILM
from tiny import TINY, mlm_batches, trainer
from torch.utils.data import DataLoader

import train
from tasks.base import Optimization
from tasks.mlm import MaskedLM
from tasks.run.early_stopping import EarlyStopping


@pytest.fixture(scope="module")
def env(shared_data, tmp_path_factory):
    """Offline, untracked runs with a private tokenization cache."""
    saved = dict(os.environ)
    os.environ.update(LITBERT_DATA=str(shared_data), LITBERT_CACHE=str(tmp_path_factory.mktemp("cache")))
    yield
    os.environ.clear()
    os.environ.update(saved)


def stalled_run(root: Path, *overrides: str) -> int:
    """The README job cut to seconds, at a learning rate too small to move val/loss by 0.01: validation every 5
    steps, patience as given."""
    return train.cli_main([
        "--config", "configs/quickstart.yaml", "--trainer.default_root_dir", str(root),
        "--data.tokenizer", MINILM, "--data.train_tokenizer", "null", "--data.max_documents", "200",
        "--data.max_val_documents", "20", "--data.batch_size", "8", "--trainer.val_check_interval", "5",
        "--model.optimization.learning_rate", "1e-9", "--early_stopping.min_delta", "0.01",
        "--trainer.logger", "false", "--trainer.enable_progress_bar", "false", "--export", "false", *overrides])


def stopped_at(root: Path) -> int | None:
    step = json.loads((root / "metrics.json").read_text()).get("early_stopping/stopped_at_step")
    assert step is None or type(step) is int, f"a step, written as {step!r}"  # not 10.0
    return step


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_a_run_whose_metric_stalls_stops_early_says_why_and_finishes(env, tmp_path, capsys):
    assert stalled_run(tmp_path, "--early_stopping.patience", "1", "--trainer.max_steps", "30", "--export", "true") == 0
    out = capsys.readouterr().out
    # Step 5's validation is the best; step 10's does not improve on it by 0.01: one validation of patience.
    assert "litbert: stopping early at step 10: val/loss did not improve by more than 0.01 for 1 validation(s) in " \
           "a row (--early_stopping.patience 1)" in out
    assert "litbert: stopped early    at step 10" in out
    assert stopped_at(tmp_path) == 10
    assert "val/loss" in json.loads((tmp_path / "metrics.json").read_text())
    assert "| early_stopping/stopped_at_step | 10 |" in (tmp_path / "model" / "README.md").read_text()  # the card


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_a_resumed_run_keeps_counting_validations_without_improvement(env, tmp_path, capsys):
    """Patience 2: the first run ends at max_steps 10 one validation into its patience; resumed to 20 steps, it
    stops at step 15. (Counting afresh, step 15 would be a new best and the run would end at 20.)"""
    assert stalled_run(tmp_path, "--early_stopping.patience", "2", "--trainer.max_steps", "10") == 0
    assert stopped_at(tmp_path) is None
    assert stalled_run(tmp_path, "--early_stopping.patience", "2", "--trainer.max_steps", "20",
                       "--ckpt_path", "last") == 0
    assert stopped_at(tmp_path) == 15
    assert "litbert: stopping early at step 15" in capsys.readouterr().out


def test_a_run_stops_early_only_where_patience_is_given(env, tmp_path):
    """Unset, there is no early stopping at all (Lightning's patience 0 would stop at the first validation that does
    not improve); given, the callback watches the task's metric with that patience."""
    from tasks.run.cli import make_cli

    def early(*overrides: str) -> list[EarlyStopping]:
        cli = make_cli(["--config", "configs/quickstart.yaml", "--trainer.default_root_dir", str(tmp_path),
                        "--data.tokenizer", MINILM, "--data.train_tokenizer", "null", "--trainer.logger", "false",
                        *overrides])
        return [c for c in cli.trainer.callbacks if isinstance(c, EarlyStopping)]

    assert early() == []
    (stopping,) = early("--early_stopping.patience", "3")
    assert stopping.patience == 3


def test_early_stopping_without_validation_or_patience_is_refused():
    model = MaskedLM(encoder=TINY, vocab_size=64, optimization=Optimization(learning_rate=1e-3, warmup=1))
    with pytest.raises(ValueError, match=r"--early_stopping.patience 2 stops the run when val/loss stops improving, "
                                         r"but this run never validates"):
        trainer(2, callbacks=[EarlyStopping(patience=2)]).fit(model, DataLoader(mlm_batches(2), batch_size=None))
    with pytest.raises(ValueError, match=r"early_stopping.min_delta=0.1 .* but early_stopping.patience is unset"):
        EarlyStopping(min_delta=0.1)
    with pytest.raises(ValueError, match=r"early_stopping.patience=0: give a number of validations >= 1"):
        EarlyStopping(patience=0)


def test_the_wait_count_is_saved_and_resumed_with_this_runs_patience(tmp_path):
    """Validation every 2 steps at a learning rate too small to move val/loss by 0.01, patience 2: 4 steps leave
    one validation without improvement in the checkpoint; resumed, the run stops at step 6 (counting afresh it
    would take step 6 as a new best and run to 10). Resumed with patience 3 instead, it runs to step 8."""
    data = DataLoader(mlm_batches(4), batch_size=None)

    def fit(steps: int, patience: int, ckpt_path=None) -> tuple[int, EarlyStopping]:
        model = MaskedLM(encoder=TINY, vocab_size=64, optimization=Optimization(learning_rate=1e-9, warmup=0))
        early = EarlyStopping(patience=patience, min_delta=0.01)
        run = trainer(steps, val_check_interval=2, callbacks=[early])
        run.fit(model, data, DataLoader(mlm_batches(1), batch_size=None), ckpt_path=ckpt_path)
        run.save_checkpoint(tmp_path / f"{steps}.ckpt")
        return run.global_step, early

    step, early = fit(4, patience=2)
    assert (step, early.wait_count, early.stopped_step) == (4, 1, None)
    step, early = fit(10, patience=2, ckpt_path=tmp_path / "4.ckpt")
    assert (step, early.wait_count, early.stopped_step) == (6, 2, 6)
    assert early.reason().startswith("val/loss did not improve by more than 0.01 for 2 validation(s) in a row")
    step, early = fit(10, patience=3, ckpt_path=tmp_path / "4.ckpt")
    assert (step, early.stopped_step) == (8, 8)
    step, early = fit(20, patience=3, ckpt_path=tmp_path / "10.ckpt")  # it had stopped: it stops again at once
    assert (step, early.stopped_step) == (8, 8)
