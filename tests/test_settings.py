"""Every setting a user can give is honoured or refused: a walk over the configuration schema of every task and
datamodule, through `train.py`'s own parser and the shipped configs. Each key is set to another value; the run
must then either stop with a message, or build objects that differ from the default run's (the model's modules,
weights and settings, the datamodule and the batches its loaders yield, the callbacks), hyperparameter records
aside. A key that changes nothing is silently ignored, and fails the walk.

Then the settings train.py itself handles: callbacks from configs and the command line, encoder overrides over a
pretrained checkpoint, values that come from the data, run folders."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import inspect
import json
import os
import shutil
import signal
import struct
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from runs import MINILM
from torch import nn

import data.base as data_base
import train
from data.classification import ClassificationDataModule
from data.sources import DataError
from data.tokenizers import load_tokenizer, save_tokenizer, train_tokenizer
from encoders import Encoder, EncoderConfig, Kernels, MaskedLMHead
from encoders.checkpoints import CheckpointError
from tasks.base import EncoderSpec
from tasks.classification import SequenceClassification
from tasks.run.checkpoint_io import LAST
from tasks.run.checkpoints import BestCheckpoint, LastCheckpoint
from tasks.run.cli import LitbertCLI, make_cli
from tasks.run.early_stopping import EarlyStopping
from tasks.run.errors import condense_parse_error, own_error
from tasks.run.folders import RunFolderError
from tasks.run.results import finite_or_none, print_summary

# ---------------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def assets(shared_data, tmp_path_factory) -> dict[str, str]:
    """Small checkpoints (bert-tiny with MiniLM's vocabulary and tokenizer), data subsets and a second tokenizer."""
    root = tmp_path_factory.mktemp("assets")
    minilm = load_tokenizer(MINILM)
    config = EncoderConfig.from_name("bert-tiny", vocab_size=len(minilm))
    out = {}
    for name, seed in (("tiny", 0), ("tiny_b", 1)):
        torch.manual_seed(seed)
        encoder = Encoder(config)
        encoder.save_pretrained(root / name, head=MaskedLMHead(config, encoder.embeddings.word))
        minilm.save_pretrained(str(root / name))
        out[name] = str(root / name)
    torch.manual_seed(2)
    classifier = SequenceClassification(num_labels=2, encoder=EncoderSpec(preset="bert-tiny"), vocab_size=len(minilm))
    out["classifier"] = str(classifier.export(root / "classifier", minilm))
    lines = [line for line in (shared_data / "wikitext-2" / "wiki.valid.tokens").read_text().splitlines() if line]
    other = train_tokenizer(lines[:2000], "wordpiece", vocab_size=1500)
    out["tokenizer_b"] = str(save_tokenizer(other, root / "tokenizer_b"))
    for name, size in (("wordpiece", 1000), ("wordpiece_b", 1200)):  # MLM tokenizers
        out[name] = str(save_tokenizer(train_tokenizer(lines[:3000], "wordpiece", vocab_size=size), root / name))
    # RTE with a third of its training pairs, as a data root of its own and as a task folder.
    rte = root / "data_root" / "glue" / "RTE"
    rte.mkdir(parents=True)
    for name in ("dev.tsv", "test.tsv"):
        shutil.copy(shared_data / "glue" / "RTE" / name, rte / name)
    train_rows = (shared_data / "glue" / "RTE" / "train.tsv").read_text().splitlines()
    (rte / "train.tsv").write_text("\n".join(train_rows[:800]) + "\n")
    out["data_root"], out["rte_dir"] = str(root / "data_root"), str(rte)
    # CoNLL subsets, two versions of each split; the first in IOB1 (a chunk opens with I- unless it follows one of
    # its type), as CoNLL-2003 was released, so that the tag scheme matters.
    for version, (start, count) in (("a", (0, 250)), ("b", (250, 250))):
        for split in ("train", "valid", "test"):
            blocks = (shared_data / "conll2003" / f"{split}.txt").read_text().split("\n\n")[start:start + count]
            text = "\n\n".join(blocks) + "\n"
            if version == "a":
                text = to_iob1(text)
            path = root / f"conll_{version}_{split}.txt"
            path.write_text(text)
            out[f"conll_{version}_{split}"] = str(path)
    # Sentiment CSVs with the columns `review` / `stars`, and a copy with other rows; some reviews longer than 64
    # tokens, so that truncation settings matter.
    for version, offset in (("a", 0), ("b", 200)):
        for split, count in (("train", 300), ("val", 60), ("test", 60)):
            rows = ["review,stars"] + [f'"review {i} {"good" if i % 3 else "bad"} {"fine and long " * (i % 40)} end",'
                                       f'{"pos" if i % 3 else "neg"}' for i in range(offset, offset + count)]
            path = root / f"sentiment_{version}_{split}.csv"
            path.write_text("\n".join(rows) + "\n")
            out[f"sentiment_{version}_{split}"] = str(path)
    return out


def to_iob1(text: str) -> str:
    """IOB2 CoNLL lines -> IOB1: B-X becomes I-X unless the previous token is in a chunk of type X."""
    lines, previous = [], "O"
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            lines.append(line)
            previous = "O"
            continue
        tag = fields[-1]
        if tag.startswith("B-") and previous[2:] != tag[2:]:
            fields[-1] = "I-" + tag[2:]
        previous = tag
        lines.append(" ".join(fields))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- fingerprints

# Bookkeeping that is not a setting's effect: hyperparameter records, clocks, and the parsed-text caches a datamodule
# fills only when its tokenized cache did not exist yet.
_SKIP = ("hparams", "_trainer", "_fabric", "_metric_attributes", "_device", "_jit_is_scripting", "_compiler_ctx",
         "_saved_time", "_last_time_checked", "sentences", "_raw")


def _skipped(key: Any) -> bool:
    return any(part in str(key) for part in _SKIP)


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two summaries differ, for the failure message."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {str(a)[:80]} != {str(b)[:80]}"]


def summary(value: Any, depth: int = 0) -> Any:
    """What an object holds, as plain data: tensors by shape, dtype and sums; objects by their attributes."""
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    if isinstance(value, torch.Tensor):
        data = value.detach().float()
        return ("tensor", tuple(value.shape), str(value.dtype), round(float(data.sum()), 4),
                round(float(data.abs().sum()), 4))
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [summary(v, depth + 1) for v in list(items)[:64]]
    if isinstance(value, dict):
        return {str(k): summary(v, depth + 1) for k, v in list(value.items())[:256] if not _skipped(k)}
    if hasattr(value, "backend_tokenizer") and hasattr(value, "get_vocab"):  # a transformers tokenizer
        pipeline = json.loads(value.backend_tokenizer.to_str())
        return ("tokenizer", len(value), pipeline["model"]["type"], pipeline["normalizer"])
    if type(value).__name__ == "Tokenizer":  # the `tokenizers` backend of one
        return ("backend tokenizer", value.get_vocab_size())
    if isinstance(value, nn.Module):
        modules = {name: (type(m).__name__, summary(_plain(m), depth + 1)) for name, m in value.named_modules()}
        return {"modules": modules, "state": {name: summary(t) for name, t in value.state_dict().items()}}
    if type(value).__name__ == "Dataset" and hasattr(value, "cache_files"):
        folders = sorted({str(Path(f["filename"]).parent) for f in value.cache_files})
        return ("dataset", len(value), value.column_names, folders, summary(value[0]) if len(value) else None)
    if dataclasses.is_dataclass(value):
        return summary(dataclasses.asdict(value), depth + 1)
    if depth > 4 or not hasattr(value, "__dict__"):
        return type(value).__name__
    return (type(value).__name__, summary({k: v for k, v in vars(value).items() if not _skipped(k)}, depth + 1))


def _plain(module: nn.Module) -> dict[str, Any]:
    return {k: v for k, v in vars(module).items()
            if not k.startswith(("_", "training")) and not isinstance(v, nn.Module)}


def fingerprint(cli: LitbertCLI, batches: bool = True) -> Any:
    """The state of the built objects. The datamodule's attributes named like its constructor's arguments are left
    out: a setting only stored there has had no effect yet, so its effect must show in the data, the loaders or the
    batches."""
    data = cli.datamodule
    if not batches:  # tokenizer training: `tokenizers` breaks ties at the vocabulary's cut-off differently per run
        return summary(data.tokenizer)
    arguments = set(inspect.signature(type(data).__init__).parameters)
    data.setup("fit")
    loaders = {"train": data.train_dataloader(), "val": data.val_dataloader()}
    batches = {}
    for name, loader in loaders.items():
        if loader == []:  # no validation (MLM training files without validation files)
            batches[name] = None
            continue
        loader = loader[0] if isinstance(loader, list) else loader
        sampler = loader.batch_sampler  # None for a stream (data.streaming), which batches itself
        batches[name] = (type(sampler).__name__, summary(vars(sampler)) if sampler is not None else None,
                         loader.num_workers, summary(next(iter(loader))))
    model_state = {k: v for k, v in vars(cli.model).items() if not k.startswith(("_", "training"))
                   and not isinstance(v, nn.Module)}
    data_state = {k: v for k, v in vars(data).items() if k not in arguments}
    data_state["cache_path"] = data.cache_path  # where tokenized caches are read and written
    return summary({"model": cli.model, "task": model_state, "data": data_state, "batches": batches,
                    "callbacks": [c for c in cli.trainer.callbacks
                                  if isinstance(c, (LastCheckpoint, BestCheckpoint, EarlyStopping))],
                    "random": torch.rand(4)})


