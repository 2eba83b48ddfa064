"""GLUE: the tasks in shared data load with the official train/dev counts and label types; MNLI (matched and
mismatched) and QQP parse from files in the official layout; test sets predict into submission TSVs."""

import csv
import pickle
from pathlib import Path

import datasets
import pytest
import torch
from runs import MINILM

from data import GLUE_TASKS, DataError, GLUEDataModule

# Official counts (MANIFEST.md, matching the GLUE paper): train, dev, test; label counts of train.
OFFICIAL = {
    "cola": (8551, 1043, 1063, {1: 6023, 0: 2528}),
    "sst2": (67349, 872, 1821, {1: 37569, 0: 29780}),
    "mrpc": (3668, 408, 1725, {1: 2474, 0: 1194}),
    "stsb": (5749, 1500, 1379, None),
    "rte": (2490, 277, 3000, {0: 1249, 1: 1241}),
    "wnli": (635, 71, 146, {1: 312, 0: 323}),
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("glue-cache"))


@pytest.mark.parametrize("task", sorted(OFFICIAL))
def test_official_counts_and_label_types(task, shared_data, cache):
    train_n, dev_n, test_n, label_counts = OFFICIAL[task]
    dm = GLUEDataModule(task, MINILM, data_root=str(shared_data), cache_dir=cache, batch_size=16)
    dm.setup("fit")
    dm.setup("predict")
    assert (len(dm.datasets["train"]), len(dm.datasets["validation"]), len(dm.datasets["test"])) == \
        (train_n, dev_n, test_n)
    batch = next(iter(dm.train_dataloader()))
    pair = len(dm.spec.text_columns) == 2
    assert batch["input_ids"].shape == batch["attention_mask"].shape == batch["token_type_ids"].shape
    assert batch["token_type_ids"].any() == pair  # sentence pairs have a type-1 segment
    if task == "stsb":
        assert dm.is_regression and dm.num_labels == 1 and batch["labels"].dtype == torch.float32
        scores = torch.tensor(dm.datasets["train"]["labels"])
        assert scores.min() == 0.0 and scores.max() == 5.0
    else:
        assert not dm.is_regression and dm.num_labels == 2 and batch["labels"].dtype == torch.long
        labels = dm.datasets["train"]["labels"]
        assert {k: labels.count(k) for k in set(labels)} == label_counts
    assert batch["labels"].shape == (16,)
    assert "labels" not in next(iter(dm.predict_dataloader()))


def test_qnli_dev_labels(shared_data, cache):
    dm = GLUEDataModule("QNLI", MINILM, data_root=str(shared_data), cache_dir=cache)
    dm.setup("validate")
    labels = dm.datasets["validation"]["labels"]
    assert len(labels) == 5463 and labels.count(0) == 2702 and labels.count(1) == 2761  # entailment = 0
    assert dm.label_names == ["entailment", "not_entailment"] and dm.metric_names == ["accuracy"]


def test_a_local_copy_without_the_training_set_names_what_it_has(shared_data, cache):
    """The shared QNLI has dev and test sets only: training on it names the missing split, the splits the copy has
    and the setting to point elsewhere, not just a file path to check."""
    dm = GLUEDataModule("qnli", MINILM, data_root=str(shared_data), cache_dir=cache)
    folder = shared_data / "glue" / "QNLI"
    with pytest.raises(FileNotFoundError) as raised:
        dm.setup("fit")
    assert str(raised.value) == (
        f"The local copy of 'nyu-mll/glue' (qnli) at {folder} has no 'train' split (expected {folder / 'train.tsv'}); "
        f"splits present: ['test', 'validation']. Add the file, or point $LITBERT_DATA (or data.data_root) at a copy "
        f"of qnli that holds it.")


def test_a_task_folder_without_the_test_set_says_how_to_train_without_predicting(shared_data, cache, tmp_path):
    """train.py reads the test sets it predicts before training: a task folder without one is named, with the way
    to train without the submission files."""
    for name in ("train.tsv", "dev.tsv"):
        (tmp_path / name).write_bytes((shared_data / "glue" / "RTE" / name).read_bytes())
    dm = GLUEDataModule("rte", MINILM, data_dir=str(tmp_path), cache_dir=cache)
    with pytest.raises(FileNotFoundError) as raised:
        dm.setup("predict")
    assert str(raised.value) == (
        f"The local copy of 'nyu-mll/glue' (rte) at {tmp_path} has no 'test' split (expected {tmp_path / 'test.tsv'}); "
        f"splits present: ['train', 'validation']. Add the file, or point data.data_dir at a copy of rte that holds "
        f"it (--predict false: no test-set predictions).")


