"""litbert's entry point: `python train.py --config configs/<experiment>.yaml [--section.key value ...]`.

The command line is LightningCLI over the constructors of the task (`--model`), the datamodule (`--data`) and
Lightning's `Trainer` (`--trainer`), plus `--checkpoint` (`tasks.run.checkpoints.LastCheckpoint`: how often the newest
training state is saved); several `--config` files compose, later ones and flags winning. Values that come from the
data (vocabulary size, labels, metrics, validation sets) are linked into the task, not repeated.

One run: fit (or resume with `--ckpt_path`), validate the best checkpoint, test it where the data has labelled
test sets, export the trained model with `save_pretrained` (to `<default_root_dir>/model` unless `--export_dir`
says otherwise; `--export false` skips it), and write every final metric to `<default_root_dir>/metrics.json`.

A run that does not finish says so and exits non-zero: 128 + the signal number when stopped by a signal (with the
checkpoint to resume from), 1 when training diverges or fails, 2 when the configuration, data or a checkpoint is
wrong (the last lines printed are litbert's message naming the file, field or value).
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import re
import shutil
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.strategies import FSDPStrategy
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.model_helpers import is_overridden

from data.sources import DataError
from data.tokenizers import load_tokenizer
from encoders.checkpoints import LITBERT_CONFIG, CheckpointError
from tasks.base import DivergenceError, EncoderTask, validation_prefixes
from tasks.run.checkpoint_io import LAST, SafeCheckpointIO, load_checkpoint_file
from tasks.run.checkpoints import BestCheckpoint, LastCheckpoint, ValidateFinalStep
from tasks.run.precision import accelerator_type, bf16_warning, default_precision
from tasks.run.signals import RunInterrupted
from tasks.run.throughput import Throughput
from tasks.run.tracking import LogConfigCallback, WandbLogger


class RunFolderError(ValueError):
    """The run folder already holds another run."""


# (datamodule attribute, task argument, transform). A link whose attribute the datamodule lacks, or whose argument
# the task lacks, does not apply: MLM data has no labels, and token classification takes label names, not a count.
DATA_LINKS: list[tuple[str, str, Any]] = [
    ("data.vocab_size", "model.init_args.vocab_size", None),
    ("data.pad_token_id", "model.init_args.pad_token_id", None),
    ("data.num_labels", "model.init_args.num_labels", None),
    ("data.label_names", "model.init_args.label_names", None),
    ("data.metric_names", "model.init_args.metrics", None),
    ("data.val_split_names", "model.init_args.validation_names", validation_prefixes),
]

# What a run writes into its folder; any of them there means the folder holds a run.
RUN_FILES = ("config.yaml", "metrics.json", "checkpoints", "submission")


def run_root(config: Any) -> Path:
    return Path(config.trainer.default_root_dir or ".")


def run_name(root: Path) -> str:
    """The W&B run name when none is set: the run folder under `runs/`, `-` for `/` (runs/glue/rte -> glue-rte)."""
    parts = root.parts[1:] if root.parts[:1] == ("runs",) else root.parts
    return "-".join(parts) if parts and not root.is_absolute() else root.name or "run"


def export_path(config: Any) -> Path:
    return Path(config.export_dir) if config.export_dir else run_root(config) / "model"


class LitbertCLI(LightningCLI):
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
        parser.add_argument("--predict", type=bool, default=True,
                            help="Predict the unlabelled test sets of the data (GLUE) with the best checkpoint and "
                                 "write the files the benchmark's server takes to <default_root_dir>/submission.")
        parser.add_argument("--overwrite", type=bool, default=False,
                            help="Replace the run already in default_root_dir (its checkpoints, metrics.json, "
                                 "config.yaml and exported model) instead of stopping.")
        parser.add_lightning_class_args(LastCheckpoint, "checkpoint")
        # Every run tracks to W&B unless its config or command line says otherwise (`--trainer.logger false`,
        # `CSVLogger`): one place for it, not a block in each config.
        parser.set_defaults({"trainer.logger": {"class_path": f"{WandbLogger.__module__}.{WandbLogger.__name__}"}})
        for source, target, compute in DATA_LINKS:
            parser.link_arguments(source, target, compute_fn=compute, apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        config = self.config
        model, data = config.model.init_args, config.data.init_args
        for name in ("pretrained", "teacher"):  # read before the tokenizer that may come from them: name the setting
            if model.get(name) is not None and not Path(model[name]).is_dir():
                raise CheckpointError(
                    f"model.{name}={model[name]} is not a folder. litbert loads checkpoints from local folders (a "
                    f"transformers save_pretrained folder or a litbert export); download a hub model first (e.g. "
                    f"`huggingface-cli download NAME --local-dir DIR`) and give that folder.")
        # Fine-tuning from a checkpoint folder uses the tokenizer saved in it unless the config names one.
        if "tokenizer" in data and data.tokenizer is None:
            data.tokenizer = model.get("pretrained") or model.get("teacher")
        if model.get("teacher") is not None and data.get("tokenizer") is not None:
            check_same_tokenizer(model.teacher, data.tokenizer)
        # What the user gave for the values that come from the data, to refuse a different one after the link.
        self.linked_settings = {target.rsplit(".", 1)[-1]: model.get(target.rsplit(".", 1)[-1])
                                for _, target, _ in DATA_LINKS if target.rsplit(".", 1)[-1] in model}
        if config.export_dir is not None and not config.export:
            raise ValueError(f"--export_dir {config.export_dir} says where to export, but --export is false; drop one.")
        if config.trainer.get("limit_predict_batches") is not None:
            raise ValueError(f"--trainer.limit_predict_batches {config.trainer.limit_predict_batches}: train.py "
                             f"predicts the test sets whole, for submission files that a part of them would not make, "
                             f"and never calls trainer.predict; remove it (--predict false skips the predictions).")
        if config.overwrite and config.ckpt_path is not None:
            raise ValueError("--overwrite replaces a finished or abandoned run, but --ckpt_path resumes one in place; "
                             "drop one of them.")
        self._choose_precision(config.trainer)
        root = run_root(config)
        self.resume_path = self._resume_path(config, root)
        self._check_run_folder(config, root)
        resumed = load_checkpoint_file(self.resume_path) if self.resume_path else {}
        resumed_wandb_id = resumed.get("callbacks", {}).get(LastCheckpoint.STATE_KEY, {}).get("wandb_id")
        if "seed" in data and data.seed is None:
            data.seed = self._data_seed(config, resumed)
        del resumed
        loggers = config.trainer.logger
        for logger in loggers if isinstance(loggers, list) else [loggers]:
            if getattr(logger, "class_path", None) == f"{WandbLogger.__module__}.{WandbLogger.__name__}":
                if logger.init_args.save_dir is None:
                    logger.init_args.save_dir = str(root)
                if logger.init_args.name is None:
                    logger.init_args.name = run_name(root)
                if logger.init_args.id is None and resumed_wandb_id:
                    logger.init_args.id = resumed_wandb_id  # the resumed run continues its W&B run

    @staticmethod
    def _choose_precision(trainer: Any) -> None:
        """An unset trainer.precision becomes the machine's fast one (`tasks.run.precision`); a bf16 precision set for
        hardware without bf16 units is kept, with a warning."""
        device_type = accelerator_type(trainer.accelerator)
        if trainer.precision is None:
            trainer.precision, reason = default_precision(device_type)
            rank_zero_info(f"litbert: trainer.precision={trainer.precision}: {reason}. Set trainer.precision to "
                           f"choose another.")
        elif warning := bf16_warning(trainer.precision, device_type):
            rank_zero_warn(warning)

    @staticmethod
    def _resume_path(config: Any, root: Path) -> str | None:
        if config.ckpt_path != "last":
            return config.ckpt_path
        last = root / "checkpoints" / LAST
        if last.is_file():
            print(f"litbert: resuming from {last}", flush=True)
            return str(last)
        print(f"litbert: --ckpt_path last: no {last} yet, so training starts from the beginning", flush=True)
        return None

    def _check_run_folder(self, config: Any, root: Path) -> None:
        """A second run into a used folder stops (or, with --overwrite, replaces the first) instead of silently
        mixing its checkpoints, metrics and export with the earlier run's. Resuming continues the run in place."""
        if self.resume_path is not None:
            return
        used = [root / name for name in RUN_FILES if (root / name).exists()]
        export = export_path(config)
        if config.export and export.exists() and any(export.iterdir()):
            used.append(export)
        if not used:
            return
        if config.ckpt_path == "last" and all(
                path.name == "config.yaml" or path.name == "checkpoints" and not any(path.rglob("*.ckpt"))
                for path in used):
            # A relaunch (a requeued job) of a run that stopped before its first checkpoint: nothing to resume and
            # nothing of value to keep, so it starts afresh instead of being refused for its own config.yaml.
            for path in used:  # every rank of a relaunched job may get here: what another removed is gone
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            print(f"litbert: --ckpt_path last: the earlier attempt in {root} stopped before its first checkpoint; "
                  f"starting afresh", flush=True)
            return
        inputs = [(f"{part}.{name}", Path(value).resolve()) for part in ("model", "data")
                  for name, value in (config[part].init_args or {}).items()
                  if isinstance(value, str | Path) and value and Path(value).exists()]
        for path in used:
            for setting, given in inputs:
                if given == path.resolve() or path.resolve() in given.parents:
                    raise RunFolderError(
                        f"{setting}={given} lies in {path}, which this run would "
                        f"{'remove (--overwrite)' if config.overwrite else 'write over'}: the run would destroy its "
                        f"own input. Copy it elsewhere first, or choose another --trainer.default_root_dir"
                        f"{' / --export_dir' if path == export else ''}.")
        if not config.overwrite:
            listing = ", ".join(str(path) for path in used)
            raise RunFolderError(
                f"trainer.default_root_dir={root} already holds a run ({listing}). Resume it with --ckpt_path "
                f"{root / 'checkpoints' / LAST}, choose another --trainer.default_root_dir, or pass --overwrite true "
                f"to replace it."
            )
        for path in used:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        print(f"litbert: --overwrite: removed the earlier run's {', '.join(p.name for p in used)} from {root}",
              flush=True)

    @staticmethod
    def _data_seed(config: Any, resumed: dict[str, Any]) -> int:
        """The seed of an unset data.seed: the resumed checkpoint's (a run started with `seed_everything: true`
        draws another seed when it is relaunched, and its batches must go on in the order they began; 0 for a
        checkpoint written before the seed was kept), else the run's seed_everything, else 0
        (`seed_everything: false`)."""
        if resumed:
            kept = resumed.get(config.data.class_path.rsplit(".", 1)[-1], {}).get("seed")  # Lightning's key: the class
            if kept is None:  # written before the seed was kept, when an unset data.seed was 0
                print("litbert: the checkpoint predates the kept data seed: its batches came from data.seed 0, and "
                      "the resumed run goes on with it", flush=True)
            return 0 if kept is None else kept
        seed = config.seed_everything
        return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0

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
        if not any(isinstance(callback, Throughput) for callback in callbacks):
            callbacks.append(Throughput())
        if not any(isinstance(callback, ValidateFinalStep) for callback in callbacks):
            callbacks.insert(0, ValidateFinalStep())  # first: the checkpoint callbacks then see the stop coming
        kwargs["callbacks"] = callbacks
        plugins = trainer_config.get("plugins") or []
        plugins = list(plugins) if isinstance(plugins, list) else [plugins]
        if not any(isinstance(plugin, CheckpointIO) for plugin in plugins):
            plugins.append(SafeCheckpointIO())  # atomic saves, weights_only loads
        kwargs["plugins"] = plugins
        return super().instantiate_trainer(**kwargs)