# ---------------------------------------------------------------------------------------------------- the walk


def leaves(namespace: Any, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in vars(namespace).items():
        if type(value).__name__ == "Namespace":
            out.update(leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


ENCODER_VALUES = {"preset": "bert-mini", "vocab_size": 40000, "hidden_size": 64, "num_layers": 1, "num_heads": 1,
                  "intermediate_size": 256, "max_position_embeddings": 1024, "type_vocab_size": 0, "pad_token_id": 1,
                  "position": "rope", "position_offset": 2, "rope_base": 500.0, "sinusoidal_scale": 0.03,
                  "embedding_scale": 8.0,
                  "t5_num_buckets": 16, "t5_max_distance": 64, "norm": "rmsnorm", "norm_placement": "pre",
                  "first_attention_norm": False, "norm_eps": 1e-6, "local_window": 8, "global_every": 2,
                  "local_rope_base": 1000.0,
                  "activation": "relu", "bias": False, "hidden_dropout": 0.2, "attention_dropout": 0.2,
                  "attention_output_dropout": False, "attention_output_rate": "attention",
                  "feed_forward_dropout": "inner", "initializer_range": 0.05, "initializer_cutoff": 1.5}
SECOND_ENCODER_VALUES = {"preset": "bert-small", "position": "alibi", "norm_placement": "post", "norm": "layernorm",
                         "activation": "gelu", "hidden_dropout": 0.3, "attention_dropout": 0.3, "bias": True,
                         "attention_output_dropout": True, "attention_output_rate": "hidden",
                         "feed_forward_dropout": "output",
                         "num_layers": 3, "hidden_size": 96, "num_heads": 3, "intermediate_size": 384}
CHOICES = {"pooling": "mean", "pooler_activation": "relu", "schedule": "cosine", "optimizer": "adam",
           "truncation": {"longest_first": "error", "head": "tail", "head+tail": "head"},
           "packing": "segments", "masking": "static", "tag_scheme": "iob2", "task": "wnli", "kind": "byte_level_bpe"}


def alternative(key: str, value: Any, assets: dict[str, str]) -> Any:
    """Another valid value for `key`, or a string for keys whose value is a path."""
    name = key.rsplit(".", 1)[-1]
    paths = {"pretrained": assets["tiny_b"], "teacher": assets["classifier"], "tokenizer": assets["tokenizer_b"],
             "data_root": assets["data_root"], "data_dir": assets["rte_dir"], "cache_dir": "{tmp}/other_cache",
             "dirpath": "{tmp}/other_checkpoints", "label_names": None, "eval_batch_size": 7,
             "every_n_steps": 5, "max_documents": 20, "max_val_documents": 3, "dataset_config": "plain_text",
             "skip_labels": ["neg"], "val_split": "validation", "text_column": "review", "label_column": "stars",
             "lowercase": False, "alpha_kd": 0.3, "temperature": 3.0, "decay": 0.1,
             "metrics": ["f1", "accuracy"], "pretrained_layers": "every_other", "layer_decay": 0.8,
             "optimizer_args": {"amsgrad": True}, "patience": 2,
             "predict_file": "{tmp}/new.csv",  # read by `train.py predict` only: a training run refuses it
             "predict_format": "lines",  # the same
             "threshold": 0.3, "multi_label": True, "varlen": True, "label_columns": ["pos", "neg"],
             "label_separator": "|", "classifier_dropout": 0.3}
    if name in CHOICES:
        choice = CHOICES[name]
        return choice.get(value, choice) if isinstance(choice, dict) else choice
    if ".encoder." in key or ".student." in key:
        # A config may already hold the usual alternative (the quickstart trains with RoPE and pre-norm).
        return ENCODER_VALUES[name] if ENCODER_VALUES[name] != value else SECOND_ENCODER_VALUES[name]
    if name in paths and value is None or name in ("pretrained", "teacher", "tokenizer", "data_root", "data_dir"):
        return paths[name]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value // 2 if name == "max_length" else value + 1
    if isinstance(value, float):
        return value / 2 if value else 0.01
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, float) for v in value):
        return [v * 0.9 for v in value]
    return paths.get(name, "__no_alternative__")


FAMILIES = {
    # name: (config, base overrides, the key prefixes walked)
    "glue": ("configs/glue/rte.yaml", lambda a: ["--model.pretrained", a["tiny"]],
             ("model.init_args.", "data.init_args.", "checkpoint.", "early_stopping.", "seed_everything")),
    "sentiment": ("configs/sentiment/imdb.yaml", lambda a: [
        "--model.pretrained", a["tiny"], "--data.dataset", "null", "--data.train_files", a["sentiment_a_train"],
        "--data.val_files", a["sentiment_a_val"], "--data.test_files", a["sentiment_a_test"], "--data.text_columns",
        '["review"]', "--data.label_column", "stars", "--data.max_length", "64"], ("data.init_args.",)),
    "ner": ("configs/ner/conll2003.yaml", lambda a: [
        "--model.pretrained", a["tiny"], "--data.dataset", "null", "--data.train_files", a["conll_a_train"],
        "--data.val_files", a["conll_a_valid"], "--data.test_files", a["conll_a_test"]],
        ("model.init_args.", "data.init_args.")),
    "mlm": ("configs/quickstart.yaml", lambda a: [
        "--data.tokenizer", a["wordpiece"], "--data.train_tokenizer", "null", "--data.max_documents", "40",
        "--data.max_val_documents", "5", "--model.encoder.preset", "bert-tiny"],
        ("model.init_args.", "data.init_args.")),
    # Tokenizer training: each build trains into a folder of its own (a folder trained otherwise is refused).
    "tokenizer_training": ("configs/quickstart.yaml", lambda a: [
        "--data.train_tokenizer.vocab_size", "1000", "--data.max_documents", "40", "--data.max_val_documents", "5",
        "--model.encoder.preset", "bert-tiny"], ("data.init_args.train_tokenizer.",)),
    "distillation": ("configs/distill/distilbert.yaml", lambda a: [
        "--model.teacher", a["tiny"], "--data.tokenizer", a["tiny"], "--data.dataset", "stanfordnlp/imdb",
        "--data.dataset_config", "null", "--data.train_split", "unsupervised", "--data.val_split", "test",
        "--data.max_documents", "30", "--data.max_val_documents", "5", "--data.max_length", "64",
        "--data.num_workers", "0"], ("model.init_args.",)),
}
# Settings whose whole point is to give the same data another way; each is checked where that is measurable.
SAME_RESULT = {
    "num_proc": "tests/test_data_mlm.py::test_tokenizing_in_two_processes_gives_the_same_data (shards on disk, "
                "identical blocks)",
    "pad_to_multiple_of": "tests/test_data_collate.py::test_bucketed_lengths_give_the_losses_of_unbucketed_ones "
                          "(the shapes it gives, and equal losses)",
    "pad_last_batch": "tests/test_data_collate.py::test_filling_the_last_batch_changes_no_loss_gradient_weight_or_"
                      "metric (full-size last batches; equal losses, gradients, weights and metrics)",
}
# Keys whose alternative differs by family, or that have none to try: the replacement values.
SPECIFIC = {
    ("mlm", "data.init_args.tokenizer"): "{wordpiece_b}",
    ("mlm", "data.init_args.train_tokenizer"): {"vocab_size": 1000},
    ("tokenizer_training", "data.init_args.train_tokenizer.min_frequency"): 30,
    ("mlm", "data.init_args.dataset"): "wikitext",
    ("mlm", "data.init_args.dataset_config"): "wikitext-2-v1",
    ("mlm", "data.init_args.train_split"): "test",
    ("mlm", "data.init_args.val_split"): "validation",
    ("mlm", "data.init_args.train_files"): ["{wiki_file}"],
    ("mlm", "data.init_args.val_files"): ["{wiki_file}"],
    ("mlm", "data.init_args.text_column"): "review",
    ("ner", "data.init_args.dataset"): "conll2003",
    ("ner", "data.init_args.train_files"): "{conll_b_train}",
    ("ner", "data.init_args.val_files"): "{conll_b_valid}",
    ("ner", "data.init_args.test_files"): "{conll_b_test}",
    ("ner", "data.init_args.label_names"): ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC",
                                            "I-MISC"],
    ("ner", "data.init_args.word_column"): 1,
    ("ner", "data.init_args.label_column"): -2,
    ("sentiment", "data.init_args.dataset"): "imdb",
    ("sentiment", "data.init_args.train_files"): "{sentiment_b_train}",
    ("sentiment", "data.init_args.val_files"): "{sentiment_b_val}",
    ("sentiment", "data.init_args.test_files"): "{sentiment_b_test}",
    ("sentiment", "data.init_args.text_columns"): ["text"],
    ("sentiment", "data.init_args.label_column"): "label",
    ("sentiment", "data.init_args.label_names"): ["pos", "neg"],
    ("glue", "data.init_args.data_root"): "{data_root}",
    ("distillation", "model.init_args.teacher"): "{tiny_b}",
}
# Linked from the data: the parser takes a value, and the run refuses one that differs from the data's.
LINKED = ("vocab_size", "pad_token_id", "num_labels", "label_names", "metrics", "validation_names", "multi_label")


