"""Training steps of a shipped GLUE config at two or more revisions of litbert, for the speed of one change.

Each revision is checked out into a temporary git worktree (`.` is this checkout as it is, uncommitted changes
included) and trains in a process of its own, through its own `bench/glue.py`'s `litbert_cli` on
`configs/glue/<task>.yaml` from MiniLM-L6, as `bench/glue.py` runs litbert. The revisions alternate `--repeats`
times, the order reversing each round, so that load from elsewhere falls on all alike. A run times `--steps`
optimizer steps after the first `--skip` (which pay for first allocations); the table shows medians, and each
revision's speed-up over the first one named.

    LITBERT_DATA=../shared/data python bench/revisions.py --task mrpc --revisions bcd7f17 .
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child(checkout: Path, task: str, skip: int, steps: int) -> float:
    """Seconds a step of one run: `steps` optimizer steps after the first `skip`, with the checkout's code."""
    sys.path[:0] = [str(checkout), str(checkout / "bench")]  # before any litbert module is imported
    import time

    import lightning as L
    from glue import litbert_cli  # the checkout's own

    class Clock(L.Callback):
        start = seconds = None

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if trainer.global_step == skip and self.start is None:
                self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if trainer.global_step == skip + steps:
                self.seconds = time.perf_counter() - self.start
                trainer.should_stop = True

    clock = Clock()
    with tempfile.TemporaryDirectory() as root:
        cli = litbert_cli(task, 0, root, ["--trainer.max_steps", str(skip + steps)])
        imported = Path(sys.modules[type(cli.model).__module__].__file__).resolve()
        if not imported.is_relative_to(checkout.resolve()):
            raise SystemExit(f"{imported} is not {checkout}'s code: the run would time another revision")
        cli.trainer.callbacks.append(clock)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    if clock.seconds is None:
        raise SystemExit(f"the fit ended before {skip + steps} steps: give fewer --steps")
    return clock.seconds / steps


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="cola")
    parser.add_argument("--revisions", nargs="+", default=[],
                        help="git revisions (commits, tags, branches), or . for this checkout as it is")
    parser.add_argument("--skip", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one run of one checkout, in a subprocess
    args = parser.parse_args()
    if args.child:
        print(child(args.child, args.task, args.skip, args.steps))
        return
    sys.path.insert(0, str(REPO / "bench"))
    import torch
    from common import device_name, print_table, setup_run

    setup_run()
    if not args.revisions:
        raise SystemExit("--revisions: name the revisions to time (at least one; . is this checkout)")
    if len(set(args.revisions)) != len(args.revisions):
        raise SystemExit(f"--revisions names one revision twice: {args.revisions}")
    with tempfile.TemporaryDirectory() as folder:
        checkouts, names = {}, {}
        try:
            for revision in args.revisions:
                if revision == ".":
                    checkouts[revision] = REPO
                    dirty = git("status", "--porcelain", "--untracked-files=no")
                    names[revision] = f". ({git('rev-parse', '--short=12', 'HEAD')}{' + changes' if dirty else ''})"
                    continue
                try:
                    commit = git("rev-parse", "--verify", "--short=12", f"{revision}^{{commit}}")
                except subprocess.CalledProcessError:
                    raise SystemExit(f"--revisions {revision}: not a commit of {REPO}") from None
                checkouts[revision] = Path(folder) / commit
                git("worktree", "add", "--detach", str(checkouts[revision]), commit)
                names[revision] = revision if revision.startswith(commit) else f"{revision} ({commit})"
            # Each run starts in its own checkout (whose configs it reads): data and cache folders given relative to
            # here are made absolute.
            env = dict(os.environ) | {name: str(Path(os.environ[name]).resolve()) for name in
                                      ("LITBERT_DATA", "LITBERT_CACHE") if os.environ.get(name)}
            sides, label = args.revisions, names
            seconds = {side: [] for side in sides}
            for repeat in range(args.repeats):
                for side in sides if repeat % 2 == 0 else sides[::-1]:
                    out = subprocess.run([sys.executable, __file__, "--task", args.task, "--skip", str(args.skip),
                                          "--steps", str(args.steps), "--child", str(checkouts[side])],
                                         cwd=checkouts[side], env=env, capture_output=True, text=True)
                    if out.returncode != 0:
                        raise SystemExit(f"{label[side]}: the run failed:\n{out.stderr[-3000:]}")
                    seconds[side].append(float(out.stdout.strip().splitlines()[-1]))
                    print(f"{label[side]}: {1000 * seconds[side][-1]:.1f} ms/step", flush=True)
        finally:
            for checkout in checkouts.values():
                if checkout != REPO:
                    subprocess.run(["git", "worktree", "remove", "--force", str(checkout)], cwd=REPO,
                                   capture_output=True)
    print(f"{device_name(torch.device('cpu'))}; {args.task}, {args.steps} steps after {args.skip}, x {args.repeats} "
          f"(alternating, a process each)")
    median = {side: statistics.median(values) for side, values in seconds.items()}
    first = median[sides[0]]
    print_table(["revision", "ms/step (median)", "runs", "speed-up"],
                [[label[side], f"{1000 * median[side]:.1f}", " / ".join(f"{1000 * s:.1f}" for s in seconds[side]),
                  f"{first / median[side]:.2f}x"] for side in sides])


if __name__ == "__main__":
    main()
