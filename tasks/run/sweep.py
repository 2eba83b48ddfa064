"""All of GLUE from one checkpoint: each task's shipped config through `train.py`, a results table, and the zip the
GLUE server takes.

    python -m tasks.run.sweep run --pretrained <folder or hub id> --out runs/glue-sweep [--tasks cola rte ...] \
        [--redo] [-- --trainer.max_epochs 2 ...]
    python -m tasks.run.sweep zip runs/glue-sweep

`run` trains every task in turn into `<out>/<task>` (train.py validates the best checkpoint, predicts the test sets
and writes `<out>/<task>/submission/*.tsv`), records each task's outcome in `<out>/<task>/sweep.json`, then writes
`<out>/results.md`, a table of task, metric, value and wall-clock time like transformers' run_glue README, of every
task the folder holds, and `<out>/submission.zip`. A task that fails (its data missing, say) is reported in the table
with train.py's last line, and the sweep goes on; the exit status is then 1. Run again into the same folder, the sweep
keeps the tasks that finished (`--redo` trains them again), resumes an unfinished one from its last checkpoint (a
task that diverged resumes into it: `--redo` it), and starts one that saved none afresh; a folder whose tasks were
trained from another checkpoint or with other train.py arguments is refused. Arguments after `--` go to every
train.py run. Paths are the caller's: train.py runs in the folder the sweep was started from. `zip` gathers the files
of a finished sweep again.
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
from tasks.run.checkpoint_io import LAST

REPO = Path(__file__).resolve().parents[2]
# Every file of a complete GLUE submission, by task (AX is predicted by the MNLI model).
SUBMISSION_FILES = [name for task in GLUE_TASKS.values() for name in task.submission.values()]


def run_task(task: str, pretrained: str, out: Path, extra: list[str], redo: bool = False) -> dict:
    """Train one task with its shipped config (resuming it where an earlier sweep left it, unless `redo`); its
    metrics, time and status."""
    root = out / task
    again = []
    if (root / "checkpoints" / LAST).is_file() and not redo:
        again = ["--ckpt_path", "last"]  # an earlier sweep stopped inside this task: go on from its last checkpoint
    elif root.is_dir() and any(path.name != "sweep.json" for path in root.iterdir()):
        again = ["--overwrite", "true"]  # it stopped before any checkpoint, or --redo: nothing to go on from
    command = [sys.executable, str(REPO / "train.py"), "--config", str(REPO / "configs" / "glue" / f"{task}.yaml"),
               "--model.pretrained", pretrained, "--trainer.default_root_dir", str(root), *again, *extra]
    print(f"sweep: {task}: {' '.join(command)}", flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, stderr=subprocess.PIPE, text=True, check=False)
    seconds = time.perf_counter() - start
    sys.stderr.write(done.stderr[-4000:])
    metrics_path = root / "metrics.json"
    resumed = {"resumed": True} if again[:1] == ["--ckpt_path"] else {}
    if done.returncode != 0 or not metrics_path.is_file():
        last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "")
        if done.returncode == 0:
            last = f"train.py exited 0 but wrote no {metrics_path}; {last}"
        return {"task": task, "status": done.returncode or 1, "seconds": seconds, "error": last, "metrics": {},
                **resumed}
    return {"task": task, "status": 0, "seconds": seconds, "metrics": json.loads(metrics_path.read_text()),
            **resumed}


def recorded(out: Path) -> list[dict]:
    """The outcome of every task `<out>` holds (`<task>/sweep.json`), in GLUE's order."""
    paths = [out / task / "sweep.json" for task in GLUE_TASKS]
    return [json.loads(path.read_text()) for path in paths if path.is_file()]


def check_same_settings(out: Path, tasks: list[str], settings: dict) -> None:
    """Stop where a task of `out` that the table and zip keep (or that the sweep resumes) was trained from another
    checkpoint or with other train.py arguments: they would mix two models."""
    for task in tasks:
        record = out / task / "sweep.json"
        if not record.is_file():
            continue
        before = json.loads(record.read_text())
        old = {key: before.get(key) for key in settings}
        if old != settings:
            raise SystemExit(f"sweep: {record.parent} was trained with --pretrained {old['pretrained']} and "
                             f"train.py arguments {old['extra']}; this sweep gives --pretrained "
                             f"{settings['pretrained']} and {settings['extra']}. Give another --out, or --redo to "
                             f"train the tasks again with these.")