def rebuild(model: EncoderTask) -> EncoderTask:
    """A new instance of the task with the same constructor arguments (LightningCLI adds its own keys to hparams)."""
    accepted = inspect.signature(type(model).__init__).parameters
    return type(model)(**{k: v for k, v in model.hparams.items() if k in accepted})


def check_finite(model: EncoderTask) -> None:
    bad = [name for name, value in model.state_dict().items()
           if value.is_floating_point() and not torch.isfinite(value).all()]
    if bad:
        raise DivergenceError(f"The trained weights hold NaN or infinite values ({', '.join(bad[:5])}"
                              f"{', ...' if len(bad) > 5 else ''}); nothing was exported.")


def export(trainer: L.Trainer, model: EncoderTask, directory: Path, tokenizer: Any) -> None:
    """`model.export` on rank 0. Under FSDP the parameters are sharded across ranks: every rank takes part in
    gathering the full weights (the strategy's state dict), and rank 0 exports them from an unsharded copy."""
    if isinstance(trainer.strategy, FSDPStrategy):
        state = trainer.strategy.lightning_module_state_dict()
        if not trainer.is_global_zero:
            return
        model = rebuild(model)
        model.load_state_dict(state)
    if trainer.is_global_zero:
        check_finite(model)
        model.export(directory, tokenizer)


