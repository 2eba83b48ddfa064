"""Long runs a user can rely on, each promise checked through `python train.py`, the shipped configs and real data:
exact resume after `kill -9` (MLM pretraining, cached and streamed, and length-grouped GLUE fine-tuning), SIGTERM /
SIGINT / SLURM requeue, divergence, readable errors, safe checkpoint loading and run folders that are never silently
reused."""

from __future__ import annotations

import errno
import functools
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from runs import (
    MINILM,
    REPO,
    by_step,
    checkpoint_step,
    command,
    environment,
    kill_group,
    last_lines,
    launch,
    series,
    train,
    wait_for_checkpoint,
    wandb_history,
    wandb_runs,
)
from tiny import TINY, mlm_batches
from torch.utils.data import DataLoader

from encoders.checkpoints import CheckpointError
from tasks.mlm import MaskedLM
from tasks.run import checkpoints
from tasks.run.checkpoint_io import LAST, SafeCheckpointIO, load_checkpoint_file
from tasks.run.checkpoints import LastCheckpoint
from tasks.run.errors import exit_status, resume_hint
from tasks.run.signals import RunInterrupted, StoppedBeforeTraining

GLUE = "configs/glue/wnli.yaml"  # 635 training pairs: 20 batches of 32 an epoch
QUICKSTART = "configs/quickstart.yaml"


