"""litbert's command line: LightningCLI over the constructors of the task (`--model`), the datamodule (`--data`)
and Lightning's `Trainer` (`--trainer`), plus `--checkpoint` (`tasks.run.checkpoints.LastCheckpoint`: how often the
newest training state is saved), `--early_stopping` (`tasks.run.early_stopping.EarlyStopping`: stop once the task's
metric stops improving) and the run's own settings (`--ckpt_path`, `--export`, `--predict`, ...). Several
`--config` files compose, later ones and flags winning (`tasks.run.configs`). Values that come from the data
(vocabulary size, labels, metrics, validation sets) are linked into the task, not repeated.

Before the objects are built it fills in what the run decides (precision, data seed, W&B names) and checks what
it cannot honour; building the trainer, it adds litbert's default callbacks where the user configured none of
their kind. Where the command line names a source of data (local files, or a dataset) and the config the other,
the command line's replaces the config's, with the settings that locate it (`replace_config_source`).

`python train.py predict ...` builds the same objects from a run's config for prediction only (`command`
"predict"): no run folder, logger or saved config, and the data's `predict_file` and `--output` are required.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import re
import sys
import warnings
from argparse import ArgumentError
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint, Timer
from lightning.pytorch.callbacks import ProgressBar as LightningProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn

from data.sources import DataError
from data.tokenizers import load_tokenizer
from encoders.checkpoints import LITBERT_CONFIG, CheckpointError
from encoders.hub import local_path
from tasks.base import EncoderTask, validation_prefixes
from tasks.run.checkpoint_io import SafeCheckpointIO, load_checkpoint_file
from tasks.run.checkpoints import (
    BestCheckpoint,
    LastCheckpoint,
    ValidateFinalStep,
    check_same_classes,
    data_seed,
    resume_path,
)
from tasks.run.configs import expand
from tasks.run.early_stopping import EarlyStopping
from tasks.run.errors import unaccepted_setting, unrecognized_hint
from tasks.run.export import ExportFormat
from tasks.run.folders import check_run_folder, export_path, run_root
from tasks.run.fsdp import check_strategy, register
from tasks.run.precision import choose_precision
from tasks.run.progress import ProgressBar
from tasks.run.publish import check_push
from tasks.run.throughput import Throughput
from tasks.run.timer import HostTimer
from tasks.run.tracking import (
    WANDB_LOGGER,
    LogConfigCallback,
    configure_wandb,
    continue_csv_logs,
    continue_tensorboard_logs,
    default_logger_folders,
)

# (datamodule attribute, task argument, transform). A link whose attribute the datamodule lacks, or whose argument
# the task lacks, does not apply: MLM data has no labels, and token classification takes label names, not a count.
DATA_LINKS: list[tuple[str, str, Any]] = [
    ("data.vocab_size", "model.init_args.vocab_size", None),
    ("data.pad_token_id", "model.init_args.pad_token_id", None),
    ("data.num_labels", "model.init_args.num_labels", None),
    ("data.label_names", "model.init_args.label_names", None),
    ("data.multi_label", "model.init_args.multi_label", None),
    ("data.metric_names", "model.init_args.metrics", None),
    ("data.val_split_names", "model.init_args.validation_names", validation_prefixes),
]


# The settings that say where the data comes from, by kind of source: the first of each kind that a datamodule has
# names the source; the others locate it. A source the command line names replaces the config's other kind.
SOURCE_SETTINGS = {"files": ("train_files", "val_files", "test_files"),
                   "dataset": ("dataset", "dataset_config", "train_split", "val_split", "data_root", "data_dir")}
SOURCE_NAMES = {"files": ("train_files",), "dataset": ("dataset",)}
# The task's settings that build the model or its teacher, which `train.py predict` clears (the export it predicts
# with was built by them already), and with those that train it, the ones it does not read.
MODEL_BUILDING_SETTINGS = ("encoder", "pretrained_layers", "teacher", "temperature", "alpha_kd")
TRAINING_ONLY_MODEL_SETTINGS = (*MODEL_BUILDING_SETTINGS, "optimization")


class LitbertCLI(LightningCLI):
    def __init__(self, *args: Any, command: str = "fit", **kwargs: Any) -> None:
        self.command = command  # "fit": train.py's run; "predict": `train.py predict`
        self.replaced_source: list[str] = []
        super().__init__(*args, **kwargs)

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        parser = super().init_parser(**kwargs)
        # `--model.optimization.weight_decay -1e-3`: argparse before Python 3.13 takes an argument for a value only
        # where it looks like a negative number without an exponent (`-1`, `-0.001`), so it read `-1e-3` as an
        # unknown option and failed with "argument --model: expected one argument". Python 3.13's pattern: an
        # argument that starts with a minus and a digit (or `-.` and a digit) is a value, as no litbert option
        # looks like that.
        parser._negative_number_matcher = re.compile(r"-\.?\d")
        return parser

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        self.args = list(args) if isinstance(args, Sequence) and not isinstance(args, str) else []
        # Parsed, then validated once the loggers without a folder have the run's (`default_logger_folders`), so
        # that `--trainer.logger CSVLogger` needs no `save_dir`. `_skip_validation` is jsonargparse's own switch
        # for this (a private keyword); the errors are raised as its `parse_args` raises them.
        try:
            self.config = parser.parse_args(args, _skip_validation=True)
        except ArgumentError as error:  # an option of no group's class (`--trainer.acumulate_grad_batches`), or
            # (`--print_config` validates while parsing) a config key of none (`trainer: {max_stepz: 3}`)
            options = list(parser._option_string_actions)
            said = unaccepted_setting(str(error), options, self.args)
            hint = unrecognized_hint(str(error), options)
            if not (said or hint):
                raise
            raise ArgumentError(None, said or f"{error}{hint}") from None
        default_logger_folders(self.config.trainer.logger, run_root(self.config))
        try:
            parser.validate(self.config)
        except (TypeError, KeyError) as error:  # a config key of no group's class, named with its file and line
            said = unaccepted_setting(str(error), list(parser._option_string_actions), self.args)
            parser.error(said or str(error), error)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--ckpt_path", type=str | None, default=None,
                            help="A checkpoint (.ckpt, local path or URL) to resume fitting from, at the same step "
                                 "and batch; `last` resumes from <default_root_dir>/checkpoints/last.ckpt when it "
                                 "exists and starts afresh when it does not (for requeued jobs).")
        parser.add_argument("--base", type=str | list[str] | None, default=None,
                            help="Inside a config file: the config it extends (a path relative to it, or a list "
                                 "of them applied in order), loaded before it, so that the file holds only what "
                                 "differs.")
        parser.add_argument("--export", type=bool, default=True,
                            help="Save the trained model with save_pretrained at the end of the run.")
        parser.add_argument("--export_dir", type=str | None, default=None,
                            help="Where to export the model; by default <trainer.default_root_dir>/model.")
        parser.add_argument("--export_format", type=ExportFormat, default="auto",
                            help="The export's format: transformers' where the model has a transformers equivalent "
                                 "and litbert's otherwise (auto), transformers' or the run is refused before it "
                                 "trains (transformers), or litbert's own (litbert).")
        parser.add_argument("--push_to_hub", type=str | None, default=None,
                            help="Upload the exported model, its tokenizer and model card to this Hugging Face Hub "
                                 "repo at the end of the run: org/name, or org/name@branch. Needs a token (HF_TOKEN "
                                 "or `hf auth login`), checked before training.")
        parser.add_argument("--hub_private", type=bool | None, default=None,
                            help="The visibility of the --push_to_hub repo: true private, false public; unset, a new "
                                 "repo gets the hub's default and an existing one keeps its own.")
        parser.add_argument("--predict", type=bool, default=True,
                            help="Predict the unlabelled test sets of the data (GLUE) with the best checkpoint and "
                                 "write the files the benchmark's server takes to <default_root_dir>/submission.")
        parser.add_argument("--output", type=str | None, default=None,
                            help="`python train.py predict`: the file it writes the predictions of "
                                 "data.predict_file to (.jsonl or .tsv for classification, CoNLL lines for tags).")
        parser.add_argument("--overwrite", type=bool, default=False,
                            help="Replace the run already in default_root_dir (its checkpoints, metrics.json, "
                                 "config.yaml and exported model) instead of stopping.")
        parser.add_lightning_class_args(LastCheckpoint, "checkpoint")
        # Built always, added to the trainer only when patience is set (`instantiate_trainer`).
        parser.add_class_arguments(EarlyStopping, "early_stopping", instantiate=True)
        # Every run tracks to W&B unless its config or command line says otherwise (`--trainer.logger false`,
        # `CSVLogger`): one place for it, not a block in each config.
        parser.set_defaults({"trainer.logger": {"class_path": WANDB_LOGGER}})
        for source, target, compute in DATA_LINKS:
            parser.link_arguments(source, target, compute_fn=compute, apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        config = self.config
        model, data = config.model.init_args, config.data.init_args
        self.replaced_source = replace_config_source(self.args, config)
        if self.command == "predict":
            # The export is the trained model: the settings that built it (from a preset, or some layers of another
            # checkpoint) are its own already and would apply to it a second time; a teacher only teaches training.
            # The run's config.yaml holds them, and they give way; on the command line they were meant to apply.
            unread = sorted(command_line_keys(self.args, "model") & {*TRAINING_ONLY_MODEL_SETTINGS})
            if unread:
                raise ValueError(f"train.py predict does not read {', '.join(f'model.{name}' for name in unread)}, "
                                 f"given on the command line: such settings build and train a model, and "
                                 f"model.pretrained={model.get('pretrained')} is the trained model as it was "
                                 f"exported. Remove them; to predict with another model, train it and give its "
                                 f"export.")
            for name in MODEL_BUILDING_SETTINGS:
                if name in model:
                    model[name] = None
        for name in ("pretrained", "teacher"):  # found before the tokenizer that may come from them: name the setting
            if model.get(name) is not None:
                found = local_path(model[name], setting=f"model.{name}")  # a folder, or a hub id's snapshot
                if not found.is_dir():
                    raise CheckpointError(f"model.{name}={model[name]} is a file; give the checkpoint's folder (a "
                                          f"transformers save_pretrained folder or a litbert export) or a hub id.")
                if not (found / LITBERT_CONFIG).exists() and not (found / "config.json").exists():
                    raise CheckpointError(f"model.{name}={model[name]} holds neither {LITBERT_CONFIG} (a litbert "
                                          f"export) nor config.json (transformers' save_pretrained); give the "
                                          f"checkpoint's folder or a hub id.")
        # Fine-tuning from a checkpoint folder uses the tokenizer saved in it unless the config names one.
        if "tokenizer" in data and data.tokenizer is None:
            data.tokenizer = model.get("pretrained") or model.get("teacher")
        # A checkpoint reads the ids of the tokenizer it was trained with: another one (a smaller vocabulary fits its
        # embedding table, and a freshly trained one too) would train on ids of other words without an error.
        # (`train.py predict` checks its export below, with its own advice.)
        checked = ("teacher",) if self.command == "predict" else ("teacher", "pretrained")
        for name in (name for name in checked if model.get(name) is not None and data.get("tokenizer") is not None):
            if data.get("train_tokenizer") is not None and not Path(data.tokenizer).expanduser().exists():
                raise DataError(f"data.train_tokenizer trains a new tokenizer into data.tokenizer={data.tokenizer}, "
                                f"but model.{name}={model[name]} reads the ids of the tokenizer it was trained "
                                f"with. Use the checkpoint's own: --data.tokenizer null --data.train_tokenizer null.")
            if name == "pretrained":
                check_same_tokenizer(model.pretrained, data.tokenizer, "model.pretrained",
                                     "Use the checkpoint's own (--data.tokenizer null, and --data.train_tokenizer "
                                     "null where the config trains one), or train a new model on this tokenizer "
                                     "(without model.pretrained).")
            else:
                check_same_tokenizer(model.teacher, data.tokenizer)
        # What the user gave for the values that come from the data, to refuse a different one after the link.
        self.linked_settings = {target.rsplit(".", 1)[-1]: model.get(target.rsplit(".", 1)[-1])
                                for _, target, _ in DATA_LINKS if target.rsplit(".", 1)[-1] in model}
        if config.export_dir is not None and not config.export:
            raise ValueError(f"--export_dir {config.export_dir} says where to export, but --export is false; drop one.")
        if config.export_format != "auto" and not config.export:
            raise ValueError(f"--export_format {config.export_format} says how to export, but --export is false; drop "
                             f"one.")
        if config.overwrite and config.ckpt_path is not None:
            raise ValueError("--overwrite replaces a finished or abandoned run, but --ckpt_path resumes one in place; "
                             "drop one of them.")
        check_push(config, export_path(config))
        choose_precision(config.trainer)
        if self.command == "predict":
            self._prepare_prediction()
            return
        for name, value in (("--output", config.output), ("data.predict_file", data.get("predict_file")),
                            ("data.predict_format", data.get("predict_format"))):
            if value is not None:
                raise ValueError(f"{name}={value} is for `python train.py predict`, which predicts a file with a "
                                 f"trained model; a training run does not read it. Remove it, and predict after "
                                 f"training with `python train.py predict --config <default_root_dir>/config.yaml "
                                 f"--model.pretrained <default_root_dir>/model --data.predict_file FILE --output "
                                 f"FILE`.")
        root = run_root(config)
        self.resume_path = resume_path(config.ckpt_path, root)
        check_run_folder(config, self.resume_path)
        resumed = load_checkpoint_file(self.resume_path, whole=True) if self.resume_path else {}
        check_same_classes(config, resumed, self.resume_path)
        self.resumed_step = resumed.get("global_step")
        # The version folders of its CSV and TensorBoard logs (None from a checkpoint that does not keep them).
        self.resumed_logs = resumed.get("callbacks", {}).get(LastCheckpoint.STATE_KEY, {}).get("file_logs")
        if "seed" in data and data.seed is None:
            data.seed = data_seed(config, resumed)
        configure_wandb(config.trainer.logger, root, resumed.get("callbacks", {}).get(LastCheckpoint.STATE_KEY, {}))

    def _prepare_prediction(self) -> None:
        """`train.py predict`: the run's config with a trained model and a file to predict. Nothing is written but
        `--output`: no run folder is checked or used, nothing is logged, and no config is saved."""
        config = self.config
        model, data = config.model.init_args, config.data.init_args
        if "predict_file" not in data:
            raise ValueError(f"train.py predict reads new inputs through data.predict_file, which "
                             f"{config.data.class_path} does not have: it predicts with classification and token "
                             f"classification models.")
        missing = [name for name, value in (("--data.predict_file", data.predict_file), ("--output", config.output),
                                            ("--model.pretrained", model.get("pretrained"))) if value is None]
        if missing:
            raise ValueError(f"train.py predict needs {', '.join(missing)}: `python train.py predict --config "
                             f"<run>/config.yaml --model.pretrained <run>/model --data.predict_file FILE --output "
                             f"FILE`.")
        if config.ckpt_path is not None:
            raise ValueError(f"--ckpt_path={config.ckpt_path} resumes training; train.py predict predicts with "
                             f"--model.pretrained (an export). Set --ckpt_path null.")
        limit, quick = config.trainer.get("limit_predict_batches"), config.trainer.get("fast_dev_run")
        if quick or part_of_each_set(limit):
            name, off = ("trainer.fast_dev_run", "false") if quick else ("trainer.limit_predict_batches", "null")
            raise ValueError(f"{name}={quick or limit} limits the batches predicted of {data.predict_file}, and "
                             f"train.py predict writes a line for every input; remove it, or (set in the run's "
                             f"config.yaml, as a run that checked its test predictions on a part keeps it) give "
                             f"--{name} {off}.")
        if Path(config.output).resolve() == Path(data.predict_file).resolve():
            raise ValueError(f"--output {config.output} is data.predict_file itself; write the predictions elsewhere.")
        if data.get("tokenizer") is not None:  # a folder or a hub id (its cached snapshot)
            check_same_tokenizer(model.pretrained, data.tokenizer, "model.pretrained",
                                 "Predict with the tokenizer saved beside it: --data.tokenizer " + model.pretrained)
        config.trainer.logger = False  # predictions log nothing: no tracker run is started for them
        self.resume_path = None

    def _check_linked_settings(self) -> None:
        """A value the data sets (vocabulary size, labels, metrics, validation sets) and the user set too, to
        something else, is refused rather than silently replaced by the data's."""
        parameters = inspect.signature(type(self.model).__init__).parameters
        for name, given in getattr(self, "linked_settings", {}).items():
            default = parameters[name].default if name in parameters else None
            actual = self.model.hparams.get(name)

            def same(a: Any, b: Any) -> bool:
                return (list(a) if isinstance(a, (list, tuple)) else a) == (list(b) if isinstance(b, (list, tuple))
                                                                            else b)

            if given is None or same(given, default) or same(given, actual):
                continue
            raise ValueError(f"model.{name}={given!r} is set from the data ({type(self.datamodule).__name__} gives "
                             f"{actual!r}); remove model.{name} from the config and the command line.")

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        self._check_linked_settings()
        # The callbacks of the config and the command line are kept; litbert adds a default only where the user
        # configured none of that kind.
        trainer_config = self.config_init.trainer
        # Lightning takes both as given: a negative clip bound scales the gradients by a negative factor (or, in the
        # fused path, clips nothing), and accumulate_grad_batches 0 divides by zero counting the run's steps.
        clip, accumulate = trainer_config.get("gradient_clip_val"), trainer_config.get("accumulate_grad_batches")
        if clip is not None and clip < 0:
            raise ValueError(f"trainer.gradient_clip_val={clip} must be >= 0 (a norm bound such as 1.0; 0 or null "
                             f"clips nothing).")
        if accumulate is not None and accumulate < 1:
            raise ValueError(f"trainer.accumulate_grad_batches={accumulate} must be >= 1 (1: a step every batch).")
        # An interval of 0 divided by zero in Lightning's loop after the data was read; a negative epoch interval
        # validated every epoch, a negative logging interval logged every step, as if each were 1.
        interval, every_epochs = trainer_config.get("val_check_interval"), trainer_config.get("check_val_every_n_epoch")
        if isinstance(interval, int | float) and not isinstance(interval, bool) and interval == 0:
            raise ValueError(f"trainer.val_check_interval={interval} must be > 0: a number of training batches, or a "
                             f"fraction of an epoch in (0, 1]; to validate less, raise it (trainer.limit_val_batches 0 "
                             f"validates never).")
        if isinstance(every_epochs, int) and every_epochs < 1:
            raise ValueError(f"trainer.check_val_every_n_epoch={every_epochs} must be >= 1 (1: every epoch), or null "
                             f"to validate every trainer.val_check_interval batches across epochs.")
        if trainer_config.get("barebones"):
            # Lightning refuses it beside any logger, callback, checkpointing or logging interval, and litbert's run
            # needs checkpointing on (its last.ckpt and signal handling): no way through, one refusal at a time.
            raise ValueError("trainer.barebones=true turns off the checkpoints, callbacks and logging a litbert run "
                             "keeps its results with (the best checkpoint, last.ckpt, metrics.json, the resume "
                             "after a signal); remove it. To measure speed, run with trainer.logger false and read "
                             "train/tokens_per_sec from the progress bar; to check the code path, trainer.fast_dev_run "
                             "true.")
        log_every = trainer_config.get("log_every_n_steps")
        if isinstance(log_every, int) and log_every < 0:
            raise ValueError(f"trainer.log_every_n_steps={log_every} must be >= 0 (0 logs no training step).")
        # Lightning stops at the maximum whatever the minimum: a minimum above it would go unmet without a word.
        for unit in ("epochs", "steps"):
            least, most = trainer_config.get(f"min_{unit}"), trainer_config.get(f"max_{unit}")
            if least is not None and most is not None and most >= 0 and least > most:
                raise ValueError(f"trainer.min_{unit}={least} is above trainer.max_{unit}={most}, which stops the "
                                 f"run first; lower min_{unit} or raise max_{unit}.")
        # `train.py predict` neither validates nor tests (a run's config.yaml may hold these limits unread), and
        # fast_dev_run writes no metrics.
        reports_metrics = self.command == "fit" and not trainer_config.get("fast_dev_run")
        for name, results in (("limit_val_batches", "val/ metrics, the best checkpoint they pick"),
                              ("limit_test_batches", "test/ metrics")) if reports_metrics else ():
            limit = trainer_config.get(name)
            if part_of_each_set(limit) and limit != 0:  # 0 evaluates nothing: no metrics to take for the whole's
                rank_zero_warn(f"trainer.{name}={limit} evaluates part of the set: its {results} and metrics.json "
                               f"are of those batches only.")
        callbacks = trainer_config.get("callbacks") or []
        callbacks = list(callbacks) if isinstance(callbacks, list) else [callbacks]
        root = run_root(self.config)
        checkpointing = trainer_config.get("enable_checkpointing") is not False
        if not checkpointing:
            if any(isinstance(callback, ModelCheckpoint) for callback in callbacks):
                raise ValueError("trainer.enable_checkpointing is false, but trainer.callbacks holds a "
                                 "ModelCheckpoint; remove one of the two.")
            # litbert's LastCheckpoint (a Lightning `Checkpoint`) stays for its signal handling but writes nothing.
            # Lightning refuses any Checkpoint callback under enable_checkpointing=False, so it is told True: the
            # non-saving LastCheckpoint is then the only one, and Lightning adds none of its own.
            self.config_init.checkpoint.saving = False
            kwargs["enable_checkpointing"] = True
        elif not any(isinstance(callback, ModelCheckpoint) for callback in callbacks):
            metric, mode = self.model.monitor
            callbacks.append(BestCheckpoint(metric, mode, dirpath=str(root / "checkpoints")))
        if trainer_config.get("fast_dev_run"):
            # Lightning's check of the code path "suppresses logging and checkpointing": its ModelCheckpoint saves
            # nothing then, and neither does litbert's last.ckpt (train.py writes no results either).
            self.config_init.checkpoint.saving = False
        early_stopping = self.config_init.early_stopping
        if early_stopping.requested:  # on the task's metric, the one BestCheckpoint picks by
            callbacks.append(early_stopping)
        if not any(isinstance(callback, Throughput) for callback in callbacks):
            callbacks.append(Throughput())
        max_time = trainer_config.get("max_time")
        if max_time is not None and not any(isinstance(callback, Timer) for callback in callbacks):
            # In place of the Timer Lightning makes of max_time: the ranks agree on the stop over the hosts.
            callbacks.append(HostTimer(duration=max_time, interval="step"))
            kwargs["max_time"] = None
        if trainer_config.get("enable_progress_bar") is not False and find_spec("rich") is not None \
                and not any(isinstance(callback, LightningProgressBar) for callback in callbacks):
            callbacks.append(ProgressBar())  # Lightning's rich bar, counting steps where the epochs are unbounded
        if not any(isinstance(callback, ValidateFinalStep) for callback in callbacks):
            callbacks.insert(0, ValidateFinalStep())  # first: the checkpoint callbacks then see the stop coming
        kwargs["callbacks"] = callbacks
        plugins = trainer_config.get("plugins") or []
        plugins = list(plugins) if isinstance(plugins, list) else [plugins]
        if not any(isinstance(plugin, CheckpointIO) for plugin in plugins):
            plugins.append(SafeCheckpointIO())  # atomic saves, weights_only loads
        kwargs["plugins"] = plugins
        if self.save_config_callback is not None:
            self.save_config_kwargs = {**self.save_config_kwargs, "resumes": self.resume_path is not None}
        trainer = super().instantiate_trainer(**kwargs)
        check_strategy(trainer.strategy)
        if self.resume_path is not None:
            continue_csv_logs(trainer.loggers, self.resumed_step, self.resumed_logs)
            trainer.loggers = continue_tensorboard_logs(trainer.loggers, self.resumed_step, self.resumed_logs)
        if not trainer._accelerator_connector.use_distributed_sampler and trainer.world_size > 1:
            # litbert's datamodules shard their loaders themselves (`TokenizedDataModule.distributed`) and leave no
            # way to shard them otherwise: without it every rank would train on the same batches, count every dev
            # example once per rank, and predict each test example once per rank (a submission of twice the lines).
            raise ValueError(f"trainer.use_distributed_sampler=false with {trainer.world_size} processes: litbert's "
                             f"datamodules give each rank its shard of the data, and without it every rank would "
                             f"train and evaluate on all of it. Remove the setting.")
        return trainer


