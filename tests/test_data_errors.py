"""Every kind of bad input raises one clear error naming the file, line or field, the value, and the fix."""

import logging
import shutil

import pytest
from runs import MINILM

from data import (
    ClassificationDataModule,
    DataError,
    GLUEDataModule,
    MLMDataModule,
    TokenClassificationDataModule,
    check_max_length,
)
from data.mlm import iter_documents
from data.sources import read_conll, read_delimited, read_table, read_text
from encoders import EncoderConfig


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope.csv does not exist; check the path"):
        read_table(tmp_path / "nope.csv", ["text"])


def test_a_missing_tokenizer_is_named_by_its_setting(tmp_path):
    from encoders.hub import HubError

    with pytest.raises(HubError, match=rf"^data.tokenizer={tmp_path / 'nope'} does not exist"):
        ClassificationDataModule(str(tmp_path / "nope"), train_files=str(tmp_path / "train.csv"))


def test_missing_glue_split_file(shared_data, tmp_path):
    folder = tmp_path / "QNLI"
    shutil.copytree(shared_data / "glue" / "QNLI", folder)  # QNLI train is not in shared data
    dm = GLUEDataModule("qnli", MINILM, data_dir=str(folder), cache_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"QNLI has no 'train' split \(expected .*QNLI/train.tsv\); splits "
                                                r"present: \['test', 'validation'\]. Add the file, or point "
                                                r"data.data_dir at a copy of qnli that holds it."):
        dm.setup("fit")


def test_missing_column(tmp_path):
    path = tmp_path / "reviews.csv"
    path.write_text("body,label\nnice,1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"reviews.csv, header: missing column\(s\) \['text'\]; the file has "
                                        r"columns \['body', 'label'\]"):
        ClassificationDataModule(MINILM, train_files=str(path))


def test_wrong_number_of_fields(shared_data, tmp_path):
    folder = tmp_path / "RTE"
    shutil.copytree(shared_data / "glue" / "RTE", folder)
    lines = (folder / "train.tsv").read_text(encoding="utf-8").splitlines()
    lines[5] = lines[5] + "\textra"
    (folder / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train.tsv, line 6: 5 fields where the header has 4"):
        GLUEDataModule("rte", MINILM, data_dir=str(folder), cache_dir=str(tmp_path)).setup("fit")


def test_label_outside_the_label_set(shared_data, tmp_path):
    folder = tmp_path / "RTE"
    shutil.copytree(shared_data / "glue" / "RTE", folder)
    text = (folder / "dev.tsv").read_text(encoding="utf-8").replace("\tnot_entailment\n", "\tcontradiction\n", 1)
    (folder / "dev.tsv").write_text(text, encoding="utf-8")
    dm = GLUEDataModule("rte", MINILM, data_dir=str(folder), cache_dir=str(tmp_path))
    with pytest.raises(DataError, match=r"dev.tsv, line \d+: label 'contradiction' in column 'label' is not one of "
                                        r"the labels \['entailment', 'not_entailment'\]; fix the row\.$"):
        dm.setup("validate")


def test_a_glue_task_is_not_advised_the_label_settings_it_does_not_take(shared_data, tmp_path):
    """Label errors of a GLUE config advised data.label_names and data.skip_labels, which GLUEDataModule refuses
    ('Option skip_labels is not accepted'): the row is the way on."""
    folder = tmp_path / "SST-2"
    shutil.copytree(shared_data / "glue" / "SST-2", folder)
    lines = (folder / "dev.tsv").read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2].rsplit("\t", 1)[0] + "\t"
    (folder / "dev.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    dm = GLUEDataModule("sst2", MINILM, data_dir=str(folder), cache_dir=str(tmp_path))
    with pytest.raises(DataError, match=r"dev.tsv, line 3: label='' is empty, not a class. Fill it in or remove it\.$"):
        dm.setup("validate")


def test_regression_score_outside_range(tmp_path):
    folder = tmp_path / "STS-B"
    folder.mkdir()
    (folder / "dev.tsv").write_text("index\tsentence1\tsentence2\tscore\n0\ta\tb\t7.5\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"dev.tsv, line 2: score='7.5' is not a similarity score in \[0, 5\]"):
        GLUEDataModule("stsb", MINILM, data_dir=str(folder), cache_dir=str(tmp_path)).setup("validate")


@pytest.mark.parametrize("module, train, val, stage, message", [
    pytest.param(ClassificationDataModule, ("train.csv", "text,label\ngood film,pos\nbad film,neg\n"),
                 ("val.csv", "text,label\nfine,pos\nodd,neutral\n"), "fit",
                 r"val.csv, line 3: label 'neutral' in column 'label' is not one of the labels \['neg', 'pos'\]; fix "
                 r"the row, or set data.label_names / data.skip_labels\.$",
                 id="csv-label"),
    pytest.param(TokenClassificationDataModule, ("train.txt", "EU NNP B-ORG\nrejects VBZ O\n"),
                 ("valid.txt", "Peter NNP B-PER\n"), "validate",
                 r"valid.txt, line 1: tag 'B-PER' is not in the label set", id="conll-tag"),
])
def test_validation_label_outside_the_training_label_set(module, train, val, stage, message, tmp_path):
    """A validation example whose label the training file does not have (the label set comes from training)."""
    for name, text in (train, val):
        (tmp_path / name).write_text(text, encoding="utf-8")
    dm = module(MINILM, train_files=str(tmp_path / train[0]), val_files=str(tmp_path / val[0]), cache_dir=str(tmp_path))
    with pytest.raises(DataError, match=message):
        dm.setup(stage)


@pytest.mark.parametrize("settings, message", [
    ({"text_columns": []}, r"data.text_columns=\[\]: one text column, or two for a pair"),
    ({"label_column": "text"}, r"data.label_column='text' is also a text column \(\['text'\]\)"),
])
def test_columns_that_leave_no_text_or_label(settings, message, tmp_path):
    """An empty list of text columns read the default `text`; the text as label made each text a class."""
    path = tmp_path / "train.csv"
    path.write_text("text,label\ngood,pos\nbad,neg\n", encoding="utf-8")
    with pytest.raises(DataError, match=message):
        ClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), cache_dir=str(tmp_path),
                                 **settings)


