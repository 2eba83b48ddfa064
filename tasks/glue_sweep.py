"""All of GLUE from one checkpoint: each task's shipped config through `train.py`, a results table, and the zip the
GLUE server takes.

    python -m tasks.glue_sweep run --pretrained path/to/checkpoint --out runs/glue-sweep [--tasks cola rte ...] \
        [-- --trainer.max_epochs 2 ...]
    python -m tasks.glue_sweep zip runs/glue-sweep

`run` trains every task in turn into `<out>/<task>` (train.py validates the best checkpoint, predicts the test sets
and writes `<out>/<task>/submission/*.tsv`), then writes `<out>/results.md`, a table of task, metric, value and
wall-clock time like transformers' run_glue README, and `<out>/submission.zip`. A task that fails (its data
missing, say) is reported in the table with train.py's last line, and the sweep goes on; the exit status is then 1.
Arguments after `--` go to every train.py run. `zip` gathers the files of a finished sweep again.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from data import GLUE_TASKS
from tasks.base import validation_prefixes

REPO = Path(__file__).resolve().parents[1]
# Every file of a complete GLUE submission, by task (AX is predicted by the MNLI model).
SUBMISSION_FILES = [name for task in GLUE_TASKS.values() for name in task.submission.values()]


def run_task(task: str, pretrained: str, out: Path, extra: list[str]) -> dict:
    """Train one task with its shipped config; its metrics, time and status."""
    root = out / task
    command = [sys.executable, str(REPO / "train.py"), "--config", str(REPO / "configs" / "glue" / f"{task}.yaml"),
               "--model.pretrained", pretrained, "--trainer.default_root_dir", str(root), *extra]
    print(f"glue_sweep: {task}: {' '.join(command)}", flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, stderr=subprocess.PIPE, text=True, check=False)
    seconds = time.perf_counter() - start
    sys.stderr.write(done.stderr[-4000:])
    metrics_path = root / "metrics.json"
    if done.returncode != 0 or not metrics_path.is_file():
        last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "")
        return {"task": task, "status": done.returncode, "seconds": seconds, "error": last, "metrics": {}}
    return {"task": task, "status": 0, "seconds": seconds, "metrics": json.loads(metrics_path.read_text())}


def results_table(results: list[dict]) -> str:
    """Task, official metric(s) on dev (the best checkpoint), and wall-clock time, as Markdown."""
    lines = ["| Task | Metric | Result | Training time |", "|---|---|---:|---:|"]
    for result in results:
        task = GLUE_TASKS[result["task"]]
        minutes = f"{result['seconds'] / 60:.1f} min"
        title = Path(task.folder).name  # GLUE's own name for it: CoLA, SST-2, MNLI
        if result["status"] != 0:
            lines.append(f"| {title} | (failed, status {result['status']}) | {result['error'][:120]} | {minutes} |")
            continue
        prefixes = validation_prefixes(task.validation_splits)
        names = [f"{prefix}/{metric}" for prefix in prefixes for metric in task.metrics]
        shown = [(name, result["metrics"].get(name)) for name in names if name in result["metrics"]]
        metric = "/".join(_label(name) for name, _ in shown)
        value = "/".join("n/a" if v is None else f"{100 * v:.2f}" for _, v in shown)
        lines.append(f"| {title} | {metric} | {value} | {minutes} |")
    return "\n".join(lines) + "\n"


def _label(name: str) -> str:
    prefix, metric = name.split("/", 1)  # val/accuracy -> accuracy; val_mismatched/accuracy -> accuracy (mismatched)
    return metric if prefix == "val" else f"{metric} ({prefix.removeprefix('val_')})"


def gather(out: Path) -> tuple[Path, list[str]]:
    """`<out>/submission.zip` from every `<out>/*/submission/*.tsv`; returns it and the files still missing."""
    found = {path.name: path for path in sorted(out.glob("*/submission/*.tsv"))}
    archive = out / "submission.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as handle:
        for name, path in sorted(found.items()):
            handle.write(path, arcname=name)
    return archive, [name for name in SUBMISSION_FILES if name not in found]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="fine-tune every task, then write results.md and submission.zip")
    run.add_argument("--pretrained", required=True, help="checkpoint folder (transformers format or litbert export)")
    run.add_argument("--out", type=Path, default=Path("runs/glue-sweep"))
    run.add_argument("--tasks", nargs="+", choices=list(GLUE_TASKS), default=list(GLUE_TASKS))
    zipping = commands.add_parser("zip", help="gather a finished sweep's submission files into submission.zip")
    zipping.add_argument("out", type=Path)
    args = parser.parse_args(argv)

    status = 0
    if args.command == "run":
        args.out.mkdir(parents=True, exist_ok=True)
        results = []
        for task in args.tasks:
            results.append(run_task(task, args.pretrained, args.out, extra))
            (args.out / "results.md").write_text(results_table(results))
        status = int(any(result["status"] != 0 for result in results))
        print(results_table(results))
        print(f"glue_sweep: results in {args.out / 'results.md'}")
    archive, missing = gather(args.out)
    print(f"glue_sweep: {archive}" + (f"; missing for a complete GLUE submission: {', '.join(missing)}" if missing
                                       else " holds every file of a GLUE submission"))
    return status


if __name__ == "__main__":
    sys.exit(main())
