"""Multi-label classification from MiniLM-L6: litbert's `configs/multilabel/conll-entity-types.yaml` against
transformers' `Trainer` with `BertForSequenceClassification(problem_type="multi_label_classification")`, on the
CoNLL-2003 entity-types set (each sentence and the set of PER/ORG/LOC/MISC types it mentions): micro F1, macro F1 and
exact match on the dev set, and the training time.

Both train on the same token ids (the `Trainer` reads the dataset litbert tokenized, its 0/1 targets as floats, as
its BCE loss needs) with the config's hyper-parameters (learning rate, batch size, warmup, weight decay, AdamW betas
and epsilon, gradient clipping, classifier dropout) in the precision train.py resolves on this machine, with the
epochs and max length given here (the same for both). Both draw random batches padded per batch (the config's, and
the `Trainer`'s `DataCollatorWithPadding`); both clip the gradients' norm at the config's 1.0 (`max_grad_norm`).
Both evaluate once after training, with the final weights, at the threshold 0.5: litbert through its validation
loop (torchmetrics), the `Trainer` through `predict` and scikit-learn. The time is the training alone (`fit` /
`train()`). Every run trains in a fresh Python process, and the runs alternate, the order rotating from seed to seed,
so load from other processes falls on both alike; each run records the machine's load average when it started.
`--max-train-examples` trains on a fixed random subset (the same for every run and seed).
`--runs litbert-grouped` adds litbert with length-grouped batches (`--data.group_by_length true`).

    LITBERT_DATA=../shared/data python -m bench.multilabel --seeds 0 1 2 --epochs 1 --max-length 64 \
        --max-train-examples 4000
    python -m bench.multilabel --from-json bench/results/multilabel-cpu-avx512-bf16.json --write BENCHMARKS.md

Runs go to `bench/results/multilabel-<machine>.json` (`--json` elsewhere); a sweep resumes from what it holds.
`--write` replaces the part of BENCHMARKS.md between the `multilabel-<machine>` markers with the table.
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
from sklearn.metrics import accuracy_score, f1_score
from transformers import BertForSequenceClassification, DataCollatorWithPadding, Trainer

import train
from bench.common import (
    MINILM,
    REPO,
    device_name,
    fit_and_evaluate,
    machine_slug,
    malloc,
    mean_sd,
    print_table,
    results_path,
    setup_run,
    trainer_equivalents,
    write_section,
)
from bench.glue import litbert_commit, run_device, trainer_arguments

CONFIG = "configs/multilabel/conll-entity-types.yaml"
RUNS = ("litbert", "transformers", "litbert-grouped")
METRICS = ("f1_micro", "f1_macro", "exact_match")
HEADERS = ["run", "seeds", "examples x epochs", "f1_micro", "f1_macro", "exact_match", "train s (median)", "samples/s",
           "litbert speed-up"]


def litbert_cli(seed: int, root: str, args: argparse.Namespace, *extra: str) -> train.LitbertCLI:
    return train.make_cli([
        "--config", CONFIG, "--model.pretrained", MINILM, "--seed_everything", str(seed),
        "--trainer.max_epochs", str(args.epochs), "--data.max_length", str(args.max_length),
        "--trainer.default_root_dir", root, "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0", "--export", "false", *extra])


def settings_of(cli: train.LitbertCLI) -> dict:
    """The config's hyper-parameters as train.py resolves them on this machine: the `Trainer` runs with the same."""
    opt, data = cli.model.optimization, cli.datamodule
    return {"num_labels": data.num_labels, "label_names": data.label_names, "max_length": data.max_length,
            "batch_size": data.batch_size, "eval_batch_size": data.eval_batch_size,
            "learning_rate": opt.learning_rate, "weight_decay": opt.weight_decay, "betas": tuple(opt.betas),
            "eps": opt.eps, "warmup": opt.warmup, "schedule": opt.schedule, "epochs": cli.config.trainer.max_epochs,
            "max_grad_norm": float(cli.config.trainer.gradient_clip_val or 0.0),
            "precision": str(cli.config.trainer.precision), "threshold": cli.model.threshold,
            "classifier_dropout": cli.model.head.dropout.p, "group_by_length": data.group_by_length,
            **trainer_equivalents(cli)}


def subset_of(full: int, args: argparse.Namespace) -> np.ndarray | None:
    if args.max_train_examples is None or full <= args.max_train_examples:
        return None
    return np.sort(np.random.default_rng(1234).permutation(full)[: args.max_train_examples])


