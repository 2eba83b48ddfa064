"""GLUE fine-tuning from MiniLM-L6: litbert at its shipped configs against transformers' `Trainer` at the same
hyper-parameters, dev metrics and training time, task by task and seed by seed.

Every run trains on the same token ids (transformers reads the dataset litbert tokenized) with the hyper-parameters
of `configs/glue/<task>.yaml` (learning rate, batch size, epochs, warmup, weight decay, AdamW betas and epsilon,
gradient clipping, max length, precision as train.py resolves it on this machine), under the `Trainer`'s names
for them: litbert's `constant` schedule, which warms up, is its `constant_with_warmup`, and the encoder's dropouts
and the new head's initializer range reach its model. A litbert override the `Trainer` has no setting for
(accumulation, layer-wise rates, `wsd`, ...) stops the sweep with its name (`bench.common.trainer_equivalents`):

- `litbert`: `train.py`'s own objects (`train.make_cli` on the shipped config, so its sampler, padding, kernels and
  precision are the shipped defaults), seeded with `--seed_everything`, which draws its batch order too (as the
  `Trainer`'s `seed` does; before 2026-11-27 litbert's order stayed at `data.seed` 0 whatever the seed).
- `transformers`: `AutoModelForSequenceClassification` + `Trainer` at its defaults: random batches, padded per batch
  (`DataCollatorWithPadding`, the Trainer's collator when it is given a tokenizer). Its dev metrics are the
  accuracy reference.
- `transformers-padded`: the same with every sequence padded to max_length, as run_glue pads by default.
- `transformers-grouped`: the `Trainer`'s fastest setting here: per-batch padding and length-grouped batches
  (`train_sampling_strategy="group_by_length"`).
- `transformers-fp32`: `transformers` in float32, the `Trainer`'s default precision (`bf16` and `fp16` off), for a
  machine where train.py's shipped precision is a mixed one (an AMX CPU, a GPU): the `Trainer`'s defaults against
  litbert's. The json keeps the shipped precision as the sweep's, and the run's own in `run_precision`; its MFU is
  against the float32 peak. Refused where the shipped precision is float32 already (it would be `transformers`).

Both libraries train without evaluating (litbert: `limit_val_batches=0`) and are then evaluated once on the dev
set with the final weights, each with the task's official metric. The time is the training alone (`fit` /
`train()`). Runs alternate: for each task and seed the three run in turn, the order rotating from seed to seed, so
load from other processes falls on all alike. Each run trains in a fresh Python process of its own (as a user's
`train.py` or script would), so that no run inherits the allocator state of the runs before it.
`--max-train-examples` trains on a fixed random subset of a task's training set (the same for every run and seed)
where a full set is too long for the machine.

    LITBERT_DATA=../shared/data python -m bench.glue --tasks wnli rte mrpc stsb cola sst2 --seeds 0 1 2 \
        --runs litbert transformers
    python -m bench.glue --from-json bench/results/glue-cpu-avx2.json --write BENCHMARKS.md

Runs go to `bench/results/glue-<machine>.json` (`cpu-avx2`, `cpu-avx512-bf16`, `cpu-amx`, `h100`; `--json`
elsewhere), and a sweep resumes from what that file holds. `--write` replaces the part of BENCHMARKS.md between the
`glue-<machine>` markers (`--section`) with the table.

MFU is each run's useful work per second against the machine's measured matmul peak (`bench.common`, measured
once per task before its runs, on the threads the runs use): the model FLOPs of the training set's real tokens, the
same count for both libraries: the encoder's forward and backward over every layer and every real token
(`Encoder.flops`, times the epochs), as transformers' model computes them. Padding is not counted; the last layer's
work that litbert's first-token shortcut skips is, so the shortcut shows as litbert's higher MFU. A run at 100% would
train in the FLOPs' time at the peak: that bounds the speed-up of an implementation that computes every layer over
every real token. One that skips work (litbert's last layer, about 13-14% of the count) can go past it by that much
(a run kept from a json written before MFU was recorded gets today's peak).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import datasets
import numpy as np
import torch
import transformers
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer, TrainingArguments

import train
from bench.common import (
    MINILM,
    REPO,
    device_name,
    fit_and_evaluate,
    machine_slug,
    malloc,
    measure_matmul_peak,
    print_table,
    results_path,
    setup_run,
    trainer_equivalents,
)
from tasks.run.throughput import matmul_dtype

RUNS = ("litbert", "transformers", "transformers-padded", "transformers-grouped", "transformers-fp32")
TASKS = ("cola", "sst2", "mrpc", "stsb", "rte", "wnli")
HEADERS = ["task", "examples x epochs", "run", "metric (mean ± sd over seeds)", "train s (median)", "samples/s",
           "MFU", "litbert speed-up"]


def litbert_cli(task: str, seed: int, root: str, extra: list[str]) -> train.LitbertCLI:
    return train.make_cli([
        "--config", f"configs/glue/{task}.yaml", "--model.pretrained", MINILM, "--seed_everything", str(seed),
        "--trainer.default_root_dir", root, "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0", "--export", "false", *extra])


def litbert_run(task: str, seed: int, train_subset: np.ndarray | None, extra: list[str]) -> tuple[float, dict]:
    """(training seconds, dev metrics) of the shipped config."""
    with tempfile.TemporaryDirectory() as root:
        cli = litbert_cli(task, seed, root, extra)
        if train_subset is not None:
            cli.datamodule.setup("fit")
            cli.datamodule.datasets["train"] = cli.datamodule.datasets["train"].select(train_subset)
        seconds, metrics, _ = fit_and_evaluate(cli, root)
    return seconds, {key.removeprefix("val/"): float(value) for key, value in metrics.items() if key != "val/loss"}


def official(task: str, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task's official metrics, named as litbert logs them."""
    if task == "stsb":
        return {"pearson": float(pearsonr(predictions, labels)[0]), "spearman": float(spearmanr(predictions,
                                                                                                 labels)[0])}
    classes = predictions.argmax(-1)
    if task == "cola":
        return {"matthews_corrcoef": float(matthews_corrcoef(labels, classes))}
    accuracy = float((classes == labels).mean())
    if task in ("mrpc", "qqp"):
        return {"f1": float(f1_score(labels, classes)), "accuracy": accuracy}
    return {"accuracy": accuracy}


