"""Token classification: CoNLL-2003 sentence counts, labels on first sub-tokens that round-trip to the words,
IOB1 -> IOB2, windows for long sentences (counted, nothing cut), and the all-sub-tokens option."""

import logging
import os
import re

import pytest
import torch
from runs import MINILM

from data import DataError, TokenClassificationDataModule, iob1_to_iob2
from data.sources import read_conll
from tasks.metrics import EntityF1, first_subtokens


@pytest.fixture(scope="module")
def conll(shared_data, tmp_path_factory):
    dm = TokenClassificationDataModule(MINILM, dataset="conll2003", data_root=str(shared_data), max_length=128,
                                       cache_dir=str(tmp_path_factory.mktemp("conll")))
    dm.setup(None)
    return dm


def test_conll2003_sentence_counts(conll):
    assert {split: conll.windows[split]["sentences"] for split in ("train", "validation", "test")} == \
        {"train": 14041, "validation": 3250, "test": 3453}
    assert conll.label_names == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert conll.num_labels == 9


def test_labels_round_trip_to_words(conll, shared_data):
    sentences = read_conll(shared_data / "conll2003" / "valid.txt")
    data = conll.datasets["validation"]
    extra = sum(1 for w in data["window"] if w > 0)
    assert len(data) == 3250 + extra and conll.windows["validation"]["split_sentences"] > 0
    tokenizer = conll.tokenizer
    covered: dict[int, list[int]] = {}
    checked = 0
    for example in data:
        sentence = sentences[example["sentence"]]
        ids, labels, word_ids = example["input_ids"], example["labels"], example["word_ids"]
        assert len(ids) <= 128
        first = [i for i, w in enumerate(word_ids) if w >= 0 and (i == 0 or word_ids[i - 1] != w)]
        words = [word_ids[i] for i in first]
        covered.setdefault(example["sentence"], []).extend(words)
        assert [conll.label_names[labels[i]] for i in first] == [sentence.tags[w] for w in words]
        assert all(labels[i] == -100 for i in range(len(ids)) if i not in set(first))
        for w in words:
            pieces = [ids[i] for i in range(len(ids)) if word_ids[i] == w]
            assert pieces == tokenizer(sentence.words[w], add_special_tokens=False)["input_ids"]
            if tokenizer.unk_token_id not in pieces:
                text = tokenizer.decode(pieces).replace(" ", "")
                assert text == tokenizer.backend_tokenizer.normalizer.normalize_str(sentence.words[w]).replace(" ", "")
                checked += 1
    # Every word of every sentence is in exactly one example, in order.
    assert all(covered[i] == list(range(len(s.words))) for i, s in enumerate(sentences))
    assert checked > 50000