def as_argument(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, tuple, dict)) else "null" if value is None else str(value)


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_setting_is_honoured_or_refused(family, assets, shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    wiki = tmp_path / "wiki.txt"
    wiki.write_text("\n".join(line for line in (shared_data / "wikitext-2" / "wiki.test.tokens").read_text()
                              .splitlines()[:400] if line.strip()) + "\n")
    values = dict(assets, wiki_file=str(wiki), tmp=str(tmp_path))
    config, base, prefixes = FAMILIES[family]
    base_args = ["--config", config, *base(assets), "--trainer.logger", "false"]

    builds = iter(range(10**6))

    def build(*extra: str, root: str = "run") -> LitbertCLI:
        own_tokenizer = ["--data.tokenizer", str(tmp_path / f"tokenizer{next(builds)}")]
        return make_cli([*base_args, "--trainer.default_root_dir", str(tmp_path / root),
                               *(own_tokenizer if family == "tokenizer_training" else []), *extra])

    batches = family != "tokenizer_training"
    baseline = fingerprint(build(), batches)
    again = fingerprint(build(root="run"), batches)
    assert again == baseline, f"two default builds differ: {differences(baseline, again)[:10]}"
    keys = {}
    for key, value in leaves(build().config).items():
        if not key.startswith(prefixes):
            continue
        if value is None and key.rsplit(".", 1)[-1] in ("encoder", "student"):  # an EncoderSpec left unset
            keys.update({f"{key}.{field.name}": None for field in dataclasses.fields(EncoderSpec)})
        elif value is None and key.endswith(".kernels"):  # Kernels left unset: its defaults
            keys.update({f"{key}.{field.name}": field.default for field in dataclasses.fields(Kernels)})
        else:
            keys[key] = value
    ignored, tried, refused, honoured = [], [], [], []
    for key, value in keys.items():
        name = key.rsplit(".", 1)[-1]
        if name in LINKED and key == f"model.init_args.{name}":
            continue  # checked in test_values_from_the_data_cannot_be_set_to_others
        if name in SAME_RESULT:
            continue  # honoured by design without a visible change; see SAME_RESULT
        new = SPECIFIC.get((family, key), alternative(key, value, values))
        if isinstance(new, str):
            new = new.format(**values)
        elif isinstance(new, list):
            new = [v.format(**values) if isinstance(v, str) else v for v in new]
        assert new != "__no_alternative__", f"no alternative value known for {key}={value!r}: add one"
        tried.append(key)
        try:
            cli = build(f"--{key}", as_argument(new))
            changed = fingerprint(cli, batches) != baseline
        except argparse.ArgumentError as error:  # the parser refused the value
            refused.append(f"{key}: {condense_parse_error(str(error))[:150]}")
            continue
        except (ValueError, FileNotFoundError) as error:
            message = str(own_error(error))
            assert len(message) > 30, f"{key}={new!r} refused without a useful message: {message!r}"
            refused.append(f"{key}: {message[:150]}")
            continue
        if not changed:
            ignored.append(f"{key}={new!r}")
        else:
            honoured.append(f"{key}={new!r}")
    print(f"\n{family}: {len(tried)} settings tried, {len(refused)} refused:", *refused, "honoured:", *honoured,
          sep="\n  ")
    assert len(tried) >= 4
    assert ignored == [], f"{family}: settings that change nothing: {ignored}"


# ---------------------------------------------------------------------------------------------------- train.py's own


@pytest.fixture
def glue(assets, shared_data, tmp_path, monkeypatch):
    """Build the RTE run (tiny pretrained encoder) with extra arguments, without running it."""
    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "disabled")

    def build(*extra: str, root: Path | None = None) -> LitbertCLI:
        return make_cli(["--config", "configs/glue/rte.yaml", "--model.pretrained", assets["tiny"],
                               "--trainer.logger", "false", "--trainer.default_root_dir", str(root or tmp_path / "run"),
                               *extra])

    return build


def test_callbacks_from_configs_and_the_command_line_are_kept(glue, tmp_path):
    """A user's callbacks, from a --config file and from --trainer.callbacks+=, all run; litbert adds its best
    checkpoint and throughput defaults only where the user has none of that kind."""
    extra = tmp_path / "callbacks.yaml"
    extra.write_text(
        "trainer:\n  callbacks:\n"
        "    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        f"      init_args: {{dirpath: {tmp_path / 'mine'}, monitor: val/loss, save_top_k: 2}}\n"
        "    - class_path: tasks.run.throughput.Throughput\n      init_args: {peak_flops: 1.0e+12}\n")
    cli = glue("--config", str(extra), "--trainer.callbacks+=lightning.pytorch.callbacks.LearningRateMonitor",
               "--trainer.callbacks+=tasks.run.compile.CompileEncoder")
    kinds = [type(callback).__name__ for callback in cli.trainer.callbacks]
    for kind in ("ModelCheckpoint", "Throughput", "LearningRateMonitor", "CompileEncoder", "LastCheckpoint"):
        assert kinds.count(kind) == 1, kinds
    assert "BestCheckpoint" not in kinds  # the user's own ModelCheckpoint picks the best
    (mine,) = [c for c in cli.trainer.callbacks if type(c).__name__ == "ModelCheckpoint"]
    assert mine.dirpath == str(tmp_path / "mine") and mine.save_top_k == 2
    (throughput,) = [c for c in cli.trainer.callbacks if type(c).__name__ == "Throughput"]
    assert throughput.peak_flops == 1e12

    defaults = [type(callback).__name__ for callback in glue(root=tmp_path / "plain").trainer.callbacks]
    assert defaults.count("BestCheckpoint") == 1 and defaults.count("Throughput") == 1


def test_checkpointing_off_writes_nothing_and_refuses_a_model_checkpoint(glue):
    cli = glue("--trainer.enable_checkpointing", "false")
    (last,) = [c for c in cli.trainer.callbacks if isinstance(c, LastCheckpoint)]
    assert last.saving is False
    assert not any(isinstance(c, BestCheckpoint) for c in cli.trainer.callbacks)
    with pytest.raises(ValueError, match="enable_checkpointing is false, but trainer.callbacks holds a Model"):
        glue("--trainer.enable_checkpointing", "false",
             "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint")


def test_the_summary_says_why_no_best_checkpoint_was_saved(glue, tmp_path, capsys):
    """With checkpointing off the run validates all the same: its summary said 'no validation during fit'."""
    for args, why in ((("--trainer.enable_checkpointing", "false"), "trainer.enable_checkpointing is false"),
                      (("--trainer.limit_val_batches", "0"), "no validation during fit")):
        trainer = glue(*args).trainer
        for callback in trainer.callbacks:  # (set as fit begins)
            if isinstance(callback, LastCheckpoint):
                callback.dirpath = str(tmp_path / "checkpoints")
        print_summary(trainer, tmp_path / "config.yaml", "", None, [], tmp_path / "metrics.json")
        assert f"litbert: best checkpoint  (none saved: {why}; final weights used)\n" in capsys.readouterr().out


@pytest.mark.parametrize(("argument", "said"), [
    # A source of another datamodule: the settings GLUE's reads local data by, with their help.
    ("--data.train_files", "data.train_files: data.GLUEDataModule has no setting 'train_files': it reads local data "
                           "by data.data_dir (A task folder in the official layout, instead of the data root) or "
                           "data.data_root (Folder holding `glue/<TASK>/` (defaults to $LITBERT_DATA); without one, "
                           "the hub is used). `python train.py --data.help data.GLUEDataModule` lists its settings."),
    ("--data.bacth_size", "data.bacth_size: data.GLUEDataModule has no setting 'bacth_size'. Did you mean "
                          "data.batch_size (Training batch size) or data.eval_batch_size (Evaluation and prediction "
                          "batch size (defaults to `batch_size`))? `python train.py --data.help data.GLUEDataModule` "
                          "lists its settings."),
    ("--model.optimization.learning_rat", "model.optimization.learning_rat: tasks.base.Optimization has no setting "
                                          "'learning_rat'. Did you mean model.optimization.learning_rate? `python "
                                          "train.py --model.help tasks.classification.SequenceClassification` lists "
                                          "its settings."),
    ("--data.zzz", "data.zzz: data.GLUEDataModule has no setting 'zzz'; its settings are batch_size, cache_dir, "
                   "data_dir, data_root, eval_batch_size, group_by_length, max_length, num_workers, pad_last_batch, "
                   "pad_to_multiple_of, predict_file, seed, task, tokenizer, truncation. `python train.py --data.help "
                   "data.GLUEDataModule` lists its settings."),
    # No class of its own to name: argparse's refusal, with the closest option of the group.
    ("--trainer.acumulate_grad_batches", "unrecognized arguments: --trainer.acumulate_grad_batches 1; did you mean "
                                         "--trainer.accumulate_grad_batches?"),
    # A shortened option is no other's: argparse read `--trainer.max_step` as `--trainer.max_steps`.
    ("--trainer.max_step", "unrecognized arguments: --trainer.max_step 1; did you mean --trainer.max_steps?"),
])
def test_an_unknown_setting_is_named_with_the_closest_ones(argument, said, shared_data, monkeypatch, capsys):
    """jsonargparse says "Option 'train_files' is not accepted" and points at `--help`, hundreds of lines."""
    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    assert train.cli_main(["--config", "configs/glue/rte.yaml", "--model.pretrained", MINILM, argument, "1"]) == 2
    assert capsys.readouterr().err.splitlines()[-2:] == ["litbert: error in the configuration:", said]



