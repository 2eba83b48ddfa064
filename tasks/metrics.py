"""Metrics: the official GLUE metric per task from `torchmetrics`, macro F1 of multi-class tasks, micro and macro F1
and exact match of multi-label tasks, and entity-level precision/recall/F1 with the semantics of the CoNLL shared
task's `conlleval` script (Tjong Kim Sang & De Meulder, 2003).

Matthews correlation is scikit-learn's, which GLUE's scorer and transformers' run_glue compute: 0 where it is
undefined (a constant prediction, or a single gold class), where torchmetrics' binary `MatthewsCorrCoef` approximates
(e.g. -0.0025 for a constant prediction on 400 examples, 1.0 for a single class predicted right). Spearman
correlation is undefined where either side is constant: NaN, as scipy's `spearmanr` (and Pearson's here) gives, where
torchmetrics' `SpearmanCorrCoef` gives 0."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import (
    BinaryF1Score,
    MulticlassAccuracy,
    MulticlassConfusionMatrix,
    MulticlassF1Score,
    MultilabelExactMatch,
    MultilabelF1Score,
)
from torchmetrics.regression import PearsonCorrCoef, SpearmanCorrCoef
from torchmetrics.utilities import dim_zero_cat


class MatthewsCorrelation(MulticlassConfusionMatrix):
    """Matthews correlation of class ids, as `sklearn.metrics.matthews_corrcoef` computes it from the confusion
    matrix (its multi-class form, which is the binary one for two classes): 0 where its denominator is."""

    def compute(self) -> torch.Tensor:
        counts = super().compute()
        confusion = counts.cpu().double()  # (gold, predicted); float64 as scikit-learn's (MPS has none)
        gold, predicted = confusion.sum(1), confusion.sum(0)
        correct, total = confusion.trace(), confusion.sum()
        covariance = correct * total - gold @ predicted
        spread = (total**2 - predicted @ predicted) * (total**2 - gold @ gold)
        value = covariance / spread.sqrt() if spread > 0 else torch.tensor(0.0)
        return value.to(counts.device, torch.float32)


class SpearmanCorrelation(SpearmanCorrCoef):
    """Spearman's rank correlation, NaN where the predictions or the targets are all equal (scipy's `spearmanr`)."""

    def compute(self) -> torch.Tensor:
        value = super().compute()
        constant = [(values == values[0]).all() for values in (dim_zero_cat(self.preds), dim_zero_cat(self.target))]
        return torch.full_like(value, float("nan")) if any(constant) else value


# name -> factory(num_labels), of a class (or a score) per example. F1 is the positive class's F1 as GLUE reports it
# for MRPC and QQP; f1_macro the unweighted mean of every class's F1.
METRICS: dict[str, Callable[[int], Metric]] = {
    "accuracy": lambda n: MulticlassAccuracy(num_classes=n, average="micro"),
    "f1": lambda n: BinaryF1Score(),
    "f1_macro": lambda n: MulticlassF1Score(num_classes=n, average="macro"),
    "matthews_corrcoef": lambda n: MatthewsCorrelation(num_classes=n),
    "pearson": lambda n: PearsonCorrCoef(),
    "spearman": lambda n: SpearmanCorrelation(),
}
# name -> factory(num_labels), of a set of labels per example, read from 0/1 predictions (the task applies its
# threshold): F1 over every (example, label) decision, the mean of each label's F1, and the share of examples whose
# whole set is right.
MULTILABEL_METRICS: dict[str, Callable[[int], Metric]] = {
    "f1_micro": lambda n: MultilabelF1Score(num_labels=n, average="micro"),
    "f1_macro": lambda n: MultilabelF1Score(num_labels=n, average="macro"),
    "exact_match": lambda n: MultilabelExactMatch(num_labels=n),
}


def classification_metrics(names: Sequence[str], num_labels: int, multi_label: bool = False) -> MetricCollection:
    table, other = (MULTILABEL_METRICS, METRICS) if multi_label else (METRICS, MULTILABEL_METRICS)
    unknown = [name for name in names if name not in table]
    if unknown:
        kind = "multi-label" if multi_label else "single-label"
        mislaid = [name for name in unknown if name in other]
        hint = f" ({mislaid} score {'single' if multi_label else 'multi'}-label tasks)" if mislaid else ""
        raise ValueError(f"Unknown metric(s) {unknown} for a {kind} task{hint}; choose from {sorted(table)}.")
    if "f1" in names and num_labels != 2:
        raise ValueError(f"metric 'f1' is the positive-class F1 of a binary task, but num_labels={num_labels}; "
                         f"f1_macro scores more classes.")
    return MetricCollection({name: table[name](num_labels) for name in names})


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
    """Micro precision, recall and F1 over exact entity spans, accumulated across batches and ranks, each sentence
    scored whole: the windows of a sentence split across examples are joined before their spans are read (an entity
    across a window boundary is one entity, as conlleval counts it)."""

    full_state_update = False

    def __init__(self, label_names: Sequence[str], ignore_index: int = -100) -> None:
        super().__init__()
        self.label_names = list(label_names)
        self.ignore_index = ignore_index
        for name in ("correct", "predicted", "gold"):
            self.add_state(name, default=torch.tensor(0), dist_reduce_fx="sum")
        # The scored tokens of sentences split into windows, as rows of (sentence, window, position, predicted id,
        # gold id), until `compute` has them all.
        self.add_state("windowed", default=[], dist_reduce_fx="cat")

    def update(self, predictions: torch.Tensor, labels: torch.Tensor, scored: torch.Tensor | None = None,
               sentence: torch.Tensor | None = None, window: torch.Tensor | None = None,
               parts: torch.Tensor | None = None) -> None:
        """`predictions` and `labels` are (B, T) label ids. The scored positions are those not labelled
        `ignore_index`, and of them only those `scored` marks (B, T) where it is given (each word's first
        sub-token). A row whose sentence has several windows (`parts` > 1) is kept with its `sentence` index and
        `window` number, and scored with the sentence's other windows in `compute`."""
        keep = labels != self.ignore_index
        if scored is not None:
            keep &= scored.bool()
        joined = parts > 1 if parts is not None else torch.zeros(len(labels), dtype=torch.bool, device=labels.device)
        if joined.any() and (sentence is None or window is None):
            raise ValueError("Rows of a sentence in several windows need their `sentence` and `window`.")
        rows, positions = (keep & joined[:, None]).nonzero(as_tuple=True)
        # Appended even when empty: every rank then syncs (N, 5) integer rows, whichever saw split sentences.
        self.windowed.append(torch.stack([sentence[rows], window[rows], positions, predictions[rows, positions],
                                          labels[rows, positions]], dim=1) if len(rows)
                             else torch.zeros((0, 5), dtype=torch.long, device=labels.device))
        names = self.label_names
        for pred_row, gold_row, keep_row in zip(predictions[~joined].tolist(), labels[~joined].tolist(),
                                                keep[~joined].tolist(), strict=True):
            kept = [i for i, k in enumerate(keep_row) if k]
            self.update_tags([names[pred_row[i]] for i in kept], [names[gold_row[i]] for i in kept])

    def update_tags(self, predicted: Sequence[str], gold: Sequence[str]) -> None:
        correct, found, expected = self._count(predicted, gold)
        self.correct += correct
        self.predicted += found
        self.gold += expected

    @staticmethod
    def _count(predicted: Sequence[str], gold: Sequence[str]) -> tuple[int, int, int]:
        predicted_spans, gold_spans = entity_spans(predicted), entity_spans(gold)
        return len(predicted_spans & gold_spans), len(predicted_spans), len(gold_spans)

    def compute(self) -> dict[str, torch.Tensor]:
        correct, predicted, gold = self.counts()
        precision = correct / max(predicted, 1)
        recall = correct / max(gold, 1)
        f1 = 2 * precision * recall / max(precision + recall, 1e-12)
        return {name: torch.tensor(value, dtype=torch.float32)
                for name, value in (("precision", precision), ("recall", recall), ("f1", f1))}

    def counts(self) -> tuple[int, int, int]:
        """(correct, predicted, gold) entities so far, the windowed sentences' included."""
        correct, predicted, gold = int(self.correct), int(self.predicted), int(self.gold)
        windowed = self.windowed
        if isinstance(windowed, list):
            windowed = torch.cat(windowed) if windowed else None
        if windowed is not None and windowed.numel():
            # Sorted by sentence, window and position; a token seen twice (a sampler that repeats examples to even
            # out ranks) is counted once.
            rows = torch.unique(windowed, dim=0)
            sentences = torch.unique_consecutive(rows[:, 0], return_counts=True)[1].tolist()
            names = self.label_names
            for tokens in rows.split(sentences):
                tags = [[names[i] for i in column.tolist()] for column in (tokens[:, 3], tokens[:, 4])]
                found = self._count(*tags)
                correct, predicted, gold = correct + found[0], predicted + found[1], gold + found[2]
        return correct, predicted, gold


def is_chunk_tagging(label_names: Sequence[str]) -> bool:
    """Whether the tags are chunks (B-/I-/E-/S- prefixes and O, as NER's; O alone too), whose score is entity F1,
    rather than tags of single tokens (POS), whose score is accuracy."""
    return all(tag == "O" or tag[:2] in ("B-", "I-", "E-", "S-") for tag in label_names)


def first_subtokens(word_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) True at each word's first sub-token, from the word index of each token (-1 off words)."""
    previous = torch.nn.functional.pad(word_ids[:, :-1], (1, 0), value=-1)
    return (word_ids >= 0) & (word_ids != previous)
