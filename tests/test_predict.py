"""`python train.py predict`: a trained model's predictions of a file of new inputs (CSV, TSV, JSON lines, CoNLL
words), a line per input in the file's order, equal to what transformers' own model of the export predicts; bad
input is named by file and line. The models are trained through the shipped configs on own files given with
`--data.train_files` alone (tests/test_data_source.py has the rest of that)."""

from __future__ import annotations

import csv
import json
import re
import signal
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from runs import MINILM, REPO

import train
from data.sources import DataError, written_whole
from encoders.checkpoints import CheckpointError
from tasks.base import EncoderSpec
from tasks.classification import SequenceClassification

SENTENCES = ["A great movie.", "Awful, boring, and far too long.", "Fine, I guess.", "The actors saved it",
             "Not good, not bad: a film.", "I laughed, I cried, I left early.", "Five stars!"]


@pytest.fixture(autouse=True)
def _offline(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "disabled")


def write_csv(path: Path, header: list[str], rows: list[list[str]], delimiter: str = ",") -> str:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, minilm_tokenizer) -> dict[str, str]:
    """The export of a tiny BERT-shaped sentiment classifier (transformers' format, MiniLM's tokenizer beside it;
    its random classifier gives each sentence its own scores) and a config of a run on own CSV files."""
    root = tmp_path_factory.mktemp("classifier")
    torch.manual_seed(0)
    task = SequenceClassification(num_labels=2, label_names=["neg", "pos"], vocab_size=len(minilm_tokenizer),
                                  encoder=EncoderSpec(preset="bert-tiny", hidden_dropout=0.0, attention_dropout=0.0))
    with torch.no_grad():
        task.head.classifier.weight.normal_(0, 1)
    model = task.export(root / "model", minilm_tokenizer)
    train_files = write_csv(root / "train.csv", ["text", "label"], [["good", "pos"], ["bad", "neg"]])
    config = {"model": {"class_path": "tasks.classification.SequenceClassification"},
              "data": {"class_path": "data.ClassificationDataModule",
                       "init_args": {"train_files": train_files, "val_files": train_files, "max_length": 64,
                                     "group_by_length": True, "eval_batch_size": 2}}}
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    bare = task.encoder.save_pretrained(root / "bare")  # the encoder alone, without its classifier
    minilm_tokenizer.save_pretrained(str(bare))
    return {"model": str(model), "config": str(root / "config.yaml"), "bare": str(bare), "train": train_files}


def predict(config: str, model: str, inputs: str, output: Path, *extra: str):
    return train.main(["predict", "--config", config, "--model.pretrained", model, "--data.predict_file", inputs,
                       "--output", str(output), "--trainer.precision", "32-true", "--trainer.enable_progress_bar",
                       "false", *extra])


