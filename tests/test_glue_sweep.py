"""The GLUE sweep over a grid of settings and seeds (`python -m tasks.run.sweep run --grid ... --seeds ...`): each
task's best setting by its mean dev score over seeds, the spread, the GLUE average over the tasks it has, and an
interrupted sweep that goes on where it stopped. train.py is replaced at the subprocess boundary by a fake run that
writes the metrics.json and submission file a real one would; the slow test trains a real grid."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
import yaml
from runs import MINILM, REPO, environment

from data import GLUE_TASKS
from tasks.run import sweep as glue_sweep

# What each fake run scores on dev: (task, learning rate) -> per seed 0, 1, 2, its metrics; None: the run fails.
# MRPC's F1 alone would pick 1e-5, its score (the mean of F1 and accuracy, as GLUE's) picks 3e-5; RTE's 3e-5 has the
# higher mean over the seeds that finished, but one of its seeds diverged.
DEV = {
    ("cola", "1e-5"): [{"val/matthews_corrcoef": v} for v in (0.40, 0.42, 0.44)],
    ("cola", "3e-5"): [{"val/matthews_corrcoef": v} for v in (0.50, 0.47, 0.53)],
    ("mrpc", "1e-5"): [{"val/f1": 0.90, "val/accuracy": 0.70}] * 3,
    ("mrpc", "3e-5"): [{"val/f1": 0.88, "val/accuracy": 0.80}] * 3,
    ("stsb", "1e-5"): [{"val/pearson": p, "val/spearman": p - 0.02} for p in (0.80, 0.82, 0.84)],
    ("stsb", "3e-5"): [{"val/pearson": p, "val/spearman": p - 0.02} for p in (0.70, 0.72, 0.74)],
    ("rte", "1e-5"): [{"val/accuracy": v} for v in (0.60, 0.62, 0.64)],
    ("rte", "3e-5"): [{"val/accuracy": 0.70}, {"val/accuracy": 0.72}, None],
    ("cola", "2e-5"): [{"val/matthews_corrcoef": v} for v in (0.45, 0.46)],
}


def value(command: list[str], option: str) -> str:
    return command[command.index(option) + 1]


class FakeTrainPy:
    """`subprocess.run` of train.py: records each command; a run writes `metrics.json` (from DEV) and its
    submission file (holding its folder's name) into its --trainer.default_root_dir; `--print_config` answers as
    train.py's parser does for the options in `refused`."""

    def __init__(self, refused: tuple[str, ...] = (), kill_at: int | None = None):
        self.commands: list[list[str]] = []
        self.checks: list[list[str]] = []
        self.refused, self.kill_at = refused, kill_at

    def __call__(self, command, **kwargs):
        if "--print_config" in command:
            self.checks.append(command)
            bad = next((arg for arg in command if arg.removeprefix("--") in self.refused), None)
            if bad is not None:
                section, name = bad.removeprefix("--").rsplit(".", 1)
                return subprocess.CompletedProcess(command, 2, stdout="", stderr=(
                    f"litbert: error in the configuration:\n{section}: Option '{name}' is not accepted."))
            return subprocess.CompletedProcess(command, 0, stdout="seed_everything: 0\n", stderr="")
        self.commands.append(command)
        root = Path(value(command, "--trainer.default_root_dir"))
        task = Path(value(command, "--config")).stem
        (root / "checkpoints").mkdir(parents=True, exist_ok=True)
        (root / "checkpoints" / "last.ckpt").write_text("")
        if len(self.commands) == self.kill_at:  # the sweep is killed inside this run, after its first checkpoint
            raise KeyboardInterrupt
        seed = int(value(command, "--seed_everything"))
        metrics = DEV[task, value(command, "--model.optimization.learning_rate")][seed]
        if metrics is None:
            return subprocess.CompletedProcess(command, 1, stderr="step 40\nlitbert: the loss diverged at step 41")
        (root / "metrics.json").write_text(json.dumps(metrics))
        (root / "submission").mkdir(exist_ok=True)
        (root / "submission" / GLUE_TASKS[task].submission["test"]).write_text(str(root))
        return subprocess.CompletedProcess(command, 0, stderr="")


def sweep(*args: str) -> int:
    return glue_sweep.main(["run", "--pretrained", "ckpt", "--out", "sweep", *args])


def test_the_grid_sweep_reports_each_tasks_best_setting_over_seeds_and_the_glue_average(tmp_path, monkeypatch):
    """Four tasks x two learning rates x three seeds: every run through train.py in its own folder with its
    setting and seed; each task's best setting by the mean over seeds of its score, its spread, the GLUE average
    over those four tasks only (said so), the JSON beside the table, and the zip from each task's best run."""
    fake = FakeTrainPy()
    monkeypatch.setattr(glue_sweep.subprocess, "run", fake)
    monkeypatch.setattr(glue_sweep, "train_py", fake)
    monkeypatch.chdir(tmp_path)
    status = sweep("--tasks", "cola", "mrpc", "stsb", "rte", "--grid", "learning_rate=1e-5,3e-5", "--seeds", "0", "1",
                   "2", "--", "--trainer.logger", "false")
    assert status == 1  # RTE's diverged run
    assert fake.checks == []  # a short name needs no check by train.py's parser
    runs = [(Path(value(c, "--config")).stem, value(c, "--model.optimization.learning_rate"),
             value(c, "--seed_everything"), value(c, "--trainer.default_root_dir")) for c in fake.commands]
    assert runs == [(task, lr, seed, f"sweep/{task}/learning_rate={lr}/seed{seed}")
                    for task in ("cola", "mrpc", "stsb", "rte") for lr in ("1e-5", "3e-5") for seed in "012"]
    assert all(c[c.index("--trainer.logger"):c.index("--trainer.logger") + 2] == ["--trainer.logger", "false"]
               for c in fake.commands)

    summary = json.loads((tmp_path / "sweep" / "results.json").read_text())
    tasks = summary["tasks"]
    assert {name: task["best"] for name, task in tasks.items()} == {
        "cola": "learning_rate=3e-5", "mrpc": "learning_rate=3e-5", "stsb": "learning_rate=1e-5",
        "rte": "learning_rate=1e-5"}
    cola = glue_sweep.best_of(tasks["cola"])
    assert cola["mean"] == pytest.approx(0.50) and cola["std"] == pytest.approx(0.03)
    assert (cola["min"], cola["max"], cola["seeds"]) == (pytest.approx(0.47), pytest.approx(0.53), 3)
    stsb = glue_sweep.best_of(tasks["stsb"])
    assert stsb["means"] == {"val/pearson": pytest.approx(0.82), "val/spearman": pytest.approx(0.80)}
    assert stsb["mean"] == pytest.approx(0.81) and stsb["std"] == pytest.approx(0.02)
    assert glue_sweep.best_of(tasks["mrpc"])["mean"] == pytest.approx(0.84)
    rte = {setting["setting"]: setting for setting in tasks["rte"]["settings"]}
    assert not rte["learning_rate=3e-5"]["finished"] and rte["learning_rate=3e-5"]["mean"] == pytest.approx(0.71)
    assert summary["glue_average"] == {"score": pytest.approx((0.50 + 0.84 + 0.81 + 0.62) / 4),
                                       "tasks": ["cola", "mrpc", "stsb", "rte"],
                                       "without": ["sst2", "qqp", "mnli", "qnli", "wnli"]}

    table = (tmp_path / "sweep" / "results.md").read_text()
    assert "| CoLA | matthews_corrcoef | learning_rate=3e-5 | 50.00 | 50.00 ± 3.00 | 47.00–53.00 | 3 | 0.0 min |" \
        in table
    assert "| MRPC | f1/accuracy | learning_rate=3e-5 | 88.00/80.00 | 84.00 ± 0.00 | 84.00–84.00 | 3 |" in table
    assert "| STS-B | pearson/spearman | learning_rate=1e-5 | 82.00/80.00 | 81.00 ± 2.00 | 79.00–83.00 | 3 |" in table
    assert "| GLUE average | | | | 69.25 | | | |" in table
    assert ("GLUE average: the unweighted mean of the task scores over CoLA, MRPC, STS-B, RTE only (4 of GLUE's 9 "
            "tasks): SST-2, QQP, MNLI, QNLI, WNLI have no result here, so it is not GLUE's score.") in table
    assert "| RTE | learning_rate=3e-5 | 71.00 ± 1.41 | 70.00–72.00 | 2 of 3 |" in table
    assert "| MRPC | learning_rate=1e-5 | 80.00 ± 0.00 | 80.00–80.00 | 3 of 3 |" in table
    assert "- RTE learning_rate=3e-5 seed 2: status 1: litbert: the loss diverged at step 41" in table

    # Each task's test predictions come from its best setting's best seed (MRPC's seeds tie: the first).
    with zipfile.ZipFile(tmp_path / "sweep" / "submission.zip") as archive:
        assert {name: archive.read(name).decode() for name in archive.namelist()} == {
            "CoLA.tsv": "sweep/cola/learning_rate=3e-5/seed2", "MRPC.tsv": "sweep/mrpc/learning_rate=3e-5/seed0",
            "STS-B.tsv": "sweep/stsb/learning_rate=1e-5/seed2", "RTE.tsv": "sweep/rte/learning_rate=1e-5/seed2"}


def test_a_run_whose_correlations_are_undefined_has_no_score_and_the_table_is_still_written(tmp_path):
    """A collapsed STS-B run predicts a constant: its Pearson and Spearman correlations are undefined, and train.py
    writes them as null (`write_metrics`, from the NaN the metrics give). Such a run has no score, as a diverged
    one: its setting is listed, not chosen, and the table and GLUE average are written (a null used to stop the
    sweep with a TypeError, and a NaN would have won every comparison and made the average NaN)."""
    from tasks.run.results import write_metrics

    for lr, pearson in (("1e-4", float("nan")), ("2e-5", 0.80)):
        root = tmp_path / "stsb" / f"learning_rate={lr}" / "seed0"
        write_metrics(root / "metrics.json", {"val/pearson": pearson, "val/spearman": pearson - 0.02})
        (root / "sweep.json").write_text(json.dumps({
            "task": "stsb", "grid": {"learning_rate": lr}, "seed": 0, "status": 0, "seconds": 6.0,
            "metrics": json.loads((root / "metrics.json").read_text())}))
    summary = glue_sweep.write_results(tmp_path)
    stsb = summary["tasks"]["stsb"]
    assert stsb["best"] == "learning_rate=2e-5" and stsb["best_run"].endswith("learning_rate=2e-5/seed0")
    assert summary["glue_average"]["score"] == pytest.approx(0.79)
    table = (tmp_path / "results.md").read_text()
    assert "| STS-B | learning_rate=1e-4 | n/a | – | 0 of 1 |" in table
    assert ("- STS-B learning_rate=1e-4 seed 0: status 1: val/pearson, val/spearman undefined (null in metrics.json): "
            "the best checkpoint predicts a constant on dev") in table
    assert "| GLUE average | | | | 79.00 | | | |" in table


# How a fake STS-B run ends: (train.py's exit status, its last line, the metrics.json it wrote or None).
ENDINGS = {
    "undefined": (0, "litbert: metrics          sweep/stsb/metrics.json", {"val/pearson": None, "val/spearman": None}),
    "diverged": (1, "litbert: the loss diverged at step 41", None),
    "crash": (1, "RuntimeError: CUDA error: an illegal memory access was encountered", None),
    "sigterm": (143, "litbert: stopped by SIGTERM at step 12; resume with --ckpt_path last", None),
    "sigkill": (-9, "", None),  # killed outright (the OOM killer): subprocess gives -signal
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_sweep_with_a_run_that_has_no_score_trains_the_rest_and_exits_1_naming_it(ending, tmp_path, monkeypatch,
                                                                                     capsys):
    """STS-B's run fails in each way a run can (an undefined correlation, though train.py exits 0, among them): the
    sweep still trains CoLA after it and writes the table, then exits 1, its last line naming the run. (A run
    whose correlation was undefined used to leave the exit status 0: a job's script took the sweep as a success.)"""
    status, last, metrics = ENDINGS[ending]
    trained = []

    def train_py(command, **kwargs):
        root, task = Path(value(command, "--trainer.default_root_dir")), Path(value(command, "--config")).stem
        trained.append(task)
        root.mkdir(parents=True, exist_ok=True)
        written = metrics if task == "stsb" else {"val/matthews_corrcoef": 0.5}
        if task == "cola" or metrics is not None:
            (root / "metrics.json").write_text(json.dumps(written))
        return subprocess.CompletedProcess(command, 0 if task == "cola" else status, stderr=f"step 12\n{last}\n")

    monkeypatch.setattr(glue_sweep.subprocess, "run", train_py)
    monkeypatch.setattr(glue_sweep, "train_py", train_py)
    monkeypatch.chdir(tmp_path)
    assert sweep("--tasks", "stsb", "cola") == 1
    assert trained == ["stsb", "cola"]  # the failed run first: it stopped nothing
    summary = json.loads((tmp_path / "sweep" / "results.json").read_text())
    assert summary["tasks"]["cola"]["best"] == "(config)" and summary["tasks"]["stsb"]["best"] is None
    err = capsys.readouterr().err.strip().splitlines()
    code = 1 if ending == "undefined" else status
    assert err[-1] == (f"sweep: 1 run(s) failed, so the exit status is 1: STS-B (config) (status {code}). "
                       f"results.md gives each one's cause.")
    # Run again, the failed run is retried (or kept, where train.py finished it) and the status stays 1.
    assert sweep("--tasks", "stsb", "cola") == 1
    assert sweep("--tasks", "cola") == 0  # the runs asked for all have a score


def test_an_interrupted_grid_sweep_goes_on_where_it_stopped_and_a_wider_grid_adds_to_it(tmp_path, monkeypatch):
    """Killed inside its third run, the sweep run again keeps the two finished runs, resumes the third from its last
    checkpoint and trains the rest; given a wider grid into the same folder, it trains only the new setting, and
    the table then compares all three."""
    monkeypatch.chdir(tmp_path)
    fake = FakeTrainPy(kill_at=3)
    monkeypatch.setattr(glue_sweep.subprocess, "run", fake)
    monkeypatch.setattr(glue_sweep, "train_py", fake)
    with pytest.raises(KeyboardInterrupt):
        sweep("--tasks", "cola", "--grid", "learning_rate=1e-5,3e-5", "--seeds", "0", "1")
    killed = json.loads((tmp_path / "sweep" / "cola" / "learning_rate=3e-5" / "seed0" / "sweep.json").read_text())
    assert killed["status"] == -1

    fake = FakeTrainPy()
    monkeypatch.setattr(glue_sweep.subprocess, "run", fake)
    monkeypatch.setattr(glue_sweep, "train_py", fake)
    assert sweep("--tasks", "cola", "--grid", "learning_rate=1e-5,3e-5", "--seeds", "0", "1") == 0
    assert [(value(c, "--trainer.default_root_dir"), c[c.index("--trainer.default_root_dir") + 2:][:2])
            for c in fake.commands] == [("sweep/cola/learning_rate=3e-5/seed0", ["--ckpt_path", "last"]),
                                        ("sweep/cola/learning_rate=3e-5/seed1",
                                         ["--model.optimization.learning_rate", "3e-5"])]

    fake = FakeTrainPy()
    monkeypatch.setattr(glue_sweep.subprocess, "run", fake)
    monkeypatch.setattr(glue_sweep, "train_py", fake)
    # The same option by its dotted path is the same setting: its runs are kept, not trained again.
    assert sweep("--tasks", "cola", "--grid", "model.optimization.learning_rate=1e-5,3e-5,2e-5", "--seeds", "0",
                 "1") == 0
    assert [value(c, "--trainer.default_root_dir") for c in fake.commands] == [
        "sweep/cola/learning_rate=2e-5/seed0", "sweep/cola/learning_rate=2e-5/seed1"]
    assert fake.checks == []
    settings = json.loads((tmp_path / "sweep" / "results.json").read_text())["tasks"]["cola"]["settings"]
    assert sorted(setting["setting"] for setting in settings) == [f"learning_rate={lr}" for lr in
                                                                   ("1e-5", "2e-5", "3e-5")]


# A train.py stand-in: it says it is ready, then on SIGTERM or SIGINT writes which and ends with 128 + its number,
# as train.py does after saving.
STOPPABLE = """
import signal, sys, time
def stop(signum, frame):
    sys.stderr.write(f"litbert: stopped by {signal.Signals(signum).name}\\n")
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
open(sys.argv[1], "w").close()
time.sleep(60)
"""


def wait_for(path: Path) -> None:
    for _ in range(600):
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_sweep_alone_is_passed_on_to_the_run_it_waits_for(signum, tmp_path):
    """A scheduler or container that signals the first process alone, or `kill <sweep>`: train.py gets the signal
    and stops as it does on its own (saving), and the sweep learns that it was stopped. (Before, train.py went on
    training in the background, and the sweep died.)"""
    ready, handlers = tmp_path / "ready", (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    threading.Thread(target=lambda: (wait_for(ready), os.kill(os.getpid(), signum)), daemon=True).start()
    with pytest.raises(glue_sweep.SweepStopped) as stopped:
        glue_sweep.train_py([sys.executable, "-c", STOPPABLE, str(ready)])
    assert stopped.value.signum == signum and stopped.value.done.returncode == 128 + signum
    assert stopped.value.done.stderr == f"litbert: stopped by {signal.Signals(signum).name}\n"
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers  # the sweep's again


def test_a_run_outlives_no_sweep_killed_outright(tmp_path):
    """SIGKILL to the sweep passes nothing on: train.py then gets SIGTERM from the kernel (Linux) and stops."""
    ready, sweep_py = tmp_path / "ready", [sys.executable, "-c", (
        f"import sys; from tasks.run import sweep; sweep.train_py([sys.executable, '-c', {STOPPABLE!r}, "
        f"{str(tmp_path / 'ready')!r}])")]
    with subprocess.Popen([*sweep_py], cwd=REPO, env=environment(), stderr=subprocess.PIPE, text=True) as parent:
        wait_for(ready)
        pid = int(subprocess.run(["pgrep", "-P", str(parent.pid)], capture_output=True, text=True).stdout.split()[0])
        parent.kill()
        _, err = parent.communicate()
        assert parent.returncode == -signal.SIGKILL
    for _ in range(200):  # the orphan ends on its SIGTERM
        if not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text():
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError("train.py kept running after the sweep was killed")


def test_a_sweep_stopped_inside_a_run_records_it_and_starts_no_other(tmp_path, monkeypatch, capsys):
    """The run the signal stopped is recorded as train.py left it (resumed from its checkpoint when the sweep is run
    again), the results are written, and the sweep ends with 128 + the signal's number."""
    monkeypatch.chdir(tmp_path)
    fake = FakeTrainPy()
    started = []

    def stopped_in_second(command):
        started.append(command)
        if len(started) == 2:
            Path(value(command, "--trainer.default_root_dir"), "checkpoints").mkdir(parents=True)
            Path(value(command, "--trainer.default_root_dir"), "checkpoints", "last.ckpt").write_text("")
            raise glue_sweep.SweepStopped(signal.SIGTERM, subprocess.CompletedProcess(
                command, 143, stderr="litbert: stopped by SIGTERM at step 12; resume with --ckpt_path last\n"))
        return fake(command)

    monkeypatch.setattr(glue_sweep.subprocess, "run", fake)
    monkeypatch.setattr(glue_sweep, "train_py", stopped_in_second)
    assert sweep("--tasks", "cola", "--grid", "learning_rate=1e-5,3e-5", "--seeds", "0") == 143
    assert len(started) == 2
    record = json.loads((tmp_path / "sweep" / "cola" / "learning_rate=3e-5" / "seed0" / "sweep.json").read_text())
    assert record["status"] == 143 and record["error"].startswith("litbert: stopped by SIGTERM")
    assert (tmp_path / "sweep" / "results.json").is_file()
    assert capsys.readouterr().err.splitlines()[-1].startswith("sweep: stopped by SIGTERM inside sweep/cola/")
    monkeypatch.setattr(glue_sweep, "train_py", fake)
    assert sweep("--tasks", "cola", "--grid", "learning_rate=1e-5,3e-5", "--seeds", "0") == 0
    assert fake.commands[-1][fake.commands[-1].index("--trainer.default_root_dir") + 2:][:2] == ["--ckpt_path", "last"]


def test_a_grid_key_is_a_short_name_or_a_dotted_option_train_py_accepts(tmp_path, monkeypatch):
    """A bad key is refused naming it and the short names, before any run; a dotted key goes through train.py's
    parser (`--print_config`) once, before training; an option set by both the grid and the arguments after `--`,
    or one the sweep sets itself, is refused."""
    monkeypatch.chdir(tmp_path)
    fake = FakeTrainPy(refused=("trainer.acumulate_grad_batches",))
    monkeypatch.setattr(glue_sweep.subprocess, "run", fake)
    monkeypatch.setattr(glue_sweep, "train_py", fake)
    with pytest.raises(SystemExit, match="'lr' is not a grid key: give one of the short names learning_rate "
                                         "\\(model.optimization.learning_rate\\), batch_size \\(data.batch_size\\), "
                                         "epochs \\(trainer.max_epochs\\), warmup"):
        sweep("--tasks", "rte", "--grid", "lr=1e-5,2e-5")
    with pytest.raises(SystemExit, match="--grid learning_rate: give key=value,value"):
        sweep("--tasks", "rte", "--grid", "learning_rate")
    with pytest.raises(SystemExit, match="the sweep sets trainer.default_root_dir on every run"):
        sweep("--tasks", "rte", "--grid", "trainer.default_root_dir=a,b")
    with pytest.raises(SystemExit, match="--grid gives model.optimization.learning_rate twice"):
        sweep("--tasks", "rte", "--grid", "learning_rate=1e-5", "model.optimization.learning_rate=2e-5")
    with pytest.raises(SystemExit, match="learning_rate \\(model.optimization.learning_rate\\) set both by the sweep "
                                         "and in the train.py arguments after --"):
        sweep("--tasks", "rte", "--grid", "learning_rate=1e-5", "--", "--model.optimization.learning_rate=3e-5")
    with pytest.raises(SystemExit, match="--seeds \\(seed_everything\\) set both"):
        sweep("--tasks", "rte", "--seeds", "0", "1", "--", "--seed_everything", "3")
    with pytest.raises(SystemExit, match="none with '/'"):
        sweep("--tasks", "rte", "--grid", "data.tokenizer=a/b,c")
    with pytest.raises(SystemExit, match="train.py refuses the grid's options \\['--trainer.acumulate_grad_batches', "
                                         "'1'\\]:\nlitbert: error in the configuration:\ntrainer: Option "
                                         "'acumulate_grad_batches' is not accepted"):
        sweep("--tasks", "rte", "--grid", "trainer.acumulate_grad_batches=1,2")
    assert fake.commands == [] and len(fake.checks) == 1

    fake = FakeTrainPy()
    monkeypatch.setattr(glue_sweep.subprocess, "run", fake)
    monkeypatch.setattr(glue_sweep, "train_py", fake)
    assert sweep("--tasks", "rte", "--grid", "learning_rate=1e-5", "trainer.accumulate_grad_batches=1,2", "--seeds",
                 "0") == 0
    assert len(fake.checks) == 1 and fake.checks[0][-5:] == [
        "--model.optimization.learning_rate", "1e-5", "--trainer.accumulate_grad_batches", "1", "--print_config"]
    assert [(value(c, "--trainer.accumulate_grad_batches"), value(c, "--trainer.default_root_dir"))
            for c in fake.commands] == [
        ("1", "sweep/rte/learning_rate=1e-5,trainer.accumulate_grad_batches=1/seed0"),
        ("2", "sweep/rte/learning_rate=1e-5,trainer.accumulate_grad_batches=2/seed0")]


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_a_real_grid_of_two_learning_rates_by_two_seeds_on_wnli(shared_data, tmp_path):
    """MiniLM on WNLI, two learning rates x two seeds, two training batches each, through the real train.py: each
    run gets its setting and seed, the table's best setting and mean come from the runs' own metrics.json, the
    average is WNLI's only and says so, and a second sweep trains nothing. A misspelt dotted key is refused by
    train.py's parser before any run."""
    env = environment(LITBERT_DATA=str(shared_data.resolve()), LITBERT_CACHE=str(tmp_path / "cache"),
                      PYTHONPATH=str(REPO))
    base = [sys.executable, "-m", "tasks.run.sweep", "run", "--pretrained", MINILM, "--out", "sweep", "--tasks",
            "wnli"]
    train_args = ["--", "--trainer.limit_train_batches", "2", "--trainer.max_epochs", "1", "--trainer.logger",
                  "false", "--trainer.enable_progress_bar", "false", "--export", "false"]
    bad = subprocess.run([*base, "--grid", "trainer.acumulate_grad_batches=1,2", *train_args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1, bad.stderr[-2000:]
    assert ("sweep: train.py refuses the grid's options ['--trainer.acumulate_grad_batches', '1']:\nlitbert: error "
            "in the configuration:\nunrecognized arguments: --trainer.acumulate_grad_batches 1; did you mean "
            "--trainer.accumulate_grad_batches?\n") in bad.stderr
    assert not list(tmp_path.glob("sweep/wnli/*"))

    command = [*base, "--grid", "learning_rate=2e-5,1e-4", "--seeds", "0", "1", *train_args]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out = tmp_path / "sweep"
    scores = {}
    for lr in ("2e-5", "1e-4"):
        for seed in (0, 1):
            run = out / "wnli" / f"learning_rate={lr}" / f"seed{seed}"
            config = yaml.safe_load((run / "config.yaml").read_text())  # what train.py ran with
            assert config["seed_everything"] == seed
            assert config["model"]["init_args"]["optimization"]["learning_rate"] == float(lr)
            scores.setdefault(f"learning_rate={lr}", []).append(
                json.loads((run / "metrics.json").read_text())["val/accuracy"])
    best = max(scores, key=lambda label: statistics.fmean(scores[label]))
    summary = json.loads((out / "results.json").read_text())
    wnli = summary["tasks"]["wnli"]
    assert wnli["best"] == best and glue_sweep.best_of(wnli)["mean"] == pytest.approx(statistics.fmean(scores[best]))
    assert summary["glue_average"]["score"] == pytest.approx(statistics.fmean(scores[best]))
    table = (out / "results.md").read_text()
    assert f"| WNLI | accuracy | {best} | {100 * statistics.fmean(scores[best]):.2f} |" in table
    assert "over WNLI only (1 of GLUE's 9 tasks)" in table
    with zipfile.ZipFile(out / "submission.zip") as archive:
        assert archive.namelist() == ["WNLI.tsv"]

    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("finished in") == 4 and "train.py" not in again.stdout
    assert (out / "results.md").read_text() == table
