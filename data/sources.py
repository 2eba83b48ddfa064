"""Where data comes from: the data root, hub names resolved to local copies, and readers that validate.

Every datamodule accepts a dataset name on the Hugging Face hub (with its config name) or local files. Known hub
names resolve first to a local copy under the data root (`$LITBERT_DATA` or an explicit `data_root`), so one config
runs with or without a network; unknown names go to `datasets.load_dataset(name, config_name)`.

The readers turn files into columns (`dict[str, list]`) and check them on the way: a missing file, an empty file,
invalid UTF-8, a missing column or a row of the wrong width raises one `DataError` (or `FileNotFoundError`) naming
the file, the line and the value, and saying what to do. Nothing is skipped silently.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import hashlib
import io
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
from huggingface_hub import constants

from encoders.hub import unanswered

log = logging.getLogger(__name__)

DATA_ROOT_ENV = "LITBERT_DATA"
CACHE_DIR_ENV = "LITBERT_CACHE"


class DataError(ValueError):
    """Bad input data. The message names the file, line or field, the offending value, and what to do."""


class MissingColumns(DataError):
    """A table without the columns read from it, at `where` (`file, header`); a reader that knows which setting
    or file to change gives its own `advice`."""

    def __init__(self, where: str, missing: Sequence[str], header: Sequence[str],
                 advice: str = "Fix the file or set the column names in the config to ones it has.") -> None:
        self.where, self.missing, self.header, self.advice = where, list(missing), list(header), advice
        super().__init__(f"{where}: missing column(s) {self.missing}; the file has columns {self.header}. {advice}")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled as built (a worker's error), not from its message alone
        return type(self), (self.where, self.missing, self.header, self.advice)


# --------------------------------------------------------------------------------------------------------------
# The data root and local copies of hub datasets
# --------------------------------------------------------------------------------------------------------------


def data_root(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The folder holding local dataset copies: `explicit` if given, else `$LITBERT_DATA`, else None."""
    value = explicit if explicit is not None else os.environ.get(DATA_ROOT_ENV)
    if value is None or str(value) == "":
        return None
    root = Path(value).expanduser()
    if not root.is_dir():
        source = "data_root" if explicit is not None else f"${DATA_ROOT_ENV}"
        raise FileNotFoundError(f"{source}={value} is not a folder; point it at the folder holding the datasets.")
    return root


def cache_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Where tokenized datasets are cached: `explicit`, else `$LITBERT_CACHE`, else `~/.cache/litbert`."""
    value = explicit if explicit is not None else os.environ.get(CACHE_DIR_ENV, "~/.cache/litbert")
    path = Path(value).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class LocalCopy:
    """Where a hub dataset lives under the data root: the one place that says so for every known dataset."""

    folder: str  # relative to the data root; `{config}` is replaced by `configs[config_name]`
    splits: Mapping[str, str] = field(default_factory=dict)  # hub split name -> file name inside the folder
    configs: Mapping[str, str] | None = None  # hub config name -> value for `{config}`; None: one version only
    hub_configs: tuple[str, ...] = ()  # with one version only: the hub's names for it, accepted as dataset_config
    config_splits: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # a config's own split files
    quoting: bool = True  # False: TSVs read as GLUE's processors read them, a quote being an ordinary character
    note: str = ""  # logged when the copy is used, for copies that differ from the hub version

    def split_files(self, config: str | None) -> Mapping[str, str]:
        return self.config_splits.get(config or "", self.splits)

    def folder_of(self, config: str | None) -> str | None:
        """The folder of `config`'s copy under the data root; None for a config that has no local copy."""
        if self.configs is None:
            return self.folder
        return self.folder.format(config=self.configs[config]) if config in self.configs else None


