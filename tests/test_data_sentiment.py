"""Sentiment: SST-2 and IMDB from the data root, generic CSV/JSONL with string labels mapped to ids (the mapping
travels in the checkpoint state), explicit head / tail / head+tail truncation, and user filters counted."""

import csv
import json
import logging

import pytest
from runs import MINILM

from data import DataError, SentimentDataModule
from data.sentiment import truncate


def test_sst2(shared_data, tmp_path):
    dm = SentimentDataModule(MINILM, dataset="sst2", data_root=str(shared_data), cache_dir=str(tmp_path))
    dm.setup("validate")
    labels = dm.datasets["validation"]["labels"]
    assert len(labels) == 872 and labels.count(1) == 444 and dm.label_names == ["negative", "positive"]


def imdb_slice(shared_data, tmp_path, rows: int) -> str:
    """The first `rows` negative and positive training reviews, copied (shared data is read-only)."""
    with (shared_data / "imdb" / "train.csv").open(encoding="utf-8", newline="") as handle:
        reader = list(csv.DictReader(handle))
    picked = reader[:rows] + reader[-rows:]
    path = tmp_path / "imdb.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, ["id", "rating", "label", "text"])
        writer.writeheader()
        writer.writerows(picked)
    return str(path)


@pytest.mark.parametrize("strategy", ["head", "tail", "head+tail"])
def test_imdb_truncation_strategies(strategy, shared_data, tmp_path, caplog):
    path = imdb_slice(shared_data, tmp_path, 40)
    dm = SentimentDataModule(MINILM, train_file=path, val_file=path, max_length=64, truncation=strategy,
                             cache_dir=str(tmp_path))
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    with open(path, encoding="utf-8", newline="") as handle:
        texts = [row["text"] for row in csv.DictReader(handle)]
    full = dm.tokenizer(texts, add_special_tokens=False)["input_ids"]
    rows = dm.datasets["train"]["input_ids"]
    assert len(rows) == 80 and dm.label_names == ["0", "1"] and dm.datasets["train"]["labels"][:2] == [0, 0]
    for ids, row in zip(full, rows, strict=True):
        expected = ids if len(ids) <= 62 else {"head": ids[:62], "tail": ids[-62:],
                                               "head+tail": ids[:16] + ids[-46:]}[strategy]
        assert row == [dm.tokenizer.cls_token_id, *expected, dm.tokenizer.sep_token_id]
    cut = sum(len(ids) > 62 for ids in full)
    assert dm.truncated["train"] == cut > 70
    assert f"{cut} of 80 documents were longer than max_length=64 and were cut ({strategy})" in caplog.text


def test_truncate_head_tail_split():
    assert truncate(list(range(10)), 4, "head+tail", 0.25) == [0, 7, 8, 9]
    assert truncate(list(range(10)), 4, "tail", 0.25) == [6, 7, 8, 9]


def test_imdb_full_counts(shared_data, tmp_path):
    from data.sources import read_table

    for split in ("train", "test"):
        labels = read_table(shared_data / "imdb" / f"{split}.csv", ["text", "label"])["label"]
        assert len(labels) == 25000 and labels.count("1") == labels.count("0") == 12500
    assert len(read_table(shared_data / "imdb" / "unsup.csv", ["text"])["text"]) == 50000


def test_jsonl_string_labels_mapping_and_state(tmp_path, caplog):
    rows = [{"review": f"review {i}", "stars": ["bad", "good", "meh", "unlabelled"][i % 4]} for i in range(20)]
    path = tmp_path / "reviews.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    dm = SentimentDataModule(MINILM, train_file=str(path), val_file=str(path), text_column="review",
                             label_column="stars", skip_labels=["unlabelled"], cache_dir=str(tmp_path))
    assert dm.label_names == ["bad", "good", "meh", "unlabelled"]  # known before setup, sorted
    dm = SentimentDataModule(MINILM, train_file=str(path), val_file=str(path), text_column="review",
                             label_column="stars", label_names=["meh", "bad", "good"], skip_labels=["unlabelled"],
                             cache_dir=str(tmp_path))
    with caplog.at_level(logging.INFO):
        dm.setup("fit")
    assert dm.num_labels == 3 and dm.skipped["train"] == 5
    assert "skip_labels=['unlabelled'] left out 5 of 20 rows" in caplog.text
    assert dm.datasets["train"]["labels"][:3] == [1, 2, 0]
    state = dm.state_dict()
    assert state == {"label_values": ["meh", "bad", "good"], "label_names": ["meh", "bad", "good"]}
    fresh = SentimentDataModule(MINILM, train_file=str(path), text_column="review", label_column="stars",
                                label_names=["x", "y"], cache_dir=str(tmp_path))
    fresh.load_state_dict(state)
    assert fresh.label_names == ["meh", "bad", "good"] and fresh.num_labels == 3


def test_csv_label_outside_the_set(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("text,label\ngood film,pos\nbad film,neg\n", encoding="utf-8")
    val = tmp_path / "val.csv"
    val.write_text("text,label\nfine,pos\nodd,neutral\n", encoding="utf-8")
    dm = SentimentDataModule(MINILM, train_file=str(train), val_file=str(val), cache_dir=str(tmp_path))
    with pytest.raises(DataError, match=r"val.csv, line 3: label 'neutral' is not one of \['neg', 'pos'\]"):
        dm.setup("fit")