def trainer_model(settings: dict, seed: int) -> torch.nn.Module:
    """MiniLM-L6 with a fresh classifier for the task, as `AutoModelForSequenceClassification` builds it."""
    transformers.set_seed(seed)
    return AutoModelForSequenceClassification.from_pretrained(
        MINILM, num_labels=settings["num_labels"], attn_implementation="sdpa", dtype=torch.float32,
        classifier_dropout=settings["classifier_dropout"], **settings["model"])


def trainer_arguments(settings: dict, run: str, seed: int, output: str, **changes) -> TrainingArguments:
    """The `Trainer`'s arguments for `run` at the shipped config's hyper-parameters (`changes` override them)."""
    precision = run_precision(run, settings)
    arguments = dict(
        output_dir=output, per_device_train_batch_size=settings["batch_size"],
        per_device_eval_batch_size=settings["eval_batch_size"], learning_rate=settings["learning_rate"],
        weight_decay=settings["weight_decay"], adam_beta1=settings["betas"][0], adam_beta2=settings["betas"][1],
        adam_epsilon=settings["eps"], max_grad_norm=settings["max_grad_norm"],
        warmup_steps=settings["warmup"], lr_scheduler_type=settings["lr_scheduler_type"],
        lr_scheduler_kwargs=settings["lr_scheduler_kwargs"],
        num_train_epochs=settings["epochs"], seed=seed, bf16=precision.startswith("bf16"),
        fp16=precision.startswith("16"), use_cpu=run_device().type == "cpu", report_to="none",
        save_strategy="no", eval_strategy="no", logging_strategy="no", disable_tqdm=True,
        train_sampling_strategy="group_by_length" if run == "transformers-grouped" else "random")
    return TrainingArguments(**(arguments | changes))


