"""A callback that records what each optimizer step trained on, for the tests that compare runs through train.py:
`--trainer.callbacks+=recording.RecordSteps --trainer.callbacks.folder <dir>`, with `tests/` on PYTHONPATH. Every
rank writes `<dir>/<rank>-<pid>.pt` at the end of training: for each step, the examples of its batches (tokens and
labels, padding cut off), in no particular order."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import lightning as L
import torch


class RecordSteps(L.Callback):
    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.steps: dict[int, list[tuple]] = defaultdict(list)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        for ids, mask, labels in zip(batch["input_ids"], batch["attention_mask"], batch["labels"], strict=True):
            kept = mask.bool()
            label = labels[kept] if labels.dim() else labels  # a label per token (MLM) or per example
            self.steps[trainer.global_step].append((tuple(ids[kept].tolist()), tuple(label.reshape(-1).tolist())))

    def on_train_end(self, trainer, pl_module) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        torch.save(dict(self.steps), self.folder / f"{trainer.global_rank}-{os.getpid()}.pt")


def recorded(folder: Path) -> dict[int, list[tuple]]:
    """Each step's examples over all the ranks and runs that wrote to `folder`, sorted."""
    steps: dict[int, list[tuple]] = defaultdict(list)
    for path in folder.glob("*.pt"):
        for step, examples in torch.load(path, weights_only=True).items():
            steps[step] += examples
    return {step: sorted(examples) for step, examples in sorted(steps.items())}