@pytest.fixture(scope="module")
def env(shared_data, tmp_path_factory) -> dict[str, str]:
    return environment(LITBERT_DATA=str(shared_data), LITBERT_CACHE=str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> str:
    """Where the MLM runs train their WordPiece (the first run trains it, the others reuse it)."""
    return str(tmp_path_factory.mktemp("tokenizer") / "wordpiece")


def glue_args(*extra: str) -> list[str]:
    return ["--model.pretrained", MINILM, "--trainer.log_every_n_steps", "1", "--checkpoint.every_n_steps", "4",
            "--trainer.max_steps", "30", *extra]


def mlm_args(tokenizer: str, *extra: str) -> list[str]:
    """The quickstart scaled down: about 17 batches of 8 blocks an epoch, validation every 7 steps."""
    return ["--data.tokenizer", tokenizer, "--data.train_tokenizer.vocab_size", "2000", "--data.max_documents", "60",
            "--data.max_val_documents", "10", "--data.batch_size", "8", "--trainer.val_check_interval", "7",
            "--trainer.log_every_n_steps", "1", "--checkpoint.every_n_steps", "3", "--trainer.max_steps", "40", *extra]


def assert_ok(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, f"status {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def best_checkpoints(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "checkpoints").glob("best-*.ckpt"))


# ---------------------------------------------------------------------------------------------------- exact resume


# The GLUE runs take 2 minutes each on 2 cores: they run in .ci/run's slow pass (the default run stays near 13 min).
@pytest.mark.parametrize("task", [pytest.param("glue", marks=pytest.mark.slow), "mlm",
                                  pytest.param("mlm-streaming", marks=pytest.mark.slow),
                                  pytest.param("glue-accumulating", marks=pytest.mark.slow),
                                  pytest.param("mlm-accumulating", marks=pytest.mark.slow)])
@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_kill_9_and_resume_repeats_the_uninterrupted_run_exactly(task, env, tokenizer, tmp_path):
    """An uninterrupted run, and the same run killed with SIGKILL once it has saved a checkpoint and resumed from
    it with --ckpt_path: every loss the resumed run logs (training and validation) equals the uninterrupted run's
    at the same step, bit for bit, across validations and an epoch boundary (same next batch, masks, dropout). It
    continues the same W&B run and ends with the same best checkpoint and metrics. Resuming the finished run then
    trains no step at all."""
    config, args = (QUICKSTART, mlm_args(tokenizer)) if task.startswith("mlm") else (GLUE, glue_args())
    if task == "mlm-streaming":  # tokenized and packed as the documents come, through a shuffle buffer
        args += ["--data.streaming", "true", "--data.shuffle_buffer", "20"]
    if task == "glue":  # litbert's length-grouped batch sampler (the default draws batches at random)
        args += ["--data.group_by_length", "true"]
    if task == "glue-accumulating":  # two batches a step, random batches: saves and stops only between steps
        args += ["--trainer.accumulate_grad_batches", "2", "--trainer.max_steps", "15", "--checkpoint.every_n_steps",
                 "3"]
    if task == "mlm-accumulating":  # validation every 7 batches: every other one falls inside a step, saving none
        args += ["--trainer.accumulate_grad_batches", "2", "--trainer.max_steps", "15", "--checkpoint.every_n_steps",
                 "100"]
    steps = {"glue": 30, "mlm": 40, "mlm-streaming": 40, "glue-accumulating": 15, "mlm-accumulating": 15}[task]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert_ok(train(config, whole, *args, env=env))
    reference = wandb_history(whole)
    assert sorted(by_step(reference, "train/loss")) == list(range(steps))

    process = launch(config, killed, *args, env=env)
    last = killed / "checkpoints" / LAST
    wait_for_checkpoint(process, last, min_step=3 if task.endswith("accumulating") else 6)
    kill_group(process)  # kill -9: no handler runs, nothing is flushed
    resumed_at = checkpoint_step(last)
    assert 3 <= resumed_at < steps and not (killed / "metrics.json").exists()

    assert_ok(train(config, killed, *args, "--ckpt_path", str(last), env=env))
    first, second = wandb_runs(killed)[0], wandb_runs(killed)[-1]
    # The same W&B run id: offline-run-<date>_<time>-<id>, and -<n> after it for a part started in the same second
    run_id = [re.fullmatch(r"offline-run-\d{8}_\d{6}-([a-z0-9]+)(-\d+)?", run.name).group(1) for run in (first, second)]
    assert second != first and run_id[0] == run_id[1]
    resumed = wandb_history(killed, second)
    for key in ("train/loss", "val/loss"):
        expected = {step: value for step, value in by_step(reference, key).items() if step >= resumed_at}
        assert expected and by_step(resumed, key) == expected, key
    assert best_checkpoints(killed) == best_checkpoints(whole) != []
    assert json.loads((killed / "metrics.json").read_text()) == json.loads((whole / "metrics.json").read_text())

    finished = whole / "checkpoints" / LAST
    assert checkpoint_step(finished) == steps
    # The finished run's last checkpoint names the best checkpoint that is on disk, not one the final validation
    # replaced after it was written.
    saved = torch.load(finished, map_location="cpu", weights_only=True, mmap=True)["callbacks"]
    (best,) = [state["best_model_path"] for key, state in saved.items() if key.startswith("BestCheckpoint")]
    assert Path(best).name in best_checkpoints(whole), (best, best_checkpoints(whole))
    again = train(config, whole, *args, "--ckpt_path", str(finished), "--export", "false", env=env)
    assert_ok(again)
    assert f"litbert: last checkpoint  {finished}\n" in again.stdout  # not "(none saved)": it trained no step
    assert series(wandb_history(whole, wandb_runs(whole)[-1]), "train/loss") == []
    assert checkpoint_step(finished) == steps


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_a_finished_run_extended_with_more_steps_goes_on_as_one_longer_run(env, tokenizer, tmp_path):
    """A run that ended at max_steps in the middle of an epoch, resumed with a larger max_steps: its next steps
    train on the batches (and masks) an uninterrupted run of that length trains on, with the same losses; the rest
    of the epoch is not skipped. A constant rate makes the two runs' schedules equal."""
    args = mlm_args(tokenizer, "--model.optimization.schedule", "constant", "--model.optimization.warmup", "0")
    whole, extended = tmp_path / "whole", tmp_path / "extended"
    assert_ok(train(QUICKSTART, whole, *args, "--trainer.max_steps", "12", env=env))
    assert_ok(train(QUICKSTART, extended, *args, "--trainer.max_steps", "5", env=env))
    last = extended / "checkpoints" / LAST
    assert checkpoint_step(last) == 5
    assert_ok(train(QUICKSTART, extended, *args, "--trainer.max_steps", "12", "--ckpt_path", str(last), env=env))
    reference, resumed = wandb_history(whole), wandb_history(extended, wandb_runs(extended)[-1])
    expected = {step: value for step, value in by_step(reference, "train/loss").items() if step >= 5}
    assert sorted(expected) == list(range(5, 12)) and by_step(resumed, "train/loss") == expected


@pytest.mark.slow  # three short runs of bert-tiny in this process: 40 s on 2 cores
def test_a_run_resumed_at_an_epochs_end_trains_the_next_epoch_in_its_own_order(shared_data, minilm, monkeypatch,
                                                                                 tmp_path):
    """A WNLI run of 22 steps, and the same run stopped at the end of its first epoch (step 20) and resumed to 22:
    the resumed steps train on epoch 1's order, to the uninterrupted run's weights bit for bit, and its checkpoint
    counts the epochs as that run's does. Lightning counted the epoch that ended at the checkpoint twice: the next
    epoch was drawn in epoch 2's order, and its checkpoint read as one taken at an epoch's end (a resume from it
    skipped the rest of the epoch)."""
    import train

    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))

    def run(root: Path, steps: int, *extra: str) -> dict:
        assert train.cli_main([
            "--config", str(REPO / GLUE), "--model.encoder.preset", "bert-tiny", "--data.tokenizer", minilm,
            "--data.batch_size", "32", "--trainer.accelerator", "cpu", "--trainer.precision", "32",
            "--model.optimization.schedule", "constant", "--model.optimization.warmup", "0",
            "--trainer.default_root_dir", str(root), "--trainer.limit_val_batches", "1", "--trainer.logger", "false",
            "--trainer.enable_progress_bar", "false", "--predict", "false", "--export", "false",
            "--trainer.max_steps", str(steps), *extra]) == 0
        return torch.load(root / "checkpoints" / LAST, map_location="cpu", weights_only=True)

    whole = run(tmp_path / "whole", 22)
    ended = run(tmp_path / "parts", 20)
    assert ended["loops"]["fit_loop"]["epoch_loop.batch_progress"]["is_last_batch"]  # 635 pairs: 20 batches of 32
    parts = run(tmp_path / "parts", 22, "--ckpt_path", "last")
    position = parts["callbacks"][LastCheckpoint.STATE_KEY]["train_loaders"]
    assert position == whole["callbacks"][LastCheckpoint.STATE_KEY]["train_loaders"] == [
        {"epoch": 1, "batches": 2, "batch_size": 32, "processes": 1}]
    progress = [run["loops"]["fit_loop"]["epoch_progress"] for run in (parts, whole)]
    assert progress[0] == progress[1] and progress[1]["total"]["processed"] == 1
    assert all(torch.equal(parts["state_dict"][key], value) for key, value in whole["state_dict"].items())


@pytest.mark.slow  # two processes a run, three runs: minutes on 2 cores
def test_kill_9_and_resume_under_ddp_repeats_the_run_exactly(env, tmp_path):
    """Two DDP ranks (gloo, CPU), each on its shard of length-grouped batches: the killed and resumed run logs rank
    0's losses exactly as the uninterrupted one. That needs every rank's data position and random state."""
    args = glue_args("--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
                     "--trainer.max_steps", "24")
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert_ok(train(GLUE, whole, *args, env=env))
    process = launch(GLUE, killed, *args, env=env)
    last = killed / "checkpoints" / LAST
    wait_for_checkpoint(process, last, min_step=4)
    kill_group(process)
    resumed_at = checkpoint_step(last)
    assert 4 <= resumed_at < 24
    assert_ok(train(GLUE, killed, *args, "--ckpt_path", str(last), env=env))
    expected = {step: value for step, value in by_step(wandb_history(whole), "train/loss").items()
                if step >= resumed_at}
    assert expected and by_step(wandb_history(killed, wandb_runs(killed)[-1]), "train/loss") == expected


