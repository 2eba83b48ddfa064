"""What each position scheme does: the same encoder pretrained with each scheme, then measured side by side.

For every seed and scheme (`learned`, `sinusoidal`, `rope`, `alibi`, `t5`, `none`, `sinusoidal-scaled`: the
sinusoidal table at the token embeddings' scale, and `sinusoidal-sqrt-d`: the token embeddings times sqrt(d) under
the table; the schemes alternate inside each seed), one run at a time:

1. pretrain through train.py with the README job's recipe (`configs/quickstart.yaml`: 4 x 128, pre-norm, RMSNorm,
   GeGLU, 30% masking, lr 3e-3), only the position scheme changed, for a fixed number of steps at length 128
   (the same token budget for every scheme; `learned` gets a table of exactly 128 rows);
2. evaluate masked-LM loss and accuracy on held-out IMDB reviews (the test split, fixed masks at 15%) packed into
   blocks of 1x, 2x, 4x and 8x the training length (the same documents at every length); a learned table cannot
   encode positions past its rows, so those cells read "impossible";
3. fine-tune the model on SST-2 (a fixed number of steps from the training set, full dev set) and on RTE
   (`configs/quickstart-sst2.yaml`'s recipe: mean pooling, lr 3e-4, dropout 0.1; random batches), and keep dev
   accuracy (the first seed's models only, by default: on 2 CPU cores the fine-tunes cost as much as the
   pretraining). The same fine-tunes of a randomly initialised encoder (RoPE's settings, or the first scheme's
   when RoPE is not studied; no pretraining) are the reference row: what the pretraining adds at this budget.

Then the training step time of each scheme (one random batch, fused AdamW, schemes alternating) and the
table, the loss curves and loss against evaluation length (PNG, `--figures`). Results go to `--out` as JSON after
every run (`bench/results/positions.json` by default), and a rerun skips the runs that file holds whose models are
still under `--root`.

    LITBERT_DATA=../shared/data python -m bench.positions --seeds 0 1 --write BENCHMARKS.md

On a GPU the same command scales with `--steps`, `--eval-documents` and `--sst2-steps`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from bench.common import REPO, logged, mean_sd, readme_job, results_path, train_py, write_section
from bench.quickstart import random_init_args
from data import MLMDataModule, load_tokenizer
from encoders import POSITIONS
from encoders.plots import pyplot
from tasks.base import EncoderSpec
from tasks.mlm import MaskedLM

SCHEMES = ("learned", "sinusoidal", "sinusoidal-scaled", "sinusoidal-sqrt-d", "rope", "alibi", "t5", "none")
# Rows that are a scheme with settings of its own: name -> (scheme, EncoderConfig overrides). The sinusoidal table
# scaled to the size of the token embeddings (0.02 x sqrt 2 = 0.028: the table's entries have RMS 1/sqrt 2), and
# Vaswani et al.'s remedy, the token embeddings multiplied by sqrt(d) (d = 128 here) under the table as it is.
VARIANTS = {"sinusoidal-scaled": ("sinusoidal", {"sinusoidal_scale": 0.028}),
            "sinusoidal-sqrt-d": ("sinusoidal", {"embedding_scale": round(128 ** 0.5, 4)})}
JOB = readme_job()  # the README job's encoder and batches (configs/quickstart.yaml), each scheme in turn
TRAIN_LENGTH = JOB.length  # 128: the README job's blocks
SECTION = "positions"


def encoder_settings(name: str) -> tuple[str, dict[str, float]]:
    """The position scheme of a row and its own settings."""
    return VARIANTS.get(name, (name, {}))


def pretrain(name: str, seed: int, options: argparse.Namespace, root: Path) -> dict:
    scheme, settings = encoder_settings(name)
    args = ["--config", str(REPO / "configs" / "quickstart.yaml"), "--seed_everything", str(seed),
            "--model.encoder.position", scheme, "--trainer.max_steps", str(options.steps),
            "--trainer.max_time", "null", "--trainer.val_check_interval", str(max(1, options.steps // 3)),
            "--data.tokenizer", str(options.root / "tokenizer"),
            "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(root)]
    if (options.root / "tokenizer" / "tokenizer.json").exists():  # trained by the first run: every run shares it
        args += ["--data.train_tokenizer", "null"]
    if scheme == "learned":  # a table for the training length exactly: no untrained rows to extrapolate into
        args += ["--model.encoder.max_position_embeddings", str(TRAIN_LENGTH)]
    args += [arg for field, value in settings.items() for arg in (f"--model.encoder.{field}", str(value))]
    if options.max_documents is not None:
        args += ["--data.max_documents", str(options.max_documents)]
    seconds = train_py(args, root)
    curve = logged(root, "train/loss")
    return {"seconds": seconds, "curve": curve, **json.loads((root / "metrics.json").read_text())}


@torch.no_grad()
def evaluate(model_dir: Path, tokenizer: Path, factors: list[int], documents: int) -> dict[str, dict | None]:
    """{length: {"loss", "accuracy", "tokens"}} on the first `documents` IMDB test reviews; None where the scheme
    cannot encode that length."""
    model = MaskedLM(pretrained=str(model_dir)).eval()
    limit = model.encoder.config.max_sequence_length
    results: dict[str, dict | None] = {}
    for factor in factors:
        length = factor * TRAIN_LENGTH
        if limit is not None and length > limit:
            results[str(length)] = None
            continue
        data = MLMDataModule(tokenizer=str(tokenizer), dataset="stanfordnlp/imdb", train_split="unsupervised",
                             val_split="test", max_val_documents=documents, max_length=length,
                             eval_batch_size=max(1, 4096 // length))
        data.setup("validate")
        loss_sum, correct, count = 0.0, 0, 0
        for batch in data.val_dataloader():
            loss, logits, targets = model(batch)
            loss_sum += float(loss) * targets.numel()
            correct += int((logits.argmax(-1) == targets).sum())
            count += targets.numel()
        results[str(length)] = {"loss": loss_sum / count, "accuracy": correct / count, "tokens": count}
    return results


def fine_tune(model_dir: Path, task: str, seed: int, options: argparse.Namespace, root: Path,
              overrides: tuple[str, ...] | list[str] = ()) -> float:
    args = ["--config", str(REPO / "configs" / "quickstart-sst2.yaml"), "--model.pretrained", str(model_dir),
            "--data.task", task, "--data.group_by_length", "false", "--seed_everything", str(seed),
            "--export", "false", "--predict", "false", "--trainer.logger", "false"]
    if task == "sst2":  # a fixed number of random batches from the 67k training sentences; the full dev set
        args += ["--trainer.max_steps", str(options.sst2_steps)]
    else:
        args += ["--trainer.max_epochs", str(options.pair_epochs)]
    if options.finetune_steps is not None:  # the test's tiny budget
        args += ["--trainer.max_steps", str(options.finetune_steps)]
    train_py([*args, *overrides], root)
    return json.loads((root / "metrics.json").read_text())["val/accuracy"]


def random_reference(model_dir: Path, seed: int, options: argparse.Namespace, root: Path) -> dict[str, float]:
    """The fine-tunes of an encoder with `model_dir`'s settings and tokenizer and new random weights."""
    overrides = random_init_args(model_dir, REPO / "configs" / "quickstart-sst2.yaml")
    return {task: fine_tune(model_dir, task, seed, options, root / task, overrides) for task in ("sst2", "rte")}