def predict_test_sets(trainer: L.Trainer, model: EncoderTask, data: L.LightningDataModule) -> dict[str, list]:
    """The model's predictions (class ids, or scores for regression) on each unlabelled test set of `data`, in file
    order. Every rank predicts the whole sets (a sharded model needs every rank in its forward pass; the sets are
    small), so no example is dropped or repeated by a distributed sampler; rank 0 writes them."""
    data.setup("predict")
    splits = list(getattr(data, "test_split_names", []))
    if not splits:
        return {}
    loaders = data.predict_dataloader()
    loaders = loaders if isinstance(loaders, list) else [loaders]
    device = trainer.strategy.root_device
    model.eval()
    out: dict[str, list] = {}
    with torch.inference_mode(), trainer.precision_plugin.forward_context():
        for split, loader in zip(splits, loaders, strict=True):
            values = []
            for index, batch in enumerate(loader):
                batch = {key: value.to(device) for key, value in batch.items()}
                values.extend(model.predict_step(batch, index).float().cpu().tolist())
            out[split] = values
    return out


def finite_or_none(metrics: dict[str, float]) -> dict[str, float | None]:
    """JSON has no NaN: an undefined metric (a correlation of constant predictions) is written as null."""
    out: dict[str, float | None] = {}
    for key, value in metrics.items():
        out[key] = value if math.isfinite(value) else None
        if out[key] is None:
            print(f"litbert: {key} is {value} (undefined); metrics.json holds null for it", flush=True)
    return out


