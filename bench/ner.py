"""CoNLL-2003 NER from MiniLM-L6: litbert at its shipped config against transformers' run_ner recipe at the same
hyper-parameters, dev and test entity F1 and training time, seed by seed.

- `litbert`: `train.py`'s own objects (`train.make_cli` on `configs/ner/conll2003.yaml`, so its sampler, padding,
  windows and precision are the shipped defaults), seeded with `--seed_everything` (which draws the batch order too).
  `--litbert-args` adds train.py overrides; a run with them is its own row (`litbert --trainer.precision 32-true`).
- `litbert-fp32`: the same in float32 (`--trainer.precision 32-true`), the `Trainer`'s default precision, where
  the shipped one is a mixed one (an AVX-512-BF16 or AMX CPU, a GPU): the two libraries at equal precision.
- `transformers`: the recipe of transformers' `examples/pytorch/token-classification/run_ner.py` at its defaults:
  the words of the same CoNLL files tokenized by `AutoTokenizer` (`is_split_into_words`, truncated at the tokenizer's
  512, which no CoNLL sentence reaches), the label on each word's first sub-token (`label_all_tokens` as the
  config's `label_all_subtokens`), `AutoModelForTokenClassification`, `DataCollatorForTokenClassification`, random
  batches, the `Trainer` in float32 (its default), scored by seqeval in its default mode on the labelled tokens.
- `transformers-bf16`: the same in bf16 mixed precision (`bf16=True`), litbert's precision where the machine
  multiplies bf16 natively: the two libraries at equal precision.

The `Trainer` gets the shipped config's hyper-parameters (learning rate, batch size, epochs, warmup, schedule,
weight decay, AdamW betas and epsilon, gradient clipping, classifier dropout); `--epochs` sets both sides' epochs.
Both train without evaluating and are then evaluated once on dev and test with the final weights. Each
transformers run is also scored by litbert's `EntityF1` (conlleval's counting) on the same tags: the `conlleval`
column, which equals seqeval's where the two metrics agree. Each run trains in a fresh Python process; the runs
alternate (the order rotating from seed to seed). `--max-train-examples` trains both on the same fixed random
subset of the training sentences.

    LITBERT_DATA=../shared/data python -m bench.ner --epochs 1 --seeds 0 1 2

Runs go to `bench/results/ner-<machine>.json` (`--json` elsewhere), and a sweep resumes from what that file holds.
"""

from __future__ import annotations

import argparse
import gc
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
from seqeval.metrics import f1_score, precision_score, recall_score
from transformers import AutoModelForTokenClassification, AutoTokenizer, DataCollatorForTokenClassification, Trainer

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
)
from bench.glue import litbert_commit, refuse_other_machines, run_device
from data.sources import read_conll
from tasks.metrics import EntityF1

CONFIG = "configs/ner/conll2003.yaml"
RUNS = ("litbert", "litbert-fp32", "transformers", "transformers-bf16")
HEADERS = ["run", "precision", "examples x epochs", "dev F1 (mean ± sd)", "test F1 (mean ± sd)", "dev F1 by seed",
           "conlleval dev F1", "train s (median)", "litbert speed-up"]


def litbert_cli(seed: int, root: str, extra: list[str]) -> train.LitbertCLI:
    return train.make_cli([
        "--config", CONFIG, "--model.pretrained", MINILM, "--seed_everything", str(seed),
        "--trainer.default_root_dir", root, "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0", "--export", "false", *extra])


def shipped_settings(extra: list[str]) -> tuple[dict, train.LitbertCLI]:
    """The hyper-parameters of the shipped config with the litbert runs' overrides, as train.py resolves them on
    this machine; the transformers runs train with the same."""
    with tempfile.TemporaryDirectory() as root:
        cli = litbert_cli(0, root, extra)
    config, opt, data = cli.config, cli.model.optimization, cli.datamodule
    settings = {
        "batch_size": data.batch_size, "eval_batch_size": data.eval_batch_size, "max_length": data.max_length,
        "group_by_length": data.group_by_length, "label_all_subtokens": data.label_all_subtokens,
        "learning_rate": opt.learning_rate, "weight_decay": opt.weight_decay, "betas": tuple(opt.betas),
        "eps": opt.eps, "warmup": opt.warmup, "schedule": opt.schedule, "epochs": config.trainer.max_epochs,
        "max_grad_norm": float(config.trainer.gradient_clip_val or 0.0), "precision": str(config.trainer.precision),
        "classifier_dropout": cli.model.head.dropout.p, **trainer_equivalents(cli),
    }
    return settings, cli