def test_iob1_is_converted(tmp_path, caplog):
    path = tmp_path / "iob1.txt"
    path.write_text("-DOCSTART- -X- O\n\nEU NNP I-ORG\nrejects VBZ O\nGerman JJ I-MISC\ncall NN O\n\n"
                    "Peter NNP I-PER\nBlackburn NNP I-PER\nJohn NNP B-PER\n", encoding="utf-8")
    with caplog.at_level(logging.INFO):
        dm = TokenClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), cache_dir=str(tmp_path))
    assert "converted from IOB1 to IOB2" in caplog.text
    assert [s.tags for s in dm.sentences["train"]] == [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER", "B-PER"]]
    assert iob1_to_iob2(["I-LOC", "I-PER", "I-PER", "O", "I-PER"]) == ["B-LOC", "B-PER", "I-PER", "O", "B-PER"]
    with pytest.raises(DataError, match=r"iob1.txt, line 3: tag 'I-ORG' opens a chunk"):
        TokenClassificationDataModule(MINILM, train_files=str(path), tag_scheme="iob2", cache_dir=str(tmp_path))


def test_a_tag_that_is_no_chunk_among_chunk_tags_is_refused(tmp_path):
    """One typo (X-PER) among IOB tags would make the tag set one of single tokens, scored by accuracy."""
    path = tmp_path / "typo.txt"
    path.write_text("EU B-ORG\nrejects O\n\nPeter X-PER\nBlackburn I-PER\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"typo.txt, line 4: tag 'X-PER' is neither O nor a chunk tag .* "
                                        r"data.tag_scheme none"):
        TokenClassificationDataModule(MINILM, train_files=str(path), cache_dir=str(tmp_path))
    with pytest.raises(DataError, match=r"data.label_names: tag 'PER' is neither O nor a chunk tag"):
        TokenClassificationDataModule(MINILM, train_files=str(path), label_names=["O", "B-ORG", "PER"],
                                      cache_dir=str(tmp_path))
    tagged = TokenClassificationDataModule(MINILM, train_files=str(path), tag_scheme="none", cache_dir=str(tmp_path))
    assert "X-PER" in tagged.label_names
    untyped = tmp_path / "untyped.txt"  # a prefix without its type, which scored as an entity type ''
    untyped.write_text("EU B-\nrejects O\n\nPeter B-PER\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"untyped.txt, line 1: tag 'B-' is neither O nor a chunk tag \(a type after "):
        TokenClassificationDataModule(MINILM, train_files=str(untyped), cache_dir=str(tmp_path))


def test_a_converted_evaluation_file_is_a_warning_naming_the_tag(tmp_path, caplog):
    """An IOB2 file with a stray I- after O is converted as IOB1 under tag_scheme auto, which changes its gold
    entities: said at warning level (which a run prints), with the line, not only in the info log."""
    train, dev = tmp_path / "train.txt", tmp_path / "dev.txt"
    train.write_text("EU B-ORG\nrejects O\n\nPeter B-PER\nBlack I-PER\n", encoding="utf-8")
    dev.write_text("EU B-ORG\nsaid O\nPeter I-PER\n", encoding="utf-8")
    dm = TokenClassificationDataModule(MINILM, train_files=str(train), val_files=str(dev), cache_dir=str(tmp_path))
    with caplog.at_level(logging.WARNING):
        dm.setup("validate")
    assert [(r.levelno, r.getMessage()) for r in caplog.records if "IOB1" in r.getMessage()] == [
        (logging.WARNING, f"{dev}, line 3: tags converted from IOB1 to IOB2, as tag 'I-PER' opens a chunk (which "
                          f"IOB2 forbids); set data.tag_scheme iob2 to refuse such tags instead")]
    assert dm.sentences["validation"][0].tags == ["B-ORG", "O", "B-PER"]


def test_words_holding_unicode_spaces_or_line_separators_are_a_word_a_line(tmp_path):
    """Columns are split at ASCII spaces and tabs and lines at newlines, as conlleval and the hub's conll2003 reader
    read them: a word that is or holds a no-break or ideographic space, U+2028 or U+0085 (which Python's `split`
    and `splitlines` break at) stays one word of its line, with its tag; the tokenizer erases some, which then
    keep their label on the unknown token. Read as words to tag, the same file gives a word a line."""
    words = ["Peter", "\xa0", "10\xa0000", "foo\u2028bar", "\x85", "\u3000", "Bonn"]
    tags = ["B-PER", "O", "O", "O", "O", "O", "B-LOC"]
    path = tmp_path / "spaces.txt"
    path.write_text("".join(f"{w}\tNNP\t{t}\r\n" for w, t in zip(words, tags, strict=True)) + "\r\nnext\tNN\tO\n",
                    encoding="utf-8")
    (sentence, after) = read_conll(path)
    assert (sentence.words, sentence.tags, sentence.lines) == (words, tags, [1, 2, 3, 4, 5, 6, 7])
    assert (after.words, after.lines) == (["next"], [9])
    assert [s.words for s in read_conll(path, 0, None)] == [words, ["next"]]
    dm = TokenClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), cache_dir=str(tmp_path))
    dm.setup("validate")
    row = dm.datasets["validation"][0]
    first = [i for i, w in enumerate(row["word_ids"]) if w >= 0 and row["word_ids"][i - 1] != w]
    assert [row["word_ids"][i] for i in first] == list(range(len(words)))
    assert [dm.label_names[row["labels"][i]] for i in first] == tags


def test_a_single_tag_is_refused_with_its_file(tmp_path):
    path = tmp_path / "plain.txt"
    path.write_text("EU O\nrejects O\n\nPeter O\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"the tags of .*plain.txt hold one tag, \['O'\]"):
        TokenClassificationDataModule(MINILM, train_files=str(path), cache_dir=str(tmp_path))


def test_long_sentences_become_windows(tmp_path, caplog):
    words = [f"lobster{i}" for i in range(40)]
    path = tmp_path / "long.txt"
    path.write_text("\n".join(f"{w} NN {'B-LOC' if i % 5 == 0 else 'O'}" for i, w in enumerate(words)) + "\n\n"
                    "short NN O\n", encoding="utf-8")
    dm = TokenClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), max_length=24,
                                       cache_dir=str(tmp_path), label_all_subtokens=True)
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    data = dm.datasets["train"]
    assert dm.windows["train"] == {"sentences": 2, "examples": len(data), "split_sentences": 1}
    assert "1 of 2 sentences were longer than max_length=24 and were split into windows" in caplog.text
    windows = [r for r in data if r["sentence"] == 0]
    assert len(windows) > 1 and all(len(r["input_ids"]) <= 24 for r in windows)
    # Every word appears exactly once, in order, across the windows; every sub-token carries its word's label.
    assert sum(([w for w in r["word_ids"] if w >= 0] for r in windows), []) == sorted(
        sum(([w for w in r["word_ids"] if w >= 0] for r in windows), []))
    assert {w for r in windows for w in r["word_ids"] if w >= 0} == set(range(40))
    for r in windows:
        for w, label in zip(r["word_ids"], r["labels"], strict=True):
            assert label == (-100 if w < 0 else dm.label_names.index("B-LOC" if w % 5 == 0 else "O"))