_GLUE = LocalCopy(
    "glue/{config}", {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"},
    configs={"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP", "mnli": "MNLI",
             "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI", "ax": "diagnostic"},
    config_splits={
        "mnli": {"train": "train.tsv", "validation_matched": "dev_matched.tsv",
                 "validation_mismatched": "dev_mismatched.tsv", "test_matched": "test_matched.tsv",
                 "test_mismatched": "test_mismatched.tsv"},
        "ax": {"test": "diagnostic.tsv"},
    },
    quoting=False,
)
_IMDB = LocalCopy("imdb", {"train": "train.csv", "test": "test.csv", "unsupervised": "unsup.csv"},
                  hub_configs=("plain_text",))
_CONLL = LocalCopy("conll2003", {"train": "train.txt", "validation": "valid.txt", "test": "test.txt"},
                   hub_configs=("conll2003",))
# Only the tokenized v1 files exist locally; the raw config name resolves to them too, and says so.
_WIKITEXT = LocalCopy(
    "wikitext-{config}",
    {"train": "wiki.train.tokens", "validation": "wiki.valid.tokens", "test": "wiki.test.tokens"},
    configs={"wikitext-2-raw-v1": "2", "wikitext-2-v1": "2"},
    note="the local WikiText-2 copy is the tokenized v1 variant (<unk>, @-@ splits), also for wikitext-2-raw-v1",
)

# Hub names (with and without the organisation prefix) -> local layout.
LOCAL_COPIES: dict[str, LocalCopy] = {
    "glue": _GLUE,
    "nyu-mll/glue": _GLUE,
    "imdb": _IMDB,
    "stanfordnlp/imdb": _IMDB,
    "conll2003": _CONLL,
    "eriktks/conll2003": _CONLL,
    "wikitext": _WIKITEXT,
    "Salesforce/wikitext": _WIKITEXT,
}


def local_copy_folder(name: str, config: str | None, root: Path | None) -> Path | None:
    """The local folder for hub dataset `name`/`config` under `root`, or None when there is none."""
    copy = LOCAL_COPIES.get(name)
    if copy is None or root is None:
        return None
    if copy.configs is None and config is not None and config not in copy.hub_configs:
        raise DataError(f"Dataset {name!r} has one version here (its local copy under {root / copy.folder}); "
                        f"dataset_config={config!r} names none of {list(copy.hub_configs)}. Remove dataset_config.")
    folder = copy.folder_of(config)
    if folder is None:  # e.g. wikitext-103: not copied locally, so it comes from the hub
        log.info("%s: config %r has no local copy (local configs: %s); loading it from the hub", name, config,
                 sorted(copy.configs))
        return None
    path = root / folder
    if not path.is_dir():
        return None
    if copy.note:
        log.warning("%s: %s", name, copy.note)
    return path


def split_file(name: str, config: str | None, split: str, folder: Path) -> Path:
    """The file of one split of hub dataset `name`/`config` in its local `folder` (which need not exist)."""
    splits = LOCAL_COPIES[name].split_files(config)
    if split not in splits:
        raise DataError(f"Dataset {name!r} has no split {split!r}; choose one of {sorted(splits)}.")
    return folder / splits[split]


def local_split_file(name: str, config: str | None, split: str, root: Path | None) -> Path | None:
    """The local file of one split of hub dataset `name`, or None when the dataset has no local copy.

    A local copy that exists but lacks the split is an error: falling back to the hub would hide a broken copy.
    """
    folder = local_copy_folder(name, config, root)
    if folder is None:
        return None
    return existing_split_file(name, config, split, folder)


def existing_split_file(name: str, config: str | None, split: str, folder: Path,
                        advice: str = "Add the file or choose another split.") -> Path:
    """The file of one split in the local copy `folder`; an error naming the splits the copy has where it lacks
    this one's file."""
    path = split_file(name, config, split, folder)
    if not path.is_file():
        splits = LOCAL_COPIES[name].split_files(config)
        present = sorted(s for s, f in splits.items() if (folder / f).is_file())
        raise FileNotFoundError(
            f"The local copy of {name!r}{f' ({config})' if config else ''} at {folder} has no {split!r} split "
            f"(expected {path}); splits present: {present}. {advice}"
        )
    return path


def load_hub_split(name: str, config: str | None, split: str, streaming: bool = False,
                   root: Path | None = None, files: str = "local files"
                   ) -> datasets.Dataset | datasets.IterableDataset:
    """One split from the Hugging Face hub (streamed as it is read with `streaming`), with an error that says how
    to run offline when it fails: for a name with a local layout, where under the data root `root` its copy was
    looked for, or that the layout has no copy of this config; and the datamodule's settings for local `files`.
    Where the hub does not answer within HF_HUB_ETAG_TIMEOUT (as `encoders.hub.local_path` asks it), or
    HF_HUB_OFFLINE is set, only datasets' own cache is read: without a network datasets retried the hub for half a
    minute (for ever behind a proxy that never answers) before reading it or failing."""
    offline = constants.HF_HUB_OFFLINE or datasets.config.HF_HUB_OFFLINE
    unreachable = None if offline else unanswered(name, repo_type="dataset")
    try:
        with _datasets_offline(offline or unreachable is not None):
            return datasets.load_dataset(name, config, split=split, **({"streaming": True} if streaming else {}))
    except Exception as error:  # any hub, network or format failure gets the same advice
        copy = LOCAL_COPIES.get(name)
        folder = copy.folder_of(config) if copy is not None else None
        if root is not None and folder is not None:
            way_on = (f"Its local copy was looked for at {root / folder}, which is not a folder: point "
                      f"${DATA_ROOT_ENV} (or data_root) at the folder that holds {folder}/")
        elif copy is not None and folder is None and copy.configs is not None:  # WikiText-103 beside WikiText-2
            way_on = (f"Local copies of {name!r} are read for the configs {sorted(copy.configs)} only, not "
                      f"{config!r}: use one of those")
        else:
            way_on = (f"Without network access, set ${DATA_ROOT_ENV} (or data_root) to a folder holding a local "
                      f"copy (names with a local layout: {sorted(LOCAL_COPIES)})")
        cache = f"datasets' cache ({datasets.config.HF_DATASETS_CACHE}) does not hold it"
        reason = (f": HF_HUB_OFFLINE is set, and {cache}" if offline else
                  f": the Hugging Face Hub cannot be reached ({type(unreachable).__name__}: {unreachable}), and "
                  f"{cache}" if unreachable is not None else f" with datasets.load_dataset: {error}")
        raise DataError(f"Could not load {name!r} (config {config!r}, split {split!r}){reason}. {way_on}, or give "
                        f"{files} instead.") from error


@contextlib.contextmanager
def _datasets_offline(offline: bool) -> Iterator[None]:
    """datasets' offline mode (HF_DATASETS_OFFLINE or HF_HUB_OFFLINE, read once as datasets is imported) for one
    load: it reads its cache and asks the hub nothing."""
    before = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = before or offline
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE = before


# --------------------------------------------------------------------------------------------------------------
# Reading and validating files
# --------------------------------------------------------------------------------------------------------------


def check_source(dataset: str | None, train_files: Any, other_files: Mapping[str, Any],
                 data_root: str | None) -> None:
    """A datamodule reads a named dataset or local files, not both: refuse settings that the other would leave
    unused, rather than silently dropping them."""
    if train_files is None and dataset is None:
        raise DataError("No data: set data.dataset to a dataset name, or data.train_files to a local file.")
    if train_files is not None and dataset is not None:
        raise DataError(f"data.dataset={dataset!r} and local files (data.train_files={train_files!r}) are both set in "
                        f"one place; one source is read, not both. Remove one of them (files or a dataset given on "
                        f"the command line replace the config's source by themselves).")
    given = [name for name, value in other_files.items() if value is not None]
    if train_files is None and given:
        raise DataError(f"data.{given[0]} is set, but the data comes from data.dataset={dataset!r}, which brings its "
                        f"own splits. Give local files for every split (data.train_files too), or remove it.")
    if train_files is not None and data_root is not None:
        raise DataError(f"data.data_root={data_root!r} locates named datasets, but the data comes from local files; "
                        f"remove data.data_root.")


def one_file_per_split(**files: str | list[str] | None) -> list[str | None]:
    """The file of each split named by `files` (`train_files=...`), given as a path or a list of one path: a
    classification or tagging split is one file, where MLM reads several (the settings share their names)."""
    out = []
    for name, value in files.items():
        if isinstance(value, (list, tuple)):
            if len(value) != 1:
                raise DataError(f"data.{name}={list(value)!r}: this task reads one file per split, not "
                                f"{len(value)}; join them into one file (rows of the same columns), or give one path.")
            value = value[0]
        out.append(value)
    return out


def describe_files(files: Mapping[str, Any]) -> str:
    """`train a.csv, validation b.csv, test none`: the local file(s) of each split, for the line a run prints."""
    return ", ".join(f"{split} {', '.join(map(str, value)) if isinstance(value, list) else value or 'none'}"
                     for split, value in files.items())


def counted(count: int, noun: str) -> str:
    """`1 sentence`, `2 sentences`: a count and its noun, for the lines a run prints."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


@contextlib.contextmanager
def replaced_when_whole(path: str | os.PathLike[str], sole_writer: bool = False) -> Iterator[Path]:
    """A path beside `path` to write its new file (or folder) to, renamed over `path` when the block ends and removed
    if the block fails (a signal, a full disk): readers see the earlier file or the new one, never a part.
    `sole_writer` (one process writes `path`: a checkpoint, an export) also removes the parts that processes of this
    host killed while they wrote it (`kill -9` runs no clean-up) left: a checkpoint's may be gigabytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if sole_writer:
        for leftover in path.parent.glob(f".{glob.escape(path.name)}.*-*"):
            kind, _, pid = leftover.name[len(path.name) + 2:].partition("-")
            if kind in ("tmp", "old") and pid.isdigit() and not _alive(int(pid)):
                remove_path(leftover)
    partial = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    earlier = path.with_name(f".{path.name}.old-{os.getpid()}")
    try:
        yield partial
        if partial.is_dir() and path.is_dir():  # a rename replaces no folder that holds files: moved aside first
            os.replace(path, earlier)
        os.replace(partial, path)
    finally:
        if earlier.exists() and not path.exists():  # the new one never took its place: the earlier one goes back
            os.replace(earlier, path)
        remove_path(partial)
        remove_path(earlier)


def remove_path(path: Path) -> None:
    """Remove a file or a folder with what it holds; nothing where neither is."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


@contextlib.contextmanager
def written_whole(path: str | os.PathLike[str], newline: str | None = None) -> Iterator[io.TextIOBase]:
    """A UTF-8 text file to write at `path`, in place only once it is whole (`replaced_when_whole`)."""
    with replaced_when_whole(path) as partial, partial.open("w", encoding="utf-8", newline=newline) as handle:
        yield handle


def check_file(path: Path) -> None:
    """Errors for a data file that is missing or not a file (a folder)."""
    if not path.exists():
        raise FileNotFoundError(f"Data file {path} does not exist; check the path (and ${DATA_ROOT_ENV}).")
    if not path.is_file():
        raise DataError(f"Data file {path} is not a regular file; pass the file itself, not a folder.")


def read_text(path: str | os.PathLike[str]) -> str:
    """A whole UTF-8 file as text (a leading BOM removed); errors for missing, empty or non-UTF-8 files."""
    path = Path(path)
    check_file(path)
    raw = path.read_bytes()
    if not raw.strip():
        raise DataError(f"Data file {path} is empty; it holds no rows. Fill it or remove it from the config.")
    if (nul := raw.find(b"\x00")) >= 0:  # valid UTF-8, but no text: UTF-16 without a BOM, Parquet, gzip
        line, column = raw.count(b"\n", 0, nul) + 1, nul - raw.rfind(b"\n", 0, nul)
        raise DataError(f"{path}, line {line}, column {column}: a NUL byte, which UTF-8 text does not hold: the file "
                        f"is binary (Parquet, gzip?) or UTF-16 text. Give a UTF-8 text file, e.g. `iconv -f utf-16 "
                        f"-t utf-8 {path.name} > fixed`.")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        column = error.start - (raw.rfind(b"\n", 0, error.start) + 1) + 1
        bad = raw[error.start:error.end].hex(" ")
        raise DataError(
            f"{path}, line {line}, column {column}: invalid UTF-8 (bytes {bad}: {error.reason}). "
            f"Re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed`."
        ) from None


def _check_columns(path: Path, header: Sequence[str], required: Sequence[str], where: str) -> None:
    missing = [name for name in required if name not in header]
    if missing:
        raise MissingColumns(f"{path}, {where}", missing, header)


@contextlib.contextmanager
def _field_limit(size: int) -> Iterator[None]:
    """`csv`'s limit on a field's length (131,072 characters unless raised) raised to `size` for one read: past it a
    document in a cell (a chapter, a long review) stopped the run as 'malformed', with advice to fix the quoting. A
    quote left open is caught without it (the reader is strict, and its rows must agree with the header)."""
    before = csv.field_size_limit()
    csv.field_size_limit(max(before, size))
    try:
        yield
    finally:
        csv.field_size_limit(before)


def read_delimited(
    path: str | os.PathLike[str],
    delimiter: str,
    required: Sequence[str],
    *,
    quoting: bool = True,
    column_names: Sequence[str] | None = None,
) -> dict[str, list[str]]:
    """Columns of a CSV/TSV file. The header gives the column names unless `column_names` names a headerless file.

    `quoting=False` reads the way GLUE's processors do (`quotechar=None`): a quote is an ordinary character. A TSV
    that is no valid quoted TSV is read so too, with a warning, when its rows then agree with the header.
    Every row must have as many fields as the header; blank lines hold no data and are passed over.
    """
    path = Path(path)
    text = read_text(path)
    # strict: a quote left open would otherwise take the rest of the file into one field, silently where the file
    # has one column (a file of texts to predict), and `"a"b` would read as `ab`.
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True,
                        quotechar='"' if quoting else None, quoting=csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE)
    header = list(column_names) if column_names is not None else None
    rows: list[list[str]] = []
    lines: list[int] = []
    read = 0  # the lines read before the row being read, which may span several (a quoted newline)
    try:
        with _field_limit(len(text)):  # a long document in a cell is data
            for row in reader:
                read = reader.line_num
                if not row:
                    continue
                if header is None:
                    header, header_line = row, reader.line_num
                    continue
                if column_names is None and row == header:  # else its label ('label') became a class of its own
                    raise DataError(f"{path}, line {reader.line_num}: the header again (as on line {header_line}: "
                                    f"{delimiter.join(header)[:80]!r}), not a row; were files joined with their "
                                    f"headers? Remove the line.")
                if len(row) != len(header):
                    raise DataError(
                        f"{path}, line {reader.line_num}: {len(row)} fields where the header has {len(header)} "
                        f"({header}); row starts {delimiter.join(row)[:80]!r}. Fix the row (a stray delimiter or "
                        f"quote?)."
                    )
                rows.append(row)
                lines.append(read)
    except csv.Error as error:
        kind = "CSV" if delimiter == "," else "TSV"
        unclosed = " (a quote opened there is never closed)" if "end of data" in str(error) else ""
        shown = str(error).replace("\t", "\\t")  # (the delimiter, shown)
        problem = f"{path}, line {read + 1}: malformed {kind}: {shown}{unclosed}"
        if delimiter == "\t" and quoting:
            # Many TSVs (GLUE's, and sets made like them) have no quoting: a quote is text, as in `"Yes," he said`.
            # A file that is not valid quoted TSV is read so, if its rows then agree with the header.
            with contextlib.suppress(DataError):
                columns = read_delimited(path, delimiter, required, quoting=False, column_names=column_names)
                log.warning("%s under quoting; read with quotes as ordinary characters, as GLUE's TSVs are",
                            problem)
                return columns
        raise DataError(f"{problem}; fix the quoting.") from None
    if header is None or not rows:
        raise DataError(f"Data file {path} has a header but no data rows; it needs at least one example.")
    _check_columns(path, header, required, "header")
    twice = [name for name in required if header.count(name) > 1]
    if twice:
        raise DataError(f"{path}, header: column {twice[0]!r} appears {header.count(twice[0])} times ({header}); "
                        f"rename the copies so that the one to read is unambiguous.")
    index = {name: i for i, name in enumerate(header)}
    columns = {name: [row[index[name]] for row in rows] for name in required}
    columns["_line"] = lines  # type: ignore[assignment]  # for error messages further down
    return columns


class _RepeatedField(ValueError):
    def __init__(self, key: str, values: list[Any]) -> None:
        self.key, self.values = key, values
        super().__init__(key)


def _unique_fields(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's fields, refusing one given twice: `json` keeps the last silently (a second `label`)."""
    record: dict[str, Any] = {}
    for key, value in pairs:
        if key in record:
            raise _RepeatedField(key, [record[key], value])
        record[key] = value
    return record


def _repeated_field(where: str, error: _RepeatedField) -> DataError:
    return DataError(f"{where}: the field {error.key!r} appears twice in one object ({error.values[0]!r}, then "
                     f"{error.values[1]!r}); JSON readers keep one of them. Keep the one meant.")


def _repeating_record(text: str) -> str:
    """`record 2 (line 3)`: where in the JSON list `text` the first object that gives a field twice starts, read
    again record by record (on that error alone: one `json.loads` of the whole text is the fast way)."""
    decoder, between = json.JSONDecoder(object_pairs_hook=_unique_fields), re.compile(r"[\s,]*")
    start, number = between.match(text, text.index("[") + 1).end(), 1
    while True:
        try:
            end = decoder.raw_decode(text, start)[1]
        except _RepeatedField:
            line = text.count("\n", 0, start) + 1
            return f"record {number} (line {line})"
        except json.JSONDecodeError:
            return "a record"
        start, number = between.match(text, end).end(), number + 1


def read_json_records(path: str | os.PathLike[str], required: Sequence[str]) -> dict[str, list[Any]]:
    """Columns of a JSON Lines file (one object a line) or a JSON file holding a list of objects."""
    path = Path(path)
    text = read_text(path)
    records: list[tuple[int, Any]] = []
    if path.suffix == ".jsonl" or not text.lstrip().startswith("["):
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append((number, json.loads(line, object_pairs_hook=_unique_fields)))
            except json.JSONDecodeError as error:
                raise DataError(f"{path}, line {number}: not valid JSON ({error.msg}); one object per line.") from None
            except _RepeatedField as error:
                raise _repeated_field(f"{path}, line {number}", error) from None
        where = "line"
    else:
        try:
            loaded = json.loads(text, object_pairs_hook=_unique_fields)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}, line {error.lineno}: not valid JSON ({error.msg}).") from None
        except _RepeatedField as error:
            raise _repeated_field(f"{path}, {_repeating_record(text)}", error) from None
        if not loaded:  # else the split had no examples, which failed later inside datasets
            raise DataError(f"Data file {path} holds an empty JSON list; it needs at least one example.")
        records = list(enumerate(loaded, start=1))
        where = "record"
    columns: dict[str, list[Any]] = {name: [] for name in required}
    for number, record in records:
        if not isinstance(record, dict):
            raise DataError(f"{path}, {where} {number}: expected a JSON object, got {type(record).__name__}.")
        _check_columns(path, list(record), required, f"{where} {number}")
        for name in required:
            columns[name].append(record[name])
    columns["_line"] = [number for number, _ in records]
    return columns