@pytest.mark.parametrize("name, content, settings, message", [
    pytest.param("null.jsonl", '{"text": "a", "label": "pos"}\n{"text": "b", "label": null}\n', {},
                 r"null.jsonl, line 2: label=None is not a label", id="null-label"),
    pytest.param("list.jsonl", '{"text": "a", "label": "pos"}\n{"text": "b", "label": ["neg"]}\n', {},
                 r"list.jsonl, line 2: label=\['neg'\] is not a label; .* data.multi_label true", id="list-label"),
    pytest.param("empty.csv", "text,label\ngood,pos\nbad,neg\nmeh,\n", {},
                 r"empty.csv, line 4: label='' is empty, not a class. Fill it in or remove it \(or leave such rows "
                 r"out with data.skip_labels \[''\]\)", id="empty-cell"),
    pytest.param("spaced.csv", "text,label\ngood,pos\nfine, pos\nbad,neg\n", {},
                 r"spaced.csv, line 3: label=' pos' has spaces around it, which would make it a class apart from "
                 r"'pos'", id="spaces-around-a-label"),
    pytest.param("nan.jsonl", '{"text": "a", "label": "pos"}\n{"text": "b", "label": NaN}\n', {},
                 r"nan.jsonl, line 2: label=nan is not a class", id="json-nan"),
    pytest.param("sets.jsonl", '{"text": "a", "label": ["x", ""]}\n{"text": "b", "label": ["y"]}\n',
                 {"multi_label": True}, r"sets.jsonl, line 1: label '' in column 'label' is empty, not a class. Fill "
                                        r"it in or remove it\.$", id="multi-label-empty-label"),
    pytest.param("spelled.csv", "text,label\ngood,1\nbad,0\nfine,1.0\n", {},
                 r"spelled.csv, line 4: label '1.0' in column 'label' is the number of label '1' \(line 2\) spelled "
                 r"another way, which would make it a class apart. Spell each class one way: fix the row; or, if they "
                 r"are two classes \(codes such as '01' and '1'\), list the classes in data.label_names.$",
                 id="one-number-spelled-two-ways"),
    pytest.param("scores.csv", "text,label\ngood,4.5\nbad,0.25\nfine,3\n", {},
                 r"scores.csv, line 2: label '4.5' in column 'label' is a number with a fraction, and classification "
                 r"would make each of the 3 values a class of its own. Set data.regression true if the labels are "
                 r"scores, or list the classes in data.label_names if they are classes.", id="scores-as-classes"),
    pytest.param("one.csv", "text,label\ngood,pos\nfine,pos\n", {},
                 r"data.label_column='label' of .*one.csv holds one class, \['pos'\]: classification needs at "
                 r"least two", id="one-class-in-the-file"),
    pytest.param("twice.csv", "text,label\ngood,pos\nbad,neg\n", {"label_names": ["pos", "neg", "pos"]},
                 r"data.label_names lists \['pos'\] more than once; each class needs one id", id="repeated-name"),
    pytest.param("two.csv", "text,label\ngood,pos\nbad,neg\n", {"label_names": ["pos"]},
                 r"data.label_names holds one class, \['pos'\]", id="one-class-named"),
])
def test_labels_that_are_not_a_class_label(name, content, settings, message, tmp_path):
    """A label that is no class (null, a list) would become a class named 'None' or "['neg']", an empty cell, a JSON
    NaN or a label with a space around it a class '', 'nan' or ' pos' beside the others, a CSV's `1.0` a class beside
    `1`, scores without data.regression a class each, and one class alone failed deep in torchmetrics after setup."""
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        ClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), cache_dir=str(tmp_path),
                                 **settings).setup("fit")