def test_a_word_longer_than_a_window_keeps_what_a_window_holds(tmp_path, caplog):
    """A single word of more sub-tokens than a window holds (CoNLL-2003's train.txt has a 35-piece run of dashes) used
    to refuse the whole file at a short max_length; its tag sits on its first sub-token, so it keeps the sub-tokens a
    window holds, is logged by line, and every word of its sentence is still tagged once."""
    dashes = "Company" + "-" * 30 + "Price"
    path = tmp_path / "long_word.txt"
    path.write_text(f"Peter NNP B-PER\n{dashes} NN O\nBonn NNP B-LOC\n", encoding="utf-8")
    dm = TokenClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), max_length=16,
                                       cache_dir=str(tmp_path))
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    assert (f"{path}: 1 word(s) had more sub-tokens than a window of max_length=16 holds and kept their first 14 (each "
            f"word's tag is on its first): line(s) 2 ({dashes[:40]!r})") in caplog.text
    rows = list(dm.datasets["train"])
    assert all(len(r["input_ids"]) <= 16 for r in rows)
    word_ids = [w for r in rows for w in r["word_ids"] if w >= 0]
    assert word_ids.count(1) == 14 and sorted(set(word_ids)) == [0, 1, 2]
    firsts = [(w, label) for r in rows for i, (w, label) in enumerate(zip(r["word_ids"], r["labels"], strict=True))
              if w >= 0 and (i == 0 or r["word_ids"][i - 1] != w)]
    assert [(w, dm.label_names[label]) for w, label in firsts] == [(0, "B-PER"), (1, "O"), (2, "B-LOC")]


def test_entities_split_by_windows_are_scored_as_conlleval_counts_them(shared_data, tmp_path):
    """The real dev set at max_length 64, where some entities cross a window boundary: its evaluation batches,
    scored with the gold tags as predictions, hold exactly the 5,942 entities conlleval counts in valid.txt (each
    window scored alone would count 5,948), with label_all_subtokens (every sub-token labelled) as well."""
    for all_subtokens in (False, True):
        dm = TokenClassificationDataModule(MINILM, dataset="conll2003", data_root=str(shared_data), max_length=64,
                                           cache_dir=str(tmp_path), label_all_subtokens=all_subtokens,
                                           eval_batch_size=64)
        dm.setup("validate")
        whole, per_window = EntityF1(dm.label_names), EntityF1(dm.label_names)
        for batch in dm.val_dataloader():
            assert {"word_ids", "sentence", "window", "parts"} <= set(batch)
            labels = batch["labels"]
            scored = (labels != -100) & first_subtokens(batch["word_ids"])
            whole.update(labels.clamp(min=0), labels, scored, batch["sentence"], batch["window"], batch["parts"])
            per_window.update(labels.clamp(min=0), labels, scored)
        assert whole.counts() == (5942, 5942, 5942)
        assert per_window.counts() == (5948, 5948, 5948)


def test_later_subtokens_of_a_chunk_start_continue_it(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("Schwarzenegger NNP B-PER\nKrishnamurthy NNP I-PER\nvisited VBD O\nUzbekistan NNP B-LOC\n",
                    encoding="utf-8")
    dm = TokenClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), cache_dir=str(tmp_path),
                                       label_all_subtokens=True)
    dm.setup("fit")
    row = dm.datasets["train"][0]
    names = [dm.label_names[i] if i >= 0 else "-" for i in row["labels"]]
    words = row["word_ids"]
    first = [i for i, w in enumerate(words) if w >= 0 and words[i - 1] != w]
    assert [names[i] for i in first] == ["B-PER", "I-PER", "O", "B-LOC"]
    later = [names[i] for i, w in enumerate(words) if w >= 0 and i not in first]
    assert later and set(later) <= {"I-PER", "B-LOC"}  # no I-LOC in this label set: B-LOC stays
    assert "I-PER" in later and all(
        names[i] == "I-PER" for i, w in enumerate(words) if w in (0, 1) and i not in first)