def results_table(results: list[dict]) -> str:
    """Task, official metric(s) on dev (the best checkpoint), and wall-clock time, as Markdown."""
    lines = ["| Task | Metric | Result | Training time |", "|---|---|---:|---:|"]
    for result in results:
        task = GLUE_TASKS[result["task"]]
        minutes = f"{result['seconds'] / 60:.1f} min" + (" (resumed: this sitting's time)" if result.get("resumed")
                                                         else "")
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


def gather(out: Path) -> tuple[Path | None, list[str]]:
    """`<out>/submission.zip` from every `<out>/*/submission/*.tsv`; returns it (None where there is no file to put in
    it) and the files still missing."""
    found: dict[str, Path] = {}
    for path in sorted(out.glob("*/submission/*.tsv")):
        if path.name in found:
            raise SystemExit(f"sweep: {found[path.name]} and {path} are both {path.name}; the zip holds one. "
                             f"Remove the one that is not this sweep's.")
        found[path.name] = path
    missing = [name for name in SUBMISSION_FILES if name not in found]
    if not found:
        return None, missing
    archive = out / "submission.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as handle:
        for name, path in sorted(found.items()):
            handle.write(path, arcname=name)
    return archive, missing


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="fine-tune every task, then write results.md and submission.zip")
    run.add_argument("--pretrained", required=True,
                     help="checkpoint folder (transformers format or litbert export) or hub id (org/name[@revision])")
    run.add_argument("--out", type=Path, default=Path("runs/glue-sweep"))
    run.add_argument("--tasks", nargs="+", choices=list(GLUE_TASKS), default=list(GLUE_TASKS))
    run.add_argument("--redo", action="store_true", help="train again the tasks an earlier sweep into --out finished")
    zipping = commands.add_parser("zip", help="gather a finished sweep's submission files into submission.zip")
    zipping.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    out = args.out  # relative to the folder the sweep and its train.py runs share (W&B names a run by its path)

    status = 0
    if args.command == "run":
        settings = {"pretrained": args.pretrained, "extra": extra}
        # Every task the table and zip will hold, but those trained again now, must come from the same settings.
        check_same_settings(out, [task for task in GLUE_TASKS if not (args.redo and task in args.tasks)], settings)
        out.mkdir(parents=True, exist_ok=True)
        for task in args.tasks:
            record = out / task / "sweep.json"
            if not args.redo and record.is_file() and json.loads(record.read_text())["status"] == 0:
                print(f"sweep: {task}: finished in {record.parent} by an earlier sweep, kept (--redo trains it "
                      f"again)", flush=True)
                continue
            record.parent.mkdir(parents=True, exist_ok=True)
            # Until the task ends, the record says it was cut short (a killed sweep leaves it so).
            record.write_text(json.dumps({"task": task, "status": -1, "seconds": 0.0, "metrics": {},
                                          "error": "the sweep stopped inside this task", **settings}) + "\n")
            result = {**run_task(task, args.pretrained, out, extra, redo=args.redo), **settings}
            record.write_text(json.dumps(result, indent=1) + "\n")
            (out / "results.md").write_text(results_table(recorded(out)))
        results = recorded(out)
        (out / "results.md").write_text(results_table(results))
        status = int(any(result["status"] != 0 for result in results if result["task"] in args.tasks))
        print(results_table(results))
        print(f"sweep: results in {out / 'results.md'}")
    elif not out.is_dir():
        print(f"sweep: {args.out} is not a folder; give the --out of a sweep (`run`).", file=sys.stderr)
        return 2
    archive, missing = gather(out)
    if archive is None:
        print(f"sweep: no submission file under {out}/*/submission/: nothing to zip (a task writes its file "
              f"when train.py finishes it with --predict true)", file=sys.stderr)
        return status if args.command == "run" else 1
    print(f"sweep: {archive}" + (f"; missing for a complete GLUE submission: {', '.join(missing)}" if missing
                                       else " holds every file of a GLUE submission"))
    return status


if __name__ == "__main__":
    sys.exit(main())