def test_codes_that_are_one_number_are_two_classes_where_label_names_lists_them(tmp_path):
    """The way on the error of a number spelled two ways, where the spellings are codes of two classes."""
    path = tmp_path / "train.csv"
    path.write_text("text,label\ngood,01\nbad,1\nfine,01\n", encoding="utf-8")
    dm = ClassificationDataModule(MINILM, label_names=["1", "01"], train_files=str(path), val_files=str(path),
                                  cache_dir=str(tmp_path))
    dm.setup("fit")
    assert dm.datasets["train"]["labels"] == [1, 0, 1]


def test_empty_labels_are_left_out_by_skip_labels_and_json_floats_are_their_integers(tmp_path):
    """skip_labels [''] is the way on the empty-label error names; a JSON 1.0 is the class of 1, not one of its own."""
    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 0}\n{"text": "c", "label": 1.0}\n'
                    '{"text": "d", "label": ""}\n', encoding="utf-8")
    dm = ClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), cache_dir=str(tmp_path),
                                  skip_labels=[""])
    dm.setup("fit")
    assert dm.label_names == ["0", "1"]
    assert dm.datasets["train"]["labels"] == [1, 0, 1]


def test_numbers_with_fractions_are_classes_where_label_names_lists_them(tmp_path):
    """The way on the fraction error names: label_names says the numbers are classes, and regression scores."""
    path = tmp_path / "train.csv"
    path.write_text("text,label\ngood,4.5\nbad,0.25\nfine,3\n", encoding="utf-8")
    common = dict(train_files=str(path), val_files=str(path), cache_dir=str(tmp_path))
    dm = ClassificationDataModule(MINILM, label_names=["0.25", "3", "4.5"], **common)
    dm.setup("fit")
    assert dm.datasets["train"]["labels"] == [2, 0, 1]
    dm = ClassificationDataModule(MINILM, regression=True, **common)
    dm.setup("fit")
    assert dm.datasets["train"]["labels"] == [4.5, 0.25, 3.0]


@pytest.mark.parametrize("settings, message", [
    ({"batch_size": 0}, r"^data.batch_size=0 must be positive"),
    ({"eval_batch_size": 0}, r"^data.eval_batch_size=0 must be positive; leave it unset"),
    ({"eval_batch_size": -1}, r"^data.eval_batch_size=-1 must be positive"),
    ({"num_workers": -1}, r"^data.num_workers=-1 must be 0"),
])
def test_loader_settings_out_of_range_are_named(settings, message, tmp_path):
    """An eval_batch_size of 0 read as unset (the training batch size), -1 and a negative num_workers failed in
    torch's loader, after the model was built, without the setting's name."""
    path = tmp_path / "train.csv"
    path.write_text("text,label\ngood,pos\nbad,neg\n", encoding="utf-8")
    with pytest.raises(DataError, match=message):
        ClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), cache_dir=str(tmp_path),
                                 **settings)


@pytest.mark.parametrize("name, make, error, message", [
    ("folder", lambda path: path.mkdir(), DataError, r"folder is not a regular file; pass the file itself"),
    ("nowhere", lambda path: None, FileNotFoundError, r"nowhere does not exist; check the path"),
])
def test_a_table_path_without_a_suffix_is_named_for_what_it_is(name, make, error, message, tmp_path):
    """A folder or a mistyped path was refused as an 'unknown table format' ''."""
    make(tmp_path / name)
    with pytest.raises(error, match=message):
        read_table(tmp_path / name, ["text"])