def check_same_tokenizer(teacher: str, tokenizer: str) -> None:
    """A teacher reads the student's token ids: its own tokenizer (saved in its folder) must give the same ids, or
    its outputs would be of other words (or an index error, where the student's vocabulary is the larger)."""
    if Path(teacher).resolve() == Path(tokenizer).resolve():
        return
    try:
        theirs = load_tokenizer(teacher)
    except DataError as error:  # a teacher saved without its tokenizer: nothing to compare with
        rank_zero_warn(f"model.teacher={teacher} holds no tokenizer ({error}), so litbert cannot check that it was "
                       f"trained with data.tokenizer={tokenizer}; a teacher reads the student's token ids.")
        return
    ours = load_tokenizer(tokenizer)

    def pipeline(tok: Any) -> dict[str, Any]:
        spec = json.loads(tok.backend_tokenizer.to_str())
        return {"normalizer": spec.get("normalizer"), "pre_tokenizer": spec.get("pre_tokenizer"),
                "model": spec.get("model", {}).get("type"), "vocabulary": tok.get_vocab(),
                "special tokens": sorted(tok.special_tokens_map.items())}

    mine, other = pipeline(ours), pipeline(theirs)
    differ = [name for name, value in mine.items() if other[name] != value]
    if differ:
        raise DataError(f"model.teacher={teacher} was trained with another tokenizer than data.tokenizer={tokenizer} "
                        f"(their {', '.join(differ)} differ): the teacher would read ids of other tokens. Distil "
                        f"with the teacher's tokenizer (a student over another vocabulary cannot share its inputs).")


