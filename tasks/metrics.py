"""Metrics: the official GLUE metric per task from `torchmetrics`, and entity-level precision/recall/F1 with the
semantics of the CoNLL shared task's `conlleval` script (Tjong Kim Sang & De Meulder, 2003)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import BinaryF1Score, MatthewsCorrCoef, MulticlassAccuracy
from torchmetrics.regression import PearsonCorrCoef, SpearmanCorrCoef

# name -> factory(num_labels). F1 is the positive class's F1 as GLUE reports it for MRPC and QQP.
METRICS: dict[str, Callable[[int], Metric]] = {
    "accuracy": lambda n: MulticlassAccuracy(num_classes=n, average="micro"),
    "f1": lambda n: BinaryF1Score(),
    "matthews_corrcoef": lambda n: MatthewsCorrCoef(task="binary" if n == 2 else "multiclass", num_classes=n),
    "pearson": lambda n: PearsonCorrCoef(),
    "spearman": lambda n: SpearmanCorrCoef(),
}


def classification_metrics(names: Sequence[str], num_labels: int) -> MetricCollection:
    unknown = [name for name in names if name not in METRICS]
    if unknown:
        raise ValueError(f"Unknown metric(s) {unknown}; choose from {sorted(METRICS)}.")
    if "f1" in names and num_labels != 2:
        raise ValueError(f"metric 'f1' is the positive-class F1 of a binary task, but num_labels={num_labels}.")
    return MetricCollection({name: METRICS[name](num_labels) for name in names})


def _split(tag: str) -> tuple[str, str]:
    if tag == "O" or "-" not in tag:
        return "O", ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def entity_spans(tags: Sequence[str]) -> set[tuple[int, int, str]]:
    """(start, end exclusive, type) chunks as conlleval reads IOB1, IOB2 and IOBES tags: a chunk also starts at an
    `I-` after `O` or after a different type, and ends where the next tag cannot continue it."""
    spans, start, kind = set(), None, ""
    previous = "O"
    for i, tag in enumerate([*tags, "O"]):
        prefix, tag_kind = _split(tag)
        ends = start is not None and (
            prefix in ("B", "S", "O") or previous in ("E", "S") or tag_kind != kind
        )
        if ends:
            spans.add((start, i, kind))
            start = None
        begins = prefix in ("B", "S") or (prefix in ("I", "E") and (start is None or tag_kind != kind))
        if begins:
            start, kind = i, tag_kind
        previous = prefix
    return spans


class EntityF1(Metric):
    """Micro precision, recall and F1 over exact entity spans, accumulated across batches and ranks."""

    full_state_update = False

    def __init__(self, label_names: Sequence[str], ignore_index: int = -100) -> None:
        super().__init__()
        self.label_names = list(label_names)
        self.ignore_index = ignore_index
        for name in ("correct", "predicted", "gold"):
            self.add_state(name, default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, predictions: torch.Tensor, labels: torch.Tensor) -> None:
        """`predictions` and `labels` are (B, T) label ids; positions labelled `ignore_index` are skipped."""
        for pred_row, gold_row in zip(predictions.tolist(), labels.tolist(), strict=True):
            keep = [i for i, gold in enumerate(gold_row) if gold != self.ignore_index]
            names = self.label_names
            self.update_tags([names[pred_row[i]] for i in keep], [names[gold_row[i]] for i in keep])

    def update_tags(self, predicted: Sequence[str], gold: Sequence[str]) -> None:
        predicted_spans, gold_spans = entity_spans(predicted), entity_spans(gold)
        self.correct += len(predicted_spans & gold_spans)
        self.predicted += len(predicted_spans)
        self.gold += len(gold_spans)

    def compute(self) -> dict[str, torch.Tensor]:
        precision = self.correct / self.predicted.clamp(min=1)
        recall = self.correct / self.gold.clamp(min=1)
        f1 = 2 * precision * recall / (precision + recall).clamp(min=1e-12)
        return {"precision": precision.float(), "recall": recall.float(), "f1": f1.float()}