def step_time(batch: int, length: int, vocab: int, rate: float, repeats: int, **encoder) -> float:
    """Median seconds of `repeats` training steps (forward, loss, backward, fused AdamW) of `MaskedLM` with the
    `encoder` settings on one random batch, after 3 warm-up steps."""
    torch.manual_seed(0)
    model = MaskedLM(EncoderSpec(**encoder), vocab_size=vocab)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    ids = torch.randint(5, vocab, (batch, length))
    data = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "labels": torch.where(torch.rand(batch, length) < rate, ids, -100)}
    times = []
    for step in range(3 + repeats):
        start = time.perf_counter()
        model(data)[0].backward()
        optimizer.step()
        optimizer.zero_grad()
        if step >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def step_times(schemes: list[str], vocab: int, rounds: int, repeats: int) -> dict[str, float]:
    """Median seconds per training step (batch 32 x 128) of each scheme, the schemes alternating."""
    times: dict[str, list[float]] = {scheme: [] for scheme in schemes}
    for _ in range(rounds):
        for name in schemes:
            scheme, extra = encoder_settings(name)
            if scheme == "learned":
                extra = {"max_position_embeddings": TRAIN_LENGTH}
            times[name].append(step_time(batch=JOB.batch_size, length=JOB.length, vocab=vocab, rate=JOB.masking_rate,
                                         repeats=repeats, **{**JOB.encoder, "position": scheme, **extra}))
    return {scheme: statistics.median(values) for scheme, values in times.items()}


