"""bench/distill.py end to end on a tiny budget: the MiniLM teacher fine-tuned through train.py, its half-depth
student distilled, without a teacher and from random weights, the inference timing of the two exports, and the
table written between README/BENCHMARKS-style markers."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # about 2 minutes on 2 cores: run by .ci/run with -m slow
def test_the_distillation_study_runs_end_to_end(shared_data, tmp_path):
    target = tmp_path / "README.md"
    target.write_text("before\n<!-- distill-sst2:begin -->\nold\n<!-- distill-sst2:end -->\nafter\n")
    env = dict(os.environ, LITBERT_DATA=str(shared_data), LITBERT_CACHE=str(tmp_path / "cache"))
    subprocess.run([sys.executable, str(REPO / "bench" / "distill.py"), "--seeds", "0", "--train-batches", "3",
                    "--repeats", "1", "--root", str(tmp_path / "runs"), "--json", str(tmp_path / "results.json"),
                    "--write", str(target)], check=True, cwd=REPO, env=env, timeout=900)
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
