"""`train.py` end to end on the real data in $LITBERT_DATA: every shipped config instantiates, each task trains a
few steps with its loss falling, the runs write checkpoints, exports, `metrics.json` and an offline W&B run whose
logged metrics are read back, resuming continues at the same step, and 2-process DDP matches 1 process."""

from __future__ import annotations

import csv
import dataclasses
import importlib
import inspect
import json
import math
import os
import subprocess
import sys
import typing
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from runs import REPO, series, wandb_history

import train
from encoders import Encoder, MaskedLMHead, SequenceClassificationHead
from tasks.base import EncoderSpec, validation_prefixes
from tasks.classification import SequenceClassification
from tasks.run.cli import LitbertCLI, make_cli
from tasks.run.configs import read_config, with_bases
from tasks.run.errors import lightning_refusal
from tasks.run.tracking import run_name

# The runnable configs. A file other configs extend (`base:`) is the part they share (glue/base.yaml, distill/kd.yaml,
# a layer over any classification config), built through them.
LAYERS = {"configs/glue/base.yaml", "configs/distill/kd.yaml"}
CONFIGS = sorted(str(p.relative_to(REPO)) for p in (REPO / "configs").rglob("*.yaml")
                 if str(p.relative_to(REPO)) not in LAYERS)


@pytest.fixture(scope="module")
def env(shared_data, tmp_path_factory):
    """Offline W&B and a private tokenization cache for the runs of this module."""
    saved = dict(os.environ)
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", LITBERT_DATA=str(shared_data),
                      LITBERT_CACHE=str(tmp_path_factory.mktemp("cache")))
    yield
    os.environ.clear()
    os.environ.update(saved)


def run(config: str, root: Path, *overrides: str) -> LitbertCLI:
    return train.main(["--config", config, "--trainer.default_root_dir", str(root),
                       "--trainer.enable_progress_bar", "false", *overrides])


def assert_falls(values: list[float], by: float) -> None:
    assert len(values) >= 6, values
    first, last = sum(values[:3]) / 3, sum(values[-3:]) / 3
    assert last < first - by, f"loss did not fall by {by}: {values}"


@pytest.mark.parametrize("config", CONFIGS)
def test_every_shipped_config_instantiates(config, env, minilm, tmp_path):
    """Each config parses and builds its task, datamodule and trainer; data-derived values arrive by link."""
    overrides = ["--trainer.default_root_dir", str(tmp_path)]
    if config == "configs/quickstart.yaml" or "pretrain/" in config:  # do not train a tokenizer to instantiate
        overrides += ["--data.tokenizer", minilm, "--data.train_tokenizer", "null"]
    elif config in ("configs/distill/sst2.yaml", "configs/distill/mrpc.yaml"):  # a fine-tuned classifier is the
        # teacher and the student's source
        teacher = tmp_path / "teacher"
        encoder = Encoder.from_pretrained(minilm)
        encoder.save_pretrained(teacher, head=SequenceClassificationHead(encoder.config.hidden_size, 2))
        overrides += ["--model.teacher", str(teacher), "--model.pretrained", str(teacher), "--data.tokenizer", minilm]
    elif "distill/" in config:
        teacher = tmp_path / "teacher"
        encoder = Encoder.from_pretrained(minilm)  # MiniLM with a new MLM head: a teacher needs one
        encoder.save_pretrained(teacher, head=MaskedLMHead(encoder.config, encoder.embeddings.word))
        overrides += ["--model.teacher", str(teacher), "--data.tokenizer", minilm]
    else:
        overrides += ["--model.pretrained", minilm]
    cli = make_cli(["--config", config, *overrides])
    model, data = cli.model, cli.datamodule
    assert cli.trainer.default_root_dir == str(tmp_path)
    assert model.encoder.config.vocab_size >= data.vocab_size
    if hasattr(data, "num_labels") and hasattr(model, "regression"):
        assert model.hparams.num_labels == data.num_labels
        assert model.label_names == data.label_names
        assert model.multi_label == data.multi_label  # linked: the task learns its problem type from the data
    # A logger logs the task's and the datamodule's settings as one table, and Lightning refuses the run (as it
    # starts) where both hold a key with two values or types: a linked setting must be logged by one of them.
    ours, theirs = model.hparams_initial, data.hparams_initial
    clashes = {key: (ours[key], theirs[key]) for key in (set(ours) & set(theirs)) - {"_class_path"}
               if type(ours[key]) is not type(theirs[key]) or ours[key] != theirs[key]}
    assert not clashes
    if hasattr(data, "metric_names"):
        assert list(model.hparams.metrics) == data.metric_names
        expected = ["val", "val_mismatched"] if data.spec.name == "mnli" else ["val"]
        assert model.validation_names == expected
    if config in ("configs/distill/sst2.yaml", "configs/distill/mrpc.yaml"):  # kd.yaml over the task's GLUE recipe:
        # its own learning rate, the recipe's warmup and epochs
        assert model.encoder.config.num_layers == 3 and model.teacher.encoder.config.num_layers == 6
        assert (model.optimization.learning_rate, model.optimization.warmup) == (5e-5, 0.1)
        assert (model.temperature, model.alpha_kd) == (2.0, 0.5)
        assert (data.spec.name, cli.trainer.max_epochs) == (("sst2", 3) if "sst2" in config else ("mrpc", 5))
    if hasattr(model, "label_names") and not hasattr(model, "regression"):  # token classification
        assert model.label_names == data.label_names and len(model.label_names) == 9


def test_the_readme_jobs_modernbert_variant_asks_for_transformers_format(env, minilm, tmp_path):
    """configs/pretrain/quickstart-modernbert.yaml asks for transformers' format, which its model (ModernBERT's block
    and MLM head) takes; the README job's own block is refused it before training, each setting named."""
    from encoders.checkpoints import export_layout

    args = ["--data.tokenizer", minilm, "--data.train_tokenizer", "null", "--trainer.logger", "false"]
    cli = make_cli(["--config", "configs/pretrain/quickstart-modernbert.yaml", *args,
                    "--trainer.default_root_dir", str(tmp_path / "modernbert")])
    assert cli.config.export_format == "transformers"
    assert export_layout(cli.model.encoder, cli.model.head).class_prefix == "ModernBert"
    cli = make_cli(["--config", "configs/quickstart.yaml", *args, "--export_format", "transformers",
                    "--trainer.default_root_dir", str(tmp_path / "quickstart")])
    with pytest.raises(ValueError, match=r"norm='rmsnorm' \(ModernBert has 'layernorm'\); type_vocab_size=2 \("
                                         r"ModernBert has 0\); first_attention_norm=True \(ModernBert has False\)"):
        train.run(cli)
    assert cli.trainer.global_step == 0


def test_a_new_encoder_pads_with_the_tokenizers_padding_row(env, shared_data, tmp_path):
    """configs/pretrain/modern.yaml trains byte-level BPE (<s> 0, <pad> 1) for the `modern` preset (pad_token_id 0):
    the new encoder takes the tokenizer's padding id, so that the row left at zero and never trained is <pad>'s,
    not <s>'s; a different explicit id is refused. The same for a distillation student named by preset."""
    from data.tokenizers import save_tokenizer, train_tokenizer

    lines = [line for line in (shared_data / "wikitext-2" / "wiki.valid.tokens").read_text().splitlines() if line]
    bpe = save_tokenizer(train_tokenizer(lines[:2000], "byte_level_bpe", vocab_size=600), tmp_path / "bpe")
    args = ["--config", "configs/pretrain/modern.yaml", "--data.tokenizer", str(bpe), "--data.train_tokenizer",
            "null", "--trainer.default_root_dir", str(tmp_path / "run")]
    cli = make_cli(args)
    assert cli.datamodule.pad_token_id == 1
    word = cli.model.encoder.embeddings.word
    assert (cli.model.encoder.config.pad_token_id, word.padding_idx) == (1, 1)
    assert not word.weight[1].any() and word.weight[0].any()
    with pytest.raises(ValueError, match="pad_token_id=0, but the tokenizer pads with id 1"):
        make_cli([*args, "--model.encoder.pad_token_id", "0"])


