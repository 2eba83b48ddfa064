"""Sequence classification: SST-2 and IMDB from the data root, any CSV/JSONL or hub dataset of one text or a pair
with string labels mapped to ids (the mapping travels in the checkpoint state) or scores, explicit head / tail /
head+tail truncation of one text and the tokenizer's longest-first cut of pairs, and user filters counted."""

import csv
import json
import logging

import datasets
import pytest
from runs import MINILM

from data import ClassificationDataModule, DataError, GLUEDataModule
from data.classification import truncate, truncate_longest_first


def test_sst2(shared_data, tmp_path):
    dm = ClassificationDataModule(MINILM, dataset="sst2", data_root=str(shared_data), cache_dir=str(tmp_path))
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
    dm = ClassificationDataModule(MINILM, train_files=path, val_files=path, max_length=64, truncation=strategy,
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
    assert f"{cut} of 80 examples were longer than max_length=64 and were cut ({strategy})" in caplog.text


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
    dm = ClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), text_columns=["review"],
                             label_column="stars", skip_labels=["unlabelled"], cache_dir=str(tmp_path))
    assert dm.label_names == ["bad", "good", "meh"]  # known before setup, sorted; skipped rows bring no class
    dm = ClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), text_columns=["review"],
                             label_column="stars", label_names=["meh", "bad", "good"], skip_labels=["unlabelled"],
                             cache_dir=str(tmp_path))
    with caplog.at_level(logging.INFO):
        dm.setup("fit")
    assert dm.num_labels == 3 and dm.skipped["train"] == 5
    assert "skip_labels=['unlabelled'] left out 5 of 20 rows" in caplog.text
    assert dm.datasets["train"]["labels"][:3] == [1, 2, 0]
    state = dm.state_dict()
    assert state.pop("training_settings")["skip_labels"] == "['unlabelled']"
    assert len(state.pop("tokenizer")) == 20  # its content's fingerprint
    assert state == {"seed": 0, "label_values": ["meh", "bad", "good"], "label_names": ["meh", "bad", "good"]}
    fresh = ClassificationDataModule(MINILM, train_files=str(path), text_columns=["review"], label_column="stars",
                                label_names=["x", "y"], skip_labels=["unlabelled"], cache_dir=str(tmp_path))
    fresh.load_state_dict(state)
    assert fresh.label_names == ["meh", "bad", "good"] and fresh.num_labels == 3
    # A resume sets the data up before restoring it: labels in another order than the checkpoint's are refused.
    dm.load_state_dict(state)  # the same labels: nothing changes
    with pytest.raises(DataError, match=r"trained with the labels \['good', 'bad', 'meh'\]; this run's data gives "
                                        r"\['meh', 'bad', 'good'\]. .* resume with --data.label_names"):
        dm.load_state_dict({**state, "label_values": ["good", "bad", "meh"], "label_names": ["good", "bad", "meh"]})


def test_a_resume_with_other_training_batches_is_refused(tmp_path):
    """A checkpoint keeps the settings that decide the training batches: a resume with another length or training
    file is refused, naming each setting and both values; loading, evaluation and padding settings may change, and
    the batch size is the task's to check, with the process count and accumulation (tests/test_settings.py)."""
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"text": f"text {i}", "label": str(i % 2)}) + "\n" for i in range(8)))

    def datamodule(**settings):
        return ClassificationDataModule(MINILM, train_files=str(path), cache_dir=str(tmp_path), **settings)

    state = datamodule(batch_size=8).state_dict()
    datamodule(batch_size=8, eval_batch_size=64, num_workers=2, pad_to_multiple_of=8,
               val_files=str(path)).load_state_dict(state)
    with pytest.raises(DataError, match=r"other batches: data.max_length: 128 in the checkpoint, 64 now\. .* resume "
                                        r"with these set as in the checkpoint"):
        datamodule(batch_size=16, max_length=64).load_state_dict(state)
    datamodule(batch_size=16).load_state_dict(state)
    other = tmp_path / "other.jsonl"
    other.write_bytes(path.read_bytes())
    with pytest.raises(DataError, match="data.train_files: .*train.jsonl' in the checkpoint, .*other.jsonl' now"):
        ClassificationDataModule(MINILM, train_files=str(other), cache_dir=str(tmp_path),
                                 batch_size=8).load_state_dict(state)