def transformers_scores(model: str, texts: list[str], pairs: list[str] | None = None) -> torch.Tensor:
    """The logits of transformers' own model of the export (AutoModelForSequenceClassification)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    reference = AutoModelForSequenceClassification.from_pretrained(model).eval()
    with torch.no_grad():
        return reference(**tokenizer(texts, pairs, padding=True, return_tensors="pt")).logits


def test_classification_predictions_are_the_exported_models_in_input_order(classifier, tmp_path):
    """JSON lines in, JSON lines out: one line per input, in the file's order though the batches are grouped by
    length, each with its text, the label (a label name) and its probability, as transformers' model of the
    export gives them."""
    inputs = tmp_path / "new.jsonl"
    inputs.write_text("".join(json.dumps({"id": i, "text": text}) + "\n" for i, text in enumerate(SENTENCES)))
    cli = predict(classifier["config"], classifier["model"], str(inputs), tmp_path / "out.jsonl")
    assert cli.predictions == tmp_path / "out.jsonl"
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [line["text"] for line in lines] == SENTENCES
    probabilities = transformers_scores(classifier["model"], SENTENCES).softmax(-1)
    score, label = probabilities.max(-1)
    assert [line["label"] for line in lines] == [["neg", "pos"][i] for i in label]
    torch.testing.assert_close(torch.tensor([line["score"] for line in lines]), score, atol=1e-5, rtol=0)
    assert len({round(line["score"], 6) for line in lines}) == len(SENTENCES)  # each its own: the order shows
    assert not (Path(classifier["config"]).parent / "lightning_logs").exists()  # predicting writes nothing else


def test_a_runs_evaluation_limits_are_not_warned_about_when_predicting(classifier, tmp_path):
    """A run's config.yaml keeps its `limit_val_batches` / `limit_test_batches`; the training run warned that its
    metrics were of a part, but `train.py predict` evaluates nothing and writes no metrics: no such warning."""
    config = yaml.safe_load(Path(classifier["config"]).read_text())
    config["trainer"] = {"limit_val_batches": 2, "limit_test_batches": 0.5}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    inputs = write_csv(tmp_path / "new.csv", ["text"], [[s] for s in SENTENCES])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        predict(str(tmp_path / "config.yaml"), classifier["model"], inputs, tmp_path / "out.jsonl")
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == len(SENTENCES)
    assert [str(w.message) for w in caught if "evaluates part of the set" in str(w.message)] == []


@pytest.mark.parametrize(("name", "content", "message"), [
    ("new.csv", "review\nA great movie.\n", r"new.csv, header: missing column\(s\) \['text'\]; the file has "
                                           r"columns \['review'\]"),
    ("new.jsonl", '{"text": "A great movie."}\n{"text": "Fine\n', r"new.jsonl, line 2: not valid JSON"),
])
def test_bad_input_is_named_by_file_and_line(classifier, tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(DataError, match=message):
        predict(classifier["config"], classifier["model"], str(tmp_path / name), tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


def test_predicting_needs_a_trained_head_and_training_refuses_a_prediction_file(classifier, tmp_path):
    """An export without the task's classifier would predict with an untrained one: refused, as is a prediction
    file given to a training run, which would not read it."""
    inputs = write_csv(tmp_path / "new.csv", ["text"], [[s] for s in SENTENCES])
    with pytest.raises(CheckpointError, match=r"bare holds no trained sequence classification head \(its heads: none"):
        predict(classifier["config"], classifier["bare"], inputs, tmp_path / "out.jsonl")
    with pytest.raises(ValueError, match=r"data.predict_file=.*new.csv is for `python train.py predict`"):
        train.main(["--config", classifier["config"], "--model.pretrained", classifier["model"],
                    "--data.predict_file", inputs, "--trainer.default_root_dir", str(tmp_path / "run")])
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "run").exists()


def test_a_tokenizer_other_than_the_models_is_refused_for_a_folder_and_a_hub_id(classifier, tmp_path, monkeypatch):
    """A run's config.yaml names the tokenizer it trained with; predicting with a model of another one would read
    ids of other words. Refused naming both, for the model given as a folder and as a hub id (an offline cache)."""
    from huggingface_hub import constants

    from data import train_tokenizer

    other = tmp_path / "other-tokenizer"
    train_tokenizer(SENTENCES * 20, vocab_size=100).save_pretrained(str(other))
    inputs = write_csv(tmp_path / "new.csv", ["text"], [[s] for s in SENTENCES])
    snapshot = tmp_path / "hub" / "models--org--sentiment" / "snapshots" / ("0" * 40)
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(classifier["model"], target_is_directory=True)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for model in (classifier["model"], "org/sentiment"):
        with pytest.raises(DataError, match=rf"^model.pretrained={model} was trained with another tokenizer than "
                                            rf"data.tokenizer={other} \(their .*vocabulary.* differ\)"):
            predict(classifier["config"], model, inputs, tmp_path / "out.jsonl", "--data.tokenizer", str(other))
        assert not (tmp_path / "out.jsonl").exists()
    predict(classifier["config"], "org/sentiment", inputs, tmp_path / "out.jsonl")  # its own: predicted
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == len(SENTENCES)


@pytest.mark.parametrize(("setting", "named"), [
    (["--trainer.limit_predict_batches", "1"], "trainer.limit_predict_batches=1"),  # one batch (an int), not 1.0
    (["--trainer.fast_dev_run", "true"], "trainer.fast_dev_run=True"),
    (["--trainer.limit_predict_batches", "0.5"], "trainer.limit_predict_batches=0.5")])
def test_predicting_a_part_of_the_file_is_refused_by_name(setting, named, classifier, tmp_path):
    """Refused with the way on for a value the run's config.yaml holds (a run that predicted a part of its test
    sets): the setting overridden on the command line, which predicts the whole file."""
    inputs = write_csv(tmp_path / "new.csv", ["text"], [[s] for s in SENTENCES])
    way_on = f"--{named.split('=')[0]} {'false' if 'fast_dev_run' in named else 'null'}"
    with pytest.raises(ValueError, match=rf"{re.escape(named)} limits the batches predicted of .*new.csv, and .*"
                                         rf"config.yaml.* give {re.escape(way_on)}\.$"):
        predict(classifier["config"], classifier["model"], inputs, tmp_path / "out.jsonl", *setting)
    assert not (tmp_path / "out.jsonl").exists()
    config = yaml.safe_load(Path(classifier["config"]).read_text())
    config["trainer"] = {setting[0].removeprefix("--trainer."): yaml.safe_load(setting[1])}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))  # as the run saved it
    predict(str(tmp_path / "config.yaml"), classifier["model"], inputs, tmp_path / "out.jsonl", *way_on.split())
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == len(SENTENCES)


@pytest.mark.parametrize(("setting", "named"), [
    (["--model.encoder.preset", "bert-mini"], "model.encoder"),
    (["--model.optimization.learning_rate", "0.5", "--model.pretrained_layers", "[0]"],
     "model.optimization, model.pretrained_layers"),
])
def test_settings_that_build_or_train_a_model_are_refused_when_predicting(setting, named, classifier, tmp_path):
    """They were dropped without a word: the export predicted as it was trained. A run's config.yaml holds them too,
    and there they give way."""
    inputs = write_csv(tmp_path / "new.csv", ["text"], [[s] for s in SENTENCES])
    with pytest.raises(ValueError, match=rf"^train.py predict does not read {named}, given on the command line: such "
                                         rf"settings build and train a model, and model.pretrained=.* is the trained "
                                         rf"model as it was exported. Remove them"):
        predict(classifier["config"], classifier["model"], inputs, tmp_path / "out.jsonl", *setting)
    assert not (tmp_path / "out.jsonl").exists()
    config = yaml.safe_load(Path(classifier["config"]).read_text())
    config["model"]["init_args"] = {"encoder": {"preset": "bert-mini"}, "optimization": {"learning_rate": 0.5},
                                    "pretrained_layers": [0]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))  # as a run saves them
    predict(str(tmp_path / "config.yaml"), classifier["model"], inputs, tmp_path / "out.jsonl")
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == len(SENTENCES)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_predicting_exits_with_its_status_and_writes_nothing(classifier, tmp_path, capsys, signum):
    """Ctrl+C or SIGTERM after the last batch is predicted, before the file is written: the exit status of the
    signal, not Lightning's 1 for a KeyboardInterrupt, and no file, not a part of one."""
    inputs = write_csv(tmp_path / "new.csv", ["text"], [[s] for s in SENTENCES])
    status = train.cli_main(["predict", "--config", classifier["config"], "--model.pretrained", classifier["model"],
                             "--data.predict_file", inputs, "--output", str(tmp_path / "out.jsonl"),
                             "--trainer.enable_progress_bar", "false", "--trainer.callbacks+=signalling.SignalAt",
                             "--trainer.callbacks.when", "last_predict_batch", "--trainer.callbacks.signum",
                             str(int(signum))])
    assert status == 128 + signum
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"litbert: stopped by {signal.Signals(signum).name} before the predictions were written whole; nothing was "
        f"written.")
    assert list(tmp_path.glob("*out.jsonl*")) == []


