"""All of GLUE from one checkpoint: each task's shipped config through `train.py`, over a grid of settings and
seeds, a results table with the GLUE average, and the zip the GLUE server takes.

    python -m tasks.run.sweep run --pretrained <folder or hub id> --out runs/glue-sweep [--tasks cola rte ...] \
        [--grid learning_rate=1e-5,2e-5,3e-5,5e-5 ...] [--seeds 0 1 2] [--redo] [-- --trainer.max_epochs 2 ...]
    python -m tasks.run.sweep zip runs/glue-sweep

`run` trains, for every task in turn, each point of the grid (the product of its keys' values) with each seed
(`--seed_everything`), one train.py run each, into `<out>/<task>/<key>=<value>,.../seed<k>` (`<out>/<task>` with no
grid and no seeds). train.py validates a run's best checkpoint, predicts the test sets and writes
`<run>/submission/*.tsv`; the sweep records each run's outcome in `<run>/sweep.json`. It then chooses each task's
best setting by the mean over seeds of the task's dev score (its official metric; a task with two, or MNLI with two
dev sets, counts their average, as GLUE's score does), and writes `<out>/results.md` and `<out>/results.json`: the
best setting's mean and spread over seeds, every setting, and the GLUE average (the unweighted mean of the task
scores, naming the tasks it is over), of every run the folder holds; and `<out>/submission.zip`, from each task's
best run (the best setting's best seed). Grid keys are the short names of SHORT_NAMES or full dotted train.py
options, which train.py checks (`--print_config`) before the sweep trains.

A run that fails (its data missing, say, or stopped by a signal) is reported with train.py's last line, and the
sweep goes on; so is a run whose best checkpoint scores an undefined metric (a correlation of constant predictions).
Once every run is done and the results are written, the exit status is 1 where any run of the tasks asked for has
no score, and the last line names them. A signal to the sweep stops the run it waits for and then the sweep
(`train_py`). Run again into the same folder, the sweep keeps the runs that finished
(`--redo` trains them again), resumes an unfinished one from its last checkpoint (a run that diverged resumes into
it: `--redo` it), and starts one that saved none afresh; a folder whose runs were trained from another checkpoint or
with other train.py arguments is refused. Arguments after `--` go to every train.py run. Paths are the caller's:
train.py runs in the folder the sweep was started from. `zip` gathers the files of a finished sweep again.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import signal
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from data import GLUE_TASKS
from tasks.base import validation_prefixes
from tasks.run.checkpoint_io import LAST
from tasks.run.signals import stop_with_parent

REPO = Path(__file__).resolve().parents[2]
# Every file of a complete GLUE submission, by task (AX is predicted by the MNLI model).
SUBMISSION_FILES = [name for task in GLUE_TASKS.values() for name in task.submission.values()]
# Grid keys by short name: the train.py option each sets. Any other option is given by its full dotted path.
SHORT_NAMES = {
    "learning_rate": "model.optimization.learning_rate",
    "batch_size": "data.batch_size",
    "epochs": "trainer.max_epochs",
    "warmup": "model.optimization.warmup",
    "weight_decay": "model.optimization.weight_decay",
}
# Options the sweep gives every run itself: a grid over them would be overwritten or would move the runs.
SWEEP_OPTIONS = {"trainer.default_root_dir": "the sweep puts each run in its own folder",
                 "model.pretrained": "give --pretrained", "seed_everything": "give --seeds"}
DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """`key=v1,v2,...` items -> {key: values}, each key its short name where the option has one (the name of the
    runs' folders, so that `learning_rate` and `model.optimization.learning_rate` are one setting)."""
    grid: dict[str, list[str]] = {}
    by_option = {option: short for short, option in SHORT_NAMES.items()}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise SystemExit(f"sweep: --grid {item}: give key=value,value,... (e.g. learning_rate=2e-5,3e-5)")
        if key not in SHORT_NAMES and not DOTTED.fullmatch(key):
            raise SystemExit(f"sweep: --grid {item}: {key!r} is not a grid key: give one of the short names "
                             f"{', '.join(f'{short} ({option})' for short, option in SHORT_NAMES.items())}, or "
                             f"a train.py option by its full dotted path (trainer.accumulate_grad_batches).")
        key = by_option.get(key, key)
        option = SHORT_NAMES.get(key, key)
        if option in SWEEP_OPTIONS:
            raise SystemExit(f"sweep: --grid {item}: the sweep sets {option} on every run ({SWEEP_OPTIONS[option]}).")
        if key in grid:
            raise SystemExit(f"sweep: --grid gives {option} twice; give its values once, comma-separated.")
        split = values.split(",")
        bad = [value for value in split if not value or "/" in value]
        if bad or len(set(split)) != len(split):
            raise SystemExit(f"sweep: --grid {item}: each value once, none empty and none with '/' (a value names "
                             f"its runs' folder, <out>/<task>/{key}=<value>).")
        grid[key] = split
    return grid


def grid_points(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    """Every combination of the grid's values, in the order given ([{}]: the configs' own settings)."""
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def option_args(point: dict[str, str], seed: int | None) -> list[str]:
    """The train.py arguments of a grid point and seed."""
    args = [arg for key, value in point.items() for arg in (f"--{SHORT_NAMES.get(key, key)}", value)]
    return args + (["--seed_everything", str(seed)] if seed is not None else [])


def setting_label(point: dict[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in point.items()) or "(config)"


def run_folder(out: Path, task: str, point: dict[str, str], seed: int | None) -> Path:
    """`<out>/<task>[/<key>=<value>,...][/seed<k>]`: with no grid and no seed, the task's folder itself."""
    return out.joinpath(task, *([setting_label(point)] if point else []), *([f"seed{seed}"] if seed is not None
                                                                             else []))


def check_grid(grid: dict[str, list[str]], extra: list[str], seeds: list[int] | None) -> None:
    """Refuse an option that both the grid (or --seeds) and the train.py arguments after `--` set."""
    given = {arg.removeprefix("--").split("=", 1)[0] for arg in extra if arg.startswith("--")}
    both = [f"{key} ({SHORT_NAMES.get(key, key)})" for key in grid if SHORT_NAMES.get(key, key) in given]
    if seeds is not None and "seed_everything" in given:
        both.append("--seeds (seed_everything)")
    if both:
        raise SystemExit(f"sweep: {', '.join(both)} set both by the sweep and in the train.py arguments after --; "
                         f"give each in one place.")


def check_options(task: str, pretrained: str, point: dict[str, str], extra: list[str]) -> None:
    """train.py parses (`--print_config`, nothing built) a run's arguments: a grid key that is no train.py option
    stops the sweep before it trains, not every run after seconds of loading."""
    command = [sys.executable, str(REPO / "train.py"), "--config", str(REPO / "configs" / "glue" / f"{task}.yaml"),
               "--model.pretrained", pretrained, *extra, *option_args(point, None), "--print_config"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = "\n".join(line for line in done.stderr.splitlines()[-3:] if line.strip())
        raise SystemExit(f"sweep: train.py refuses the grid's options {option_args(point, None)}:\n{last}\nA grid "
                         f"key is a short name ({', '.join(SHORT_NAMES)}) or a full dotted train.py option; "
                         f"`python train.py --config configs/glue/{task}.yaml --print_config` lists them.")


def run_task(task: str, pretrained: str, root: Path, extra: list[str], redo: bool = False) -> dict:
    """Train one task with its shipped config and `extra` arguments into `root` (resuming it where an earlier
    sweep left it, unless `redo`); its metrics, time and status."""
    again = []
    if (root / "checkpoints" / LAST).is_file() and not redo:
        again = ["--ckpt_path", "last"]  # an earlier sweep stopped inside this run: go on from its last checkpoint
    elif root.is_dir() and any(path.name != "sweep.json" for path in root.iterdir()):
        again = ["--overwrite", "true"]  # it stopped before any checkpoint, or --redo: nothing to go on from
    command = [sys.executable, str(REPO / "train.py"), "--config", str(REPO / "configs" / "glue" / f"{task}.yaml"),
               "--model.pretrained", pretrained, "--trainer.default_root_dir", str(root), *again, *extra]
    print(f"sweep: {task}: {' '.join(command)}", flush=True)
    start = time.perf_counter()
    try:
        done = train_py(command)
    except SweepStopped as stopped:
        stopped.result = ended(task, root, stopped.done, time.perf_counter() - start, again)
        raise
    return ended(task, root, done, time.perf_counter() - start, again)


def ended(task: str, root: Path, done: subprocess.CompletedProcess, seconds: float, again: list[str]) -> dict:
    """The outcome of a train.py run into `root`: its metrics, time and status, or its last line where it failed."""
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


class SweepStopped(Exception):
    """A signal stopped the sweep inside a run: train.py was stopped with it and has ended (`done`); the sweep records
    the run (`result`), writes its results and ends with 128 + the signal's number, starting no other run."""

    def __init__(self, signum: int, done: subprocess.CompletedProcess) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum, self.done, self.result = signum, done, None


def train_py(command: list[str]) -> subprocess.CompletedProcess:
    """Run train.py to its end, its stderr kept. A SIGTERM or SIGINT to the sweep (a scheduler or a container that
    signals the first process alone, or `kill`) is passed on to train.py, which saves at its next step and stops,
    and SweepStopped is raised once it has ended. train.py has a process group of its own, so a Ctrl+C in the
    terminal reaches it once, through the sweep (a second one would stop it without saving); on Linux it is also
    sent SIGTERM should the sweep die without passing a signal on (SIGKILL)."""
    received: list[int] = []
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, process_group=0,
                          preexec_fn=stop_with_parent) as child:
        def pass_on(signum: int, frame: object) -> None:
            received.append(signum)
            if child.poll() is None:
                child.send_signal(signum)

        previous = {signum: signal.signal(signum, pass_on) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            _, stderr = child.communicate()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    done = subprocess.CompletedProcess(command, child.returncode, stderr=stderr)
    if received:
        raise SweepStopped(received[0], done)
    return done


def recorded(out: Path) -> list[dict]:
    """The outcome of every run `<out>` holds (`<task>/.../sweep.json`), in GLUE's order of the tasks; each with
    its `folder`."""
    paths = [path for task in GLUE_TASKS if (out / task).is_dir() for path in sorted((out / task).rglob("sweep.json"))]
    return [{"grid": {}, "seed": None, **json.loads(path.read_text()), "folder": str(path.parent)} for path in paths]


def check_same_settings(out: Path, tasks: list[str], settings: dict) -> None:
    """Stop where a run of `out` that the table and zip keep (or that the sweep resumes) was trained from another
    checkpoint or with other train.py arguments: they would mix two models."""
    for before in recorded(out):
        if before["task"] not in tasks:
            continue
        old = {key: before.get(key) for key in settings}
        if old != settings:
            raise SystemExit(f"sweep: {before['folder']} was trained with --pretrained {old['pretrained']} and "
                             f"train.py arguments {old['extra']}; this sweep gives --pretrained "
                             f"{settings['pretrained']} and {settings['extra']}. Give another --out, or --redo to "
                             f"train the tasks again with these.")


def metric_names(task: str) -> list[str]:
    """The task's official metrics on each of its dev sets, as metrics.json names them (`val/f1`, `val/accuracy`)."""
    spec = GLUE_TASKS[task]
    return [f"{prefix}/{metric}" for prefix in validation_prefixes(spec.validation_splits) for metric in spec.metrics]


def summarize(records: list[dict]) -> dict:
    """Per task, every setting's task score over its seeds (mean, sample standard deviation, min, max), the best
    setting (the highest mean among those whose runs all finished), and the GLUE average over the tasks with one."""
    tasks: dict[str, dict] = {}
    for record in records:
        task = tasks.setdefault(record["task"], {"metrics": metric_names(record["task"]), "settings": {},
                                                 "seconds": 0.0, "resumed": False})
        task["seconds"] += record["seconds"]
        task["resumed"] |= bool(record.get("resumed"))
        label = setting_label(record["grid"])
        setting = task["settings"].setdefault(label, {"setting": label, "grid": record["grid"], "runs": []})
        run = {"seed": record["seed"], "status": record["status"], "folder": record["folder"]}
        missing = [name for name in task["metrics"] if name not in record["metrics"]]
        # metrics.json holds null for a metric that is undefined (a correlation of constant predictions): the run
        # has no score, as a diverged one, rather than a NaN that would win every comparison or a None that stops
        # the table.
        undefined = [name for name in task["metrics"] if name in record["metrics"] and record["metrics"][name] is None]
        if record["status"] == 0 and missing:
            run.update(status=1, error=f"metrics.json has no {', '.join(missing)}")
        elif record["status"] == 0 and undefined:
            run.update(status=1, error=f"{', '.join(undefined)} undefined (null in metrics.json): the best checkpoint "
                                      f"predicts a constant on dev")
        elif record["status"] != 0:
            run["error"] = record.get("error", "")
        else:  # the task's score: the mean of its official metrics (MRPC's F1 and accuracy, STS-B's correlations)
            run["values"] = [record["metrics"][name] for name in task["metrics"]]
            run["score"] = statistics.fmean(run["values"])
        setting["runs"].append(run)
    for task in tasks.values():
        task["settings"] = list(task["settings"].values())
        for setting in task["settings"]:
            scores = [run["score"] for run in setting["runs"] if "score" in run]
            setting["finished"] = len(scores) == len(setting["runs"])
            if scores:
                values = list(zip(*(run["values"] for run in setting["runs"] if "score" in run), strict=True))
                setting.update(mean=statistics.fmean(scores), std=statistics.stdev(scores) if len(scores) > 1
                               else None, min=min(scores), max=max(scores), seeds=len(scores),
                               means={name: statistics.fmean(v) for name, v in zip(task["metrics"], values,
                                                                                   strict=True)})
        finished = [setting for setting in task["settings"] if setting["finished"]]
        best = max(finished, key=lambda setting: setting["mean"], default=None)
        task["best"] = best["setting"] if best else None
        # The best run of the best setting (its best seed) gives the task's test-set predictions.
        task["best_run"] = max(best["runs"], key=lambda run: run["score"])["folder"] if best else None
    scored = [name for name in GLUE_TASKS if name in tasks and tasks[name]["best"] is not None]
    average = statistics.fmean(best_of(tasks[name])["mean"] for name in scored) if scored else None
    return {"tasks": tasks, "glue_average": {"score": average, "tasks": scored,
                                             "without": [name for name in GLUE_TASKS if name not in scored]}}


def best_of(task: dict) -> dict:
    return next(setting for setting in task["settings"] if setting["setting"] == task["best"])


def _title(task: str) -> str:
    return Path(GLUE_TASKS[task].folder).name  # GLUE's own name for it: CoLA, SST-2, MNLI


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}"


def _spread(setting: dict) -> str:
    return f"{_percent(setting['min'])}–{_percent(setting['max'])}" if setting["seeds"] > 1 else "–"


def _score(setting: dict) -> str:
    return _percent(setting["mean"]) + (f" ± {_percent(setting['std'])}" if setting["std"] is not None else "")


def results_table(summary: dict) -> str:
    """Each task's best setting (dev metrics and score over seeds), the GLUE average, every setting and every
    failed run, as Markdown."""
    lines = ["| Task | Metric | Best setting | Dev result | Score (mean ± std) | Min–max | Seeds | Training time |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    tasks = summary["tasks"]
    for name, task in tasks.items():
        minutes = f"{task['seconds'] / 60:.1f} min"
        metric = "/".join(_label(metric) for metric in task["metrics"])
        if task["best"] is None:
            lines.append(f"| {_title(name)} | {metric} | (no setting finished: failed runs below) | | | | | "
                         f"{minutes} |")
            continue
        best = best_of(task)
        result = "/".join(_percent(value) for value in best["means"].values())
        lines.append(f"| {_title(name)} | {metric} | {best['setting']} | {result} | {_score(best)} | "
                     f"{_spread(best)} | {best['seeds']} | {minutes} |")
    average = summary["glue_average"]
    if average["score"] is not None:
        included = [_title(name) for name in average["tasks"]]
        lines.append(f"| GLUE average | | | | {_percent(average['score'])} | | | |")
        lines += ["", f"GLUE average: the unweighted mean of the task scores over {', '.join(included)}"
                      + (f" only ({len(included)} of GLUE's {len(GLUE_TASKS)} tasks): "
                         f"{', '.join(_title(name) for name in average['without'])} have no result here, so it is "
                         f"not GLUE's score." if average["without"] else f" (all of GLUE's {len(GLUE_TASKS)} tasks).")]
    lines += ["", "A task's score is the mean of its metrics (and of MNLI's two dev sets); its best setting has the "
                  "highest mean score over seeds among the settings whose runs all finished, chosen on the dev "
                  "sets it is reported on."]
    if any(task["resumed"] for task in tasks.values()):
        lines.append("A resumed run's training time is its last sitting's.")
    settings = [(name, setting) for name, task in tasks.items() for setting in task["settings"]]
    if len(settings) > len(tasks):  # a grid: every setting beside the best
        lines += ["", "Every setting:", "", "| Task | Setting | Score (mean ± std) | Min–max | Seeds finished |",
                  "|---|---|---:|---:|---:|"]
        for name, setting in settings:
            score = (_score(setting), _spread(setting)) if "mean" in setting else ("n/a", "–")
            done = sum("score" in run for run in setting["runs"])
            lines.append(f"| {_title(name)} | {setting['setting']} | {score[0]} | {score[1]} | "
                         f"{done} of {len(setting['runs'])} |")
    failed = [(name, setting["setting"], run) for name, task in tasks.items() for setting in task["settings"]
              for run in setting["runs"] if "score" not in run]
    if failed:
        lines += ["", "Failed runs:", ""]
        lines += [f"- {_title(name)} {label}" + (f" seed {run['seed']}" if run["seed"] is not None else "")
                  + f": status {run['status']}: {run['error'][:200]}" for name, label, run in failed]
    return "\n".join(lines) + "\n"


def _label(name: str) -> str:
    prefix, metric = name.split("/", 1)  # val/accuracy -> accuracy; val_mismatched/accuracy -> accuracy (mismatched)
    return metric if prefix == "val" else f"{metric} ({prefix.removeprefix('val_')})"


def write_results(out: Path) -> dict:
    """`<out>/results.md` and `<out>/results.json` from every run the folder holds; the summary."""
    summary = summarize(recorded(out))
    (out / "results.md").write_text(results_table(summary))
    (out / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def gather(out: Path, summary: dict) -> tuple[Path | None, list[str]]:
    """`<out>/submission.zip` from the submission files of each task's best run; returns it (None where there is no
    file to put in it) and the files still missing."""
    found = {path.name: path for task in summary["tasks"].values() if task["best_run"] is not None
             for path in sorted(Path(task["best_run"]).glob("submission/*.tsv"))}
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="fine-tune every task, then write results.md and submission.zip")
    run.add_argument("--pretrained", required=True,
                     help="checkpoint folder (transformers format or litbert export) or hub id (org/name[@revision])")
    run.add_argument("--out", type=Path, default=Path("runs/glue-sweep"))
    run.add_argument("--tasks", nargs="+", choices=list(GLUE_TASKS), default=list(GLUE_TASKS))
    run.add_argument("--grid", nargs="+", default=[], metavar="KEY=V1,V2",
                     help=f"train each task at every combination of these values; a key is a short name "
                          f"({', '.join(SHORT_NAMES)}) or a full dotted train.py option")
    run.add_argument("--seeds", nargs="+", type=int, default=None,
                     help="train each setting once per seed (seed_everything); the table gives mean and spread")
    run.add_argument("--redo", action="store_true", help="train again the runs an earlier sweep into --out finished")
    zipping = commands.add_parser("zip", help="gather a finished sweep's submission files into submission.zip")
    zipping.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    out = args.out  # relative to the folder the sweep and its train.py runs share (W&B names a run by its path)

    status, failures = 0, []
    if args.command == "run":
        grid = parse_grid(args.grid)
        check_grid(grid, extra, args.seeds)
        if args.seeds is not None and len(set(args.seeds)) != len(args.seeds):
            raise SystemExit(f"sweep: --seeds {' '.join(map(str, args.seeds))}: each seed once.")
        runs = [(task, point, seed) for task in args.tasks for point in grid_points(grid)
                for seed in (args.seeds if args.seeds is not None else [None])]
        settings = {"pretrained": args.pretrained, "extra": extra}
        # Every run the table and zip will hold, but those trained again now, must come from the same settings.
        check_same_settings(out, [task for task in GLUE_TASKS if not (args.redo and task in args.tasks)], settings)
        out.mkdir(parents=True, exist_ok=True)
        todo = [(task, point, seed) for task, point, seed in runs if args.redo or not finished(
            run_folder(out, task, point, seed))]
        if todo and any(key not in SHORT_NAMES for key in grid):
            check_options(todo[0][0], args.pretrained, todo[0][1], extra)
        for task, point, seed in runs:
            root = run_folder(out, task, point, seed)
            record = root / "sweep.json"
            if (task, point, seed) not in todo:
                print(f"sweep: {task}: finished in {root} by an earlier sweep, kept (--redo trains it again)",
                      flush=True)
                continue
            root.mkdir(parents=True, exist_ok=True)
            keys = {"grid": point, "seed": seed, **settings}
            # Until the run ends, the record says it was cut short (a killed sweep leaves it so).
            record.write_text(json.dumps({"task": task, "status": -1, "seconds": 0.0, "metrics": {},
                                          "error": "the sweep stopped inside this run", **keys}) + "\n")
            try:
                result = run_task(task, args.pretrained, root, [*extra, *option_args(point, seed)], redo=args.redo)
            except SweepStopped as stopped:  # recorded as train.py left it: run again, the sweep resumes it
                record.write_text(json.dumps({**stopped.result, **keys}, indent=1) + "\n")
                write_results(out)
                print(f"sweep: stopped by {signal.Signals(stopped.signum).name} inside {root} (train.py's status "
                      f"{stopped.done.returncode}); run the same command again to go on where it stopped.",
                      file=sys.stderr)
                return 128 + stopped.signum
            record.write_text(json.dumps({**result, **keys}, indent=1) + "\n")
            write_results(out)
        summary = write_results(out)
        failures = failed_runs(summary, args.tasks)
        status = int(bool(failures))
        print(results_table(summary))
        print(f"sweep: results in {out / 'results.md'} and {out / 'results.json'}")
    elif not out.is_dir():
        print(f"sweep: {args.out} is not a folder; give the --out of a sweep (`run`).", file=sys.stderr)
        return 2
    else:
        summary = summarize(recorded(out))
    archive, missing = gather(out, summary)
    if archive is None:
        print(f"sweep: no submission file in the best run of any task under {out}: nothing to zip (a run writes "
              f"its files when train.py finishes it with --predict true)", file=sys.stderr)
    else:
        print(f"sweep: {archive}, from each task's best run" + (
            f"; missing for a complete GLUE submission: {', '.join(missing)}" if missing
            else "; it holds every file of a GLUE submission"))
    if args.command == "run" and failures:  # last, where a job's log is read: which runs to look at
        print(f"sweep: {len(failures)} run(s) failed, so the exit status is 1: {'; '.join(failures)}. results.md "
              f"gives each one's cause.", file=sys.stderr)
    return status if args.command == "run" else int(archive is None)


def failed_runs(summary: dict, tasks: list[str]) -> list[str]:
    """Every run of `tasks` with no score (failed, stopped, or an undefined metric), named by task, setting and
    seed: any makes the sweep's exit status 1, though it went on with the other runs."""
    return [f"{_title(name)} {setting['setting']}" + (f" seed {run['seed']}" if run["seed"] is not None else "")
            + f" (status {run['status']})"
            for name, task in summary["tasks"].items() if name in tasks for setting in task["settings"]
            for run in setting["runs"] if "score" not in run]


def finished(root: Path) -> bool:
    record = root / "sweep.json"
    return record.is_file() and json.loads(record.read_text())["status"] == 0


if __name__ == "__main__":
    sys.exit(main())
