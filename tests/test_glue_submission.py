"""GLUE submissions on the real test files: train.py predicts every unlabelled test set with the best checkpoint
and writes the file the GLUE server takes; the sweep runs tasks from one checkpoint, tabulates them and zips the
files."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from runs import MINILM, REPO, environment

from data import GLUE_TASKS, GLUEDataModule
from tasks import glue_sweep


def rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as handle:
        return list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


def ids_of(shared_data: Path, task: str) -> list[str]:
    spec = GLUE_TASKS[task]
    table = rows(shared_data / spec.folder / "test.tsv")
    return [row[table[0].index(spec.id_column)] for row in table[1:]]



@pytest.mark.parametrize("task", ["cola", "sst2", "mrpc", "stsb", "qnli", "rte", "wnli"])
def test_every_test_set_with_data_writes_a_valid_submission(task, shared_data, tmp_path):
    """Each task's real test file: one row per example, the file's ids in its order, labels spelled as the server
    wants them (STS-B scores in [0, 5], even for predictions outside the scale)."""
    data = GLUEDataModule(task, MINILM, data_root=str(shared_data), cache_dir=str(tmp_path / "cache"))
    data.setup("predict")
    (split,) = data.test_split_names
    count = len(data.datasets[split])
    predictions = [(-1.0 + 7.0 * i / count) for i in range(count)] if task == "stsb" else [i % 2 for i in range(count)]
    (path,) = data.write_submission({split: predictions}, tmp_path / "out")
    spec = GLUE_TASKS[task]
    assert path.name == spec.submission[split]
    table = rows(path)
    assert table[0] == ["index", "prediction"]
    assert [row[0] for row in table[1:]] == ids_of(shared_data, task)
    values = [row[1] for row in table[1:]]
    if task == "stsb":
        scores = [float(v) for v in values]
        assert min(scores) == 0.0 and max(scores) == 5.0 and all(0.0 <= s <= 5.0 for s in scores)
    else:
        assert set(values) == set(spec.labels)


def test_train_py_predicts_the_test_sets_and_the_sweep_zips_them(shared_data, tmp_path):
    """Two tasks from MiniLM through the sweep (train.py with the shipped configs, a few steps each): each run
    writes its submission file from its best checkpoint, the table has a row per task with its official metrics,
    and the zip holds both files and names the missing ones."""
    out = tmp_path / "sweep"
    done = subprocess.run(
        [sys.executable, "-m", "tasks.glue_sweep", "run", "--pretrained", MINILM, "--out", str(out), "--tasks",
         "wnli", "stsb", "--", "--trainer.max_steps", "3", "--trainer.val_check_interval", "3",
         "--trainer.enable_progress_bar", "false",
         "--trainer.logger", "false"],
        cwd=REPO, env=environment(LITBERT_DATA=str(shared_data), LITBERT_CACHE=str(tmp_path / "cache")),
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for task, name in (("wnli", "WNLI.tsv"), ("stsb", "STS-B.tsv")):
        path = out / task / "submission" / name
        assert [row[0] for row in rows(path)[1:]] == ids_of(shared_data, task)
        assert f"litbert: test predictions {path}" in done.stdout
        assert list((out / task / "checkpoints").glob("best-*.ckpt"))
    stsb = [float(row[1]) for row in rows(out / "stsb" / "submission" / "STS-B.tsv")[1:]]
    assert all(0.0 <= score <= 5.0 for score in stsb) and len(set(stsb)) > 20  # varied predictions, not a constant
    table = (out / "results.md").read_text().splitlines()
    assert table[0] == "| Task | Metric | Result | Training time |"
    metrics = json.loads((out / "stsb" / "metrics.json").read_text())
    assert table[2].startswith("| WNLI | accuracy | ")
    assert table[3].startswith(f"| STS-B | pearson/spearman | {100 * metrics['val/pearson']:.2f}/"
                               f"{100 * metrics['val/spearman']:.2f} | ")
    with zipfile.ZipFile(out / "submission.zip") as archive:
        assert sorted(archive.namelist()) == ["STS-B.tsv", "WNLI.tsv"]
        assert archive.read("WNLI.tsv") == (out / "wnli" / "submission" / "WNLI.tsv").read_bytes()
    assert "missing for a complete GLUE submission: CoLA.tsv, SST-2.tsv, MRPC.tsv, QQP.tsv" in done.stdout


def test_a_failed_task_is_reported_and_the_sweep_exits_non_zero(tmp_path, monkeypatch):
    calls = []

    def fake_run(task, pretrained, out, extra):
        calls.append(task)
        if task == "mnli":
            return {"task": task, "status": 2, "seconds": 3.0, "error": "litbert: no MNLI data", "metrics": {}}
        (out / task / "submission").mkdir(parents=True)
        (out / task / "submission" / "RTE.tsv").write_text("index\tprediction\n0\tentailment\n")
        return {"task": task, "status": 0, "seconds": 60.0, "metrics": {"val/accuracy": 0.5}}

    monkeypatch.setattr(glue_sweep, "run_task", fake_run)
    status = glue_sweep.main(["run", "--pretrained", "x", "--out", str(tmp_path), "--tasks", "mnli", "rte"])
    assert status == 1 and calls == ["mnli", "rte"]
    table = (tmp_path / "results.md").read_text()
    assert "| MNLI | (failed, status 2) | litbert: no MNLI data | 0.1 min |" in table
    assert "| RTE | accuracy | 50.00 | 1.0 min |" in table
    with zipfile.ZipFile(tmp_path / "submission.zip") as archive:
        assert archive.namelist() == ["RTE.tsv"]