@pytest.mark.parametrize("max_length", [24, 40, 64])
def test_pairs_are_cut_as_the_tokenizer_cuts_them(max_length, shared_data, tmp_path):
    """Both texts tokenized alone and wrapped in the special tokens give the tokenizer's own pair encoding,
    `longest_first` truncation included (RTE's premises are long, so most pairs are cut at these lengths)."""
    dm = GLUEDataModule("rte", MINILM, max_length=max_length, data_root=str(shared_data), cache_dir=str(tmp_path))
    dm.setup("validate")
    with (shared_data / "glue" / "RTE" / "dev.tsv").open(encoding="utf-8") as handle:
        rows = [line.rstrip("\n").split("\t") for line in handle][1:]
    expected = dm.tokenizer([r[1] for r in rows], [r[2] for r in rows], truncation="longest_first",
                            max_length=max_length)
    assert dm.datasets["validation"]["input_ids"] == expected["input_ids"]
    assert dm.datasets["validation"]["token_type_ids"] == expected["token_type_ids"]
    assert dm.truncated["validation"] > 90  # of 277 pairs


def test_truncate_longest_first_cases():
    a, b = list(range(10)), list(range(100, 103))
    assert truncate_longest_first(a, b, 8) == (a[:5], b)  # only the longer text, down to what the budget leaves
    assert truncate_longest_first(b, a, 8) == (b, a[:5])
    assert truncate_longest_first(a, a, 7) == (a[:3], a[:4])  # both cut: halves, the odd token to the second
    assert truncate_longest_first(a, b, 5) == (a[:3], b[:2])


PAIR_YAML = """\
seed_everything: 0
trainer:
  max_steps: 12
  log_every_n_steps: 2
  logger: false
model:
  class_path: tasks.classification.SequenceClassification
  init_args:
    optimization:
      learning_rate: 1.0e-4
data:
  class_path: data.ClassificationDataModule
  init_args:
    train_files: {train}
    val_files: {dev}
    text_columns: [question, passage]
    label_column: answer
    batch_size: 8
"""


def test_a_pair_dataset_from_csv_fine_tunes_from_a_yaml_alone(shared_data, minilm, tmp_path, monkeypatch):
    """A BoolQ-like CSV (question, passage, yes/no) is a config file, no code: pairs with token types, labels
    mapped from strings, the exported model's id2label spelled as in the file."""
    import train

    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    with (shared_data / "glue" / "RTE" / "train.tsv").open(encoding="utf-8") as handle:
        rows = [line.rstrip("\n").split("\t") for line in handle][1:201]
    for name, part in (("train", rows[:160]), ("dev", rows[160:])):
        with (tmp_path / f"{name}.csv").open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["question", "passage", "answer"])
            writer.writerows([r[2], r[1], "yes" if r[3] == "entailment" else "no"] for r in part)
    config = tmp_path / "boolq-like.yaml"
    config.write_text(PAIR_YAML.format(train=tmp_path / "train.csv", dev=tmp_path / "dev.csv"))
    cli = train.main(["--config", str(config), "--model.pretrained", minilm, "--trainer.default_root_dir",
                      str(tmp_path / "run"), "--trainer.enable_progress_bar", "false"])
    data = cli.datamodule
    assert data.label_names == ["no", "yes"] and data.metric_names == ["accuracy"]
    assert any(1 in types for types in data.datasets["train"]["token_type_ids"])  # the passage is segment B
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert set(metrics) == {"val/loss", "val/accuracy"} and 0.0 <= metrics["val/accuracy"] <= 1.0
    exported = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert exported["id2label"] == {"0": "no", "1": "yes"}


def test_regression_from_jsonl(tmp_path):
    path = tmp_path / "scores.jsonl"
    path.write_text("\n".join(json.dumps({"a": f"first {i}", "b": f"second {i}", "y": i / 4}) for i in range(8)))
    dm = ClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), text_columns=["a", "b"],
                                  label_column="y", regression=True, cache_dir=str(tmp_path))
    dm.setup("fit")
    assert dm.num_labels == 1 and dm.metric_names == ["pearson", "spearman"] and dm.is_regression
    assert dm.datasets["train"]["labels"] == [i / 4 for i in range(8)]
    path.write_text(json.dumps({"a": "x", "b": "y", "y": "high"}) + "\n")
    bad = ClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), text_columns=["a", "b"],
                                   label_column="y", regression=True, cache_dir=str(tmp_path / "bad"))
    with pytest.raises(DataError, match=r"scores.jsonl, line 1: y='high' is not a finite number"):
        bad.setup("fit")