def test_repeated_label_names_are_refused(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("EU NNP B-ORG\nrejects VBZ O\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"data.label_names lists \['O'\] more than once"):
        TokenClassificationDataModule(MINILM, train_files=str(path), label_names=["O", "B-ORG", "O"],
                                      cache_dir=str(tmp_path))


@pytest.mark.parametrize("module", ["token_classification", "classification"])
def test_local_training_files_need_their_other_splits_as_files(module, tmp_path):
    """Given a training file, a split without its file is an error naming the setting, never a silent fall-back to a
    dataset; the test stage runs only where a test file is given (the skeleton's `given_file`, shared by both)."""
    from data import ClassificationDataModule

    if module == "token_classification":
        path = tmp_path / "train.txt"
        path.write_text("EU NNP B-ORG\nrejects VBZ O\n\nPeter NNP B-PER\n", encoding="utf-8")
        make = TokenClassificationDataModule
    else:
        path = tmp_path / "train.csv"
        path.write_text("text,label\ngood,1\nbad,0\n", encoding="utf-8")
        make = ClassificationDataModule
    dm = make(MINILM, train_files=str(path), cache_dir=str(tmp_path))
    assert not dm.has_test_split
    with pytest.raises(DataError, match=r"No validation file given; set data\.val_files\."):
        dm.setup("fit")
    with_test = make(MINILM, train_files=str(path), val_files=str(path), test_files=str(path), cache_dir=str(tmp_path))
    assert with_test.has_test_split
    with_test.setup("test")
    assert len(with_test.datasets["test"]) == 2


# ---- hub datasets and JSON lines --------------------------------------------------------------------------------

# The hub's conll2003 `ner_tags` ClassLabel names, in its id order.
HUB_CONLL_TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
CONLL_FILES = {"train": "train.txt", "validation": "valid.txt", "test": "test.txt"}


def hub_folder(folder, splits: dict[str, list], tag_names: list[str] | None) -> str:
    """A dataset as the hub serves it: parquet files `data/<split>-00000-of-00001.parquet` that `load_dataset(folder)`
    reads, with a `tokens` column and a `ner_tags` column of `ClassLabel(tag_names)` ids (names where None)."""
    import datasets

    tags = datasets.ClassLabel(names=tag_names) if tag_names is not None else datasets.Value("string")
    features = datasets.Features({"id": datasets.Value("string"), "tokens": datasets.List(datasets.Value("string")),
                                  "ner_tags": datasets.List(tags)})
    (folder / "data").mkdir(parents=True)
    for split, sentences in splits.items():
        rows = {"id": [str(i) for i in range(len(sentences))], "tokens": [s.words for s in sentences],
                "ner_tags": [[tag_names.index(t) for t in s.tags] if tag_names else s.tags for s in sentences]}
        datasets.Dataset.from_dict(rows, features=features).to_parquet(
            str(folder / "data" / f"{split}-00000-of-00001.parquet"))
    return str(folder)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """`load_dataset`'s cache in the test's folder."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def test_hub_dataset_gives_the_batches_of_the_conll_files(conll, tmp_path, hub_cache):
    """CoNLL-2003 as the hub serves it (tokens and ClassLabel `ner_tags`, in the hub's tag order) reads as the same
    sentences and tags as the shared CoNLL files, split by split, and at the files' label order gives their
    tokenized dev set and batches exactly."""
    files = {split: conll._sentences(split) for split in CONLL_FILES}
    folder = hub_folder(tmp_path / "conll2003-hub", files, HUB_CONLL_TAGS)
    hub = TokenClassificationDataModule(MINILM, dataset=folder, label_names=conll.label_names, max_length=128,
                                        cache_dir=str(tmp_path / "cache"))
    for split, sentences in files.items():
        read = hub._sentences(split)
        assert len(read) == len(sentences) == {"train": 14041, "validation": 3250, "test": 3453}[split]
        assert [(s.words, s.tags) for s in read] == [(s.words, s.tags) for s in sentences]
    hub.setup("validate")
    ours, theirs = hub.datasets["validation"], conll.datasets["validation"]
    assert ours.column_names == theirs.column_names and ours.to_dict() == theirs.to_dict()
    for a, b in zip(hub.val_dataloader(), conll.val_dataloader(), strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert "split 'validation' (hub)" in hub.describe_source()


def test_a_hub_name_loads_through_load_dataset_with_its_tag_names(tmp_path, hub_cache, monkeypatch):
    """`dataset: wnut_17` goes to `datasets.load_dataset("wnut_17", None, split=...)`; its `ner_tags` ClassLabel
    names the tags (and orders them), and `label_column` picks another tag column."""
    import datasets

    from data.sources import ConllSentence

    tags = ["O", "B-corporation", "I-corporation", "B-person", "I-person"]
    sentences = [ConllSentence(["@paul", "works", "at", "Acme", "Corp"], ["B-person", "O", "O", "B-corporation",
                                                                           "I-corporation"], []),
                 ConllSentence(["so", "it", "goes"], ["O", "O", "O"], [])]
    folder = hub_folder(tmp_path / "wnut", {"train": sentences, "validation": sentences[:1]}, tags)
    calls, load = [], datasets.load_dataset

    def load_dataset(name, config=None, split=None, **kwargs):
        calls.append((name, config, split))
        return load(folder, split=split)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    dm = TokenClassificationDataModule(MINILM, dataset="wnut_17", cache_dir=str(tmp_path))
    dm.setup("fit")
    assert calls[0] == ("wnut_17", None, "train") and ("wnut_17", None, "validation") in calls
    assert dm.label_names == tags  # the ClassLabel's names, in its id order (not sorted), as run_ner takes them
    row = dm.datasets["train"][0]
    first = first_subtokens(torch.tensor([row["word_ids"]]))[0]
    assert [tags[label] for label, keep in zip(row["labels"], first.tolist(), strict=True) if keep] == \
        sentences[0].tags
    with pytest.raises(DataError, match=r"Hub dataset 'wnut_17' split 'train' lacks column\(s\) \['pos_tags'\]; "
                                        r"it has \['id', 'tokens', 'ner_tags'\]"):
        TokenClassificationDataModule(MINILM, dataset="wnut_17", label_column="pos_tags", cache_dir=str(tmp_path))


def write_jsonl(path, rows) -> str:
    import json

    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def test_json_lines_give_the_batches_of_a_conll_file(tmp_path):
    """JSON lines of {"tokens", "tags"} (tags as names, or as ids named by label_names) tokenize to the examples a
    CoNLL file of the same sentences gives, windows included."""
    sentences = read_conll(os.path.join(os.environ["LITBERT_DATA"], "conll2003", "valid.txt"))[:300]
    conll = tmp_path / "dev.txt"
    conll.write_text("\n\n".join("\n".join(f"{w} {t}" for w, t in zip(s.words, s.tags, strict=True))
                                 for s in sentences) + "\n", encoding="utf-8")
    names = write_jsonl(tmp_path / "dev.jsonl", [{"tokens": s.words, "tags": s.tags} for s in sentences])
    ids = write_jsonl(tmp_path / "ids.jsonl", [{"tokens": s.words, "tags": [HUB_CONLL_TAGS.index(t) for t in s.tags]}
                                               for s in sentences])
    built = []
    for train in (str(conll), names, ids):
        dm = TokenClassificationDataModule(MINILM, train_files=train, val_files=train, max_length=32,
                                           label_names=HUB_CONLL_TAGS, cache_dir=str(tmp_path / str(len(built))))
        dm.setup("fit")
        built.append(dm.datasets["train"].to_dict())
    assert built[0]["window"].count(1) > 0  # sentences split into windows
    assert built[0] == built[1] == built[2]
    by_name = TokenClassificationDataModule(MINILM, train_files=names, val_files=names, cache_dir=str(tmp_path / "n"),
                                            predict_file=write_jsonl(tmp_path / "new.jsonl", [
                                                {"tokens": s.words} for s in sentences]), max_length=32)
    assert by_name.label_names == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    by_name.setup("predict")  # new text as JSON lines of words: the same examples, without labels
    predict = by_name.datasets["predict"].to_dict()
    assert predict == {k: v for k, v in built[0].items() if k != "labels"}


@pytest.mark.parametrize("row, settings, message", [
    pytest.param({"tokens": "EU rejects", "tags": ["B-ORG", "O"]}, {},
                 r"train.jsonl, line 2: field 'tokens' is str 'EU rejects', not a list", id="tokens-not-a-list"),
    pytest.param({"tokens": ["EU", "rejects"], "tags": "B-ORG O"}, {},
                 r"train.jsonl, line 2: field 'tags' is str 'B-ORG O', not a list", id="tags-not-a-list"),
    pytest.param({"tokens": ["EU", "rejects", "it"], "tags": ["B-ORG", "O"]}, {},
                 r"train.jsonl, line 2: field 'tokens' has 3 words and field 'tags' 2 tags; each word needs one tag",
                 id="length-mismatch"),
    pytest.param({"tokens": [], "tags": []}, {}, r"train.jsonl, line 2: field 'tokens' is empty", id="no-words"),
    pytest.param({"tokens": ["EU", 7], "tags": ["B-ORG", "O"]}, {},
                 r"train.jsonl, line 2: field 'tokens' holds int 7; words are strings", id="word-not-a-string"),
    pytest.param({"tokens": ["EU"], "tags": [1]}, {},
                 r"train.jsonl, line 2: field 'tags' holds tag ids \(1\) that nothing names; set data.label_names",
                 id="ids-without-names"),
    pytest.param({"tokens": ["EU"], "tags": [5]}, {"label_names": ["O", "B-ORG"]},
                 r"train.jsonl, line 2: tag id 5 in field 'tags' names none of the 2 tags", id="id-out-of-range"),
    pytest.param({"tokens": ["EU"], "tags": [None]}, {},
                 r"train.jsonl, line 2: field 'tags' holds NoneType None; a tag is a name", id="tag-not-a-name"),
    pytest.param({"tokens": ["EU"], "tags": ["B-PER"]}, {"label_names": ["O", "B-ORG"]},
                 r"train.jsonl, line 2: tag 'B-PER' is not in the label set \['O', 'B-ORG'\]", id="unknown-tag"),
    pytest.param({"tokens": ["EU"], "labels": ["B-ORG"]}, {},
                 r"train.jsonl, line 2: missing column\(s\) \['tags'\]", id="missing-field"),
    pytest.param({"tokens": ["EU"], "tags": ["B-ORG"]}, {"label_column": 1},
                 r"train.jsonl has named fields, but data.label_column=1 is a column number", id="column-number"),
])
def test_bad_json_lines_rows_are_refused_by_file_line_and_field(row, settings, message, tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [{"tokens": ["Peter"], "tags": ["B-ORG"]}, row])
    with pytest.raises(DataError, match=message):
        TokenClassificationDataModule(MINILM, train_files=path, val_files=path, cache_dir=str(tmp_path),
                                      **settings).setup("fit")


def test_bad_hub_rows_are_refused_by_dataset_split_row_and_field(tmp_path, hub_cache):
    import datasets

    folder = tmp_path / "hub"
    (folder / "data").mkdir(parents=True)
    datasets.Dataset.from_dict({"tokens": [["EU", "rejects"], ["Peter", "Blackburn"]],
                                "ner_tags": [["B-ORG", "O"], ["B-PER"]]}).to_parquet(
        str(folder / "data" / "train-00000-of-00001.parquet"))
    with pytest.raises(DataError, match=r"hub\[train\], row 1: field 'tokens' has 2 words and field 'ner_tags' 1 tags"):
        TokenClassificationDataModule(MINILM, dataset=str(folder), cache_dir=str(tmp_path))


def test_a_field_name_for_a_conll_file_is_refused(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("EU NNP B-ORG\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train.txt is a column file, whose columns are numbered, but "
                                        r"data.label_column='ner_tags' names a field"):
        TokenClassificationDataModule(MINILM, train_files=str(path), label_column="ner_tags", cache_dir=str(tmp_path))


TEXT = ["EU rejects German call .", "Peter Blackburn", "BRUSSELS 1996-08-22"]


def tagging(tmp_path, predict_file: str, **settings) -> TokenClassificationDataModule:
    """A datamodule of a tiny training file, to read `predict_file`."""
    tmp_path.mkdir(exist_ok=True)
    train = tmp_path / "train.txt"
    train.write_text("Peter B-PER\nsaid O\n\nyes O\n", encoding="utf-8")
    return TokenClassificationDataModule(MINILM, train_files=str(train), val_files=str(train), max_length=16,
                                         predict_file=predict_file, cache_dir=str(tmp_path / "cache"), **settings)


@pytest.mark.parametrize("content", ["\n".join(TEXT) + "\n", "\r\n\r\n".join(TEXT) + "\r\n",
                                     "\ufeff" + "\n\n  \n".join(t.replace(" ", "\t") for t in TEXT)])
def test_text_a_sentence_a_line_is_tagged_with_predict_format_lines(tmp_path, content):
    """Each line a sentence, its words split at spaces or tabs, blank lines skipped (CRLF, a BOM): the examples that
    JSON lines of the same words give."""
    text = tmp_path / "new.txt"
    text.write_text(content, encoding="utf-8")
    words = [line.split() for line in TEXT]
    rows = write_jsonl(tmp_path / "new.jsonl", [{"tokens": sentence} for sentence in words])
    built = []
    for path, settings in ((str(text), {"predict_format": "lines"}), (rows, {})):
        dm = tagging(tmp_path / str(len(built)), path, **settings)
        dm.setup("predict")
        assert [s.words for s in dm._sentences("predict")] == words
        built.append(dm.datasets["predict"].to_dict())
    assert built[0] == built[1] and len(built[0]["sentence"]) == 3


@pytest.mark.parametrize(("content", "message"), [
    pytest.param("Peter Blackburn\nAngela Merkel\n",
                 r"names.txt: its 2 lines of 2 fields have no blank line between them, so they read as one sentence, "
                 r"a word a line \(line 1: Peter Blackburn\), and only the word_column=0 field of each line would be "
                 r"tagged. If the file is text, a sentence a line, set data.predict_format lines; if it is a column "
                 r"file \(a word a line, a blank line between sentences\), set data.predict_format columns",
                 id="one-sentence-of-lines-of-as-many-fields"),
    pytest.param("EU rejects German call\n\nPeter Blackburn was here\n",
                 r"names.txt: every sentence is one line of 4 fields \(line 1: EU rejects German call\), and only the "
                 r"word_column=0 field", id="every-sentence-one-line"),
    pytest.param("EU rejects German call .\nPeter Blackburn\n",
                 r"names.txt, line 2: 2 column\(s\) \['Peter', 'Blackburn'\] where the file's first token line \(line "
                 r"1\) has 5; .* or is the file text, a sentence a line\? Then set data.predict_format lines",
                 id="lines-of-other-widths"),
    pytest.param("John lives here\nMary works there\n\nBob eats food\n",
                 r"names.txt: every line has 3 fields, and no column but the words' \(word_column=0\) holds tags "
                 r"\(line 1: John lives here; 'lives' is no tag\): the file may be text, a sentence a line, of which "
                 r"one word a line would be tagged. If it is text, set data.predict_format lines; if it is a column "
                 r"file \(a word a line, a blank line between sentences\), set data.predict_format columns\.$",
                 id="lines-of-as-many-words-between-blank-lines"),
])
def test_a_file_to_tag_that_may_be_text_is_refused_unless_its_format_is_set(tmp_path, content, message):
    """Read as columns, each line of text would be one word, its first field (`Peter`, `Angela`): refused, and
    `predict_format` says how to read it."""
    path = tmp_path / "names.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        tagging(tmp_path, str(path)).setup("predict")
    if "Angela" in content:
        columns = tagging(tmp_path / "columns", str(path), predict_format="columns")
        columns.setup("predict")
        assert [s.words for s in columns._sentences("predict")] == [["Peter", "Angela"]]
        lines = tagging(tmp_path / "lines", str(path), predict_format="lines")
        assert [s.words for s in lines._sentences("predict")] == [["Peter", "Blackburn"], ["Angela", "Merkel"]]
    if "Bob" in content:  # read as columns, John, Mary and Bob were tagged, and the other words left untagged
        lines = tagging(tmp_path / "lines", str(path), predict_format="lines")
        assert [s.words for s in lines._sentences("predict")] == [line.split() for line in content.split("\n") if line]
        columns = tagging(tmp_path / "columns", str(path), predict_format="columns")
        assert [s.words for s in columns._sentences("predict")] == [["John", "Mary"], ["Bob"]]


@pytest.mark.parametrize("content, settings", [
    pytest.param("EU NNP B-ORG\nrejects VBZ O\n\nPeter NNP B-PER\n", {}, id="pos-and-ner"),
    pytest.param("EU eu NNP\nrejects reject VBZ\n\nPeter peter NNP\n", {}, id="lemmas-beside-pos"),
    pytest.param("EU 1 x\nrejects 2 y\n\nPeter 1 z\n", {}, id="a-column-of-numbers"),
    pytest.param("EU B-corporation\nrejects O\n\nPeter B-person\n", {}, id="lower-case-chunk-tags"),
    pytest.param("EU nn\nrejects vb\n\nPeter nn\n", {"label_names": ["O", "B-PER", "nn", "vb"],
                                                      "tag_scheme": "none"}, id="the-models-lower-case-tags"),
])
def test_a_column_file_to_tag_whose_other_columns_hold_tags_reads_as_columns(tmp_path, content, settings):
    """Beside the words, a column of POS tags, chunk tags, numbers or the model's own tags tells a column file from
    text, whatever its other columns hold (lemmas)."""
    path = tmp_path / "new.txt"
    path.write_text(content, encoding="utf-8")
    dm = tagging(tmp_path, str(path), **settings)
    dm.setup("predict")
    assert [s.words for s in dm._sentences("predict")] == [["EU", "rejects"], ["Peter"]]


def test_a_column_file_of_tags_of_no_known_kind_reads_with_predict_format_columns(tmp_path):
    path = tmp_path / "new.txt"
    path.write_text("EU b-org\nrejects o\n\nPeter b-per\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"new.txt: every line has 2 fields, .* \(line 1: EU b-org; 'b-org' is no "
                                        r"tag\)"):
        tagging(tmp_path / "refused", str(path)).setup("predict")
    dm = tagging(tmp_path, str(path), predict_format="columns")
    dm.setup("predict")
    assert [s.words for s in dm._sentences("predict")] == [["EU", "rejects"], ["Peter"]]


@pytest.mark.parametrize("split", ["train", "predict"])
def test_a_csv_is_refused_as_words(tmp_path, split):
    """A CSV holds texts (a `text` column), not a word a line: read as columns, `text` would be a word."""
    path = tmp_path / "new.csv"
    path.write_text("text\nEU\nrejects\n", encoding="utf-8")
    files = {"train_files": str(path), "val_files": str(path)} if split == "train" else {}
    with pytest.raises(DataError, match=r"new.csv: a .csv file is a table of texts, but tagging reads words"):
        if split == "train":
            TokenClassificationDataModule(MINILM, cache_dir=str(tmp_path), **files)
        else:
            tagging(tmp_path, str(path)).setup("predict")


@pytest.mark.parametrize("word", ["New\nYork", "New\tYork", "New\r\nYork"])
def test_a_word_to_tag_holding_a_tab_or_line_break_is_refused(tmp_path, word):
    """Its `word<TAB>tag` line would split, and the tags after it would no longer pair with the words."""
    path = write_jsonl(tmp_path / "new.jsonl", [{"tokens": ["EU"]}, {"tokens": ["in", word]}])
    with pytest.raises(DataError, match=rf"new.jsonl, line 2: word {re.escape(repr(word))} holds a tab or a line "
                                        r"break"):
        tagging(tmp_path, path).setup("predict")


@pytest.mark.parametrize("setting", ["lines", "columns"])
def test_a_predict_format_that_contradicts_a_json_suffix_is_refused(tmp_path, setting):
    path = write_jsonl(tmp_path / "new.jsonl", [{"tokens": ["EU"]}])
    with pytest.raises(DataError, match=rf"new.jsonl is JSON \(its suffix\), but data.predict_format='{setting}'"):
        tagging(tmp_path, path, predict_format=setting).setup("predict")


@pytest.mark.slow  # two short fine-tunes of MiniLM-L6 through train.py: a minute or two on 2 CPU cores
def test_train_py_on_a_hub_dataset_equals_the_conll_files(shared_data, tmp_path, hub_cache, monkeypatch):
    """The shipped NER config trained a few steps on CoNLL-2003 sentences from CoNLL files and on the same sentences
    as a hub dataset (`--data.dataset`) reaches the same dev and test metrics, value for value; unset, the hub run's
    labels are its ClassLabel's, stored with the export."""
    import json

    import train

    sentences = {split: read_conll(shared_data / "conll2003" / name)[:count]
                 for (split, name), count in zip(CONLL_FILES.items(), (96, 48, 48), strict=True)}
    files = {}
    for split, rows in sentences.items():
        files[split] = tmp_path / f"{split}.txt"
        files[split].write_text("\n\n".join("\n".join(f"{w} {t}" for w, t in zip(s.words, s.tags, strict=True))
                                            for s in rows) + "\n", encoding="utf-8")
    folder = hub_folder(tmp_path / "hub", sentences, HUB_CONLL_TAGS)
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "disabled")

    def fine_tune(name: str, *source: str) -> dict:
        train.main(["--config", "configs/ner/conll2003.yaml", "--model.pretrained", MINILM, *source,
                    "--trainer.default_root_dir", str(tmp_path / name), "--trainer.max_steps", "6",
                    "--data.batch_size", "16", "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
                    "--model.optimization.learning_rate", "1e-4"])
        return json.loads((tmp_path / name / "metrics.json").read_text())

    order = ["--data.label_names", json.dumps(HUB_CONLL_TAGS)]
    from_files = fine_tune("files", "--data.train_files", str(files["train"]), "--data.val_files",
                           str(files["validation"]), "--data.test_files", str(files["test"]), *order)
    from_hub = fine_tune("hub", "--data.dataset", folder, *order)
    assert {"val/f1", "test/f1", "val/loss"} <= set(from_files)
    assert from_hub == from_files
    fine_tune("hub-labels", "--data.dataset", folder, "--export", "true")
    config = json.loads((tmp_path / "hub-labels" / "model" / "config.json").read_text())
    assert [config["id2label"][str(i)] for i in range(9)] == HUB_CONLL_TAGS
