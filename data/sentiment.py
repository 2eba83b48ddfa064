"""Sentiment classification: SST-2, IMDB, or any CSV/TSV/JSON/JSONL with configurable text and label columns.

Labels are read as strings and mapped to ids (`label_names` fixes the order; otherwise the sorted labels of the
training split, numerically sorted when they are all integers). The mapping is part of the datamodule's
`state_dict`, which Lightning stores in every checkpoint, so a model is always reloaded with its own mapping.

Long documents are cut by an explicit strategy (Sun et al., 2019, "How to Fine-Tune BERT for Text
Classification?", section 5.3): `head` keeps the start, `tail` the end, `head+tail` the first `head_fraction` of the
budget and the end (their best: 128 + 382 tokens, i.e. 0.25 of 510). `error` refuses documents that do not fit.
The number of documents cut is logged.
"""

from __future__ import annotations

import functools
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Literal

import datasets
from torch.utils.data import DataLoader

from data.base import TokenizedDataModule
from data.sources import (
    DataError,
    cached_map,
    check_source,
    data_root,
    file_identity,
    fingerprint,
    load_hub_split,
    read_delimited,
    read_table,
)
from encoders.choices import check_choice

log = logging.getLogger(__name__)

Truncation = Literal["head", "tail", "head+tail", "error"]


@dataclass(frozen=True)
class SentimentSource:
    """A known sentiment dataset: its local layout and its hub name."""

    folder: str  # under the data root
    files: dict[str, str]  # split -> file
    text_column: str
    label_column: str
    labels: tuple[str, ...]  # as spelled in the files, in id order
    label_names: tuple[str, ...]
    validation_split: str  # the split used for validation by default
    hub: tuple[str, str | None]  # (name, config)
    glue_quoting: bool = False  # GLUE TSVs: a quote is an ordinary character


SENTIMENT_SOURCES: dict[str, SentimentSource] = {
    "sst2": SentimentSource("glue/SST-2", {"train": "train.tsv", "validation": "dev.tsv"}, "sentence", "label",
                            ("0", "1"), ("negative", "positive"), "validation", ("nyu-mll/glue", "sst2"),
                            glue_quoting=True),
    # IMDB has no development set; its test split is the customary place to evaluate.
    "imdb": SentimentSource("imdb", {"train": "train.csv", "test": "test.csv"}, "text", "label", ("0", "1"),
                            ("neg", "pos"), "test", ("stanfordnlp/imdb", None)),
}
_ALIASES = {"stanfordnlp/imdb": "imdb", "sst-2": "sst2"}


def truncate(ids: list[int], budget: int, strategy: Truncation, head_fraction: float) -> list[int]:
    """Cut `ids` to `budget` tokens by `strategy` (the caller has checked that it is too long)."""
    if strategy == "head":
        return ids[:budget]
    if strategy == "tail":
        return ids[len(ids) - budget:]
    head = round(budget * head_fraction)
    return ids[:head] + ids[len(ids) - (budget - head):]


def _sort_labels(values: set[str]) -> list[str]:
    if all(v.lstrip("-").isdigit() for v in values):
        return sorted(values, key=int)
    return sorted(values)


