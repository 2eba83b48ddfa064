"""Where the data comes from, in one flag: a source the command line names (local files, or a dataset) replaces the
one the config names, with the settings that locate it (its config name, splits and folders), and the run prints
which it reads. tests/test_predict.py trains the sentiment and NER configs on own files given this way."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from runs import MINILM

import train
from tasks.run.cli import command_line_keys, make_cli


@pytest.fixture(autouse=True)
def _offline(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "disabled")


def quickstart(tmp_path: Path, *extra: str) -> list[str]:
    return ["--config", "configs/quickstart.yaml", "--trainer.logger", "false", "--trainer.default_root_dir",
            str(tmp_path / "run"), "--trainer.enable_progress_bar", "false", *extra]


def test_the_data_source_named_on_the_command_line_replaces_the_configs(minilm, tmp_path):
    """The quickstart names IMDB with its splits; `--data.train_files` alone replaces them (and says which it
    replaced); a dataset and files both on the command line are refused, naming both; a prediction file is for
    `train.py predict` only."""
    text = tmp_path / "my.txt"
    text.write_text("One document.\nAnother one.\n")
    base = quickstart(tmp_path, "--data.tokenizer", minilm, "--data.train_tokenizer", "null")
    cli = make_cli([*base, "--data.train_files", str(text)])
    data = cli.datamodule
    assert (data.train_files, data.dataset, data.val_files) == ([str(text)], None, None)
    assert cli.replaced_source == ["data.dataset='stanfordnlp/imdb'", "data.train_split='unsupervised'",
                                   "data.val_split='test'"]
    assert data.describe_source() == f"files: train {text}, validation none"
    with pytest.raises(ValueError, match=r"data.dataset='wikitext' and data.train_files are both set in one place"):
        make_cli([*base, "--data.train_files", str(text), "--data.dataset", "wikitext"])


def test_command_line_keys():
    args = ["--config", "a.yaml", "--data.train_files", "x", "--data.init_args.val_split=test", "--trainer.max_steps",
            "3", "--data", '{"init_args": {"dataset": "imdb"}, "class_path": "data.MLMDataModule"}']
    assert command_line_keys(args, "data") == {"train_files", "val_split", "dataset"}
    assert command_line_keys(["--config", "configs/quickstart.yaml"], "data") == set()


def test_a_dataset_named_on_the_command_line_replaces_the_configs_files(shared_data, tmp_path):
    """A config of own files, and a dataset with its split on the command line: the files are replaced, the split
    given is read and the validation split is the dataset's default one."""
    text = tmp_path / "my.txt"
    text.write_text("One document.\n")
    config = {"model": {"class_path": "tasks.mlm.MaskedLM", "init_args": {"encoder": {"preset": "bert-tiny"}}},
              "data": {"class_path": "data.MLMDataModule",
                       "init_args": {"tokenizer": MINILM, "train_files": [str(text)], "val_files": [str(text)]}}}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(config))
    cli = make_cli(["--config", str(tmp_path / "mine.yaml"), "--data.dataset", "wikitext", "--data.dataset_config",
                    "wikitext-2-v1", "--data.train_split", "test", "--trainer.logger", "false",
                    "--trainer.default_root_dir", str(tmp_path / "run")])
    assert cli.replaced_source == [f"data.train_files={[str(text)]!r}", f"data.val_files={[str(text)]!r}"]
    folder = shared_data / "wikitext-2"
    assert cli.datamodule.describe_source() == (
        f"dataset wikitext (wikitext-2-v1): train split 'test' ({folder / 'wiki.test.tokens'}), validation split "
        f"'validation' ({folder / 'wiki.valid.tokens'})")


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_the_quickstart_trains_on_a_text_file_given_alone(shared_data, tmp_path, capfd):
    """The README job on one's own text: `--data.train_files my.txt` and nothing else about the data (the rest
    scales it down): its tokenizer is trained on the file, the model on its documents, without validation."""
    lines = [line for line in (shared_data / "wikitext-2" / "wiki.test.tokens").read_text().splitlines()
             if line.strip()][:600]
    text = tmp_path / "my.txt"
    text.write_text("\n".join(lines) + "\n")
    cli = train.main(quickstart(tmp_path, "--data.train_files", str(text), "--data.tokenizer",
                                str(tmp_path / "tokenizer"), "--data.train_tokenizer.vocab_size", "1000",
                                "--trainer.max_steps", "3"))
    out = capfd.readouterr().out
    assert (f"litbert: data from files: train {text}, validation none (replacing the config's "
            f"data.dataset='stanfordnlp/imdb', data.train_split='unsupervised', data.val_split='test')") in out
    assert cli.trainer.global_step == 3 and cli.datamodule.stats["train"]["documents"] == 600
    assert len(cli.datamodule.tokenizer) == 1000 and (tmp_path / "run" / "model" / "litbert.json").exists()


def test_the_classification_and_ner_configs_take_the_same_flag_one_file_a_split(tmp_path):
    """`--data.train_files` names the files of every task: the sentiment and NER configs take it as a path or a list
    of one, and refuse several files (which MLM concatenates) naming the setting and the way on."""
    rows = tmp_path / "train.csv"
    rows.write_text("text,label\ngood film,pos\nbad film,neg\n")
    words = tmp_path / "train.txt"
    words.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n")
    for config, path in (("configs/sentiment/imdb.yaml", rows), ("configs/ner/conll2003.yaml", words)):
        base = ["--config", config, "--model.pretrained", MINILM, "--trainer.logger", "false",
                "--trainer.default_root_dir", str(tmp_path / "run")]
        for given in (str(path), f"[{path}]"):
            cli = make_cli([*base, "--data.train_files", given, "--data.val_files", str(path)])
            assert cli.datamodule.files == {"train": str(path), "validation": str(path), "test": None}
            assert cli.replaced_source[0].startswith("data.dataset=")
        with pytest.raises(ValueError, match=r"data.train_files=\[.*\]: this task reads one file per split, not 2; "
                                             r"join them into one file"):
            make_cli([*base, "--data.train_files", f"[{path}, {path}]", "--data.val_files", str(path)])