@pytest.mark.parametrize("train_files", ["nope.txt", ["corpus.txt", "nope.txt"]])
def test_a_missing_pretraining_file_is_named(train_files, tmp_path):
    """MLM fingerprints its files before reading them: a missing one failed in pathlib's stat with a bare errno."""
    from data import MLMDataModule

    (tmp_path / "corpus.txt").write_text("some words\n", encoding="utf-8")
    files = [str(tmp_path / name) for name in train_files] if isinstance(train_files, list) else \
        str(tmp_path / train_files)
    with pytest.raises(FileNotFoundError, match=rf"^Data file {tmp_path / 'nope.txt'} does not exist; check the path"):
        MLMDataModule(MINILM, train_files=files, cache_dir=str(tmp_path)).setup("fit")


# One malformed file each, read by the reader its format goes through.
@pytest.mark.parametrize("name, content, read, message", [
    pytest.param("empty.tsv", b"\n  \n", lambda path: read_delimited(path, "\t", ["sentence"]),
                 r"empty.tsv is empty; it holds no rows", id="empty"),
    pytest.param("header.csv", b"text,label\n", lambda path: read_table(path, ["text", "label"]),
                 r"header.csv has a header but no data rows", id="header-only"),
    pytest.param("latin1.csv", "text,label\nfine,1\ncaf\u00e9 cr\u00e8me,0\n".encode("latin-1"), read_text,
                 r"latin1.csv, line 3, column 4: invalid UTF-8 \(bytes e9", id="invalid-utf8"),
    pytest.param("utf16.txt", "EU B-ORG\nrejects O\n".encode("utf-16-le"), read_conll,
                 r"utf16.txt, line 1, column 2: a NUL byte, which UTF-8 text does not hold: the file is binary "
                 r"\(Parquet, gzip\?\) or UTF-16 text", id="utf16-without-bom"),
    pytest.param("corpus.txt", b"PAR1 text\nmore\x00\x00", lambda path: list(iter_documents(path)),
                 r"corpus.txt, line 2, column 5: a NUL byte", id="binary-read-line-by-line"),
    pytest.param("empty.json", b"[]\n", lambda path: read_table(path, ["text", "label"]),
                 r"empty.json holds an empty JSON list; it needs at least one example", id="empty-json-list"),
    pytest.param("data.jsonl", b'{"text": "a", "label": 1}\n{"text": "b", label: 0}\n',
                 lambda path: read_table(path, ["text", "label"]), r"data.jsonl, line 2: not valid JSON",
                 id="invalid-jsonl-line"),
    pytest.param("twice.jsonl", b'{"text": "a", "label": 1}\n{"text": "b", "label": 0, "label": 1}\n',
                 lambda path: read_table(path, ["text", "label"]),
                 r"twice.jsonl, line 2: the field 'label' appears twice in one object \(0, then 1\)",
                 id="jsonl-field-twice"),
    pytest.param("twice.json", b'[{"text": "a", "label": 1},\n {"text": "b", "text": "c", "label": 0}]\n',
                 lambda path: read_table(path, ["text", "label"]),
                 r"twice.json, record 2 \(line 2\): the field 'text' appears twice in one object \('b', then 'c'\)",
                 id="json-field-twice"),
    pytest.param("nested.json", b'[\n  {"text": "a", "label": 1, "meta": {"x": [1, 2]}}, {"text": "b", "label": 0},\n'
                                b'  {"text": "c",\n   "meta": {"x": 1, "x": 2}, "label": 1}\n]\n',
                 lambda path: read_table(path, ["text", "label"]),
                 r"nested.json, record 3 \(line 3\): the field 'x' appears twice in one object \(1, then 2\)",
                 id="json-field-twice-nested"),
    pytest.param("open.csv", b"text\ngood\n\"bad\nfine\nok\n", lambda path: read_table(path, ["text"]),
                 r"open.csv, line 3: malformed CSV: unexpected end of data \(a quote opened there is never closed\)",
                 id="unclosed-quote"),
    pytest.param("glued.csv", b'text\ngood\n"abc"def\n', lambda path: read_table(path, ["text"]),
                 r"glued.csv, line 3: malformed CSV: ',' expected after '\"'", id="text-after-a-closing-quote"),
    pytest.param("joined.csv", b"text,label\ngood,pos\ntext,label\nbad,neg\n",
                 lambda path: read_table(path, ["text", "label"]),
                 r"joined.csv, line 3: the header again \(as on line 1: 'text,label'\), not a row; were files joined "
                 r"with their headers\? Remove the line.", id="header-repeated-as-a-row"),
    pytest.param("pairs.csv", b"text,text,label\na,b,pos\n", lambda path: read_table(path, ["text", "label"]),
                 r"pairs.csv, header: column 'text' appears 2 times", id="duplicate-header"),
    pytest.param("bad.txt", b"EU NNP B-NP B-ORG\nrejects\n", lambda path: read_conll(path, label_column=3),
                 r"bad.txt, line 2: 1 column\(s\) \['rejects'\] where the file's first token line \(line 1\) has 4; "
                 r"one of the two lines is malformed",
                 id="conll-line-with-too-few-columns"),
    pytest.param("words.txt", b"EU\nrejects\n", read_conll,
                 r"words.txt, line 1: the file has 1 column\(s\) \['EU'\], so word_column=0 and label_column=-1 do "
                 r"not name two different columns", id="conll-file-of-words-only"),
])
def test_malformed_file(name, content, read, message, tmp_path):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match=message):
        read(path)