@pytest.fixture(scope="module")
def tagger(tmp_path_factory, minilm_tokenizer) -> dict[str, str]:
    """The export of a tiny random token classifier (IOB2 person tags, MiniLM's tokenizer) and the config of the
    NER run, configs/ner/conll2003.yaml, on an own CoNLL file."""
    from tasks.classification import TokenClassification

    root = tmp_path_factory.mktemp("tagger")
    labels = ["O", "B-PER", "I-PER"]
    torch.manual_seed(0)
    task = TokenClassification(label_names=labels, vocab_size=len(minilm_tokenizer),
                               encoder=EncoderSpec(preset="bert-tiny", hidden_dropout=0.0, attention_dropout=0.0))
    model = task.export(root / "model", minilm_tokenizer)
    (root / "train.txt").write_text("Peter\tB-PER\nsaid\tO\n\nyes\tO\n")
    config = yaml.safe_load((REPO / "configs/ner/conll2003.yaml").read_text())
    config["data"]["init_args"] = {"train_files": str(root / "train.txt"), "label_names": labels}
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    return {"model": str(model), "config": str(root / "config.yaml")}


@pytest.mark.parametrize(("sentences", "said"), [([["Peter", "Blackburn"], ["BRUSSELS"], ["EU", "rejects", "it"]],
                                                  "3 sentences, 6 words"),
                                                 ([["BRUSSELS"]], "1 sentence, 1 word")])