def test_glue_configs_share_one_recipe(env, minilm, tmp_path):
    """The nine GLUE configs extend configs/glue/base.yaml and hold only their task, folder, run name and (MRPC,
    WNLI) epochs: a change of recipe in the base reaches every task, and a later --config or flag still wins."""
    base = REPO / "configs" / "glue" / "base.yaml"
    edited = tmp_path / "glue"
    edited.mkdir()
    (edited / "base.yaml").write_text(base.read_text().replace("learning_rate: 2.0e-5", "learning_rate: 7.0e-5"))
    for config in sorted((REPO / "configs" / "glue").glob("*.yaml")):
        if config.name == "base.yaml":
            continue
        text = config.read_text()
        assert "base: base.yaml" in text and "learning_rate" not in text and "batch_size" not in text, config
        (edited / config.name).write_text(text)
        cli = make_cli(["--config", str(edited / config.name), "--model.pretrained", minilm,
                              "--trainer.default_root_dir", str(tmp_path / config.stem)])
        assert cli.model.optimization.learning_rate == 7e-5 and cli.trainer.gradient_clip_val == 1.0
        assert cli.datamodule.spec.name == config.stem and cli.datamodule.group_by_length is False
        assert cli.trainer.max_epochs == (5 if config.stem in ("mrpc", "wnli") else 3)
    cli = make_cli(["--config", "configs/glue/rte.yaml", "--model.pretrained", minilm, "--trainer.max_epochs",
                          "2", "--trainer.default_root_dir", str(tmp_path / "flag")])
    assert cli.trainer.max_epochs == 2 and cli.model.optimization.learning_rate == 2e-5


def test_the_run_seed_draws_the_training_order_unless_data_seed_is_set(env, minilm, tmp_path):
    """As the `Trainer`'s `seed`, `seed_everything` seeds the order of the batches too (data.seed unset), so the
    seeds of a sweep differ in their batches as well as in their initialisation and dropout; an explicit data.seed
    wins, and `seed_everything: false` leaves the order at seed 0. The seed travels in the datamodule's checkpoint
    state, and a checkpoint drawn from another one is refused by name."""
    from data.sources import DataError

    def build(*extra: str) -> LitbertCLI:
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        return make_cli(["--config", "configs/glue/rte.yaml", "--model.pretrained", minilm,
                               "--trainer.logger", "false", "--trainer.default_root_dir", str(root), *extra])

    def first_batch(cli: LitbertCLI) -> list[int]:
        data = cli.datamodule
        data.setup("fit")
        batches = data.train_dataloader().batch_sampler
        batches.sampler.set_epoch(0)
        return next(iter(batches))

    shipped, one, two = build(), build("--seed_everything", "1"), build("--seed_everything", "2")
    assert [cli.datamodule.seed for cli in (shipped, one, two)] == [0, 1, 2]  # base.yaml: seed_everything 0
    orders = [first_batch(cli) for cli in (shipped, one, two)]
    assert len({tuple(order) for order in orders}) == 3 and all(len(order) == 32 for order in orders)
    assert first_batch(build("--seed_everything", "1", "--data.seed", "7")) == first_batch(build("--data.seed", "7"))
    assert build("--seed_everything", "1", "--data.seed", "7").datamodule.seed == 7
    assert build("--seed_everything", "false").datamodule.seed == 0
    state = two.datamodule.state_dict()
    assert state["seed"] == 2 and state["label_names"] == list(two.datamodule.label_names)
    one.datamodule.load_state_dict(dict(state, seed=1))  # the same seed: resumes
    with pytest.raises(DataError, match=r"data.seed=2; this run's is 1 .* --data.seed 2"):
        one.datamodule.load_state_dict(state)


def _signature_defaults(function) -> dict:
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _settings_class(function, name: str) -> type | None:
    """The dataclass a parameter of `function` takes (`Optimization | None` gives Optimization), or None."""
    hint = typing.get_type_hints(function).get(name)
    return next((t for t in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(t)), None)


def _restated(values: dict, defaults: dict, where: str, function=None) -> list[str]:
    """Settings of `values` equal to their default (nested settings objects, such as `optimization` or
    `train_tokenizer`, are compared field by field with their dataclass's defaults)."""
    found = []
    for name, value in (values or {}).items():
        if name not in defaults:
            continue
        default = defaults[name]
        if isinstance(value, dict):
            settings = _settings_class(function, name) if function is not None else None
            fields = default if isinstance(default, dict) else (
                {f.name: f.default for f in dataclasses.fields(settings)} if settings is not None else {})
            found += _restated(value, fields, f"{where}.{name}")
        elif value == default or (isinstance(default, tuple) and list(default) == value):
            found.append(f"{where}.{name}: {value!r}")
    return found


def _merged(first: dict, second: dict) -> dict:
    """`second` over `first`, key by key, as jsonargparse composes two config files."""
    out = dict(first)
    for key, value in second.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@pytest.mark.parametrize("config", sorted(str(p.relative_to(REPO)) for p in (REPO / "configs").rglob("*.yaml")))
def test_shipped_configs_restate_no_defaults(config):
    """A config holds only what its recipe changes: no value equal to the constructor's default or to its base's."""
    text = yaml.safe_load((REPO / config).read_text())
    found = _restated(text.get("trainer"), _signature_defaults(L.Trainer.__init__), "trainer")
    for section in ("model", "data"):
        part = text.get(section) or {}
        if "class_path" in part:
            module, name = part["class_path"].rsplit(".", 1)
            cls = getattr(importlib.import_module(module), name)
            found += _restated(part.get("init_args"), _signature_defaults(cls.__init__), section, cls.__init__)
    if "base" in text:
        base: dict = {}
        for path in base_files(REPO / config):
            base = _merged(base, yaml.safe_load(path.read_text()))
        for section in ("trainer", "model", "data"):
            found += _restated(text.get(section), base.get(section) or {}, f"{section} (as in the base)")
    assert not found, f"{config} restates defaults: {found}"


# The fine-tuning configs of BERT's recipe (GLUE, sentiment, NER), which users compare with transformers' `Trainer`.
BERT_RECIPE_FINE_TUNES = sorted([*(f"configs/glue/{p.name}" for p in (REPO / "configs" / "glue").glob("*.yaml")
                                   if p.name != "base.yaml"), "configs/sentiment/imdb.yaml",
                                 "configs/ner/conll2003.yaml"])


@pytest.mark.parametrize("config", BERT_RECIPE_FINE_TUNES)
def test_fine_tunes_of_berts_recipe_clip_gradients_as_the_trainer_does(config):
    """BERT's recipe clips the gradient norm at 1.0, and so does transformers' `Trainer` unless told otherwise
    (`max_grad_norm`); Lightning does not clip unless told (`gradient_clip_val`). Each fine-tuning config sets it,
    so that the same hyper-parameters given to both train alike."""
    settings: dict = {}
    for path in [*base_files(REPO / config), REPO / config]:
        settings = _merged(settings, yaml.safe_load(path.read_text()))
    assert settings["trainer"].get("gradient_clip_val") == 1.0, config


def base_files(config: Path) -> list[Path]:
    """The files a config extends (`base:`), in the order they apply."""
    bases = yaml.safe_load(config.read_text()).get("base") or []
    return [config.parent / name for name in ([bases] if isinstance(bases, str) else bases)]


