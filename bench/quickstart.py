"""The README job measured: what pretraining gives the SST-2 fine-tune that follows it.

Runs `configs/quickstart-sst2.yaml` through train.py, as a user does, from the README job's model
(`runs/quickstart/model`, which must exist: run the README job first) and from a randomly initialised encoder of
the same shape with the same tokenizer, for each seed, one run at a time, and prints (and with `--write`, puts
into BENCHMARKS.md) the SST-2 dev accuracy of both, mean and standard deviation, with the README job's own
held-out masked-token accuracy from its `metrics.json`. Each run's seconds are printed as it ends (not tabled:
accuracy is the point here, and timings are taken one thing at a time elsewhere).

    LITBERT_DATA=../shared/data python train.py --config configs/quickstart.yaml
    LITBERT_DATA=../shared/data python bench/quickstart.py --seeds 0 1 2 --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from common import REPO, train_py, write_section

SECTION = "quickstart-sst2"


def fine_tune(model: Path, seed: int, pretrained: bool, root: Path) -> tuple[float, float]:
    """(SST-2 dev accuracy, seconds) of one quickstart-sst2 run."""
    args = ["--config", str(REPO / "configs" / "quickstart-sst2.yaml"), "--seed_everything", str(seed),
            "--export", "false", "--trainer.logger", "false"]
    if pretrained:
        args += ["--model.pretrained", str(model)]
    else:  # the same encoder settings and tokenizer, new weights
        args += ["--model.pretrained", "null", "--data.tokenizer", str(model)]
        args += [f"--model.encoder.{key}={value if isinstance(value, str) else json.dumps(value)}"
                 for key, value in encoder_settings(model).items()]
    seconds = train_py(args, root)
    return json.loads((root / "metrics.json").read_text())["val/accuracy"], seconds


def encoder_settings(model: Path) -> dict[str, object]:
    """Every encoder setting of the exported model (read back through litbert's loader) but those the data links
    (vocabulary size, padding id) and the scheme settings its position scheme does not read."""
    sys.path.insert(0, str(REPO))
    from encoders import POSITIONS, Encoder

    config = Encoder.from_pretrained(model).config
    other_schemes = {name for scheme in POSITIONS.values() for name in scheme.settings}
    skip = {"name", "vocab_size", "pad_token_id"} | (other_schemes - set(POSITIONS[config.position].settings))
    # None is each of these settings' default (flex_attention: decide by device), which an unset value keeps.
    return {key: value for key, value in config.to_dict().items() if key not in skip and value is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(REPO / "runs" / "quickstart" / "model"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--write", type=Path, help="BENCHMARKS.md: replace the section between its markers")
    args = parser.parse_args()
    model = Path(args.model)
    if not any((model / name).exists() for name in ("config.json", "litbert.json")):
        raise SystemExit(f"No model at {model}: run the README job first (python train.py --config "
                         f"configs/quickstart.yaml).")
    pretraining = json.loads((model.parent / "metrics.json").read_text())
    results: dict[str, list[tuple[float, float]]] = {"pretrained": [], "random init": []}
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:  # the two sides alternate, one run at a time
            for side in results:
                root = Path(folder) / f"{side.replace(' ', '-')}-{seed}"
                results[side].append(fine_tune(model, seed, side == "pretrained", root))
                print(f"seed {seed} {side}: accuracy {results[side][-1][0]:.4f} in {results[side][-1][1]:.0f} s",
                      flush=True)
    rows = []
    for side, runs in results.items():
        accuracies = [a for a, _ in runs]
        spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
        rows.append(f"| {side} | {statistics.mean(accuracies):.3f} ± {spread:.3f} | "
                    f"{', '.join(f'{a:.3f}' for a in accuracies)} |")
    table = "\n".join([
        f"README job: held-out masked-token accuracy {pretraining['val/accuracy']:.3f} (loss "
        f"{pretraining['val/loss']:.3f}). SST-2 dev accuracy after `configs/quickstart-sst2.yaml`, seeds "
        f"{', '.join(map(str, args.seeds))}:",
        "",
        "| encoder | SST-2 dev accuracy (mean ± sd) | per seed |",
        "|---|---|---|",
        *rows,
        "",
        "    LITBERT_DATA=../shared/data python bench/quickstart.py --seeds "
        + " ".join(map(str, args.seeds)) + " --write BENCHMARKS.md",
    ])
    print(table)
    if args.write:
        write_section(args.write, SECTION, table)


if __name__ == "__main__":
    main()