def test_the_summary_counts_the_sentences_and_words_tagged(tagger, tmp_path, capsys, sentences, said):
    """Not the lines of the output (a line a word and a blank one a sentence: 9 for the first file)."""
    inputs = conll_words(tmp_path / "words.txt", sentences)
    predict(tagger["config"], tagger["model"], inputs, tmp_path / "tags.txt")
    assert f"litbert: predictions      {tmp_path / 'tags.txt'} ({said})\n" in capsys.readouterr().out


def test_tags_of_a_column_file_keep_its_columns_and_match_other_formats(tagger, tmp_path):
    """A CoNLL-2003 file (word POS chunk NER, -DOCSTART-, CRLF) gets its token lines back with the predicted tag
    after its gold one, as conlleval pairs them, a blank line after each sentence; text a sentence a line
    (`--data.predict_format lines`) and JSON lines of the same words get the same tags, a `word<TAB>tag` line a
    word."""
    sentences = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]]
    columns = [[[word, "NNP", "B-NP", "O"] for word in words] for words in sentences]
    conll = tmp_path / "test.txt"
    conll.write_bytes(("-DOCSTART- -X- -X- O\r\n\r\n" + "\r\n\r\n".join(
        "\r\n".join(" ".join(line) for line in lines) for lines in columns) + "\r\n").encode())
    text = tmp_path / "text.txt"
    text.write_text("".join(" ".join(words) + "\n" for words in sentences))
    rows = tmp_path / "words.jsonl"
    rows.write_text("".join(json.dumps({"tokens": words}) + "\n" for words in sentences))
    written = {}
    for name, path, extra in (("conll", conll, []), ("text", text, ["--data.predict_format", "lines"]),
                              ("rows", rows, [])):
        predict(tagger["config"], tagger["model"], str(path), tmp_path / f"{name}.tags", *extra)
        output = (tmp_path / f"{name}.tags").read_text()
        assert output.endswith("\n\n") and "\n\n\n" not in output
        written[name] = [[line.split("\t") for line in block.splitlines()] for block in output[:-2].split("\n\n")]
    assert [[line[:-1] for line in block] for block in written["conll"]] == columns
    tags = [[line[-1] for line in block] for block in written["conll"]]
    assert all(tag in ("O", "B-PER", "I-PER") for block in tags for tag in block)
    for name in ("text", "rows"):
        assert written[name] == [[[word, tag] for word, tag in zip(words, sentence_tags, strict=True)]
                                 for words, sentence_tags in zip(sentences, tags, strict=True)], name


@pytest.mark.parametrize(("texts", "output", "said"), [(SENTENCES, "out.tsv", "7 inputs"),
                                                        (SENTENCES[:1], "out.tsv", "1 input"),
                                                        (SENTENCES[:2], "out.jsonl", "2 inputs")])
def test_the_summary_counts_the_inputs_predicted(classifier, tmp_path, capsys, texts, output, said):
    """Not the lines of the output, which a TSV's header adds one to (8 lines, `2 lines` for one input)."""
    inputs = write_csv(tmp_path / "new.csv", ["text"], [[text] for text in texts])
    predict(classifier["config"], classifier["model"], inputs, tmp_path / output)
    assert f"litbert: predictions      {tmp_path / output} ({said})\n" in capsys.readouterr().out