def subset_sentences(count: int, limit: int | None) -> list[int] | None:
    """A fixed random subset of `limit` of the `count` training sentences (sorted), the same for every run; None for
    all of them."""
    if limit is None or limit >= count:
        return None
    return sorted(np.random.default_rng(1234).permutation(count)[:limit].tolist())


def litbert_run(seed: int, sentences: list[int] | None, extra: list[str]) -> tuple[float, dict]:
    """(training seconds, dev and test metrics) of the shipped config."""
    with tempfile.TemporaryDirectory() as root:
        cli = litbert_cli(seed, root, extra)
        if sentences is not None:
            data = cli.datamodule
            data.setup("fit")
            keep = set(sentences)  # every window of a kept sentence
            rows = [i for i, s in enumerate(data.datasets["train"]["sentence"]) if s in keep]
            data.datasets["train"] = data.datasets["train"].select(rows)
        seconds, dev, test = fit_and_evaluate(cli, root, test=True)
    return seconds, {f"{split}_{name}": float(metrics[f"{prefix}/{name}"]) for split, prefix, metrics in
                     (("dev", "val", dev), ("test", "test", test)) for name in ("f1", "precision", "recall")}


def conll_split(split: str) -> tuple[list[list[str]], list[list[str]]]:
    """(words, tags) of each sentence of one split of the local CoNLL-2003 copy, read as litbert reads it."""
    path = Path(os.environ["LITBERT_DATA"]) / "conll2003" / {"train": "train.txt", "validation": "valid.txt",
                                                            "test": "test.txt"}[split]
    sentences = read_conll(path)
    return [s.words for s in sentences], [s.tags for s in sentences]


def run_ner_dataset(tokenizer, words: list[list[str]], tags: list[list[str]], label_names: list[str],
                    label_all_tokens: bool) -> datasets.Dataset:
    """run_ner's `tokenize_and_align_labels`: the label on each word's first sub-token, the others -100 (or, with
    `label_all_tokens`, the word's label with B- turned into I-)."""
    index = {tag: i for i, tag in enumerate(label_names)}
    b_to_i = [index.get("I-" + tag[2:], i) if tag.startswith("B-") else i for i, tag in enumerate(label_names)]
    encoded = tokenizer(words, truncation=True, is_split_into_words=True)
    labels = []
    for row, sentence_tags in enumerate(tags):
        previous, ids = None, []
        for word in encoded.word_ids(batch_index=row):
            if word is None:
                ids.append(-100)
            elif word != previous:
                ids.append(index[sentence_tags[word]])
            else:
                ids.append(b_to_i[index[sentence_tags[word]]] if label_all_tokens else -100)
            previous = word
        labels.append(ids)
    return datasets.Dataset.from_dict({**{k: list(v) for k, v in encoded.items()}, "labels": labels})


def transformers_run(settings: dict, label_names: list[str], seed: int, sentences: list[int] | None,
                     run: str) -> tuple[float, dict]:
    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    words, tags = conll_split("train")
    if sentences is not None:
        words, tags = [words[i] for i in sentences], [tags[i] for i in sentences]
    train_set = run_ner_dataset(tokenizer, words, tags, label_names, settings["label_all_subtokens"])
    transformers.set_seed(seed)
    model = AutoModelForTokenClassification.from_pretrained(
        MINILM, num_labels=len(label_names), id2label=dict(enumerate(label_names)), attn_implementation="sdpa",
        dtype=torch.float32, classifier_dropout=settings["classifier_dropout"], **settings["model"])
    with tempfile.TemporaryDirectory() as output:
        arguments = transformers.TrainingArguments(
            output_dir=output, per_device_train_batch_size=settings["batch_size"],
            per_device_eval_batch_size=settings["eval_batch_size"], learning_rate=settings["learning_rate"],
            weight_decay=settings["weight_decay"], adam_beta1=settings["betas"][0], adam_beta2=settings["betas"][1],
            adam_epsilon=settings["eps"], max_grad_norm=settings["max_grad_norm"], warmup_steps=settings["warmup"],
            lr_scheduler_type=settings["lr_scheduler_type"], lr_scheduler_kwargs=settings["lr_scheduler_kwargs"],
            num_train_epochs=settings["epochs"], seed=seed,
            bf16=run == "transformers-bf16", use_cpu=run_device().type == "cpu", report_to="none",
            save_strategy="no", eval_strategy="no", logging_strategy="no", disable_tqdm=True)
        trainer = Trainer(model=model, args=arguments, train_dataset=train_set,
                          data_collator=DataCollatorForTokenClassification(tokenizer))
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        metrics = {}
        for split, name in (("validation", "dev"), ("test", "test")):
            words, tags = conll_split(split)
            prediction = trainer.predict(run_ner_dataset(tokenizer, words, tags, label_names, False))
            metrics |= scores(prediction.predictions.argmax(-1), prediction.label_ids, label_names, name)
    return seconds, metrics


