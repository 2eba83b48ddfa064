"""The README job measured: what pretraining gives the SST-2 fine-tune that follows it.

Runs `configs/quickstart-sst2.yaml` through train.py, as a user does, from the README job's model
(`runs/quickstart/model`, which must exist: run the README job first) and from a randomly initialised encoder of
the same shape with the same tokenizer, for each seed, one run at a time, and prints (and with `--write`, puts
into BENCHMARKS.md) the SST-2 dev accuracy of both, mean and standard deviation, with the README job's own
held-out masked-token accuracy from its `metrics.json`. Each run's seconds are printed as it ends (not tabled:
accuracy is the point here, and timings are taken one thing at a time elsewhere).

    LITBERT_DATA=../shared/data python train.py --config configs/quickstart.yaml
    LITBERT_DATA=../shared/data python -m bench.quickstart --seeds 0 1 2 --write BENCHMARKS.md

`--model` fine-tunes another pretraining run's model (e.g. `runs/imdb-30min/model`), `--sides pretrained` skips
the random encoder, `--section` names the BENCHMARKS.md section to write, and train.py settings after `--` apply to
both sides (a recipe search: `-- --model.pooling mean`). The random side takes the model's encoder settings except
those the fine-tuning config sets itself (its dropout). The runs go to `bench/results/<section>.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import yaml

from bench.common import REPO, results_path, train_py, write_section

SECTION = "quickstart-sst2"
DEFAULT_MODEL = str(REPO / "runs" / "quickstart" / "model")
DEFAULT_CONFIG = REPO / "configs" / "quickstart-sst2.yaml"


def fine_tune(model: Path, seed: int, pretrained: bool, root: Path, config: Path,
              overrides: list[str]) -> tuple[float, float]:
    """(SST-2 dev accuracy, seconds) of one fine-tuning run of `config`."""
    args = ["--config", str(config), "--seed_everything", str(seed), "--export", "false",
            "--trainer.logger", "false"]
    if pretrained:
        args += ["--model.pretrained", str(model)]
    else:
        args += random_init_args(model, config)
    seconds = train_py([*args, *overrides], root)  # the command line's settings last: they apply to both sides
    return json.loads((root / "metrics.json").read_text())["val/accuracy"], seconds


def random_init_args(model: Path, config: Path) -> list[str]:
    """train.py settings for a fine-tune of `config` from an encoder with `model`'s settings and tokenizer and new
    random weights; the encoder settings `config` sets for the fine-tune (its dropout) stay the config's."""
    fine_tune_settings = ((yaml.safe_load(config.read_text()).get("model") or {}).get("init_args") or {}).get(
        "encoder") or {}
    return ["--model.pretrained", "null", "--data.tokenizer", str(model)] + [
        f"--model.encoder.{key}={value if isinstance(value, str) else json.dumps(value)}"
        for key, value in encoder_settings(model).items() if key not in fine_tune_settings]


def encoder_settings(model: Path) -> dict[str, object]:
    """Every encoder setting of the exported model (read back through litbert's loader) but those the data links
    (vocabulary size, padding id) and the scheme settings its position scheme does not read."""
    from encoders import POSITIONS, Encoder

    config = Encoder.from_pretrained(model).config
    other_schemes = {name for scheme in POSITIONS.values() for name in scheme.settings}
    skip = {"name", "vocab_size", "pad_token_id"} | (other_schemes - set(POSITIONS[config.position].settings))
    # None is each of these settings' default (flex_attention: off), which an unset value keeps.
    return {key: value for key, value in config.to_dict().items() if key not in skip and value is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG,
                        help="the fine-tuning config (its `model.pretrained` is replaced by --model)")
    parser.add_argument("--sides", nargs="+", choices=["pretrained", "random init"],
                        default=["pretrained", "random init"])
    parser.add_argument("--section", default=SECTION, help="the BENCHMARKS.md section --write replaces")
    parser.add_argument("--write", type=Path, help="BENCHMARKS.md: replace the section between its markers")
    parser.add_argument("--json", type=Path, help="write the runs here (default: bench/results/<section>.json)")
    parser.add_argument("overrides", nargs="*", help="train.py settings for both sides, after `--`")
    args = parser.parse_args()
    model = Path(args.model)
    if not any((model / name).exists() for name in ("config.json", "litbert.json")):
        raise SystemExit(f"No model at {model}: run the README job first (python train.py --config "
                         f"configs/quickstart.yaml).")
    pretraining = json.loads((model.parent / "metrics.json").read_text())
    results: dict[str, list[tuple[float, float]]] = {side: [] for side in args.sides}
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:  # the two sides alternate, one run at a time
            for side in results:
                root = Path(folder) / f"{side.replace(' ', '-')}-{seed}"
                results[side].append(fine_tune(model, seed, side == "pretrained", root, args.config,
                                               args.overrides))
                print(f"seed {seed} {side}: accuracy {results[side][-1][0]:.4f} in {results[side][-1][1]:.0f} s",
                      flush=True)
    (args.json or results_path(args.section)).write_text(json.dumps(
        {"model": args.model, "pretraining": pretraining, "config": str(args.config), "overrides": args.overrides,
         "runs": {side: [{"seed": seed, "val/accuracy": accuracy, "seconds": seconds}
                         for seed, (accuracy, seconds) in zip(args.seeds, runs, strict=True)]
                  for side, runs in results.items()}}, indent=1) + "\n")
    rows = []
    for side, runs in results.items():
        accuracies = [a for a, _ in runs]
        spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
        rows.append(f"| {side} | {statistics.mean(accuracies):.3f} ± {spread:.3f} | "
                    f"{', '.join(f'{a:.3f}' for a in accuracies)} |")
    config_name = args.config.resolve().relative_to(REPO) if args.config.resolve().is_relative_to(REPO) \
        else args.config
    command = " ".join([*(["--model", args.model] if args.model != DEFAULT_MODEL else []),
                        *(["--config", str(config_name)] if args.config != DEFAULT_CONFIG else []),
                        *(["--sides", *(f'"{side}"' if " " in side else side for side in args.sides)]
                          if len(args.sides) < 2 else []),
                        "--seeds", *map(str, args.seeds),
                        *(["--section", args.section] if args.section != SECTION else []),
                        "--write", "BENCHMARKS.md", *(["--", *args.overrides] if args.overrides else [])])
    table = "\n".join([
        f"{'README job' if args.model == DEFAULT_MODEL else f'`{args.model}`'}: held-out masked-token accuracy "
        f"{pretraining['val/accuracy']:.3f} (loss "
        f"{pretraining['val/loss']:.3f}). SST-2 dev accuracy after `{config_name}`"
        f"{' ' + ' '.join(args.overrides) if args.overrides else ''}, seeds {', '.join(map(str, args.seeds))}:",
        "",
        "| encoder | SST-2 dev accuracy (mean ± sd) | per seed |",
        "|---|---|---|",
        *rows,
        "",
        "    LITBERT_DATA=../shared/data python -m bench.quickstart " + command,
    ])
    print(table)
    if args.write:
        write_section(args.write, args.section, table)


if __name__ == "__main__":
    main()
