"""GLUE (Wang et al., 2019): the nine tasks from one table of specs, read from the official `glue_data` TSVs.

Each `GlueTask` row says where the text and label live in the official files (as written by GLUE's
`download_glue_data.py`), the label set in the files' own spelling, the metrics, and the splits. The same row maps
the hub version (`nyu-mll/glue`), whose columns and split names differ. Test sets are unlabelled: they are loaded
for prediction, and `write_submission` writes the TSVs the GLUE server takes (`index<TAB>prediction`, one file per
test set, named as in the GLUE baseline's submission: `CoLA.tsv`, `MNLI-m.tsv`, `AX.tsv`, ...).

Deviations, on purpose:
- Pairs longer than `max_length` are truncated longest-first (as the GLUE baselines do) and counted in the log;
  `truncation="error"` refuses them instead.
- STS-B scores outside [0, 5] are an error, not clipped.
- The diagnostic set (AX) is predicted with the MNLI model, so it is a test split of the MNLI task.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import datasets
from torch.utils.data import DataLoader

from data.base import TokenizedDataModule
from data.sources import DataError, cached_map, data_root, file_identity, fingerprint, load_hub_split, read_delimited
from encoders.choices import check_choice

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GlueTask:
    """Everything task-specific about one GLUE task."""

    name: str  # hub config name
    folder: str  # folder in glue_data
    text_columns: tuple[str, ...]  # one (single sentence) or two (pair) columns of the official TSVs
    label_column: str
    labels: tuple[str, ...] | None  # labels as spelled in the TSVs, in id order; None: regression (a float)
    label_names: tuple[str, ...]  # readable names in id order, as on the hub
    metrics: tuple[str, ...]  # the first is the task's main metric
    files: dict[str, str]  # split -> file in the task folder
    submission: dict[str, str]  # test split -> submission file name
    id_column: str = "index"  # id column of the test files
    headerless: tuple[str, ...] | None = None  # column names of labelled files that have no header (CoLA)
    hub_text_columns: tuple[str, ...] = ()  # on the hub; defaults to text_columns

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    @property
    def validation_splits(self) -> tuple[str, ...]:
        return tuple(split for split in self.files if split.startswith("validation"))

    @property
    def test_splits(self) -> tuple[str, ...]:
        return tuple(self.submission)


_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")
_PAIR = ("sentence1", "sentence2")
_SPLITS = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}

GLUE_TASKS: dict[str, GlueTask] = {
    "cola": GlueTask("cola", "CoLA", ("sentence",), "label", _BINARY, ("unacceptable", "acceptable"),
                     ("matthews_corrcoef",), _SPLITS, {"test": "CoLA.tsv"},
                     headerless=("source", "label", "original_label", "sentence")),
    "sst2": GlueTask("sst2", "SST-2", ("sentence",), "label", _BINARY, ("negative", "positive"), ("accuracy",),
                     _SPLITS, {"test": "SST-2.tsv"}),
    "mrpc": GlueTask("mrpc", "MRPC", ("#1 String", "#2 String"), "Quality", _BINARY,
                     ("not_equivalent", "equivalent"), ("f1", "accuracy"), _SPLITS, {"test": "MRPC.tsv"},
                     hub_text_columns=_PAIR),
    "stsb": GlueTask("stsb", "STS-B", _PAIR, "score", None, ("score",), ("pearson", "spearman"), _SPLITS,
                     {"test": "STS-B.tsv"}),
    "qqp": GlueTask("qqp", "QQP", ("question1", "question2"), "is_duplicate", _BINARY,
                    ("not_duplicate", "duplicate"), ("f1", "accuracy"), _SPLITS, {"test": "QQP.tsv"},
                    id_column="id"),
    "mnli": GlueTask("mnli", "MNLI", _PAIR, "gold_label", ("entailment", "neutral", "contradiction"),
                     ("entailment", "neutral", "contradiction"), ("accuracy",),
                     {"train": "train.tsv", "validation_matched": "dev_matched.tsv",
                      "validation_mismatched": "dev_mismatched.tsv", "test_matched": "test_matched.tsv",
                      "test_mismatched": "test_mismatched.tsv", "test_ax": "../diagnostic/diagnostic.tsv"},
                     {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv", "test_ax": "AX.tsv"},
                     hub_text_columns=("premise", "hypothesis")),
    "qnli": GlueTask("qnli", "QNLI", ("question", "sentence"), "label", _ENTAILMENT, _ENTAILMENT, ("accuracy",),
                     _SPLITS, {"test": "QNLI.tsv"}),
    "rte": GlueTask("rte", "RTE", _PAIR, "label", _ENTAILMENT, _ENTAILMENT, ("accuracy",), _SPLITS,
                    {"test": "RTE.tsv"}),
    "wnli": GlueTask("wnli", "WNLI", _PAIR, "label", _BINARY, ("not_entailment", "entailment"), ("accuracy",),
                     _SPLITS, {"test": "WNLI.tsv"}),
}
# Names people write: the folder names and the hub's `ax` config (the diagnostic set is run through MNLI).
_ALIASES = {task.folder.lower(): name for name, task in GLUE_TASKS.items()} | {"sts-b": "stsb", "sst-2": "sst2"}


def glue_task(name: str) -> GlueTask:
    """The spec of a task by hub config name (`mnli`) or folder name (`MNLI`, `SST-2`)."""
    key = name.lower()
    key = key if key in GLUE_TASKS else _ALIASES.get(key, key)
    if key not in GLUE_TASKS:
        raise DataError(f"Unknown GLUE task {name!r}; choose one of {sorted(GLUE_TASKS)}.")
    return GLUE_TASKS[key]


@dataclass
class GlueSplit:
    """The raw rows of one split: texts, labels (ids or floats; None for test sets) and test ids."""

    texts: list[list[str]]  # one list per text column
    labels: list[int] | list[float] | None
    ids: list[str]
    source: Any = field(default=None)  # what identifies it for caching


def _parse_labels(task: GlueTask, values: Sequence[str], lines: Sequence[int], path: Path) -> list[int] | list[float]:
    if task.labels is None:
        scores = []
        for value, line in zip(values, lines, strict=True):
            try:
                score = float(value)
            except ValueError:
                score = float("nan")
            if not 0.0 <= score <= 5.0:  # also catches NaN
                raise DataError(f"{path}, line {line}: {task.label_column}={value!r} is not a similarity score in "
                                f"[0, 5]; fix the row.")
            scores.append(score)
        return scores
    index = {label: i for i, label in enumerate(task.labels)}
    ids = []
    for value, line in zip(values, lines, strict=True):
        if value not in index:
            raise DataError(f"{path}, line {line}: label {value!r} in column {task.label_column!r} is not one of "
                            f"{task.name}'s labels {list(task.labels)}; fix the row or check the task.")
        ids.append(index[value])
    return ids


def read_glue_split(task: GlueTask, folder: Path, split: str) -> GlueSplit:
    """One split of a task from its official TSV in `folder`."""
    path = folder / task.files[split]
    labelled = split not in task.submission
    needed = [*task.text_columns, task.label_column] if labelled else [task.id_column, *task.text_columns]
    names = task.headerless if labelled else None
    columns = read_delimited(path, "\t", needed, quoting=False, column_names=names)
    labels = _parse_labels(task, columns[task.label_column], columns["_line"], path) if labelled else None
    ids = [] if labelled else columns[task.id_column]
    return GlueSplit([columns[c] for c in task.text_columns], labels, ids, file_identity(path))


def read_hub_split(task: GlueTask, split: str) -> GlueSplit:
    """One split from `nyu-mll/glue` on the hub (labels already ids; -1 on test sets)."""
    hub = load_hub_split("nyu-mll/glue", "ax" if split == "test_ax" else task.name,
                         "test" if split == "test_ax" else split)
    columns = task.hub_text_columns or task.text_columns
    labelled = split not in task.submission
    return GlueSplit([hub[c] for c in columns], hub["label"] if labelled else None,
                     [str(i) for i in hub["idx"]], ["hub", task.name, split, hub._fingerprint])


def write_submission(task: GlueTask | str, split: str, ids: Sequence[str], predictions: Sequence[float],
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
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(["index", "prediction"])
        for example_id, prediction in zip(ids, predictions, strict=True):
            if task.labels is None:
                value = f"{min(max(float(prediction), 0.0), 5.0):.3f}"
            else:
                value = task.labels[int(prediction)]
            writer.writerow([example_id, value])
    return path


Truncation = Literal["longest_first", "error"]


class GLUEDataModule(TokenizedDataModule):
    """One GLUE task: train, validation (MNLI: matched and mismatched) and unlabelled test sets for prediction.

    Args:
        task: Task name (`cola`, `sst2`, `mrpc`, `stsb`, `qqp`, `mnli`, `qnli`, `rte`, `wnli`; folder names work).
        tokenizer: Path to a tokenizer folder or tokenizer.json; train.py defaults it to the folder of
            `model.pretrained`.
        max_length: Longest sequence, special tokens included.
        batch_size: Training batch size.
        eval_batch_size: Validation and prediction batch size (defaults to `batch_size`).
        data_root: Folder holding `glue/<TASK>/` (defaults to $LITBERT_DATA); without one, the hub is used.
        data_dir: A task folder in the official layout, overriding the data root.
        truncation: `longest_first` cuts over-long pairs (counted in the log); `error` refuses them.
        group_by_length: Batch similar lengths together to cut padding.
        num_workers: DataLoader worker processes.
        cache_dir: Folder for tokenized caches (defaults to $LITBERT_CACHE or ~/.cache/litbert).
        seed: Seed (kept for symmetry with the other datamodules; GLUE loading is deterministic).
    """

    def __init__(
        self,
        task: str,
        tokenizer: str | None = None,
        max_length: int = 128,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        data_root: str | None = None,
        data_dir: str | None = None,
        truncation: Truncation = "longest_first",
        group_by_length: bool = False,
        num_workers: int = 0,
        cache_dir: str | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(tokenizer, max_length, batch_size, eval_batch_size, num_workers, data_root, cache_dir,
                         group_by_length, seed)
        self.save_hyperparameters()
        check_choice("truncation", truncation, Truncation, DataError)
        self.spec = glue_task(task)
        if data_dir is not None and data_root is not None:
            raise DataError(f"data.data_dir={data_dir!r} names the task folder itself, so data.data_root={data_root!r} "
                            f"would not be read; set one of them.")
        self.data_dir = data_dir
        self.truncation = truncation
        self.num_labels = self.spec.num_labels
        self.label_names = list(self.spec.label_names)
        self.is_regression = self.spec.is_regression
        self.metric_names = list(self.spec.metrics)
        self.val_split_names = list(self.spec.validation_splits)
        self.test_split_names: list[str] = []
        self.test_ids: dict[str, list[str]] = {}
        self.truncated: dict[str, int] = {}

    def _folder(self) -> Path | None:
        if self.data_dir is not None:
            folder = Path(self.data_dir)
            if not folder.is_dir():
                raise FileNotFoundError(f"GLUE data_dir={folder} is not a folder; point it at the {self.spec.folder} "
                                        f"folder of glue_data.")
            return folder
        root = data_root(self.data_root)
        if root is not None and (root / "glue" / self.spec.folder).is_dir():
            return root / "glue" / self.spec.folder
        return None

    def read_split(self, split: str) -> GlueSplit:
        folder = self._folder()
        return read_hub_split(self.spec, split) if folder is None else read_glue_split(self.spec, folder, split)

    def _encode(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        texts = [batch[f"text{i}"] for i in range(len(self.spec.text_columns))]
        encoded = self.tokenizer(*texts, truncation=False, verbose=False, return_attention_mask=False)
        too_long = [i for i, ids in enumerate(encoded["input_ids"]) if len(ids) > self.max_length]
        if too_long and self.truncation == "error":
            i = too_long[0]
            raise DataError(f"GLUE {self.spec.name}: example {batch['row'][i]} has {len(encoded['input_ids'][i])} "
                            f"tokens, more than max_length={self.max_length}, and truncation='error'; raise "
                            f"max_length or set truncation='longest_first'.")
        out = {key: list(values) for key, values in encoded.items()}
        if too_long:  # re-encode only the long ones, cut longest-first as the GLUE baselines do
            again = self.tokenizer(*[[t[i] for i in too_long] for t in texts], truncation="longest_first",
                                   max_length=self.max_length, return_attention_mask=False)
            for j, i in enumerate(too_long):
                for key in out:
                    out[key][i] = again[key][j]
        out["truncated"] = [False] * len(out["input_ids"])
        for i in too_long:
            out["truncated"][i] = True
        if "label" in batch:
            out["labels"] = batch["label"]
        return out

    def _build(self, split: str) -> datasets.Dataset:
        # The file identity is known without reading the file; the hub's only after loading it.
        folder = self._folder()
        loaded: GlueSplit | None = None
        if folder is not None:
            path = folder / self.spec.files[split]
            identity = file_identity(path) if path.exists() else str(path)  # a missing file errors when read
        else:
            loaded = self.read_split(split)
            identity = loaded.source
        key = fingerprint(self.spec.name, split, identity, self.tokenizer_key(), self.max_length, self.truncation, 1)

        def raw() -> datasets.Dataset:
            rows = loaded or self.read_split(split)
            columns: dict[str, list[Any]] = {f"text{i}": texts for i, texts in enumerate(rows.texts)}
            columns["row"] = list(range(len(rows.texts[0])))
            columns["id"] = rows.ids or [""] * len(rows.texts[0])
            if rows.labels is not None:
                columns["label"] = rows.labels
            return datasets.Dataset.from_dict(columns)

        def encode(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
            out = self._encode(batch)
            out["id"] = batch["id"]
            return out

        dataset = cached_map(raw, encode, cache_dir=self.cache_path, name=f"glue-{self.spec.name}-{split}", key=key)
        truncated = sum(dataset["truncated"])
        self.truncated[split] = truncated
        if truncated:
            log.warning("GLUE %s %s: %d of %d examples were longer than max_length=%d and were truncated "
                        "longest-first; raise max_length to keep them whole", self.spec.name, split, truncated,
                        len(dataset), self.max_length)
        return dataset

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit") and "train" not in self.datasets:
            self.datasets["train"] = self._build("train")
        if stage in (None, "fit", "validate"):
            for split in self.spec.validation_splits:
                if split not in self.datasets:
                    self.datasets[split] = self._build(split)
        if stage in (None, "predict", "test"):
            folder = self._folder()
            for split in self.spec.test_splits:
                # The diagnostic set is optional: a task folder alone need not come with it.
                if folder is not None and split == "test_ax" and not (folder / self.spec.files[split]).is_file():
                    continue
                if split not in self.datasets:
                    self.datasets[split] = self._build(split)
                    self.test_ids[split] = list(self.datasets[split]["id"])
                if split not in self.test_split_names:
                    self.test_split_names.append(split)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        loaders = [self._loader(split, train=False) for split in self.val_split_names]
        return loaders[0] if len(loaders) == 1 else loaders

    def predict_dataloader(self) -> DataLoader | list[DataLoader]:
        # Unshuffled and ungrouped so predictions come back in file order, as write_submission needs.
        loaders = []
        for split in self.test_split_names:
            dataset = self._model_view(self.datasets[split])
            loaders.append(DataLoader(dataset, batch_size=self.eval_batch_size, shuffle=False,
                                      collate_fn=self.collate, num_workers=self.num_workers))
        return loaders[0] if len(loaders) == 1 else loaders

    def write_submission(self, predictions: dict[str, Sequence[float]], out_dir: str | os.PathLike[str]) -> list[Path]:
        """Write the submission TSVs from predictions (class ids, or scores for STS-B) per test split."""
        missing = set(self.test_split_names) - set(predictions)
        if missing:
            raise DataError(f"No predictions for test split(s) {sorted(missing)} of {self.spec.name}; the GLUE server "
                            f"needs one file per test set.")
        return [write_submission(self.spec, split, self.test_ids[split], predictions[split], out_dir)
                for split in self.test_split_names]