@pytest.mark.slow  # two processes, MiniLM: a minute on 2 cores
def test_a_signal_to_one_ddp_rank_stops_every_rank_at_the_same_step(env, tmp_path):
    """SIGTERM reaches rank 1 alone (a node's kill, a scheduler's signal to one task): the ranks agree on it at the
    next step boundary, save there together, and the run exits 143 as one stopped by SIGTERM. Rank 0 never received
    the signal; without the agreement it would wait for rank 1 forever in the next all-reduce."""
    args = glue_args("--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
                     "--trainer.max_steps", "500", "--checkpoint.every_n_steps", "2")
    process = launch(GLUE, tmp_path, *args, env=env)
    last = tmp_path / "checkpoints" / LAST
    wait_for_checkpoint(process, last, min_step=2)
    os.kill(rank_process(process.pid, 1), signal.SIGTERM)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 143, err[-3000:]
    step = checkpoint_step(last)
    assert step > 2 and f"litbert: stopped by SIGTERM at step {step}; the training state was saved to {last}" in err
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.slow  # two processes, MiniLM: 30 s on 2 cores
def test_a_signal_to_one_ddp_rank_after_training_stops_every_rank(env, tmp_path):
    """SIGTERM to rank 1 alone while the best checkpoint is evaluated after training: the ranks agree on it after the
    evaluation and stop with 143 before writing their results. Lightning's own handler there broadcasts from rank 0,
    a collective that rank 0 never joined: every rank waited for the others forever."""
    err = sigterm_to_rank_1("last_eval_batch", env, tmp_path)
    assert "litbert: stopped by SIGTERM after training, in the evaluation" in err
    assert checkpoint_step(tmp_path / "checkpoints" / LAST) == 2
    assert not (tmp_path / "metrics.json").exists() and not (tmp_path / "model").exists()


@pytest.mark.slow  # two processes, MiniLM: 30 s on 2 cores each
@pytest.mark.parametrize("when", ["built", "sanity_batch"])
def test_a_signal_to_one_ddp_rank_before_training_stops_every_rank(when, env, tmp_path):
    """SIGTERM to rank 1 alone before training: while it is built, before it has joined the process group (the
    launcher, rank 0, waits for it there, deaf to signals), or in Lightning's sanity check. The run ends as one
    stopped by SIGTERM before training, with its status on the launching process. Rank 1 stopped alone: in the sanity
    check rank 0 failed with gloo's "Connection closed by peer" (status 1); before the process group, Lightning's
    launcher killed itself with SIGKILL (-9), without a word."""
    err = sigterm_to_rank_1(when, env, tmp_path)
    assert "litbert: stopped by SIGTERM before training began" in err and "Connection closed" not in err
    assert "litbert: start it again with: python train.py" in err
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "metrics.json").exists()