def check_same_tokenizer(folder: str, tokenizer: str, setting: str = "model.teacher",
                         advice: str = "Distil with the teacher's tokenizer (a student over another vocabulary "
                                       "cannot share its inputs).") -> None:
    """A teacher reads the student's token ids, and a trained model those of the text it predicts: its own
    tokenizer (saved in its folder) must give the same ids, or its outputs would be of other words (or an index
    error, where the data's vocabulary is the larger)."""
    if Path(folder).resolve() == Path(tokenizer).resolve():
        return
    try:
        theirs = load_tokenizer(folder)
    except DataError as error:  # a model saved without its tokenizer: nothing to compare with
        rank_zero_warn(f"{setting}={folder} holds no tokenizer ({error}), so litbert cannot check that it was "
                       f"trained with data.tokenizer={tokenizer}; it reads the token ids of that tokenizer.")
        return
    ours = load_tokenizer(tokenizer, setting="data.tokenizer")  # an id not cached is named by its setting

    def pipeline(tok: Any) -> dict[str, Any]:
        spec = json.loads(tok.backend_tokenizer.to_str())
        return {"normalizer": spec.get("normalizer"), "pre_tokenizer": spec.get("pre_tokenizer"),
                "model": spec.get("model", {}).get("type"), "vocabulary": tok.get_vocab(),
                "special tokens": sorted(tok.special_tokens_map.items())}

    mine, other = pipeline(ours), pipeline(theirs)
    differ = [name for name, value in mine.items() if other[name] != value]
    if differ:
        raise DataError(f"{setting}={folder} was trained with another tokenizer than data.tokenizer={tokenizer} "
                        f"(their {', '.join(differ)} differ): it would read ids of other tokens. {advice}")