class LateSignals:
    """SIGTERM after training, while the run validates, tests and exports: Lightning acts on one only between
    evaluation batches (not after the last one, nor outside them), and a run it reached there would end as if it had
    succeeded. Installed once fit has returned (before it, the default handler ends the process, and during it
    training's own handlers save and stop), and called by Lightning's evaluation handlers too; `check` stops the
    run, on every rank at once, before its results are written."""

    def __init__(self) -> None:
        self.received = False
        self.previous: Any = None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.received = True
        print("litbert: received SIGTERM after training; the run stops before writing its results", flush=True)

    def check(self, trainer: L.Trainer) -> None:
        """A collective: every rank calls it at the same points, and all stop if any received the signal."""
        if trainer.strategy.reduce_boolean_decision(self.received or trainer.received_sigterm, all=False):
            raise SIGTERMException

    def restore(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            self.previous = None


def run(cli: LitbertCLI) -> dict[str, float]:
    signals = LateSignals()
    try:
        return _run(cli, signals)
    finally:
        signals.restore()


def _run(cli: LitbertCLI, signals: LateSignals) -> dict[str, float]:
    """Fit, evaluate the best checkpoint, export, and write metrics.json. Returns the final metrics."""
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    config = cli.config
    data.check_model(model.encoder.config)  # positions and vocabulary big enough, before any training
    tests = getattr(data, "has_test_split", True) and is_overridden("test_dataloader", data) \
        and is_overridden("test_step", model)
    predicts = config.predict and callable(getattr(data, "write_submission", None))
    # The sets tested and predicted after training are read now: a missing or malformed test file stops the run
    # before it trains, not after hours of it.
    if tests:
        data.setup("test")
    if predicts:
        data.setup("predict")
    try:
        trainer.fit(model, datamodule=data, ckpt_path=cli.resume_path)
    except DivergenceError as error:
        last = next((c for c in trainer.callbacks if isinstance(c, LastCheckpoint)), None)
        saved = (f"The newest checkpoint before it is {last.last_path} (step {last.saved_step}): resume from it "
                 f"with --ckpt_path once the settings are changed." if last is not None and last.last_path
                 else "No checkpoint was saved before it.")
        raise DivergenceError(f"{error}\n{saved}") from None
    signals.install()

    best_callback = next((c for c in trainer.callbacks if isinstance(c, ModelCheckpoint)), None)
    best = best_callback.best_model_path if best_callback is not None else ""
    ckpt_path = best or None  # validate() with a path loads those weights into `model`, so export sees them
    metrics: dict[str, float] = {}
    for results in trainer.validate(model, datamodule=data, ckpt_path=ckpt_path, verbose=False):
        metrics.update(results)
    if tests:
        for results in trainer.test(model, datamodule=data, ckpt_path=ckpt_path, verbose=False):
            metrics.update(results)
    elif is_overridden("test_step", model) and trainer.is_global_zero:
        print("litbert: the data has no labelled test split, so the model was not tested", flush=True)
    metrics = {key: float(value) for key, value in sorted(metrics.items())}

    root = Path(trainer.default_root_dir)
    export_dir = export_path(config)
    signals.check(trainer)
    if config.export:
        export(trainer, model, export_dir, data.tokenizer)
    signals.check(trainer)
    metrics_path = root / "metrics.json"
    if trainer.is_global_zero:  # before predicting: the run's results are kept whatever prediction meets
        root.mkdir(parents=True, exist_ok=True)
        metrics_path.write_text(json.dumps(finite_or_none(metrics), indent=2, allow_nan=False) + "\n")
    submission = []
    if predicts:
        predictions = predict_test_sets(trainer, model, data)
        if trainer.is_global_zero and predictions:
            submission = data.write_submission(predictions, root / "submission")
        signals.check(trainer)

    config_dir = trainer.log_dir  # a collective call under DDP: every rank makes it
    if trainer.is_global_zero:
        last = next((c.last_path for c in trainer.callbacks if isinstance(c, LastCheckpoint)), None)
        print(f"litbert: resolved config  {Path(config_dir or root) / 'config.yaml'}")
        print(f"litbert: best checkpoint  {best or '(none saved: no validation during fit; final weights used)'}")
        print(f"litbert: last checkpoint  {last or '(none saved)'}")
        if config.export:
            kind = "litbert format: this configuration has no transformers equivalent" \
                if (export_dir / LITBERT_CONFIG).exists() else "transformers format"
            print(f"litbert: exported model   {export_dir} ({kind})")
        for path in submission:
            print(f"litbert: test predictions {path}")
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                print(f"litbert: W&B run          {logger.describe()}")
                logger.finish()
        print(f"litbert: metrics          {metrics_path}")
    return metrics


def _config_file(value: str) -> Path | None:
    path = Path(value)
    return path if path.suffix in (".yaml", ".yml", ".json") and path.is_file() else None


def _bases(path: Path, chain: list[Path]) -> list[str]:
    """The files `path` extends, in the order they apply: each `base` (one path or a list, relative to `path`)
    preceded by its own bases."""
    with path.open() as handle:
        content = yaml.safe_load(handle)
    names = content.get("base") if isinstance(content, dict) else None
    out: list[str] = []
    for name in [] if names is None else names if isinstance(names, list) else [names]:
        base = (path.parent / str(name)).resolve()
        if base in chain or not base.is_file():
            problem = "extends itself" if base in chain else "does not exist"
            raise ValueError(f"{path}: base: {name} {problem}; `base` names the config file (or a list of them) "
                             f"this one extends, relative to it.")
        out += [*_bases(base, [*chain, base]), str(base)]
    return out


def with_bases(args: Sequence[str]) -> list[str]:
    """`--config F` preceded by `--config B` for the `base: B` that F names (a path relative to F, or a list of them
    applied in order; recursively), so that a config holds only what differs from the configs it extends.
    jsonargparse composes several `--config` files key by key, later ones winning; a config cannot include another
    by itself."""
    out: list[str] = []
    arguments = list(args)
    for index, arg in enumerate(arguments):
        if arg == "--base" or arg.startswith("--base="):
            raise ValueError("--base is read inside a config file (the config it extends); on the command line, "
                             "give both files instead: --config <base> --config <file>.")
        value = arg.removeprefix("--config=") if arg.startswith("--config=") else None
        if value is None and index > 0 and arguments[index - 1] == "--config":
            value = arg
        if value is None or (path := _config_file(value)) is None:
            out.append(arg)
            continue
        for base in _bases(path, [path.resolve()]):
            out += [base, "--config"] if arg == value else [f"--config={base}"]
        out.append(arg)
    return out


def nested_nulls(args: Sequence[str]) -> list[str]:
    """`--model.a.b=null` (or `--model.a.b null`) as `--model.a={"b": null}`: jsonargparse 4.53 hands a null two
    levels under a class_path (`--model.encoder.hidden_dropout=null`) to the nested parser as the string 'None',
    which the field's type then refuses; the same null inside a dict merges into the parent as meant."""
    out: list[str] = []
    arguments = list(args)
    index = 0
    while index < len(arguments):
        arg = arguments[index]
        key, value, width = arg, None, 1
        if arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
        elif arg.startswith("--") and index + 1 < len(arguments):
            value, width = arguments[index + 1], 2
        parent, _, name = key[2:].rpartition(".")
        if key.startswith("--model.") and value in ("null", "None", "~") and parent.count(".") >= 1 and name:
            out.append(f"--{parent}={json.dumps({name: None})}")
        else:
            out += arguments[index:index + width]
        index += width
    return out


def make_cli(args: Sequence[str] | None = None) -> LitbertCLI:
    """Parse `args` (default: the command line) and build the task, datamodule and trainer, without running."""
    args = nested_nulls(with_bases(sys.argv[1:] if args is None else args))
    # The arguments are the command line with its `base:` files expanded; LightningCLI warns whenever both exist.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended", category=UserWarning)
    return LitbertCLI(
        EncoderTask,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_callback=LogConfigCallback,
        save_config_kwargs={"overwrite": True},
        # One way to set the optimizer: the task's `optimization` (AdamW groups, warmup, decay). LightningCLI's own
        # --optimizer / --lr_scheduler would replace configure_optimizers and silently void it.
        auto_configure_optimizers=False,
        parser_kwargs={"exit_on_error": False},  # parse errors reach cli_main, which condenses them
        run=False,
        args=args,
    )


def main(args: Sequence[str] | None = None) -> LitbertCLI:
    """Parse `args` (default: the command line), run, and return the CLI with its trainer, model, datamodule and
    final `metrics`. Errors propagate; `cli_main` turns them into messages and exit statuses."""
    cli = make_cli(args)
    cli.metrics = run(cli)
    return cli


# ---------------------------------------------------------------------------------------------------- errors

# Errors about the user's configuration, data or files: shown as litbert's message, without a traceback.
USER_ERRORS = (DataError, CheckpointError, RunFolderError, ValueError, FileNotFoundError, NotADirectoryError,
               PermissionError, IsADirectoryError)


def _own_error(error: BaseException) -> BaseException:
    """The error a constructor raised, under the wrapping that jsonargparse adds while instantiating classes
    ("Does not validate against any of the Union subtypes" and an argument dump)."""
    seen = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    for candidate in seen:
        frames = traceback.extract_tb(candidate.__traceback__)
        if frames and "jsonargparse" not in frames[-1].filename:
            return candidate
    return error


def _origin(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    frame = frames[-1]
    try:
        where = os.path.relpath(frame.filename)
    except ValueError:
        where = frame.filename
    return f" in {where}:{frame.lineno} ({frame.name})"


_PARSE_NOISE = ("Does not validate against any of the Union subtypes", "Subtypes:", "Errors:", "Given value type:",
                "- Expected a <class 'NoneType'>", "- Problem with given class_path")


def condense_parse_error(message: str) -> str:
    """jsonargparse's report of a bad command-line or config value, nested once per level of the configuration and
    ending in an argument dump, cut to the setting, the value given and what was expected."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    path = [match.group(1) for line in lines if (match := re.match(r'(?:error: )?Parser key "([^"]+)":', line))]
    given = next((line.removeprefix("Given value:").strip() for line in lines if line.startswith("Given value:")),
                 None)
    problems = []
    for line in lines:
        if line.startswith(_PARSE_NOISE) or line.startswith("Given value:") or re.match(r"(error: )?Parser key", line):
            continue
        line = re.sub(r"<class '([\w.]+)'>", r"\1", line.removeprefix("- "))
        if line not in problems:
            problems.append(line)
    if not path:
        return str(message).strip()
    setting = ".".join(path)
    value = f"={given}" if given is not None and not given.startswith("NestedArg") else ""
    return (f"{setting}{value}: {'; '.join(problems) or 'not a valid value'}. `python train.py --config <config> "
            f"--print_config` shows every setting and its current value; `--help` lists them.")


def _finish_tracking(exit_code: int) -> None:
    """End an open W&B run now, so that its closing lines come before litbert's message, not after it."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish(exit_code=exit_code)


def _resume_hint(error: RunInterrupted, args: Sequence[str] | None) -> str:
    if not error.checkpoint:
        return ""
    kept, skip = [], False
    for arg in sys.argv[1:] if args is None else args:
        if skip:
            skip = False
        elif arg == "--ckpt_path":
            skip = True
        elif not arg.startswith("--ckpt_path="):
            kept.append(arg)
    return f"\nlitbert: resume with: python train.py {' '.join(kept)} --ckpt_path {error.checkpoint}"


def cli_main(args: Sequence[str] | None = None) -> int:
    """`main`, with every way a run can end turned into a message and an exit status (see the module docstring)."""
    try:
        main(args)
        return 0
    except RunInterrupted as error:
        _finish_tracking(1)
        print(f"litbert: {error}{_resume_hint(error, args)}", file=sys.stderr, flush=True)
        return 128 + error.signum
    except SIGTERMException:  # outside the training steps: the sanity check, or the evaluation and export after fit
        _finish_tracking(1)
        print("litbert: stopped by SIGTERM outside the training steps (in the sanity check, or in the evaluation, "
              "export or test predictions after training); the run did not finish (metrics.json is written after "
              "the evaluation and export, the predictions after it). Stopped after training, it has its final "
              "state in the run's checkpoints/last.ckpt: resume with --ckpt_path last to evaluate, export and "
              "predict. Stopped before its first step, it has nothing to resume: start it again.",
              file=sys.stderr, flush=True)
        return 128 + signal.SIGTERM
    except DivergenceError as error:
        _finish_tracking(1)
        print(f"litbert: error: {error}\nNothing was exported and no metrics.json was written.", file=sys.stderr,
              flush=True)
        return 1
    except argparse.ArgumentError as error:
        print(f"litbert: error in the configuration:\n{condense_parse_error(str(error))}", file=sys.stderr,
              flush=True)
        return 2
    except BaseException as error:
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        own = _own_error(error)
        if not isinstance(own, USER_ERRORS) or os.environ.get("LITBERT_TRACEBACK"):
            raise
        _finish_tracking(2)
        print(f"litbert: error{_origin(own)}; LITBERT_TRACEBACK=1 shows the traceback:\n{own}", file=sys.stderr,
              flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(cli_main())