# File suffix -> reader of columns. Plain-text files have one column, `text`, one row per non-blank line.
TABLE_READERS: dict[str, Callable[[Path, Sequence[str]], dict[str, list[Any]]]] = {
    ".csv": lambda path, required: read_delimited(path, ",", required),
    ".tsv": lambda path, required: read_delimited(path, "\t", required),
    ".json": read_json_records,
    ".jsonl": read_json_records,
}


def read_table(path: str | os.PathLike[str], required: Sequence[str]) -> dict[str, list[Any]]:
    """Columns `required` of a CSV, TSV, JSON or JSONL file, chosen by suffix; `_line` holds each row's line."""
    path = Path(path)
    check_file(path)  # before its suffix: a folder or a mistyped path has none of the readers'
    reader = TABLE_READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(f"{path}: unknown table format {path.suffix!r}; use one of {sorted(TABLE_READERS)}.")
    return reader(path, required)


def read_text_documents(path: str | os.PathLike[str], blank_line_documents: bool = False) -> list[str]:
    """Documents of a plain-text file: one per non-blank line, or (BERT's format) blank-line-separated blocks."""
    text = read_text(path)
    if blank_line_documents:
        # A separator is a line of nothing but whitespace, whatever the line ends (\r\n in files from Windows).
        blocks = (" ".join(line.strip() for line in block.splitlines())
                  for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n").replace("\r", "\n")))
        return [block for block in blocks if block.strip()]
    return [line for line in text.splitlines() if line.strip()]


@dataclass
class ConllSentence:
    words: list[str]
    tags: list[str]
    lines: list[int]  # the line of each word, for error messages
    fields: list[list[str]] = field(default_factory=list)  # each word's whole line, where read without tags


# Lines end at a newline (CRLF or CR too) and columns at ASCII whitespace, as conlleval reads its bytes: Python's
# splitlines() and split() also break at U+2028, U+0085 or a no-break space, which would split or drop a word.
CONLL_LINES = re.compile(r"\r\n|\r|\n")
ASCII_SPACE = " \t\f\v"
CONLL_COLUMNS = re.compile(f"[{ASCII_SPACE}]+")


def read_conll(path: str | os.PathLike[str], word_column: int = 0,
               label_column: int | None = -1) -> list[ConllSentence]:
    """Sentences of a CoNLL column file: columns separated by ASCII spaces or tabs (a word may hold any other
    character, a no-break space too), blank lines and `-DOCSTART-` between sentences.

    Every token line must have as many columns as the file's first one, and the word and label columns must be
    two different columns of it: a line that lost its tag (a lone word) is an error, not a word taken as its label.
    `label_column=None` reads the words alone (text to tag: a word a line, or a column file whose tags are not read),
    and the sentences have no tags but keep each word's line (`fields`), which predictions write back.
    """
    path = Path(path)
    sentences: list[ConllSentence] = []
    current = ConllSentence([], [], [])
    width: int | None = None  # columns per token line, set by the first one
    for number, line in enumerate(CONLL_LINES.split(read_text(path)), start=1):
        fields = [field for field in CONLL_COLUMNS.split(line) if field]
        if not fields or fields[0] == "-DOCSTART-":
            if current.words:
                sentences.append(current)
                current = ConllSentence([], [], [])
            continue
        if width is None:
            width, first = len(fields), number
            if label_column is None and not -width <= word_column < width:
                raise DataError(f"{path}, line {number}: the file has {width} column(s) {fields}, so word_column="
                                f"{word_column} names none of them. Fix the setting or the file.")
            if label_column is not None and (not (-width <= word_column < width and -width <= label_column < width)
                                             or word_column % width == label_column % width):
                raise DataError(
                    f"{path}, line {number}: the file has {width} column(s) {fields}, so word_column={word_column} "
                    f"and label_column={label_column} do not name two different columns of it. Fix the column "
                    f"settings (CoNLL-2003 NER: word_column 0, label_column -1) or the file."
                )
        if len(fields) != width:
            needs = "the word and its tag" if label_column is not None else "the same columns as the others"
            text = ("; text, a sentence a line, is no training data" if label_column is not None else
                    "; or is the file text, a sentence a line? Then set data.predict_format lines")
            raise DataError(
                f"{path}, line {number}: {len(fields)} column(s) {fields} where the file's first token line (line "
                f"{first}) has {width}; one of the two lines is malformed. A token line needs {needs} "
                f"(word_column={word_column}, label_column={label_column}): fix the line (a missing tag, or stray "
                f"spaces in a token?){text}."
            )
        current.words.append(fields[word_column])
        if label_column is not None:
            current.tags.append(fields[label_column])
        else:
            current.fields.append(fields)
        current.lines.append(number)
    if current.words:
        sentences.append(current)
    if not sentences:
        raise DataError(f"{path}: no sentences (only -DOCSTART- or blank lines); it needs at least one token line.")
    return sentences


def read_sentence_lines(path: str | os.PathLike[str]) -> list[ConllSentence]:
    """Sentences of plain text, a sentence a line, its words separated by ASCII spaces or tabs (as a column file's
    columns are); blank lines are skipped. The sentences have no tags."""
    path = Path(path)
    sentences = []
    for number, line in enumerate(CONLL_LINES.split(read_text(path)), start=1):
        words = [word for word in CONLL_COLUMNS.split(line) if word]
        if words:
            sentences.append(ConllSentence(words, [], [number] * len(words)))
    if not sentences:
        raise DataError(f"{path}: no sentences (only blank lines); it needs a line of words.")
    return sentences


# --------------------------------------------------------------------------------------------------------------
# Caching tokenized datasets
# --------------------------------------------------------------------------------------------------------------


def file_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What identifies a file's contents for caching: its path, size and modification time."""
    check_file(Path(path))  # (MLM asks before it reads the file)
    stat = Path(path).stat()
    return {"path": str(Path(path).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts: the cache key of a tokenized dataset."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def cached_map(
    build: Callable[[], datasets.Dataset],
    function: Callable[..., dict[str, list[Any]]],
    *,
    cache_dir: Path,
    name: str,
    key: str,
    batch_size: int = 1000,
    with_indices: bool = False,
    num_proc: int = 1,
) -> datasets.Dataset:
    """`build().map(function, batched=True)`, cached by `datasets` in `cache_dir/name-key.arrow`.

    The key (from `fingerprint`) covers the source files, the tokenizer and every setting. When the cache exists it
    is opened directly (memory-mapped), so neither the raw files are read nor the text tokenized again. With
    `num_proc` > 1 the map runs in that many processes over contiguous shards of the rows, each writing its own
    file; `name-key.json`, written once every shard is, lists them, and the cache is their concatenation: the same
    rows in the same order as one process writes. The key does not depend on `num_proc`, so `function` must map
    each row the same whatever the batch it falls in.
    """
    path = cache_dir / f"{name}-{key}.arrow"
    record = path.with_suffix(".json")
    if path.is_file():
        log.info("%s: loaded tokenized data from cache %s", name, path)
        return datasets.Dataset.from_file(str(path))
    if record.is_file():
        shards = [cache_dir / shard for shard in json.loads(record.read_text())["shards"]]
        if all(shard.is_file() for shard in shards):
            log.info("%s: loaded tokenized data from cache %s (%d shards)", name, record, len(shards))
            return datasets.concatenate_datasets([datasets.Dataset.from_file(str(shard)) for shard in shards])
    if num_proc < 1:
        raise DataError(f"data.num_proc={num_proc} must be at least 1 (the processes that tokenize).")
    raw = build()
    processes = min(num_proc, max(1, len(raw)))
    mapped = map_into_cache(raw, function, path, batched=True, batch_size=batch_size, with_indices=with_indices,
                            remove_columns=raw.column_names, new_fingerprint=key,
                            num_proc=processes if processes > 1 else None, desc=f"tokenizing {name}")
    if processes > 1:
        with written_whole(record) as handle:
            handle.write(json.dumps({"shards": [Path(f["filename"]).name for f in mapped.cache_files]}) + "\n")
    return mapped


def map_into_cache(dataset: datasets.Dataset, function: Callable[..., dict[str, list[Any]]], path: Path,
                   **settings: Any) -> datasets.Dataset:
    """`dataset.map(function, **settings)` written to the cache file `path` (its shards beside it under `num_proc`:
    `datasets` names them after it), opened memory-mapped from there.

    `datasets` writes each file to a temporary one of the folder and renames it into place once whole, but removes
    that temporary file only on an Exception or Ctrl+C: a run that a signal stopped (`SystemExit`) left it in the
    cache, as large as the cache file, at every stop. Here the map writes into a folder of its own, removed however
    the block ends, and its finished files are moved into the cache; a killed run (`kill -9`) leaves that folder,
    never a part of a cache file under a cache file's name."""
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.stem}.") as scratch:
        mapped = dataset.map(function, cache_file_name=str(Path(scratch) / path.name),
                             load_from_cache_file=False, **settings)
        # An empty dataset is not mapped: `datasets` hands back its own files, to be left where they are.
        files = [Path(f["filename"]) for f in mapped.cache_files if Path(f["filename"]).parent == Path(scratch)]
        for file in files:
            os.replace(file, path.parent / file.name)
    if not files:  # an empty dataset: no file was written
        return mapped
    parts = [datasets.Dataset.from_file(str(path.parent / file.name)) for file in files]
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