def test_a_hub_pair_dataset_keeps_its_class_label_order(monkeypatch, tmp_path):
    def fake_load_dataset(name, config, split):
        assert (name, config) == ("someone/nli", None)
        features = datasets.Features({"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
                                      "label": datasets.ClassLabel(names=["entailment", "neutral", "contradiction"])})
        return datasets.Dataset.from_dict({"premise": ["a b", "c", "d"], "hypothesis": ["e", "f g", "h"],
                                           "label": [2, 0, -1]}, features=features)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    dm = ClassificationDataModule(MINILM, dataset="someone/nli", text_columns=["premise", "hypothesis"],
                                  skip_labels=["-1"], cache_dir=str(tmp_path))
    assert dm.label_names == ["entailment", "neutral", "contradiction"]
    dm.setup("fit")
    assert dm.datasets["train"]["labels"] == [2, 0] and dm.skipped["train"] == 1


def test_settings_that_do_not_apply_are_refused(tmp_path):
    with pytest.raises(DataError, match=r"truncation='head' cuts one text, but the examples are pairs"):
        ClassificationDataModule(MINILM, dataset="rte", truncation="head")
    with pytest.raises(DataError, match=r"data.text_columns=\['body'\], but rte has \['sentence1', 'sentence2'\]"):
        ClassificationDataModule(MINILM, dataset="rte", text_columns=["body"])
    with pytest.raises(DataError, match=r"one text column, or two for a pair"):
        ClassificationDataModule(MINILM, train_files=str(tmp_path / "x.csv"), text_columns=["a", "b", "c"])


def test_a_distilbert_checkpoint_fine_tunes_on_pairs_with_its_bert_tokenizer(tmp_path):
    """transformers 5 loads DistilBERT's tokenizer (distilbert-base-uncased: no tokenizer_class) as BertTokenizer,
    which gives token types; the model has none, so its batches carry none, and its logits are transformers'."""
    import shutil

    import torch
    import transformers

    from tasks.classification import SequenceClassification

    folder = tmp_path / "distilbert"
    config = transformers.DistilBertConfig(vocab_size=30522, dim=32, n_layers=2, n_heads=4, hidden_dim=40,
                                           num_labels=2)
    torch.manual_seed(0)
    reference = transformers.DistilBertForSequenceClassification(config).eval()
    reference.save_pretrained(folder)
    for name in ("tokenizer.json", "vocab.txt"):
        shutil.copy(f"{MINILM}/{name}", folder / name)
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "model_max_length": 512}))
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps({"a": f"the first sentence {i}", "b": "and a second, longer one" * i,
                                          "label": ["no", "yes"][i % 2]}) for i in range(4)))
    data = ClassificationDataModule(str(folder), train_files=str(path), val_files=str(path), text_columns=["a", "b"],
                                    cache_dir=str(tmp_path / "cache"))
    assert data.uses_token_types  # the tokenizer gives them
    model = SequenceClassification(num_labels=2, label_names=["no", "yes"], pretrained=str(folder)).eval()
    data.check_model(model.encoder.config)
    data.setup("fit")
    batch = next(iter(data.val_dataloader()))
    assert "token_type_ids" not in batch
    with torch.no_grad():
        expected = reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        torch.testing.assert_close(model(batch), expected, atol=1e-5, rtol=0)


def test_examples_with_an_empty_text_are_kept_and_named(tmp_path, caplog):
    """An empty text cell (a column shifted, a cell lost) is kept, as the tokenizer reads it, and its lines named."""
    path = tmp_path / "pairs.csv"
    path.write_text('premise,hypothesis,label\na,b,0\n"",b,1\nc," ",0\nd,e,1\n', encoding="utf-8")
    dm = ClassificationDataModule(MINILM, train_files=str(path), val_files=str(path),
                                  text_columns=["premise", "hypothesis"], cache_dir=str(tmp_path))
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    assert len(dm.datasets["train"]) == 4
    assert f"{path}: 2 example(s) with an empty text, kept: line(s) 3, 4" in caplog.text


def test_an_example_with_two_empty_texts_is_named_once_and_left_out_rows_not_at_all(tmp_path, caplog):
    """A pair with both texts empty was counted as two examples (`line(s) 3, 3`), and a row that skip_labels leaves
    out was named among the examples 'kept'."""
    path = tmp_path / "pairs.csv"
    path.write_text('premise,hypothesis,label\na,b,0\n"","",1\nc,"",-\nd,e,1\n', encoding="utf-8")
    dm = ClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), skip_labels=["-"],
                                  text_columns=["premise", "hypothesis"], cache_dir=str(tmp_path))
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    assert len(dm.datasets["train"]) == 3
    assert f"{path}: 1 example(s) with an empty text, kept: line(s) 3\n" in caplog.text
