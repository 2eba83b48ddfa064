"""Token classification (NER, chunking, POS): CoNLL-2003 or any CoNLL-style column file, a hub dataset of words and
tags (the hub's `conll2003`, `wnut_17`), or JSON lines of `{"tokens": [...], "tags": [...]}`.

Sources. A column file holds a word a line (`word_column`, `label_column` are column numbers), blank lines between
sentences. A hub dataset (`dataset`, with `dataset_config`) and a `.json`/`.jsonl` file hold a sentence a row, whose
fields (`word_column`, `label_column` are field names) are a list of words and a list of tags: tag names, or ids
that a hub `ClassLabel` feature names (`features[tag].feature.names`, which then give the default label order, as
run_ner has it) or that `label_names` names. Unset, the fields are `tokens` and, for the tags, `ner_tags` in a hub
dataset (conll2003's and wnut_17's name) and `tags` in JSON lines. A row whose fields are no lists, differ in length,
hold no words or hold a tag outside the label set is an error naming the file and line (hub: dataset, split and row)
and the field.

Words are split into sub-tokens; the word's label goes on its first sub-token and the others get -100, as in
BERT's NER setup (Devlin et al., 2019, section 5.3), or on every sub-token (`label_all_subtokens`). Sentences with
more sub-tokens than fit in `max_length` are split, at word boundaries, into consecutive windows, each a separate
example with its `sentence` index kept, so no word is cut off; the number split is logged. A single word longer than
a window (a URL, a run of dashes) keeps the sub-tokens a window holds, its tag on the first, and is logged. With
`label_all_subtokens`, a `B-` word's later sub-tokens take the chunk's `I-` tag.

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
between sentences; other columns, tags among them, are not read), JSON lines of words, or, with `predict_format:
lines`, text a sentence a line, words separated by spaces. Only the columns beside the words tell a column file from
text whose every line has as many words, so a file to tag that reads as columns where it may be text (every
sentence one line, one sentence of several lines without a blank line, or no column beside the words that holds
tags) is refused unless `predict_format` says which; a `.csv` (a table of texts) is refused too. The sentences are
split into windows as above; `write_predictions` gives each word the tag predicted on its first sub-token, as CoNLL
lines `word<TAB>tag`, a column file's lines keeping their columns.
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
    counted,
    data_root,
    describe_files,
    file_identity,
    fingerprint,
    load_hub_split,
    local_split_file,
    one_file_per_split,
    read_conll,
    read_json_records,
    read_sentence_lines,
    written_whole,
)
from encoders.choices import check_choice

log = logging.getLogger(__name__)

TagScheme = Literal["auto", "iob1", "iob2", "none"]
PredictFormat = Literal["columns", "lines"]
CHUNK_PREFIXES = ("B-", "I-", "E-", "S-")  # IOB and BIOES, as tasks.metrics.is_chunk_tagging reads them
TABLE_SUFFIXES = (".json", ".jsonl")  # files of rows (a sentence a row); any other is a column file, but:
TEXT_TABLE_SUFFIXES = (".csv",)  # tables of texts, not of words: refused rather than read as columns


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


def row_tags(words: Any, tags: Any, fields: tuple[str, str], id_names: list[str] | None) -> list[str]:
    """The tag names of one row of words and tags (none where `tags` is None), its tags given by name or by an id
    that `id_names` names; a `DataError` says what is wrong with the row, the caller where it is."""
    for field, value in zip(fields, (words, tags), strict=True):
        if value is not None and not isinstance(value, list):
            raise DataError(f"field {field!r} is {type(value).__name__} {str(value)[:60]!r}, not a list; a row is a "
                            f"sentence: a list of words and a list of their tags.")
    if not words:
        raise DataError(f"field {fields[0]!r} is empty; a sentence needs at least one word: remove the row.")
    bad = next((word for word in words if not isinstance(word, str)), None)
    if bad is not None:
        raise DataError(f"field {fields[0]!r} holds {type(bad).__name__} {bad!r}; words are strings.")
    if tags is None:
        return []
    if len(tags) != len(words):
        raise DataError(f"field {fields[0]!r} has {len(words)} words and field {fields[1]!r} {len(tags)} tags; each "
                        f"word needs one tag.")
    named = []
    for tag in tags:
        if isinstance(tag, int) and not isinstance(tag, bool):
            if id_names is None:
                raise DataError(f"field {fields[1]!r} holds tag ids ({tag}) that nothing names; set data.label_names "
                                f"to the tag names in id order, or write the tags as names.")
            if not 0 <= tag < len(id_names):
                raise DataError(f"tag id {tag} in field {fields[1]!r} names none of the {len(id_names)} tags "
                                f"{id_names}; fix the row or data.label_names.")
            tag = id_names[tag]
        elif not isinstance(tag, str):
            raise DataError(f"field {fields[1]!r} holds {type(tag).__name__} {tag!r}; a tag is a name (a string) or "
                            f"an id (an integer).")
        named.append(tag)
    return named


class TokenClassificationDataModule(TokenizedDataModule):
    """Sentences of words and their tags, tokenized with per-token labels: from CoNLL-style column files, JSON lines,
    or a hub dataset.

    Args:
        tokenizer: A tokenizer folder, tokenizer.json or hub id (`org/name[@revision]`); train.py defaults it to
            `model.pretrained`.
        dataset: A hub dataset of words and tags (`conll2003`, `wnut_17`, `org/name`, or a folder `load_dataset`
            reads); `conll2003` (or `eriktks/conll2003`) is read from its local copy under the data root when there
            is one. None to read local files.
        dataset_config: Hub config name, for datasets that have several.
        train_files: Local training file: a CoNLL column file, or `.json`/`.jsonl` rows of words and tags.
        val_files: Local validation file (either format).
        test_files: Local test file (either format).
        predict_file: A file of words to tag with `python train.py predict`: a column file (a word a line in
            `word_column`, blank lines between sentences), JSON lines of words, or text a sentence a line
            (`predict_format: lines`); its tags, if any, are not read.
        predict_format: How `predict_file` is read: `columns` a column file, `lines` text a sentence a line (words
            separated by spaces); unset, by its suffix (`.json`/`.jsonl` rows of words, `.csv` refused, any other a
            column file, refused where it may be text: see `_check_predict_columns`).
        word_column: The words: a column number in column files (unset: 0), a field name in JSON lines and hub
            datasets (unset: `tokens`).
        label_column: The tags: a column number in column files (unset: -1, the last; CoNLL-2003 chunks -2, POS 1),
            a field name in JSON lines (unset: `tags`) and hub datasets (unset: `ner_tags`).
        tag_scheme: `auto` (convert IOB1 when detected), `iob1` (always convert), `iob2` (refuse IOB1), or `none`
            for tags that are not chunks (POS).
        label_names: The tags in id order; by default a hub dataset's `ClassLabel` names, else the training tags
            sorted with `O` first. Names the ids of JSON lines whose tags are ids.
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
        dataset_config: str | None = None,
        train_files: str | list[str] | None = None,
        val_files: str | list[str] | None = None,
        test_files: str | list[str] | None = None,
        predict_file: str | None = None,
        predict_format: PredictFormat | None = None,
        word_column: int | str | None = None,
        label_column: int | str | None = None,
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
        if predict_format is not None:
            check_choice("predict_format", predict_format, PredictFormat, DataError)
        train_files, val_files, test_files = one_file_per_split(train_files=train_files, val_files=val_files,
                                                                test_files=test_files)
        check_source(dataset, train_files, {"val_files": val_files, "test_files": test_files}, data_root)
        if train_files is not None and dataset_config is not None:
            raise DataError(f"data.dataset_config={dataset_config!r} names a hub config, but the data comes from "
                            f"local files; remove it.")
        self.dataset, self.dataset_config = dataset, dataset_config
        self.files = {"train": train_files, "validation": val_files, "test": test_files}
        self.predict_file, self.predict_format = predict_file, predict_format
        self.word_column, self.label_column = word_column, label_column
        self.tag_scheme = tag_scheme
        self.label_all_subtokens = label_all_subtokens
        self.sentences: dict[str, list[ConllSentence]] = {}
        self.hub_tables: dict[str, datasets.Dataset] = {}
        self.class_names: list[str] | None = None  # a hub dataset's ClassLabel names of its tags, in id order
        self.windows: dict[str, dict[str, int]] = {}
        self.label_names = list(label_names) if label_names is not None else None  # names tag ids while reading
        # The label set is needed by the model before setup(): read the training tags now.
        given = label_names is not None
        if label_names is None:
            tags = {tag for sentence in self._sentences("train") for tag in sentence.tags}
            label_names = self.class_names or sorted(tags, key=lambda tag: (tag != "O", tag[2:], tag))
        repeated = sorted({tag for tag in label_names if list(label_names).count(tag) > 1})
        if repeated:
            raise DataError(f"data.label_names lists {repeated} more than once; each tag needs one id.")
        self.label_names = list(label_names)
        self.num_labels = len(self.label_names)
        if self.num_labels < 2:  # else the head refuses num_labels=1, a setting the user never gave
            origin = "data.label_names" if given else f"the tags of {self._where('train')}"
            raise DataError(f"{origin} hold one tag, {self.label_names}: tagging needs at least two (O and an entity "
                            f"type). Check the tag column (data.label_column), or list every tag in data.label_names.")
        self._check_chunk_tags(given)

    def _check_chunk_tags(self, given: bool) -> None:
        """Chunk tags beside a tag that is neither O nor a chunk's: a typo (`X-PER`) that would silently turn entity
        F1 into per-token accuracy (`tasks.metrics.is_chunk_tagging`)."""
        if self.tag_scheme == "none":
            return
        chunk = [tag for tag in self.label_names if tag[:2] in CHUNK_PREFIXES and tag[2:]]
        # (a prefix without a type, `B-`, is no chunk tag either)
        other = next((tag for tag in self.label_names if tag != "O" and tag not in chunk), None)
        if not chunk or other is None:
            return
        where = "data.label_names" if given else next(
            self._at("train", sentence.lines[sentence.tags.index(other)]) for sentence in self._sentences("train")
            if other in sentence.tags)
        raise DataError(f"{where}: tag {other!r} is neither O nor a chunk tag (a type after "
                        f"{', '.join(CHUNK_PREFIXES)}), but tags such as {chunk[0]!r} are chunks, scored by entity "
                        f"F1. Fix the tag, or set data.tag_scheme none to score every tag as a single token's, by "
                        f"accuracy.")

    # ---- reading ----------------------------------------------------------------------------------------------

    def _path(self, split: str) -> str | None:
        """The file of a split, or None where it comes from the hub."""
        if split == "predict":
            return self.predict_file
        if (path := self.given_file(split)) is not None:
            return path
        local = local_split_file(self.dataset, self.dataset_config, split,  # type: ignore[arg-type]
                                 data_root(self.data_root))
        return None if local is None else str(local)

    def _hub_table(self, split: str) -> datasets.Dataset:
        if split not in self.hub_tables:
            self.hub_tables[split] = load_hub_split(self.dataset, self.dataset_config, split,  # type: ignore[arg-type]
                                                    root=data_root(self.data_root),
                                                    files="local files (data.train_files, data.val_files)")
        return self.hub_tables[split]

    def _where(self, split: str) -> str:
        """The split's file, or `dataset[split]`, for messages."""
        path = self._path(split)
        return path if path is not None else f"{self.dataset}[{split}]"

    def _at(self, split: str, line: int) -> str:
        """`file, line N` (a hub dataset: `name[split], row N`), for messages."""
        return f"{self._where(split)}, {'row' if self._path(split) is None else 'line'} {line}"

    def _sentences(self, split: str) -> list[ConllSentence]:
        if split in self.sentences:
            return self.sentences[split]
        labelled = split != "predict"
        path = self._path(split)
        source = self._format(split)
        if path is None:
            sentences = self._from_hub(split)
        elif source == "lines":
            sentences = read_sentence_lines(path)
        elif source == "rows":
            words, tags = self._field_names(path, "tags")
            columns = read_json_records(path, [words, tags] if labelled else [words])
            sentences = self._rows(split, columns[words], columns[tags] if labelled else None, columns["_line"],
                                   (words, tags), None)
            if not labelled:
                self._check_words_fit_lines(path, sentences)
        else:
            word_column, label_column = self._column_numbers(path)
            sentences = read_conll(path, word_column, label_column if labelled else None)
            if not labelled and self.predict_format is None:
                self._check_predict_columns(path, sentences)
        if self.tag_scheme != "none" and labelled:
            opening = next(((s, i) for s in sentences if (i := starts_with_inside(s.tags)) is not None), None)
            if opening is not None and self.tag_scheme == "iob2":
                sentence, i = opening
                raise DataError(f"{self._at(split, sentence.lines[i])}: tag {sentence.tags[i]!r} opens a chunk, which "
                                f"IOB2 forbids; the data looks like IOB1: set tag_scheme='iob1' (or 'auto').")
            if self.tag_scheme == "auto" and opening is not None:
                # A warning, as it changes the tags read (also an evaluation file's): in an IOB2 file, an I- tag
                # after O is a mistake that the conversion makes into an entity's start.
                sentence, i = opening
                log.warning("%s: tags converted from IOB1 to IOB2, as tag %r opens a chunk (which IOB2 forbids); "
                            "set data.tag_scheme iob2 to refuse such tags instead", self._at(split, sentence.lines[i]),
                            sentence.tags[i])
            if self.tag_scheme == "iob1" or opening is not None:
                for sentence in sentences:
                    sentence.tags = iob1_to_iob2(sentence.tags)
        self.sentences[split] = sentences
        return sentences

    def _format(self, split: str) -> Literal["hub", "rows", "columns", "lines"]:
        """How a split's file is read: by its suffix, or for the predict file as `predict_format` says; a CSV (a
        table of texts, not of words) and a suffix that contradicts `predict_format` are refused."""
        path = self._path(split)
        if path is None:
            return "hub"
        suffix = Path(path).suffix.lower()
        by_suffix = "rows" if suffix in TABLE_SUFFIXES else "columns"
        setting = self.predict_format if split == "predict" else None
        if suffix in TEXT_TABLE_SUFFIXES:
            way = ("give its texts a sentence a line in a .txt file, with data.predict_format lines, or JSON lines of "
                   "words" if split == "predict" else "give a column file (a word and its tag a line) or JSON lines "
                   "of words and tags")
            raise DataError(f"{path}: a {suffix} file is a table of texts, but tagging reads words (a column file, "
                            f"JSON lines of {{\"tokens\": [...]}}); {way} (docs/data.md, Words and tags).")
        if setting is not None and by_suffix == "rows":
            raise DataError(f"{path} is JSON (its suffix), but data.predict_format={setting!r} reads "
                            f"{'a column file' if setting == 'columns' else 'text, a sentence a line'}; unset "
                            f"data.predict_format, or name the file for what it holds (.txt).")
        return setting or by_suffix

    def _check_predict_columns(self, path: str, sentences: list[ConllSentence]) -> None:
        """Refuse a column file to tag that may as well be text, a sentence a line: every sentence one line of
        several fields, or one sentence of several lines of as many fields (names, two words a line), no blank line
        between, or lines of as many words whose columns beside the words hold no tags (`_check_other_columns_hold_
        tags`). Read as columns, each line would be one word, its first field; `predict_format` says which."""
        width = len(sentences[0].fields[0])
        one_line = all(len(sentence.words) == 1 for sentence in sentences)
        if width == 1:
            return
        if not (one_line or len(sentences) == 1):
            self._check_other_columns_hold_tags(path, sentences)
            return
        first = sentences[0]
        shape = (f"every sentence is one line of {width} fields" if one_line else
                 f"its {len(first.words)} lines of {width} fields have no blank line between them, so they read as "
                 f"one sentence, a word a line")
        raise DataError(f"{path}: {shape} (line {first.lines[0]}: {' '.join(first.fields[0])}), and only "
                        f"the word_column={self.word_column or 0} field of each line would be tagged. If "
                        f"the file is text, a sentence a line, set data.predict_format lines; if it is a column file "
                        f"(a word a line, a blank line between sentences), set data.predict_format columns.")

    def _check_other_columns_hold_tags(self, path: str, sentences: list[ConllSentence]) -> None:
        """Refuse a column file to tag none of whose columns beside the words holds tags: text, a sentence a line,
        whose lines have as many words and blank lines between them (`John lives here`, `Mary works there`), read
        as columns. A column of tags holds the model's tags, chunk tags (`B-person`) or names without lower-case
        letters (POS `NNP`, chunks `B-NP`, NER `O`, token numbers); text's later words hold lower-case letters."""
        width = len(sentences[0].fields[0])
        word = (self.word_column or 0) % width
        known = set(self.label_names or ())

        def tag(value: str) -> bool:
            return value in known or value[:2] in CHUNK_PREFIXES or not any(
                character.isalpha() and not character.isupper() for character in value)

        lines = [(line, fields) for sentence in sentences for line, fields in zip(sentence.lines, sentence.fields,
                                                                                  strict=True)]
        if any(all(tag(fields[column]) for _, fields in lines) for column in range(width) if column != word):
            return
        line, fields, value = next((line, fields, value) for line, fields in lines
                                   for column, value in enumerate(fields) if column != word and not tag(value))
        raise DataError(f"{path}: every line has {width} fields, and no column but the words' (word_column="
                        f"{self.word_column or 0}) holds tags (line {line}: {' '.join(fields)}; {value!r} is no "
                        f"tag): the file may be text, a sentence a line, of which one word a line would be tagged. "
                        f"If it is text, set data.predict_format lines; if it is a column file (a word a line, a "
                        f"blank line between sentences), set data.predict_format columns.")

    @staticmethod
    def _check_words_fit_lines(path: str, sentences: list[ConllSentence]) -> None:
        """Refuse a word to tag that holds a tab or a line break: its `word<TAB>tag` line would become two lines, or
        three fields, and the tags would no longer pair with the words."""
        for sentence in sentences:
            for word, line in zip(sentence.words, sentence.lines, strict=True):
                if any(character in word for character in "\t\n\r"):
                    raise DataError(f"{path}, line {line}: word {word!r} holds a tab or a line break, which the "
                                    f"predictions' `word<TAB>tag` lines cannot hold; replace it with a space, or "
                                    f"split the word in two.")

    def _column_numbers(self, path: str) -> tuple[int, int]:
        for name, value in (("word_column", self.word_column), ("label_column", self.label_column)):
            if isinstance(value, str):
                raise DataError(f"{path} is a column file, whose columns are numbered, but data.{name}={value!r} "
                                f"names a field; give a column number (CoNLL-2003 NER: words 0, tags -1), or read "
                                f"named fields from a .jsonl file or a hub dataset.")
        return (0 if self.word_column is None else self.word_column,  # type: ignore[return-value]
                -1 if self.label_column is None else self.label_column)

    def _field_names(self, where: str, tags: str) -> tuple[str, str]:
        """(words, tags) field names; `tags` is the tag field's name when label_column is unset."""
        for name, value in (("word_column", self.word_column), ("label_column", self.label_column)):
            if value is not None and not isinstance(value, str):
                raise DataError(f"{where} has named fields, but data.{name}={value!r} is a column number (for "
                                f"CoNLL column files); name the field, e.g. tokens, ner_tags or tags.")
        return self.word_column or "tokens", self.label_column or tags  # type: ignore[return-value]

    def _from_hub(self, split: str) -> list[ConllSentence]:
        table = self._hub_table(split)
        words, tags = self._field_names(self._where(split), "ner_tags")
        labelled = split != "predict"
        missing = [c for c in ([words, tags] if labelled else [words]) if c not in table.column_names]
        if missing:
            raise DataError(f"Hub dataset {self.dataset!r} split {split!r} lacks column(s) {missing}; it has "
                            f"{table.column_names}. Set data.word_column / data.label_column to its fields.")
        feature = getattr(table.features[tags], "feature", None)
        names = list(feature.names) if isinstance(feature, datasets.ClassLabel) else None
        if split == "train":
            self.class_names = names
        columns = table.select_columns([words, tags] if labelled else [words]).to_dict()
        return self._rows(split, columns[words], columns[tags] if labelled else None, list(range(len(table))),
                          (words, tags), names)

    def _rows(self, split: str, words: list[Any], tags: list[Any] | None, lines: list[int], fields: tuple[str, str],
              class_names: list[str] | None) -> list[ConllSentence]:
        """Sentences of rows (JSON lines, hub rows): each a list of words and, unless `tags` is None, a list of
        as many tags, given by name or by an id that `class_names` (a ClassLabel's) or `label_names` names."""
        id_names = class_names if class_names is not None else self.label_names
        sentences = []
        for row, (row_words, line) in enumerate(zip(words, lines, strict=True)):
            try:
                named = row_tags(row_words, None if tags is None else tags[row], fields, id_names)
            except DataError as problem:
                raise DataError(f"{self._at(split, line)}: {problem}") from None
            sentences.append(ConllSentence(row_words, named, [line] * len(row_words)))
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
        erased, shortened = 0, []
        for row, (sentence, labels) in enumerate(zip(batch["words"], batch["labels"], strict=True)):
            pieces: list[list[int]] = [[] for _ in sentence]
            for token, word in zip(encoded["input_ids"][row], encoded.word_ids(row), strict=True):
                pieces[word].append(token)
            for i, ids in enumerate(pieces):
                if not ids:
                    pieces[i] = [self.tokenizer.unk_token_id]
                    erased += 1
                if len(pieces[i]) > budget:  # (a URL, a run of dashes): its tag is on its first sub-token
                    pieces[i] = pieces[i][:budget]
                    shortened.append(f"{batch['lines'][row][i]} ({sentence[i][:40]!r})")
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
        out["shortened"] = [shortened] + [[] for _ in out["input_ids"][1:]]
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
        path, where = self._path(split), self._where(split)
        identity = file_identity(path) if path is not None else \
            ["hub", self.dataset, self.dataset_config, split, self._hub_table(split)._fingerprint]
        settings = (self.word_column, self.label_column, self.tag_scheme, self.label_names, self.max_length,
                    self.label_all_subtokens, self._format(split), 4)
        key = fingerprint(split, identity, self.tokenizer_key(), settings)

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
                        raise DataError(f"{self._at(split, line)}: tag {tag!r} is not in the label set "
                                        f"{self.label_names}; fix the data or add the tag to label_names.")
                labels.append([index[tag] for tag in sentence.tags])
            unit = "line" if path is not None else "row"
            return datasets.Dataset.from_dict({
                "words": [s.words for s in sentences], "labels": labels, "lines": [s.lines for s in sentences],
                "sentence": list(range(len(sentences))), "where": [f"{where}, {unit}"] * len(sentences)})

        dataset = cached_map(raw, self._encode, cache_dir=self.cache_path, name=f"tokens-{split}", key=key)
        if split == "predict":
            dataset = dataset.remove_columns("labels")
        windows = dataset["window"]
        split_sentences = sum(1 for w in windows if w == 1)
        extra = sum(1 for w in windows if w > 0)
        self.windows[split] = {"sentences": len(windows) - extra, "examples": len(windows),
                               "split_sentences": split_sentences}
        if split_sentences:
            log.warning("%s: %d of %d sentences were longer than max_length=%d and were split into windows at word "
                        "boundaries (%d examples in all)", where, split_sentences, len(windows) - extra,
                        self.max_length, len(windows))
        erased = sum(dataset["erased"])
        if erased:
            log.warning("%s: %d words had no sub-tokens and were given the unknown token", where, erased)
        shortened = [word for words in dataset["shortened"] for word in words]
        if shortened:
            log.warning("%s: %d word(s) had more sub-tokens than a window of max_length=%d holds and kept their first "
                        "%d (each word's tag is on its first): line(s) %s", where, len(shortened), self.max_length,
                        self.max_length - self.template.num_special(),
                        ", ".join(shortened[:5]) + (", ..." if len(shortened) > 5 else ""))
        return dataset

    # ---- the source, and predictions of new text ----------------------------------------------------------

    def describe_source(self) -> str:
        if self.files["train"] is not None:
            source = f"files: {describe_files(self.files)}"
        else:
            splits = ["train", *self.val_split_names, *(["test"] if self.has_test_split else [])]
            source = f"dataset {self.dataset}: " + ", ".join(
                f"{split} split {split!r} ({self._path(split) or 'hub'})" for split in splits)
        return source + (f"; predicting {self.predict_file}" if self.predict_file else "")

    def check_predictions_path(self, path: str | os.PathLike[str]) -> None:
        """Refuse an output name whose suffix says another format than the CoNLL lines `write_predictions` writes."""
        if Path(path).suffix.lower() in (".json", ".jsonl", ".csv"):
            raise DataError(f"--output {path}: tags are written as CoNLL lines (`word<TAB>tag`, a blank line between "
                            f"sentences), not {Path(path).suffix}; name the file .txt, .conll or .tsv.")

    def describe_predictions(self) -> str:
        """What `write_predictions` tags: `2 sentences, 11 words` (a line a word, a blank line after a sentence)."""
        sentences = self._sentences("predict")
        return f"{counted(len(sentences), 'sentence')}, {counted(sum(len(s.words) for s in sentences), 'word')}"

    def write_predictions(self, outputs: Sequence[Sequence[float]], path: str | os.PathLike[str]) -> Path:
        """The words of `predict_file` with their tags, as CoNLL lines `word<TAB>tag` and a blank line after each
        sentence, from `outputs`: the predicted tag ids of each example (window) of the predict split, in its order
        (padding after the tokens). A word's tag is the one predicted on its first sub-token. A column file's word
        keeps its line's columns before the tag (`EU<TAB>NNP<TAB>B-NP<TAB>B-ORG<TAB>B-ORG`), so that a file with
        tags pairs them with the predicted ones as conlleval reads them; its `-DOCSTART-` lines are left out."""
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
        with written_whole(path) as handle:
            for sentence, predicted in zip(sentences, tags, strict=True):
                # A column file's line keeps its columns (a gold tag last, as conlleval pairs tags); others, the word.
                lines = sentence.fields or [[word] for word in sentence.words]
                handle.writelines("\t".join([*line, tag]) + "\n"  # type: ignore[list-item]
                                  for line, tag in zip(lines, predicted, strict=True))
                handle.write("\n")
        return path
