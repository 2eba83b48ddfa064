"""bench/positions.py end to end on a tiny budget: pretraining through train.py per scheme, evaluation at several
lengths (a learned table reported impossible past its rows, not crashed), the fine-tunes, step times, the table
written between BENCHMARKS.md-style markers, and the figures."""

import json

import pytest
from runs import bench


@pytest.mark.slow  # about 3 minutes on 2 cores: run by .ci/run with -m slow
def test_the_position_study_runs_end_to_end(shared_data, tmp_path):
    target = tmp_path / "BENCHMARKS.md"
    target.write_text("before\n<!-- positions:begin -->\nold\n<!-- positions:end -->\nafter\n")
    bench("positions", "--schemes", "learned", "alibi", "sinusoidal-scaled", "--seeds", "0", "--steps", "3",
          "--max-documents", "150", "--eval-documents", "15", "--finetune-steps", "2", "--factors", "1", "2",
          "--timing-repeats", "1", "--root", str(tmp_path / "runs"), "--out", str(tmp_path / "runs" / "results.json"),
          "--figures", str(tmp_path / "figures"),
          "--write", str(target), data=shared_data, cache=tmp_path / "cache")
    results = json.loads((tmp_path / "runs" / "results.json").read_text())
    learned, alibi = results["runs"]["learned-0"], results["runs"]["alibi-0"]
    assert learned["eval"]["256"] is None and learned["eval"]["128"]["tokens"] > 100  # impossible, not crashed
    assert alibi["eval"]["256"]["tokens"] > 100 and 0 < alibi["eval"]["256"]["loss"] < 20
    for run in (learned, alibi):
        assert 0.0 <= run["sst2"] <= 1.0 and 0.0 <= run["rte"] <= 1.0 and run["curve"] is not None
    # The reference row: the same fine-tunes from random weights with the first scheme's settings (no `rope` here).
    reference = results["random"]["0"]
    assert reference["scheme"] == "learned" and 0.0 <= reference["sst2"] <= 1.0 and 0.0 <= reference["rte"] <= 1.0
    assert (tmp_path / "runs" / "random-0" / "sst2" / "metrics.json").exists()
    assert set(results["step_seconds"]) == {"learned", "alibi", "sinusoidal-scaled"}
    assert min(results["step_seconds"].values()) > 0
    # A row that is a scheme with its own settings: the exported model holds them (litbert's format: no transformers
    # family adds a scaled sinusoidal table).
    exported = json.loads((tmp_path / "runs" / "sinusoidal-scaled-0" / "pretrain" / "model" / "litbert.json")
                          .read_text())
    config = exported["encoder"]
    assert (config["position"], config["sinusoidal_scale"]) == ("sinusoidal", 0.028)
    text = target.read_text()
    assert text.startswith("before\n<!-- positions:begin -->\n") and text.endswith("<!-- positions:end -->\nafter\n")
    assert "| learned | " in text and "impossible" in text and "| alibi | " in text and "old" not in text
    assert "| sinusoidal-scaled | " in text and "| random init (learned, not pretrained) | " in text
    for name in ("positions-loss-curves.png", "positions-extrapolation.png"):
        assert (tmp_path / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
