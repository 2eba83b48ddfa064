"""Pretraining throughput as a user sees it: the README job's configuration through train.py, against
transformers' run_mlm recipe, whole processes on the same machine.

Both sides train the same model on the same corpus (IMDB's 50,000 unlabelled reviews, the local copy), with the
same WordPiece vocabulary (trained once by litbert into a temporary folder), batch (32 x 128 tokens), masking rate
(30%, as the README job), AdamW settings and steps. Precision: by default each side's own, as a user meets it
(litbert at train.py's choice for the machine, bf16-mixed where the CPU multiplies bf16; the `Trainer` at its float32
default); `--precision 32-true` or `bf16-mixed` trains both sides in it (the `Trainer` with `bf16=True`).
- litbert: `python train.py --config configs/quickstart.yaml` with the encoder set to BERT's own block (post-norm,
  learned positions, LayerNorm, GELU, biases: the one transformers' `BertForMaskedLM` has) and no validation,
  checkpoint or export;
- transformers: the run_mlm example's recipe, written out here (no network for the script itself): `datasets`
  reads the CSV, the tokenizer maps it, `group_texts` concatenates and cuts 128-token blocks, `Trainer` trains
  `BertForMaskedLM` (built from a config, no download) with `DataCollatorForLanguageModeling`.
Dropout is 0 on both sides, as in the README job, and neither clips gradients (litbert's default; the `Trainer`
with `max_grad_norm=0`). Start-up (imports, tokenization, model building) is excluded by timing each side at two
step counts and dividing the extra tokens by the extra seconds. Runs alternate sides, one process at a time; each
side runs once beforehand to fill its tokenization cache.

    LITBERT_DATA=../shared/data python -m bench.pretrain --write BENCHMARKS.md

The rates go to `bench/results/pretrain-throughput.json` (`pretrain-throughput-<precision>.json` with `--precision`),
and `--write` replaces the section of the same name.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.common import REPO, device_name, results_path, setup_run, write_section

SECTION = "pretrain-throughput"
BATCH, LENGTH, MASKING, LR, VOCAB = 32, 128, 0.3, 3e-3, 4096
LAYERS, WIDTH, HEADS, FFN = 4, 128, 2, 512
BERT_BLOCK = ["--model.encoder.position", "learned", "--model.encoder.norm_placement", "post",
              "--model.encoder.norm", "layernorm", "--model.encoder.activation", "gelu",
              "--model.encoder.intermediate_size", str(FFN), "--model.encoder.bias", "true"]


def litbert_command(tokenizer: Path, steps: int, root: Path, precision: str | None) -> list[str]:
    return [sys.executable, str(REPO / "train.py"), "--config", str(REPO / "configs" / "quickstart.yaml"),
            *BERT_BLOCK, "--data.tokenizer", str(tokenizer), "--data.train_tokenizer", "null",
            "--data.val_split", "null", "--trainer.max_steps", str(steps), "--trainer.max_time", "null",
            "--trainer.val_check_interval", "null", "--trainer.logger", "false",
            "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false",
            "--export", "false", "--overwrite", "true", "--trainer.default_root_dir", str(root),
            *(["--trainer.precision", precision] if precision else [])]


def transformers_command(tokenizer: Path, steps: int, root: Path, precision: str | None) -> list[str]:
    return [sys.executable, "-m", "bench.pretrain", "--transformers", "--tokenizer", str(tokenizer),
            "--child-steps", str(steps), "--root", str(root), *(["--precision", precision] if precision else [])]


def run_transformers(data_root: str, tokenizer_path: Path, steps: int, root: Path, bf16: bool) -> None:
    """run_mlm's recipe (group_texts, DataCollatorForLanguageModeling, Trainer) at the README job's settings."""
    import datasets
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        PreTrainedTokenizerFast,
        Trainer,
        TrainingArguments,
    )

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(tokenizer_path))
    raw = datasets.load_dataset("csv", data_files={"train": str(Path(data_root) / "imdb" / "unsup.csv")},
                                cache_dir=str(root.parent / "hf-cache"))["train"]
    tokenized = raw.map(lambda batch: tokenizer(batch["text"], return_special_tokens_mask=True), batched=True,
                        remove_columns=raw.column_names)

    def group_texts(examples: dict[str, list[list[int]]]) -> dict[str, list[list[int]]]:
        joined = {key: sum(examples[key], []) for key in examples}
        total = len(joined["input_ids"]) // LENGTH * LENGTH
        return {key: [values[i:i + LENGTH] for i in range(0, total, LENGTH)] for key, values in joined.items()}

    blocks = tokenized.map(group_texts, batched=True)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=WIDTH, num_hidden_layers=LAYERS,
                        num_attention_heads=HEADS, intermediate_size=FFN, max_position_embeddings=512,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForMaskedLM(config)
    arguments = TrainingArguments(
        output_dir=str(root), per_device_train_batch_size=BATCH, max_steps=steps, learning_rate=LR,
        weight_decay=0.01, adam_epsilon=1e-6, warmup_steps=0.06, lr_scheduler_type="linear", max_grad_norm=0.0, seed=0,
        save_strategy="no", report_to=[], logging_steps=25, use_cpu=True, disable_tqdm=True, bf16=bf16)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=MASKING)
    Trainer(model=model, args=arguments, train_dataset=blocks, data_collator=collator).train()


def seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs=2, default=[50, 250], help="the two step counts timed")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--precision", choices=["32-true", "bf16-mixed"], default=None,
                        help="train both sides in this precision (default: each side's own)")
    parser.add_argument("--write", type=Path, help="BENCHMARKS.md: replace the section between its markers")
    parser.add_argument("--transformers", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-steps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    data_root = setup_run()
    if args.transformers:
        run_transformers(data_root, args.tokenizer, args.child_steps, args.root, args.precision == "bf16-mixed")
        return
    from data import MLMDataModule
    from data.tokenizers import TokenizerTraining
    from tasks.run.precision import default_precision

    precision = {"litbert": args.precision or default_precision("cpu")[0], "transformers": args.precision or "32-true"}

    few, many = args.steps
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        tokenizer = folder / "tokenizer"
        MLMDataModule(str(tokenizer), TokenizerTraining("wordpiece", VOCAB), dataset="stanfordnlp/imdb",
                      train_split="unsupervised", data_root=data_root, cache_dir=str(folder / "cache"))
        sides = {"litbert": litbert_command, "transformers": transformers_command}
        for side, command in sides.items():  # fill each side's tokenization cache
            print(f"warm-up {side}: {seconds(command(tokenizer, 2, folder / side, args.precision)):.0f} s", flush=True)
        rates: dict[str, list[float]] = {side: [] for side in sides}
        for repeat in range(args.repeats):
            for side, command in sides.items():
                short = seconds(command(tokenizer, few, folder / side, args.precision))
                long = seconds(command(tokenizer, many, folder / side, args.precision))
                rates[side].append((many - few) * BATCH * LENGTH / (long - short))
                print(f"repeat {repeat} {side}: {few} steps {short:.1f} s, {many} steps {long:.1f} s, "
                      f"{rates[side][-1]:,.0f} tokens/s", flush=True)
    litbert, reference = statistics.median(rates["litbert"]), statistics.median(rates["transformers"])
    table = "\n".join([
        "| side | precision | training tokens/s (median) | per repeat |", "|---|---|---|---|",
        *(f"| {side} | {precision[side]} | {statistics.median(values):,.0f} | "
          f"{', '.join(f'{v:,.0f}' for v in values)} |" for side, values in rates.items()),
        "", f"ratio litbert / transformers: **{litbert / reference:.2f}x**", "",
        f"    LITBERT_DATA=../shared/data python -m bench.pretrain --steps {few} {many} --repeats {args.repeats}"
        f"{' --precision ' + args.precision if args.precision else ''}"
        f"{' --write ' + str(args.write) if args.write else ''}"])
    print(table)
    section = SECTION + (f"-{args.precision}" if args.precision else "")  # each setting its own table and file
    results_path(section).write_text(json.dumps({"device": device_name(torch.device("cpu")), "steps": args.steps,
                                                 "precision": precision, "tokens_per_second": rates}, indent=1) + "\n")
    if args.write:
        write_section(args.write, section, table)


if __name__ == "__main__":
    main()