@pytest.mark.parametrize("name, delimiter", [("long.csv", ","), ("long.tsv", "\t")])
def test_a_text_longer_than_csvs_field_limit_is_read(name, delimiter, tmp_path):
    """A document of 200,000 characters in a cell (csv's limit is 131,072) was refused as 'malformed CSV: field larger
    than field limit', with advice to fix the quoting; the limit is the process's again afterwards."""
    import csv

    long = " ".join(["word"] * 40_000)
    path = tmp_path / name
    path.write_text(f"text{delimiter}label\n{long}{delimiter}pos\nshort{delimiter}neg\n", encoding="utf-8")
    before = csv.field_size_limit()
    columns = read_table(path, ["text", "label"])
    assert columns["text"] == [long, "short"] and columns["label"] == ["pos", "neg"] and columns["_line"] == [2, 3]
    assert csv.field_size_limit() == before


def test_a_tsv_with_quotes_as_text_is_read_as_glue_reads_it(tmp_path, caplog):
    """A TSV whose texts start with a quote (`"Yes," he said`, as GLUE's do) is no valid quoted TSV: it was refused,
    with no setting to read it. It is read with quotes as text, and says so; one that is malformed either way is
    still refused."""
    path = tmp_path / "train.tsv"
    path.write_text('text\tlabel\n"Yes," he said.\tpos\nno "quote" here\tneg\n', encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        columns = read_delimited(path, "\t", ["text", "label"])
    assert columns["text"] == ['"Yes," he said.', 'no "quote" here'] and columns["_line"] == [2, 3]
    assert "train.tsv, line 2: malformed TSV: '\\t' expected after '\"' under quoting; read with quotes as ordinary " \
           "characters" in caplog.text
    path.write_text('text\tlabel\n"Yes," he said.\tpos\tmore\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"train.tsv, line 2: malformed TSV: .*; fix the quoting"):
        read_delimited(path, "\t", ["text", "label"])


@pytest.mark.parametrize("label_column", [-1, 1])
def test_conll_line_without_its_tag_is_refused(tmp_path, label_column):
    """A token line that lost its tag column must not turn its word into a label (with label_column=-1 the last
    column of a one-column line is the word itself)."""
    path = tmp_path / "ner.txt"
    path.write_text("-DOCSTART- O\n\nEU B-ORG\nrejects O\nGerman\ncall O\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"ner.txt, line 5: 1 column\(s\) \['German'\] where the file's first token "
                                        r"line \(line 3\) has 2; one of the two lines is malformed. A token line "
                                        r"needs the word and its tag"):
        read_conll(path, label_column=label_column)


def test_max_length_beyond_the_position_scheme(shared_data, tmp_path):
    dm = GLUEDataModule("wnli", MINILM, max_length=1024, data_root=str(shared_data), cache_dir=str(tmp_path))
    with pytest.raises(DataError, match=r"max_length=1024 is longer than the model's position scheme allows"):
        dm.check_model(EncoderConfig.from_name("bert-tiny"))
    check_max_length(1024, EncoderConfig.from_name("bert-tiny", position="alibi"))


def test_unknown_glue_task():
    with pytest.raises(DataError, match=r"Unknown GLUE task 'mnli2'; choose one of \['cola'"):
        GLUEDataModule("mnli2", MINILM)


def test_hub_name_without_network_or_local_copy(monkeypatch):
    import datasets

    from data.sources import load_hub_split

    def offline(name, config, split):
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match=r"Could not load 'someone/reviews' .* set \$LITBERT_DATA"):
        load_hub_split("someone/reviews", None, "train")


@pytest.mark.parametrize("module, name, hub", [(ClassificationDataModule, "imdb", "stanfordnlp/imdb"),
                                               (TokenClassificationDataModule, "conll2003", "conll2003")])
def test_a_data_root_without_the_datasets_copy_says_where_it_looked(module, name, hub, monkeypatch, tmp_path):
    """$LITBERT_DATA set to the wrong folder: the error said to set $LITBERT_DATA, which was set."""
    import datasets

    def offline(name, config, split, **kwargs):
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setenv("LITBERT_DATA", str(tmp_path))
    with pytest.raises(DataError, match=rf"Could not load '{hub}' .* Its local copy was looked for at "
                                        rf"{tmp_path / name}, which is not a folder: point \$LITBERT_DATA \(or "
                                        rf"data_root\) at the folder that holds {name}/, or give local files "
                                        rf"\(data.train_files, data.val_files\) instead."):
        module(MINILM, dataset=name, cache_dir=str(tmp_path)).setup("fit")


@pytest.mark.parametrize(("build", "advice"), [
    # configs/pretrain/bert-base.yaml's corpus, WikiText-103, beside a data root holding WikiText-2
    (lambda root: MLMDataModule(MINILM, dataset="Salesforce/wikitext", dataset_config="wikitext-103-raw-v1",
                                cache_dir=str(root / "cache")),
     "Local copies of 'Salesforce/wikitext' are read for the configs ['wikitext-2-raw-v1', 'wikitext-2-v1'] only, "
     "not 'wikitext-103-raw-v1': use one of those, or give your own text files (data.train_files) instead."),
    # configs/glue/mnli.yaml, whose data a GLUE config reads from a folder, never from data.train_files
    (lambda root: GLUEDataModule("mnli", MINILM, cache_dir=str(root / "cache")),
     "point $LITBERT_DATA (or data_root) at the folder that holds glue/MNLI/, or give the task's folder in GLUE's "
     "layout (data.data_dir) instead."),
], ids=["wikitext-103", "mnli"])
def test_a_dataset_out_of_reach_names_the_settings_that_reach_it(build, advice, monkeypatch, tmp_path):
    """Offline, with $LITBERT_DATA set: the error said to set $LITBERT_DATA to a copy (of a config it has no copy of),
    and to 'pass local files', which a GLUE config does not take."""
    import datasets

    def offline(name, config, split, **kwargs):
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    (tmp_path / "wikitext-2").mkdir()
    monkeypatch.setenv("LITBERT_DATA", str(tmp_path))
    with pytest.raises(DataError) as raised:
        build(tmp_path).setup("fit")
    assert str(raised.value).endswith(advice)


@pytest.mark.parametrize(("setting", "value"), [("max_documents", 0), ("max_documents", -1),
                                                ("max_val_documents", 0)])
def test_a_document_limit_below_1_is_named(setting, value, tmp_path):
    """0 failed inside the packing (no 'input_ids' in an empty table), -1 inside itertools.islice."""
    from data import MLMDataModule

    text = tmp_path / "train.txt"
    text.write_text("some words to train on\nand more\n")
    with pytest.raises(DataError, match=rf"^data.{setting}={value} must be at least 1; leave it unset"):
        MLMDataModule(MINILM, train_files=str(text), val_files=str(text), cache_dir=str(tmp_path),
                      **{setting: value})


@pytest.mark.parametrize(("setting", "value"), [("mlm_probability", 0.0), ("mlm_probability", 1.0),
                                                ("mlm_probability", 1.5), ("val_mlm_probability", 0.0)])
def test_a_masking_rate_outside_0_1_is_named_before_a_tokenizer_is_trained(setting, value, tmp_path):
    """Checked with the other settings, first: a rate of 0 or 1 (or more) is refused naming the setting it came
    from (the validation rate as itself), before data.train_tokenizer spends minutes training into the folder."""
    from data import MLMDataModule
    from data.tokenizers import TokenizerTraining

    text = tmp_path / "train.txt"
    text.write_text("some words to train on\n")
    with pytest.raises(DataError, match=rf"^data.{setting}={value} is the fraction of tokens chosen for prediction: "
                                        rf"it must lie strictly between 0 and 1"):
        MLMDataModule(str(tmp_path / "tokenizer"), train_tokenizer=TokenizerTraining(vocab_size=100),
                      train_files=str(text), **{setting: value})
    assert not (tmp_path / "tokenizer").exists()
