"""bench/gpu.py, the prepared GPU check, on the CPU: what it packs fits the device's 64 MiB and loads back, and its
stages run to the end at a toy size and write their results."""

import argparse
import json
import subprocess
import sys

import pytest
import torch
from runs import MINILM, REPO
from safetensors.torch import load_file

from bench import gpu
from bench.syncs import summary


def test_the_pack_fits_the_device_and_widens_back_to_minilm(shared_data, tmp_path):
    folder = tmp_path / "pack"
    size = gpu.pack(folder, MINILM, shared_data, wheels=False)
    assert size < gpu.LIMIT_BYTES
    assert sorted(p.name for p in (folder / "data" / "glue").iterdir()) == ["RTE", "STS-B"]
    assert (folder / "data" / "glue" / "STS-B" / "train.tsv").read_bytes() == \
        (shared_data / "glue" / "STS-B" / "train.tsv").read_bytes()
    gpu.widen(folder / "minilm", tmp_path / "minilm")
    original = load_file(f"{MINILM}/model.safetensors")
    widened = load_file(str(tmp_path / "minilm" / "model.safetensors"))
    assert widened.keys() == original.keys()
    for name, tensor in original.items():
        assert widened[name].dtype == tensor.dtype
        torch.testing.assert_close(widened[name], tensor, rtol=1e-3, atol=1e-4)  # float16's rounding
    assert (tmp_path / "minilm" / "tokenizer.json").exists()
    assert not (tmp_path / "minilm" / "model.float16.safetensors").exists()


def test_the_sync_summary_takes_steady_steps_that_do_not_log():
    steps = [{"step": s, "logs": s % 5 == 4, "syncs": 9 if s % 5 == 4 else s % 2,
              "places": {"a": 9} if s % 5 == 4 else ({"b": 1} if s % 2 else {})} for s in range(40)]
    result = summary(steps)
    assert result["steps"] == [10, 30]
    # Steps 10-30 less the logging ones (14, 19, 24, 29): 17 steps, 8 of them odd, with one sync each.
    assert result["median"] == 0 and result["max"] == 1
    assert result["per_step"] == {"b": pytest.approx(8 / 17)}


@pytest.mark.slow
def test_the_gpu_check_runs_its_stages_on_the_cpu(shared_data, tmp_path):
    """`run --tiny` with the packed data alone (LITBERT_DATA is the pack's): the sync counts of a GLUE and an MLM
    step through train.py, and the MLM steps against transformers, each written to gpu.json."""
    gpu.pack(tmp_path / "pack", MINILM, shared_data, wheels=False)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "bench.gpu", "run", "--tiny", "--pack", str(tmp_path / "pack"),
                           "--out", str(out), "--stages", "syncs", "mlm", "--budget", "1500"],
                          cwd=REPO, capture_output=True, text=True, timeout=1600)
    record = json.loads((out / "gpu.json").read_text())
    assert done.returncode == 0, (record, done.stderr[-3000:])
    assert list(record["stages"]) == ["syncs", "mlm"]
    syncs = record["stages"]["syncs"]["results"]
    for run in ("syncs-stsb", "syncs-mlm"):
        counted = syncs[run]
        assert counted["median"] is not None
        steps = json.loads((out / f"{run}.json").read_text())
        assert len(steps) == 12 and all("syncs" in s for s in steps)
        mean = sum(s["syncs"] for s in steps if s["step"] >= 10 and not s["logs"]) / len(
            [s for s in steps if s["step"] >= 10 and not s["logs"]])
        assert sum(counted["per_step"].values()) == pytest.approx(mean)  # the places add up to the counts
    assert float(record["stages"]["mlm"]["results"]["ratio"]) > 0
    assert any("bert-tiny" in line for line in record["stages"]["mlm"]["table"])
    assert "## syncs: ok" in (out / "gpu.md").read_text()


def test_a_command_past_its_own_limit_is_stopped_and_the_next_one_runs(tmp_path, monkeypatch):
    """A stage's commands (the compile stage's modes) each have their own limit within the stage's: a run that
    outlasts it is stopped, named in the status, and the runs after it still measure."""
    slow = [sys.executable, "-c", "import time; time.sleep(30)"]
    fast = [sys.executable, "-c", "print('| measured |')"]
    monkeypatch.setattr(gpu, "stages", lambda *args: [gpu.Stage("mlm", 60, [slow, fast], each_s=2)])
    out = tmp_path / "out"
    args = argparse.Namespace(out=out, pack=tmp_path / "no-pack", budget=100.0, tiny=True, stages=None)
    assert gpu.run(args) == 1
    stage = json.loads((out / "gpu.json").read_text())["stages"]["mlm"]
    assert stage["status"] == "timed out: -c import time; time.sleep(30) at its own 2 s"
    assert stage["seconds"] < 20
    assert stage["table"] == ["| measured |"]  # the command after the stopped one ran


@pytest.mark.slow
def test_the_compile_stage_trains_each_mode_in_its_own_process(shared_data, tmp_path):
    """`run --tiny --stages compile`: STS-B from MiniLM-L6 eager, compiled and with CUDA graphs' mode (aot_eager on
    the CPU), each run's steps, steady steps/s and dev metrics in compiled.json, gpu.json and gpu.md's table."""
    gpu.pack(tmp_path / "pack", MINILM, shared_data, wheels=False)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "bench.gpu", "run", "--tiny", "--pack", str(tmp_path / "pack"),
                           "--out", str(out), "--stages", "compile", "--budget", "1500"],
                          cwd=REPO, capture_output=True, text=True, timeout=1600)
    record = json.loads((out / "gpu.json").read_text())
    assert done.returncode == 0, (record, done.stderr[-3000:])
    results = record["stages"]["compile"]["results"]
    assert list(results) == ["eager", "reduce-overhead", "default"]  # in the order they ran
    for mode, result in results.items():
        # 4 steps of one shape (32 examples, batch 32, padded to 64): its first two warm up.
        assert (result["steps"], result["steady_steps"], result["shapes"]) == (4, 2, {"32x64": 4}), mode
        assert result["steps_per_second"] > 0 and result["warmup_seconds"] > 0
        assert -1 <= result["metrics"]["pearson"] <= 1
    # The same weights trained, whether compiled or not, up to float rounding.
    assert results["default"]["metrics"]["pearson"] == pytest.approx(results["eager"]["metrics"]["pearson"],
                                                                     abs=0.02)
    table = record["stages"]["compile"]["table"]
    assert [row.split("|")[1].strip() for row in table[2:]] == ["eager", "default", "reduce-overhead"]
    assert "## compile: ok" in (out / "gpu.md").read_text()