def scores(predictions: np.ndarray, labels: np.ndarray, label_names: list[str], split: str) -> dict[str, float]:
    """run_ner's `compute_metrics` (seqeval, default mode, over the labelled tokens), and litbert's `EntityF1` of the
    same tags (`<split>_conlleval_f1`)."""
    predicted = [[label_names[p] for p, gold in zip(row, golds, strict=True) if gold != -100]
                 for row, golds in zip(predictions, labels, strict=True)]
    gold = [[label_names[g] for g in golds if g != -100] for golds in labels]
    conlleval = EntityF1(label_names)
    for tags, reference in zip(predicted, gold, strict=True):
        conlleval.update_tags(tags, reference)
    return {f"{split}_f1": float(f1_score(gold, predicted)),
            f"{split}_precision": float(precision_score(gold, predicted)),
            f"{split}_recall": float(recall_score(gold, predicted)),
            f"{split}_conlleval_f1": float(conlleval.compute()["f1"])}


def run_precision(run: str, settings: dict) -> str:
    """The precision `run` trains in: the shipped one for litbert, the `Trainer`'s float32 default for
    transformers; `-fp32` and `-bf16` say otherwise."""
    return {"litbert-fp32": "32-true", "transformers": "32-true", "transformers-bf16": "bf16-mixed"}.get(
        run, settings["precision"])


def variant(run: str, litbert_args: list[str]) -> str:
    """The row a run belongs to: litbert runs with overrides are their own."""
    return " ".join([run, *litbert_args]) if run.startswith("litbert") and litbert_args else run


def one_run(args: argparse.Namespace, extra: list[str]) -> None:
    """The child of `run_in_fresh_process`: train and evaluate one run, and write its outcome to the file named."""
    run, seed, result = args.one_run[0], int(args.one_run[1]), Path(args.one_run[2])
    commit = litbert_commit()
    settings, cli = shipped_settings(extra)
    if args.epochs:
        settings["epochs"] = args.epochs
    label_names = list(cli.datamodule.label_names)
    sentences = subset_sentences(len(conll_split("train")[0]), args.max_train_examples)
    del cli
    gc.collect()
    if run.startswith("litbert"):
        fp32 = ["--trainer.precision", "32-true"] if run == "litbert-fp32" else []
        seconds, metrics = litbert_run(seed, sentences, extra + fp32)
    else:
        seconds, metrics = transformers_run(settings, label_names, seed, sentences, run)
    result.write_text(json.dumps({"seconds": seconds, "metrics": metrics, "pid": os.getpid(), "commit": commit,
                                  "allocator": malloc()}))