@pytest.mark.parametrize("print_config", [False, True])
def test_an_unknown_key_of_a_config_file_is_named_with_its_file_line_and_the_closest_settings(
        print_config, shared_data, tmp_path, monkeypatch, capsys):
    """A key of a section without a class (trainer, checkpoint, the top level) was refused as jsonargparse says it,
    "Group 'trainer' does not accept option 'max_stepz'": no file, no line, no setting it may mean."""
    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    rte, run, base = Path("configs/glue/rte.yaml").resolve(), tmp_path / "run.yaml", tmp_path / "base.yaml"
    base.write_text(f"base: {rte}\ncheckpoint:\n  every_n_step: 5\n")
    for text, said in (
            (f"base: {rte}\ntrainer:\n  max_epochs: 1\n  max_stepz: 3\n",
             f"trainer.max_stepz ({run}, line 4): the trainer section has no setting 'max_stepz'. Did you mean "
             f"trainer.max_steps or trainer.max_time? `python train.py --help` lists the settings."),
            (f"base: {rte}\nexprot: false\n",
             f"exprot ({run}, line 2): a config's top level has no setting 'exprot'. Did you mean export or "
             f"export_dir? `python train.py --help` lists the settings."),
            ("base: base.yaml\n",  # in the file it extends
             f"checkpoint.every_n_step ({base}, line 3): the checkpoint section has no setting 'every_n_step'. Did "
             f"you mean checkpoint.every_n_steps or checkpoint.every_n_minutes? `python train.py --help` lists the "
             f"settings.")):
        run.write_text(text)
        args = ["--config", str(run), "--model.pretrained", MINILM] + (["--print_config"] if print_config else [])
        assert train.cli_main(args) == 2
        assert capsys.readouterr().err.splitlines()[-2:] == ["litbert: error in the configuration:", said]

def test_an_unknown_setting_of_a_class_without_settings_or_out_of_reach_is_said_as_such():
    """A class that takes no settings (`--trainer.callbacks.patience` before any callback class is given names
    lightning.Callback) was said to have settings that 'are unknown', as was one that cannot be imported."""
    from tasks.run.errors import unknown_setting

    said = unknown_setting("trainer.callbacks", "patience", "lightning.Callback",
                           help_of=("trainer.callbacks", "lightning.Callback"))
    assert said == ("trainer.callbacks.patience: lightning.Callback has no setting 'patience'; it takes no settings. "
                    "`python train.py --trainer.callbacks.help lightning.Callback` lists its settings.")
    said = unknown_setting("data", "zzz", "nowhere.Thing", help_of=("data", "nowhere.Thing"))
    assert said == "data.zzz: nowhere.Thing has no setting 'zzz'. `python train.py --data.help nowhere.Thing` lists " \
                   "its settings."


@pytest.mark.parametrize("unit", ["epochs", "steps"])
def test_a_minimum_above_the_maximum_is_refused(unit, glue):
    """Lightning stops at max_epochs (max_steps) and leaves a larger min_epochs (min_steps) unmet, without a word."""
    with pytest.raises(ValueError, match=rf"trainer.min_{unit}=4 is above trainer.max_{unit}=3, which stops the run "):
        glue(f"--trainer.min_{unit}", "4", f"--trainer.max_{unit}", "3")
    assert glue(f"--trainer.min_{unit}", "3", f"--trainer.max_{unit}", "3").trainer is not None


def test_evaluating_part_of_a_set_says_its_metrics_are_of_that_part(glue, recwarn):
    """limit_val_batches / limit_test_batches below the whole set (an int counts batches, so 1 is one batch) make
    the dev and test metrics, and metrics.json, those of a part; the run says so. The whole set (1.0) is silent."""
    glue("--trainer.limit_val_batches", "2", "--trainer.limit_test_batches", "0.5")
    said = [str(w.message) for w in recwarn]
    assert any(m.startswith("trainer.limit_val_batches=2 evaluates part of the set: its val/ metrics") for m in said)
    assert any(m.startswith("trainer.limit_test_batches=0.5 evaluates part of the set: its test/ metrics")
               for m in said)
    # Silent for the whole set, for none (0: no metrics), and under fast_dev_run, which writes no metrics.json.
    for limit in (["--trainer.limit_val_batches", "1.0"], ["--trainer.limit_val_batches", "0"],
                  ["--trainer.limit_val_batches", "2", "--trainer.fast_dev_run", "true"]):
        recwarn.clear()
        glue(*limit)
        assert not [w for w in recwarn if "evaluates part of the set" in str(w.message)], limit


def test_unsharded_data_over_several_processes_is_refused(glue):
    """litbert's datamodules shard themselves: without `use_distributed_sampler` two ranks would train on the same
    batches and predict every test example twice (a submission of 292 lines for WNLI's 146), found only after
    training. One process has nothing to shard."""
    unsharded = ["--trainer.accelerator", "cpu", "--trainer.use_distributed_sampler", "false"]
    with pytest.raises(ValueError, match=r"trainer.use_distributed_sampler=false with 2 processes: .* Remove the "):
        glue(*unsharded, "--trainer.devices", "2", "--trainer.strategy", "ddp")
    assert glue(*unsharded, "--trainer.devices", "1").trainer.world_size == 1


def test_encoder_overrides_over_a_pretrained_checkpoint(glue):
    cli = glue("--model.encoder.hidden_dropout", "0.3", "--model.encoder.attention_dropout", "0.25")
    config = cli.model.encoder.config
    assert (config.hidden_dropout, config.attention_dropout, config.num_layers) == (0.3, 0.25, 2)
    modules = list(cli.model.encoder.modules())
    assert {module.p for module in modules if hasattr(module, "p")} == {0.3}  # the Dropout modules
    assert {m.dropout for m in modules if isinstance(getattr(m, "dropout", None), float)} == {0.25}  # attention
    with pytest.raises(ValueError, match=r"hidden_size=512 \(checkpoint: 128\) would change the shapes"):
        glue("--model.encoder.hidden_size", "512")
    with pytest.raises(ValueError, match=r"rope_base=500.0 belong to another position scheme; position='learned'"):
        glue("--model.encoder.rope_base", "500")


def test_kernel_choices_from_the_command_line(glue, assets):
    """`--model.kernels.*` reaches the encoder and a distillation teacher's; a bad value is refused by name."""
    cli = glue("--model.kernels.unpad_below", "0", "--model.kernels.flex_attention", "true", "--model.teacher",
               assets["classifier"])
    assert cli.model.encoder.kernels == cli.model.teacher.encoder.kernels == Kernels(0.0, flex_attention=True)
    with pytest.raises((ValueError, argparse.ArgumentError), match=r"Kernels.unpad_below=2(\.0)? is a fraction"):
        glue("--model.kernels.unpad_below", "2")


def test_a_null_encoder_setting_on_the_command_line_means_as_in_the_checkpoint(glue):
    """`--model.encoder.<field>=null` (either spelling) unsets a value a config set: the encoder then takes the
    checkpoint's (jsonargparse alone would hand the nested parser the string 'None' and refuse it)."""
    assert glue("--model.encoder.hidden_dropout", "0.3").model.encoder.config.hidden_dropout == 0.3
    for extra in (["--model.encoder.hidden_dropout", "0.3", "--model.encoder.hidden_dropout=null"],
                  ["--model.encoder.hidden_dropout", "0.3", "--model.init_args.encoder.hidden_dropout", "null"]):
        cli = glue(*extra)
        assert cli.model.hparams.encoder["hidden_dropout"] is None
        assert cli.model.encoder.config.hidden_dropout == 0.1  # the tiny checkpoint's own


def test_values_from_the_data_cannot_be_set_to_others(glue):
    with pytest.raises(ValueError, match=r"model.num_labels=3 is set from the data \(GLUEDataModule gives 2\)"):
        glue("--model.init_args.num_labels", "3")
    with pytest.raises(ValueError, match=r"model.metrics=\['f1'\] is set from the data"):
        glue("--model.init_args.metrics", '["f1"]')
    with pytest.raises(ValueError, match=r"model.pad_token_id=5 is set from the data \(GLUEDataModule gives 0\)"):
        glue("--model.init_args.pad_token_id", "5")
    with pytest.raises(ValueError, match=r"model.multi_label=True is set from the data \(GLUEDataModule gives "
                                         r"False\)"):
        glue("--model.init_args.multi_label", "true")
    assert glue("--model.init_args.num_labels", "2").model.hparams.num_labels == 2  # the data's own value


