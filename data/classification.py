"""Sequence classification data: one text or a pair of texts per example, and a class, a set of labels
(multi-label) or a score.

Any dataset of that shape is a YAML, no code: a hub name (with its config) or local CSV/TSV/JSON/JSONL files, the
text column(s) and the label column. The datasets litbert knows are rows of `TEXT_SETS`, each saying which columns
hold the texts and the label (in the local files and on the hub), the label set in the files' own spelling, the
official metrics and the splits; where a dataset lives is `data.sources.LOCAL_COPIES`. GLUE's nine tasks (Wang et
al., 2019) and IMDB (Maas et al., 2011) are such rows, and `GLUEDataModule` is this datamodule named by a task.

Labels are read as strings and mapped to ids in the order of the row's label set, else of `label_names`, else of
the sorted training labels (numerically sorted when they are all integers). The mapping is part of the
datamodule's `state_dict`, which Lightning stores in every checkpoint, so a model is reloaded with its own
mapping. Scores (`regression: true`; STS-B) are floats; STS-B's outside [0, 5] are an error, not clipped.

Multi-label examples have a set of labels, possibly empty: `multi_label: true` with a `label_column` that holds a
list (a JSON list, a hub `Sequence` of labels or a `ClassLabel` sequence; in a CSV or TSV the labels separated by
`label_separator`), or `label_columns`, one 0/1 column a label, named after it. Each example becomes a 0/1 target
per label. A label outside the label set, or a 0/1 column holding another value, is an error naming the file, line
and column. `conll2003-entity-types` is such a set, built from the CoNLL-2003 files (`conll_entity_types`).

Over-long examples are cut by an explicit strategy and counted in the log. A single text: `head`, `tail`, or
`head+tail`, the first `head_fraction` of the budget and the end (Sun et al., 2019, "How to Fine-Tune BERT for
Text Classification?", section 5.3: 128 + 382 tokens were their best); a pair: `longest_first`, a token at a time
from the end of the longer text, as the GLUE baselines and transformers cut. `error` refuses them.

Unlabelled test sets (GLUE's) are loaded for prediction only, and `write_submission` writes the TSVs the GLUE
server takes (`index<TAB>prediction`, one file per test set, named as in GLUE's baseline submission: `CoLA.tsv`,
`MNLI-m.tsv`, `AX.tsv`, ...). The diagnostic set (AX) is predicted with the MNLI model: it is a test split of MNLI.
A file of new inputs (`predict_file`, read by `python train.py predict`) is predicted instead of the test sets, and
`write_predictions` writes a line per input: JSON lines with the input's texts, `label` and `score` (the label's
probability; for regression the predicted value), or a TSV `index<TAB>label<TAB>score`; multi-label, the
`labels` whose probability exceeds the model's threshold with their `scores` (TSV: comma-separated).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import datasets
import torch
from torch.utils.data import DataLoader

from data.base import TokenizedDataModule
from data.collate import PaddingCollator
from data.sources import (
    DATA_ROOT_ENV,
    LOCAL_COPIES,
    DataError,
    MissingColumns,
    cached_map,
    check_source,
    counted,
    data_root,
    describe_files,
    existing_split_file,
    file_identity,
    fingerprint,
    load_hub_split,
    local_copy_folder,
    one_file_per_split,
    read_conll,
    read_delimited,
    read_table,
    split_file,
    written_whole,
)
from encoders.choices import check_choice

log = logging.getLogger(__name__)

PairTruncation = Literal["longest_first", "error"]
Truncation = Literal["head", "tail", "head+tail", PairTruncation]  # longest_first of one text is head


@dataclass(frozen=True)
class TextSet:
    """A known classification dataset: its columns, label set, metrics and splits (its files: LOCAL_COPIES)."""

    hub: str  # hub name, also the key of its local layout in LOCAL_COPIES
    config: str | None  # hub config name
    text_columns: tuple[str, ...]  # one text or a pair, as named in the local files
    label_column: str
    labels: tuple[str, ...] | None  # as spelled in the local files, in id order; None: a score (regression)
    label_names: tuple[str, ...]  # readable names in id order, as on the hub
    metrics: tuple[str, ...] = ("accuracy",)  # the first is the main metric
    validation_splits: tuple[str, ...] = ("validation",)
    labelled_test: bool = False  # a labelled `test` split (GLUE's test labels are not public)
    submission: dict[str, str] = field(default_factory=dict)  # unlabelled test split -> GLUE submission file name
    split_configs: dict[str, tuple[str, str]] = field(default_factory=dict)  # split -> (config, split) it comes from
    id_column: str = "index"  # id column of the unlabelled test files
    headerless: tuple[str, ...] | None = None  # column names of labelled local files without a header (CoLA)
    hub_text_columns: tuple[str, ...] = ()  # the text columns on the hub, where they are named differently
    score_range: tuple[float, float] | None = None  # regression: the scale's bounds
    multi_label: bool = False  # a set of labels per example
    # A set built from the local files of another dataset (`hub`), by a reader of one file: (texts, label lists,
    # line of each example). It has no hub version of its own, and is named by `title`.
    builder: Callable[[Path], tuple[list[str], list[list[str]], list[int]]] | None = None
    title: str | None = None

    @property
    def name(self) -> str:
        return self.title or self.config or self.hub

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    @property
    def test_splits(self) -> tuple[str, ...]:
        return tuple(self.submission)

    @property
    def folder(self) -> str:
        """The folder of its local copy under the data root (`glue/RTE`, `imdb`)."""
        copy = LOCAL_COPIES[self.hub]
        return copy.folder.format(config=copy.configs[self.config]) if copy.configs else copy.folder


def conll_entity_types(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """The sentences of a CoNLL-2003 file as texts (the words joined by spaces) with the entity types each contains
    (the tags' types, B-/I- prefixes removed: PER, ORG, LOC, MISC), and the line of each sentence's first word. A
    sentence without an entity is kept, with no labels: a fifth of CoNLL-2003's, and telling them apart is part of
    the task (dropping them would also lift exact match)."""
    sentences = read_conll(path)
    types = [sorted({tag[2:] for tag in sentence.tags if tag[:2] in ("B-", "I-")}) for sentence in sentences]
    return [" ".join(sentence.words) for sentence in sentences], types, [sentence.lines[0] for sentence in sentences]


def _glue(config: str, text_columns: tuple[str, ...], label_column: str, labels: tuple[str, ...] | None,
          label_names: tuple[str, ...], metrics: tuple[str, ...] = ("accuracy",), **more: Any) -> TextSet:
    submission = more.pop("submission", {"test": f"{LOCAL_COPIES['nyu-mll/glue'].configs[config]}.tsv"})
    return TextSet("nyu-mll/glue", config, text_columns, label_column, labels, label_names, metrics,
                   submission=submission, **more)


_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")
_NLI = ("entailment", "neutral", "contradiction")
_PAIR = ("sentence1", "sentence2")
_ENTITY_TYPES = ("LOC", "MISC", "ORG", "PER")

TEXT_SETS: dict[str, TextSet] = {
    "cola": _glue("cola", ("sentence",), "label", _BINARY, ("unacceptable", "acceptable"), ("matthews_corrcoef",),
                  headerless=("source", "label", "original_label", "sentence")),
    "sst2": _glue("sst2", ("sentence",), "label", _BINARY, ("negative", "positive")),
    "mrpc": _glue("mrpc", ("#1 String", "#2 String"), "Quality", _BINARY, ("not_equivalent", "equivalent"),
                  ("f1", "accuracy"), hub_text_columns=_PAIR),
    "stsb": _glue("stsb", _PAIR, "score", None, ("score",), ("pearson", "spearman"), score_range=(0.0, 5.0)),
    "qqp": _glue("qqp", ("question1", "question2"), "is_duplicate", _BINARY, ("not_duplicate", "duplicate"),
                 ("f1", "accuracy"), id_column="id"),
    "mnli": _glue("mnli", _PAIR, "gold_label", _NLI, _NLI,
                  validation_splits=("validation_matched", "validation_mismatched"),
                  submission={"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv", "test_ax": "AX.tsv"},
                  split_configs={"test_ax": ("ax", "test")}, hub_text_columns=("premise", "hypothesis")),
    "qnli": _glue("qnli", ("question", "sentence"), "label", _ENTAILMENT, _ENTAILMENT),
    "rte": _glue("rte", _PAIR, "label", _ENTAILMENT, _ENTAILMENT),
    "wnli": _glue("wnli", _PAIR, "label", _BINARY, ("not_entailment", "entailment")),
    # IMDB has no development set; its test split is the customary place to evaluate.
    "imdb": TextSet("stanfordnlp/imdb", None, ("text",), "label", _BINARY, ("neg", "pos"),
                    validation_splits=("test",), labelled_test=True),
    # Multi-label: each CoNLL-2003 sentence and the set of entity types it mentions (Tjong Kim Sang & De Meulder,
    # 2003), read from its local copy (LOCAL_COPIES["conll2003"]).
    "conll2003-entity-types": TextSet("conll2003", None, ("text",), "entity_types", _ENTITY_TYPES, _ENTITY_TYPES,
                                      ("f1_micro", "f1_macro", "exact_match"), labelled_test=True, multi_label=True,
                                      builder=conll_entity_types, title="conll2003-entity-types"),
}
GLUE_TASKS: dict[str, TextSet] = {name: row for name, row in TEXT_SETS.items() if row.hub == "nyu-mll/glue"}
# Names people write: GLUE's folder names, and hub names with or without the organisation.
_ALIASES = {row.folder.lower(): name for name, row in GLUE_TASKS.items()} | {"sts-b": "stsb", "sst-2": "sst2"} | {
    "stanfordnlp/imdb": "imdb"}


def text_set(name: str, config: str | None = None) -> TextSet | None:
    """The known dataset `name` (`rte`, `SST-2`, `imdb`, or a hub name with its config), or None."""
    key = name.lower()
    key = key if key in TEXT_SETS else _ALIASES.get(key, key)
    if key in TEXT_SETS:
        return TEXT_SETS[key]
    # A set built from another's files is named by its key alone: `conll2003` stays the NER dataset's name.
    return next((row for row in TEXT_SETS.values() if (row.hub, row.config) == (name, config) and row.builder is None),
                None)


def glue_task(name: str) -> TextSet:
    """A GLUE task by hub config name (`mnli`) or folder name (`MNLI`, `SST-2`)."""
    row = text_set(name)
    if row is None or row.hub != "nyu-mll/glue":
        raise DataError(f"Unknown GLUE task {name!r}; choose one of {sorted(GLUE_TASKS)}.")
    return row


def truncate(ids: list[int], budget: int, strategy: str, head_fraction: float) -> list[int]:
    """Cut one text's `ids` to `budget` tokens by `strategy` (the caller has checked that it is too long)."""
    if strategy in ("head", "longest_first"):
        return ids[:budget]
    if strategy == "tail":
        return ids[len(ids) - budget:]
    head = round(budget * head_fraction)
    return ids[:head] + ids[len(ids) - (budget - head):]


def truncate_longest_first(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Cut a pair to `budget` tokens as the `tokenizers` library's `longest_first` does: only the longer text when
    that suffices, else each text to half the budget (the longer one keeps the odd token)."""
    short, long = sorted((len(a), len(b)))
    long = short if short > budget else max(short, budget - short)
    if short + long > budget:
        short = budget // 2
        long = short + budget % 2
    keep_a, keep_b = (long, short) if len(a) > len(b) else (short, long)
    return a[:keep_a], b[:keep_b]


def _sort_labels(values: set[str]) -> list[str]:
    if all(v.lstrip("-").isdigit() for v in values):
        return sorted(values, key=int)
    return sorted(values)


def _check_numeric_classes(rows: Rows, skip: set[str], column: str) -> None:
    """Refuse training labels that are numbers a class apiece would misread: one number spelled two ways (`1` and
    `1.0`, two classes), or numbers with fractions (scores, whose every value would be a class of its own)."""
    first: dict[float, tuple[str, int]] = {}  # a number -> its first spelling and line
    fraction = None
    for label, line in zip(rows.labels or (), rows.lines, strict=True):
        if label in skip:
            continue
        try:
            number = float(label)
        except ValueError:
            return  # not all numbers: the labels are names
        if not math.isfinite(number):
            return
        spelled, at = first.setdefault(number, (label, line))
        if spelled != label:
            raise DataError(f"{rows.where}, line {line}: label {label!r} in column {column!r} is the number of label "
                            f"{spelled!r} (line {at}) spelled another way, which would make it a class apart. Spell "
                            f"each class one way: fix the row; or, if they are two classes (codes such as '01' and "
                            f"'1'), list the classes in data.label_names.")
        if fraction is None and not number.is_integer():
            fraction = (label, line)
    if fraction is not None:
        raise DataError(f"{rows.where}, line {fraction[1]}: label {fraction[0]!r} in column {column!r} is a number "
                        f"with a fraction, and classification would make each of the {len(first)} values a class of "
                        f"its own. Set data.regression true if the labels are scores, or list the classes in "
                        f"data.label_names if they are classes.")


@dataclass
class Rows:
    """The raw rows of one split: texts per column, labels as read (None for unlabelled test sets; multi-label, a
    list of labels per row, or a tuple of the 0/1 columns' values), test ids."""

    texts: list[list[Any]]
    labels: list[Any] | None
    ids: list[str]
    lines: list[int]  # file line (or hub row) of each row, for messages
    where: str  # the file or hub split, for messages
    identity: Any  # what identifies the source for the cache
    class_names: list[str] | None = None  # a hub ClassLabel's names, in its id order


class ClassificationDataModule(TokenizedDataModule):
    """Sequence classification (one class or, multi-label, a set of labels per example) or regression of one text or
    a pair of texts, from a known or hub dataset or local files.

    Args:
        tokenizer: A tokenizer folder, tokenizer.json or hub id (`org/name[@revision]`); train.py defaults it to
            `model.pretrained`.
        dataset: A known dataset (`imdb`, a GLUE task such as `sst2` or `rte`, the multi-label
            `conll2003-entity-types`) or a hub name (with `dataset_config`); None to read local files.
        dataset_config: Hub config name, for hub datasets litbert does not know.
        train_files: Local training file, a path or a list of one (CSV, TSV, JSON or JSONL).
        val_files: Local validation file.
        test_files: Local labelled test file.
        predict_file: A file of inputs to predict with `python train.py predict` (CSV, TSV, JSON or JSONL with the
            text column(s); a label column, if any, is not read). It replaces the unlabelled test sets.
        text_columns: The column of the text, or the two columns of a pair (known datasets have theirs).
        label_column: The column of the label (known datasets have theirs); multi-label, of the list of labels.
        label_names: The labels as spelled in the data, in id order; by default the sorted training labels.
        label_columns: Multi-label: one column a label, holding 0 or 1 (or true/false) for each example; the column
            names are the label names, in this order. Instead of `label_column`.
        multi_label: Each example has a set of labels (possibly none), in `label_column` as a list: a JSON list, a
            hub sequence, or in a CSV/TSV the labels separated by `label_separator`. Unset: true with
            `label_columns` or a multi-label known dataset, else false. The task learns it from here.
        label_separator: What separates the labels in a CSV/TSV list column (`,` when unset; an empty cell is no
            label).
        regression: The label is a score (a float), predicted by regression; metrics Pearson and Spearman.
        skip_labels: Rows with these label values are left out (e.g. IMDB's unlabelled `-1`); counted in the log.
        metrics: Metric names (`tasks.metrics.METRICS`, multi-label `MULTILABEL_METRICS`); by default the
            dataset's official ones, else accuracy (Pearson and Spearman for regression; micro F1, macro F1 and
            exact match for multi-label); macro F1 is added for more than two classes.
        max_length: Longest sequence, special tokens included.
        truncation: `head`, `tail`, `head+tail` (one text) or `longest_first` (a pair; the default) for over-long
            examples, or `error` to refuse them. By default `head` for one text.
        head_fraction: Share of the budget kept from the start under `head+tail`.
        data_root: Folder of local dataset copies (defaults to $LITBERT_DATA); without one, the hub is used.
        data_dir: The folder of a known dataset in its official layout (e.g. GLUE's `RTE/`), instead of the data root.
        loading: The loader settings of `TokenizedDataModule` (batch sizes, workers, cache, seed, ...).
    """

    label_state = ("label_values", "label_names")
    local_files = "local files (data.train_files, data.val_files)"  # named where the hub cannot be reached
    label_settings = True  # takes data.label_names and data.skip_labels, which messages may advise

    def __init__(
        self,
        tokenizer: str | None = None,
        dataset: str | None = None,
        dataset_config: str | None = None,
        train_files: str | list[str] | None = None,
        val_files: str | list[str] | None = None,
        test_files: str | list[str] | None = None,
        predict_file: str | None = None,
        text_columns: list[str] | None = None,
        label_column: str | None = None,
        label_names: list[str] | None = None,
        label_columns: list[str] | None = None,
        multi_label: bool | None = None,
        label_separator: str | None = None,
        regression: bool = False,
        skip_labels: list[str] | None = None,
        metrics: list[str] | None = None,
        max_length: int = 128,
        truncation: Truncation | None = None,
        head_fraction: float = 0.25,
        data_root: str | None = None,
        data_dir: str | None = None,
        **loading: Any,
    ) -> None:
        super().__init__(tokenizer, max_length=max_length, data_root=data_root, **loading)
        # The task logs the final label names, multi_label and metrics (linked from here): the loggers refuse a run
        # whose task and datamodule log one key with two values (multi_label unset here, False there).
        self.save_hyperparameters(ignore=["label_names", "multi_label", "metrics"])
        if truncation is not None:
            check_choice("truncation", truncation, Truncation, DataError)
        if not 0.0 <= head_fraction <= 1.0:
            raise DataError(f"head_fraction={head_fraction} must lie in [0, 1].")
        train_files, val_files, test_files = one_file_per_split(train_files=train_files, val_files=val_files,
                                                                test_files=test_files)
        check_source(dataset, train_files, {"val_files": val_files, "test_files": test_files}, data_root)
        self.spec = None if train_files else text_set(dataset or "", dataset_config)
        spec = self.spec
        if spec is not None:
            self._refuse_overrides(dataset, dataset_config, text_columns, label_column, regression, multi_label,
                                   label_columns, label_separator)
            text_columns, label_column = list(spec.text_columns), spec.label_column
        elif data_dir is not None:
            raise DataError(f"data.data_dir={data_dir!r} names the folder of a known dataset in its official layout, "
                            f"but data.dataset={dataset!r} is not one ({sorted(TEXT_SETS)}); give local files instead.")
        elif train_files is not None and dataset_config is not None:
            raise DataError(f"data.dataset_config={dataset_config!r} names a hub config, but the data comes from "
                            f"local files; remove it.")
        if data_dir is not None and data_root is not None:
            raise DataError(f"data.data_dir={data_dir!r} names the dataset's folder itself, so data.data_root="
                            f"{data_root!r} would not be read; set one of them.")
        self.text_columns = list(text_columns) if text_columns is not None else ["text"]
        self._check_multi_label(label_column, label_names, label_columns, multi_label, label_separator, regression,
                                skip_labels)
        self.label_column = label_column or "label"
        self.label_columns = list(label_columns) if label_columns is not None else None
        self.multi_label = spec.multi_label if spec is not None else bool(multi_label or label_columns)
        self.label_separator = label_separator or ","
        # A multi-label target is a row of 0/1, one a label: stacked, never padded to the batch's length multiple.
        self.collate = PaddingCollator(self.pad_token_id, stacked=("labels",))
        if len(self.text_columns) not in (1, 2):
            raise DataError(f"data.text_columns={self.text_columns}: one text column, or two for a pair.")
        if self.label_columns is None and self.label_column in self.text_columns:
            raise DataError(f"data.label_column={self.label_column!r} is also a text column ({self.text_columns}): "
                            f"each text would be its own class. Set data.label_column to the column of the labels.")
        pair = len(self.text_columns) == 2
        self.truncation = truncation or ("longest_first" if pair else "head")
        allowed = get_args(PairTruncation if pair else Truncation)
        if self.truncation not in allowed:
            raise DataError(f"data.truncation={self.truncation!r} cuts one text, but the examples are pairs "
                            f"({self.text_columns}); choose one of {list(allowed)}.")
        self.head_fraction = head_fraction
        self.dataset, self.dataset_config, self.data_dir = dataset, dataset_config, data_dir
        self.files = {"train": train_files, "validation": val_files, "test": test_files}
        self.predict_file = predict_file
        self.is_regression = spec.is_regression if spec is not None else regression
        if self.is_regression and (label_names or skip_labels):
            raise DataError("data.label_names and data.skip_labels are for class labels, but the labels are scores "
                            "(regression); remove them.")
        self.skip_labels = set(skip_labels or [])
        self.val_split_names = list(spec.validation_splits if spec is not None else ("validation",))
        self.test_split_names: list[str] = []  # the unlabelled test sets set up for prediction
        self._said_missing: set[str] = set()  # optional test sets found missing, and said so once
        self.test_ids: dict[str, list[str]] = {}
        self.skipped: dict[str, int] = {}
        self.truncated: dict[str, int] = {}
        self._rows: dict[str, Rows] = {}
        if self.is_regression:
            self.label_values, self.label_names = [], list(spec.label_names if spec is not None else ["score"])
        elif self.label_columns is not None:
            self.label_values, self.label_names = list(self.label_columns), list(self.label_columns)
        elif label_names is not None:
            self.label_values = [str(v) for v in label_names]
            self.label_names = list(self.label_values)
            repeated = sorted({name for name in self.label_names if self.label_names.count(name) > 1})
            if repeated:  # (the first id of each would be an output never trained)
                raise DataError(f"data.label_names lists {repeated} more than once; each class needs one id.")
        elif spec is not None:
            self.label_values, self.label_names = list(spec.labels or ()), list(spec.label_names)
        else:  # the label set comes from the training data, so it is known before setup() for the model
            train = self._read("train")
            found = {label for row in train.labels or () for label in row} if self.multi_label \
                else set(train.labels or ()) - self.skip_labels  # (rows left out bring no class)
            if not self.multi_label and train.class_names is None:
                _check_numeric_classes(train, self.skip_labels, self.label_column)
            self.label_values = train.class_names or _sort_labels(found)
            self.label_names = list(self.label_values)
            log.info("labels found in the training data: %s", self.label_values)
        self.num_labels = len(self.label_names)
        if not self.multi_label and not self.is_regression and self.num_labels < 2:
            origin = "data.label_names" if label_names is not None else \
                f"data.label_column={self.label_column!r} of {self._read('train').where}"
            raise DataError(f"{origin} holds one class, {self.label_names}: classification needs at least two. "
                            f"Check the label column, or list every class in data.label_names.")
        if self.multi_label and self.num_labels < 2:
            raise DataError(f"multi-label data with the label set {self.label_names}: a set of labels needs at least "
                            f"two to choose from (one label present or absent is binary classification: a "
                            f"label_column of two classes). Check the label column or set data.label_names.")
        default = spec.metrics if spec is not None else ("pearson", "spearman") if self.is_regression else \
            ("f1_micro", "f1_macro", "exact_match") if self.multi_label else ("accuracy",)
        # Macro F1 weighs every class alike: the check on small classes that accuracy hides.
        more = ["f1_macro"] if self.num_labels > 2 and not self.multi_label and "f1_macro" not in default else []
        self.metric_names = list(metrics) if metrics else [*default, *more]

    def _check_multi_label(self, label_column: str | None, label_names: list[str] | None,
                           label_columns: list[str] | None, multi_label: bool | None, separator: str | None,
                           regression: bool, skip_labels: list[str] | None) -> None:
        """Refuse multi-label settings that contradict each other or the data."""
        if label_columns is not None:
            if label_column is not None:
                raise DataError(f"data.label_column={label_column!r} and data.label_columns={label_columns} both "
                                f"name the labels; set one: a column holding a list of labels, or 0/1 columns.")
            if len(label_columns) < 2 or len(set(label_columns)) != len(label_columns):
                raise DataError(f"data.label_columns={label_columns}: give two or more different columns, one a "
                                f"label (a single 0/1 column is binary classification: set data.label_column).")
            if multi_label is False:
                raise DataError(f"data.label_columns={label_columns} are a multi-label target, but data.multi_label "
                                f"is false; remove it.")
            if label_names is not None:
                raise DataError(f"data.label_names={label_names}: with data.label_columns the columns name the "
                                f"labels; remove data.label_names.")
            if set(label_columns) & set(self.text_columns):
                raise DataError(f"data.label_columns={label_columns} include a text column {self.text_columns}.")
        multi = self.spec.multi_label if self.spec is not None else bool(multi_label or label_columns)
        if multi and regression:
            raise DataError("data.regression=true and multi-label labels: a score is not a set of labels; remove one.")
        if multi and skip_labels:
            raise DataError(f"data.skip_labels={skip_labels} leaves out rows of one class; multi-label rows have sets "
                            f"of labels (an empty one included). Remove it.")
        if separator is not None and (not multi or label_columns is not None or self.spec is not None):
            raise DataError(f"data.label_separator={separator!r} splits a CSV/TSV column holding a list of labels "
                            f"(multi_label with label_column); these labels are not one. Remove it.")
        if separator == "" or separator is not None and separator.strip() == "":
            raise DataError(f"data.label_separator={separator!r} must be a visible character (`,`, `|`, `;`).")

    def _refuse_overrides(self, dataset: str | None, config: str | None, text_columns: list[str] | None,
                          label_column: str | None, regression: bool, multi_label: bool | None,
                          label_columns: list[str] | None, separator: str | None) -> None:
        spec = self.spec
        assert spec is not None
        if config is not None and config != spec.config:
            raise DataError(f"data.dataset={dataset!r} is {spec.hub} {spec.config or ''}; remove data.dataset_config="
                            f"{config!r} (it names the config of other hub datasets).")
        for name, value, own in (("text_columns", text_columns, list(spec.text_columns)),
                                 ("label_column", label_column, spec.label_column)):
            if value is not None and value != own:
                raise DataError(f"data.{name}={value!r}, but {dataset} has {own!r}; remove data.{name} (it is for "
                                f"local files and hub datasets litbert does not know).")
        if regression and not spec.is_regression:
            raise DataError(f"data.regression=true, but {dataset}'s labels are classes; remove it.")
        if multi_label is not None and multi_label != spec.multi_label:
            kind = "a set of labels" if spec.multi_label else "one class" if spec.labels else "a score"
            raise DataError(f"data.multi_label={multi_label}, but {dataset} has {kind} per example; remove it.")
        for name, value in (("label_columns", label_columns), ("label_separator", separator)):
            if value is not None:
                raise DataError(f"data.{name}={value!r}, but {dataset} has its own label column "
                                f"{spec.label_column!r}; remove data.{name} (it is for local files and hub datasets "
                                f"litbert does not know).")

    # ---- reading ----------------------------------------------------------------------------------------------

    def _folder(self, config: str | None) -> Path | None:
        """The local folder of the known dataset's `config`: under data_dir or the data root; None: the hub."""
        spec = self.spec
        assert spec is not None
        if self.data_dir is not None:
            folder = Path(self.data_dir)
            if not folder.is_dir():
                raise FileNotFoundError(f"data_dir={folder} is not a folder; point it at the {spec.folder} folder of "
                                        f"the dataset's official layout.")
            return folder if config == spec.config else self._beside(folder, config)
        return local_copy_folder(spec.hub, config, data_root(self.data_root))

    def _beside(self, folder: Path, config: str) -> Path:
        """The folder of another config of the known dataset beside the task's `folder`, as the official layout has
        it (GLUE's `diagnostic` beside `MNLI`)."""
        copy = LOCAL_COPIES[self.spec.hub]
        return folder.parent / copy.folder.format(config=copy.configs[config]).rsplit("/", 1)[-1]

    def _local_file(self, split: str, required: bool = False) -> Path | None:
        """The local file of a split of the known dataset, or None for the hub. A `required` file that is missing
        is an error naming the splits the local copy has (GLUE's QNLI comes without its training set); otherwise
        the path is given whether or not the file exists."""
        spec = self.spec
        assert spec is not None
        config, name = spec.split_configs.get(split, (spec.config, split))
        folder = self._folder(config)
        if folder is None:
            return None
        if required:
            where = "data.data_dir" if self.data_dir is not None else f"${DATA_ROOT_ENV} (or data.data_root)"
            unlabelled = " (--predict false: no test-set predictions)" if split in spec.submission else ""
            return existing_split_file(spec.hub, config, name, folder, f"Add the file, or point {where} at a copy "
                                                                       f"of {spec.name} that holds it{unlabelled}.")
        return split_file(spec.hub, config, name, folder)

    def _sibling_file(self, split: str) -> Path:
        """Where a split of another config (GLUE's AX) belongs beside the task's local folder:
        `glue/diagnostic/diagnostic.tsv` beside `glue/MNLI`."""
        spec = self.spec
        assert spec is not None and split in spec.split_configs
        config, name = spec.split_configs[split]
        return split_file(spec.hub, config, name, self._beside(self._folder(spec.config), config))

    def _read(self, split: str) -> Rows:
        if split in self._rows:
            return self._rows[split]
        if split == "predict":  # new inputs: the texts alone, numbered by their place in the file
            try:
                rows = self._from_file(Path(self.predict_file), list(self.text_columns), False,  # type: ignore
                                       quoting=True, headerless=None, id_column=None)
            except MissingColumns as error:  # the columns are the training data's, not a setting to change here
                raise MissingColumns(error.where, error.missing, error.header,
                                     f"The model reads its text from the column(s) {list(self.text_columns)} of "
                                     f"the data it was trained on: name the columns of data.predict_file so.") \
                    from None
            self._rows[split] = rows
            return rows
        labelled = split not in (self.spec.submission if self.spec else {})
        needed = [*self.text_columns, *self.label_fields] if labelled else \
            [self.spec.id_column, *self.text_columns]  # type: ignore[union-attr]
        if (path := self.given_file(split)) is not None:
            rows = self._from_file(Path(path), needed, labelled, quoting=True, headerless=None)
        elif self.spec is not None and (path := self._local_file(split, required=True)) is not None:
            if self.spec.builder is not None:
                texts, labels, lines = self.spec.builder(path)
                rows = Rows([texts], labels, [], lines, str(path), file_identity(path))
            else:
                copy = LOCAL_COPIES[self.spec.hub]
                rows = self._from_file(path, needed, labelled, copy.quoting,
                                       self.spec.headerless if labelled else None)
        elif self.spec is not None and self.spec.builder is not None:
            raise DataError(f"{self.spec.name} is built from the local files of {self.spec.hub}, and there is none: "
                            f"set $LITBERT_DATA (or data.data_root) to a folder holding "
                            f"{self.spec.folder}/{{train,valid,test}}.txt, or data.data_dir to that folder.")
        else:
            rows = self._from_hub(split, labelled)
        self._rows[split] = rows
        return rows

    @property
    def label_fields(self) -> list[str]:
        """The column(s) the labels are read from."""
        return self.label_columns or [self.label_column]

    def _labels_read(self, columns: dict[str, list[Any]], lines: list[int], where: str,
                     delimited: bool) -> list[Any]:
        """The labels of the rows as read: strings; multi-label, a list of labels per row (split at
        `label_separator` in a CSV/TSV), or a tuple of the 0/1 columns' values."""
        if self.label_columns is not None:
            return list(zip(*(columns[column] for column in self.label_columns), strict=True))
        values = columns[self.label_column]
        if not self.multi_label:
            for value, line in zip(values, lines, strict=True):
                if value is None or isinstance(value, (list, dict)):
                    raise DataError(f"{where}, line {line}: {self.label_column}={value!r} is not a label; each row "
                                    f"holds one class (a string or an integer), or a list of them with "
                                    f"data.multi_label true.")
                if not self.is_regression:  # (a score's own checks name what is wrong with it)
                    self._check_class(value, f"{where}, line {line}: {self.label_column}={value!r}")
            return [_label_text(v) for v in values]
        rows = []
        for value, line in zip(values, lines, strict=True):
            if delimited and isinstance(value, str):
                value = [label.strip() for label in value.split(self.label_separator) if label.strip()]
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, (str, int)) for v in value):
                raise DataError(f"{where}, line {line}: {self.label_column}={value!r} is not a list of labels; "
                                f"multi-label rows hold a list such as [\"PER\", \"LOC\"] (or [] for none).")
            for label in value:
                self._check_class(label, f"{where}, line {line}: label {label!r} in column {self.label_column!r}")
            rows.append([_label_text(v) for v in value])
        return rows

    def _check_class(self, value: Any, where: str) -> None:
        """Refuse a value that would silently become a class of its own: an empty cell (class ''), a label with
        spaces around it (' pos' beside 'pos'), a JSON NaN (class 'nan'). A value in skip_labels is left out later."""
        if isinstance(value, float) and not math.isfinite(value):
            raise DataError(f"{where} is not a class; fix the row.")
        if not isinstance(value, str) or value in self.skip_labels:
            return
        if not value.strip():
            skip = f" (or leave such rows out with data.skip_labels ['{value}'])" \
                if self.label_settings and not self.multi_label else ""
            raise DataError(f"{where} is empty, not a class. Fill it in or remove it{skip}.")
        if value != value.strip():
            raise DataError(f"{where} has spaces around it, which would make it a class apart from "
                            f"{value.strip()!r}; remove them.")

    def _from_file(self, path: Path, needed: list[str], labelled: bool, quoting: bool,
                   headerless: tuple[str, ...] | None, id_column: str | None = "") -> Rows:
        """The rows of a file; unlabelled rows are named by `id_column` (by default the first needed column), or
        by their position in the file where it is None."""
        if path.suffix.lower() == ".tsv":
            columns = read_delimited(path, "\t", needed, quoting=quoting, column_names=headerless)
        else:
            columns = read_table(path, needed)
        delimited = path.suffix.lower() in (".csv", ".tsv")
        labels = self._labels_read(columns, columns["_line"], str(path), delimited) if labelled else None
        id_column = needed[0] if id_column == "" else id_column
        ids = [] if labelled else [str(v) for v in columns[id_column]] if id_column is not None else \
            [str(i) for i in range(len(columns["_line"]))]
        return Rows([columns[c] for c in self.text_columns], labels, ids, columns["_line"], str(path),
                    file_identity(path))

    def _from_hub(self, split: str, labelled: bool) -> Rows:
        spec = self.spec
        if spec is not None:
            config, name = spec.split_configs.get(split, (spec.config, split))
            hub, columns = spec.hub, list(spec.hub_text_columns or spec.text_columns)
            label_column = "label" if spec.hub == "nyu-mll/glue" else spec.label_column
        else:
            hub, config, name, columns, label_column = self.dataset, self.dataset_config, split, self.text_columns, \
                self.label_column
        table = load_hub_split(hub, config, name, root=data_root(self.data_root),  # type: ignore[arg-type]
                               files=self.local_files)
        label_fields = self.label_fields if spec is None else [label_column]
        wanted = [*columns, *label_fields] if labelled else columns
        missing = [c for c in wanted if c not in table.column_names]
        if missing:
            raise DataError(f"Hub dataset {hub!r} split {name!r} lacks column(s) {missing}; it has "
                            f"{table.column_names}. Set text_columns / label_column"
                            f"{' / label_columns' if self.multi_label else ''}.")
        labels, class_names = None, None
        lines = list(range(1, len(table) + 1))
        inner = getattr(table.features.get(label_column), "feature", None)  # a sequence's items
        if labelled and self.multi_label and isinstance(inner, datasets.ClassLabel):
            labels = [[inner.names[v] for v in row] for row in table[label_column]]
            class_names = list(inner.names)
        elif labelled and self.multi_label:
            labels = self._labels_read({c: table[c] for c in label_fields}, lines, f"{hub}[{name}]", False)
        elif labelled:
            labels = table[label_column]
            feature = table.features[label_column]
            if spec is not None and spec.labels is not None:  # the hub's ids count in the row's label order
                labels = [spec.labels[v] if v >= 0 else str(v) for v in labels]
            elif isinstance(feature, datasets.ClassLabel):
                labels = [feature.names[v] if v >= 0 else str(v) for v in labels]
                class_names = list(feature.names)
            elif not self.is_regression:
                labels = [str(v) for v in labels]
        ids = [] if labelled else [str(i) for i in (table["idx"] if "idx" in table.column_names
                                                    else range(len(table)))]
        return Rows([table[c] for c in columns], labels, ids, lines, f"{hub}[{name}]",
                    ["hub", hub, config, name, table._fingerprint], class_names)

    def _label_ids(self, rows: Rows) -> tuple[list[int] | list[float] | list[list[int]], list[int]]:
        """(label ids, scores or multi-label 0/1 rows, indices of the rows kept) of labelled rows; every bad label
        is an error."""
        if self.multi_label:
            return self._label_sets(rows), list(range(len(rows.lines)))
        if self.is_regression:
            low, high = self.spec.score_range if self.spec and self.spec.score_range else (-math.inf, math.inf)
            scores = []
            for value, line in zip(rows.labels, rows.lines, strict=True):  # type: ignore[arg-type]
                try:
                    score = float(value)
                except (TypeError, ValueError):
                    score = float("nan")
                if not (math.isfinite(score) and low <= score <= high):
                    scale = f"a similarity score in [{low:g}, {high:g}]" if math.isfinite(low) else "a finite number"
                    raise DataError(f"{rows.where}, line {line}: {self.label_column}={value!r} is not {scale}; "
                                    f"fix the row.")
                scores.append(score)
            return scores, list(range(len(scores)))
        index = {label: i for i, label in enumerate(self.label_values)}
        ids, kept = [], []
        for row, (value, line) in enumerate(zip(rows.labels, rows.lines, strict=True)):  # type: ignore[arg-type]
            if value in self.skip_labels:
                continue
            if value not in index:
                settings = ", or set data.label_names / data.skip_labels" if self.label_settings else ""
                raise DataError(f"{rows.where}, line {line}: label {value!r} in column {self.label_column!r} is not "
                                f"one of the labels {self.label_values}; fix the row{settings}.")
            ids.append(index[value])
            kept.append(row)
        if not ids:
            raise DataError(f"{rows.where}: no examples left (skip_labels={sorted(self.skip_labels)} removed all "
                            f"{len(rows.lines)}); check the file and the settings.")
        return ids, kept

    def _label_sets(self, rows: Rows) -> list[list[int]]:
        """A 0/1 row per example, one a label, from its list of labels or its 0/1 columns."""
        index = {label: i for i, label in enumerate(self.label_values)}
        targets = []
        for value, line in zip(rows.labels, rows.lines, strict=True):  # type: ignore[arg-type]
            if self.label_columns is not None:
                targets.append([_zero_one(v, column, rows.where, line) for v, column in
                                zip(value, self.label_columns, strict=True)])
                continue
            target = [0] * len(index)
            for label in value:
                if label not in index:
                    raise DataError(f"{rows.where}, line {line}: label {label!r} in column {self.label_column!r} is "
                                    f"not one of the labels {self.label_values}; fix the row, or set label_names.")
                target[index[label]] = 1
            targets.append(target)
        return targets

    # ---- tokenization -----------------------------------------------------------------------------------------

    def _encode(self, batch: dict[str, list[Any]], where: str) -> dict[str, list[Any]]:
        pieces = [self.tokenizer(batch[f"text{i}"], add_special_tokens=False, return_attention_mask=False,
                                 return_token_type_ids=False, verbose=False)["input_ids"]
                  for i in range(len(self.text_columns))]
        pair = len(pieces) == 2
        special = self.template.num_special(pair=pair)
        budget = self.max_length - special
        out: dict[str, list[Any]] = {"input_ids": [], "truncated": []}
        if self.uses_token_types:
            out["token_type_ids"] = []
        for row, texts in enumerate(zip(*pieces, strict=True)):
            length = sum(map(len, texts))
            cut = length > budget
            if cut and self.truncation == "error":
                choices = "longest_first" if pair else "head, tail or head+tail"
                raise DataError(f"{where}, line {batch['line'][row]}: {length + special} tokens with "
                                f"the special tokens, more than max_length={self.max_length}, and truncation='error'; "
                                f"raise max_length or choose {choices}.")
            if cut:
                texts = truncate_longest_first(*texts, budget) if pair else \
                    (truncate(texts[0], budget, self.truncation, self.head_fraction),)
            for key, values in self.encode_types(*self.template.wrap(*texts)).items():
                out[key].append(values)
            out["truncated"].append(cut)
        for key in ("labels", "id"):
            if key in batch:
                out[key] = batch[key]
        return out

    def _build(self, split: str) -> datasets.Dataset:
        rows = self._read(split)
        settings = (self.text_columns, self.label_fields, self.max_length, self.truncation, self.head_fraction,
                    sorted(self.skip_labels), self.label_values, self.is_regression, self.multi_label,
                    self.label_separator, 2)
        key = fingerprint(split, rows.identity, self.tokenizer_key(), settings)

        def raw() -> datasets.Dataset:
            kept = list(range(len(rows.lines)))
            columns: dict[str, list[Any]] = {}
            if rows.labels is not None:
                columns["labels"], kept = self._label_ids(rows)
            for i, texts in enumerate(rows.texts):
                for row in kept:
                    if not isinstance(texts[row], str):
                        raise DataError(f"{rows.where}, line {rows.lines[row]}: {self.text_columns[i]} is "
                                        f"{texts[row]!r}, not a string.")
                columns[f"text{i}"] = [texts[row] for row in kept]
            columns["line"] = [rows.lines[row] for row in kept]
            if rows.labels is None:
                columns["id"] = rows.ids
            return datasets.Dataset.from_dict(columns)

        name = self.spec.name if self.spec else "classification"
        dataset = cached_map(raw, lambda batch: self._encode(batch, rows.where), cache_dir=self.cache_path,
                             name=f"{name.replace('/', '-')}-{split}", key=key)
        self.skipped[split] = len(rows.lines) - len(dataset)
        if self.skipped[split]:
            log.info("%s: skip_labels=%s left out %d of %d rows", rows.where, sorted(self.skip_labels),
                     self.skipped[split], len(rows.lines))
        left_out = {line for label, line in zip(rows.labels or (), rows.lines, strict=False)
                    if label in self.skip_labels} if self.skipped[split] else set()
        empty = sorted({line for texts in rows.texts for line, text in zip(rows.lines, texts, strict=True)
                        if line not in left_out and isinstance(text, str) and not text.strip()})  # a line once
        if empty:  # kept (a model reads the special tokens alone), but seldom meant: a column shifted, a cell lost
            log.warning("%s: %d example(s) with an empty text, kept: line(s) %s", rows.where, len(empty),
                        ", ".join(map(str, empty[:10])) + (", ..." if len(empty) > 10 else ""))
        self.truncated[split] = sum(dataset["truncated"])
        if self.truncated[split]:
            log.warning("%s: %d of %d examples were longer than max_length=%d and were cut (%s)", rows.where,
                        self.truncated[split], len(dataset), self.max_length, self.truncation)
        return dataset

    # ---- splits -----------------------------------------------------------------------------------------------

    @property
    def has_test_split(self) -> bool:
        """Whether there is a labelled `test` split to run (GLUE's test labels are not public)."""
        return self.spec.labelled_test if self.spec is not None else super().has_test_split

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        if stage in (None, "predict") and self.spec is not None and self.predict_file is None:
            for split in self.spec.test_splits:
                if split not in self.datasets:
                    if split in self.spec.split_configs and self._folder(self.spec.config) is not None:
                        local = self._local_file(split)  # a set of another config, read with this task (AX)
                        if local is None or not local.is_file():  # optional: a local task folder need not
                            # come with the diagnostic set, but its file is then missing from the submission
                            if split in self._said_missing:
                                continue
                            self._said_missing.add(split)
                            log.warning("%s: no %s set at %s, so %s is not predicted; put it there for a complete "
                                        "GLUE submission", self.spec.name, split, local or self._sibling_file(split),
                                        self.spec.submission.get(split, split))
                            continue
                    self.datasets[split] = self._build(split)
                    self.test_ids[split] = list(self.datasets[split]["id"])
                if split not in self.test_split_names:
                    self.test_split_names.append(split)

    def predict_dataloader(self) -> DataLoader | list[DataLoader]:
        if self.predict_file is not None:
            return super().predict_dataloader()
        # Unshuffled and ungrouped so predictions come back in file order, as write_submission needs.
        self.padding()
        loaders = [DataLoader(self._model_view(self.datasets[split]), batch_size=self.eval_batch_size, shuffle=False,
                              collate_fn=self.collate, num_workers=self.num_workers, pin_memory=self.on_cuda())
                   for split in self.test_split_names]
        return loaders[0] if len(loaders) == 1 else loaders

    def write_submission(self, predictions: dict[str, Sequence[float]], out_dir: str | os.PathLike[str]) -> list[Path]:
        """Write the submission TSVs from predictions (class ids, or scores) per unlabelled test split."""
        missing = set(self.test_split_names) - set(predictions)
        if missing:
            raise DataError(f"No predictions for test split(s) {sorted(missing)} of {self.spec.name}; the GLUE "
                            f"server needs one file per test set.")  # type: ignore[union-attr]
        return [write_submission(self.spec, split, self.test_ids[split], predictions[split], out_dir)  # type: ignore
                for split in self.test_split_names]


    def describe_source(self) -> str:
        if self.files["train"] is not None:
            source = f"files: {describe_files(self.files)}"
        else:
            spec = self.spec
            hub, config = (spec.hub, spec.config) if spec is not None else (self.dataset, self.dataset_config)
            if spec is not None and spec.builder is not None:
                hub = f"{spec.name} (built from {spec.hub})"
            folder = self._folder(spec.config) if spec is not None else None
            splits = [("train", ["train"]), ("validation", self.val_split_names),
                      ("test", ["test"] if self.has_test_split else [])]
            source = f"dataset {hub}{f' ({config})' if config else ''}: " + ", ".join(
                f"{role} split{'s' if len(names) > 1 else ''} {', '.join(map(repr, names))}"
                for role, names in splits if names) + \
                (f" (local copy {folder})" if folder is not None else " (the hub)")
        return source + (f"; predicting {self.predict_file}" if self.predict_file else "")

    def check_predictions_path(self, path: str | os.PathLike[str]) -> None:
        """Refuse an output name whose suffix says a format `write_predictions` does not write."""
        if Path(path).suffix.lower() not in (".jsonl", ".tsv"):
            columns = "index, labels, scores" if self.multi_label else "index, label, score"
            raise DataError(f"--output {path}: classification predictions are written as JSON lines (.jsonl) or as "
                            f"a TSV (.tsv: {columns}); name the file with one of these suffixes.")
        commas = [name for name in self.label_names if "," in name]
        if self.multi_label and commas and Path(path).suffix.lower() == ".tsv":
            raise DataError(f"--output {path}: the labels {commas} hold commas, which separate a TSV's labels; write "
                            f"JSON lines (.jsonl) instead.")

    def describe_predictions(self) -> str:
        """What `write_predictions` writes a prediction of: `7 inputs` (a line each, under a TSV's header)."""
        return counted(len(self._read("predict").lines), "input")

    def write_predictions(self, outputs: Sequence[Any], path: str | os.PathLike[str], threshold: float = 0.5) -> Path:
        """A line per input of `predict_file`, in its order, from the model's `outputs` (its logits, or the scores
        of regression): JSON lines (`.jsonl`) holding the input's texts by column, the `label` (its name) and its
        probability `score` (for regression `score` alone, the predicted value, not clipped to a scale); or a TSV
        (`.tsv`) with the header `index<TAB>label<TAB>score` (`index<TAB>score`), `index` counting the inputs from 0.
        Multi-label: the `labels` whose probability exceeds `threshold` (the model's), in label order, and their
        `scores` (lists; in the TSV `index<TAB>labels<TAB>scores`, each comma-separated, empty for none)."""
        self.check_predictions_path(path)
        rows = self._read("predict")
        if len(outputs) != len(rows.lines):
            raise DataError(f"{len(outputs)} predictions for the {len(rows.lines)} inputs of {rows.where}; predict "
                            f"the whole file.")
        values = torch.tensor(outputs, dtype=torch.float64)
        if self.multi_label:
            return self._write_label_sets(values.sigmoid(), threshold, rows, Path(path))
        scores, ids = (values, None) if self.is_regression else values.softmax(-1).max(-1)
        path = Path(path)
        with written_whole(path, newline="") as handle:
            tsv = csv.writer(handle, delimiter="\t", lineterminator="\n") if path.suffix.lower() == ".tsv" else None
            if tsv is not None:
                tsv.writerow(["index", "score"] if ids is None else ["index", "label", "score"])
            for row, score in enumerate(scores.tolist()):
                label = [] if ids is None else [self.label_names[int(ids[row])]]
                if tsv is not None:
                    tsv.writerow([row, *label, f"{score:.6f}"])
                    continue
                record = {column: texts[row] for column, texts in zip(self.text_columns, rows.texts, strict=True)}
                record.update({"label": label[0]} if label else {}, score=score)
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        return path

    def _write_label_sets(self, probabilities: torch.Tensor, threshold: float, rows: Rows, path: Path) -> Path:
        with written_whole(path, newline="") as handle:
            tsv = csv.writer(handle, delimiter="\t", lineterminator="\n") if path.suffix.lower() == ".tsv" else None
            if tsv is not None:
                tsv.writerow(["index", "labels", "scores"])
            for row, scores in enumerate(probabilities.tolist()):
                chosen = [(name, score) for name, score in zip(self.label_names, scores, strict=True)
                          if score > threshold]
                if tsv is not None:
                    tsv.writerow([row, ",".join(name for name, _ in chosen),
                                  ",".join(f"{score:.6f}" for _, score in chosen)])
                    continue
                record = {column: texts[row] for column, texts in zip(self.text_columns, rows.texts, strict=True)}
                record.update(labels=[name for name, _ in chosen], scores=[score for _, score in chosen])
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        return path


def _label_text(value: Any) -> str:
    """A label as the string it is mapped by: a JSON 1.0 is the class of 1 and of a CSV's "1"."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _zero_one(value: Any, column: str, where: str, line: int) -> int:
    """A 0/1 label column's value as 0 or 1: 0, 1, true, false, or their strings ("0", "1", "true", "false")."""
    if isinstance(value, bool) or isinstance(value, (int, float)) and value in (0, 1):
        return int(value)
    if isinstance(value, str) and value.strip().lower() in ("0", "1", "true", "false"):
        return int(value.strip().lower() in ("1", "true"))
    raise DataError(f"{where}, line {line}: label column {column!r} holds {value!r}, not 0 or 1 (whether the example "
                    f"has the label {column!r}); fix the row.")


def write_submission(task: TextSet | str, split: str, ids: Sequence[str], predictions: Sequence[float],
                     out_dir: str | os.PathLike[str]) -> Path:
    """Write one GLUE-submission TSV: header `index<TAB>prediction`, labels spelled as in the training files
    (class ids are mapped back), STS-B scores with three decimals, clipped to the scale's [0, 5]."""
    task = glue_task(task) if isinstance(task, str) else task
    if split not in task.submission:
        raise DataError(f"{task.name} has no test split {split!r}; choose one of {list(task.submission)}.")
    if len(ids) != len(predictions):
        raise DataError(f"{task.name} {split}: {len(predictions)} predictions for {len(ids)} test examples; "
                        f"predict the whole test set, in order, with no shuffling or dropped batches.")
    path = Path(out_dir) / task.submission[split]
    low, high = task.score_range or (-math.inf, math.inf)
    with written_whole(path, newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(["index", "prediction"])
        for example_id, prediction in zip(ids, predictions, strict=True):
            value = f"{min(max(float(prediction), low), high):.3f}" if task.labels is None \
                else task.labels[int(prediction)]
            writer.writerow([example_id, value])
    return path


class GLUEDataModule(ClassificationDataModule):
    """One GLUE task: train, validation (MNLI: matched and mismatched) and the unlabelled test sets for prediction.

    Args:
        task: Task name (`cola`, `sst2`, `mrpc`, `stsb`, `qqp`, `mnli`, `qnli`, `rte`, `wnli`; folder names work).
        tokenizer: A tokenizer folder, tokenizer.json or hub id (`org/name[@revision]`); train.py defaults it to
            `model.pretrained`.
        max_length: Longest sequence, special tokens included.
        data_root: Folder holding `glue/<TASK>/` (defaults to $LITBERT_DATA); without one, the hub is used.
        data_dir: A task folder in the official layout, instead of the data root.
        predict_file: A file of inputs to predict with `python train.py predict`, with the task's text column(s)
            as its local files name them (SST-2 `sentence`, STS-B `sentence1` and `sentence2`, ...).
        truncation: `longest_first` cuts over-long examples (counted in the log); `error` refuses them.
        loading: The loader settings of `TokenizedDataModule` (batch sizes, workers, cache, seed, ...).
    """

    local_files = "the task's folder in GLUE's layout (data.data_dir)"  # it reads no other files
    label_settings = False  # a task's labels are its own

    def __init__(
        self,
        task: str,
        tokenizer: str | None = None,
        max_length: int = 128,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        data_root: str | None = None,
        data_dir: str | None = None,
        predict_file: str | None = None,
        truncation: PairTruncation = "longest_first",
        group_by_length: bool = False,
        num_workers: int = 0,
        cache_dir: str | None = None,
        pad_to_multiple_of: int | None = None,
        pad_last_batch: bool | None = None,
        seed: int | None = None,
    ) -> None:
        check_choice("truncation", truncation, PairTruncation, DataError)
        super().__init__(tokenizer, dataset=glue_task(task).name, max_length=max_length, truncation=truncation,
                         batch_size=batch_size, eval_batch_size=eval_batch_size, group_by_length=group_by_length,
                         num_workers=num_workers, data_root=data_root, data_dir=data_dir, cache_dir=cache_dir,
                         predict_file=predict_file, pad_to_multiple_of=pad_to_multiple_of,
                         pad_last_batch=pad_last_batch, seed=seed)
        self.save_hyperparameters()