def command_line_keys(args: Sequence[str], section: str) -> set[str]:
    """The settings of `section` (`data`) that the command line gives: `--data.KEY` and `--data.init_args.KEY` (with
    `=value` or without), and the keys of a whole `--data` value (inline or a file). `--config` files are not the
    command line's."""
    keys: set[str] = set()
    for i, arg in enumerate(args):
        if match := re.match(rf"--{section}\.(?:init_args\.)?(\w+)", arg):
            keys.add(match.group(1))
        elif (arg == f"--{section}" and i + 1 < len(args)) or arg.startswith(f"--{section}="):
            value = args[i + 1] if arg == f"--{section}" else arg.split("=", 1)[1]
            try:
                whole = yaml.safe_load(Path(value).read_text() if Path(value).is_file() else value)
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(whole, dict):
                keys |= set(whole.get("init_args") or {}) | set(whole) - {"class_path", "init_args", "dict_kwargs"}
    return keys


def replace_config_source(args: Sequence[str], config: Any) -> list[str]:
    """Where the command line names a source of data (training files, or a dataset) and the config files another,
    the command line's source replaces the config's: the config's settings of the source (`SOURCE_SETTINGS`: the
    files; or a dataset with its config name, splits and folders) that the command line does not give go back to
    their defaults. So `--data.train_files my.txt` trains on the file whatever dataset and splits the config names,
    and `--data.dataset NAME` reads that dataset with its default splits (or those given beside it). Returns the
    settings replaced (`data.dataset='imdb'`, ...), for the line the run prints. Where the command line names both
    kinds, nothing is replaced and the datamodule refuses the pair."""
    settings = config.data.init_args if config.get("data") is not None else None
    if settings is None:
        return []
    given = command_line_keys(args, "data")
    named = {kind: any(name in given and settings.get(name) is not None for name in names)
             for kind, names in SOURCE_NAMES.items()}
    if named["files"] == named["dataset"]:
        return []
    # Files replace the dataset and everything that locates it; a dataset replaces the files and the settings that
    # locate the config's dataset in it (config name, splits, folder), not the data root, which holds any dataset.
    replaced = SOURCE_SETTINGS["dataset"] if named["files"] else \
        SOURCE_SETTINGS["files"] + tuple(name for name in SOURCE_SETTINGS["dataset"] if name != "data_root")
    module, _, name = config.data.class_path.rpartition(".")
    defaults = inspect.signature(getattr(importlib.import_module(module), name).__init__).parameters
    out = []
    for setting in replaced:
        default = defaults[setting].default if setting in defaults else None
        if setting in settings and setting not in given and settings[setting] != default:
            out.append(f"data.{setting}={settings[setting]!r}")
            settings[setting] = default
    return out


