"""litbert's command line: LightningCLI over the constructors of the task (`--model`), the datamodule (`--data`)
and Lightning's `Trainer` (`--trainer`), plus `--checkpoint` (`tasks.run.checkpoints.LastCheckpoint`: how often the
newest training state is saved) and the run's own settings (`--ckpt_path`, `--export`, `--predict`, ...). Several
`--config` files compose, later ones and flags winning (`tasks.run.configs`). Values that come from the data
(vocabulary size, labels, metrics, validation sets) are linked into the task, not repeated.

Before the objects are built it fills in what the run decides (precision, data seed, W&B names) and checks what
it cannot honour; building the trainer, it adds litbert's default callbacks where the user configured none of
their kind.
"""

from __future__ import annotations

import inspect
import json
import sys
import warnings
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.callbacks import ProgressBar as LightningProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities import rank_zero_warn

from data.sources import DataError
from data.tokenizers import load_tokenizer
from encoders.checkpoints import CheckpointError
from tasks.base import EncoderTask, validation_prefixes
from tasks.run.checkpoint_io import SafeCheckpointIO, load_checkpoint_file
from tasks.run.checkpoints import BestCheckpoint, LastCheckpoint, ValidateFinalStep, data_seed, resume_path
from tasks.run.configs import expand
from tasks.run.export import ExportFormat
from tasks.run.folders import check_run_folder, run_root
from tasks.run.precision import choose_precision
from tasks.run.progress import ProgressBar
from tasks.run.throughput import Throughput
from tasks.run.tracking import WANDB_LOGGER, LogConfigCallback, configure_wandb

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
        parser.add_argument("--export_format", type=ExportFormat, default="auto",
                            help="The export's format: transformers' where the model has a transformers equivalent "
                                 "and litbert's otherwise (auto), transformers' or the run is refused before it "
                                 "trains (transformers), or litbert's own (litbert).")
        parser.add_argument("--predict", type=bool, default=True,
                            help="Predict the unlabelled test sets of the data (GLUE) with the best checkpoint and "
                                 "write the files the benchmark's server takes to <default_root_dir>/submission.")
        parser.add_argument("--overwrite", type=bool, default=False,
                            help="Replace the run already in default_root_dir (its checkpoints, metrics.json, "
                                 "config.yaml and exported model) instead of stopping.")
        parser.add_lightning_class_args(LastCheckpoint, "checkpoint")
        # Every run tracks to W&B unless its config or command line says otherwise (`--trainer.logger false`,
        # `CSVLogger`): one place for it, not a block in each config.
        parser.set_defaults({"trainer.logger": {"class_path": WANDB_LOGGER}})
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
        if config.export_format != "auto" and not config.export:
            raise ValueError(f"--export_format {config.export_format} says how to export, but --export is false; drop "
                             f"one.")
        if config.overwrite and config.ckpt_path is not None:
            raise ValueError("--overwrite replaces a finished or abandoned run, but --ckpt_path resumes one in place; "
                             "drop one of them.")
        choose_precision(config.trainer)
        root = run_root(config)
        self.resume_path = resume_path(config.ckpt_path, root)
        check_run_folder(config, self.resume_path)
        resumed = load_checkpoint_file(self.resume_path) if self.resume_path else {}
        if "seed" in data and data.seed is None:
            data.seed = data_seed(config, resumed)
        configure_wandb(config.trainer.logger, root,
                        resumed.get("callbacks", {}).get(LastCheckpoint.STATE_KEY, {}).get("wandb_id"))

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
        return super().instantiate_trainer(**kwargs)


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


def make_cli(args: Sequence[str] | None = None) -> LitbertCLI:
    """Parse `args` (default: the command line) and build the task, datamodule and trainer, without running."""
    args = expand(sys.argv[1:] if args is None else args)
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
        parser_kwargs={"exit_on_error": False},  # parse errors reach train.py's cli_main, which condenses them
        run=False,
        args=args,
    )