class SentimentDataModule(TokenizedDataModule):
    """Single-text classification with string labels mapped to ids.

    Args:
        tokenizer: Path to a tokenizer folder or tokenizer.json; train.py defaults it to the folder of
            `model.pretrained`.
        dataset: `sst2`, `imdb`, or another hub name (with `dataset_config`); None to read local files.
        dataset_config: Hub config name, for hub datasets other than sst2 and imdb.
        train_file: Local training file (CSV, TSV, JSON or JSONL).
        val_file: Local validation file.
        test_file: Local labelled test file.
        text_column: Column of the text (for local files and other hub datasets; sst2 and imdb have theirs).
        label_column: Column of the label (likewise).
        label_names: The labels as spelled in the data, in id order; by default the sorted training labels.
        skip_labels: Rows with these label values are left out (e.g. IMDB's unlabelled `-1`); counted in the log.
        max_length: Longest sequence, special tokens included.
        truncation: `head`, `tail`, `head+tail` or `error` for documents longer than `max_length`.
        head_fraction: Share of the budget kept from the start under `head+tail`.
        batch_size: Training batch size.
        eval_batch_size: Evaluation batch size (defaults to `batch_size`).
        group_by_length: Batch similar lengths together.
        num_workers: DataLoader worker processes.
        data_root: Folder of local dataset copies (defaults to $LITBERT_DATA).
        cache_dir: Folder for tokenized caches.
        seed: Seed (loading is deterministic; kept for symmetry).
    """

    def __init__(
        self,
        tokenizer: str | None = None,
        dataset: str | None = None,
        dataset_config: str | None = None,
        train_file: str | None = None,
        val_file: str | None = None,
        test_file: str | None = None,
        text_column: str = "text",
        label_column: str = "label",
        label_names: list[str] | None = None,
        skip_labels: list[str] | None = None,
        max_length: int = 256,
        truncation: Truncation = "head",
        head_fraction: float = 0.25,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        group_by_length: bool = False,
        num_workers: int = 0,
        data_root: str | None = None,
        cache_dir: str | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(tokenizer, max_length, batch_size, eval_batch_size, num_workers, data_root, cache_dir,
                         group_by_length, seed)
        self.save_hyperparameters(ignore=["label_names"])  # the task logs the final label names (linked from here)
        check_choice("truncation", truncation, Truncation, DataError)
        if not 0.0 <= head_fraction <= 1.0:
            raise DataError(f"head_fraction={head_fraction} must lie in [0, 1].")
        check_source(dataset, train_file, {"val_file": val_file, "test_file": test_file}, data_root)
        self.known = None if train_file else SENTIMENT_SOURCES.get(_ALIASES.get(dataset or "", dataset or ""))
        if self.known is not None:
            if dataset_config is not None:
                raise DataError(f"data.dataset={dataset!r} has one version; remove data.dataset_config="
                                f"{dataset_config!r} (it names the config of other hub datasets).")
            defaults = inspect.signature(SentimentDataModule.__init__).parameters
            for name, value, own in (("text_column", text_column, self.known.text_column),
                                     ("label_column", label_column, self.known.label_column)):
                if value not in (defaults[name].default, own):
                    raise DataError(f"data.{name}={value!r}, but {dataset}'s {name.split('_')[0]} is in column "
                                    f"{own!r}; remove data.{name} (it is for local files and other hub datasets).")
        elif train_file is not None and dataset_config is not None:
            raise DataError(f"data.dataset_config={dataset_config!r} names a hub config, but the data comes from local "
                            f"files; remove it.")
        self.dataset, self.dataset_config = dataset, dataset_config
        self.files = {"train": train_file, "validation": val_file, "test": test_file}
        self.text_column = self.known.text_column if self.known else text_column
        self.label_column = self.known.label_column if self.known else label_column
        self.skip_labels = set(skip_labels or [])
        self.truncation, self.head_fraction = truncation, head_fraction
        self.skipped: dict[str, int] = {}
        self.truncated: dict[str, int] = {}
        self._raw: dict[str, tuple[dict[str, list[Any]], Any, str]] = {}
        if label_names is not None:
            self.label_values = [str(v) for v in label_names]
        elif self.known is not None:
            self.label_values = list(self.known.labels)
        else:  # the label set comes from the training data, so it is known before setup() for the model
            train, _, _ = self._read("train")
            self.label_values = _sort_labels(set(train[self.label_column]))
            log.info("labels found in the training data: %s", self.label_values)
        named = self.known is not None and label_names is None
        self.label_names = list(self.known.label_names) if named else list(self.label_values)
        self.num_labels = len(self.label_values)

    # ---- the label mapping travels with checkpoints ----------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"label_values": self.label_values, "label_names": self.label_names}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.label_values = list(state_dict["label_values"])
        self.label_names = list(state_dict["label_names"])
        self.num_labels = len(self.label_values)

    # ---- reading ----------------------------------------------------------------------------------------------

    def _read(self, split: str) -> tuple[dict[str, list[Any]], Any, str]:
        """(columns with text, label and _line; identity for the cache; a name for messages) of one split."""
        if split in self._raw:
            return self._raw[split]
        needed = [self.text_column, self.label_column]
        if self.files["train"] is not None:
            path = self.files[split]
            if path is None:
                raise DataError(f"No {split} file given; set {'val' if split == 'validation' else split}_file.")
            result = read_table(path, needed), file_identity(path), str(path)
        else:
            result = self._read_named(split, needed)
        columns = result[0]
        columns[self.label_column] = [str(v) for v in columns[self.label_column]]
        self._raw[split] = result
        return result

    def _read_named(self, split: str, needed: list[str]) -> tuple[dict[str, list[Any]], Any, str]:
        root = data_root(self.data_root)
        known = self.known
        if known is not None and root is not None and (root / known.folder).is_dir():
            if split not in known.files:
                raise DataError(f"{self.dataset} has no {split!r} split locally; it has {sorted(known.files)}.")
            path = root / known.folder / known.files[split]
            reader = read_delimited(path, "\t", needed, quoting=False) if known.glue_quoting \
                else read_table(path, needed)
            return reader, file_identity(path), str(path)
        name, config = known.hub if known else (self.dataset, self.dataset_config)
        hub = load_hub_split(name, config, split)
        missing = [c for c in needed if c not in hub.column_names]
        if missing:
            raise DataError(f"Hub dataset {name!r} split {split!r} lacks column(s) {missing}; it has "
                            f"{hub.column_names}. Set text_column / label_column.")
        labels = hub[self.label_column]
        feature = hub.features[self.label_column]
        if isinstance(feature, datasets.ClassLabel) and known is None:
            labels = [feature.names[v] if v >= 0 else str(v) for v in labels]
        columns = {self.text_column: hub[self.text_column], self.label_column: labels,
                   "_line": list(range(1, len(hub) + 1))}
        return columns, ["hub", name, config, split, hub._fingerprint], f"{name}[{split}]"

    # ---- tokenization -----------------------------------------------------------------------------------------

    def _encode(self, batch: dict[str, list[Any]], where: str) -> dict[str, list[Any]]:
        pieces = self.tokenizer(batch["text"], add_special_tokens=False, return_attention_mask=False,
                                return_token_type_ids=False, verbose=False)["input_ids"]
        budget = self.max_length - self.template.num_special()
        out: dict[str, list[Any]] = {"input_ids": [], "truncated": [], "labels": batch["label"]}
        if self.uses_token_types:
            out["token_type_ids"] = []
        for ids, line in zip(pieces, batch["line"], strict=True):
            cut = len(ids) > budget
            if cut and self.truncation == "error":
                raise DataError(f"{where}, line {line}: {len(ids)} tokens, more than the {budget} that "
                                f"max_length={self.max_length} leaves, and truncation='error'; raise max_length or "
                                f"choose head, tail or head+tail.")
            if cut:
                ids = truncate(ids, budget, self.truncation, self.head_fraction)  # type: ignore[arg-type]
            for key, values in self.encode_types(*self.template.wrap(ids)).items():
                out[key].append(values)
            out["truncated"].append(cut)
        return out

    def _build(self, split: str) -> datasets.Dataset:
        columns, identity, where = self._read(split)
        settings = (self.max_length, self.truncation, self.head_fraction, sorted(self.skip_labels),
                    self.label_values, self.text_column, self.label_column, 1)
        key = fingerprint(split, identity, self.tokenizer_key(), settings)

        def raw() -> datasets.Dataset:
            index = {label: i for i, label in enumerate(self.label_values)}
            texts, labels, lines = [], [], []
            skipped = 0
            for text, label, line in zip(columns[self.text_column], columns[self.label_column], columns["_line"],
                                         strict=True):
                if label in self.skip_labels:
                    skipped += 1
                    continue
                if label not in index:
                    raise DataError(f"{where}, line {line}: label {label!r} is not one of {self.label_values}; fix "
                                    f"the row, add it to label_names, or list it in skip_labels.")
                if not isinstance(text, str):
                    raise DataError(f"{where}, line {line}: {self.text_column} is {text!r}, not a string.")
                texts.append(text)
                labels.append(index[label])
                lines.append(line)
            if not texts:
                raise DataError(f"{where}: no examples left (skip_labels={sorted(self.skip_labels)} removed all "
                                f"{skipped}); check the file and the settings.")
            return datasets.Dataset.from_dict({"text": texts, "label": labels, "line": lines})

        dataset = cached_map(raw, functools.partial(self._encode, where=where), cache_dir=self.cache_path,
                             name=f"sentiment-{split}", key=key)
        self.skipped[split] = len(columns["_line"]) - len(dataset)
        if self.skipped[split]:
            log.info("%s: skip_labels=%s left out %d of %d rows", where, sorted(self.skip_labels),
                     self.skipped[split], len(columns["_line"]))
        self.truncated[split] = sum(dataset["truncated"])
        if self.truncated[split]:
            log.warning("%s: %d of %d documents were longer than max_length=%d and were cut (%s)", where,
                        self.truncated[split], len(dataset), self.max_length, self.truncation)
        return dataset

    @property
    def has_test_split(self) -> bool:
        """Whether `test` has a labelled split to run (SST-2's test labels are not public)."""
        if self.known is not None:
            return "test" in self.known.files
        return self.files["test"] is not None or self.files["train"] is None  # a hub dataset: its test split

    def setup(self, stage: str | None = None) -> None:
        val_split = self.known.validation_split if self.known else "validation"
        wanted = {"fit": ["train", val_split], "validate": [val_split], "test": ["test"]}
        splits = [s for st, names in wanted.items() if stage in (None, st) for s in names]
        for split in splits:
            if split == "test" and self.known is None and self.files["train"] is not None and not self.files["test"]:
                continue
            if split not in self.datasets:
                self.datasets[split] = self._build(split)
        self.val_split = val_split

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_split, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)