def test_config_bases_expand_before_the_file_and_are_checked(tmp_path):
    (tmp_path / "a.yaml").write_text("trainer:\n  max_epochs: 1\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\ntrainer:\n  max_steps: 3\n")
    (tmp_path / "c.yaml").write_text("base: b.yaml\n")
    assert with_bases(["--config", str(tmp_path / "c.yaml"), "--x", "1"]) == [
        "--config", str(tmp_path / "a.yaml"), "--config", str(tmp_path / "b.yaml"), "--config",
        str(tmp_path / "c.yaml"), "--x", "1"]
    assert with_bases([f"--config={tmp_path / 'b.yaml'}"]) == [f"--config={tmp_path / 'a.yaml'}",
                                                                     f"--config={tmp_path / 'b.yaml'}"]
    # a list of bases applies in order, each after its own bases
    (tmp_path / "d.yaml").write_text("trainer:\n  max_steps: 4\n")
    (tmp_path / "e.yaml").write_text("base: [b.yaml, d.yaml]\n")
    assert with_bases(["--config", str(tmp_path / "e.yaml")]) == [
        "--config", str(tmp_path / "a.yaml"), "--config", str(tmp_path / "b.yaml"), "--config",
        str(tmp_path / "d.yaml"), "--config", str(tmp_path / "e.yaml")]
    (tmp_path / "loop.yaml").write_text("base: loop.yaml\n")
    with pytest.raises(ValueError, match="base: loop.yaml extends itself"):
        with_bases(["--config", str(tmp_path / "loop.yaml")])
    (tmp_path / "lost.yaml").write_text("base: nowhere.yaml\n")
    with pytest.raises(ValueError, match="base: nowhere.yaml does not exist"):
        with_bases(["--config", str(tmp_path / "lost.yaml")])
    (tmp_path / "lost2.yaml").write_text("base: [a.yaml, nowhere.yaml]\n")
    with pytest.raises(ValueError, match="lost2.yaml: base: nowhere.yaml does not exist"):
        with_bases(["--config", str(tmp_path / "lost2.yaml")])
    with pytest.raises(ValueError, match="--base is read inside a config file"):
        with_bases(["--base", str(tmp_path / "a.yaml")])


def test_the_printed_config_of_a_config_with_bases_runs_from_another_folder(env, tmp_path, capsys):
    """`--print_config` of a config that extends another (`base: base.yaml`) holds the base's settings and no `base`:
    saved elsewhere, it parses again with the same settings (it named base.yaml relative to a folder it left)."""
    printed = []
    for config in ("configs/glue/rte.yaml", str(tmp_path / "rte.yaml")):
        with pytest.raises(SystemExit) as stop:
            train.main(["--config", config, "--print_config"])
        assert stop.value.code in (0, None)
        printed.append(capsys.readouterr().out)
        (tmp_path / "rte.yaml").write_text(printed[0])
    settings = yaml.safe_load(printed[0])
    assert settings["base"] is None
    assert settings["trainer"]["gradient_clip_val"] == 1.0 and settings["data"]["init_args"]["task"] == "rte"
    assert printed[1] == printed[0]


def test_a_missing_config_file_is_named_with_what_to_do(env, tmp_path, capsys):
    """`--config` naming no file is refused by name, from the command line as a user gives it (jsonargparse alone said
    'config: not a valid value'); a config given inline still parses."""
    for args in (["--config", "configs/quickstrat.yaml"], ["--config=configs/quickstrat.yaml"]):
        with pytest.raises(FileNotFoundError, match=r"--config configs/quickstrat.yaml: the file does not exist "
                                                    r"\(relative to .*\). Give the path of a config file"):
            with_bases(args)
    with pytest.raises(FileNotFoundError, match="configs: the file is a folder, not a config file"):
        with_bases(["--config", "configs"])
    assert with_bases(["--config", "{trainer: {max_steps: 3}}"]) == ["--config", "{trainer: {max_steps: 3}}"]
    status = train.cli_main(["--config", str(tmp_path / "nowhere.yaml")])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == 2 and last.startswith(f"--config {tmp_path / 'nowhere.yaml'}: the file does not exist. Give "
                                           f"the path of a config file, such as configs/quickstart.yaml")


@pytest.mark.parametrize(("content", "message"), [
    ("trainer:\n  max_steps: 2\n  max_epochs: [1\nmodel: {}\n",
     r"bad.yaml, line 4, column 6: not valid YAML: expected ',' or '\]', but got ':', while parsing a flow sequence "
     r"that starts on line 3, column 15. Fix the file.$"),
    ("trainer:\n\tmax_steps: 2\n", r"bad.yaml, line 2, column 1: not valid YAML: found character '\\t' that cannot "
                                   r"start any token. Fix the file \(YAML indents with spaces, never tabs\).$"),
    ("data:\n  init_args:\n    batch_size: 8\n  init_args:\n    max_length: 32\n",
     r"bad.yaml, line 4: the key 'init_args' appears a second time in its mapping \(first on line 2\); YAML would "
     r"keep the second alone, dropping every setting under the first."),
    ("", r"bad.yaml holds nothing; a config file maps sections"),
    ("- trainer\n", r"bad.yaml holds a list, not a mapping; a config file maps sections"),
], ids=["syntax", "tab", "repeated-key", "empty", "list"])
def test_a_config_file_that_is_no_mapping_of_settings_is_named_by_file_and_line(content, message, tmp_path, capsys):
    """A YAML syntax error ended the run with PyYAML's traceback and exit status 1 (a failed run's), a key given
    twice kept the second alone (the first `init_args`' batch size silently dropped), and an empty file or a list
    was 'Unexpected config' without the file's name."""
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        with_bases(["--config", str(path)])
    status = train.cli_main(["--config", str(path)])
    assert status == 2 and capsys.readouterr().err.strip().splitlines()[-1].startswith(f"{path}")


def test_a_config_may_merge_an_anchor_and_give_its_keys_again(tmp_path):
    """YAML's merge key (`<<: *defaults`) brings a mapping's keys to give some of them again; the check for a key
    given twice refused every such config ('could not determine a constructor for the tag ...merge')."""
    path = tmp_path / "merged.yaml"
    path.write_text("shared: &shared\n  batch_size: 8\n  max_length: 32\ndata:\n  <<: *shared\n  max_length: 64\n")
    assert read_config(path)["data"] == {"batch_size": 8, "max_length": 64}
    assert with_bases(["--config", str(path)]) == ["--config", str(path)]


def test_the_progress_bar_counts_steps_where_the_epochs_are_unbounded(env, minilm, tmp_path):
    """The README job (max_epochs -1, bounded by max_steps and max_time) read 'Epoch 0/-2' in Lightning's bar; its
    bar reads the step of max_steps, and a run bounded by epochs keeps Lightning's 'Epoch 0/2'."""
    from tasks.run.progress import ProgressBar

    def bar(*args: str) -> ProgressBar:
        cli = make_cli([*args, "--trainer.default_root_dir", str(tmp_path / str(len(list(tmp_path.iterdir()))))])
        (found,) = [c for c in cli.trainer.callbacks if isinstance(c, ProgressBar)]
        found.setup(cli.trainer, cli.model, "fit")
        return found

    readme = bar("--config", "configs/quickstart.yaml", "--data.tokenizer", minilm, "--data.train_tokenizer", "null")
    readme.trainer.fit_loop.max_epochs = -1  # as fit sets it for a run that gives max_steps and no max_epochs
    lightnings = L.pytorch.callbacks.RichProgressBar()
    lightnings.setup(readme.trainer, None, "fit")
    assert lightnings._get_train_description(0).strip() == "Epoch 0/-2"
    assert readme._get_train_description(0).strip() == "Epoch 0, step 0/1200"
    glue = bar("--config", "configs/glue/rte.yaml", "--model.pretrained", minilm)
    assert glue._get_train_description(1).strip() == "Epoch 1/2"
    cli = make_cli(["--config", "configs/glue/rte.yaml", "--model.pretrained", minilm, "--trainer.enable_progress_bar",
                    "false", "--trainer.default_root_dir", str(tmp_path / "off")])
    assert not any(isinstance(c, L.pytorch.callbacks.ProgressBar) for c in cli.trainer.callbacks)