def litbert_run(seed: int, args: argparse.Namespace, grouped: bool = False) -> tuple[float, int, dict]:
    """(training seconds, training examples, dev metrics) of the shipped config (`grouped`: with length-grouped
    batches)."""
    with tempfile.TemporaryDirectory() as root:
        cli = litbert_cli(seed, root, args, *(["--data.group_by_length", "true"] if grouped else []))
        data = cli.datamodule
        data.setup("fit")
        subset = subset_of(len(data.datasets["train"]), args)
        if subset is not None:
            data.datasets["train"] = data.datasets["train"].select(subset)
        seconds, metrics, _ = fit_and_evaluate(cli, root)
    return seconds, len(data.datasets["train"]), {name: float(metrics[f"val/{name}"]) for name in METRICS}


def scores(logits: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, float]:
    """Micro and macro F1 and exact match of the labels whose probability exceeds `threshold`."""
    predicted = (1 / (1 + np.exp(-logits)) > threshold).astype(int)
    labels = labels.astype(int)
    return {"f1_micro": float(f1_score(labels, predicted, average="micro")),
            "f1_macro": float(f1_score(labels, predicted, average="macro", zero_division=0)),
            "exact_match": float(accuracy_score(labels, predicted))}


def transformers_run(seed: int, args: argparse.Namespace) -> tuple[float, int, dict]:
    """(training seconds, training examples, dev metrics) of the `Trainer` at the config's settings, on the ids
    litbert tokenized."""
    with tempfile.TemporaryDirectory() as root:
        cli = litbert_cli(seed, root, args)
    settings, data = settings_of(cli), cli.datamodule
    data.setup("fit")
    subset = subset_of(len(data.datasets["train"]), args)
    float_targets = datasets.List(datasets.Value("float32"))  # BCEWithLogitsLoss takes float targets

    def view(split: str, rows: np.ndarray | None = None) -> datasets.Dataset:
        dataset = data.datasets[split] if rows is None else data.datasets[split].select(rows)
        columns = [c for c in ("input_ids", "token_type_ids", "labels") if c in dataset.column_names]
        return dataset.select_columns(columns).cast_column("labels", float_targets)

    train_set, dev = view("train", subset), view("validation")
    tokenizer = data.tokenizer
    del cli
    gc.collect()
    transformers.set_seed(seed)
    names = settings["label_names"]
    model = BertForSequenceClassification.from_pretrained(
        MINILM, num_labels=settings["num_labels"], problem_type="multi_label_classification",
        id2label=dict(enumerate(names)), label2id={name: i for i, name in enumerate(names)},
        attn_implementation="sdpa", dtype=torch.float32, classifier_dropout=settings["classifier_dropout"],
        **settings["model"])
    with tempfile.TemporaryDirectory() as output:
        trainer = Trainer(model=model, args=trainer_arguments(settings, "transformers", seed, output),
                          train_dataset=train_set, data_collator=DataCollatorWithPadding(tokenizer))
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        prediction = trainer.predict(dev)
    return seconds, len(train_set), scores(prediction.predictions, prediction.label_ids, settings["threshold"])


def one_run(args: argparse.Namespace) -> None:
    """The child process of one run: train, evaluate, and write the outcome to the file named."""
    run, seed, result = args.one_run[0], int(args.one_run[1]), Path(args.one_run[2])
    commit, load = litbert_commit(), os.getloadavg()[0]
    if run == "transformers":
        seconds, examples, metrics = transformers_run(seed, args)
    else:
        seconds, examples, metrics = litbert_run(seed, args, grouped=run == "litbert-grouped")
    result.write_text(json.dumps({"seconds": seconds, "examples": examples, "metrics": metrics, "pid": os.getpid(),
                                  "commit": commit, "allocator": malloc(), "load_average": load,
                                  "threads_after": torch.get_num_threads()}))