def test_litbert_sets_the_optimizer_in_one_place(glue):
    with pytest.raises(argparse.ArgumentError, match="--optimizer"):  # it would silently void model.optimization
        glue("--optimizer", "torch.optim.SGD")


def test_a_used_run_folder_is_never_silently_reused(glue, tmp_path):
    root = tmp_path / "used"
    (root / "checkpoints").mkdir(parents=True)
    (root / "checkpoints" / "best-10.ckpt").write_bytes(b"the earlier run's")
    (root / "metrics.json").write_text("{}\n")
    # Only a last.ckpt that exists is offered to resume from.
    with pytest.raises(RunFolderError, match=r"already holds a run .*\. It holds no checkpoints/last.ckpt to resume "
                                             r"from: choose another .* --overwrite true to replace it"):
        glue(root=root)
    (root / "checkpoints" / LAST).write_bytes(b"the earlier run's")
    with pytest.raises(RunFolderError, match=rf"Resume it with --ckpt_path {root / 'checkpoints' / LAST}, choose"):
        glue(root=root)
    (root / "lightning_logs" / "version_0").mkdir(parents=True)  # the earlier run's CSVLogger
    (root / "version_0").mkdir()  # and `--trainer.logger CSVLogger`'s, which has the W&B logger's name: none
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}\n")  # and its export, which a run that exports none replaces too
    glue("--overwrite", "true", "--export", "false", root=root)
    assert not (root / "metrics.json").exists() and not (root / "checkpoints").exists()
    assert not (root / "model").exists()  # left, the earlier run's model sat beside the new run's metrics.json
    # or the new run's logs go beside the old ones, as version_1
    assert not (root / "lightning_logs").exists() and not (root / "version_0").exists()
    with pytest.raises(ValueError, match="--ckpt_path resumes one in place"):
        glue("--overwrite", "true", "--ckpt_path", str(root / "last.ckpt"), root=root)
    with pytest.raises(ValueError, match="--export is false"):
        glue("--export", "false", "--export_dir", str(tmp_path / "elsewhere"), root=tmp_path / "fresh")


def test_an_export_format_the_model_cannot_take_is_refused_before_training(glue, tmp_path):
    """--export_format transformers for a model without a transformers equivalent (BERT with a mean-pooled
    classifier) stops the run before it trains, naming the setting and the family's value; a format the model can
    take is written as asked, litbert's even where transformers' would do."""
    from tasks.run.export import export

    cli = glue("--model.pooling", "mean", "--export_format", "transformers")
    with pytest.raises(ValueError, match=r"pooling='mean' \(the Bert classifier's is 'cls'\) \(the closest family is "
                                         r"Bert\)\. --export_format transformers cannot be honoured"):
        train.run(cli)
    assert cli.trainer.global_step == 0 and not (tmp_path / "run" / "checkpoints").exists()
    for format, written in (("litbert", "litbert.json"), ("transformers", "config.json")):
        cli = glue("--export_format", format)
        export(cli.trainer, cli.model, tmp_path / format, None, cli.config.export_format)
        assert [path.name for path in (tmp_path / format).glob("*.json")] == [written]
    with pytest.raises(ValueError, match="--export_format litbert says how to export, but --export is false"):
        glue("--export", "false", "--export_format", "litbert")


def test_an_export_in_litbert_format_says_why(glue, tmp_path, capsys):
    """The closing line and the model card say why an export is in litbert's format: the settings transformers'
    closest family has no equivalent of, or, for a model transformers holds too, that --export_format litbert asked
    for it (not that the configuration has no transformers equivalent, which would be untrue)."""
    args = ("--trainer.max_steps", "1", "--trainer.limit_val_batches", "1", "--predict", "false",
            "--data.batch_size", "4", "--overwrite", "true")
    for extra, reason in ((("--model.pooling", "mean"), "this configuration has no transformers equivalent: "
                                                         "pooling='mean' (the Bert classifier's is 'cls') (the "
                                                         "closest family is Bert)"),
                          (("--export_format", "litbert"), "--export_format litbert asked for it; transformers' Bert "
                                                           "classes hold this model too (--export_format auto)")):
        train.run(glue(*args, *extra))
        out = capsys.readouterr().out
        assert f"litbert: exported model   {tmp_path / 'run' / 'model'} (litbert format: {reason}; model card " \
               f"README.md)" in out
        card = (tmp_path / "run" / "model" / "README.md").read_text()
        assert f"| Format | litbert (`litbert.json`): {reason} |" in card


def test_a_refused_resume_leaves_the_finished_run_as_it_was(glue, assets, tmp_path):
    """A resume refused for a changed setting (the batch size, the optimizer, fewer steps than the checkpoint's)
    stops before it trains: the finished run's metrics.json, the mark that it finished, stays, and so does its
    config.yaml (not the refused settings). Both wait for the checkpoint to be loaded and checked."""
    args = ("--trainer.max_steps", "2", "--trainer.limit_val_batches", "1", "--export", "false", "--predict", "false")
    train.run(glue(*args))
    metrics, config = tmp_path / "run" / "metrics.json", tmp_path / "run" / "config.yaml"
    finished, settings = metrics.read_text(), config.read_text()
    # Another batch size alone changes what a step averages over; the message names a split that keeps it.
    with pytest.raises(ValueError, match=r"averaged each step over 1 process\(es\) x data.batch_size 32 x "
                                         r"trainer.accumulate_grad_batches 1; this run's is 1 process\(es\) x "
                                         r"data.batch_size 16 x trainer.accumulate_grad_batches 1: each step would "
                                         r"average over 16 examples instead of 32\. Resume with --data.batch_size 16 "
                                         r"--trainer.accumulate_grad_batches 2 so that the global batch stays 32"):
        train.run(glue(*args, "--trainer.max_steps", "3", "--data.batch_size", "16", "--ckpt_path", "last"))
    assert metrics.read_text() == finished
    with pytest.raises(ValueError, match="model.optimization.optimizer: 'adamw' in the checkpoint, 'adam' now"):
        train.run(glue(*args, "--model.optimization.optimizer", "adam", "--ckpt_path", "last"))
    assert metrics.read_text() == finished
    # Fewer steps than the checkpoint's would export its weights as a shorter run's.
    with pytest.raises(ValueError, match=r"trainer.max_steps=1, but the checkpoint to resume is at step 2: .* Resume "
                                         r"with --trainer.max_steps 2 or more"):
        train.run(glue(*args, "--trainer.max_steps", "1", "--ckpt_path", "last"))
    assert metrics.read_text() == finished and config.read_text() == settings
    # Another number of processes with the same per-process batch: each step would average over other examples (a
    # run of one process resumed on two went on with a warning about dropout alone). The message names the split of
    # the checkpoint's global batch over this run's processes.
    saved = torch.load(tmp_path / "run" / "checkpoints" / LAST, map_location="cpu", weights_only=True)
    assert saved["litbert_processes"] == 1
    torch.save(dict(saved, litbert_processes=2), tmp_path / "two.ckpt")  # as a run of trainer.devices 2 saves it
    with pytest.raises(ValueError, match=r"averaged each step over 2 process\(es\) x data.batch_size 32 x "
                                         r"trainer.accumulate_grad_batches 1; .* instead of 64\. Resume with "
                                         r"--data.batch_size 32 --trainer.accumulate_grad_batches 2 so that the global "
                                         r"batch stays 64, or start a new run from its weights \(--model.pretrained on "
                                         r"its export; an unfinished run is exported as it is by this command with "
                                         r"--trainer.max_steps 2, which trains no step\)"):
        train.run(glue(*args, "--trainer.max_steps", "3", "--ckpt_path", str(tmp_path / "two.ckpt")))
    # The same global batch, but batches grouped by length: each process sorts its own share, so the batches depend
    # on the split.
    data_state = saved["GLUEDataModule"]
    grouped = {**data_state, "training_settings": {**data_state["training_settings"], "group_by_length": "True"}}
    torch.save(dict(saved, litbert_processes=2, GLUEDataModule=grouped), tmp_path / "grouped.ckpt")
    with pytest.raises(ValueError, match=r"data.group_by_length sorts each process's share of the data by length, in "
                                         r"pools of its own batch size, so another split trains on other batches than "
                                         r"the run's\. Resume on 2 process\(es\) with --data.batch_size 32 "
                                         r"--trainer.accumulate_grad_batches 1, or start a new run"):
        train.run(glue(*args, "--trainer.max_steps", "3", "--data.group_by_length", "true",
                       "--trainer.accumulate_grad_batches", "2", "--ckpt_path", str(tmp_path / "grouped.ckpt")))
    assert metrics.read_text() == finished and config.read_text() == settings
    # A byte of a tensor changed (a bad copy, a failing disk): torch.load reads no checksum, and the run resumed with
    # the changed weight. The entry's CRC-32 no longer matches.
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes((tmp_path / "run" / "checkpoints" / LAST).read_bytes())
    with zipfile.ZipFile(corrupt) as archive:
        entry = max(archive.infolist(), key=lambda info: info.file_size)  # the word embeddings (stored, not deflated)
    with corrupt.open("r+b") as file:
        file.seek(entry.header_offset + 26)
        name, extra = struct.unpack("<HH", file.read(4))
        file.seek(entry.header_offset + 30 + name + extra + entry.file_size // 2)
        byte = file.read(1)[0]
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte ^ 0x40]))
    with pytest.raises(CheckpointError, match=rf"Checkpoint {corrupt} is corrupt \(Bad CRC-32 for file '.*'\): its "
                                              rf"bytes are not the ones it was saved with"):
        train.run(glue(*args, "--trainer.max_steps", "3", "--ckpt_path", str(corrupt)))
    assert metrics.read_text() == finished and config.read_text() == settings
    # Another kind of run: Lightning restores a datamodule's state only from its own class's entry, so a resume with
    # other data checked none of it and trained on (an RTE run went on as an IMDB one), and a task whose weights fit
    # went on as the other task. Refused before the data is read.
    sentiment = ["--config", "configs/sentiment/imdb.yaml", "--model.pretrained", assets["tiny"], "--data.dataset",
                 "null", "--data.train_files", assets["sentiment_a_train"], "--data.val_files",
                 assets["sentiment_a_val"], "--data.text_columns", '["review"]', "--data.label_column", "stars"]
    with pytest.raises(ValueError, match=r"saved by another kind of run: data.class_path: data.GLUEDataModule in the "
                                         r"checkpoint, data.ClassificationDataModule now\. A resume continues"):
        make_cli([*sentiment, "--trainer.default_root_dir", str(tmp_path / "run"), *args, "--ckpt_path", "last"])
    with pytest.raises(ValueError, match=r"model.class_path: tasks.classification.SequenceClassification in the "
                                         r"checkpoint, tasks.classification.TokenClassification now"):
        glue(*args, "--model.class_path", "tasks.classification.TokenClassification", "--ckpt_path", "last")
    assert metrics.read_text() == finished and config.read_text() == settings
    # The way on the process count's refusal names: at the checkpoint's step the resume trains no step, on any number
    # of processes, and evaluates (and would export) the weights as they are.
    metrics.unlink()
    resumed = glue(*args, "--ckpt_path", str(tmp_path / "two.ckpt"))
    train.run(resumed)
    assert resumed.trainer.global_step == 2
    assert json.loads(metrics.read_text()) == json.loads(finished)