def test_a_predictions_file_is_written_whole_or_not_at_all(tmp_path):
    """A write that fails (a signal, a full disk) leaves the earlier file as it was, and no part of the new one."""
    path = tmp_path / "out.tsv"
    with written_whole(path) as handle:
        handle.write("index\tlabel\n0\tpos\n")
    with pytest.raises(KeyboardInterrupt), written_whole(path) as handle:
        handle.write("index\tlabel\n")
        raise KeyboardInterrupt
    assert path.read_text() == "index\tlabel\n0\tpos\n" and [p.name for p in tmp_path.iterdir()] == ["out.tsv"]


# ---------------------------------------------------------------------------------------------------- through runs


def conll_words(path: Path, sentences: list[list[str]]) -> str:
    path.write_text("\n\n".join("\n".join(words) for words in sentences) + "\n")
    return str(path)


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_own_files_train_the_shipped_configs_and_the_run_predicts_new_text(shared_data, tmp_path, capfd):
    """The sentiment config with `--data.train_files` / `--data.val_files` (IMDB replaced), a tiny encoder trained
    a few steps and exported; then `train.py predict` with the run's config.yaml and its export on CSV, TSV and
    JSON lines of the same sentences (length-grouped batches of 3, two loader workers): the same lines each time,
    as transformers' model of the export predicts them, also as a TSV."""
    with (shared_data / "imdb" / "test.csv").open(encoding="utf-8", newline="") as handle:
        reviews = [(row["text"][:200], ["neg", "pos"][int(row["label"])]) for row in csv.DictReader(handle)][::500]
    train_files = write_csv(tmp_path / "train.csv", ["text", "label"], [list(row) for row in reviews])
    run = tmp_path / "run"
    train.main(["--config", "configs/sentiment/imdb.yaml", "--data.train_files", train_files, "--data.val_files",
                train_files, "--data.tokenizer", MINILM, "--model.encoder.preset", "bert-tiny", "--data.max_length",
                "64", "--trainer.max_steps", "4", "--trainer.default_root_dir", str(run), "--trainer.logger", "false",
                "--trainer.enable_progress_bar", "false"])
    assert (f"litbert: data from files: train {train_files}, validation {train_files}, test none (replacing the "
            f"config's data.dataset='imdb')") in "".join(capfd.readouterr())
    inputs = {"new.csv": write_csv(tmp_path / "new.csv", ["text"], [[s] for s in SENTENCES]),
              "new.tsv": write_csv(tmp_path / "new.tsv", ["text"], [[s] for s in SENTENCES], "\t"),
              "new.jsonl": str(tmp_path / "new.jsonl")}
    Path(inputs["new.jsonl"]).write_text("".join(json.dumps({"text": s}) + "\n" for s in SENTENCES))
    probabilities = transformers_scores(str(run / "model"), SENTENCES).softmax(-1)
    score, label = probabilities.max(-1)
    for name, path in inputs.items():
        output = tmp_path / f"{name}.out.jsonl"
        predict(str(run / "config.yaml"), str(run / "model"), path, output, "--data.eval_batch_size", "3",
                "--data.num_workers", "2")
        lines = [json.loads(line) for line in output.read_text().splitlines()]
        assert [line["text"] for line in lines] == SENTENCES, name
        assert [line["label"] for line in lines] == [["neg", "pos"][i] for i in label], name
        torch.testing.assert_close(torch.tensor([line["score"] for line in lines]), score, atol=1e-5, rtol=0)
    predict(str(run / "config.yaml"), str(run / "model"), inputs["new.csv"], tmp_path / "out.tsv")
    table = list(csv.reader((tmp_path / "out.tsv").open(encoding="utf-8"), delimiter="\t"))
    assert table[0] == ["index", "label", "score"]
    assert table[1:] == [[str(i), ["neg", "pos"][int(k)], f"{float(s):.6f}"]
                         for i, (k, s) in enumerate(zip(label, score, strict=True))]


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_stsb_scores_of_new_pairs_are_the_exported_models(shared_data, tmp_path):
    """configs/glue/stsb.yaml on a part of STS-B (a data root of its own), then new pairs (TSV): a score per
    pair, transformers' regression output of the export."""
    folder = tmp_path / "data" / "glue" / "STS-B"
    folder.mkdir(parents=True)
    for name in ("train.tsv", "dev.tsv"):
        lines = (shared_data / "glue" / "STS-B" / name).read_text(encoding="utf-8").splitlines()
        (folder / name).write_text("\n".join(lines[:41]) + "\n", encoding="utf-8")
    run = tmp_path / "run"
    train.main(["--config", "configs/glue/stsb.yaml", "--data.data_root", str(tmp_path / "data"),
                "--data.tokenizer", MINILM, "--model.encoder.preset", "bert-tiny", "--trainer.max_steps", "3",
                "--predict", "false", "--trainer.default_root_dir", str(run), "--trainer.logger", "false",
                "--trainer.enable_progress_bar", "false"])
    first, second = SENTENCES[:5], SENTENCES[2:]
    pairs = [list(pair) for pair in zip(first, second, strict=True)]
    inputs = write_csv(tmp_path / "pairs.tsv", ["sentence1", "sentence2"], pairs, "\t")
    predict(str(run / "config.yaml"), str(run / "model"), inputs, tmp_path / "scores.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text().splitlines()]
    assert [(line["sentence1"], line["sentence2"]) for line in lines] == list(zip(first, second, strict=True))
    assert all("label" not in line for line in lines)
    expected = transformers_scores(str(run / "model"), first, second)[:, 0]
    torch.testing.assert_close(torch.tensor([line["score"] for line in lines]), expected, atol=1e-5, rtol=0)


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_ner_tags_every_word_of_new_text_as_the_exported_model_does(shared_data, tmp_path, capfd):
    """configs/ner/conll2003.yaml with `--data.train_files` / `--data.val_files` (a part of CoNLL-2003), then a file
    of words (blank lines between sentences, one longer than a window of max_length 16): CoNLL lines `word<TAB>tag`
    for every word in order, the tag transformers' token classifier of the export gives its first sub-token."""
    blocks = (shared_data / "conll2003" / "train.txt").read_text().split("\n\n")[1:300]
    (tmp_path / "train.txt").write_text("\n\n".join(blocks) + "\n")
    run = tmp_path / "run"
    train.main(["--config", "configs/ner/conll2003.yaml", "--data.train_files", str(tmp_path / "train.txt"),
                "--data.val_files", str(tmp_path / "train.txt"), "--data.tokenizer", MINILM,
                "--model.encoder.preset", "bert-tiny", "--trainer.max_steps", "3", "--trainer.default_root_dir",
                str(run), "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"])
    assert "(replacing the config's data.dataset='conll2003')" in "".join(capfd.readouterr())
    sentences = [line.split() for line in ("EU rejects German call to boycott British lamb .",
                                           "Peter Blackburn", "BRUSSELS 1996-08-22",
                                           "The European Commission said on Thursday it disagreed with German "
                                           "advice to consumers to shun British lamb until scientists determine")]
    inputs = conll_words(tmp_path / "words.txt", sentences)
    predict(str(run / "config.yaml"), str(run / "model"), inputs, tmp_path / "tags.txt", "--data.max_length", "16")
    written = [[line.split("\t") for line in block.splitlines()]
               for block in (tmp_path / "tags.txt").read_text().split("\n\n") if block.strip()]
    assert [[word for word, _ in block] for block in written] == sentences

    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run / "model")
    reference = AutoModelForTokenClassification.from_pretrained(run / "model").eval()
    labels = reference.config.id2label
    for words, block in zip(sentences[:3], written, strict=False):  # the sentences a single window holds
        encoded = tokenizer(words, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            ids = reference(**encoded).logits[0].argmax(-1).tolist()
        word_ids = encoded.word_ids(0)
        first = [ids[next(p for p, w in enumerate(word_ids) if w == i)] for i in range(len(words))]
        assert [tag for _, tag in block] == [labels[i] for i in first]
    assert len(written[3]) == len(sentences[3]) and all(tag in labels.values() for _, tag in written[3])