def run_in_fresh_process(run: str, seed: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "result.json"
        command = [sys.executable, "-m", "bench.multilabel", "--one-run", run, str(seed), str(result), "--epochs",
                   str(args.epochs), "--max-length", str(args.max_length)]
        if args.max_train_examples is not None:
            command += ["--max-train-examples", str(args.max_train_examples)]
        if args.threads:
            command += ["--threads", str(args.threads)]
        done = subprocess.run(command, cwd=REPO, check=False)
        if done.returncode != 0:
            raise SystemExit(f"seed {seed} {run}: its process ({' '.join(command)}) exited with {done.returncode}; "
                             f"the runs before it are kept in {args.json}")
        return json.loads(result.read_text())


def rows_of(records: list[dict]) -> list[list[str]]:
    """One row per run: each metric's mean ± sd over the seeds, the median training time."""
    rows, rates = [], {}
    for run in RUNS:
        mine = [r for r in records if r["run"] == run]
        if not mine:
            continue
        rates[run] = statistics.median(r["examples"] * r["epochs"] / r["seconds"] for r in mine)
        rows.append([run, " ".join(str(r["seed"]) for r in mine), f"{mine[0]['examples']:,} x {mine[0]['epochs']}",
                     *(mean_sd([r["metrics"][name] for r in mine]) for name in METRICS),
                     f"{statistics.median(r['seconds'] for r in mine):.0f}", f"{rates[run]:.1f}"])
    for row in rows:
        row.append(f"{rates['litbert'] / rates[row[0]]:.2f}x" if "litbert" in rates else "")
    return rows


def report(records: list[dict], write: Path | None, source: Path) -> None:
    rows = rows_of(records)
    print_table(HEADERS, rows)
    if write is None:
        return
    first = records[0]
    loads = [r["load_average"] for r in records]
    about = (f"{first['device']}, {first['precision']}, dev {first['dev']:,} sentences, max length "
             f"{first['max_length']}; 1-minute load average at the runs' starts "
             f"{min(loads):.1f}-{max(loads):.1f} (`{source.resolve().relative_to(REPO)}`):\n")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_table(HEADERS, rows)
    write_section(write, f"multilabel-{source.stem.removeprefix('multilabel-')}", about + "\n" + buffer.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=["litbert", "transformers"])
    parser.add_argument("--epochs", type=int, default=1, help="training epochs (both libraries)")
    parser.add_argument("--max-length", type=int, default=64, help="longest sequence (both libraries)")
    parser.add_argument("--max-train-examples", type=int, default=None,
                        help="train on a fixed random subset of this many sentences")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads of both libraries (default: torch's choice); on a CPU shared with "
                             "other jobs 1 thread avoids OpenMP's waits on busy cores (a MiniLM step took 0.2 s at "
                             "1 thread and 8 s at 2 on this project's loaded 2-core machine)")
    parser.add_argument("--json", type=Path, default=None,
                        help="the runs' numbers (default bench/results/multilabel-<machine>.json); the runs it holds "
                             "at the same settings are kept and not run again")
    parser.add_argument("--write", type=Path, default=None, help="replace the table in this Markdown file")
    parser.add_argument("--from-json", type=Path, default=None, help="train nothing: print (and --write) a table")
    parser.add_argument("--one-run", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.from_json:
        report(json.loads(args.from_json.read_text()), args.write, args.from_json)
        return
    setup_run(args.threads)
    if args.one_run:
        one_run(args)
        return
    args.json = args.json or results_path(f"multilabel-{machine_slug(run_device())}")
    records = json.loads(args.json.read_text()) if args.json.exists() else []
    with tempfile.TemporaryDirectory() as root:
        cli = litbert_cli(0, root, args)
        settings = settings_of(cli)
        cli.datamodule.setup("validate")
        dev = len(cli.datamodule.datasets["validation"])
    machine = {"device": device_name(run_device()), "precision": settings["precision"]}
    print(f"{machine['device']}; litbert {litbert_commit()}; torch {torch.__version__}, transformers "
          f"{transformers.__version__}; {json.dumps(settings)}", flush=True)
    for index, seed in enumerate(args.seeds):
        order = args.runs[index % len(args.runs):] + args.runs[: index % len(args.runs)]
        for run in order:
            same = {"run": run, "seed": seed, "epochs": args.epochs, "max_length": args.max_length,
                    "max_train_examples": args.max_train_examples, "threads": torch.get_num_threads(), **machine}
            if any(all(r.get(k) == v for k, v in same.items()) for r in records):
                continue
            outcome = run_in_fresh_process(run, seed, args)
            records.append({**same, **outcome, "dev": dev})
            args.json.write_text(json.dumps(records, indent=1) + "\n")
            print(f"seed {seed} {run}: {outcome['seconds']:.0f} s, "
                  + ", ".join(f"{k} {v:.4f}" for k, v in outcome["metrics"].items())
                  + f" (load average {outcome['load_average']:.1f})", flush=True)
    report(records, args.write, args.json)


if __name__ == "__main__":
    main()
