"""bench/distill.py end to end on a tiny budget: the MiniLM teacher fine-tuned through train.py, its half-depth
student distilled, without a teacher and from random weights, the inference timing of the two exports, and the
table written between README/BENCHMARKS-style markers."""

import json

import pytest
from runs import bench


@pytest.mark.slow  # about 2 minutes on 2 cores: run by .ci/run with -m slow
def test_the_distillation_study_runs_end_to_end(shared_data, tmp_path):
    target = tmp_path / "README.md"
    target.write_text("before\n<!-- distill-sst2:begin -->\nold\n<!-- distill-sst2:end -->\nafter\n")
    bench("distill", "--seeds", "0", "--train-batches", "3", "--repeats", "1", "--root", str(tmp_path / "runs"),
          "--json", str(tmp_path / "results.json"), "--write", str(target), data=shared_data, cache=tmp_path / "cache")
    results = json.loads((tmp_path / "results.json").read_text())
    assert 0.4 < results["teacher"]["val/accuracy"] <= 1.0
    for kind in ("kd", "no-teacher", "random"):
        (run,) = results["students"][kind]
        assert run["seed"] == 0 and 0.0 <= run["val/accuracy"] <= 1.0 and run["seconds"] > 0
    student = json.loads((tmp_path / "runs" / "kd-0" / "model" / "config.json").read_text())
    assert student["num_hidden_layers"] == 3  # half of MiniLM-L6, exported in transformers' format
    speed = results["inference_seconds"]
    assert speed["teacher"] > speed["student"] > 0  # half the layers
    text = target.read_text()
    assert text.startswith("before\n<!-- distill-sst2:begin -->\n")
    assert text.endswith("<!-- distill-sst2:end -->\nafter\n")
    assert "| student, distilled " in text and "| student, random init " in text and "old" not in text


@pytest.mark.slow  # about 2 minutes on 2 cores
def test_the_pair_task_study_reports_accuracy_and_f1(shared_data, tmp_path):
    """--task mrpc: the teacher from configs/glue/mrpc.yaml, the distilled student from configs/distill/mrpc.yaml;
    both official metrics with their ratios; --reuse keeps a finished student instead of training it again."""
    target = tmp_path / "BENCHMARKS.md"
    target.write_text("<!-- distill-mrpc:begin -->\n<!-- distill-mrpc:end -->\n")
    args = ["--task", "mrpc", "--seeds", "0", "--students", "kd", "--train-batches", "3", "--epochs", "1",
            "--repeats", "1", "--root", str(tmp_path / "runs"), "--json", str(tmp_path / "results.json"),
            "--write", str(target)]
    bench("distill", *args, data=shared_data, cache=tmp_path / "cache")
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["options"]["task"] == "mrpc" and set(results["students"]) == {"kd"}
    (run,) = results["students"]["kd"]
    assert 0.0 <= run["val/accuracy"] <= 1.0 and 0.0 <= run["val/f1"] <= 1.0
    config = (tmp_path / "runs" / "kd-0" / "config.yaml").read_text()
    assert "task: mrpc" in config and "alpha_kd: 0.5" in config
    text = target.read_text()
    assert "--task mrpc --seeds 0 --students kd --train-batches 3 --epochs 1" in text
    assert "MRPC dev accuracy" in text and "MRPC dev F1" in text
    # A second run with --reuse takes the finished student from its result.json (the teacher from --teacher-dir).
    record = tmp_path / "runs" / "kd-0" / "result.json"
    record.write_text(json.dumps({**run, "val/f1": 0.123}))
    bench("distill", *args, "--reuse", "--teacher-dir", str(tmp_path / "runs" / "teacher"), data=shared_data,
          cache=tmp_path / "cache")
    assert json.loads((tmp_path / "results.json").read_text())["students"]["kd"][0]["val/f1"] == 0.123
