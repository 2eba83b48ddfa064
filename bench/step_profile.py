"""Where a GLUE fine-tuning step spends its time: litbert at its shipped config and transformers' `Trainer`, one
after the other in one process, each for one epoch of a task from MiniLM-L6 (seed 0). A diagnostic beside
`bench/glue.py`, whose fresh-process totals are the benchmark: this script shows what lies under them.

For each run it prints the fit's seconds, split into the set-up before the first step, the first 20 steps, the
profiled window and the rest; the host's milliseconds per step over the rest (the median and mean interval between
the starts of consecutive steps); and, for the runs named in `--profile`, `torch.profiler`'s table of `--window`
steps from step `--profile-at` (CPU and, on a GPU, CUDA time), built after the fit so that only the window's own
overhead falls into it. A run whose epoch ends before the window does is refused with its length.
The runs:

- `litbert`: `configs/glue/<task>.yaml` as `bench/glue.py` trains it (the unpadded path where batches hold padding);
- `litbert-padded`: the same with the unpadded path off (`Encoder.unpadded` returns None);
- `litbert-again`: `litbert` once more, in the same process: against the first, what a process pays once;
- `transformers-fp32`, `transformers`: the `Trainer` in float32 (its default) and in the shipped precision, random
  batches padded per batch.

`--sdpa` limits `scaled_dot_product_attention` to the named backends for the whole script
(`torch.nn.attention.sdpa_kernel`), for example `--sdpa flash efficient math` to leave cuDNN's out on a GPU.

    LITBERT_DATA=../shared/data python bench/step_profile.py --task stsb
    LITBERT_DATA=../shared/data python bench/step_profile.py --task stsb --sdpa flash efficient math --out prof.txt
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import glue
import lightning as L
import torch
import transformers
from common import device_name, setup_run, synchronize
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from encoders.model import Encoder

RUNS = ("litbert", "transformers-fp32", "litbert-padded", "transformers", "litbert-again")
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "math": SDPBackend.MATH, "cudnn": SDPBackend.CUDNN_ATTENTION}
SKIP = 20  # steps left out at the start of each run's intervals


class Steps:
    """The start time of each step (and the fit's start and end), and a profiler over steps `at` to
    `at + window - 1` when `profiled`: started as step `at` starts, stopped as step `at + window` does."""

    def __init__(self, profiled: bool, at: int, window: int) -> None:
        self.profiled, self.at, self.window = profiled, at, window
        self.begun = self.ended = 0.0
        self.starts: list[float] = []
        self.profiler: profile | None = None

    def begin(self) -> None:
        self.begun = time.perf_counter()

    def tick(self) -> None:
        """At the start of each step, in order."""
        step = len(self.starts)
        self.starts.append(time.perf_counter())
        if self.profiled and step == self.at:
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if glue.run_device().type == "cuda" else [])
            self.profiler = profile(activities=activities)
            self.profiler.__enter__()
        elif self.profiler is not None and step == self.at + self.window:
            synchronize(glue.run_device())
            self.profiler.__exit__(None, None, None)

    def end(self, run: str) -> None:
        """After the fit: the end time; a window the epoch cut short is closed, and the run refused."""
        synchronize(glue.run_device())
        self.ended = time.perf_counter()
        if self.profiled and len(self.starts) <= self.at + self.window:  # the stopping step never started
            if self.profiler is not None:
                self.profiler.__exit__(None, None, None)
            raise SystemExit(f"{run}: its epoch has {len(self.starts)} steps, and the profiled window needs "
                             f"{self.at + self.window + 1}: give a smaller --profile-at or --window")

    def table(self) -> str:
        averages = self.profiler.key_averages()
        sorts = ["self_cpu_time_total"] + (["self_device_time_total"] if glue.run_device().type == "cuda" else [])
        return "\n".join(f"by {key}:\n{averages.table(sort_by=key, row_limit=30)}" for key in sorts)

    def intervals(self) -> list[float]:
        """Seconds between consecutive step starts after the first `SKIP`, the profiled window left out (the
        intervals that hold its start, its steps and its stop)."""
        window = range(self.at, self.at + self.window + 1) if self.profiled else range(0)
        gaps = [b - a for a, b in zip(self.starts, self.starts[1:], strict=False)]
        return [gap for step, gap in enumerate(gaps) if step >= SKIP and step not in window]

    def split(self) -> dict[str, float]:
        """The fit's seconds: before the first step, the first `SKIP` steps, the profiled window (the intervals
        `intervals` leaves out for it), and the rest."""
        stop = min(self.at + self.window + 1, len(self.starts) - 1)  # through the interval that stopped it
        window = self.starts[stop] - self.starts[self.at] if self.profiled else 0.0
        setup, total = self.starts[0] - self.begun, self.ended - self.begun
        first = self.starts[min(SKIP, len(self.starts) - 1)] - self.starts[0]
        return {"set-up": setup, f"first {SKIP} steps": first, "profiled window": window,
                "rest": total - setup - first - window, "total": total}


class LightningSteps(L.Callback):
    def __init__(self, steps: Steps) -> None:
        self.steps = steps

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self.steps.tick()


class TrainerSteps(transformers.TrainerCallback):
    def __init__(self, steps: Steps) -> None:
        self.steps = steps

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        self.steps.tick()


def litbert(task: str, steps: Steps, extra: list[str], padded: bool, run: str) -> None:
    original = Encoder.unpadded
    if padded:
        Encoder.unpadded = lambda self, attention_mask, groups=None: None
    try:
        with tempfile.TemporaryDirectory() as root:
            cli = glue.litbert_cli(task, 0, root, extra)
            cli.trainer.callbacks.append(LightningSteps(steps))
            steps.begin()
            cli.trainer.fit(cli.model, datamodule=cli.datamodule)
            steps.end(run)
    finally:
        Encoder.unpadded = original


def trainer(task: str, run: str, steps: Steps, args: argparse.Namespace, extra: list[str]) -> None:
    settings, cli, _, _, train_set, _ = glue.prepare(task, argparse.Namespace(max_train_examples=None, epochs=1),
                                                     extra)
    collator = transformers.DataCollatorWithPadding(cli.datamodule.tokenizer)
    del cli  # the settings' model and datamodule are not the run's
    model = glue.trainer_model(settings, seed=0)
    with tempfile.TemporaryDirectory() as output:
        arguments = glue.trainer_arguments(settings, run, 0, output, num_train_epochs=1,
                                           max_steps=args.max_steps or -1)
        hf = transformers.Trainer(model=model, args=arguments, train_dataset=train_set, data_collator=collator,
                                  callbacks=[TrainerSteps(steps)])
        steps.begin()
        hf.train()
        steps.end(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=glue.TASKS, default="stsb")
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS))
    parser.add_argument("--profile", nargs="*", choices=RUNS, default=["litbert", "transformers-fp32",
                                                                       "litbert-padded"],
                        help="the runs to profile (none: --profile with no names)")
    parser.add_argument("--profile-at", type=int, default=100, help="the first profiled step")
    parser.add_argument("--window", type=int, default=20, help="profiled steps")
    parser.add_argument("--max-steps", type=int, default=None, help="stop each run after this many steps")
    parser.add_argument("--sdpa", nargs="+", choices=list(BACKENDS), default=None,
                        help="the attention backends SDPA may use (default: torch's choice)")
    parser.add_argument("--out", type=Path, default=None, help="also write everything printed to this file")
    args = parser.parse_args()
    if args.profile_at < SKIP + 1:
        raise SystemExit(f"--profile-at {args.profile_at}: profile from step {SKIP + 1} on (the first {SKIP} are "
                         f"left out of the timings as warm-up)")
    if args.max_steps is not None and args.max_steps < args.profile_at + args.window + 2:
        raise SystemExit(f"--max-steps {args.max_steps}: the profiled window ends at step "
                         f"{args.profile_at + args.window}; give at least {args.profile_at + args.window + 2}")
    setup_run()
    out = args.out.open("w") if args.out else None

    def say(text: str) -> None:
        print(text, flush=True)
        if out:
            print(text, file=out, flush=True)

    device = glue.run_device()
    say(f"device: {device_name(device)}; torch {torch.__version__}, transformers {transformers.__version__}; "
        f"{args.task}, one epoch{f' (at most {args.max_steps} steps)' if args.max_steps else ''}; SDPA backends: "
        f"{' '.join(args.sdpa) if args.sdpa else 'as torch chooses'}")
    extra = ["--trainer.max_epochs", "1"] + (["--trainer.max_steps", str(args.max_steps)] if args.max_steps else [])
    limit = sdpa_kernel([BACKENDS[name] for name in args.sdpa]) if args.sdpa else contextlib.nullcontext()
    with limit:
        for run in args.runs:
            steps = Steps(run in args.profile, args.profile_at, args.window)
            if run.startswith("litbert"):
                litbert(args.task, steps, extra, padded=run == "litbert-padded", run=run)
            else:
                trainer(args.task, run, steps, args, extra)
            intervals = steps.intervals()
            if not intervals:
                raise SystemExit(f"{run}: its epoch has {len(steps.starts)} steps, none after the first {SKIP} "
                                 f"and the profiled window to time: take a task with more steps an epoch")
            median, mean = 1000 * statistics.median(intervals), 1000 * statistics.mean(intervals)
            split = ", ".join(f"{name} {seconds:.2f}" for name, seconds in steps.split().items())
            say(f"\n{run}: {len(steps.starts)} steps; seconds: {split}; host ms a step over the rest: median "
                f"{median:.2f}, mean {mean:.2f}")
            if steps.profiled:
                say(f"{run}, steps {args.profile_at}-{args.profile_at + args.window - 1} under torch.profiler\n"
                    f"{steps.table()}")
    if out:
        out.close()


if __name__ == "__main__":
    main()
