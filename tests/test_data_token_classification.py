"""Token classification: CoNLL-2003 sentence counts, labels on first sub-tokens that round-trip to the words,
IOB1 -> IOB2, windows for long sentences (counted, nothing cut), and the all-sub-tokens option."""

import logging

import pytest
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
        dm = TokenClassificationDataModule(MINILM, train_file=str(path), val_file=str(path), cache_dir=str(tmp_path))
    assert "converted from IOB1 to IOB2" in caplog.text
    assert [s.tags for s in dm.sentences["train"]] == [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER", "B-PER"]]
    assert iob1_to_iob2(["I-LOC", "I-PER", "I-PER", "O", "I-PER"]) == ["B-LOC", "B-PER", "I-PER", "O", "B-PER"]
    with pytest.raises(DataError, match=r"iob1.txt, line 3: tag 'I-ORG' opens a chunk"):
        TokenClassificationDataModule(MINILM, train_file=str(path), tag_scheme="iob2", cache_dir=str(tmp_path))


def test_long_sentences_become_windows(tmp_path, caplog):
    words = [f"lobster{i}" for i in range(40)]
    path = tmp_path / "long.txt"
    path.write_text("\n".join(f"{w} NN {'B-LOC' if i % 5 == 0 else 'O'}" for i, w in enumerate(words)) + "\n\n"
                    "short NN O\n", encoding="utf-8")
    dm = TokenClassificationDataModule(MINILM, train_file=str(path), val_file=str(path), max_length=24,
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
    dm = TokenClassificationDataModule(MINILM, train_file=str(path), val_file=str(path), cache_dir=str(tmp_path),
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
        TokenClassificationDataModule(MINILM, train_file=str(path), label_names=["O", "B-ORG", "O"],
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
    dm = make(MINILM, train_file=str(path), cache_dir=str(tmp_path))
    assert not dm.has_test_split
    with pytest.raises(DataError, match=r"No validation file given; set data\.val_file\."):
        dm.setup("fit")
    with_test = make(MINILM, train_file=str(path), val_file=str(path), test_file=str(path), cache_dir=str(tmp_path))
    assert with_test.has_test_split
    with_test.setup("test")
    assert len(with_test.datasets["test"]) == 2