def test_the_distillation_layer_applies_over_any_classification_config(env, minilm, tmp_path):
    """configs/distill/kd.yaml after a task's config makes that task's half-depth student: the task's data, epochs and
    warmup, kd.yaml's layers, temperature, alpha and learning rate."""
    teacher = tmp_path / "teacher"
    encoder = Encoder.from_pretrained(minilm)
    encoder.save_pretrained(teacher, head=SequenceClassificationHead(encoder.config.hidden_size, 2))
    cli = make_cli(["--config", str(REPO / "configs/glue/rte.yaml"), "--config",
                          str(REPO / "configs/distill/kd.yaml"), "--model.pretrained", str(teacher),
                          "--model.teacher", str(teacher), "--data.tokenizer", minilm,
                          "--trainer.default_root_dir", str(tmp_path / "run")])
    model = cli.model
    assert cli.datamodule.spec.name == "rte" and cli.trainer.max_epochs == 3
    assert model.encoder.config.num_layers == 3 and model.teacher.encoder.config.num_layers == 6
    assert (model.optimization.learning_rate, model.optimization.warmup) == (5e-5, 0.1)
    assert (model.temperature, model.alpha_kd) == (2.0, 0.5)


def test_every_run_tracks_to_wandb_by_default_named_after_its_folder(env, minilm, tmp_path, monkeypatch):
    """W&B is train.py's default logger, configured once: no config repeats the block (GLUE's base only groups its
    runs), the run is named after its folder, and a config or flag can still name it or turn tracking off."""
    for config in (REPO / "configs").rglob("*.yaml"):
        assert "class_path: tasks.run.tracking.WandbLogger" not in config.read_text(), config
    assert run_name(Path("runs/glue/rte")) == "glue-rte" and run_name(Path("runs/quickstart")) == \
        "quickstart"
    assert run_name(tmp_path / "mine") == "mine"
    monkeypatch.chdir(tmp_path)  # the run folder below is relative, as in the shipped configs
    cli = make_cli(["--config", str(REPO / "configs" / "glue" / "rte.yaml"), "--model.pretrained", minilm,
                          "--trainer.default_root_dir", "runs/glue/rte-test"])
    (logger,) = cli.trainer.loggers
    assert type(logger).__name__ == "WandbLogger" and logger._wandb_init["name"] == "glue-rte-test"
    assert logger._wandb_init["group"] == "glue"
    cli = make_cli(["--config", str(REPO / "configs" / "glue" / "rte.yaml"), "--model.pretrained", minilm,
                          "--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path / "off")])
    assert cli.trainer.loggers == []


def test_fast_dev_run_checks_the_path_and_writes_no_results(env, minilm, tmp_path, capsys):
    """Lightning's fast_dev_run trains and evaluates on one batch to find bugs: no checkpoint, export, metrics.json
    or submission comes of it that would look like a trained model's."""
    root = tmp_path / "run"
    cli = run("configs/glue/wnli.yaml", root, "--model.encoder.preset", "bert-tiny", "--data.tokenizer", minilm,
              "--trainer.accelerator", "cpu", "--trainer.precision", "32", "--trainer.fast_dev_run", "true")
    assert cli.trainer.global_step == 1 and set(cli.metrics) == {"val/accuracy", "val/loss"}
    assert [p for p in root.rglob("*") if p.is_file()] == []
    assert "trainer.fast_dev_run: trained and evaluated on 1 batch(es) of each set" in capsys.readouterr().out


def test_validation_prefixes():
    assert validation_prefixes(["validation"]) == ["val"]
    assert validation_prefixes(["validation_matched", "validation_mismatched"]) == ["val", "val_mismatched"]
    assert validation_prefixes(["test"]) == ["val"]  # IMDB validates on its test split


def quickstart_overrides(root: Path) -> list[str]:
    """The quickstart scaled down to seconds: a 4k WordPiece in `root`, 1,500 reviews, small batches."""
    return ["--data.tokenizer", str(root / "tokenizer"), "--data.train_tokenizer.vocab_size", "4000",
            "--data.max_documents", "1500", "--data.max_val_documents", "60", "--data.batch_size", "16",
            "--trainer.val_check_interval", "30"]


@pytest.fixture(scope="module")
def quickstart(env, tmp_path_factory):
    """The README's quickstart, scaled down: tokenizer training, MLM of its 4 x 128 encoder on real IMDB reviews."""
    root = tmp_path_factory.mktemp("quickstart")
    cli = run("configs/quickstart.yaml", root, *quickstart_overrides(root), "--trainer.max_steps", "60",
              "--trainer.log_every_n_steps", "5")
    return root, cli


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_quickstart_trains_exports_and_tracks(quickstart):
    root, cli = quickstart
    history = wandb_history(root)
    losses = series(history, "train/loss")
    # A fresh model predicts the 4,000-token vocabulary about uniformly: ln(4000) = 8.29. Within some 15 steps it
    # falls to the unigram plateau (6.5-6.9 on these reviews) and stays there with batch noise, so the first
    # logged window (steps 5-15) already holds most of the drop: check against the uniform start, and that the
    # first window is still above the last.
    assert sum(losses[-3:]) / 3 < math.log(4000) - 1.2
    assert_falls(losses, by=0.3)
    assert all(v > 0 for v in series(history, "train/tokens_per_sec"))
    # Samples/s beside tokens/s; no MFU on a CPU, whose peak Lightning's table of devices does not hold (the run
    # never measures one: tasks/run/throughput.py).
    assert len(series(history, "train/samples_per_sec")) == len(series(history, "train/tokens_per_sec")) > 0
    assert all(v > 0 for v in series(history, "train/samples_per_sec"))
    assert series(history, "train/mfu") == [] and all(v > 0 for v in series(history, "train/tflops"))
    # metrics.json holds the final validation of the best checkpoint, the same numbers W&B logged last.
    metrics = json.loads((root / "metrics.json").read_text())
    assert set(metrics) == {"val/loss", "val/accuracy", "val/perplexity"}
    assert metrics == pytest.approx(cli.metrics)
    assert series(history, "val/loss")[-1] == pytest.approx(metrics["val/loss"], rel=1e-5)
    assert metrics["val/perplexity"] == pytest.approx(torch.tensor(metrics["val/loss"]).exp().item(), rel=1e-4)
    # The resolved config is saved with the run, and one best checkpoint.
    assert "position: rope" in (root / "config.yaml").read_text()
    assert len(list(root.rglob("best-*.ckpt"))) == 1
    # The export: RoPE and pre-norm have no transformers equivalent, so litbert's format, with the trained
    # tokenizer and the MLM head beside the encoder.
    from transformers import AutoTokenizer

    assert (root / "model" / "litbert.json").exists()
    exported = Encoder.from_pretrained(root / "model")
    tokenizer = AutoTokenizer.from_pretrained(root / "model")
    assert exported.config.vocab_size == len(tokenizer) == 4000
    assert (exported.config.num_layers, exported.config.hidden_size) == (4, 128)
    assert (exported.config.position, exported.config.norm_placement) == ("rope", "pre")
    torch.testing.assert_close(exported.embeddings.word.weight, cli.model.encoder.embeddings.word.weight.float())
    head = MaskedLMHead.from_pretrained(root / "model", exported)
    torch.testing.assert_close(head.bias, cli.model.head.bias.float())


@pytest.mark.slow  # minutes on 2 cores: run by .ci/run with -m slow
def test_resume_continues_at_the_same_step(quickstart, tmp_path):
    root, _ = quickstart
    (last,) = root.rglob("last.ckpt")
    saved = torch.load(last, map_location="cpu", weights_only=False)
    assert saved["global_step"] == 60
    cli = run("configs/quickstart.yaml", tmp_path, *quickstart_overrides(root), "--trainer.max_steps", "70",
              "--ckpt_path", str(last), "--export", "false", "--trainer.logger", "false")
    assert cli.trainer.global_step == 70
    # The optimizer went on from the saved state: AdamW's step count is 60 + 10.
    state = cli.trainer.optimizers[0].state
    assert {int(s["step"]) for s in state.values()} == {70}
    assert not (tmp_path / "model").exists()


@pytest.mark.slow  # minutes on 2 cores: run by .ci/run with -m slow
def test_quickstart_sst2_fine_tunes_the_quickstart_model(quickstart, tmp_path):
    root, _ = quickstart
    cli = run("configs/quickstart-sst2.yaml", tmp_path, "--model.pretrained", str(root / "model"),
              "--trainer.max_steps", "20", "--trainer.logger", "false")
    # The tokenizer came from the pretrained folder, and the export carries the label names.
    assert cli.datamodule.vocab_size == 4000
    assert set(cli.metrics) == {"val/loss", "val/accuracy"}
    meta = json.loads((tmp_path / "model" / "litbert.json").read_text())  # RoPE, pre-norm: litbert's format
    assert meta["label_names"] == ["negative", "positive"] and meta["head"]["kind"] == "sequence_classification"


@pytest.fixture(scope="module")
def sst2(env, minilm, tmp_path_factory):
    """MiniLM fine-tuned 80 steps on SST-2 through configs/glue/sst2.yaml. (40 steps at 1e-4 ended anywhere between
    0.58 and 0.72 dev accuracy over four seeds; 80 steps at 5e-5 gave 0.78 and 0.79 on the two weakest of them.)"""
    root = tmp_path_factory.mktemp("sst2")
    cli = run("configs/glue/sst2.yaml", root, "--model.pretrained", minilm, "--trainer.max_steps", "80",
              "--trainer.log_every_n_steps", "2", "--model.optimization.learning_rate", "5e-5")
    return root, cli


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_glue_fine_tuning_learns(sst2):
    root, cli = sst2
    assert_falls(series(wandb_history(root), "train/loss"), by=0.1)
    metrics = json.loads((root / "metrics.json").read_text())
    assert set(metrics) == {"val/loss", "val/accuracy"}
    assert metrics["val/accuracy"] > 0.7  # 872 dev sentences; the majority class is 50.9%


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_token_classification_learns(env, minilm, tmp_path):
    cli = run("configs/ner/conll2003.yaml", tmp_path, "--model.pretrained", minilm, "--trainer.max_steps", "40",
              "--trainer.log_every_n_steps", "2", "--trainer.limit_val_batches", "4",
              "--trainer.limit_test_batches", "4")
    assert_falls(series(wandb_history(tmp_path), "train/loss"), by=0.3)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert {"val/f1", "val/precision", "val/recall", "test/f1", "test/precision", "test/recall"} <= set(metrics)
    assert metrics == pytest.approx(cli.metrics)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["id2label"]["0"] == "O" and len(config["id2label"]) == 9


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_pos_tags_are_scored_by_accuracy(env, minilm, tmp_path):
    """CoNLL-2003's POS column (tags of single tokens, not chunks) through the NER config: scored and monitored by
    accuracy over each word's first sub-token; entity F1 would be 0 whatever the model predicts."""
    run("configs/ner/conll2003.yaml", tmp_path, "--model.pretrained", minilm, "--data.label_column", "1",
        "--data.tag_scheme", "none", "--trainer.max_steps", "4", "--trainer.limit_val_batches", "3",
        "--trainer.limit_test_batches", "3")
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert set(metrics) == {"val/loss", "val/accuracy", "test/loss", "test/accuracy"}
    assert 0 < metrics["val/accuracy"] < 1
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert {"NNP", "VBZ", "DT"} <= set(config["id2label"].values())


@pytest.mark.slow  # minutes on 2 cores: run by .ci/run with -m slow
def test_distillation_learns_and_leaves_the_teacher_unchanged(quickstart, tmp_path):
    root, _ = quickstart
    teacher_dir = root / "model"
    cli = run("configs/distill/distilbert.yaml", tmp_path, "--model.teacher", str(teacher_dir),
              "--data.dataset", "stanfordnlp/imdb", "--data.dataset_config", "null",
              "--data.train_split", "unsupervised", "--data.val_split", "test", "--data.max_documents", "300",
              "--data.max_val_documents", "30", "--data.max_length", "128", "--trainer.max_steps", "30",
              "--trainer.log_every_n_steps", "2", "--trainer.val_check_interval", "30",
              "--model.student", "{preset: bert-tiny}")
    # A fresh student (the quickstart teacher is too weak for a teacher-initialised student to move in 30 steps;
    # initialisation from every other teacher layer is tested in test_tasks.py).
    history = wandb_history(tmp_path)
    assert_falls(series(history, "train/loss"), by=0.5)
    assert series(history, "train/loss_kl") and series(history, "train/loss_cosine")
    reference = Encoder.from_pretrained(teacher_dir).state_dict()
    for name, value in cli.model.teacher.encoder.state_dict().items():
        torch.testing.assert_close(value, reference[name], rtol=0, atol=0)
    assert not cli.model.teacher.training
    assert cli.model.encoder.config.num_layers == 2
    exported = Encoder.from_pretrained(tmp_path / "model")
    assert exported.config.num_layers == 2


@pytest.mark.slow  # minutes on 2 cores: run by .ci/run with -m slow
def test_logit_distillation_from_a_fine_tuned_classifier(sst2, tmp_path):
    """A fresh bert-mini student learns SST-2 from the fine-tuned MiniLM's logits (and the labels). 40 steps left
    it at the majority class (dev accuracy 0.509) and its loss within noise of the start; 150 steps reached 0.675
    (0.646 once the sampler drew its order from the data seed and the teacher trained 80 steps)."""
    teacher_root, _ = sst2
    cli = run("configs/glue/sst2.yaml", tmp_path, "--model.teacher", str(teacher_root / "model"),
              "--model.encoder.preset", "bert-mini", "--model.optimization.learning_rate", "5e-4",
              "--trainer.max_steps", "150", "--trainer.log_every_n_steps", "2")
    history = wandb_history(tmp_path)
    # A KD step's loss is noisy from batch to batch: compare the means of the first and last 50 steps (25 logged
    # values each).
    losses = series(history, "train/loss")
    assert len(losses) == 75 and sum(losses[-25:]) / 25 < sum(losses[:25]) / 25 - 0.02, losses
    assert json.loads((tmp_path / "metrics.json").read_text())["val/accuracy"] > 0.6  # majority class: 0.509
    assert series(history, "train/loss_teacher") and series(history, "train/loss_labels")
    teacher = cli.model.teacher
    reference = Encoder.from_pretrained(teacher_root / "model").state_dict()
    for name, value in teacher.encoder.state_dict().items():
        torch.testing.assert_close(value, reference[name], rtol=0, atol=0)
    assert cli.datamodule.vocab_size == 30522  # the teacher's tokenizer
    assert cli.model.encoder.config.num_layers == 4


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_half_depth_student_distils_through_the_shipped_config_and_exports_to_transformers(sst2, tmp_path):
    """configs/distill/sst2.yaml: a 3-layer student of the fine-tuned 6-layer teacher (every other layer, with its
    embeddings and classifier), trained against the teacher's logits; its export loads in transformers'
    AutoModelForSequenceClassification and gives the same logits as litbert's model on real dev sentences."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    teacher_dir = sst2[0] / "model"
    cli = run("configs/distill/sst2.yaml", tmp_path, "--model.pretrained", str(teacher_dir), "--model.teacher",
              str(teacher_dir), "--trainer.max_steps", "100", "--trainer.log_every_n_steps", "2", "--predict", "false")
    model = cli.model
    assert model.encoder.config.num_layers == 3 and model.teacher.encoder.config.num_layers == 6
    history = wandb_history(tmp_path)
    assert series(history, "train/loss_teacher") and series(history, "train/loss_labels")
    # 872 dev sentences, majority class 50.9%: 30 steps left the student there; 100 measured 0.766 (teacher: 80
    # steps of MiniLM, about 0.78).
    assert json.loads((tmp_path / "metrics.json").read_text())["val/accuracy"] > 0.7
    exported = tmp_path / "model"
    theirs = AutoModelForSequenceClassification.from_pretrained(exported).eval()
    assert theirs.config.num_hidden_layers == 3 and theirs.config.id2label == {0: "negative", 1: "positive"}
    dev = (Path(os.environ["LITBERT_DATA"]) / "glue" / "SST-2" / "dev.tsv").read_text().splitlines()[1:9]
    batch = AutoTokenizer.from_pretrained(exported)([line.split("\t")[0] for line in dev], padding=True,
                                                    return_tensors="pt")
    model.eval()
    with torch.no_grad():
        ours = model({"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                      "token_type_ids": batch["token_type_ids"]})
        reference = theirs(**batch).logits
    torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-4)


def test_logit_distillation_loss_by_hand(tmp_path):
    torch.manual_seed(0)
    teacher = SequenceClassification(num_labels=3, encoder=EncoderSpec(preset="bert-tiny"), vocab_size=50)
    teacher.export(tmp_path / "teacher")
    model = SequenceClassification(num_labels=3, encoder=EncoderSpec(preset="bert-tiny"), vocab_size=50,
                                   teacher=str(tmp_path / "teacher"), alpha_kd=0.3, temperature=2.0)
    student, teacher = torch.randn(4, 3), torch.randn(4, 3)
    labels = torch.tensor([0, 2, 1, 1])
    losses = model.distillation_loss(student, teacher, labels)
    p_teacher = torch.softmax(teacher / 2, -1)
    kl = (p_teacher * (p_teacher.log() - torch.log_softmax(student / 2, -1))).sum(-1).mean() * 4
    ce = torch.nn.functional.cross_entropy(student, labels)
    torch.testing.assert_close(losses["loss_teacher"], kl)
    torch.testing.assert_close(losses["loss"], 0.3 * kl + 0.7 * ce)
    with pytest.raises(ValueError, match="weigh and soften a teacher's logits, but model.teacher is not set"):
        SequenceClassification(num_labels=3, encoder=EncoderSpec(preset="bert-tiny"), vocab_size=50,
                               alpha_kd=0.3)


@pytest.mark.slow  # minutes on 2 cores: run by .ci/run with -m slow
def test_ddp_two_processes_match_one(env, minilm, tmp_path):
    """2 CPU processes (gloo) fine-tune RTE, whose 277 dev pairs do not split evenly over two ranks, validating
    during fit and after it in batches that leave one rank a batch more; their synchronised validation equals one
    process validating the same checkpoint on the same data (no example counted twice), they write one W&B run
    and one best checkpoint, and their test predictions are one process's."""
    args = [sys.executable, "train.py", "--config", "configs/glue/rte.yaml", "--model.pretrained", minilm,
            "--trainer.default_root_dir", str(tmp_path), "--trainer.accelerator", "cpu", "--trainer.devices", "2",
            "--trainer.strategy", "ddp", "--trainer.precision", "32", "--trainer.max_steps", "4",
            "--trainer.val_check_interval", "2", "--data.eval_batch_size", "138", "--trainer.enable_progress_bar",
            "false"]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(list(tmp_path.glob("wandb/offline-run-*"))) == 1
    best = list(tmp_path.rglob("best-*.ckpt"))
    assert len(best) == 1, best
    ddp = json.loads((tmp_path / "metrics.json").read_text())

    import lightning as L

    from data import GLUEDataModule

    model = SequenceClassification.load_from_checkpoint(best[0], map_location="cpu")
    data = GLUEDataModule("rte", minilm, eval_batch_size=138, group_by_length=True)
    trainer = L.Trainer(accelerator="cpu", devices=1, precision="32", logger=False, enable_progress_bar=False)
    (single,) = trainer.validate(model, datamodule=data, verbose=False)
    assert ddp["val/accuracy"] == single["val/accuracy"]
    assert ddp["val/loss"] == pytest.approx(single["val/loss"], rel=1e-6)
    # The test predictions, each rank predicting its share and the shares gathered in file order, are the ones one
    # process makes.
    from tasks.run.predict import predict_test_sets

    (alone,) = data.write_submission(predict_test_sets(trainer, model, data), tmp_path / "single")
    assert (tmp_path / "submission" / "RTE.tsv").read_text() == alone.read_text()


@pytest.mark.slow  # a minute on 2 cores: run by .ci/run with -m slow
def test_attention_maps_are_logged_to_wandb_at_every_validation(env, minilm, tmp_path):
    pytest.importorskip("matplotlib")
    run("configs/glue/rte.yaml", tmp_path, "--model.pretrained", minilm, "--trainer.max_steps", "4",
        "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1", "--data.max_length", "64",
        "--trainer.callbacks+=tasks.run.tracking.AttentionMaps", "--export", "false")
    history = wandb_history(tmp_path)
    # Validations at steps 2 and 4, and the best checkpoint's validation after fitting.
    images = [row for row in history if "attention/maps._type" in row]  # wandb joins nested keys with "."
    assert [row["attention/maps._type"] for row in images] == ["images/separated"] * 3, images
    assert len(list((tmp_path / "wandb").rglob("media/images/attention/*.png"))) == 3
    with pytest.raises(ValueError, match="AttentionMaps logs pictures to W&B, but the run's logger is none"):
        run("configs/glue/rte.yaml", tmp_path / "off", "--model.pretrained", minilm, "--trainer.max_steps", "1",
            "--trainer.logger", "false", "--trainer.callbacks+=tasks.run.tracking.AttentionMaps")


def test_a_run_ending_between_validations_validates_its_last_step(env, tmp_path):
    """max_steps 7 with validation every 5 batches: Lightning alone validates at step 5 only, and the best
    checkpoint, evaluated and exported, could not be the final weights. train.py validates step 7 too."""
    cli = run("configs/quickstart.yaml", tmp_path, *quickstart_overrides(tmp_path), "--data.max_documents", "300",
              "--trainer.max_steps", "7", "--trainer.val_check_interval", "5", "--export", "false",
              "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(tmp_path))
    (log,) = tmp_path.rglob("metrics.csv")
    with log.open() as file:
        validated = [int(row["step"]) for row in csv.DictReader(file) if row.get("val/loss")]
    # Lightning logs a validation during fit under the index of the step's last batch (steps 5 and 7: 4 and 6), and
    # train.py's validation of the best checkpoint after fit under the final step.
    assert validated == [4, 6, 7]
    assert cli.trainer.global_step == 7
    best = {int(path.stem.split("-")[1]) for path in tmp_path.rglob("best-*.ckpt")}
    assert best <= {5, 7} and len(best) == 1


def test_a_modernbert_teacher_distils_through_train_py_into_a_modernbert_student(env, minilm, tmp_path):
    """configs/distill/quickstart.yaml with a transformers ModernBertForMaskedLM teacher (MiniLM's vocabulary, every
    layer global): the 2-layer student starts from the teacher's layers 0 and 2 (layer 0 without its attention norm,
    as ModernBERT's), trains, and exports to transformers' ModernBertForMaskedLM, which gives the student's logits."""
    import transformers

    teacher = tmp_path / "teacher"
    config = transformers.ModernBertConfig(
        vocab_size=30522, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        max_position_embeddings=128, pad_token_id=0, cls_token_id=101, sep_token_id=102, bos_token_id=101,
        eos_token_id=102, layer_types=["full_attention"] * 4)
    transformers.ModernBertForMaskedLM(config).save_pretrained(teacher)
    cli = run("configs/distill/quickstart.yaml", tmp_path / "run", "--model.teacher", str(teacher),
              "--data.tokenizer", minilm, "--data.max_documents", "200", "--data.max_val_documents", "20",
              "--data.max_length", "64", "--data.batch_size", "8", "--trainer.max_steps", "6",
              "--trainer.val_check_interval", "3", "--trainer.log_every_n_steps", "1")
    student = cli.model
    assert (student.encoder.config.num_layers, student.encoder.config.first_attention_norm) == (2, False)
    taught = student.teacher.encoder.state_dict()
    assert not torch.equal(student.encoder.state_dict()["blocks.1.attention.qkv.weight"],
                           taught["blocks.2.attention.qkv.weight"])  # trained away from its start
    assert series(wandb_history(tmp_path / "run"), "train/loss")
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "run" / "model").eval()
    assert type(theirs).__name__ == "ModernBertForMaskedLM" and theirs.config.num_hidden_layers == 2
    ids = torch.randint(1000, 30000, (2, 16))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    student.eval()
    with torch.no_grad():
        ours = student.head(student.encoder(ids, mask))
        expected = theirs(input_ids=ids, attention_mask=mask).logits
    assert (ours - expected)[mask.bool()].abs().max() < 1e-4


def test_a_pretrained_folder_that_does_not_exist_is_named_by_its_setting(env, tmp_path):
    """The tokenizer of a fine-tuning run comes from model.pretrained's folder, so a wrong path is reported as the
    setting the user gave, not as a missing tokenizer."""
    from encoders.hub import HubError

    with pytest.raises(HubError, match=f"model.pretrained={tmp_path / 'nope'} does not exist"):
        make_cli(["--config", "configs/glue/rte.yaml", "--model.pretrained", str(tmp_path / "nope"),
                        "--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path / "run")])


def test_a_pretrained_folder_that_holds_no_model_is_named_by_its_setting(env, tmp_path):
    """Not as a tokenizer folder, which the tokenizer that defaults to it would report first."""
    from encoders.checkpoints import CheckpointError

    (tmp_path / "data").mkdir()
    with pytest.raises(CheckpointError, match=f"model.pretrained={tmp_path / 'data'} holds neither litbert.json"):
        make_cli(["--config", "configs/glue/rte.yaml", "--model.pretrained", str(tmp_path / "data"),
                  "--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path / "run")])


@pytest.mark.parametrize("setting, value, message", [
    ("gradient_clip_val", "-1", r"trainer.gradient_clip_val=-1 must be >= 0"),
    ("accumulate_grad_batches", "0", r"trainer.accumulate_grad_batches=0 must be >= 1"),
    ("val_check_interval", "0", r"trainer.val_check_interval=0 must be > 0"),
    ("val_check_interval", "0.0", r"trainer.val_check_interval=0.0 must be > 0"),
    ("check_val_every_n_epoch", "0", r"trainer.check_val_every_n_epoch=0 must be >= 1 \(1: every epoch\), or null"),
    ("check_val_every_n_epoch", "-1", r"trainer.check_val_every_n_epoch=-1 must be >= 1"),
    ("log_every_n_steps", "-1", r"trainer.log_every_n_steps=-1 must be >= 0"),
    # Lightning refused it beside litbert's logger, then its logging interval, then the checkpointing litbert needs.
    ("barebones", "true", r"trainer.barebones=true turns off the checkpoints, callbacks and logging a litbert run "
                          r"keeps its results with .*; remove it"),
])
def test_trainer_settings_lightning_takes_as_given_are_checked(env, minilm, tmp_path, setting, value, message):
    """A negative clip bound reversed or ignored the gradients' clipping; no accumulation, a validation interval of 0
    and validation every 0 epochs divided by zero (in Lightning's loop, once the data was read); a validation
    interval of 0.0 validated every batch, a negative epoch interval every epoch, a negative logging interval logged
    every step."""
    with pytest.raises(ValueError, match=message):
        make_cli(["--config", "configs/glue/rte.yaml", "--model.pretrained", minilm, "--trainer.logger", "false",
                  "--trainer.default_root_dir", str(tmp_path / "run"), f"--trainer.{setting}={value}"])


@pytest.mark.parametrize(("setting", "value", "said"), [
    ("devices", "0", "Lightning refused trainer.accelerator, trainer.devices: `Trainer(devices='0')` value is not a "
                     "valid input using cpu accelerator."),
    # These were said to be refusals of "the trainer settings (trainer.accelerator, devices, strategy, ...)".
    ("val_check_interval", "1.5", "Lightning refused trainer.val_check_interval: You have passed invalid value 1.5 "
                                  "for val_check_interval"),
    ("gradient_clip_algorithm", "foo", "Lightning refused trainer.gradient_clip_algorithm: `gradient_clip_algorithm` "
                                       "foo is invalid"),
    ("max_time", "10 minutes", "Lightning refused trainer.max_time: `Timer(duration='10 minutes')` is not a valid "
                               "duration"),
])
def test_a_trainer_setting_lightning_refuses_is_a_configuration_error_by_its_name(env, minilm, tmp_path, capsys,
                                                                                   setting, value, said):
    """Lightning's MisconfigurationException is the user's to fix: its message under the setting it names, exit
    status 2, no traceback; the settings that choose the machine where it names none."""
    status = train.cli_main(["--config", "configs/glue/rte.yaml", "--model.pretrained", minilm, "--trainer.logger",
                             "false", "--trainer.default_root_dir", str(tmp_path / "run"), f"--trainer.{setting}",
                             value])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == 2 and last.startswith(said)
    assert lightning_refusal(MisconfigurationException("No supported gpu backend found!")) == (
        "Lightning refused the trainer settings (trainer.accelerator, devices, strategy, ...): No supported gpu "
        "backend found!")


def test_limit_predict_batches_is_a_trainer_setting_like_the_others(env, minilm, tmp_path):
    """The test sets are predicted through trainer.predict, so its limit applies (tests/test_glue_submission.py: a
    part is predicted and no submission file is written)."""
    cli = make_cli(["--config", "configs/glue/rte.yaml", "--model.pretrained", minilm, "--trainer.logger", "false",
                    "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.limit_predict_batches", "0.5"])
    assert cli.trainer.limit_predict_batches == 0.5


def test_a_hook_logging_where_lightning_forbids_it_is_a_bug_with_its_traceback(env, minilm, tmp_path, capsys):
    """Lightning refuses `self.log` in some hooks with a MisconfigurationException whose hint mentions "the
    logger": a fault of the code that logs (a task, a user's callback), not of `trainer.logger`. cli_main re-raises
    it, with its traceback, rather than blaming a setting."""

    class LogsAtSetup(L.Callback):
        def setup(self, trainer, pl_module, stage):
            pl_module.log("x", 1.0)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train, "LogsAtSetup", LogsAtSetup, raising=False)
        with pytest.raises(MisconfigurationException, match=r"self\.log\(\)"):
            train.cli_main(["--config", "configs/glue/rte.yaml", "--model.pretrained", minilm, "--trainer.logger",
                            "false", "--trainer.default_root_dir", str(tmp_path / "run"),
                            "--trainer.limit_train_batches", "1", "--trainer.callbacks+=train.LogsAtSetup"])
    assert "Lightning refused" not in capsys.readouterr().err


@pytest.mark.parametrize("logger", ["CSVLogger", "TensorBoardLogger"])
def test_a_file_logger_needs_no_folder_and_the_config_stays_in_the_run_folder(logger, env, minilm, tmp_path, capsys):
    """`--trainer.logger CSVLogger` (or TensorBoardLogger) as docs/training.md gives it: Lightning's loggers require
    `save_dir`, which the run folder fills as it does for W&B; the closing lines name the log; and the resolved
    config is `<default_root_dir>/config.yaml`, where `train.py predict --config <run>/config.yaml` and the
    run-folder checks look, not the logger's `version_0/`."""
    rows = tmp_path / "train.csv"
    rows.write_text("text,label\ngood movie,pos\nbad movie,neg\n")
    root = tmp_path / "run"
    cli = run("configs/sentiment/imdb.yaml", root, "--model.pretrained", minilm, "--data.train_files", str(rows),
              "--data.val_files", str(rows), "--data.max_length", "16", "--trainer.max_steps", "1",
              "--export", "false", "--trainer.logger", logger)
    assert type(cli.trainer.logger).__name__ == logger
    if logger == "CSVLogger":
        (log,) = root.rglob("metrics.csv")
        assert "val/accuracy" in log.read_text()
        assert f"litbert: CSV log          {log}" in capsys.readouterr().out.splitlines()
    else:
        (log,) = {path.parent for path in root.rglob("*tfevents*")}  # the fit's events, and the final evaluation's
        assert log == root / "version_0"
        assert f"litbert: TensorBoard log  {log}" in capsys.readouterr().out.splitlines()
    assert [path.relative_to(root) for path in root.rglob("config.yaml")] == [Path("config.yaml")]
    saved = yaml.safe_load((root / "config.yaml").read_text())
    assert saved["trainer"]["logger"]["init_args"]["save_dir"] == str(root)
    assert saved["data"]["init_args"]["train_files"] == str(rows)


def test_own_files_train_under_a_logger(env, minilm, tmp_path):
    """A logger logs the task's and the datamodule's settings together and refuses one key with two values: the
    datamodule's multi_label and metrics (unset) are the task's (linked), logged once, by the task."""
    rows = tmp_path / "train.csv"
    rows.write_text("text,label\ngood movie,pos\nbad movie,neg\n")
    cli = run("configs/sentiment/imdb.yaml", tmp_path / "run", "--model.pretrained", minilm, "--data.train_files",
              str(rows), "--data.val_files", str(rows), "--data.max_length", "16", "--trainer.max_steps", "1",
              "--export", "false", "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
              "--trainer.logger.save_dir", str(tmp_path / "logs"))
    assert cli.trainer.global_step == 1
    (hparams,) = (tmp_path / "logs").rglob("hparams.yaml")
    assert "\nmulti_label: false\n" in hparams.read_text()


def test_a_run_that_takes_no_step_says_its_results_are_the_starting_weights(env, minilm, tmp_path, capsys):
    """`--trainer.max_steps 0` evaluates and exports the starting weights, as asked; the summary says no step was
    trained, and why, so that the export is never taken for a trained model."""
    cli = run("configs/glue/wnli.yaml", tmp_path / "run", "--model.encoder.preset", "bert-tiny", "--data.tokenizer",
              minilm, "--trainer.accelerator", "cpu", "--trainer.precision", "32", "--trainer.max_steps", "0",
              "--predict", "false")
    assert cli.trainer.global_step == 0 and (tmp_path / "run" / "metrics.json").is_file()
    out = capsys.readouterr().out
    assert "litbert: trained          no step (trainer.max_steps=0): the metrics and the export are the starting " \
           "weights', with any new head untrained" in out


def test_a_package_the_settings_need_and_the_machine_lacks_is_named(env, minilm, tmp_path, capsys, monkeypatch):
    """`--trainer.logger TensorBoardLogger` without tensorboard: Lightning's ModuleNotFoundError, which names the
    package to install, ended the run with a traceback and status 1, as a bug does; it is the machine's to fix."""
    import functools

    from lightning.pytorch.loggers import CSVLogger

    built = CSVLogger.__init__

    @functools.wraps(built)
    def lacking(self, *args, **kwargs):
        raise ModuleNotFoundError("Neither `tensorboard` nor `tensorboardX` is available. Try `pip install`ing either.")

    monkeypatch.setattr(CSVLogger, "__init__", lacking)
    status = train.cli_main(["--config", "configs/glue/wnli.yaml", "--model.encoder.preset", "bert-tiny",
                             "--data.tokenizer", minilm, "--trainer.default_root_dir", str(tmp_path / "run"),
                             "--trainer.logger", "CSVLogger"])
    assert status == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        "Neither `tensorboard` nor `tensorboardX` is available. Try `pip install`ing either."


def test_a_missing_litbert_module_is_a_bug_with_its_traceback(monkeypatch, capsys):
    """A ModuleNotFoundError is the user's to fix when it names a package to install, but one for litbert's own
    module (a lazy import of a module renamed away) is a bug: it propagates with its traceback, not as status 2."""
    from tasks.run.errors import OWN_MODULES, exit_status

    monkeypatch.delenv("LITBERT_TRACEBACK", raising=False)
    assert set(OWN_MODULES) == {path.parent.name for path in REPO.glob("*/__init__.py")} | {"train"}
    with pytest.raises(ModuleNotFoundError) as missing:
        importlib.import_module("tasks.run.gone")
    assert exit_status(missing.value, []) is None and capsys.readouterr().err == ""
    lacking = ModuleNotFoundError("No module named 'tensorboard'", name="tensorboard")
    assert exit_status(lacking, []) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "No module named 'tensorboard'"


def test_a_run_shows_what_it_applied_over_its_checkpoint(env, minilm, tmp_path, capsys):
    """litbert's INFO lines reach the run's stderr beside Lightning's (Python alone shows warnings only): here the
    setting applied over the pretrained checkpoint, which a user checks their override by; warnings say their level."""
    make_cli(["--config", "configs/glue/rte.yaml", "--model.pretrained", minilm, "--model.encoder.hidden_dropout",
              "0.2", "--trainer.default_root_dir", str(tmp_path)])
    assert f"INFO: Settings applied over the checkpoint {minilm}: hidden_dropout=0.2 (was 0.1)" in \
        capsys.readouterr().err.splitlines()


def test_the_card_of_a_model_trained_on_cut_reviews_says_how_to_cut_them(env, minilm, tmp_path):
    """IMDB's config keeps the head and tail of a long review; transformers' tokenizer with `truncation=True` keeps
    the head: the export's card says so, and how the results were had. A head-cut model's card says nothing of it."""
    rows = tmp_path / "train.csv"
    rows.write_text("text,label\ngood movie,pos\nbad movie,neg\n")
    for truncation, said in (("head+tail", True), ("head", False)):
        root = tmp_path / truncation
        run("configs/sentiment/imdb.yaml", root, "--model.pretrained", minilm, "--data.train_files", str(rows),
            "--data.val_files", str(rows), "--data.max_length", "16", "--data.truncation", truncation,
            "--trainer.max_steps", "1", "--predict", "false")
        (card,) = root.rglob("README.md")
        assert ("Texts longer than 16 tokens were cut to their start (25% of the tokens) and their end in training "
                "and evaluation (`data.truncation: head+tail`)" in card.read_text()) is said


@pytest.mark.parametrize("flag", ["-c", "-c="])
def test_lightnings_short_config_flag_reads_the_configs_base_too(flag, env, minilm, tmp_path):
    """`-c F`, LightningCLI's short form of `--config F`, takes F's `base:` too (it once reached jsonargparse without
    it, and wnli.yaml's `data.task` was refused as a setting of no class)."""
    config = "configs/glue/wnli.yaml"
    given = [flag, config] if flag == "-c" else [f"-c={config}"]
    cli = make_cli([*given, "--model.pretrained", minilm, "--trainer.default_root_dir", str(tmp_path)])
    assert cli.config.data.init_args.task == "wnli" and cli.model.optimization.learning_rate == \
        make_cli(["--config", config, "--model.pretrained", minilm, "--trainer.default_root_dir",
                  str(tmp_path)]).model.optimization.learning_rate


def test_a_run_says_that_it_keeps_its_checkpoints_classifier(env, minilm, tmp_path, capsys):
    """A checkpoint whose classifier names the data's labels keeps it (the fine-tune goes on from it): the run says
    so, as it says when it puts the labels in the data's order or trains a new classifier."""
    encoder = Encoder.from_pretrained(minilm)
    encoder.save_pretrained(tmp_path / "rte", head=SequenceClassificationHead(encoder.config.hidden_size, 2),
                            label_names=["entailment", "not_entailment"])
    make_cli(["--config", "configs/glue/rte.yaml", "--model.pretrained", str(tmp_path / "rte"), "--data.tokenizer",
              minilm, "--trainer.default_root_dir", str(tmp_path / "run")])
    assert f"INFO: {tmp_path / 'rte'}: its classifier of the labels entailment, not_entailment is kept" in \
        capsys.readouterr().err.splitlines()