@pytest.mark.slow  # four short RTE runs in this process: 30 s on 2 cores
def test_a_resume_to_fewer_epochs_than_its_checkpoint_began_is_refused(glue, tmp_path, capsys):
    """As a trainer.max_steps below the checkpoint's step is: a run stopped in its second epoch and resumed with
    trainer.max_epochs 1 trained no step, and evaluated and exported its weights as a one-epoch run's, with status 0.
    Refused, naming the epoch; the finished run it becomes, resumed again at its bound, trains no step and says so."""
    args = ("--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1", "--export", "false", "--predict",
            "false", "--trainer.max_epochs", "2")
    train.run(glue(*args, "--trainer.max_steps", "3"))  # two steps an epoch: stopped in the second
    metrics = tmp_path / "run" / "metrics.json"
    stopped = metrics.read_text()
    with pytest.raises(ValueError, match=r"trainer.max_epochs=1, but the checkpoint to resume \(step 3\) has begun "
                                         r"epoch 2: its weights were trained for more epochs than that\. Resume with "
                                         r"--trainer.max_epochs 2 or more"):
        train.run(glue(*args, "--trainer.max_epochs", "1", "--ckpt_path", "last"))
    assert metrics.read_text() == stopped
    for step in (4, 4):  # the second epoch's last step; then nothing left to train
        capsys.readouterr()
        cli = glue(*args, "--ckpt_path", "last")
        train.run(cli)
        assert cli.trainer.global_step == step
    assert ("litbert: the checkpoint to resume (step 4) has reached trainer.max_epochs=2: its training is done, so no "
            "step is trained" in capsys.readouterr().out)


def test_an_accepted_resume_records_itself_once(glue, tmp_path, capsys):
    """An accepted resume rewrites the run's config.yaml with its settings and removes the earlier end's metrics.json
    once, as its training starts, or as fit ends for a finished run, which trains no step; each end writes the
    metrics.json again. Its changed settings are named in one line, before training and not again when the best
    checkpoint is evaluated after it."""
    args = ("--trainer.limit_val_batches", "1", "--export", "false", "--predict", "false", "--ckpt_path", "last")
    train.run(glue(*args[:-2], "--trainer.max_steps", "2"))
    metrics, config = tmp_path / "run" / "metrics.json", tmp_path / "run" / "config.yaml"
    capsys.readouterr()
    for steps, rate in (("2", "1e-5"), ("3", "3e-5")):  # finished: no step to train; then one more step
        train.run(glue(*args, "--trainer.max_steps", steps, "--model.optimization.learning_rate", rate))
        out = capsys.readouterr().out
        assert out.count(f"removed {metrics} of the run's earlier end") == 1, out
        assert out.count("litbert: resuming with") == 1, out
        assert f"model.optimization.learning_rate={float(rate)}" in out
        saved = yaml.safe_load(config.read_text())["model"]["init_args"]["optimization"]["learning_rate"]
        assert saved == float(rate) and metrics.is_file()


class _FullDisk:
    """A tokenizer whose files cannot be written: the export fails after the weights, as a kill or a full disk
    would stop it."""

    def save_pretrained(self, directory: str) -> None:
        raise OSError(28, "No space left on device", directory)


def test_an_export_that_stops_half_way_leaves_no_half_written_model_folder(glue, tmp_path):
    """The export is written beside its folder and renamed into place once whole: stopped after the weights (a kill,
    a full disk), it leaves no model folder that holds weights without their tokenizer and card, and a resumed
    finished run's earlier export stays whole; what a run killed there left goes. The card names the export's place,
    not where it was written."""
    from tasks.run.export import export
    from tasks.run.folders import export_path
    from tasks.run.publish import write_card

    cli = glue()
    target = export_path(cli.config)
    with pytest.raises(OSError, match="No space left"):
        export(cli.trainer, cli.model, target, _FullDisk())
    assert not target.exists() and os.listdir(target.parent) == []
    killed = target.with_name(f".{target.name}.tmp-{2**22 + 1}")  # what a run killed in its export left (no such pid)
    killed.mkdir()
    export(cli.trainer, cli.model, target, cli.datamodule.tokenizer,
           card=lambda model, folder: write_card(folder, model, cli, {}, cli.trainer))
    earlier = {path.name: path.read_bytes() for path in target.iterdir()}
    assert {"model.safetensors", "tokenizer.json", "README.md"} <= set(earlier)
    assert f"from_pretrained({str(target)!r})" in earlier["README.md"].decode()
    with torch.no_grad():
        next(cli.model.parameters()).add_(1.0)  # the resumed run's weights, another export
    with pytest.raises(OSError, match="No space left"):
        export(cli.trainer, cli.model, target, _FullDisk())
    assert {path.name: path.read_bytes() for path in target.iterdir()} == earlier
    assert os.listdir(target.parent) == [target.name]
    export(cli.trainer, cli.model, target, cli.datamodule.tokenizer)
    assert (target / "model.safetensors").read_bytes() != earlier["model.safetensors"]
    assert "README.md" not in os.listdir(target)  # replaced whole, not written over the earlier files


def test_a_run_never_removes_or_writes_over_its_own_input(glue, tmp_path):
    """--overwrite removes the earlier run's files: where the checkpoint it fine-tunes (or its tokenizer) is the
    earlier run's export, the run is refused before anything is removed, as is an export into the input folder."""
    root = tmp_path / "earlier"
    shutil.copytree(glue().model.hparams.pretrained, root / "model")
    (root / "metrics.json").write_text("{}\n")
    for extra in ([], ["--overwrite", "true"]):
        with pytest.raises(RunFolderError, match=rf"model.pretrained={root / 'model'} lies in {root / 'model'}"
                                                       rf", which this run would"):
            glue("--model.pretrained", str(root / "model"), *extra, root=root)
    assert (root / "model" / "config.json").is_file() and (root / "metrics.json").is_file()
    with pytest.raises(RunFolderError, match=r"data.tokenizer=.* lies in .*--export_dir"):
        glue("--data.tokenizer", str(root / "model"), "--export_dir", str(root), "--overwrite", "true",
             root=tmp_path / "fresh")
    assert (root / "model" / "config.json").is_file()


def test_a_teacher_of_another_tokenizer_is_refused(glue, assets):
    """Logit distillation of RTE: the teacher (MiniLM's tokenizer) reads the student's ids, so a student tokenized
    with another vocabulary is refused, naming both; with the teacher's tokenizer the run is built."""
    kd = ("--config", "configs/distill/kd.yaml", "--model.teacher", assets["classifier"])
    assert glue(*kd).model.teacher is not None
    with pytest.raises(DataError, match=rf"model.teacher={assets['classifier']} was trained with another "
                                              rf"tokenizer than data.tokenizer={assets['tokenizer_b']} \(their "
                                              rf".*vocabulary.* differ\)"):
        glue(*kd, "--data.tokenizer", assets["tokenizer_b"])