def part_of_each_set(limit: int | float | None) -> bool:
    """Whether a `trainer.limit_{val,test,predict}_batches` passes over a part of each set: an int counts batches
    (1: one batch, 0: none), a float is a fraction (1.0: the whole)."""
    return limit is not None and (isinstance(limit, int) or limit < 1)


# The packages whose loggers say what a run did with its inputs: the settings applied over a checkpoint, a stored
# classifier's labels put in the data's order, the labels found, the rows a setting left out, the cache read.
LOGGED_PACKAGES = ("encoders", "data", "tasks")


class _Stderr(logging.StreamHandler):
    """A handler that writes to `sys.stderr` as it is when a record comes (a test's capture, a redirection)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def show_logs() -> None:
    """litbert's INFO lines on rank 0's stderr, as Lightning shows its own (`INFO: ...`), and its warnings on every
    rank; Python alone would show the warnings only, without their level."""
    for name in LOGGED_PACKAGES:
        logger = logging.getLogger(name)
        if not any(isinstance(handler, _Stderr) for handler in logger.handlers):
            handler = _Stderr()
            handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
            logger.addHandler(handler)
        logger.setLevel(logging.INFO if rank_zero_only.rank == 0 else logging.WARNING)


def make_cli(args: Sequence[str] | None = None, help: dict[str, str] | None = None) -> LitbertCLI:
    """Parse `args` (default: the command line) and build the task, datamodule and trainer, without running. A
    first argument `predict` builds them for `python train.py predict` (`cli.command`). `help[command]` opens
    `--help`."""
    given = list(sys.argv[1:] if args is None else args)
    command = "predict" if given[:1] == ["predict"] else "fit"
    register()  # `--trainer.strategy fsdp`: litbert's FSDPStrategy
    show_logs()
    # The arguments are the command line with its `base:` files expanded; LightningCLI warns whenever both exist.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended", category=UserWarning)
    cli = LitbertCLI(
        EncoderTask,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        # A prediction leaves the run's config.yaml as it is (Lightning's callback would write over it).
        save_config_callback=LogConfigCallback if command == "fit" else None,
        save_config_kwargs={"overwrite": True, "save_to_log_dir": False},  # into the run folder, whatever the logger
        # One way to set the optimizer: the task's `optimization` (AdamW groups, warmup, decay). LightningCLI's own
        # --optimizer / --lr_scheduler would replace configure_optimizers and silently void it.
        auto_configure_optimizers=False,
        # Parse errors reach train.py's cli_main, which condenses them; a shortened option (`--trainer.max_step`) is
        # refused with the option it may mean, not read as another.
        parser_kwargs={"exit_on_error": False, "allow_abbrev": False,
                       **({"description": help[command]} if help else {}),
                       **({"prog": "train.py predict"} if command == "predict" else {})},
        run=False,
        args=expand(given[1:] if command == "predict" else given),
        command=command,
    )
    cli.command_line = given  # as the user gave it, for the model card
    return cli
