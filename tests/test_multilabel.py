"""Multi-label classification: label sets from list columns (JSON lists, CSV cells, hub sequences) or 0/1 columns,
bad rows named by file, line and column; sigmoid + binary cross-entropy and the threshold against transformers' own
multi-label model of the export; micro/macro F1 and exact match against scikit-learn; macro F1 of multi-class
tasks; the CoNLL-2003 entity-types set built from the shared files; `train.py predict`'s label sets."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import datasets
import pytest
import torch
from runs import MINILM
from sklearn.metrics import accuracy_score, f1_score
from tiny import TINY, trainer
from torch.utils.data import DataLoader

from data import ClassificationDataModule, DataError
from data.collate import PaddingCollator
from encoders.checkpoints import CheckpointError, load_checkpoint
from tasks.classification import SequenceClassification
from tasks.metrics import classification_metrics
from tasks.run.predict import check_trained_head

TYPES = ["LOC", "MISC", "ORG", "PER"]


def write_csv(path: Path, header: list[str], rows: list[list[str]], delimiter: str = ",") -> str:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def write_jsonl(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return str(path)


def module(path: str, tmp_path: Path, **settings) -> ClassificationDataModule:
    return ClassificationDataModule(MINILM, train_files=path, val_files=path, cache_dir=str(tmp_path / "cache"),
                                    **settings)


# ---------------------------------------------------------------------------------------------------------- data


def test_a_list_column_becomes_a_row_of_0_1_per_label_in_every_file_format(tmp_path):
    """The same label sets as JSON lists (JSON lines), comma- and bar-separated CSV/TSV cells (an empty one: no
    label): the sorted training labels, a 0/1 row each, stacked by the collator whatever the length multiple."""
    texts = ["Paris and Rome", "Obama met Merkel", "nothing at all", "Reuters in London", "the Euro"]
    sets = [["LOC"], ["PER"], [], ["ORG", "LOC"], ["MISC"]]
    expected = [[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0], [1, 0, 1, 0], [0, 1, 0, 0]]
    pairs = list(zip(texts, sets, strict=True))
    files = {
        "jsonl": (write_jsonl(tmp_path / "a.jsonl", [{"text": t, "types": s} for t, s in pairs]), {}),
        "csv": (write_csv(tmp_path / "a.csv", ["text", "types"], [[t, ",".join(s)] for t, s in pairs]), {}),
        "tsv": (write_csv(tmp_path / "a.tsv", ["text", "types"], [[t, " | ".join(s)] for t, s in pairs], "\t"),
                {"label_separator": "|"}),
    }
    for name, (path, extra) in files.items():
        dm = module(path, tmp_path / name, label_column="types", multi_label=True, **extra)
        assert dm.label_names == TYPES and dm.num_labels == 4 and dm.multi_label, name
        assert dm.metric_names == ["f1_micro", "f1_macro", "exact_match"], name
        dm.setup("fit")
        assert dm.datasets["train"]["labels"] == expected, name
    collate = PaddingCollator(0, pad_to_multiple_of=8, stacked=("labels",))
    batch = collate([{"input_ids": [1, 2, 3], "labels": row} for row in expected])
    assert batch["labels"].tolist() == expected and batch["input_ids"].shape == (5, 8)


def test_0_1_columns_name_the_labels(tmp_path):
    path = write_csv(tmp_path / "a.csv", ["text", "toxic", "insult", "threat"],
                     [["you fool", "1", "1", "0"], ["hello", "0", "0", "0"], ["or else", "true", "0", "TRUE"]])
    dm = module(path, tmp_path, label_columns=["threat", "toxic", "insult"])
    assert dm.label_names == ["threat", "toxic", "insult"] and dm.multi_label
    dm.setup("fit")
    assert dm.datasets["train"]["labels"] == [[0, 1, 1], [0, 0, 0], [1, 1, 0]]
    assert dm.state_dict()["label_names"] == ["threat", "toxic", "insult"]


@pytest.mark.parametrize(("name", "content", "settings", "message"), [
    ("a.jsonl", '{"text": "a", "y": ["PER"]}\n{"text": "b", "y": ["PER", "DATE"]}\n',
     {"label_column": "y", "multi_label": True, "label_names": ["PER", "ORG"]},
     r"a.jsonl, line 2: label 'DATE' in column 'y' is not one of the labels \['PER', 'ORG'\]"),
    ("a.jsonl", '{"text": "a", "y": ["PER", "ORG"]}\n{"text": "b", "y": "PER"}\n',
     {"label_column": "y", "multi_label": True}, r"a.jsonl, line 2: y='PER' is not a list of labels"),
    ("a.csv", "text,toxic,insult\nhi,0,1\nyou,yes,0\n", {"label_columns": ["toxic", "insult"]},
     r"a.csv, line 3: label column 'toxic' holds 'yes', not 0 or 1"),
    ("a.jsonl", '{"text": "a", "toxic": 1, "insult": 0}\n{"text": "b", "toxic": 2, "insult": 0}\n',
     {"label_columns": ["toxic", "insult"]}, r"a.jsonl, line 2: label column 'toxic' holds 2, not 0 or 1"),
    ("a.csv", "text,y\na,PER\nb,PER\n", {"label_column": "y", "multi_label": True},
     r"multi-label data with the label set \['PER'\]: a set of labels needs at least two"),
])
def test_bad_rows_are_named_by_file_line_and_column(tmp_path, name, content, settings, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(DataError, match=message):
        module(str(tmp_path / name), tmp_path, **settings).setup("fit")


def test_settings_that_contradict_a_label_set_are_refused(tmp_path):
    path = write_csv(tmp_path / "a.csv", ["text", "a", "b", "y"], [["x", "0", "1", "a"]])
    refused = [
        ({"label_column": "y", "label_columns": ["a", "b"]}, r"both name the labels; set one"),
        ({"label_columns": ["a", "b"], "label_names": ["b", "a"]}, r"the columns name the labels"),
        ({"label_columns": ["a", "b"], "multi_label": False}, r"data.multi_label is false; remove it"),
        ({"label_columns": ["a"]}, r"a single 0/1 column is binary classification"),
        ({"label_column": "y", "multi_label": True, "skip_labels": ["a"]}, r"skip_labels=\['a'\] .* Remove it"),
        ({"label_column": "y", "multi_label": True, "regression": True}, r"a score is not a set of labels"),
        ({"label_column": "y", "label_separator": "|"}, r"label_separator='\|' splits a CSV/TSV column"),
    ]
    for settings, message in refused:
        with pytest.raises(DataError, match=message):
            module(path, tmp_path, **settings)
    with pytest.raises(DataError, match=r"data.multi_label=False, but conll2003-entity-types has a set of labels"):
        ClassificationDataModule(MINILM, dataset="conll2003-entity-types", multi_label=False)
    with pytest.raises(DataError, match=r"data.multi_label=True, but imdb has one class per example"):
        ClassificationDataModule(MINILM, dataset="imdb", multi_label=True)
    with pytest.raises(DataError, match=r"conll2003-entity-types is built from the local files of conll2003"):
        ClassificationDataModule(MINILM, dataset="conll2003-entity-types", data_root=str(tmp_path),
                                 cache_dir=str(tmp_path)).setup("fit")


def test_a_hub_dataset_of_label_sequences_keeps_its_class_label_order(monkeypatch, tmp_path):
    def fake_load_dataset(name, config, split):
        assert (name, config) == ("someone/emotions", None)
        features = datasets.Features({"text": datasets.Value("string"),
                                      "labels": datasets.Sequence(datasets.ClassLabel(names=["joy", "anger", "fear"])),
                                      "sad": datasets.Value("int64"), "calm": datasets.Value("bool")})
        return datasets.Dataset.from_dict({"text": ["a b", "c", "d"], "labels": [[2, 0], [], [1]],
                                           "sad": [1, 0, 1], "calm": [False, True, False]}, features=features)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    dm = ClassificationDataModule(MINILM, dataset="someone/emotions", label_column="labels", multi_label=True,
                                  cache_dir=str(tmp_path))
    assert dm.label_names == ["joy", "anger", "fear"]
    dm.setup("fit")
    assert dm.datasets["train"]["labels"] == [[1, 0, 1], [0, 0, 0], [0, 1, 0]]
    columns = ClassificationDataModule(MINILM, dataset="someone/emotions", label_columns=["sad", "calm"],
                                       cache_dir=str(tmp_path))
    columns.setup("fit")
    assert columns.datasets["train"]["labels"] == [[1, 0], [0, 1], [1, 0]]


def test_conll_entity_types_are_each_sentences_entity_types(shared_data, tmp_path):
    """The built set against an independent reading of the CoNLL file: every sentence (those without an entity
    too) in order, its words joined, the types of its B-/I- tags."""
    dm = ClassificationDataModule(MINILM, dataset="conll2003-entity-types", data_root=str(shared_data),
                                  cache_dir=str(tmp_path))
    assert dm.label_names == TYPES and dm.multi_label and dm.has_test_split
    assert dm.metric_names == ["f1_micro", "f1_macro", "exact_match"]
    rows = dm._read("validation")
    blocks = [block for block in re.split(r"\n\s*\n", (shared_data / "conll2003" / "valid.txt").read_text())
              if block.strip() and not block.startswith("-DOCSTART-")]
    lines = [[line.split() for line in block.strip().splitlines()] for block in blocks]
    assert rows.texts[0] == [" ".join(token[0] for token in sentence) for sentence in lines]
    assert rows.labels == [sorted({token[-1][2:] for token in sentence if token[-1] != "O"}) for sentence in lines]
    assert rows.texts[0][0] == "CRICKET - LEICESTERSHIRE TAKE OVER AT TOP AFTER INNINGS VICTORY ."
    assert rows.labels[0] == ["ORG"] and [] in rows.labels  # LEICESTERSHIRE; sentences without entities stay


# ---------------------------------------------------------------------------------------------------------- task


def label_set_batches(n: int, batch: int = 8) -> list[dict[str, torch.Tensor]]:
    """Label j is present where the row holds token 5 + j (at a few places among neutral tokens 20-63): every
    subset of the three labels occurs, the empty one included."""
    generator = torch.Generator().manual_seed(2)
    out = []
    for _ in range(n):
        labels = (torch.rand(batch, 3, generator=generator) < 0.5).long()
        ids = torch.randint(20, 64, (batch, 12), generator=generator)
        for j in range(3):
            slots = torch.rand(batch, 12, generator=generator) < 0.25
            ids = torch.where(slots & labels[:, j:j + 1].bool(), 5 + j, ids)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})
    return out


def test_validation_logs_the_metrics_of_the_thresholded_predictions():
    """Through Lightning's validation loop (batches accumulated, a threshold of 0.4): the logged loss, micro and
    macro F1 and exact match are scikit-learn's on the model's own logits; the checkpoint monitor is micro F1."""
    torch.manual_seed(0)
    model = SequenceClassification(num_labels=3, multi_label=True, threshold=0.4,
                                   metrics=("f1_micro", "f1_macro", "exact_match"), encoder=TINY, vocab_size=64)
    with torch.no_grad():
        model.head.classifier.weight.normal_(0, 1)  # outputs spread around the threshold
    assert model.monitor == ("val/f1_micro", "max")
    data = label_set_batches(4)
    result = trainer(1).validate(model, DataLoader(data, batch_size=None), verbose=False)[0]
    assert set(result) == {"val/loss", "val/f1_micro", "val/f1_macro", "val/exact_match"}
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(batch) for batch in data])
    labels = torch.cat([batch["labels"] for batch in data])
    predicted = (logits.sigmoid() > 0.4).long().numpy()
    assert 0 < predicted.mean() < 1
    assert result == pytest.approx({
        "val/loss": float(torch.nn.BCEWithLogitsLoss()(logits, labels.float())),
        "val/f1_micro": f1_score(labels.numpy(), predicted, average="micro"),
        "val/f1_macro": f1_score(labels.numpy(), predicted, average="macro", zero_division=0),
        "val/exact_match": accuracy_score(labels.numpy(), predicted)}, abs=1e-5)


def test_loss_threshold_and_metrics_against_references():
    """BCE-with-logits averaged over every (example, label), as a hand computation; a label is predicted where its
    probability exceeds the threshold (not at it); micro/macro F1 and exact match as scikit-learn computes them."""
    torch.manual_seed(3)
    logits = torch.randn(40, 4) * 2
    logits[0, 0] = 0.0  # probability 0.5 exactly: not above the default threshold
    labels = (torch.rand(40, 4) < 0.4).long()
    for threshold in (None, 0.3, 0.8):
        model = SequenceClassification(num_labels=4, multi_label=True, threshold=threshold,
                                       metrics=("f1_micro", "f1_macro", "exact_match"), encoder=TINY, vocab_size=64)
        p = logits.sigmoid()
        expected = -(labels * p.log() + (1 - labels) * (1 - p).log()).mean()
        torch.testing.assert_close(model.loss(logits, labels), expected)
        predicted = model.predictions(logits)
        assert torch.equal(predicted, (p > (threshold or 0.5)).long())
        assert predicted[0, 0] == (threshold == 0.3)  # probability 0.5: chosen below it only
        metrics = classification_metrics(model.hparams.metrics, 4, multi_label=True)
        values = {name: float(value) for name, value in metrics(predicted, labels).items()}
        y, hat = labels.numpy(), predicted.numpy()
        assert values == pytest.approx({"f1_micro": f1_score(y, hat, average="micro"),
                                        "f1_macro": f1_score(y, hat, average="macro", zero_division=0),
                                        "exact_match": accuracy_score(y, hat)}, abs=1e-6)


def test_multi_class_tasks_log_macro_f1(tmp_path):
    path = write_csv(tmp_path / "a.csv", ["text", "label"], [[f"t{i}", "abc"[i % 3]] for i in range(9)])
    assert module(path, tmp_path).metric_names == ["accuracy", "f1_macro"]
    binary = write_csv(tmp_path / "b.csv", ["text", "label"], [[f"t{i}", "ab"[i % 2]] for i in range(4)])
    assert module(binary, tmp_path).metric_names == ["accuracy"]
    assert module(path, tmp_path, metrics=["accuracy"]).metric_names == ["accuracy"]  # as given
    torch.manual_seed(4)
    predicted, labels = torch.randint(0, 3, (50,)), torch.randint(0, 3, (50,))
    macro = classification_metrics(["f1_macro"], 3)(predicted, labels)["f1_macro"]
    assert float(macro) == pytest.approx(f1_score(labels.numpy(), predicted.numpy(), average="macro"), abs=1e-6)
    with pytest.raises(ValueError, match=r"Unknown metric\(s\) \['exact_match'\] for a single-label task "
                                         r"\(\['exact_match'\] score multi-label tasks\)"):
        classification_metrics(["accuracy", "exact_match"], 3)
    with pytest.raises(ValueError, match=r"Unknown metric\(s\) \['accuracy'\] for a multi-label task"):
        classification_metrics(["accuracy"], 3, multi_label=True)


def test_task_settings_that_do_not_apply_are_refused():
    with pytest.raises(ValueError, match=r"model.threshold=0.3 decides the labels of a multi-label task"):
        SequenceClassification(num_labels=3, threshold=0.3, encoder=TINY, vocab_size=64)
    with pytest.raises(ValueError, match=r"model.threshold=1.0 must lie strictly between 0 and 1"):
        SequenceClassification(num_labels=3, multi_label=True, threshold=1.0, metrics=("f1_micro",), encoder=TINY,
                               vocab_size=64)
    with pytest.raises(ValueError, match=r"a single 0/1 label is binary classification"):
        SequenceClassification(num_labels=1, multi_label=True, metrics=("f1_micro",), encoder=TINY, vocab_size=64)
    with pytest.raises(ValueError, match=r"distilling a multi-label classifier is not supported"):
        SequenceClassification(num_labels=3, multi_label=True, metrics=("f1_micro",), teacher="/nowhere",
                               encoder=TINY, vocab_size=64)


# -------------------------------------------------------------------------------------------------------- export


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """A bert-tiny multi-label classifier (random classifier weights, so that each input has its own scores),
    exported in transformers' and litbert's format, and a single-label one of the same labels."""
    root = tmp_path_factory.mktemp("exports")
    torch.manual_seed(0)
    model = SequenceClassification(num_labels=4, multi_label=True, label_names=TYPES, threshold=0.4,
                                   metrics=("f1_micro",), encoder=TINY, vocab_size=120)
    with torch.no_grad():
        model.head.classifier.weight.normal_(0, 1)
    single = SequenceClassification(num_labels=4, label_names=TYPES, encoder=TINY, vocab_size=120)
    out = {"multi": model.export(root / "multi"), "single": single.export(root / "single")}
    out["litbert"] = model.encoder.save_pretrained(root / "litbert", head=model.head, format="litbert",
                                                   label_names=TYPES, problem_type=model.problem_type)
    out["task"] = model
    return out


def test_transformers_loads_the_export_as_a_multi_label_model_with_the_same_outputs(exports):
    from transformers import AutoModelForSequenceClassification

    model = exports["task"].eval()
    reference = AutoModelForSequenceClassification.from_pretrained(exports["multi"]).eval()
    assert reference.config.problem_type == "multi_label_classification"
    assert reference.config.id2label == dict(enumerate(TYPES))
    torch.manual_seed(5)
    ids = torch.randint(5, 120, (6, 10))
    mask = (torch.arange(10) < torch.tensor([10, 9, 7, 5, 3, 2])[:, None]).long()
    labels = (torch.rand(6, 4) < 0.5).long()
    with torch.no_grad():
        ours = model({"input_ids": ids, "attention_mask": mask})
        theirs = reference(input_ids=ids, attention_mask=mask, labels=labels.float())
    torch.testing.assert_close(ours, theirs.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.loss(ours, labels), theirs.loss, atol=1e-6, rtol=1e-5)  # transformers' BCE
    assert load_checkpoint(exports["multi"]).problem_type == "multi_label_classification"
    assert load_checkpoint(exports["litbert"]).problem_type == "multi_label_classification"
    assert load_checkpoint(exports["single"]).problem_type is None


def test_prediction_refuses_an_export_of_the_other_kind(exports):
    """A multi-label export read with a single-label config would be read as softmax scores, and the reverse."""
    check_trained_head(SequenceClassification(num_labels=4, multi_label=True, label_names=TYPES,
                                              metrics=("f1_micro",), pretrained=str(exports["multi"])))
    for export, multi_label in ((exports["multi"], False), (exports["litbert"], False), (exports["single"], True)):
        metrics = ("f1_micro",) if multi_label else ("accuracy",)
        task = SequenceClassification(num_labels=4, multi_label=multi_label, label_names=TYPES, metrics=metrics,
                                      pretrained=str(export))
        with pytest.raises(CheckpointError, match=r"was trained to predict (a set of labels|one class) per input"):
            check_trained_head(task)


def test_a_multi_label_teacher_is_refused_for_a_single_label_student(exports):
    """Its logits are scored per label (a sigmoid each); the student's soft targets, a softmax over them, would
    teach other scores than the teacher's: refused in either format, as a single-label teacher of the labels is
    taken."""
    for export in (exports["multi"], exports["litbert"]):
        with pytest.raises(ValueError, match=rf"^The teacher {export} is a multi-label classifier \(problem_type "
                                             rf"multi_label_classification in its config\)"):
            SequenceClassification(num_labels=4, label_names=TYPES, encoder=TINY, vocab_size=120,
                                   teacher=str(export))
    SequenceClassification(num_labels=4, label_names=TYPES, encoder=TINY, vocab_size=120,
                           teacher=str(exports["single"]))


def test_predictions_write_the_labels_above_the_threshold_with_their_scores(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": "a", "y": ["LOC", "PER"]}, {"text": "b", "y": ["ORG"]},
                                                    {"text": "c", "y": ["MISC"]}])
    inputs = write_csv(tmp_path / "new.csv", ["text"], [["first"], ["second"], ["third"]])
    dm = ClassificationDataModule(MINILM, train_files=train, val_files=train, predict_file=inputs, label_column="y",
                                  multi_label=True, cache_dir=str(tmp_path / "cache"))
    logits = [[2.0, -1.0, 0.1, 0.5], [-3.0, -2.0, -1.0, -0.5], [-1.0, 4.0, -0.3, 1.0]]
    probabilities = torch.tensor(logits, dtype=torch.float64).sigmoid().tolist()
    dm.write_predictions(logits, tmp_path / "out.jsonl", threshold=0.45)
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    chosen = [[i for i, p in enumerate(row) if p > 0.45] for row in probabilities]
    assert chosen == [[0, 2, 3], [], [1, 3]]
    assert [line["text"] for line in lines] == ["first", "second", "third"]
    assert [line["labels"] for line in lines] == [[TYPES[i] for i in row] for row in chosen]
    for line, row, picked in zip(lines, probabilities, chosen, strict=True):
        assert line["scores"] == pytest.approx([row[i] for i in picked], abs=1e-12)
    dm.write_predictions(logits, tmp_path / "out.tsv", threshold=0.45)
    table = list(csv.reader((tmp_path / "out.tsv").open(encoding="utf-8"), delimiter="\t"))
    assert table[0] == ["index", "labels", "scores"]
    assert table[1:] == [[str(k), ",".join(TYPES[i] for i in picked), ",".join(f"{probabilities[k][i]:.6f}"
                                                                              for i in picked)]
                         for k, picked in enumerate(chosen)]


# ---------------------------------------------------------------------------------------------------- through runs


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_the_shipped_config_trains_exports_and_predicts_label_sets(shared_data, tmp_path, monkeypatch):
    """configs/multilabel/conll-entity-types.yaml on the first 150 sentences of each CoNLL-2003 file (a data root
    of its own), a bert-tiny trained a few steps with a threshold of 0.45: metrics.json holds micro/macro F1 and
    exact match of dev and test, which scikit-learn gives on the dev predictions of transformers' model of the
    export (loaded as multi-label); `train.py predict` writes the labels that model scores above the threshold."""
    import train

    monkeypatch.setenv("WANDB_MODE", "disabled")
    root = tmp_path / "data" / "conll2003"
    root.mkdir(parents=True)
    for name in ("train.txt", "valid.txt", "test.txt"):
        blocks = (shared_data / "conll2003" / name).read_text().split("\n\n")
        (root / name).write_text("\n\n".join(blocks[:151]) + "\n")
    run = tmp_path / "run"
    train.main(["--config", "configs/multilabel/conll-entity-types.yaml", "--data.data_root", str(tmp_path / "data"),
                "--data.tokenizer", MINILM, "--data.cache_dir", str(tmp_path / "cache"), "--model.encoder.preset",
                "bert-tiny", "--model.threshold", "0.45", "--trainer.max_steps", "6", "--trainer.precision", "32-true",
                "--trainer.default_root_dir", str(run), "--trainer.logger", "false", "--trainer.enable_progress_bar",
                "false"])
    metrics = json.loads((run / "metrics.json").read_text())
    assert set(metrics) == {f"{split}/{name}" for split in ("val", "test")
                            for name in ("loss", "f1_micro", "f1_macro", "exact_match")}
    card = (run / "model" / "README.md").read_text()
    assert "best checkpoint by `val/f1_micro`" in card
    assert "labels LOC, MISC, ORG, PER; multi-label: the labels whose probability exceeds 0.45" in card

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    reference = AutoModelForSequenceClassification.from_pretrained(run / "model").eval()
    assert reference.config.problem_type == "multi_label_classification"
    assert list(reference.config.id2label.values()) == TYPES
    dev = ClassificationDataModule(MINILM, dataset="conll2003-entity-types", data_root=str(tmp_path / "data"),
                                   cache_dir=str(tmp_path / "cache"))._read("validation")
    tokenizer = AutoTokenizer.from_pretrained(run / "model")
    with torch.no_grad():
        logits = reference(**tokenizer(dev.texts[0], padding=True, truncation=True, max_length=128,
                                       return_tensors="pt")).logits
    labels = [[int(name in row) for name in TYPES] for row in dev.labels]
    predicted = (logits.sigmoid() > 0.45).long().numpy()
    assert {name: metrics[f"val/{name}"] for name in ("f1_micro", "f1_macro", "exact_match")} == pytest.approx({
        "f1_micro": f1_score(labels, predicted, average="micro"),
        "f1_macro": f1_score(labels, predicted, average="macro", zero_division=0),
        "exact_match": accuracy_score(labels, predicted)}, abs=1e-5)

    inputs = write_jsonl(tmp_path / "new.jsonl", [{"text": text} for text in dev.texts[0][:20]])
    train.main(["predict", "--config", str(run / "config.yaml"), "--model.pretrained", str(run / "model"),
                "--data.predict_file", inputs, "--output", str(tmp_path / "out.jsonl"), "--trainer.precision",
                "32-true", "--trainer.enable_progress_bar", "false"])
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    probabilities = logits[:20].sigmoid()
    assert [line["text"] for line in lines] == dev.texts[0][:20]
    assert [line["labels"] for line in lines] == [[TYPES[i] for i in range(4) if p[i] > 0.45] for p in probabilities]
    for line, p in zip(lines, probabilities, strict=True):
        assert line["scores"] == pytest.approx([float(p[i]) for i in range(4) if p[i] > 0.45], abs=1e-5)
