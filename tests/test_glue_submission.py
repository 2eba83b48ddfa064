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
from tasks.run import sweep as glue_sweep


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


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_train_py_predicts_the_test_sets_and_the_sweep_zips_them(shared_data, tmp_path):
    """Two tasks from MiniLM through the sweep (train.py with the shipped configs, a few steps each): each run
    writes its submission file from its best checkpoint, the table has a row per task with its official metrics,
    and the zip holds both files and names the missing ones. It runs from a folder outside the repository with a
    relative --out, which train.py reads as the sweep does; run again, it keeps both finished tasks."""
    out = tmp_path / "sweep"
    sweep = [sys.executable, "-m", "tasks.run.sweep", "run", "--pretrained", MINILM, "--out", "sweep", "--tasks",
             "wnli", "stsb", "--", "--trainer.max_steps", "3", "--trainer.val_check_interval", "3",
             "--trainer.enable_progress_bar", "false", "--trainer.logger", "false"]
    env = environment(LITBERT_DATA=str(shared_data.resolve()), LITBERT_CACHE=str(tmp_path / "cache"),
                      PYTHONPATH=str(REPO))  # this checkout's package, from a folder outside it
    done = subprocess.run(sweep, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for task, name in (("wnli", "WNLI.tsv"), ("stsb", "STS-B.tsv")):
        path = out / task / "submission" / name
        assert [row[0] for row in rows(path)[1:]] == ids_of(shared_data, task)
        assert f"litbert: test predictions {Path('sweep') / task / 'submission' / name}" in done.stdout
        assert list((out / task / "checkpoints").glob("best-*.ckpt"))
    stsb = [float(row[1]) for row in rows(out / "stsb" / "submission" / "STS-B.tsv")[1:]]
    assert all(0.0 <= score <= 5.0 for score in stsb) and len(set(stsb)) > 20  # varied predictions, not a constant
    table = (out / "results.md").read_text().splitlines()
    assert table[0] == "| Task | Metric | Best setting | Dev result | Score (mean ± std) | Min–max | Seeds | " \
                       "Training time |"
    metrics = json.loads((out / "stsb" / "metrics.json").read_text())
    score = (metrics["val/pearson"] + metrics["val/spearman"]) / 2
    assert table[2].startswith(f"| STS-B | pearson/spearman | (config) | {100 * metrics['val/pearson']:.2f}/"
                               f"{100 * metrics['val/spearman']:.2f} | {100 * score:.2f} | – | 1 | ")  # GLUE's order
    assert table[3].startswith("| WNLI | accuracy | (config) | ")
    with zipfile.ZipFile(out / "submission.zip") as archive:
        assert sorted(archive.namelist()) == ["STS-B.tsv", "WNLI.tsv"]
        assert archive.read("WNLI.tsv") == (out / "wnli" / "submission" / "WNLI.tsv").read_bytes()
    assert "missing for a complete GLUE submission: CoLA.tsv, SST-2.tsv, MRPC.tsv, QQP.tsv" in done.stdout
    again = subprocess.run(sweep, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert again.stdout.count("finished in") == 2 and "train.py" not in again.stdout
    assert (out / "results.md").read_text().splitlines() == table


def test_a_failed_task_is_reported_and_the_sweep_exits_non_zero(tmp_path, monkeypatch):
    calls = []

    def fake_run(task, pretrained, root, extra, redo=False):
        calls.append(task)
        if task == "mnli":
            return {"task": task, "status": 2, "seconds": 3.0, "error": "litbert: no MNLI data", "metrics": {}}
        (root / "submission").mkdir(parents=True)
        (root / "submission" / "RTE.tsv").write_text("index\tprediction\n0\tentailment\n")
        return {"task": task, "status": 0, "seconds": 60.0, "metrics": {"val/accuracy": 0.5}}

    monkeypatch.setattr(glue_sweep, "run_task", fake_run)
    status = glue_sweep.main(["run", "--pretrained", "x", "--out", str(tmp_path), "--tasks", "mnli", "rte"])
    assert status == 1 and calls == ["mnli", "rte"]
    table = (tmp_path / "results.md").read_text()
    assert "| MNLI | accuracy/accuracy (mismatched) | (no setting finished: failed runs below) | | | | | 0.1 min |" \
        in table
    assert "- MNLI (config): status 2: litbert: no MNLI data" in table
    assert "| RTE | accuracy | (config) | 50.00 | 50.00 | – | 1 | 1.0 min |" in table
    assert "| GLUE average | | | | 50.00 | | | |" in table
    assert "over RTE only (1 of GLUE's 9 tasks): CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, WNLI have no result" \
        in table
    with zipfile.ZipFile(tmp_path / "submission.zip") as archive:
        assert archive.namelist() == ["RTE.tsv"]


def test_the_diagnostic_set_goes_into_ax_from_the_mnli_model(shared_data, tmp_path, caplog):
    """AX.tsv: the real diagnostic set (GLUE's `diagnostic/diagnostic.tsv`) is a test split of MNLI, predicted by the
    MNLI model (here a small made-up MNLI folder beside it): every row, the file's ids in order, the three NLI labels.
    Without the diagnostic folder the MNLI files are still written, and the missing AX is said, not skipped quietly."""
    from test_data_glue import MNLI_COLUMNS, NLI, mnli_row, write_tsv

    def mnli_folder(root: Path) -> None:
        folder = root / "glue" / "MNLI"
        write_tsv(folder / "train.tsv", [*MNLI_COLUMNS, "label1", "gold_label"],
                  [mnli_row(i, [NLI[i % 3]] * 2) for i in range(12)])
        dev_header = [*MNLI_COLUMNS, "label1", "label2", "label3", "label4", "label5", "gold_label"]
        for name in ("dev_matched.tsv", "dev_mismatched.tsv"):
            write_tsv(folder / name, dev_header, [mnli_row(i, [NLI[i % 3]] * 6) for i in range(4)])
        for name in ("test_matched.tsv", "test_mismatched.tsv"):
            write_tsv(folder / name, MNLI_COLUMNS, [mnli_row(i, []) for i in range(3)])

    with_ax = tmp_path / "with_ax"
    mnli_folder(with_ax)
    (with_ax / "glue" / "diagnostic").symlink_to((shared_data / "glue" / "diagnostic").resolve())
    data = GLUEDataModule("mnli", MINILM, data_root=str(with_ax), cache_dir=str(tmp_path / "cache"))
    data.setup("predict")
    assert data.test_split_names == ["test_matched", "test_mismatched", "test_ax"]
    table = rows(shared_data / "glue" / "diagnostic" / "diagnostic.tsv")
    ids = [row[table[0].index("index")] for row in table[1:]]
    assert len(data.datasets["test_ax"]) == len(ids) == 1104
    predictions = {split: [i % 3 for i in range(len(data.datasets[split]))] for split in data.test_split_names}
    paths = data.write_submission(predictions, tmp_path / "out")
    assert [path.name for path in paths] == ["MNLI-m.tsv", "MNLI-mm.tsv", "AX.tsv"]
    ax = rows(tmp_path / "out" / "AX.tsv")
    assert ax[0] == ["index", "prediction"] and [row[0] for row in ax[1:]] == ids
    assert [row[1] for row in ax[1:4]] == NLI and {row[1] for row in ax[1:]} == set(NLI)

    without = tmp_path / "without_ax"
    mnli_folder(without)
    data = GLUEDataModule("mnli", MINILM, data_root=str(without), cache_dir=str(tmp_path / "cache"))
    with caplog.at_level("WARNING"):
        data.setup("predict")
        data.setup("predict")  # train.py's check before fit, then its prediction: said once
    assert data.test_split_names == ["test_matched", "test_mismatched"]
    assert caplog.text.count("so AX.tsv is not predicted") == 1
    assert f"no test_ax set at {without / 'glue' / 'diagnostic' / 'diagnostic.tsv'}, so AX.tsv is not predicted" \
        in caplog.text


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_trainer_predict_gives_every_test_set_whole_and_in_file_order(tmp_path, caplog):
    """The predictions go through `trainer.predict` (the task's predict_step over the datamodule's predict loaders):
    for each of MNLI's test sets (matched and mismatched, three batches each) the values predict_step gives batch by
    batch in file order, and the files written from them. With `trainer.limit_predict_batches` a part is predicted
    and none is given for the files, which the run says."""
    import lightning as L
    import torch
    from test_data_glue import MNLI_COLUMNS, NLI, mnli_row, write_tsv

    from tasks.classification import SequenceClassification
    from tasks.run.predict import predict_test_sets

    folder = tmp_path / "glue" / "MNLI"
    write_tsv(folder / "train.tsv", [*MNLI_COLUMNS, "label1", "gold_label"],
              [mnli_row(i, [NLI[i % 3]] * 2) for i in range(12)])
    for name in ("test_matched.tsv", "test_mismatched.tsv"):
        write_tsv(folder / name, MNLI_COLUMNS, [mnli_row(i, []) for i in range(150)])
    data = GLUEDataModule("mnli", MINILM, data_root=str(tmp_path), cache_dir=str(tmp_path / "cache"),
                          eval_batch_size=64)
    torch.manual_seed(0)
    model = SequenceClassification(num_labels=3, pretrained=MINILM)
    with torch.no_grad():  # a classifier whose answer varies with the sentence, so that the order shows
        model.head.classifier.weight.normal_(0, 1)

    def trainer(**settings) -> L.Trainer:
        return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, **settings)

    predictions = predict_test_sets(trainer(), model, data)
    paths = data.write_submission(predictions, tmp_path / "out")
    assert [path.name for path in paths] == ["MNLI-m.tsv", "MNLI-mm.tsv"]
    model.eval()
    with torch.inference_mode():
        expected = [[NLI[int(v)] for index, batch in enumerate(loader)
                     for v in model.predict_step(batch, index).argmax(-1)]
                    for loader in data.predict_dataloader()]
    assert [len(labels) for labels in expected] == [150, 150]
    assert [[row[1] for row in rows(path)[1:]] for path in paths] == expected
    assert len({label for labels in expected for label in labels}) > 1  # not a constant: the order is checked

    with caplog.at_level("INFO"):
        assert predict_test_sets(trainer(limit_predict_batches=2), model, data) == {}
    assert ("limit_predict_batches=2: predicted a part of the test sets (test_matched 128 of 150, test_mismatched "
            "128 of 150); the submission files hold whole sets, so none was written") in caplog.text


def test_the_sweep_resumes_an_unfinished_task_keeps_finished_ones_and_tabulates_every_task(tmp_path, monkeypatch):
    """Run again into the same folder, the sweep keeps a finished task (`--redo` trains it again, replacing it),
    resumes one with a last checkpoint, starts one that saved none afresh with --overwrite, and tables every task
    the folder holds, not only this call's. train.py runs in the caller's folder, so relative paths mean the same
    to both; a train.py that exits 0 without metrics.json is a failure."""
    commands = []

    def fake_train_py(command, **kwargs):
        commands.append((command, kwargs.get("cwd")))
        root = Path(command[command.index("--trainer.default_root_dir") + 1])
        if "wnli" not in str(root):
            (root / "checkpoints").mkdir(parents=True, exist_ok=True)
            (root / "checkpoints" / "last.ckpt").write_text("")
            (root / "metrics.json").write_text(json.dumps({"val/accuracy": 0.75}))
        return subprocess.CompletedProcess(command, 0, stderr="")

    monkeypatch.setattr(glue_sweep, "train_py", fake_train_py)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sweep" / "qnli" / "checkpoints").mkdir(parents=True)  # a sweep killed inside QNLI
    (tmp_path / "sweep" / "qnli" / "checkpoints" / "last.ckpt").write_text("")
    (tmp_path / "sweep" / "wnli").mkdir()
    (tmp_path / "sweep" / "wnli" / "config.yaml").write_text("")  # killed before its first checkpoint
    assert glue_sweep.main(["run", "--pretrained", "ckpt", "--out", "sweep", "--tasks", "rte", "qnli", "wnli"]) == 1
    flags = {Path(c[c.index("--trainer.default_root_dir") + 1]).name: c[c.index("--trainer.default_root_dir") + 2:]
             for c, _ in commands}
    assert flags == {"rte": [], "qnli": ["--ckpt_path", "last"], "wnli": ["--overwrite", "true"]}
    assert all(cwd is None for _, cwd in commands)  # the caller's folder, where "sweep/rte" means what it meant here
    assert [c[c.index("--trainer.default_root_dir") + 1] for c, _ in commands] == ["sweep/rte", "sweep/qnli",
                                                                                  "sweep/wnli"]
    records = {r["task"]: r for r in glue_sweep.recorded(tmp_path / "sweep")}
    assert records["qnli"]["resumed"] and records["wnli"]["status"] == 1
    assert "train.py exited 0 but wrote no" in records["wnli"]["error"]
    commands.clear()
    (tmp_path / "sweep" / "results.md").unlink()
    assert glue_sweep.main(["run", "--pretrained", "ckpt", "--out", "sweep", "--tasks", "rte"]) == 0  # kept
    assert commands == []
    table = (tmp_path / "sweep" / "results.md").read_text()  # written again, with every task of the folder
    assert "| QNLI | accuracy | (config) | 75.00 |" in table and "| RTE | accuracy | (config) | 75.00 |" in table
    assert "A resumed run's training time is its last sitting's." in table
    assert "| WNLI | accuracy | (no setting finished: failed runs below) |" in table
    assert "- WNLI (config): status 1: train.py exited 0 but wrote no" in table
    # Another checkpoint or other train.py arguments into the same folder would mix two models in one table.
    with pytest.raises(SystemExit, match="was trained with --pretrained ckpt and train.py arguments \\[\\]; this sweep "
                                         "gives --pretrained other"):
        glue_sweep.main(["run", "--pretrained", "other", "--out", "sweep", "--tasks", "rte"])
    with pytest.raises(SystemExit, match="this sweep gives --pretrained ckpt and \\['--trainer.max_epochs', '1'\\]"):
        glue_sweep.main(["run", "--pretrained", "ckpt", "--out", "sweep", "--tasks", "rte", "--",
                         "--trainer.max_epochs", "1"])
    assert commands == []
    assert glue_sweep.main(["run", "--pretrained", "ckpt", "--out", "sweep", "--tasks", "rte", "--redo"]) == 0
    assert [c[c.index("--trainer.default_root_dir") + 2:] for c, _ in commands] == [["--overwrite", "true"]]


def test_zip_refuses_a_missing_folder_and_a_sweep_without_submission_files(tmp_path, capsys):
    assert glue_sweep.main(["zip", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder; give the --out of a sweep" in capsys.readouterr().err
    assert glue_sweep.main(["zip", str(tmp_path)]) == 1
    assert "nothing to zip" in capsys.readouterr().err and not (tmp_path / "submission.zip").exists()
    # A file outside any run the sweep recorded is not the sweep's: it is not zipped.
    (tmp_path / "rte" / "submission").mkdir(parents=True)
    (tmp_path / "rte" / "submission" / "RTE.tsv").write_text("index\tprediction\n0\tentailment\n")
    assert glue_sweep.main(["zip", str(tmp_path)]) == 1
    assert "nothing to zip" in capsys.readouterr().err and not (tmp_path / "submission.zip").exists()


def test_a_broken_test_file_stops_train_py_before_it_trains(shared_data, tmp_path):
    """train.py reads the test sets it will predict before it trains: a malformed row of RTE's test.tsv stops the run
    with status 2, naming the file and line, before any step (no checkpoint), rather than after the whole fit."""
    import shutil

    from runs import train

    rte = tmp_path / "RTE"
    rte.mkdir()
    for name in ("train.tsv", "dev.tsv"):
        shutil.copy(shared_data / "glue" / "RTE" / name, rte / name)
    lines = (shared_data / "glue" / "RTE" / "test.tsv").read_text().splitlines()
    lines[5] = lines[5].rsplit("\t", 1)[0]  # a row without its second sentence
    (rte / "test.tsv").write_text("\n".join(lines) + "\n")
    done = train("configs/glue/rte.yaml", tmp_path / "run", "--model.pretrained", MINILM, "--data.data_dir", str(rte),
                 "--trainer.logger", "false", env=environment(LITBERT_CACHE=str(tmp_path / "cache")), timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"{rte / 'test.tsv'}, line 6: 2 fields where the header has 3" in done.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