def test_a_predict_file_without_the_tasks_columns_names_them(shared_data, cache, tmp_path):
    """MRPC's texts are its files' `#1 String` and `#2 String`, which a GLUE config has no setting to change: a file
    to predict with STS-B's column names is told the columns to give, not to set them in the config."""
    inputs = tmp_path / "pairs.tsv"
    inputs.write_text("sentence1\tsentence2\nHe left.\tHe went away.\n")
    dm = GLUEDataModule("mrpc", MINILM, data_root=str(shared_data), cache_dir=cache, predict_file=str(inputs))
    with pytest.raises(DataError) as raised:
        dm.setup("predict")
    assert str(raised.value) == (
        f"{inputs}, header: missing column(s) ['#1 String', '#2 String']; the file has columns ['sentence1', "
        f"'sentence2']. The model reads its text from the column(s) ['#1 String', '#2 String'] of the data it was "
        f"trained on: name the columns of data.predict_file so.")
    assert str(pickle.loads(pickle.dumps(raised.value))) == str(raised.value)  # as a worker process sends it


def test_the_table_covers_nine_tasks():
    assert sorted(GLUE_TASKS) == ["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli"]
    assert GLUE_TASKS["cola"].metrics == ("matthews_corrcoef",)
    assert GLUE_TASKS["stsb"].metrics == ("pearson", "spearman") and GLUE_TASKS["stsb"].is_regression
    assert GLUE_TASKS["mnli"].num_labels == 3
    assert GLUE_TASKS["mnli"].validation_splits == ("validation_matched", "validation_mismatched")


def write_tsv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter="\t", quoting=csv.QUOTE_NONE, quotechar=None, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


MNLI_COLUMNS = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]
NLI = ["entailment", "neutral", "contradiction"]


def mnli_row(i: int, labels: list[str]) -> list[str]:
    return [str(i), str(1000 + i), f"{1000 + i}e", "fiction", "( ( A man ) )", "( ( sleeps ) )", "(ROOT (S))",
            "(ROOT (S))", f'A man "{i}" walks.', f"Someone moves {i} times.", *labels]


def test_mnli_matched_and_mismatched_from_official_layout(tmp_path):
    folder = tmp_path / "glue" / "MNLI"
    write_tsv(folder / "train.tsv", [*MNLI_COLUMNS, "label1", "gold_label"],
              [mnli_row(i, [NLI[i % 3]] * 2) for i in range(30)])
    dev_header = [*MNLI_COLUMNS, "label1", "label2", "label3", "label4", "label5", "gold_label"]
    write_tsv(folder / "dev_matched.tsv", dev_header, [mnli_row(i, [NLI[i % 3]] * 6) for i in range(7)])
    write_tsv(folder / "dev_mismatched.tsv", dev_header, [mnli_row(i, [NLI[(i + 1) % 3]] * 6) for i in range(5)])
    write_tsv(folder / "test_matched.tsv", MNLI_COLUMNS, [mnli_row(i, []) for i in range(4)])
    write_tsv(folder / "test_mismatched.tsv", MNLI_COLUMNS, [mnli_row(i, []) for i in range(3)])
    dm = GLUEDataModule("mnli", MINILM, data_root=str(tmp_path), cache_dir=str(tmp_path / "cache"), batch_size=8)
    dm.setup("fit")
    dm.setup("predict")
    assert dm.num_labels == 3 and dm.label_names == NLI
    assert {s: len(d) for s, d in dm.datasets.items()} == {
        "train": 30, "validation_matched": 7, "validation_mismatched": 5, "test_matched": 4, "test_mismatched": 3}
    assert dm.datasets["validation_mismatched"]["labels"] == [1, 2, 0, 1, 2]
    loaders = dm.val_dataloader()
    assert isinstance(loaders, list) and len(loaders) == 2
    tokens = dm.tokenizer.convert_ids_to_tokens(next(iter(loaders[0]))["input_ids"][0])
    assert tokens[:7] == ["[CLS]", "a", "man", '"', "0", '"', "walks"]  # the quote is text, not CSV quoting
    # Predictions -> the two submission files, labels spelled as in the training data.
    paths = dm.write_submission({"test_matched": [0, 1, 2, 0], "test_mismatched": [2, 2, 1]}, tmp_path / "out")
    assert [p.name for p in paths] == ["MNLI-m.tsv", "MNLI-mm.tsv"]
    assert (tmp_path / "out" / "MNLI-mm.tsv").read_text() == \
        "index\tprediction\n0\tcontradiction\n1\tcontradiction\n2\tneutral\n"
    with pytest.raises(DataError, match="3 predictions for 4 test examples"):
        dm.write_submission({"test_matched": [0, 1, 2], "test_mismatched": [2, 2, 1]}, tmp_path / "out")


