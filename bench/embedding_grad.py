"""Training steps of a shipped GLUE config with the word embedding's gradient kept from step to step (the default on
one CPU process, `EncoderTask.keep_embedding_grad`) against the dense gradient torch allocates afresh each step.

Each side runs in its own process (the allocator's state is part of what is measured), through `train.make_cli` on
`configs/glue/<task>.yaml` from MiniLM-L6, as `bench/glue.py` runs litbert; the sides alternate `--repeats` times.
A run times its first `--steps` optimizer steps after the first (which pays for the first allocations); medians are
shown.

    LITBERT_DATA=../shared/data python bench/embedding_grad.py --task cola
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

import lightning as L
import torch
from common import device_name, print_table, setup_run


class StepClock(L.Callback):
    """Seconds from the start of the second training batch to the end of batch `steps`, then stops the fit."""

    def __init__(self, steps: int) -> None:
        self.steps, self.start, self.seconds = steps, 0.0, None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == 1 and not self.start:
            self.start = time.perf_counter()
            self.kept = pl_module._kept_embedding_grad is not None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.steps + 1:
            self.seconds = time.perf_counter() - self.start
            trainer.should_stop = True


def one_side(task: str, steps: int, kept: bool) -> float:
    from glue import litbert_cli

    clock = StepClock(steps)
    with tempfile.TemporaryDirectory() as root:
        cli = litbert_cli(task, 0, root, ["--trainer.max_steps", str(steps + 1)])
        cli.model.keep_embedding_grad = kept
        cli.trainer.callbacks.append(clock)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    if clock.kept != kept:
        raise SystemExit(f"the {'kept' if kept else 'dense'} side trained with the other path")
    return clock.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="cola")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--side", choices=["kept", "dense"], help=argparse.SUPPRESS)  # one run, in a subprocess
    args = parser.parse_args()
    setup_run()
    if args.side:
        print(one_side(args.task, args.steps, args.side == "kept"))
        return
    seconds = {"kept": [], "dense": []}
    for repeat in range(args.repeats):
        for side in ("dense", "kept") if repeat % 2 == 0 else ("kept", "dense"):
            out = subprocess.run([sys.executable, __file__, "--task", args.task, "--steps", str(args.steps),
                                  "--side", side], capture_output=True, text=True, check=True).stdout
            seconds[side].append(float(out.strip().splitlines()[-1]))
            print(f"{side}: {1000 * seconds[side][-1] / args.steps:.1f} ms/step", flush=True)
    print(f"{device_name(torch.device('cpu'))}; {args.task}, {args.steps} steps x {args.repeats} "
          f"repeats (alternating, a process each)")
    median = {side: statistics.median(values) for side, values in seconds.items()}
    print_table(["embedding gradient", "ms/step (median)", "runs", "speed-up"],
                [[side, f"{1000 * median[side] / args.steps:.1f}",
                  " / ".join(f"{1000 * s / args.steps:.1f}" for s in seconds[side]),
                  f"{median['dense'] / median[side]:.2f}x"] for side in ("dense", "kept")])


if __name__ == "__main__":
    main()