def transformers_run(task: str, settings: dict, train_set: datasets.Dataset, dev: datasets.Dataset, tokenizer,
                     seed: int, run: str) -> tuple[float, dict]:
    model = trainer_model(settings, seed)
    if run == "transformers-padded":  # run_glue's default: pad_to_max_length
        collator = DataCollatorWithPadding(tokenizer, padding="max_length", max_length=settings["max_length"])
    else:
        collator = DataCollatorWithPadding(tokenizer)
    with tempfile.TemporaryDirectory() as output:
        trainer = Trainer(model=model, args=trainer_arguments(settings, run, seed, output), train_dataset=train_set,
                          eval_dataset=dev, data_collator=collator)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        prediction = trainer.predict(dev)
    predictions = prediction.predictions
    predictions = predictions.squeeze(-1) if settings["num_labels"] == 1 else predictions
    return seconds, official(task, predictions, prediction.label_ids)


def padding(lengths: list[int], batch_size: int, orders: int = 20) -> float:
    """Tokens computed per real token when random batches are padded to their longest (the `Trainer`'s default),
    the mean over `orders` random orders."""
    lengths, rng = np.asarray(lengths), np.random.default_rng(0)
    padded = [sum(len(batch) * batch.max() for batch in np.array_split(lengths[rng.permutation(len(lengths))],
                                                                          range(batch_size, len(lengths), batch_size)))
              for _ in range(orders)]
    return float(np.mean(padded) / lengths.sum())


def litbert_commit() -> str | None:
    """The checkout's commit, marked "-dirty" with uncommitted changes (None outside a git checkout): runs of one
    json may span commits, and a run's time belongs to the code that ran it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    try:
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return git("rev-parse", "--short=12", "HEAD") + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def run_device() -> torch.device:
    """Where both libraries train: the GPU when there is one (Lightning's and the `Trainer`'s automatic choice),
    else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def peak_flops(dtype: torch.dtype, device: torch.device) -> float:
    """The fastest of 20 square matmuls (2048 wide on a CPU, 8192 on a GPU): single measurements vary by a fifth
    on this project's 2-core machine (0.119-0.158 TFLOP/s in float32), and a peak is the best it reaches."""
    return max(measure_matmul_peak(device, dtype, repeats=10) for _ in range(2))


def shipped_settings(task: str, extra: list[str]) -> tuple[dict, train.LitbertCLI]:
    """The hyper-parameters of the shipped config with the litbert runs' overrides (`extra`), as train.py resolves
    them on this machine; the transformers runs train with the same."""
    with tempfile.TemporaryDirectory() as root:
        cli = litbert_cli(task, 0, root, extra)
    config, opt = cli.config, cli.model.optimization
    settings = {
        "num_labels": cli.datamodule.num_labels, "max_length": cli.datamodule.max_length,
        "batch_size": cli.datamodule.batch_size, "eval_batch_size": cli.datamodule.eval_batch_size,
        "learning_rate": opt.learning_rate, "weight_decay": opt.weight_decay, "betas": tuple(opt.betas),
        "eps": opt.eps, "warmup": opt.warmup, "schedule": opt.schedule, "epochs": config.trainer.max_epochs,
        "max_grad_norm": float(config.trainer.gradient_clip_val or 0.0), "precision": str(config.trainer.precision),
        "classifier_dropout": cli.model.head.dropout.p,
        "group_by_length": cli.datamodule.group_by_length, **trainer_equivalents(cli),
    }
    return settings, cli


def prepare(task: str, args: argparse.Namespace, extra: list[str]):
    """(settings, cli, subset, train set, transformers' train set, transformers' dev set) of `task` with the sweep's
    arguments: the shipped config's hyper-parameters and litbert's tokenized data, trained on `subset` of it (the
    indices of --max-train-examples' fixed random subset, None for the whole set)."""
    settings, cli = shipped_settings(task, extra)
    if args.epochs:
        settings["epochs"] = args.epochs
    data = cli.datamodule
    data.setup("fit")
    full = len(data.datasets["train"])
    subset = None
    if args.max_train_examples is not None and full > args.max_train_examples:
        subset = np.sort(np.random.default_rng(1234).permutation(full)[: args.max_train_examples])
    train_set = data.datasets["train"] if subset is None else data.datasets["train"].select(subset)
    columns = [c for c in ("input_ids", "token_type_ids", "labels") if c in train_set.column_names]
    return (settings, cli, subset, train_set, train_set.select_columns(columns),
            data.datasets["validation"].select_columns(columns))