def test_qqp_from_official_layout(tmp_path):
    folder = tmp_path / "QQP"
    header = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    write_tsv(folder / "train.tsv", header, [[str(i), str(2 * i), str(2 * i + 1), f"How do I {i}?",
                                             f"What is {i}?", str(i % 2)] for i in range(12)])
    write_tsv(folder / "dev.tsv", header, [[str(i), "1", "2", "Why?", "Why not?", "1"] for i in range(4)])
    write_tsv(folder / "test.tsv", ["id", "question1", "question2"], [[str(i), "Who?", "Whom?"] for i in range(5)])
    dm = GLUEDataModule("qqp", MINILM, data_dir=str(folder), cache_dir=str(tmp_path / "cache"), batch_size=4)
    dm.setup(None)
    assert (len(dm.datasets["train"]), len(dm.datasets["validation"]), len(dm.datasets["test"])) == (12, 4, 5)
    assert dm.datasets["train"]["labels"] == [i % 2 for i in range(12)]
    assert dm.metric_names == ["f1", "accuracy"] and dm.label_names == ["not_duplicate", "duplicate"]
    path = dm.write_submission({"test": [1, 0, 1, 1, 0]}, tmp_path / "out")[0]
    assert path.name == "QQP.tsv" and path.read_text().splitlines()[1:3] == ["0\t1", "1\t0"]


def test_stsb_submission_and_truncation_count(shared_data, cache, tmp_path):
    dm = GLUEDataModule("stsb", MINILM, data_root=str(shared_data), cache_dir=cache, max_length=16)
    dm.setup("predict")
    assert dm.truncated["test"] == sum(dm.datasets["test"]["truncated"]) > 0
    assert max(len(ids) for ids in dm.datasets["test"]["input_ids"]) == 16
    path = dm.write_submission({"test": [2.5] * 1379}, tmp_path)[0]
    lines = path.read_text().splitlines()
    assert path.name == "STS-B.tsv" and len(lines) == 1380 and lines[1] == "0\t2.500"
    strict = GLUEDataModule("stsb", MINILM, data_root=str(shared_data), cache_dir=cache, max_length=16,
                            truncation="error")
    with pytest.raises(DataError, match=r"more than max_length=16, and truncation='error'"):
        strict.setup("predict")


def test_hub_names_go_through_load_dataset(monkeypatch, tmp_path):
    calls = []

    def fake_load_dataset(name, config, split):
        calls.append((name, config, split))
        return datasets.Dataset.from_dict({"sentence1": ["a b", "c"], "sentence2": ["d", "e f"], "label": [0, 1],
                                           "idx": [0, 1]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.delenv("LITBERT_DATA", raising=False)
    dm = GLUEDataModule("rte", MINILM, cache_dir=str(tmp_path))
    dm.setup("fit")
    assert calls == [("nyu-mll/glue", "rte", "train"), ("nyu-mll/glue", "rte", "validation")]
    assert dm.datasets["train"]["labels"] == [0, 1]


def test_length_grouping_follows_a_selected_subset(shared_data, cache):
    """Grouping reads the lengths of the rows the loader serves. After `select` (or `shuffle`, `filter`) the
    dataset's underlying Arrow table still holds every row, and grouping by its lengths used to mix lengths:
    on 4,000 SST-2 sentences, 34% real tokens instead of above 90%."""
    dm = GLUEDataModule("sst2", MINILM, data_root=str(shared_data), cache_dir=cache, batch_size=32,
                        group_by_length=True)
    dm.setup("fit")
    subset = dm.datasets["train"].shuffle(seed=0).select(range(4000))
    dm.datasets["train"] = subset
    batches = list(dm.train_dataloader())
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    assert real == sum(len(ids) for ids in subset["input_ids"])  # every row of the subset, once
    assert real / sum(b["input_ids"].numel() for b in batches) > 0.9