@pytest.mark.slow  # two processes, MiniLM: a minute on 2 cores
def test_kill_9_of_torchrun_stops_its_ranks(env, tmp_path):
    """`kill -9` of torchrun during training. torchrun starts each rank in a session of its own, and its ranks went on
    training, unseen, to the end of the run: they wrote its metrics.json and export into the folder the user took for
    stopped. They stop as on SIGTERM, at a step boundary, with its checkpoint."""
    args = glue_args("--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
                     "--trainer.max_steps", "500", "--checkpoint.every_n_steps", "2")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", *command(GLUE, tmp_path,
                                                                                               *args)[1:]]
    process = subprocess.Popen(torchrun, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    last = tmp_path / "checkpoints" / LAST
    wait_for_checkpoint(process, last, min_step=2)
    ranks = [rank_process(process.pid, rank) for rank in (0, 1)]
    process.kill()
    process.communicate()
    deadline = time.monotonic() + 120
    while any(running(rank) for rank in ranks) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [rank for rank in ranks if running(rank)]
    for rank in left:
        os.kill(rank, signal.SIGKILL)
    assert not left, "torchrun's ranks went on training after it was killed"
    assert not (tmp_path / "metrics.json").exists() and not (tmp_path / "model").exists()
    assert 2 <= checkpoint_step(last) < 500


def running(pid: int) -> bool:
    """Whether process `pid` is running (not ended, nor a zombie that no one has reaped)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def sigterm_to_rank_1(when: str, env: dict[str, str], tmp_path: Path) -> str:
    """A two-step DDP run of two ranks, to which rank 1 alone sends SIGTERM at `when` (`signalling.SignalAt`): its
    stderr, once it has ended with status 143 within 4 minutes."""
    run_env = dict(env, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")]))
    callback = f"{{class_path: signalling.SignalAt, init_args: {{when: {when}, signum: 15, rank: 1}}}}"
    args = glue_args("--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
                     "--trainer.max_steps", "2", f"--trainer.callbacks+={callback}")
    process = launch(GLUE, tmp_path, *args, env=run_env)
    try:
        out, err = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        kill_group(process)
        pytest.fail("the ranks waited for each other: the run did not end in 4 minutes")
    assert process.returncode == 143, err[-3000:]
    return err


def rank_process(launcher: int, rank: int) -> int:
    """The pid of the DDP rank that Lightning's launcher (rank 0, pid `launcher`), or torchrun, started as `rank`."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if parent == launcher and f"LOCAL_RANK={rank}".encode() in environ:
                return int(entry.name)
    raise AssertionError(f"no process of rank {rank} under {launcher}")


# ---------------------------------------------------------------------------------------------------- signals


def test_the_resume_command_of_a_stopped_run_is_its_own_without_overwrite_and_quoted():
    """The line printed after a signal is the run's command line with --ckpt_path the saved state: a former
    --ckpt_path and --overwrite (refused beside --ckpt_path) left out, values with spaces quoted for a shell."""
    stopped = RunInterrupted(signal.SIGTERM, 12, "/runs/my run/checkpoints/last.ckpt")
    args = ["--config", "configs/glue/rte.yaml", "--overwrite", "true", "--ckpt_path", "old.ckpt",
            "--trainer.default_root_dir", "/runs/my run", "--overwrite=false", "--model.optimization.learning_rate",
            "2e-5"]
    assert resume_hint(stopped, args) == (
        "\nlitbert: resume with: python train.py --config configs/glue/rte.yaml --trainer.default_root_dir "
        "'/runs/my run' --model.optimization.learning_rate 2e-5 --ckpt_path '/runs/my run/checkpoints/last.ckpt'")
    assert resume_hint(RunInterrupted(signal.SIGTERM, 12, None), args) == ""


def test_a_signal_stop_under_the_error_of_a_clean_up_ends_as_the_signal(capsys):
    """Stopped by a signal while datasets tokenises in a pool of processes, the run meets the pool's clean-up, which
    asks for the results of the stopped processes and raises TimeoutError while the stop unwinds: the run still ends
    as stopped by the signal, with its status and message, not as a crash."""
    def tokenising_pool() -> None:
        try:
            raise StoppedBeforeTraining(signal.SIGTERM)
        finally:
            raise TimeoutError  # multiprocess.context.TimeoutError, from datasets' iflatmap_unordered

    with pytest.raises(TimeoutError) as raised:
        tokenising_pool()
    assert exit_status(raised.value, ["--config", "configs/quickstart.yaml"]) == 143
    err = capsys.readouterr().err
    assert "litbert: stopped by SIGTERM before training began" in err
    assert last_lines(err, 1) == ("litbert: start it again with: python train.py --config configs/quickstart.yaml "
                                  "--ckpt_path last")


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_at_the_step_boundary_and_exits_non_zero(signum, env, tmp_path):
    process = launch(GLUE, tmp_path, *glue_args("--trainer.max_steps", "500", "--checkpoint.every_n_steps", "2"),
                     env=env)
    last = tmp_path / "checkpoints" / LAST
    wait_for_checkpoint(process, last, min_step=2)
    process.send_signal(signum)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 128 + signum, err[-3000:]
    step = checkpoint_step(last)
    name = signal.Signals(signum).name
    assert f"litbert: stopped by {name} at step {step}; the training state was saved to {last}" in err
    assert f"--ckpt_path {last}" in last_lines(err, 1) and "resume with: python train.py" in err
    assert not (tmp_path / "metrics.json").exists() and not (tmp_path / "model").exists()

    done = train(GLUE, tmp_path, *glue_args("--trainer.max_steps", str(step + 2)), "--ckpt_path", str(last),
                 env=env)
    assert_ok(done)
    assert checkpoint_step(last) == step + 2
    assert sorted(by_step(wandb_history(tmp_path, wandb_runs(tmp_path)[-1]), "train/loss")) == [step, step + 1]


@pytest.mark.slow  # a train.py process, MiniLM: 30 s on 2 cores
def test_ctrl_c_in_a_terminal_is_the_runs_to_handle_not_its_loader_workers(env, tmp_path):
    """Ctrl+C in a terminal reaches every process of the job, the DataLoader workers that training forked with the
    run's handlers too. Pressed twice, the run stops at once and says so once: the workers, which printed the run's
    messages with their own step and checkpoint ("at step 0 ... no training state was saved"), leave the signal to
    the run."""
    run_env = dict(env, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")]))
    callback = "{class_path: signalling.SignalAt, init_args: {when: second_batch, signum: 2, times: 2, group: true}}"
    process = launch(GLUE, tmp_path, *glue_args(f"--trainer.callbacks+={callback}", "--data.num_workers", "2",
                                                "--checkpoint.every_n_steps", "1"), env=run_env)
    out, err = process.communicate(timeout=300)
    last = tmp_path / "checkpoints" / LAST
    assert process.returncode == 130, err[-3000:]
    assert out.count("litbert: received SIGINT") == 1, out[-3000:]
    assert err.count("stopped at once") == 1, err[-3000:]
    assert (f"litbert: stopped at once by a second SIGINT at step 2, without saving; the newest training state is "
            f"{last} (step 1)") in err
    assert checkpoint_step(last) == 1


def best_state(path: Path) -> dict:
    """The best checkpoint's callback state saved in the checkpoint at `path` (its best path and score)."""
    callbacks = torch.load(path, map_location="cpu", weights_only=True)["callbacks"]
    (state,) = [value for key, value in callbacks.items() if key.startswith("BestCheckpoint")]
    return state


@pytest.mark.slow  # three MLM runs: two minutes on 2 cores
def test_a_run_resumed_from_its_best_checkpoint_keeps_one_best(env, tokenizer, tmp_path):
    """Resumed from `checkpoints/best-N.ckpt` rather than last.ckpt, a run that validates better replaces that best
    checkpoint (Lightning never removes the file a run resumed from, which left two "best" checkpoints). Resumed
    after its folder was moved, from its best, at a learning rate that only makes it worse, the run keeps that best
    (Lightning reloads the best score only in the same folder, and took the first validation after the resume as the
    best), and evaluates it into metrics.json."""
    first, moved = tmp_path / "run", tmp_path / "moved"
    args = mlm_args(tokenizer, "--trainer.val_check_interval", "1", "--export", "false")
    assert_ok(train(QUICKSTART, first, *args, "--trainer.max_steps", "2", env=env))
    assert best_checkpoints(first) == ["best-2.ckpt"]
    assert_ok(train(QUICKSTART, first, *args, "--trainer.max_steps", "4", "--ckpt_path",
                    str(first / "checkpoints" / "best-2.ckpt"), env=env))
    assert best_checkpoints(first) == ["best-4.ckpt"]
    best = float(best_state(first / "checkpoints" / LAST)["best_model_score"])
    assert json.loads((first / "metrics.json").read_text())["val/loss"] == pytest.approx(best, rel=1e-6)

    first.rename(moved)
    assert_ok(train(QUICKSTART, moved, *args, "--trainer.max_steps", "6", "--model.optimization.learning_rate",
                    "0.1", "--ckpt_path", str(moved / "checkpoints" / "best-4.ckpt"), env=env))
    assert best_checkpoints(moved) == ["best-4.ckpt"]
    losses = by_step(wandb_history(moved, wandb_runs(moved)[-1]), "val/loss")
    assert losses[5] > best  # the first validation after the resume, worse (at step 6: the final evaluation's)
    assert best_state(moved / "checkpoints" / LAST)["best_model_path"] == str(moved / "checkpoints" / "best-4.ckpt")
    assert json.loads((moved / "metrics.json").read_text())["val/loss"] == pytest.approx(best, rel=1e-6)


@pytest.mark.slow  # three fine-tuning processes: a minute and a half on 2 cores
def test_a_resume_that_changes_what_the_weights_compute_is_refused(env, tmp_path):
    """A run resumed with another pooler activation (the same shapes, so the weights would load), another
    data.seed, global batch (batch size x gradient accumulation) or optimizer, stops with status 2, naming the
    setting and both values; with only the dropout and learning rate changed, it resumes, and says it trains at the
    new rate."""
    assert_ok(train(GLUE, tmp_path, *glue_args("--trainer.max_steps", "2", "--checkpoint.every_n_steps", "2"),
                    env=env))
    assert (tmp_path / "metrics.json").exists()
    last = tmp_path / "checkpoints" / LAST
    resume = glue_args("--trainer.max_steps", "3", "--ckpt_path", str(last), "--export", "false")
    refused = train(GLUE, tmp_path, *resume, "--model.pooler_activation", "relu", env=env)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "model.pooler_activation: 'tanh' in the checkpoint, 'relu' now" in refused.stderr
    # Batches in another order than the checkpoint's (an explicit data.seed) are refused too; a relaunch with
    # another seed_everything and data.seed unset goes on in the checkpoint's order.
    refused = train(GLUE, tmp_path, *resume, "--data.seed", "5", env=env)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "drew its training order from data.seed=0; this run's is 5" in refused.stderr
    # Another batch size would average each step over other examples; the message names a split that keeps them.
    refused = train(GLUE, tmp_path, *resume, "--data.batch_size", "16", env=env)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert ("each step would average over 16 examples instead of 32. Resume with --data.batch_size 16 "
            "--trainer.accumulate_grad_batches 2 so that the global batch stays 32" in last_lines(refused.stderr, 1))
    # So would another count of batches a step.
    refused = train(GLUE, tmp_path, *resume, "--trainer.accumulate_grad_batches", "2", env=env)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert ("each step would average over 64 examples instead of 32. Resume with --data.batch_size 32 "
            "--trainer.accumulate_grad_batches 1" in last_lines(refused.stderr, 1))
    # Another optimizer's state does not fit (the checkpoint holds the config's settings as train.py saved them).
    refused = train(GLUE, tmp_path, *resume, "--model.optimization.optimizer", "adam", env=env)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "model.optimization.optimizer: 'adamw' in the checkpoint, 'adam' now" in last_lines(refused.stderr, 1)
    assert checkpoint_step(last) == 2
    done = train(GLUE, tmp_path, *resume, "--model.encoder.hidden_dropout", "0.0", "--seed_everything", "7",
                 "--model.optimization.learning_rate", "1e-5", env=env)
    assert_ok(done)
    assert ("litbert: resuming with model.optimization.learning_rate=1e-05 (the checkpoint's: 2e-05)"
            in done.stdout)
    assert checkpoint_step(last) == 3


def slurm_environment(env: dict[str, str], bin_dir: Path, calls: Path) -> dict[str, str]:
    """A SLURM job's environment (auto-requeue on), with an `scontrol` that logs its arguments to `calls`."""
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    (bin_dir / "scontrol").chmod(0o755)
    return dict(env, PATH=f"{bin_dir}:{env['PATH']}", SLURM_JOB_ID="4242", SLURM_JOB_NAME="litbert-test",
                SLURM_NTASKS="1", SLURM_NTASKS_PER_NODE="1", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0")


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_slurm_requeue_signal_saves_requeues_and_the_job_resumes(env, tmp_path):
    """Under SLURM (auto-requeue), the requeue signal saves last.ckpt at the step boundary, calls
    `scontrol requeue <job>` and stops non-zero; the requeued job, run with `--ckpt_path last`, resumes there."""
    calls = tmp_path / "scontrol.log"
    slurm = slurm_environment(env, tmp_path / "bin", calls)
    root = tmp_path / "run"
    process = launch(GLUE, root, *glue_args("--trainer.max_steps", "500", "--checkpoint.every_n_steps", "2",
                                            "--ckpt_path", "last"), env=slurm)
    last = root / "checkpoints" / LAST
    wait_for_checkpoint(process, last, min_step=2)
    process.send_signal(signal.SIGUSR1)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGUSR1, err[-3000:]
    step = checkpoint_step(last)
    assert "stopped by SIGUSR1" in err and "the SLURM job was requeued" in err
    assert calls.read_text().split() == ["requeue", "4242"]

    done = train(GLUE, root, *glue_args("--trainer.max_steps", str(step + 1), "--ckpt_path", "last"), env=slurm)
    assert_ok(done)
    assert f"litbert: resuming from {last}" in done.stdout
    assert checkpoint_step(last) == step + 1


@pytest.mark.slow  # a train.py process: 20 s on 2 cores
def test_ctrl_c_in_the_sanity_check_exits_130_and_says_the_run_did_not_start(env, tmp_path):
    """Ctrl+C while Lightning's sanity check runs (the validation batches before training), which Lightning itself
    ends with exit status 1: the process exits 130, says it stopped before training without a traceback, and
    leaves no checkpoint, export or metrics.json."""
    run_env = dict(env, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")]))
    callback = "{class_path: signalling.SignalAt, init_args: {when: sanity_batch, signum: 2}}"
    done = train(GLUE, tmp_path, *glue_args(f"--trainer.callbacks+={callback}"), env=run_env)
    assert done.returncode == 130, done.stderr[-3000:]
    assert "litbert: stopped by SIGINT before training began" in done.stderr and "Traceback" not in done.stderr
    assert "Detected KeyboardInterrupt" not in done.stdout + done.stderr
    assert last_lines(done.stderr, 1).startswith("litbert: start it again with: python train.py")
    assert not (tmp_path / "metrics.json").exists() and not (tmp_path / "model").exists()
    assert list(tmp_path.rglob("*.ckpt")) == []


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGUSR1])
def test_a_signal_during_the_final_evaluation_stops_with_its_status(signum, env, tokenizer, tmp_path):
    """Ctrl+C, or SLURM's requeue signal, once training has ended and the best checkpoint is being evaluated: the
    run stops before writing its results with 128 + the signal (not Lightning's status 1 for Ctrl+C, nor the requeue
    signal's default, which ends the process without requeueing the job), says how to finish it, and the requeue
    signal requeues the job. Resumed, the run trains no step and finishes."""
    calls = tmp_path / "scontrol.log"
    run_env = slurm_environment(env, tmp_path / "bin", calls) if signum == signal.SIGUSR1 else env
    root = tmp_path / "run"
    args = mlm_args(tokenizer, "--trainer.max_steps", "7", "--ckpt_path", "last")
    process = launch(QUICKSTART, root, *args, env=run_env)
    for line in process.stderr:  # the evaluation of the best checkpoint begins
        if line.startswith("Restoring states from the checkpoint path"):
            break
    process.send_signal(signum)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 128 + signum, err[-3000:]
    assert f"litbert: stopped by {signal.Signals(signum).name} after training, in the evaluation" in err
    assert not (root / "metrics.json").exists() and not (root / "model").exists()
    if signum == signal.SIGUSR1:
        assert "the SLURM job was requeued" in err and calls.read_text().split() == ["requeue", "4242"]
    assert checkpoint_step(root / "checkpoints" / LAST) == 7
    assert_ok(train(QUICKSTART, root, *args, env=run_env))
    assert (root / "metrics.json").exists() and (root / "model").exists()


# ---------------------------------------------------------------------------------------------------- divergence


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_divergence_stops_with_the_step_and_exports_nothing(env, tmp_path):
    done = train(GLUE, tmp_path, *glue_args("--model.optimization.learning_rate", "1e6", "--model.optimization.warmup",
                                            "0", "--trainer.precision", "32"), env=env)
    assert done.returncode == 1
    assert "litbert: error: Training diverged at step 2 (epoch 0, batch 1 of the epoch): loss nan" in done.stderr
    assert last_lines(done.stderr, 2).endswith("No checkpoint was saved before it.\n"
                                               "Nothing was exported and no metrics.json was written.")
    assert not (tmp_path / "metrics.json").exists() and not (tmp_path / "model").exists()
    assert list(tmp_path.rglob("*.ckpt")) == []


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_a_resumed_run_that_diverges_names_the_checkpoint_it_resumed_from(env, tmp_path):
    """Diverging before its own first save, a resumed run's newest checkpoint is the one it resumed from: the
    message names it (and its step), not "No checkpoint was saved before it". The metrics.json of the run's earlier
    end (at step 2) is gone: the run it is in has not finished."""
    assert_ok(train(GLUE, tmp_path, *glue_args("--trainer.max_steps", "2", "--checkpoint.every_n_steps", "2"),
                    env=env))
    assert (tmp_path / "metrics.json").exists()
    last = tmp_path / "checkpoints" / LAST
    done = train(GLUE, tmp_path, *glue_args("--checkpoint.every_n_steps", "100", "--model.optimization.learning_rate",
                                            "1e6", "--model.optimization.warmup", "0", "--trainer.precision", "32"),
                 "--ckpt_path", str(last), env=env)
    assert done.returncode == 1, done.stderr[-3000:]
    assert (f"The newest checkpoint before it is {last} (step 2): resume from it with --ckpt_path"
            in last_lines(done.stderr, 2))
    assert checkpoint_step(last) == 2 and not (tmp_path / "metrics.json").exists()


# ---------------------------------------------------------------------------------------------------- errors


def test_a_truncated_checkpoint_ends_in_litberts_message(env, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in os.listdir(MINILM):
        if name.endswith((".json", ".txt")):
            (broken / name).write_bytes((Path(MINILM) / name).read_bytes())
    weights = (Path(MINILM) / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(weights[: len(weights) // 3])
    done = train(GLUE, tmp_path / "run", "--model.pretrained", str(broken), env=env)
    assert done.returncode == 2
    assert last_lines(done.stderr, 1).startswith(f"{broken / 'model.safetensors'} is truncated or corrupt")
    assert "Union subtypes" not in done.stderr and "Given value" not in done.stderr


@pytest.mark.parametrize(("argument", "expected"), [
    (["--data.batch_size", "x"], "data.batch_size: Expected a int. Got value: x."),
    (["--model.encoder.hidden_dropout", "abc"], "model.encoder.hidden_dropout=abc: Expected a float."),
    (["--data.batch_sizee", "3"], "data.batch_sizee: data.GLUEDataModule has no setting 'batch_sizee'. Did you mean "
                                  "data.batch_size (Training batch size)"),
    (["--model.encoder.hidden_size", "768"], "model.encoder: hidden_size=768 (checkpoint: 384) would change"),
])
def test_a_bad_setting_ends_in_one_readable_line(argument, expected, env, tmp_path):
    done = train(GLUE, tmp_path / "run", "--model.pretrained", MINILM, *argument, env=env)
    assert done.returncode == 2
    assert last_lines(done.stderr, 1).startswith(expected)
    assert "Given value" not in done.stderr and "Subtypes" not in done.stderr


def test_a_malformed_conll_line_is_named(env, shared_data, tmp_path):
    lines = (shared_data / "conll2003" / "train.txt").read_text().splitlines()[:400]
    lines[10] = lines[10].split()[0]  # the word alone: its tag column is gone
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n")
    done = train("configs/ner/conll2003.yaml", tmp_path / "run", "--model.pretrained", MINILM, "--data.dataset",
                 "null", "--data.train_files",
                 str(tmp_path / "train.txt"), "--data.val_files", str(shared_data / "conll2003" / "valid.txt"),
                 env=env)
    assert done.returncode == 2
    assert last_lines(done.stderr, 1).startswith(f"{tmp_path / 'train.txt'}, line 11: 1 column(s)")


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_token_classification_without_a_test_file_says_so_and_finishes(env, shared_data, tmp_path):
    """Train and validation files only: training, validation, export and metrics.json, no testing (and a line
    saying so). The run's files hold no W&B key."""
    def head(name: str, count: int) -> Path:
        text = (shared_data / "conll2003" / name).read_text().split("\n\n")[:count]
        (tmp_path / name).write_text("\n\n".join(text) + "\n")
        return tmp_path / name

    secret = "litbert-test-secret-0123456789abcdef"
    root = tmp_path / "run"
    done = train("configs/ner/conll2003.yaml", root, "--model.pretrained", MINILM, "--data.dataset", "null",
                 "--data.train_files",
                 str(head("train.txt", 300)), "--data.val_files", str(head("valid.txt", 100)),
                 "--trainer.max_steps", "4", env=dict(env, WANDB_API_KEY=secret))
    assert_ok(done)
    assert "litbert: the data has no labelled test split, so the model was not tested" in done.stdout
    metrics = json.loads((root / "metrics.json").read_text())
    assert "val/f1" in metrics and not any(key.startswith("test/") for key in metrics)
    assert (root / "model" / "config.json").exists()
    leaked = [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []


# ---------------------------------------------------------------------------------------------------- security


class _Payload:
    """Unpickling this calls `open(path, "w")`: what a crafted checkpoint would do with a worse command."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture
def http_server(tmp_path):
    """A server on 127.0.0.1 for the files of `tmp_path / "served"`."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_crafted_remote_checkpoint_never_runs(env, http_server, tmp_path):
    served, url = http_server
    marker = tmp_path / "payload-ran"
    torch.save({"state_dict": {}, "global_step": 3, "hook": _Payload(str(marker))}, served / "evil.ckpt")
    done = train(GLUE, tmp_path / "run", "--model.pretrained", MINILM, "--ckpt_path", f"{url}/evil.ckpt", env=env)
    assert done.returncode == 2
    assert "holds objects other than tensors and plain data" in last_lines(done.stderr, 1)
    assert not marker.exists()


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_a_genuine_remote_checkpoint_resumes(env, http_server, tmp_path):
    served, url = http_server
    local = tmp_path / "first"
    assert_ok(train(GLUE, local, *glue_args("--trainer.max_steps", "2"), env=env))
    (served / "last.ckpt").write_bytes((local / "checkpoints" / LAST).read_bytes())
    done = train(GLUE, tmp_path / "second", *glue_args("--trainer.max_steps", "3"), "--ckpt_path",
                 f"{url}/last.ckpt", env=env)
    assert_ok(done)
    assert checkpoint_step(tmp_path / "second" / "checkpoints" / LAST) == 3


class _Clock(L.Callback):
    """A clock for `tasks.run.checkpoints` that moves `minutes` a training step."""

    def __init__(self, minutes: float) -> None:
        self.minutes, self.now = minutes, 0.0

    def monotonic(self) -> float:
        return self.now

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.now += 60 * self.minutes


class _RecordedSaves(LastCheckpoint):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.steps: list[int] = []

    def save(self, trainer: L.Trainer) -> str | None:
        self.steps.append(trainer.global_step)
        return super().save(trainer)


def test_every_n_minutes_saves_at_the_first_step_boundary_after_that_time(tmp_path, monkeypatch):
    """Four minutes a step and a save every ten: steps 3, 6 and 9 (12 minutes after the one before), then the run's
    end at step 10. The time since the last save counts, not the time since the start."""
    clock = _Clock(minutes=4)
    monkeypatch.setattr(checkpoints, "time", SimpleNamespace(monotonic=clock.monotonic))
    saves = _RecordedSaves(every_n_steps=None, every_n_minutes=10, dirpath=str(tmp_path))
    trainer = L.Trainer(max_steps=10, accelerator="cpu", logger=False, callbacks=[clock, saves],
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(MaskedLM(encoder=TINY, vocab_size=64), DataLoader(mlm_batches(16), batch_size=None))
    assert saves.steps == [3, 6, 9, 10] and checkpoint_step(tmp_path / LAST) == 10


def test_checkpoints_load_with_weights_only(tmp_path):
    io = SafeCheckpointIO()
    marker = tmp_path / "payload-ran"
    torch.save({"hook": _Payload(str(marker))}, tmp_path / "evil.ckpt")
    with pytest.raises(ValueError, match="holds objects other than tensors"):
        io.load_checkpoint(tmp_path / "evil.ckpt")
    with pytest.raises(ValueError, match="never unpickles code"):
        io.load_checkpoint(tmp_path / "evil.ckpt", weights_only=False)
    assert not marker.exists()
    (tmp_path / "short.ckpt").write_bytes((tmp_path / "evil.ckpt").read_bytes()[:100])
    with pytest.raises(ValueError, match="short.ckpt cannot be read .* truncated or corrupt"):
        io.load_checkpoint(tmp_path / "short.ckpt")


def test_an_unreadable_last_checkpoint_names_the_checkpoints_beside_it(tmp_path):
    """A truncated or corrupt last.ckpt (the file named) says which checkpoints of the run to resume from instead:
    those beside it, its best, newest first; with none, that there are none and how the run starts again. It said
    "Resume from an earlier checkpoint of the run" whether or not there was one."""
    io, folder = SafeCheckpointIO(), tmp_path / "checkpoints"
    io.save_checkpoint({"global_step": 4, "weights": torch.ones(100_000)}, folder / "best-4.ckpt")
    io.save_checkpoint({"global_step": 6, "weights": torch.ones(100_000)}, folder / LAST)
    last, best, whole = folder / LAST, folder / "best-4.ckpt", (folder / LAST).read_bytes()
    last.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CheckpointError, match=rf"^Checkpoint {re.escape(str(last))} cannot be read \(.*\); it is "
                                              rf"truncated or corrupt\. Resume from another checkpoint of the run: "
                                              rf"--ckpt_path {re.escape(str(best))}\.$"):
        load_checkpoint_file(last, whole=True)
    changed = bytearray(whole)
    changed[len(whole) // 2] ^= 0x40  # a byte of the weights
    last.write_bytes(bytes(changed))
    with pytest.raises(CheckpointError, match=rf"^Checkpoint {re.escape(str(last))} is corrupt \(Bad CRC-32 .*\): .* "
                                              rf"Resume from another checkpoint of the run, or from a good copy of "
                                              rf"this one: --ckpt_path {re.escape(str(best))}\.$"):
        load_checkpoint_file(last, whole=True)
    best.unlink()
    with pytest.raises(CheckpointError, match=rf"{re.escape(str(folder))} holds no other checkpoint: resume from a "
                                              rf"copy of this one saved elsewhere, or start the run again \(into its "
                                              rf"folder with --overwrite true\)\.$"):
        load_checkpoint_file(last, whole=True)


# ---------------------------------------------------------------------------------------------------- atomic saves


def test_an_interrupted_save_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    io = SafeCheckpointIO()
    path = tmp_path / "checkpoints" / LAST
    io.save_checkpoint({"global_step": 1, "weights": torch.ones(1000)}, path)

    def dies_half_way(obj, handle, *args, **kwargs):
        handle.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt  # the process is stopped in the middle of the write

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"global_step": 2, "weights": torch.zeros(1000)}, path)
    monkeypatch.undo()
    assert io.load_checkpoint(path)["global_step"] == 1
    assert os.listdir(path.parent) == [LAST]  # the partial file is gone too
    # One that `kill -9` left (no clean-up ran) goes at the next save; a live process's stays.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (path.parent / f".{LAST}.tmp-{int(dead.stdout)}").write_bytes(b"half a checkpoint")
    (path.parent / f".{LAST}.tmp-{os.getppid()}").write_bytes(b"being written")
    io.save_checkpoint({"global_step": 3}, path)
    assert sorted(os.listdir(path.parent)) == sorted([LAST, f".{LAST}.tmp-{os.getppid()}"])


def test_a_full_disk_at_a_save_ends_in_litberts_message_naming_the_checkpoint(tmp_path, monkeypatch, capsys):
    """A save that meets a full disk (torch reports it as a RuntimeError over the OSError) leaves the previous
    checkpoint whole and stops the run with status 2 and a message naming the errno and the file, not a traceback
    of torch's internals (status 1, as if training had failed). A read-only run folder is the user's to fix too."""
    io = SafeCheckpointIO()
    path = tmp_path / "checkpoints" / LAST
    io.save_checkpoint({"global_step": 1, "weights": torch.ones(1000)}, path)

    def disk_full(obj, handle, *args, **kwargs):
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:  # as torch does: the OSError is the context of its own error
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 2898432")  # noqa: B904

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError) as full:
        io.save_checkpoint({"global_step": 2, "weights": torch.zeros(1000)}, path)
    monkeypatch.undo()
    assert full.value.errno == errno.ENOSPC and full.value.filename == str(path)
    assert io.load_checkpoint(path)["global_step"] == 1 and os.listdir(path.parent) == [LAST]
    assert exit_status(full.value, []) == 2
    assert "No space left on device; the checkpoint was not written" in last_lines(capsys.readouterr().err, 1)
    read_only = OSError(errno.EROFS, os.strerror(errno.EROFS), "/runs/x")
    assert exit_status(read_only, []) == 2
    assert last_lines(capsys.readouterr().err, 1) == "[Errno 30] Read-only file system: '/runs/x'"


_SAVER = """
import sys, torch
from tasks.run.checkpoint_io import SafeCheckpointIO
io, path, step = SafeCheckpointIO(), sys.argv[1], 0
while True:
    step += 1
    io.save_checkpoint({"global_step": step, "weights": torch.full((4_000_000,), float(step))}, path)
    print(step, flush=True)
"""


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_kill_9_during_saves_never_leaves_a_half_written_checkpoint(tmp_path):
    path = tmp_path / LAST
    for delay in (0.05, 0.13, 0.29):
        process = subprocess.Popen([sys.executable, "-c", _SAVER, str(path)], cwd=REPO, stdout=subprocess.PIPE,
                                   text=True)
        assert process.stdout.readline().strip()  # one save done; the next ones are under way
        threading.Event().wait(delay)
        process.kill()
        process.wait()
        state = torch.load(path, weights_only=True)
        assert torch.equal(state["weights"], torch.full((4_000_000,), float(state["global_step"])))