def run_in_fresh_process(task: str, run: str, seed: int,
                         args: argparse.Namespace) -> tuple[float, dict, int, str, str]:
    """(training seconds, dev metrics, process id, commit, memory allocator) of one run, trained in a new Python
    process: the commit is the checkout's when that process started and imported it (see `litbert_commit`). Runs
    that follow others in one process inherit their allocator's state: litbert's CoLA runs inside a sweep took
    131-140 s where the same run alone took 121 s. A fresh process per run times each library as a user's
    `train.py` or script meets it. Every run starts on this process's environment, so a preloaded allocator
    (`LD_PRELOAD`) applies to both libraries alike; each run records the one it ran on."""
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "result.json"
        command = [sys.executable, "-m", "bench.glue", "--tasks", task, "--one-run", run, str(seed), str(result)]
        if args.max_train_examples is not None:
            command += ["--max-train-examples", str(args.max_train_examples)]
        if args.epochs:
            command += ["--epochs", str(args.epochs)]
        if args.threads:
            command += ["--threads", str(args.threads)]
        command += ["--litbert-args", *args.litbert_args] if args.litbert_args else []
        done = subprocess.run(command, cwd=REPO, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{task} seed {seed} {run}: its process ({' '.join(command)}) exited with "
                             f"{done.returncode}; the runs before it are kept" + (f" in {args.json}" if args.json
                                                                                    else ""))
        outcome = json.loads(result.read_text())
    return outcome["seconds"], outcome["metrics"], outcome["pid"], outcome["commit"], outcome["allocator"]


def one_run(args: argparse.Namespace, extra: list[str]) -> None:
    """The child of `run_in_fresh_process`: train and evaluate one run, and write its outcome to the file named."""
    run, seed, result = args.one_run[0], int(args.one_run[1]), Path(args.one_run[2])
    (task,) = args.tasks
    commit = litbert_commit()  # the code this process imports, whatever the sweep's started with
    settings, cli, subset, _, hf_train, hf_dev = prepare(task, args, extra)
    tokenizer = cli.datamodule.tokenizer
    del cli  # the settings' model and datamodule are not the run's
    gc.collect()
    if run == "litbert":
        seconds, metrics = litbert_run(task, seed, subset, extra)
    else:
        seconds, metrics = transformers_run(task, settings, hf_train, hf_dev, tokenizer, seed, run)
    result.write_text(json.dumps({"seconds": seconds, "metrics": metrics, "pid": os.getpid(), "commit": commit,
                                  "allocator": malloc()}))


def run_precision(run: str, settings: dict) -> str:
    """The precision `run` trains in: the shipped one, except the `Trainer`'s float32 default for
    `transformers-fp32`."""
    return "32-true" if run == "transformers-fp32" else settings["precision"]


def machine_of(record: dict) -> str:
    """Where and in which precision a run trained (records written before both were kept say so)."""
    return f"{record.get('device', 'an unrecorded machine')}, {record.get('precision', 'an unrecorded precision')}"


