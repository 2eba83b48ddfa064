"""Packing with and without attention across documents: the README job with `data.document_mask` off and on.

FULL-SENTENCES packing joins documents into 128-token blocks; by default a token attends to the whole block, other
reviews included. `--data.document_mask true` keeps attention inside each review (a block-diagonal mask). Each
variant is the README job (`configs/quickstart.yaml`) through train.py, as a user runs it, with the README job's
trained tokenizer (so no run trains one), one run at a time, the variants alternating seed by seed. Reported: the
held-out masked-token accuracy and loss at the end (300 IMDB test reviews, fixed 15% masks, packed the same way as
the run trains: whole blocks without the mask, documents kept apart with it), and the training throughput the run
logs (`train/tokens_per_sec`, median over the logged steps; start-up and validation excluded).

    LITBERT_DATA=../shared/data python train.py --config configs/quickstart.yaml     # the tokenizer, once
    LITBERT_DATA=../shared/data python -m bench.packing --seeds 0 --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from bench.common import REPO, device_name, logged, mean_sd, results_path, train_py, write_section

SECTION = "packing"
VARIANTS = {"plain packing": "false", "document_mask": "true"}


def pretrain(document_mask: str, seed: int, options: argparse.Namespace, root: Path) -> dict:
    args = ["--config", str(REPO / "configs" / "quickstart.yaml"), "--seed_everything", str(seed),
            "--data.tokenizer", str(options.tokenizer), "--data.train_tokenizer", "null",
            "--data.document_mask", document_mask, "--export", "false",
            "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(root)]
    if options.steps is not None:
        args += ["--trainer.max_steps", str(options.steps), "--trainer.val_check_interval", str(options.steps)]
    seconds = train_py(args, root)
    rates = [rate for _, rate in logged(root, "train/tokens_per_sec")]
    metrics = json.loads((root / "metrics.json").read_text())
    return {"seconds": seconds, "tokens_per_sec": statistics.median(rates), **metrics}


def table(results: dict) -> str:
    options = results["options"]
    rows = []
    base = statistics.mean(run["tokens_per_sec"] for run in results["runs"]["plain packing"])
    for name, runs in results["runs"].items():
        rate = statistics.mean(run["tokens_per_sec"] for run in runs)
        rows.append(f"| {name} | {mean_sd([r['val/accuracy'] for r in runs])} | "
                    f"{mean_sd([r['val/loss'] for r in runs])} | {rate:,.0f} ({rate / base:.2f}x) | "
                    f"{statistics.mean(r['seconds'] for r in runs):.0f} |")
    steps = f" --steps {options['steps']}" if options["steps"] is not None else ""
    return "\n".join([
        f"The README job (`configs/quickstart.yaml`{', ' + str(options['steps']) + ' steps' if steps else ''}), "
        f"seeds {', '.join(map(str, options['seeds']))}, on {results['device']}:",
        "",
        "| packing | held-out masked-token accuracy | held-out loss | training tokens/s | process seconds |",
        "|---|---|---|---|---|",
        *rows,
        "",
        f"    LITBERT_DATA=../shared/data python -m bench.packing --seeds {' '.join(map(str, options['seeds']))}"
        f"{steps} --write BENCHMARKS.md",
    ])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, help="pretraining steps (default: the config's)")
    parser.add_argument("--tokenizer", type=Path, default=REPO / "runs" / "quickstart" / "tokenizer",
                        help="the README job's trained tokenizer")
    parser.add_argument("--json", type=Path, default=results_path("packing"), help="write the results here")
    parser.add_argument("--from-json", type=Path, help="rewrite the table from recorded results")
    parser.add_argument("--write", type=Path, help="BENCHMARKS.md: replace the section between its markers")
    options = parser.parse_args(argv)
    if options.from_json is not None:
        results = json.loads(options.from_json.read_text())
    else:
        if not (options.tokenizer / "tokenizer.json").exists():
            raise SystemExit(f"No tokenizer at {options.tokenizer}: run the README job first (python train.py "
                             f"--config configs/quickstart.yaml).")
        results = {"device": device_name(torch.device("cpu")),
                   "options": {"seeds": options.seeds, "steps": options.steps},
                   "runs": {name: [] for name in VARIANTS}}
        with tempfile.TemporaryDirectory() as folder:
            for seed in options.seeds:
                order = list(VARIANTS) if seed % 2 == 0 else list(reversed(VARIANTS))
                for name in order:
                    run = pretrain(VARIANTS[name], seed, options, Path(folder) / f"{seed}-{VARIANTS[name]}")
                    results["runs"][name].append({"seed": seed, **run})
                    print(f"seed {seed} {name}: {run}", flush=True)
        options.json.write_text(json.dumps(results, indent=1) + "\n")
    text = table(results)
    print(text)
    if options.write:
        write_section(options.write, SECTION, text)
    return results


if __name__ == "__main__":
    main()
