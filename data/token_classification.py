"""Token classification (NER, chunking, POS): CoNLL-2003 or any CoNLL-style column file.

Words are split into sub-tokens; the word's label goes on its first sub-token and the others get -100, as in
BERT's NER setup (Devlin et al., 2019, section 5.3), or on every sub-token (`label_all_subtokens`). Sentences with
more sub-tokens than fit in `max_length` are split, at word boundaries, into consecutive windows, each a separate
example with its `sentence` index kept, so nothing is cut; the number split is logged. With `label_all_subtokens`, a
`B-` word's later sub-tokens take the chunk's `I-` tag.

Tags: CoNLL-2003 was released in IOB1 (a chunk starts with I- unless it follows a chunk of the same type); most
copies, and this project's, use IOB2 (every chunk starts with B-). `tag_scheme="auto"` converts a file that has
any chunk starting with I- (which IOB2 forbids) and logs it; `iob1` always converts; `iob2` refuses such files.

Deviations, on purpose:
- Windows do not overlap, so every word is predicted exactly once. Evaluation batches carry each window's
  `sentence`, `window` and `parts` (its sentence's number of windows) and the `word_ids`, so that entities are
  scored over whole sentences, on each word's first sub-token (whatever `label_all_subtokens` trains on).
- A word the tokenizer erases entirely (e.g. a lone control character) is given the unknown token, so its label
  is not lost; the count is logged.

New text (`predict_file`, read by `python train.py predict`) is a column file of words (a word a line, blank lines
between sentences; other columns, tags among them, are not read), split into windows as above; `write_predictions`
gives each word the tag predicted on its first sub-token, as CoNLL lines `word<TAB>tag`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import datasets

from data.base import TokenizedDataModule
from data.sources import (
    ConllSentence,
    DataError,
    cached_map,
    check_source,
    data_root,
    describe_files,
    file_identity,
    fingerprint,
    local_split_file,
    read_conll,
)
from encoders.choices import check_choice

log = logging.getLogger(__name__)

TagScheme = Literal["auto", "iob1", "iob2", "none"]


def _chunk_type(tag: str) -> str | None:
    return tag[2:] if tag[:2] in ("B-", "I-") else None


def starts_with_inside(tags: list[str]) -> int | None:
    """Position of the first I- tag that opens a chunk (allowed in IOB1, not in IOB2), or None."""
    previous: str | None = None
    for i, tag in enumerate(tags):
        kind = _chunk_type(tag)
        if tag.startswith("I-") and previous != kind:
            return i
        previous = kind
    return None


def iob1_to_iob2(tags: list[str]) -> list[str]:
    """IOB1 -> IOB2: an I- tag that opens a chunk (sentence start, after O or another type) becomes B-."""
    out = []
    previous: str | None = None
    for tag in tags:
        kind = _chunk_type(tag)
        out.append("B-" + kind if tag.startswith("I-") and previous != kind else tag)
        previous = kind
    return out


class TokenClassificationDataModule(TokenizedDataModule):
    """Sentences of a CoNLL-style column file, tokenized with per-token labels.

    Args:
        tokenizer: A tokenizer folder, tokenizer.json or hub id (`org/name[@revision]`); train.py defaults it to
            `model.pretrained`.
        dataset: `conll2003` (or `eriktks/conll2003`), read from the data root; or None to read local files.
        train_file: Local CoNLL column file for training.
        val_file: Local CoNLL column file for validation.
        test_file: Local CoNLL column file for testing.
        predict_file: A file of words to tag with `python train.py predict`: a word a line (in `word_column`), blank
            lines between sentences; its tags, if any, are not read.
        word_column: Column of the word (0-based).
        label_column: Column of the tag (negative counts from the end; CoNLL-2003 NER is -1, chunks -2, POS 1).
        tag_scheme: `auto` (convert IOB1 when detected), `iob1` (always convert), `iob2` (refuse IOB1), or `none`
            for tags that are not chunks (POS).
        label_names: The tags in id order; by default the training tags, sorted with `O` first.
        label_all_subtokens: Put the word's label on every sub-token instead of only the first.
        max_length: Longest sequence, special tokens included; longer sentences become several windows.
        data_root: Folder of local dataset copies (defaults to $LITBERT_DATA).
        loading: The loader settings of `TokenizedDataModule` (batch sizes, workers, cache, seed, ...).
    """

    label_state = ("label_names",)
    eval_columns = ("word_ids", "sentence", "window", "parts")

    def __init__(
        self,
        tokenizer: str | None = None,
        dataset: str | None = None,
        train_file: str | None = None,
        val_file: str | None = None,
        test_file: str | None = None,
        predict_file: str | None = None,
        word_column: int = 0,
        label_column: int = -1,
        tag_scheme: TagScheme = "auto",
        label_names: list[str] | None = None,
        label_all_subtokens: bool = False,
        max_length: int = 128,
        data_root: str | None = None,
        **loading: Any,
    ) -> None:
        super().__init__(tokenizer, max_length=max_length, data_root=data_root, **loading)
        self.save_hyperparameters(ignore=["label_names"])  # the task logs the final label names (linked from here)
        check_choice("tag_scheme", tag_scheme, TagScheme, DataError)
        check_source(dataset, train_file, {"val_file": val_file, "test_file": test_file}, data_root)
        self.dataset = dataset
        self.files = {"train": train_file, "validation": val_file, "test": test_file}
        self.predict_file = predict_file
        self.word_column, self.label_column = word_column, label_column
        self.tag_scheme = tag_scheme
        self.label_all_subtokens = label_all_subtokens
        self.sentences: dict[str, list[ConllSentence]] = {}
        self.windows: dict[str, dict[str, int]] = {}
        # The label set is needed by the model before setup(): read the training tags now.
        if label_names is None:
            tags = {tag for sentence in self._sentences("train") for tag in sentence.tags}
            label_names = sorted(tags, key=lambda tag: (tag != "O", tag[2:], tag))
        repeated = sorted({tag for tag in label_names if list(label_names).count(tag) > 1})
        if repeated:
            raise DataError(f"data.label_names lists {repeated} more than once; each tag needs one id.")
        self.label_names = list(label_names)
        self.num_labels = len(self.label_names)

    # ---- reading ----------------------------------------------------------------------------------------------

    def _path(self, split: str) -> str:
        if split == "predict":
            return self.predict_file  # type: ignore[return-value]
        if (path := self.given_file(split)) is not None:
            return path
        local = local_split_file(self.dataset, None, split, data_root(self.data_root))  # type: ignore[arg-type]
        if local is None:
            raise DataError(f"No local copy of {self.dataset!r} under the data root (${'LITBERT_DATA'}); token "
                            f"classification reads CoNLL column files, so pass train_file/val_file/test_file.")
        return str(local)

    def _sentences(self, split: str) -> list[ConllSentence]:
        if split in self.sentences:
            return self.sentences[split]
        path = self._path(split)
        sentences = read_conll(path, self.word_column, None if split == "predict" else self.label_column)
        if self.tag_scheme != "none" and split != "predict":
            opening = next(((s, i) for s in sentences if (i := starts_with_inside(s.tags)) is not None), None)
            if opening is not None and self.tag_scheme == "iob2":
                sentence, i = opening
                raise DataError(f"{path}, line {sentence.lines[i]}: tag {sentence.tags[i]!r} opens a chunk, which "
                                f"IOB2 forbids; the file looks like IOB1: set tag_scheme='iob1' (or 'auto').")
            if self.tag_scheme == "iob1" or opening is not None:
                for sentence in sentences:
                    sentence.tags = iob1_to_iob2(sentence.tags)
                log.info("%s: tags converted from IOB1 to IOB2", path)
        self.sentences[split] = sentences
        return sentences

    # ---- tokenization -----------------------------------------------------------------------------------------

    def _encode(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        # A space before every word but the first gives byte-level BPE its word-start marker (Ġ), as in
        # running text; WordPiece's pre-tokenizer drops the space.
        words = [[w if i == 0 else " " + w for i, w in enumerate(sentence)] for sentence in batch["words"]]
        encoded = self.tokenizer(words, is_split_into_words=True, add_special_tokens=False,
                                 return_attention_mask=False, return_token_type_ids=False, verbose=False)
        budget = self.max_length - self.template.num_special()
        continuation = self._continuation()
        out: dict[str, list[Any]] = {"input_ids": [], "labels": [], "word_ids": [], "sentence": [], "window": [],
                                     "parts": []}
        if self.uses_token_types:
            out["token_type_ids"] = []
        erased = 0
        for row, (sentence, labels) in enumerate(zip(batch["words"], batch["labels"], strict=True)):
            pieces: list[list[int]] = [[] for _ in sentence]
            for token, word in zip(encoded["input_ids"][row], encoded.word_ids(row), strict=True):
                pieces[word].append(token)
            for i, ids in enumerate(pieces):
                if not ids:
                    pieces[i] = [self.tokenizer.unk_token_id]
                    erased += 1
                if len(pieces[i]) > budget:
                    raise DataError(f"{batch['path'][row]}, line {batch['lines'][row][i]}: word {sentence[i]!r} "
                                    f"has {len(pieces[i])} sub-tokens, more than a window of max_length="
                                    f"{self.max_length} holds; raise max_length.")
            start = 0
            windows = self._windows([len(p) for p in pieces], budget)
            for number, window in enumerate(windows):
                ids, tags, word_ids = [], [], []
                for i in range(start, start + window):
                    ids += pieces[i]
                    word_ids += [i] * len(pieces[i])
                    rest = continuation[labels[i]] if self.label_all_subtokens else -100
                    tags += [labels[i]] + [rest] * (len(pieces[i]) - 1)
                full_ids, types = self.template.wrap(ids)
                before, after = len(self.template.single[0]), len(self.template.single[1])
                out["input_ids"].append(full_ids)
                out["labels"].append([-100] * before + tags + [-100] * after)
                out["word_ids"].append([-1] * before + word_ids + [-1] * after)
                out["sentence"].append(batch["sentence"][row])
                out["window"].append(number)
                out["parts"].append(len(windows))
                if self.uses_token_types:
                    out["token_type_ids"].append(types)
                start += window
        out["erased"] = [erased] + [0] * (len(out["input_ids"]) - 1)
        return out

    def _continuation(self) -> list[int]:
        """The label of a word's later sub-tokens under `label_all_subtokens`, by the word's label id: the chunk's
        inside tag for a `B-` tag (so that a word of three sub-tokens is one chunk, not three, as transformers'
        run_ner does), the word's own label otherwise or where the label set has no inside tag of that type."""
        index = {tag: i for i, tag in enumerate(self.label_names)}
        return [index.get("I-" + tag[2:], i) if tag.startswith("B-") else i for i, tag in enumerate(self.label_names)]

    @staticmethod
    def _windows(lengths: list[int], budget: int) -> list[int]:
        """Numbers of words per window: greedy, never splitting a word."""
        windows, used, count = [], 0, 0
        for length in lengths:
            if used + length > budget:
                windows.append(count)
                used, count = 0, 0
            used += length
            count += 1
        windows.append(count)
        return windows

    def _build(self, split: str) -> datasets.Dataset:
        path = self._path(split)
        settings = (self.word_column, self.label_column, self.tag_scheme, self.label_names, self.max_length,
                    self.label_all_subtokens, 2)
        key = fingerprint(split, file_identity(path), self.tokenizer_key(), settings)

        def raw() -> datasets.Dataset:
            sentences = self._sentences(split)
            index = {tag: i for i, tag in enumerate(self.label_names)}
            labels = []
            for sentence in sentences:
                if split == "predict":  # words without tags: a placeholder id, removed once tokenized
                    labels.append([0] * len(sentence.words))
                    continue
                for tag, line in zip(sentence.tags, sentence.lines, strict=True):
                    if tag not in index:
                        raise DataError(f"{path}, line {line}: tag {tag!r} is not in the label set {self.label_names}"
                                        f"; fix the file or add the tag to label_names.")
                labels.append([index[tag] for tag in sentence.tags])
            return datasets.Dataset.from_dict({
                "words": [s.words for s in sentences], "labels": labels, "lines": [s.lines for s in sentences],
                "sentence": list(range(len(sentences))), "path": [path] * len(sentences)})

        dataset = cached_map(raw, self._encode, cache_dir=self.cache_path, name=f"tokens-{split}", key=key)
        if split == "predict":
            dataset = dataset.remove_columns("labels")
        windows = dataset["window"]
        split_sentences = sum(1 for w in windows if w == 1)
        extra = sum(1 for w in windows if w > 0)
        self.windows[split] = {"sentences": len(windows) - extra, "examples": len(windows),
                               "split_sentences": split_sentences}
        if split_sentences:
            log.warning("%s: %d of %d sentences were longer than max_length=%d and were split into windows "
                        "(%d examples in all); nothing was cut", path, split_sentences, len(windows) - extra,
                        self.max_length, len(windows))
        erased = sum(dataset["erased"])
        if erased:
            log.warning("%s: %d words had no sub-tokens and were given the unknown token", path, erased)
        return dataset

    # ---- the source, and predictions of new text ----------------------------------------------------------

    def describe_source(self) -> str:
        if self.files["train"] is not None:
            source = f"files: {describe_files(self.files)}"
        else:
            splits = ["train", *self.val_split_names, *(["test"] if self.has_test_split else [])]
            source = f"dataset {self.dataset}: " + ", ".join(f"{split} split {split!r} ({self._path(split)})"
                                                             for split in splits)
        return source + (f"; predicting {self.predict_file}" if self.predict_file else "")

    def check_predictions_path(self, path: str | os.PathLike[str]) -> None:
        """Refuse an output name whose suffix says another format than the CoNLL lines `write_predictions` writes."""
        if Path(path).suffix.lower() in (".json", ".jsonl", ".csv"):
            raise DataError(f"--output {path}: tags are written as CoNLL lines (`word<TAB>tag`, a blank line between "
                            f"sentences), not {Path(path).suffix}; name the file .txt, .conll or .tsv.")

    def write_predictions(self, outputs: Sequence[Sequence[float]], path: str | os.PathLike[str]) -> Path:
        """The words of `predict_file` with their tags, as CoNLL lines `word<TAB>tag` and a blank line after each
        sentence, from `outputs`: the predicted tag ids of each example (window) of the predict split, in its order
        (padding after the tokens). A word's tag is the one predicted on its first sub-token."""
        self.check_predictions_path(path)
        dataset = self.datasets["predict"]
        sentences = self._sentences("predict")
        if len(outputs) != len(dataset):
            raise DataError(f"{len(outputs)} predictions for the {len(dataset)} examples of {self.predict_file}; "
                            f"predict the whole file.")
        tags: list[list[str | None]] = [[None] * len(s.words) for s in sentences]
        for values, word_ids, sentence in zip(outputs, dataset["word_ids"], dataset["sentence"], strict=True):
            for position, word in enumerate(word_ids):
                if word >= 0 and (position == 0 or word_ids[position - 1] != word):
                    tags[sentence][word] = self.label_names[int(values[position])]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as handle:
            for sentence, predicted in zip(sentences, tags, strict=True):
                handle.writelines(f"{word}\t{tag}\n" for word, tag in zip(sentence.words, predicted, strict=True))
                handle.write("\n")
        return path