def table(results: dict, options: argparse.Namespace) -> str:
    runs = results["runs"]
    lengths = [str(f * TRAIN_LENGTH) for f in options.factors]
    seeds = sorted({run["seed"] for run in runs.values()})
    times = results.get("step_seconds", {})
    lines = [
        f"Each scheme pretrained {options.steps} steps x 32 x {TRAIN_LENGTH} tokens (the README job's recipe, only "
        f"the scheme changed), seeds {', '.join(map(str, seeds))}; masked-token accuracy / loss on the first "
        f"{options.eval_documents} IMDB test reviews (fixed 15% masks) packed at each length; SST-2 after "
        f"{options.sst2_steps} fine-tuning steps, RTE after {options.pair_epochs} epochs (`quickstart-sst2.yaml`'s "
        f"recipe; dev accuracy; models of "
        f"seed(s) {', '.join(map(str, sorted({r['seed'] for r in runs.values() if 'sst2' in r}))) or '-'}); "
        f"step time of a training step (batch 32 x {TRAIN_LENGTH}), relative to `none` (or the fastest scheme).",
        "",
        "| scheme | " + " | ".join(f"acc @ {n}" for n in lengths) + " | " + " | ".join(f"loss @ {n}" for n in lengths)
        + " | SST-2 | RTE | step time |",
        "|---|" + "---|" * (2 * len(lengths) + 3),
    ]
    for scheme in options.schemes:
        mine = [run for run in runs.values() if run["scheme"] == scheme]
        if not mine:
            continue
        cells = []
        for key in ("accuracy", "loss"):
            for n in lengths:
                values = [run["eval"][n][key] for run in mine if run["eval"].get(n)]
                cells.append(mean_sd(values) if values else "impossible")
        for task in ("sst2", "rte"):
            cells.append(mean_sd([run[task] for run in mine if task in run]))
        step, base = times.get(scheme), times.get("none", min(times.values(), default=None))
        cells.append(f"{step * 1000:.0f} ms ({step / base:.2f}x)" if step and base else "-")
        lines.append(f"| {scheme} | " + " | ".join(cells) + " |")
    reference = list(results.get("random", {}).values())
    if reference:
        cells = ["-"] * (2 * len(lengths)) + [mean_sd([r[task] for r in reference]) for task in ("sst2", "rte")]
        lines.append(f"| random init ({reference[0]['scheme']}, not pretrained) | " + " | ".join(cells) + " | - |")
    lines += ["", "    LITBERT_DATA=../shared/data python -m bench.positions " + options.command]
    return "\n".join(lines)


