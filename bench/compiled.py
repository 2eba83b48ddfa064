"""Compiled and CUDA-graphed training steps against eager ones (issue 45): a GLUE task at its shipped config from
MiniLM-L6, `--steps` training steps in one mode a process:

- `eager`: train.py as shipped;
- `default`: with `tasks.run.compile.CompileEncoder` (inductor, one static graph per bucket);
- `reduce-overhead`: the same, its graphs replayed as CUDA graphs.

A run records its steady steps/s (over the steps whose batch shape had run twice before: a shape's first step
compiles its graph and its second records the CUDA graph; eager's first steps of a shape set up its kernels too),
the seconds of the other steps (the warm-up: compilation and recording) and the dev metrics of the trained weights.
The dev set is evaluated eagerly (`torch.compiler.set_stance("force_eager")`): the training step is what is
compared, and evaluation's own graphs (its batch size, its last batch) would double the compilation.

    for mode in eager default reduce-overhead; do python -m bench.compiled --mode $mode; done

Each run replaces its mode's record in `bench/results/compiled-<machine>.json` (`--json` elsewhere) and prints the
table of the modes recorded there. Batches are padded to multiples of 64, the CUDA default (on a CPU, where each
batch is padded to its longest sequence by default, a compiled run would refuse the data: a graph per length).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import statistics
import tempfile
import time
from pathlib import Path

import lightning as L
import torch

from bench.common import device_name, machine_slug, print_table, results_path, setup_run, update_results

MODES = ("eager", "default", "reduce-overhead")
HEADERS = ["mode", "steady steps/s", "speed-up", "warm-up s", "steps (steady)", "dev metrics"]


class StepTimes(L.Callback):
    """Each training step's batch shape and its host wall time, from its batch's start to the next one's (the last
    step's to the end of training, with the device drained)."""

    def __init__(self) -> None:
        self.steps: list[dict] = []
        self._started: float | None = None

    def _close(self) -> float:
        now = time.perf_counter()
        if self._started is not None:
            self.steps[-1]["seconds"] = now - self._started
        return now

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        self._started = self._close()
        self.steps.append({"shape": list(batch["input_ids"].shape)})

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        self._close()
        self._started = None


def steady(steps: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the steps whose shape had run at least twice before, the others)."""
    seen: collections.Counter = collections.Counter()
    later, first = [], []
    for step in steps:
        shape = tuple(step["shape"])
        (later if seen[shape] >= 2 else first).append(step)
        seen[shape] += 1
    return later, first


def run(args: argparse.Namespace) -> dict:
    from bench.glue import litbert_cli  # here: bench.gpu reads this module's table without bench.glue's imports

    extra = ["--trainer.max_steps", str(args.steps), "--trainer.max_epochs", "-1", "--data.pad_to_multiple_of", "64"]
    if args.mode != "eager":
        extra += ["--trainer.callbacks+=tasks.run.compile.CompileEncoder", "--trainer.callbacks.backend", args.backend,
                  "--trainer.callbacks.mode", args.mode]
    with tempfile.TemporaryDirectory() as root:
        cli = litbert_cli(args.task, args.seed, root, extra)
        data, model, trainer = cli.datamodule, cli.model, cli.trainer
        if args.max_train_examples is not None:
            data.setup("fit")
            data.datasets["train"] = data.datasets["train"].select(range(args.max_train_examples))
        times = StepTimes()
        trainer.callbacks.append(times)
        start = time.perf_counter()
        trainer.fit(model, datamodule=data)
        fit_seconds = time.perf_counter() - start
        evaluate = L.Trainer(accelerator=trainer.accelerator, devices=1, precision=trainer.precision, logger=False,
                             enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                             default_root_dir=root, limit_val_batches=args.dev_batches)
        with torch.compiler.set_stance("force_eager"):
            (metrics,) = evaluate.validate(model, datamodule=data, verbose=False)
    later, first = steady(times.steps)
    seconds = sum(step["seconds"] for step in later)
    return {"task": args.task, "steps": len(times.steps), "steady_steps": len(later),
            "steps_per_second": len(later) / seconds if later else None,
            "median_step_ms": 1000 * statistics.median(step["seconds"] for step in later) if later else None,
            "warmup_seconds": sum(step["seconds"] for step in first), "fit_seconds": fit_seconds,
            "shapes": dict(collections.Counter("x".join(map(str, step["shape"])) for step in times.steps)),
            "precision": str(trainer.precision), "backend": None if args.mode == "eager" else args.backend,
            "metrics": {key.removeprefix("val/"): float(value) for key, value in metrics.items() if key != "val/loss"}}


def rows(records: dict[str, dict]) -> list[list[str]]:
    """One row a mode, in `MODES` order; the speed-up is against eager's steady steps/s."""
    eager = records.get("eager", {}).get("steps_per_second")
    table = []
    for mode in MODES:
        record = records.get(mode)
        if record is None:
            continue
        rate = record["steps_per_second"]
        table.append([mode, f"{rate:.1f}" if rate else "", f"{rate / eager:.2f}x" if rate and eager else "",
                      f"{record['warmup_seconds']:.1f}", f"{record['steps']} ({record['steady_steps']})",
                      "; ".join(f"{k} {v:.3f}" for k, v in record["metrics"].items())])
    return table


def table_lines(records: dict[str, dict]) -> list[str]:
    """The Markdown table of `records`, line by line."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_table(HEADERS, rows(records))
    return buffer.getvalue().splitlines()


def main(argv: list[str] | None = None) -> None:
    from bench.glue import TASKS, run_device

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--task", choices=TASKS, default="stsb")
    parser.add_argument("--steps", type=int, default=150, help="training steps (the schedule is fitted to them)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend (aot_eager: a CPU test)")
    parser.add_argument("--max-train-examples", type=int, default=None, help="train on the first N examples only")
    parser.add_argument("--dev-batches", type=int, default=None, help="evaluate this many dev batches only")
    parser.add_argument("--json", type=Path, default=None,
                        help="the records, one a mode (default: bench/results/compiled-<machine>.json)")
    args = parser.parse_args(argv)
    setup_run()
    args.json = args.json or results_path(f"compiled-{machine_slug(run_device())}")
    print(f"device: {device_name(run_device())}; torch {torch.__version__}; {args.task}, {args.mode}", flush=True)
    update_results(args.json, {args.mode: run(args)}, run_device())
    print("\n".join(table_lines(json.loads(args.json.read_text()))))


if __name__ == "__main__":
    main()
