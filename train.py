"""litbert's entry point: `python train.py --config configs/<experiment>.yaml [--section.key value ...]`.

The command line is LightningCLI over the constructors of the task (`--model`), the datamodule (`--data`) and
Lightning's `Trainer` (`--trainer`); several `--config` files compose, later ones and flags winning. Values that
come from the data (vocabulary size, labels, metrics, validation sets) are linked into the task, not repeated.

One run: fit (or resume with `--ckpt_path`), validate the best checkpoint, test it where the data has labelled
test sets, export the trained model with `save_pretrained` (to `<default_root_dir>/model` unless `--export_dir`
says otherwise; `--export false` skips it), and write every final metric to `<default_root_dir>/metrics.json`.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.strategies import FSDPStrategy
from lightning.pytorch.utilities.model_helpers import is_overridden

from tasks.base import EncoderTask
from tasks.throughput import Throughput
from tasks.tracking import LogConfigCallback, WandbLogger


def validation_prefixes(split_names: Sequence[str]) -> list[str]:
    """Log prefixes of the validation sets: `validation` -> `val`, MNLI's `validation_matched` -> `val`,
    `validation_mismatched` -> `val_mismatched`."""
    prefixes = []
    for split in split_names:
        suffix = split.removeprefix("validation").removeprefix("_")
        prefixes.append("val" if suffix in ("", "matched") else f"val_{suffix}")
    return prefixes


# (datamodule attribute, task argument, transform). A link whose attribute the datamodule lacks, or whose argument
# the task lacks, does not apply: MLM data has no labels, and token classification takes label names, not a count.
DATA_LINKS: list[tuple[str, str, Any]] = [
    ("data.vocab_size", "model.init_args.vocab_size", None),
    ("data.num_labels", "model.init_args.num_labels", None),
    ("data.label_names", "model.init_args.label_names", None),
    ("data.metric_names", "model.init_args.metrics", None),
    ("data.val_split_names", "model.init_args.validation_names", validation_prefixes),
]


class LitbertCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--ckpt_path", type=str | None, default=None,
                            help="A Lightning checkpoint (.ckpt) to resume fitting from: step, optimizer, schedule.")
        parser.add_argument("--export", type=bool, default=True,
                            help="Save the trained model with save_pretrained at the end of the run.")
        parser.add_argument("--export_dir", type=str | None, default=None,
                            help="Where to export the model; by default <trainer.default_root_dir>/model.")
        for source, target, compute in DATA_LINKS:
            parser.link_arguments(source, target, compute_fn=compute, apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        config = self.config
        model, data = config.model.init_args, config.data.init_args
        # Fine-tuning from a checkpoint folder uses the tokenizer saved in it unless the config names one.
        if "tokenizer" in data and data.tokenizer is None:
            data.tokenizer = model.get("pretrained") or model.get("teacher")
        root = config.trainer.default_root_dir or "."
        loggers = config.trainer.logger
        for logger in loggers if isinstance(loggers, list) else [loggers]:
            if getattr(logger, "class_path", None) == f"{WandbLogger.__module__}.{WandbLogger.__name__}" \
                    and logger.init_args.save_dir is None:
                logger.init_args.save_dir = root

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        # Keep the best checkpoint by the task's own metric unless the config brings its own ModelCheckpoint.
        configured = self.config_init.trainer.get("callbacks") or []
        if self.config_init.trainer.get("enable_checkpointing") is not False and not any(
                isinstance(callback, ModelCheckpoint) for callback in configured):
            metric, mode = self.model.monitor
            kwargs.setdefault("callbacks", [])
            kwargs["callbacks"] = [*kwargs["callbacks"], ModelCheckpoint(
                monitor=metric, mode=mode, save_last="link", filename="best-{step}", auto_insert_metric_name=False)]
        # Tokens/s and MFU in the progress bar and the logger unless the config sets up its own Throughput.
        if not any(isinstance(callback, Throughput) for callback in configured):
            kwargs["callbacks"] = [*kwargs.get("callbacks", []), Throughput()]
        return super().instantiate_trainer(**kwargs)


def rebuild(model: EncoderTask) -> EncoderTask:
    """A new instance of the task with the same constructor arguments (LightningCLI adds its own keys to hparams)."""
    accepted = inspect.signature(type(model).__init__).parameters
    return type(model)(**{k: v for k, v in model.hparams.items() if k in accepted})


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
        model.export(directory, tokenizer)


def run(cli: LitbertCLI) -> dict[str, float]:
    """Fit, evaluate the best checkpoint, export, and write metrics.json. Returns the final metrics."""
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    config = cli.config
    data.check_model(model.encoder.config)  # positions and vocabulary big enough, before any training
    trainer.fit(model, datamodule=data, ckpt_path=config.ckpt_path)

    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    ckpt_path = best or None  # validate() with a path loads those weights into `model`, so export sees them
    metrics: dict[str, float] = {}
    for results in trainer.validate(model, datamodule=data, ckpt_path=ckpt_path, verbose=False):
        metrics.update(results)
    labelled_test = getattr(data, "has_test_split", True)
    if labelled_test and is_overridden("test_dataloader", data) and is_overridden("test_step", model):
        for results in trainer.test(model, datamodule=data, ckpt_path=ckpt_path, verbose=False):
            metrics.update(results)
    metrics = {key: float(value) for key, value in sorted(metrics.items())}

    root = Path(trainer.default_root_dir)
    export_dir = Path(config.export_dir) if config.export_dir else root / "model"
    if config.export:
        export(trainer, model, export_dir, data.tokenizer)

    config_dir = trainer.log_dir  # a collective call under DDP: every rank makes it
    if trainer.is_global_zero:
        root.mkdir(parents=True, exist_ok=True)
        metrics_path = root / "metrics.json"
        metrics_path.write_text(json.dumps(metrics, indent=2) + "\n")
        print(f"litbert: resolved config  {Path(config_dir or root) / 'config.yaml'}")
        print(f"litbert: best checkpoint  {best or '(none saved: no validation during fit; final weights used)'}")
        if config.export:
            print(f"litbert: exported model   {export_dir}")
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                print(f"litbert: W&B run          {logger.describe()}")
                logger.finish()
        print(f"litbert: metrics          {metrics_path}")
    return metrics


def main(args: Sequence[str] | None = None) -> LitbertCLI:
    """Parse `args` (default: the command line), run, and return the CLI with its trainer, model, datamodule and
    final `metrics`."""
    cli = LitbertCLI(
        EncoderTask,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_callback=LogConfigCallback,
        save_config_kwargs={"overwrite": True},
        run=False,
        args=args,
    )
    cli.metrics = run(cli)
    return cli


if __name__ == "__main__":
    main()