def figures(results: dict, options: argparse.Namespace, out: Path) -> list[Path]:
    plt = pyplot()
    out.mkdir(parents=True, exist_ok=True)
    runs = results["runs"]
    paths = []
    figure, ax = plt.subplots(figsize=(6.4, 4.2))
    for scheme in options.schemes:
        curves = [run["curve"] for run in runs.values() if run["scheme"] == scheme and run.get("curve")]
        if not curves:
            continue
        steps = [s for s, _ in curves[0]]
        mean = [statistics.mean(c[i][1] for c in curves if i < len(c)) for i in range(len(steps))]
        ax.plot(steps, mean, label=scheme)
    ax.set_xlabel("training step")
    ax.set_ylabel("training MLM loss (mean over seeds)")
    ax.set_title(f"Pretraining loss by position scheme (length {TRAIN_LENGTH})")
    ax.legend()
    paths.append(out / "positions-loss-curves.png")
    figure.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(figure)

    figure, ax = plt.subplots(figsize=(6.4, 4.2))
    for scheme in options.schemes:
        mine = [run for run in runs.values() if run["scheme"] == scheme]
        points = []
        for factor in options.factors:
            values = [run["eval"][str(factor * TRAIN_LENGTH)]["loss"] for run in mine
                      if run["eval"].get(str(factor * TRAIN_LENGTH))]
            if values:
                points.append((factor * TRAIN_LENGTH, statistics.mean(values)))
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=scheme)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"evaluation length (trained at {TRAIN_LENGTH})")
    ax.set_ylabel("held-out MLM loss (15% masks)")
    ax.set_title("Length extrapolation")
    ax.legend()
    paths.append(out / "positions-extrapolation.png")
    figure.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(figure)
    return paths


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=sorted([*POSITIONS, *VARIANTS]))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=450, help="pretraining steps per run")
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 2, 4, 8],
                        help="evaluation lengths as multiples of the training length (128)")
    parser.add_argument("--eval-documents", type=int, default=500)
    parser.add_argument("--sst2-steps", type=int, default=400)
    parser.add_argument("--pair-epochs", type=int, default=3)
    parser.add_argument("--finetune-seeds", type=int, nargs="*",
                        help="the seeds whose models are fine-tuned (default: the first seed; none: no fine-tunes)")
    parser.add_argument("--max-documents", type=int, help="pretrain on the first N reviews only (tests)")
    parser.add_argument("--finetune-steps", type=int, help="cap every fine-tune at N steps (tests)")
    parser.add_argument("--timing-repeats", type=int, default=10, help="timed steps per scheme and round")
    parser.add_argument("--timing-rounds", type=int, default=2, help="rounds of the schemes in turn (median kept)")
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "positions")
    parser.add_argument("--out", type=Path, default=results_path("positions"), help="results JSON")
    parser.add_argument("--figures", type=Path, help="folder for the PNG figures")
    parser.add_argument("--write", type=Path, help="BENCHMARKS.md: replace the section between its markers")
    options = parser.parse_args(argv)
    options.command = " ".join(argv if argv is not None else sys.argv[1:])
    out = options.out
    results = json.loads(out.read_text()) if out.exists() else {"runs": {}}
    out.parent.mkdir(parents=True, exist_ok=True)
    finetune_seeds = options.seeds[:1] if options.finetune_seeds is None else options.finetune_seeds

    for seed in options.seeds:
        order = options.schemes if seed % 2 == 0 else list(reversed(options.schemes))  # alternate the order
        for scheme in order:
            key = f"{scheme}-{seed}"
            if key in results["runs"] and (options.root / key / "pretrain" / "model").exists():
                continue  # finished by an earlier run whose models are still under --root
            root = options.root / key
            run = {"scheme": scheme, "seed": seed, **pretrain(scheme, seed, options, root / "pretrain")}
            run["eval"] = evaluate(root / "pretrain" / "model", options.root / "tokenizer", options.factors,
                                   options.eval_documents)
            if seed in finetune_seeds:
                for task in ("sst2", "rte"):
                    run[task] = fine_tune(root / "pretrain" / "model", task, seed, options, root / task)
            results["runs"][key] = run
            out.write_text(json.dumps(results, indent=1))
            print(f"{key}: " + ", ".join(f"{n}: {r['accuracy']:.3f}" if r else f"{n}: impossible"
                                         for n, r in run["eval"].items()), flush=True)
        reference = "rope" if "rope" in options.schemes else options.schemes[0]
        if seed in finetune_seeds and (str(seed) not in results.setdefault("random", {})
                                       or not (options.root / f"random-{seed}").exists()):
            results["random"][str(seed)] = {"scheme": reference, **random_reference(
                options.root / f"{reference}-{seed}" / "pretrain" / "model", seed, options,
                options.root / f"random-{seed}")}
            out.write_text(json.dumps(results, indent=1))

    vocab = len(load_tokenizer(str(options.root / "tokenizer")))  # what the runs linked as vocab_size
    results["step_seconds"] = step_times(options.schemes, vocab, rounds=options.timing_rounds,
                                         repeats=options.timing_repeats)
    out.write_text(json.dumps(results, indent=1))
    text = table(results, options)
    print(text)
    if options.figures:
        for path in figures(results, options, options.figures):
            print(f"figure: {path}")
    if options.write:
        write_section(options.write, SECTION, text)
    return results


if __name__ == "__main__":
    main()
