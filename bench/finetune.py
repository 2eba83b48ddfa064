"""SST-2 fine-tuning from MiniLM-L6: litbert against the transformers `Trainer`, epoch time and dev accuracy.

Three ways to train one epoch on the same examples (the same token ids: transformers reads litbert's tokenized
SST-2), same hyperparameters (batch 32, AdamW lr 2e-5, no weight decay, eps 1e-8, linear decay to zero, no
warmup: `TrainingArguments`' defaults with run_glue's documented batch size and learning rate), same precision:

- `litbert`: `GLUEDataModule(group_by_length=True)` (dynamic padding, length-grouped batches) +
  `tasks.classification.SequenceClassification(pretrained=MiniLM)` + a Lightning `Trainer`.
- `transformers-default`: `AutoModelForSequenceClassification` + `Trainer` as the GLUE example runs it by default:
  every sequence padded to max_length=128.
- `transformers-best`: the same with dynamic padding (`DataCollatorWithPadding`) and
  `train_sampling_strategy="group_by_length"`.

Each run then measures accuracy on the 872 dev sentences. The time is the training epoch alone (`fit` /
`train()`), evaluation excluded. Seeds run in turn and the order of the three rotates from seed to seed, so
load from other processes falls on all of them alike. `--max-train-examples` trains on a fixed random subset of
SST-2 train (the same subset for every run) when a full epoch (67,349 sentences) is too long for the machine.

    LITBERT_DATA=../shared/data python bench/finetune.py --max-train-examples 4000 --seeds 0 1 2

The last line is `ratio: <litbert / transformers-best samples/s>`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import datasets
import lightning as L
import numpy as np
import torch
import transformers
from common import MINILM, device_name, print_table, setup_run
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer, TrainingArguments

from data import GLUEDataModule
from tasks.base import Optimization
from tasks.classification import SequenceClassification

BATCH_SIZE = 32
LEARNING_RATE = 2e-5
RUNS = ("litbert", "transformers-default", "transformers-best")


def litbert_run(datamodule: GLUEDataModule, seed: int, precision: str) -> tuple[float, float]:
    """(training seconds, dev accuracy)."""
    L.seed_everything(seed, verbose=False)
    model = SequenceClassification(num_labels=2, pretrained=MINILM, optimization=Optimization(
        learning_rate=LEARNING_RATE, weight_decay=0.0, eps=1e-8, warmup=0, schedule="linear"))
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, precision=precision, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, limit_val_batches=0)
    start = time.perf_counter()
    trainer.fit(model, datamodule=datamodule)
    seconds = time.perf_counter() - start
    metrics = L.Trainer(accelerator="cpu", devices=1, precision=precision, logger=False, enable_progress_bar=False,
                        enable_model_summary=False).validate(model, datamodule=datamodule, verbose=False)[0]
    return seconds, float(metrics["val/accuracy"])


def transformers_run(train: datasets.Dataset, dev: datasets.Dataset, tokenizer, seed: int, precision: str,
                     best: bool) -> tuple[float, float]:
    transformers.set_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(MINILM, num_labels=2, attn_implementation="sdpa",
                                                               dtype=torch.float32)
    if best:
        collator = DataCollatorWithPadding(tokenizer)
    else:  # run_glue's default: pad_to_max_length, every example 128 tokens long
        collator = DataCollatorWithPadding(tokenizer, padding="max_length", max_length=128)
    with tempfile.TemporaryDirectory() as output:
        arguments = TrainingArguments(
            output_dir=output, per_device_train_batch_size=BATCH_SIZE, per_device_eval_batch_size=BATCH_SIZE,
            learning_rate=LEARNING_RATE, num_train_epochs=1, seed=seed, bf16=precision == "bf16-mixed",
            use_cpu=True, report_to="none", save_strategy="no", eval_strategy="no", logging_strategy="no",
            disable_tqdm=True, train_sampling_strategy="group_by_length" if best else "random")
        trainer = Trainer(model=model, args=arguments, train_dataset=train, eval_dataset=dev,
                          data_collator=collator, compute_metrics=accuracy)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        return seconds, float(trainer.evaluate()["eval_accuracy"])


def accuracy(prediction: transformers.EvalPrediction) -> dict[str, float]:
    return {"accuracy": float((np.argmax(prediction.predictions, axis=-1) == prediction.label_ids).mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-train-examples", type=int, default=None,
                        help="train on a fixed random subset of this many SST-2 sentences (default: all)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--precision", choices=("32-true", "bf16-mixed"), default="bf16-mixed")
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS))
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    root = setup_run(args.threads)

    datamodule = GLUEDataModule("sst2", MINILM, data_root=root, max_length=128, batch_size=BATCH_SIZE,
                                group_by_length=True)
    datamodule.setup("fit")
    train = datamodule.datasets["train"]
    if args.max_train_examples is not None and args.max_train_examples < len(train):
        subset = np.random.default_rng(1234).permutation(len(train))[: args.max_train_examples]
        train = train.select(np.sort(subset))
        datamodule.datasets["train"] = train  # setup() keeps a split it already holds
    columns = [c for c in ("input_ids", "token_type_ids", "labels") if c in train.column_names]
    hf_train = train.select_columns(columns)
    hf_dev = datamodule.datasets["validation"].select_columns(columns)
    tokens = sum(len(ids) for ids in train["input_ids"])
    print(f"device: {device_name(torch.device('cpu'))}; torch {torch.__version__}, "
          f"transformers {transformers.__version__}, lightning {L.__version__}; precision {args.precision}")
    print(f"SST-2 train: {len(train):,} sentences, {tokens:,} tokens (of 67,349 sentences); dev: {len(hf_dev)}")

    results: dict[str, list[tuple[float, float]]] = {run: [] for run in args.runs}
    for index, seed in enumerate(args.seeds):
        order = args.runs[index % len(args.runs):] + args.runs[: index % len(args.runs)]
        for run in order:
            if run == "litbert":
                seconds, acc = litbert_run(datamodule, seed, args.precision)
            else:
                seconds, acc = transformers_run(hf_train, hf_dev, datamodule.tokenizer, seed, args.precision,
                                                best=run == "transformers-best")
            results[run].append((seconds, acc))
            print(f"seed {seed} {run}: {seconds:.1f} s, {len(train) / seconds:.1f} samples/s, dev accuracy {acc:.4f}",
                  flush=True)

    rows, rates = [], {}
    for run, values in results.items():
        seconds = statistics.median(s for s, _ in values)
        rates[run] = len(train) / seconds
        accuracies = [a for _, a in values]
        spread = f" ± {statistics.stdev(accuracies):.4f}" if len(accuracies) > 1 else ""
        rows.append([run, len(values), f"{seconds:.1f}", f"{rates[run]:.1f}", f"{tokens / seconds:,.0f}",
                     f"{statistics.mean(accuracies):.4f}{spread}", " ".join(f"{a:.4f}" for a in accuracies)])
    for run in rates:
        rows[list(rates).index(run)].append(f"{rates['litbert'] / rates[run]:.2f}x" if "litbert" in rates else "")
    print()
    print_table(["run", "seeds", "epoch s (median)", "samples/s", "real tokens/s", "dev accuracy (mean ± sd)",
                 "per seed", "litbert speed-up"], rows)
    if "litbert" in rates and "transformers-best" in rates:
        print(f"ratio: {rates['litbert'] / rates['transformers-best']:.2f}")


if __name__ == "__main__":
    main()
