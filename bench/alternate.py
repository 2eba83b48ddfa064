"""Training steps of a shipped GLUE config under two or more settings, alternating inside one run.

On a small shared machine, two processes running the same code can differ by 5-10% in speed (CPU frequency, where
memory lands, what else runs), so `bench/revisions.py`, which times each side in a process of its own, cannot see a
change of 1-2%. Here one process trains one run of `configs/glue/<task>.yaml` from MiniLM-L6 (through
`bench/glue.py`'s `litbert_cli`) and switches between the variants every `--block` optimizer steps, the order of
the variants reversing each round; every variant meets the same process, the same hour and, over the rounds, the
same mix of batches. A variant sets module attributes of litbert, read when a step runs:

    LITBERT_DATA=../shared/data python bench/alternate.py --task mrpc \\
        --variant 2M encoders.kernels._PART_WORDS=262144 --variant 512K encoders.kernels._PART_WORDS=65536

A variant named with no settings runs the code as it is. Each variant's setting is undone before the next one's
block. The table gives each variant's mean milliseconds a step and its speed-up over the first variant: the ratio
of their totals over all rounds, with a 90% interval from resampling the rounds. The variants train one model in
turn, so their numerics may differ (that is what the full runs of `bench/glue.py` measure), not their speed alone.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # before torch is imported, as train.py: the allocator a user's run would have
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tasks.allocator import preload

    preload()

import argparse
import ast
import importlib
import tempfile
import time
from pathlib import Path

import lightning as L
import numpy as np

REPO = Path(__file__).resolve().parents[1]


def parse_variant(words: list[str]) -> tuple[str, list[tuple[object, str, object]]]:
    """(name, [(module, attribute, value)]) from `NAME module.attribute=value ...`; the value is a Python literal."""
    name, settings = words[0], []
    for word in words[1:]:
        target, equals, text = word.partition("=")
        path, dot, attribute = target.rpartition(".")
        if not equals or not dot:
            raise SystemExit(f"--variant {name}: {word!r} is not module.attribute=value")
        try:
            module = importlib.import_module(path)
        except ImportError as error:
            raise SystemExit(f"--variant {name}: {word!r}: no module {path} ({error})") from None
        if not hasattr(module, attribute):
            raise SystemExit(f"--variant {name}: {word!r}: {path} has no attribute {attribute}; a setting must "
                             f"replace one the code reads")
        try:
            value = ast.literal_eval(text)
        except (SyntaxError, ValueError):
            raise SystemExit(f"--variant {name}: {word!r}: {text!r} is not a Python literal") from None
        settings.append((module, attribute, value))
    return name, settings


class Alternate(L.Callback):
    """Switches the variants every `block` optimizer steps after the first `skip`, and times each step."""

    def __init__(self, variants: dict, skip: int, block: int, rounds: int) -> None:
        self.variants, self.skip, self.block, self.rounds = variants, skip, block, rounds
        self.original = {(module, attribute): getattr(module, attribute)
                         for settings in variants.values() for module, attribute, _ in settings}
        self.names = list(variants)
        self.seconds = []  # [round][variant index] = seconds of the block's steps
        self.current = None  # the variant whose settings hold
        self.running = None  # (round, variant index, start time) of the step under way

    def schedule(self, step: int) -> tuple[int, int] | None:
        """(round, variant index) of optimizer step `step`, None before the first timed step."""
        if step < self.skip:
            return None
        turn, order = divmod((step - self.skip) // self.block, len(self.names))
        return turn, (order if turn % 2 == 0 else len(self.names) - 1 - order)

    def restore(self) -> None:
        """Every attribute a variant sets back to the code's own value."""
        for (module, attribute), value in self.original.items():
            setattr(module, attribute, value)

    def switch(self, name: str) -> None:
        self.restore()
        for module, attribute, value in self.variants[name]:
            setattr(module, attribute, value)
        self.current = name

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        place = self.schedule(trainer.global_step)
        if place is None:
            return
        turn, index = place
        if turn == self.rounds:
            trainer.should_stop = True
            return
        if turn == len(self.seconds):
            self.seconds.append([0.0] * len(self.names))
        if self.names[index] != self.current:
            self.switch(self.names[index])
        self.running = (turn, index, time.perf_counter())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.running is not None:
            turn, index, start = self.running
            self.seconds[turn][index] += time.perf_counter() - start
            self.running = None

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self.restore()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="mrpc")
    parser.add_argument("--variant", nargs="+", action="append", default=[], metavar="NAME [module.attribute=value]",
                        help="a variant: its name, then the settings it makes (none: the code as it is)")
    parser.add_argument("--skip", type=int, default=10, help="optimizer steps before the first timed one")
    parser.add_argument("--block", type=int, default=4, help="optimizer steps of one variant before the next")
    parser.add_argument("--rounds", type=int, default=30, help="rounds of one block of each variant")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sys.path[:0] = [str(REPO), str(REPO / "bench")]
    import torch
    from common import device_name, print_table, setup_run
    from glue import litbert_cli

    if len(args.variant) < 2:
        raise SystemExit("--variant: name at least two variants (one may have no settings: the code as it is)")
    if min(args.skip, args.block, args.rounds) < 1:
        raise SystemExit("--skip, --block and --rounds must each be at least 1")
    variants = dict(parse_variant(words) for words in args.variant)
    if len(variants) != len(args.variant):
        raise SystemExit(f"--variant: two variants share a name: {[words[0] for words in args.variant]}")
    setup_run()
    steps = args.skip + args.block * len(variants) * args.rounds
    alternate = Alternate(variants, args.skip, args.block, args.rounds)
    with tempfile.TemporaryDirectory() as root:
        cli = litbert_cli(args.task, args.seed, root, ["--trainer.max_steps", str(steps)])
        cli.trainer.callbacks.append(alternate)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    seconds = np.array(alternate.seconds[:args.rounds])
    if len(seconds) < args.rounds or not seconds[-1].all():
        raise SystemExit(f"the run ended after {len(seconds)} of {args.rounds} rounds (the task's epochs hold fewer "
                         f"than {steps} steps): give fewer --rounds or a smaller --block")
    resampled = np.random.default_rng(0).integers(0, len(seconds), (10_000, len(seconds)))
    totals = seconds[resampled].sum(1)  # (resamples, variants)
    print(f"{device_name(torch.device('cpu'))}; {args.task}, {args.rounds} rounds of {args.block} steps a variant "
          f"after {args.skip}, in one process")
    rows = []
    for index, name in enumerate(variants):
        speedup = totals[:, 0] / totals[:, index]
        low, high = np.quantile(speedup, [0.05, 0.95])
        settings = ", ".join(f"{module.__name__}.{attribute}={value!r}" for module, attribute, value in variants[name])
        rows.append([name, settings or "as it is", f"{1000 * seconds[:, index].mean() / args.block:.1f}",
                     f"{seconds[:, 0].sum() / seconds[:, index].sum():.3f}x", f"{low:.3f}-{high:.3f}"])
    print_table(["variant", "settings", "ms/step", "speed-up", "90% interval"], rows)


if __name__ == "__main__":
    main()
