"""How fast can any float32 implementation fine-tune MiniLM-L6 on a GLUE task on this CPU? A lower bound on a full
run's training time, from the matmuls it cannot avoid, against the `Trainer`'s recorded times and litbert's.

A run at the shipped config (`configs/glue/<task>.yaml`: batch size, epochs) on random batches of the real training
set (seed `--seed`, a new order each epoch, the last batch kept) must, at each step, multiply every linear layer of
the encoder over the batch's real tokens, forward and backward (the input gradient and the weight gradient), except
in the last layer, where only the key and value projections need every token and the rest only the first token
([CLS], what the pooler reads; litbert's `first_token_only`), then the pooler. This script times exactly those
matmuls, at each batch's own token count, with torch's BLAS on this machine's threads, each the fastest of
`--repeats` after a warm-up, and sums them over the run. Everything else a step does is left out, so counted as free:
attention's scores and weighted sums, norms, activations, dropout, the embedding lookups and their gradient, the
loss, data loading, Python. Beside the bound, torch's fused AdamW step over the model's parameters is timed (the
fastest of 10) and multiplied by the run's steps: the `Trainer` and litbert both take it, but it is an achieved
time, not a bound.

A speed-up target is out of reach for every implementation on this machine (its BLAS, float32) where the bound
alone is above the time the target allows: the `Trainer`'s time divided by the factor. The `Trainer`'s and
litbert's times are the medians of the runs in the `--records` jsons (`bench/glue.py`) of this task, by run name.

    LITBERT_DATA=../shared/data python -m bench.glue_ceiling --tasks wnli cola stsb rte mrpc
    python -m bench.glue_ceiling --from-json bench/results/glue-ceiling-cpu-avx2.json

The timings go to `bench/results/glue-ceiling-<machine>.json` (`--json` elsewhere); the records are by default
`bench/results/glue-<machine>.json`, this machine's (or, with `--from-json`, that file's machine's).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.common import device_name, machine_slug, measure_matmul_peak, print_table, results_path, setup_run
from bench.glue import TASKS, litbert_cli


def linears(tokens: int, sequences: int, width: int, inner: int, layers: int) -> list[tuple[int, int, int]]:
    """(rows, in, out) of each linear layer one step must apply: every token through the first layers, the last
    layer's key and value projections over every token and its other projections over the first tokens, then
    the pooler."""
    full = [(tokens, width, 3 * width), (tokens, width, width), (tokens, width, inner), (tokens, inner, width)]
    last = [(tokens, width, 2 * width), (sequences, width, width), (sequences, width, width),
            (sequences, width, inner), (sequences, inner, width)]
    return full * (layers - 1) + last + [(sequences, width, width)]


class Timer:
    """The fastest time of each matmul shape (forward, input gradient, weight gradient as autograd lays them out),
    remembered: batches of one token count share their timings."""

    def __init__(self, repeats: int) -> None:
        self.repeats = repeats
        self.seconds: dict[tuple[int, int, int], float] = {}
        self.flops = 0.0

    def linear(self, rows: int, fan_in: int, fan_out: int) -> float:
        key = (rows, fan_in, fan_out)
        if key not in self.seconds:
            x, weight, grad = torch.randn(rows, fan_in), torch.randn(fan_out, fan_in), torch.randn(rows, fan_out)
            products = [lambda: torch.mm(x, weight.t()), lambda: torch.mm(grad, weight),
                        lambda: torch.mm(grad.t(), x)]
            self.seconds[key] = sum(self.fastest(product) for product in products)
        return self.seconds[key]

    def fastest(self, product) -> float:
        product()
        best = math.inf
        for _ in range(self.repeats):
            start = time.perf_counter()
            product()
            best = min(best, time.perf_counter() - start)
        return best


def batches(lengths: np.ndarray, batch_size: int, epochs: int, seed: int) -> list[tuple[int, int]]:
    """(tokens, sequences) of each step: random batches, a new permutation each epoch, the last batch kept."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(epochs):
        order = rng.permutation(len(lengths))
        for start in range(0, len(order), batch_size):
            chosen = lengths[order[start:start + batch_size]]
            steps.append((int(chosen.sum()), len(chosen)))
    return steps


