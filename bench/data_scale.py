"""MLM data at two corpus sizes: memory held and tokenization throughput.

The corpus is IMDB's 50,000 unlabelled reviews written as a text file (a review per line), and the same file
copied 10 times (10 files, 500,000 reviews: a corpus 10x the size). For each, a fresh process
1. builds `MLMDataModule` (MiniLM's WordPiece tokenizer, FULL-SENTENCES blocks of 128) from an empty cache and
   draws 20 training batches (`--what data`), or
2. runs 20 training steps of the README job's model through train.py on the cached data (`--what train`),
while this script samples the process's memory every 20 ms from /proc: the peak of its anonymous resident memory
(heap and tensors: what the process holds) and its peak resident set (VmHWM, which also counts pages of the
memory-mapped cache files the process has touched; the kernel drops those under memory pressure). Tokenization
throughput is documents per second of the first build, for `num_proc` 1 and 2, with the tokenizer's own threads
on (its default) and off (`TOKENIZERS_PARALLELISM=false`), one run at a time, alternating.

    LITBERT_DATA=../shared/data python -m bench.data_scale --write BENCHMARKS.md

The measurements go to `bench/results/data-scale.json`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.common import MINILM, REPO, device_name, results_path, setup_run, write_section

SECTION = "data-scale"
COPIES = 10


def write_corpus(root: str, folder: Path) -> list[Path]:
    """IMDB's unlabelled reviews as a text file, a review per line, and its copies: the 10x corpus."""
    csv.field_size_limit(sys.maxsize)
    with open(Path(root) / "imdb" / "unsup.csv", newline="", encoding="utf-8") as handle:
        reviews = [" ".join(row["text"].split()) for row in csv.DictReader(handle)]
    first = folder / "imdb-0.txt"
    first.write_text("\n".join(reviews) + "\n", encoding="utf-8")
    copies = [first]
    for i in range(1, COPIES):
        copies.append(folder / f"imdb-{i}.txt")
        shutil.copyfile(first, copies[-1])
    return copies


def child_data(args: argparse.Namespace) -> dict[str, float]:
    """In the measured process: build the datamodule from an empty cache and draw 20 training batches."""
    from data import MLMDataModule

    extra = {"num_proc": args.num_proc} if args.num_proc != 1 else {}
    start = time.perf_counter()
    dm = MLMDataModule(MINILM, train_files=[str(f) for f in args.files], max_length=128, batch_size=32,
                       cache_dir=str(args.cache), **extra)
    dm.setup("fit")
    built = time.perf_counter() - start
    for i, _ in enumerate(dm.train_dataloader()):
        if i == 19:
            break
    return {"seconds": built, **dm.stats["train"]}


def measure(command: list[str], env: dict[str, str] | None = None) -> tuple[dict[str, float], float, float]:
    """(the child's printed JSON, peak anonymous RSS MiB, peak RSS MiB) of one process, sampled every 20 ms."""
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, **(env or {})})
    status = Path(f"/proc/{process.pid}/status")
    anon = hwm = 0.0
    while process.poll() is None:
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            break
        anon = max(anon, float(fields.get("RssAnon", "0 kB").split()[0]) / 1024)
        hwm = max(hwm, float(fields.get("VmHWM", "0 kB").split()[0]) / 1024)
        time.sleep(0.02)
    out, _ = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed with exit code {process.returncode}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return (json.loads(lines[-1]) if lines else {}), anon, hwm


def data_command(files: list[Path], cache: Path, num_proc: int) -> list[str]:
    return [sys.executable, "-m", "bench.data_scale", "--child", "--cache", str(cache), "--num-proc", str(num_proc),
            "--files", *map(str, files)]


def train_command(files: list[Path], cache: Path, root: Path) -> list[str]:
    return [sys.executable, str(REPO / "train.py"), "--config", str(REPO / "configs" / "quickstart.yaml"),
            "--data.dataset", "null", "--data.train_split", "train", "--data.train_files",
            json.dumps([str(f) for f in files]), "--data.train_tokenizer", "null", "--data.tokenizer", MINILM,
            "--data.cache_dir", str(cache), "--trainer.max_steps", "20", "--trainer.val_check_interval", "null",
            "--trainer.logger", "false", "--trainer.enable_progress_bar", "false", "--export", "false",
            "--trainer.enable_checkpointing", "false", "--trainer.default_root_dir", str(root)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="BENCHMARKS.md: replace the section between its markers")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--files", type=Path, nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--num-proc", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        setup_run()
        print(json.dumps(child_data(args)))
        return
    root = setup_run()
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        files = write_corpus(root, folder)
        rows, rates = [], {}
        for size, corpus in (("1x", files[:1]), (f"{COPIES}x", files)):
            cache = folder / f"cache-{size}"
            built, anon, hwm = measure(data_command(corpus, cache, 1))
            rows.append((size, "datamodule: build from an empty cache, 20 batches", built, anon, hwm))
            print(rows[-1], flush=True)
            _, anon, hwm = measure(train_command(corpus, cache, folder / f"run-{size}"))
            rows.append((size, "train.py: 20 training steps on the cached data", built, anon, hwm))
            print(rows[-1], flush=True)
        for repeat in range(2):  # tokenization throughput, the settings alternating, each from an empty cache
            for threads in ("true", "false"):
                for num_proc in (1, 2):
                    cache = folder / f"rate-{num_proc}-{threads}-{repeat}"
                    built, _, _ = measure(data_command(files[:1], cache, num_proc),
                                          {"TOKENIZERS_PARALLELISM": threads})
                    rates.setdefault((num_proc, threads), []).append(built["documents"] / built["seconds"])
                    print(f"num_proc {num_proc}, TOKENIZERS_PARALLELISM={threads}: "
                          f"{rates[num_proc, threads][-1]:,.0f} documents/s", flush=True)
    table = ["| corpus | documents | tokens | process | peak anonymous RSS (MiB) | peak RSS (MiB) |",
             "|---|---|---|---|---|---|"]
    for size, what, built, anon, hwm in rows:
        table.append(f"| {size} | {built['documents']:,} | {built['tokens']:,} | {what} | {anon:,.0f} | {hwm:,.0f} |")
    table += ["", "| num_proc | tokenizer threads (`TOKENIZERS_PARALLELISM`) | documents/s, per repeat (1x corpus "
              "from an empty cache: read, tokenize, pack) |", "|---|---|---|"]
    table += [f"| {n} | {'on' if threads == 'true' else 'off'} | {', '.join(f'{r:,.0f}' for r in values)} |"
              for (n, threads), values in sorted(rates.items(), key=lambda item: (item[0][1], item[0][0]))]
    text = "\n".join(table)
    print(text)
    results_path(SECTION).write_text(json.dumps(
        {"device": device_name(torch.device("cpu")),
         "processes": [{"corpus": size, "process": what, **built, "peak_anonymous_mib": anon, "peak_rss_mib": hwm}
                       for size, what, built, anon, hwm in rows],
         "documents_per_second": [{"num_proc": n, "tokenizers_parallelism": threads, "per_repeat": values}
                                  for (n, threads), values in rates.items()]}, indent=1) + "\n")
    if args.write:
        write_section(args.write, SECTION, text + "\n\n    LITBERT_DATA=../shared/data python -m bench.data_scale "
                      "--write BENCHMARKS.md")


if __name__ == "__main__":
    main()