def refuse_other_machines(records: list[dict], machine: dict, path: Path | None) -> None:
    """Stop where `path` holds runs from another machine or precision: their times and metrics do not share a table
    with this machine's, and resuming would mix them silently."""
    other = sorted({machine_of(r) for r in records} - {machine_of(machine)})
    if other:
        raise SystemExit(f"{path} holds runs on {'; '.join(other)}; these runs would be on {machine_of(machine)}. "
                         f"Runs of two machines or precisions do not share a table: give another --json.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=["litbert", "transformers"])
    parser.add_argument("--max-train-examples", type=int, default=None,
                        help="train on a fixed random subset of this many examples where a task has more")
    parser.add_argument("--epochs", type=int, default=None, help="override the configs' epochs (both libraries)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--litbert-args", nargs=argparse.REMAINDER, default=[],
                        help="more train.py overrides for the litbert runs (last on the command line)")
    parser.add_argument("--json", type=Path, default=None,
                        help="write every run's numbers here, after each run (default: bench/results/"
                             "glue-<machine>.json); the runs a file already holds (same task, run, seed, subset and "
                             "epochs) are kept and not run again, so a sweep too long for one sitting resumes; a file "
                             "holding another machine's or precision's runs is refused")
    parser.add_argument("--write", type=Path, default=None, help="replace the GLUE table in this Markdown file")
    parser.add_argument("--section", default=None,
                        help="which table of the file --write replaces, between its glue-<section> markers "
                             "(default: the json's name after glue-, e.g. cpu-avx2)")
    parser.add_argument("--one-run", nargs=3, default=None, metavar=("RUN", "SEED", "RESULT"),
                        help=argparse.SUPPRESS)  # one run in this process (run_in_fresh_process' child)
    parser.add_argument("--from-json", type=Path, default=None,
                        help="train nothing: print (and --write) the table of the runs a --json file recorded")
    args = parser.parse_args()
    if args.from_json:
        report(json.loads(args.from_json.read_text()), args.write, args.section, args.from_json)
        return
    setup_run(args.threads)
    extra = list(args.litbert_args) + (["--trainer.max_epochs", str(args.epochs)] if args.epochs else [])
    if args.one_run:
        one_run(args, extra)
        return

    args.json = args.json or results_path(f"glue-{machine_slug(run_device())}")
    records = json.loads(args.json.read_text()) if args.json.exists() else []
    device, commit = device_name(run_device()), litbert_commit()
    print(f"device: {device}; litbert {commit}; torch {torch.__version__}, transformers {transformers.__version__}",
          flush=True)
    for task in args.tasks:
        settings, cli, subset, train_set, _, hf_dev = prepare(task, args, extra)
        machine = {"device": device, "precision": settings["precision"]}
        refuse_other_machines(records, machine, args.json)
        if "transformers-fp32" in args.runs and matmul_dtype(settings["precision"]) == torch.float32:
            raise SystemExit(f"--runs transformers-fp32: the shipped precision on this machine is "
                             f"{settings['precision']} already, so `transformers` is the Trainer's float32 default; "
                             f"drop transformers-fp32.")
        full = len(cli.datamodule.datasets["train"])
        lengths = [len(ids) for ids in train_set["input_ids"]]
        model_flops = cli.model.encoder.flops(lengths, training=True) * settings["epochs"]
        peaks = {settings["precision"]: peak_flops(matmul_dtype(settings["precision"]), run_device())}  # by precision
        if "transformers-fp32" in args.runs:
            peaks["32-true"] = peak_flops(torch.float32, run_device())
        print(f"\n{task}: {len(train_set):,} of {full:,} training examples ({sum(lengths):,} tokens, "
              f"{np.mean(lengths):.1f} ± {np.std(lengths):.1f} an example; random batches padded per batch hold "
              f"{padding(lengths, settings['batch_size']):.2f}x the real tokens), dev {len(hf_dev)}; "
              f"{model_flops / 1e12:.1f} TFLOP to train, matmul peak "
              f"{', '.join(f'{peak / 1e12:.3f} TFLOP/s ({name})' for name, peak in peaks.items())}; "
              f"{json.dumps(settings)}", flush=True)
        for index, seed in enumerate(args.seeds):
            order = args.runs[index % len(args.runs):] + args.runs[: index % len(args.runs)]
            for run in order:
                kept = [r for r in records if (r["task"], r["run"], r["seed"], r["examples"], r["epochs"])
                        == (task, run, seed, len(train_set), settings["epochs"])]
                if kept:
                    for record in kept:  # runs recorded before the work was: the same data, this machine's peak
                        record.setdefault("model_flops", model_flops)
                        record.setdefault("peak_flops", peaks[run_precision(run, settings)])
                    print(f"{task} seed {seed} {run}: in {args.json}, kept", flush=True)
                    continue
                seconds, metrics, pid, run_commit, allocator = run_in_fresh_process(task, run, seed, args)
                samples = len(train_set) * settings["epochs"]
                own = run_precision(run, settings)
                records.append({"task": task, "run": run, "seed": seed, "seconds": seconds,
                                "samples_per_second": samples / seconds, "metrics": metrics,
                                "examples": len(train_set), "epochs": settings["epochs"],
                                "model_flops": model_flops, "peak_flops": peaks[own], "process": "fresh",
                                "allocator": allocator, **machine,
                                **({"run_precision": own} if own != settings["precision"] else {}),
                                **({"litbert_commit": run_commit} if run == "litbert" else {}),
                                "versions": {"torch": torch.__version__, "transformers": transformers.__version__}})
                shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
                print(f"{task} seed {seed} {run}: {seconds:.1f} s, {samples / seconds:.1f} samples/s, {shown} "
                      f"(process {pid}, malloc {allocator})", flush=True)
                args.json.write_text(json.dumps(records, indent=1) + "\n")
        args.json.write_text(json.dumps(records, indent=1) + "\n")
    print()
    report(records, args.write, args.section, args.json)


def report(records: list[dict], write: Path | None, section: str | None, source: Path) -> None:
    """Print the table of `records` (every run of every task, in the order they ran), and write it into `write`
    between the `glue-<section>` markers (by default the name of `source`, the json they came from)."""
    tasks = list(dict.fromkeys(r["task"] for r in records))
    runs = [run for run in RUNS if any(r["run"] == run for r in records)]
    rows = [row for task in tasks for row in task_rows(task, [r for r in records if r["task"] == task], runs)]
    print_table(HEADERS, rows)
    if write:
        machines = "; ".join(sorted({machine_of(r) for r in records}))
        mallocs = {run: sorted({r["allocator"] for r in records if r["run"] == run and "allocator" in r})
                   for run in runs}
        if any(mallocs.values()):  # recorded since 2026-11-26
            machines += "; malloc: " + ", ".join(f"{run} {' / '.join(names) or 'not recorded'}"
                                                 for run, names in mallocs.items())
        write_table(write, section or source.stem.removeprefix("glue-"), HEADERS, rows, source, machines)


def task_rows(task: str, records: list[dict], runs: list[str]) -> list[list[str]]:
    """One row per run: metrics over every seed; times over the runs that had the machine to themselves (a record
    marked `"contended": true` ran beside other work, so its metrics stand and its time does not)."""
    rows, rates = [], {}
    for run in runs:
        mine = [r for r in records if r["run"] == run]
        if not mine:
            continue
        timed = [r for r in mine if not r.get("contended")]
        seconds, rate, mfu = "contended", "contended", "contended"
        if timed:
            rates[run] = statistics.median(r["samples_per_second"] for r in timed)
            seconds = f"{statistics.median(r['seconds'] for r in timed):.0f}" + (f" ({len(timed)})" if len(timed) <
                                                                                  len(mine) else "")
            rate = f"{rates[run]:.1f}"
            measured = [r for r in timed if "model_flops" in r]
            mfu = percent(statistics.median(r['model_flops'] / r['seconds'] / r['peak_flops'] for r in measured)) \
                if measured else ""
        shown = []
        for name in mine[0]["metrics"]:
            values = [r["metrics"][name] for r in mine]
            spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
            shown.append(f"{name} {statistics.mean(values):.3f}{spread}")
        rows.append([task, f"{mine[0]['examples']:,} x {mine[0]['epochs']}", run, "; ".join(shown), seconds, rate,
                     mfu])
    for row in rows:
        row.append(f"{rates['litbert'] / rates[row[2]]:.2f}x" if "litbert" in rates and row[2] in rates else "")
    return rows


def percent(fraction: float) -> str:
    """Whole percents from 10% (42%, 100%), two significant digits below (0.43%, 0.40%, 5.0%): a GPU's small-model
    runs would all show as 0%."""
    return f"{100 * fraction:.0f}%" if fraction >= 0.095 else f"{100 * fraction:#.2g}%"


def write_table(path: Path, section: str, headers: list[str], rows: list[list[str]], source: Path,
                machines: str) -> None:
    begin, end = f"<!-- glue-{section}:begin -->", f"<!-- glue-{section}:end -->"
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_table(headers, rows)
    shown = source.resolve().relative_to(REPO) if source.resolve().is_relative_to(REPO) else source
    block = f"{begin}\n{machines} (`{shown}`):\n\n{buffer.getvalue()}{end}"
    text = path.read_text()
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text += f"\n{block}\n"
    path.write_text(text)


if __name__ == "__main__":
    main()