def test_a_pretrained_model_of_another_tokenizer_is_refused(glue, assets, tmp_path):
    """A checkpoint reads the ids of the tokenizer it was trained with. Another tokenizer (here 1,500 tokens under
    the checkpoint's 30,522: every id fits its embedding table, so nothing else stops the run), or one the run
    would train, is refused before any data is read, for fine-tuning and for continued pretraining alike; the
    checkpoint's tokenizer saved in another folder is its own."""
    with pytest.raises(DataError, match=rf"model.pretrained={assets['tiny']} was trained with another tokenizer "
                                        rf"than data.tokenizer={assets['tokenizer_b']} \(their .*vocabulary.* differ\)"
                                        rf".*--data.tokenizer null"):
        glue("--data.tokenizer", assets["tokenizer_b"])
    assert glue("--data.tokenizer", assets["tiny_b"]).datamodule.vocab_size == 30522
    pretraining = ["--config", "configs/quickstart.yaml", "--model.encoder", "null", "--model.pretrained",
                   assets["tiny"], "--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path / "mlm")]
    with pytest.raises(DataError, match=rf"model.pretrained={assets['tiny']} was trained with another tokenizer"):
        make_cli([*pretraining, "--data.tokenizer", assets["wordpiece"], "--data.train_tokenizer", "null"])
    with pytest.raises(DataError, match=rf"data.train_tokenizer trains a new tokenizer into data.tokenizer="
                                        rf"{tmp_path / 'new'}, but model.pretrained={assets['tiny']} reads the ids"):
        make_cli([*pretraining, "--data.tokenizer", str(tmp_path / "new")])
    assert not (tmp_path / "new").exists()


def test_a_teacher_that_cannot_read_the_blocks_is_refused_before_training(assets, tmp_path, monkeypatch):
    """A student with rotary positions takes 1,024-token blocks; its teacher (learned positions, 512) cannot. The run
    stops before it reads any data, naming model.teacher and the length, not in the teacher's position table
    mid-step."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    text = tmp_path / "train.txt"
    text.write_text("the film was long and the ending strange " * 200 + "\n")  # 1,600 words: full blocks
    with pytest.raises(DataError, match=rf"^The teacher, model.teacher={assets['tiny']}, cannot read this data: "
                                        rf"max_length=1024 is longer than the model's position scheme allows \(512 "):
        train.main(["--config", "configs/distill/distilbert.yaml", "--model.teacher", assets["tiny"],
                    "--model.student.position", "rope", "--model.student.num_layers", "1", "--data.dataset", "null",
                    "--data.train_files", str(text), "--data.val_files", "null", "--data.max_length", "1024",
                    "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.logger", "false",
                    "--data.cache_dir", str(tmp_path / "cache"), "--data.num_workers", "0",
                    "--trainer.max_steps", "1"])
    assert not (tmp_path / "cache").exists()


def test_a_teacher_of_a_smaller_vocabulary_than_the_tokenizer_is_named_before_its_student(assets, tmp_path,
                                                                                          monkeypatch):
    """A teacher saved without its tokenizer (so the run cannot compare it with data.tokenizer) of 1,000 tokens, and
    MiniLM's tokenizer of 30,522: the student, over the teacher's vocabulary, is as small. The error names the teacher
    and the tokenizer to give it, not the student's vocab_size (which a distillation refuses to change)."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    config = EncoderConfig.from_name("bert-tiny", num_layers=2, vocab_size=1000)
    encoder = Encoder(config)
    encoder.save_pretrained(tmp_path / "teacher", head=MaskedLMHead(config, encoder.embeddings.word))
    text = tmp_path / "train.txt"
    text.write_text("the film was long and the ending strange\n" * 50)
    with pytest.raises(DataError) as refused:
        train.main(["--config", "configs/distill/distilbert.yaml", "--model.teacher", str(tmp_path / "teacher"),
                    "--data.tokenizer", MINILM, "--data.dataset", "null", "--data.train_files", str(text),
                    "--data.val_files", "null", "--data.max_length", "64", "--data.num_workers", "0",
                    "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.logger", "false",
                    "--data.cache_dir", str(tmp_path / "cache"), "--trainer.max_steps", "1"])
    assert str(refused.value).startswith(
        f"The teacher, model.teacher={tmp_path / 'teacher'}, cannot read this data: data.tokenizer={MINILM} has 30522 "
        f"tokens, more than the teacher's vocabulary of 1000")
    assert "Set vocab_size" not in str(refused.value)
    assert not (tmp_path / "cache").exists()


def signalled_run(assets: dict[str, str], root: Path, when: str, signum: int, *extra: str,
                  config: tuple[str, ...] = ("--config", "configs/glue/rte.yaml", "--model.pretrained"),
                  times: int = 1) -> tuple[int, list[str]]:
    """A short run (bert-tiny, two training batches) through `train.cli_main` that `signalling.SignalAt` sends
    `signum` at `when`; its exit status, and its arguments but the callback's. A SIGTERM that
    the run leaves to the process's default, or a Ctrl+C that leaves it as a KeyboardInterrupt, fails the test
    instead of ending pytest."""
    def unhandled(signum: int, frame: Any) -> None:
        raise AssertionError(f"{signal.Signals(signum).name} reached the default handler: the run did not catch it")

    callback = root.parent / f"{root.name}-signal.yaml"
    callback.write_text(f"trainer:\n  callbacks:\n    - class_path: signalling.SignalAt\n"
                        f"      init_args: {{when: {when}, signum: {int(signum)}, times: {times}}}\n")
    args = [*config, assets["tiny"], "--trainer.logger", "false", "--trainer.default_root_dir", str(root),
            "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "2",
            "--trainer.limit_test_batches", "2", "--trainer.enable_progress_bar", "false", *extra]
    before = signal.signal(signal.SIGTERM, unhandled)
    try:
        status = train.cli_main([*args, "--config", str(callback)])
        assert signal.getsignal(signal.SIGTERM) == unhandled  # the run's handlers are gone with it
    except KeyboardInterrupt:
        pytest.fail("Ctrl+C left train.py as a KeyboardInterrupt (a traceback), not an exit status")
    finally:
        signal.signal(signal.SIGTERM, before)
    return status, args


@pytest.fixture
def signal_env(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize(("when", "signum"), [
    ("sanity_start", signal.SIGINT), ("sanity_batch", signal.SIGTERM), ("tokenising", signal.SIGINT),
    ("building", signal.SIGINT), pytest.param("setup", signal.SIGTERM, marks=pytest.mark.slow)])
def test_a_signal_before_training_stops_the_run_with_its_status(when, signum, assets, signal_env, tmp_path,
                                                                 monkeypatch, capsys):
    """Ctrl+C or SIGTERM before the first training step: while the run is built (the datamodule loads its tokenizer),
    while the datamodule tokenises, once the run is set up, or in Lightning's sanity check (where Lightning ends
    Ctrl+C with status 1; elsewhere Python prints a traceback, and SIGTERM ends the process without a word). The run
    stops at once with 128 + the signal, says so and prints the command that starts it again (which runs: checked
    once, as it trains); nothing was saved and no metrics.json written."""
    if when in ("building", "tokenising"):  # the moment is inside litbert's own code: send the signal from there
        module, name = (data_base, "load_tokenizer") if when == "building" else (ClassificationDataModule, "_build")
        original = getattr(module, name)

        def signalling(*args: Any, **kwargs: Any) -> Any:
            os.kill(os.getpid(), signum)
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, signalling)
    root = tmp_path / "run"
    status, args = signalled_run(assets, root, when, signum)
    err = capsys.readouterr().err
    assert status == 128 + signum, err[-3000:]
    name = signal.Signals(signum).name
    assert f"litbert: stopped by {name} before training began" in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("litbert: start it again with: python train.py --config "
                                                   "configs/glue/rte.yaml")
    assert err.strip().endswith("--ckpt_path last")
    assert not (root / "metrics.json").exists() and not (root / "model").exists()
    assert list(root.rglob("*.ckpt")) == []
    if when != "setup":
        return
    # The command it printed, without the signalling callback, finishes the run.
    assert train.cli_main([*args, "--ckpt_path", "last"]) == 0, capsys.readouterr().err[-3000:]
    assert (root / "metrics.json").is_file() and (root / "model").is_dir()


@pytest.mark.parametrize(("when", "signum"), [
    ("epoch_end", signal.SIGTERM), ("last_eval_batch", signal.SIGTERM), ("last_predict_batch", signal.SIGTERM),
    pytest.param("test_batch", signal.SIGINT, marks=pytest.mark.slow),
    pytest.param("export", signal.SIGINT, marks=pytest.mark.slow)])
def test_a_signal_after_the_last_step_never_ends_as_a_success(when, signum, assets, signal_env, tmp_path,
                                                              monkeypatch, capsys):
    """SIGTERM while the last checkpoint is saved, or at the last batch of the final validation (where Lightning
    itself does not act on it), stops the run with 143 before metrics.json and the export are written; at the last
    batch of the test predictions (trainer.predict), after them, with no submission file. Ctrl+C in the test after
    training (token classification: CoNLL has labelled test sets), or while the model is exported, stops it with 130
    before metrics.json is written and the export is put in place (a whole export of a stopped run was left in the
    run folder, as if it had finished)."""
    extra, config = ["--predict", str(when == "last_predict_batch").lower()], ("--config", "configs/glue/rte.yaml",
                                                                             "--model.pretrained")
    if when == "test_batch":
        config = ("--config", "configs/ner/conll2003.yaml", "--data.dataset", "null", "--data.train_files",
                  assets["conll_a_train"], "--data.val_files", assets["conll_a_valid"], "--data.test_files",
                  assets["conll_a_test"], "--model.pretrained")
    if when == "export":
        original = train.export

        def signalling(*args: Any, **kwargs: Any) -> Any:
            os.kill(os.getpid(), signum)
            return original(*args, **kwargs)

        monkeypatch.setattr(train, "export", signalling)
    root = tmp_path / "run"
    status, _ = signalled_run(assets, root, when, signum, *extra, config=config)
    err = capsys.readouterr().err
    name = signal.Signals(signum).name
    assert status == 128 + signum, err[-3000:]
    assert (f"stopped by {name} at step 2; the training state was saved to" if when == "epoch_end"
            else f"stopped by {name} after training, in the evaluation, export or test predictions") in err
    if when == "last_predict_batch":
        assert (root / "metrics.json").is_file() and (root / "model").is_dir() and not (root / "submission").exists()
    else:
        assert not (root / "metrics.json").exists() and not (root / "model").exists()
        assert [path.name for path in root.glob(".model*")] == []  # nor a part of one
    assert (root / "checkpoints" / "last.ckpt").is_file()


def test_a_signal_after_training_without_checkpointing_says_the_run_must_start_again(assets, signal_env, tmp_path,
                                                                                      capsys):
    """With trainer.enable_checkpointing false no checkpoint holds the final training state: a SIGTERM in the final
    validation stops the run with 143 and says it must run again, not to resume with --ckpt_path last (which would
    find nothing and train from the start)."""
    root = tmp_path / "run"
    status, _ = signalled_run(assets, root, "last_eval_batch", signal.SIGTERM, "--trainer.enable_checkpointing",
                              "false")
    err = capsys.readouterr().err
    assert status == 143, err[-3000:]
    assert err.strip().splitlines()[-1].endswith(
        "No checkpoint holds its final training state (trainer.enable_checkpointing is false): run it again to "
        "evaluate, export and predict.")
    assert "--ckpt_path last" not in err.strip().splitlines()[-1]
    assert list(root.rglob("*.ckpt")) == [] and not (root / "metrics.json").exists()


def test_a_signal_while_rank_0_writes_the_last_results_stops_it_at_once(assets, signal_env, tmp_path, monkeypatch,
                                                                       capsys):
    """SIGTERM as the submission files are written, after the last point where the ranks stop together: the run
    stops there with 143 and says what is written and what is not. It once printed that the run would stop before
    writing its results, wrote them all and exited 0."""
    original = ClassificationDataModule.write_submission

    def signalling(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)

    monkeypatch.setattr(ClassificationDataModule, "write_submission", signalling)
    root = tmp_path / "run"
    status, _ = signalled_run(assets, root, "never", signal.SIGTERM)
    err = capsys.readouterr().err
    assert status == 143, err[-3000:]
    assert err.strip().splitlines()[-1] == (
        f"litbert: stopped by SIGTERM as the run finished: its metrics.json and export are written, but not every "
        f"submission file, the upload to the Hub or the summary. It has its final training state in "
        f"{root / 'checkpoints' / LAST}: resume with --ckpt_path last to write them (it trains no step).")
    assert (root / "metrics.json").is_file() and (root / "model").is_dir() and not (root / "submission").exists()


@pytest.mark.slow  # trains two steps: 10 s on 2 cores
def test_a_second_ctrl_c_stops_training_at_once_with_status_130(assets, signal_env, tmp_path, capsys):
    """Ctrl+C twice during training stops at once, without saving the step (not Lightning's exit status 1 for the
    KeyboardInterrupt it raised before), naming the newest checkpoint and the command that resumes from it."""
    root = tmp_path / "run"
    status, _ = signalled_run(assets, root, "second_batch", signal.SIGINT, "--checkpoint.every_n_steps", "1",
                              times=2)
    err = capsys.readouterr().err
    last = root / "checkpoints" / LAST
    assert status == 130, err[-3000:]
    assert (f"litbert: stopped at once by a second SIGINT at step 2, without saving; the newest training state is "
            f"{last} (step 1)") in err
    assert err.strip().endswith(f"--ckpt_path {last}") and "Traceback" not in err
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 1
    assert not (root / "metrics.json").exists() and not (root / "model").exists()


@pytest.mark.slow  # two runs of two steps: 15 s on 2 cores
def test_a_run_stopped_by_a_signal_and_resumed_logs_every_step_once(assets, signal_env, tmp_path):
    """SIGTERM after the second of four steps, no validation due: the run logs the step it stops at before it stops
    (Lightning logs a step once the callbacks' on_train_batch_end has returned, and the run stops in one), and the
    resumed run the steps after it. The step's loss was in neither, as if it had never been trained."""
    root = tmp_path / "run"
    logged = ("--trainer.logger", "CSVLogger", "--trainer.log_every_n_steps", "1", "--trainer.limit_train_batches",
              "4")
    status, args = signalled_run(assets, root, "second_batch", signal.SIGTERM, *logged)
    assert status == 143
    assert torch.load(root / "checkpoints" / LAST, map_location="cpu", weights_only=True)["global_step"] == 2
    assert train.cli_main([*args, "--ckpt_path", "last"]) == 0
    rows = [row for path in sorted(root.rglob("version_*/metrics.csv")) for row in csv.DictReader(path.open())]
    assert [int(row["step"]) for row in rows if row["train/loss"]] == [0, 1, 2, 3]


def test_a_negative_number_in_scientific_notation_is_a_value_on_the_command_line(assets, signal_env, tmp_path,
                                                                                 capsys):
    """`--model.optimization.learning_rate -1e-3` as two arguments: argparse before Python 3.13 read `-1e-3` as an
    option and failed with "argument --model: expected one argument". The value arrives, and the arguments after
    it too; a negative learning rate or weight decay is then refused naming the setting, as with `=-1e-3`."""
    run = ["--config", "configs/glue/rte.yaml", "--model.pretrained", assets["tiny"], "--trainer.logger", "false",
           "--trainer.default_root_dir", str(tmp_path / "run")]
    with pytest.raises(SystemExit) as printed:
        train.cli_main([*run, "--model.optimization.weight_decay", "-1e-3", "--model.optimization.warmup", "-2.5E-1",
                        "--model.optimization.eps", "-.5", "--trainer.max_steps", "7", "--print_config"])
    assert printed.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    optimization = config["model"]["init_args"]["optimization"]
    assert (optimization["weight_decay"], optimization["warmup"], optimization["eps"]) == (-0.001, -0.25, -0.5)
    assert config["trainer"]["max_steps"] == 7
    for setting, message in (("learning_rate", "learning_rate=-0.001 must be > 0."),
                             ("weight_decay", "weight_decay=-0.001 must be >= 0.")):
        assert train.cli_main([*run, f"--model.optimization.{setting}", "-1e-3"]) == 2
        assert capsys.readouterr().err.strip().endswith(f"model.optimization.{message}")


def test_a_relaunch_with_ckpt_path_last_of_a_run_that_saved_nothing_starts_afresh(glue, tmp_path, capsys):
    """A requeued job (`--ckpt_path last`) whose first attempt died before its first checkpoint finds only its
    config.yaml: it starts afresh; a folder with results is still refused."""
    root = tmp_path / "early"
    root.mkdir()
    (root / "config.yaml").write_text("# the first attempt's\n")
    (root / "checkpoints").mkdir()
    glue("--ckpt_path", "last", root=root)
    assert not (root / "config.yaml").exists()
    assert "stopped before its first checkpoint; starting afresh" in capsys.readouterr().out
    (root / "config.yaml").write_text("# the first attempt's\n")
    (root / "metrics.json").write_text("{}\n")
    with pytest.raises(RunFolderError, match="already holds a run"):
        glue("--ckpt_path", "last", root=root)


def test_metrics_json_holds_null_for_an_undefined_metric():
    assert finite_or_none({"val/pearson": float("nan"), "val/loss": 0.5}) == {"val/pearson": None,
                                                                                      "val/loss": 0.5}


def test_the_best_checkpoint_never_takes_a_non_finite_value():
    best = BestCheckpoint("val/pearson", "max")
    trainer = type("Trainer", (), {"global_step": 5})()
    assert not best.check_monitor_top_k(trainer, torch.tensor(float("nan")))
    assert not best.check_monitor_top_k(trainer, torch.tensor(float("inf")))