def adamw_seconds(model: torch.nn.Module, settings: dict, repeats: int = 10) -> float:
    """The fastest fused AdamW step over `model`'s trainable parameters, with gradients present."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.AdamW(params, lr=settings["learning_rate"], weight_decay=settings["weight_decay"],
                                  fused=True)
    optimizer.step()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        optimizer.step()
        best = min(best, time.perf_counter() - start)
    return best


def recorded(paths: list[Path], task: str) -> dict[str, float]:
    """The median training seconds of each run name of `task`, from the first json that holds that run of the task
    (so a later file adds the runs the first lacks, and older runs of the same name do not mix in), leaving out
    runs marked contended."""
    medians: dict[str, float] = {}
    for path in paths:
        times: dict[str, list[float]] = {}
        for record in json.loads(path.read_text()):
            if record["task"] == task and not record.get("contended") and record["run"] not in medians:
                times.setdefault(record["run"], []).append(record["seconds"])
        medians |= {run: statistics.median(seconds) for run, seconds in times.items()}
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=["wnli", "cola", "stsb"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--records", type=Path, nargs="*", default=None,
                        help="bench.glue jsons whose litbert and Trainer times to compare (default: the machine's)")
    parser.add_argument("--json", type=Path, help="write the rows here (default: bench/results/glue-ceiling-"
                                                   "<machine>.json)")
    parser.add_argument("--from-json", type=Path, help="table the timings of an earlier run against --records")
    args = parser.parse_args()
    machine = args.from_json.stem.removeprefix("glue-ceiling-") if args.from_json else machine_slug(torch.device("cpu"))
    args.records = args.records if args.records is not None else [results_path(f"glue-{machine}")]
    if args.from_json:
        out = json.loads(args.from_json.read_text())
        for record in out:
            record["records"] = recorded(args.records, record["task"])
        table(out)
        return
    setup_run(args.threads)
    torch.manual_seed(0)
    peak = max(measure_matmul_peak(torch.device("cpu"), torch.float32, repeats=10) for _ in range(2))
    out = []
    for task in args.tasks:
        with tempfile.TemporaryDirectory() as root:
            cli = litbert_cli(task, args.seed, root, [])
        data, model = cli.datamodule, cli.model
        data.setup("fit")
        lengths = np.array([len(ids) for ids in data.datasets["train"]["input_ids"]])
        config = model.encoder.config
        settings = {"learning_rate": model.optimization.learning_rate,
                    "weight_decay": model.optimization.weight_decay}
        steps = batches(lengths, data.batch_size, cli.config.trainer.max_epochs, args.seed)
        timer = Timer(args.repeats)
        started = time.perf_counter()
        matmuls = sum(timer.linear(*shape) for tokens, sequences in steps
                      for shape in linears(tokens, sequences, config.hidden_size, config.intermediate_size,
                                           config.num_layers))
        flops = sum(6 * rows_ * fan_in * fan_out for tokens, sequences in steps
                    for rows_, fan_in, fan_out in linears(tokens, sequences, config.hidden_size,
                                                          config.intermediate_size, config.num_layers))
        adamw = adamw_seconds(model, settings) * len(steps)
        times = recorded(args.records, task)
        record = {"task": task, "steps": len(steps), "tokens": int(sum(t for t, _ in steps)), "flops": flops,
                  "matmul_seconds": matmuls, "adamw_seconds": adamw, "peak_flops": peak, "records": times,
                  "timing_seconds": time.perf_counter() - started, "device": device_name(torch.device("cpu"))}
        out.append(record)
        print(f"{task}: {len(timer.seconds)} shapes timed in {record['timing_seconds']:.0f} s", flush=True)
    (args.json or results_path(f"glue-ceiling-{machine}")).write_text(json.dumps(out, indent=1) + "\n")
    table(out)


def table(out: list[dict]) -> None:
    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    rows = []
    for record in out:
        times = record["records"]
        default, fastest = times.get("transformers"), times.get("transformers-grouped")
        rows.append([record["task"], f"{record['steps']:,}", f"{record['tokens']:,}", cell(record["matmul_seconds"]),
                     f"{record['flops'] / record['matmul_seconds'] / record['peak_flops']:.0%}",
                     cell(record["adamw_seconds"]), cell(times.get("litbert")), cell(default),
                     cell(default / 3 if default else None), cell(fastest), cell(fastest / 2 if fastest else None)])
    print(f"\nfloat32 matmul peak {out[0]['peak_flops'] / 1e9:.0f} GFLOP/s on {out[0]['device']}\n")
    print_table(["task", "steps", "real tokens", "matmul bound s", "of peak", "fused AdamW s", "litbert s",
                 "Trainer default s", "3x needs s", "Trainer fastest s", "2x needs s"], rows)


if __name__ == "__main__":
    main()