def run_in_fresh_process(run: str, seed: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "result.json"
        command = [sys.executable, "-m", "bench.ner", "--one-run", run, str(seed), str(result)]
        if args.max_train_examples is not None:
            command += ["--max-train-examples", str(args.max_train_examples)]
        if args.epochs:
            command += ["--epochs", str(args.epochs)]
        if args.threads:
            command += ["--threads", str(args.threads)]
        command += ["--litbert-args", *args.litbert_args] if args.litbert_args else []
        done = subprocess.run(command, cwd=REPO, check=False)
        if done.returncode != 0:
            raise SystemExit(f"seed {seed} {run}: its process ({' '.join(command)}) exited with {done.returncode}; "
                             f"the runs before it are kept in {args.json}")
        return json.loads(result.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=["litbert", "transformers"])
    parser.add_argument("--max-train-examples", type=int, default=None,
                        help="train both on a fixed random subset of this many training sentences")
    parser.add_argument("--epochs", type=int, default=None, help="override the config's epochs (both libraries)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--litbert-args", nargs=argparse.REMAINDER, default=[],
                        help="more train.py overrides for the litbert runs (last on the command line)")
    parser.add_argument("--json", type=Path, default=None,
                        help="write every run's numbers here, after each run (default: bench/results/"
                             "ner-<machine>.json); runs it holds already (same run, overrides, seed, subset and "
                             "epochs) are kept, not run again")
    parser.add_argument("--one-run", nargs=3, default=None, metavar=("RUN", "SEED", "RESULT"), help=argparse.SUPPRESS)
    parser.add_argument("--from-json", type=Path, default=None, help="train nothing: table the runs of a --json file")
    args = parser.parse_args()
    if args.from_json:
        report(json.loads(args.from_json.read_text()))
        return
    setup_run(args.threads)
    extra = list(args.litbert_args) + (["--trainer.max_epochs", str(args.epochs)] if args.epochs else [])
    if args.one_run:
        one_run(args, extra)
        return

    args.json = args.json or results_path(f"ner-{machine_slug(run_device())}")
    records = json.loads(args.json.read_text()) if args.json.exists() else []
    settings, _ = shipped_settings(extra)
    if args.epochs:
        settings["epochs"] = args.epochs
    count = len(conll_split("train")[0])
    examples = len(subset_sentences(count, args.max_train_examples) or range(count))
    device = device_name(run_device())
    print(f"device: {device}; litbert {litbert_commit()}; torch {torch.__version__}, transformers "
          f"{transformers.__version__}; {examples:,} training sentences; {json.dumps(settings)}", flush=True)
    machine = {"device": device, "precision": settings["precision"]}
    refuse_other_machines(records, machine, args.json)
    for index, seed in enumerate(args.seeds):
        order = args.runs[index % len(args.runs):] + args.runs[: index % len(args.runs)]
        for run in order:
            name = variant(run, args.litbert_args)
            if any((r["run"], r["seed"], r["examples"], r["epochs"]) == (name, seed, examples, settings["epochs"])
                   for r in records):
                print(f"seed {seed} {name}: in {args.json}, kept", flush=True)
                continue
            outcome = run_in_fresh_process(run, seed, args)
            records.append({"run": name, "seed": seed, "examples": examples, "epochs": settings["epochs"],
                            "seconds": outcome["seconds"], "metrics": outcome["metrics"], "settings": settings,
                            "run_precision": run_precision(run, settings),
                            "allocator": outcome["allocator"], **machine,
                            **({"litbert_commit": outcome["commit"]} if run.startswith("litbert") else {}),
                            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}})
            shown = ", ".join(f"{k} {v:.4f}" for k, v in outcome["metrics"].items())
            print(f"seed {seed} {name}: {outcome['seconds']:.1f} s, {shown} (process {outcome['pid']})", flush=True)
            args.json.write_text(json.dumps(records, indent=1) + "\n")
    print()
    report(records)


def report(records: list[dict]) -> None:
    """One row per run and training set: F1 over the seeds (sorted by seed), the median training time."""
    rows, medians = [], {}
    for key in dict.fromkeys((r["run"], r["examples"], r["epochs"]) for r in records):
        mine = sorted((r for r in records if (r["run"], r["examples"], r["epochs"]) == key), key=lambda r: r["seed"])
        medians[key] = statistics.median(r["seconds"] for r in mine)
        dev, test = ([r["metrics"][f"{split}_f1"] for r in mine] for split in ("dev", "test"))
        conlleval = [r["metrics"].get("dev_conlleval_f1", r["metrics"]["dev_f1"]) for r in mine]
        rows.append([key[0], mine[0].get("run_precision", ""), f"{key[1]:,} x {key[2]}", mean_sd(dev), mean_sd(test),
                     " ".join(f"{r['seed']}:{r['metrics']['dev_f1']:.3f}" for r in mine), mean_sd(conlleval),
                     f"{medians[key]:.0f}", ""])
    for row, key in zip(rows, medians, strict=True):
        base = medians.get(("litbert", key[1], key[2]))
        row[-1] = f"{medians[key] / base:.2f}x" if base else ""
    print_table(HEADERS, rows)


if __name__ == "__main__":
    main()
