"""litbert's entry point: `python train.py --config configs/<experiment>.yaml [--section.key value ...]` trains;
`python train.py predict --help` tells how a trained model predicts a file of new inputs.

The command line is LightningCLI over the constructors of the task (`--model`), the datamodule (`--data`) and
Lightning's `Trainer` (`--trainer`); `tasks/run/cli.py` builds it, and `tasks/run/` holds the rest of the run
machinery, one module a job.

One run: print where its data comes from, fit (or resume with `--ckpt_path`), validate the best checkpoint, test it
where the data has labelled test sets, export the trained model with `save_pretrained` (to `<default_root_dir>/model`
unless `--export_dir` says otherwise, in the format of `--export_format`; `--export false` skips it) with a model
card (README.md), write every final metric to `<default_root_dir>/metrics.json`, predict the unlabelled test sets
(GLUE's) into `<default_root_dir>/submission` (`--predict false` skips it), and upload the export to the Hugging
Face Hub where `--push_to_hub org/name` asks. A run stopped by `--early_stopping.patience` has finished: it says why,
and metrics.json gives the step.

`python train.py predict --config <run>/config.yaml --model.pretrained <run>/model --data.predict_file FILE --output
FILE` predicts a file of new inputs with a trained model instead, a line per input in the file's order (label and
score, value, or a tag per word: the datamodule's `write_predictions`), through `trainer.predict`.

A run that does not finish says so and exits non-zero: 128 + the signal number when stopped by a signal (with the
checkpoint to resume from), 1 when training diverges or fails, 2 when the configuration, data or a checkpoint is
wrong (the last lines printed are litbert's message naming the file, field or value); see `tasks/run/errors.py`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.model_helpers import is_overridden

from data.base import TokenizedDataModule
from data.checks import check_max_length, check_vocab_fits
from data.sources import DataError
from tasks.base import DivergenceError, EncoderTask
from tasks.run.checkpoints import LastCheckpoint
from tasks.run.cli import LitbertCLI, make_cli
from tasks.run.early_stopping import EarlyStopping
from tasks.run.errors import exit_status
from tasks.run.export import check_export_format, export, litbert_format_reason
from tasks.run.folders import export_path
from tasks.run.predict import check_trained_head, predict_file, predict_test_sets
from tasks.run.publish import push, write_card
from tasks.run.results import print_summary, summarise_in_trackers, write_metrics
from tasks.run.signals import (
    RunSignals,
    StoppedAtOnce,
    StoppedBeforeTraining,
    end_after_launcher,
    end_with_torchrun,
    leave_process_groups,
)


def run(cli: LitbertCLI) -> dict[str, float | int]:
    """Fit, evaluate the best checkpoint, export, write metrics.json and predict. Returns the final metrics."""
    with RunSignals() as signals:
        signals.attach(cli.trainer)
        try:
            return _run(cli, signals)
        except SIGTERMException as error:
            if not isinstance(error, StoppedBeforeTraining | StoppedAtOnce):  # after training: the message names
                # the checkpoint with the final training state, or says there is none (checkpointing off)
                last = next((c for c in cli.trainer.callbacks if isinstance(c, LastCheckpoint)), None)
                error.checkpoint = last.last_path if last is not None and last.saving else None
            raise


def _run(cli: LitbertCLI, signals: RunSignals) -> dict[str, float | int]:
    trainer, model, data, config = cli.trainer, cli.model, cli.datamodule, cli.config
    root = Path(trainer.default_root_dir)
    check_teacher(model, data)  # first: a student over the teacher's vocabulary fails where its teacher does
    data.check_model(model.encoder.config)  # positions and vocabulary big enough, before any training
    if config.export:
        check_export_format(model, config.export_format)
    if trainer.is_global_zero:
        replaced = f" (replacing the config's {', '.join(cli.replaced_source)})" if cli.replaced_source else ""
        print(f"litbert: data from {data.describe_source()}{replaced}", flush=True)
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
    signals.hold()  # (already, where training ran) a signal now stops the run before its results are written
    # Read now: evaluating the best checkpoint below restores the callbacks' state as it was saved there.
    early = next((c for c in trainer.callbacks if isinstance(c, EarlyStopping) and c.stopped_step is not None), None)
    stopped = (early.stopped_step, early.summary()) if early is not None else None

    best_callback = next((c for c in trainer.callbacks if isinstance(c, ModelCheckpoint)), None)
    best = best_callback.best_model_path if best_callback is not None else ""
    ckpt_path = best or None  # validate() with a path loads those weights into `model`, so export sees them
    metrics: dict[str, float | int] = {}
    for results in trainer.validate(model, datamodule=data, ckpt_path=ckpt_path, verbose=False):
        metrics.update(results)
    if tests:
        for results in trainer.test(model, datamodule=data, ckpt_path=ckpt_path, verbose=False):
            metrics.update(results)
    elif is_overridden("test_step", model) and trainer.is_global_zero:
        print("litbert: the data has no labelled test split, so the model was not tested", flush=True)
    if stopped is not None:  # a finished run that stopped on its metric, not a failure
        metrics["early_stopping/stopped_at_step"] = stopped[0]
    # A step stays an int (metrics.json says 120, not 120.0); the evaluation's tensors become floats.
    metrics = {key: value if isinstance(value, int) else float(value) for key, value in sorted(metrics.items())}
    if trainer.fast_dev_run:
        # A check of the code path on a batch or a few, not a run: an export, metrics.json or submission from it
        # would look like a trained model's results.
        signals.finish(trainer)
        if trainer.is_global_zero:
            print(f"litbert: trainer.fast_dev_run: trained and evaluated on "
                  f"{int(trainer.fast_dev_run)} batch(es) of each set to check the code path; no checkpoint, export, "
                  f"metrics.json or submission was written. Remove trainer.fast_dev_run to train.", flush=True)
        return metrics

    signals.check(trainer)
    if config.export:  # a signal while it exports stops the run before the export is put in place
        export(trainer, model, export_path(config), data.tokenizer, config.export_format,
               card=lambda exported, folder: write_card(folder, exported, cli, metrics, trainer),
               check=lambda: signals.check(trainer))
    if trainer.is_global_zero:  # before predicting: the run's results are kept whatever prediction meets
        write_metrics(root / "metrics.json", metrics)
        summarise_in_trackers(trainer, metrics)
    predictions = predict_test_sets(trainer, model, data) if predicts else None
    signals.finish(trainer)  # the last point where the ranks stop together; rank 0 writes the rest alone
    submission = []
    if predictions and trainer.is_global_zero:
        submission = data.write_submission(predictions, root / "submission")
    pushed = None
    if config.push_to_hub and trainer.is_global_zero:  # last: a failed upload leaves every other result written
        pushed = push(export_path(config), config.push_to_hub, config.hub_private)
    if trainer.is_global_zero:
        print_summary(trainer, root / "config.yaml", best,
                      export_path(config) if config.export else None, submission, root / "metrics.json", pushed,
                      stopped[1] if stopped is not None else None, litbert_format_reason(model))
    return metrics


def check_teacher(model: EncoderTask, data: TokenizedDataModule) -> None:
    """A distillation's teacher reads the student's batches: an error, before any training, where its positions or
    vocabulary are too small for them (a student of unbounded positions takes a max_length its teacher cannot; a
    teacher saved without its tokenizer cannot be compared with data.tokenizer). Checked before the student, whose
    error would advise a larger vocab_size where the student has its teacher's."""
    teacher = getattr(model, "teacher", None)
    if teacher is None:
        return
    config = teacher.encoder.config
    refused = f"The teacher, model.teacher={model.hparams.teacher}, cannot read this data"
    if len(data.tokenizer) > config.vocab_size:
        raise DataError(f"{refused}: data.tokenizer={data.tokenizer_path} has {len(data.tokenizer)} tokens, more than "
                        f"the teacher's vocabulary of {config.vocab_size}, whose ids would index past its embedding "
                        f"table. Give data.tokenizer the tokenizer the teacher was trained with.")
    try:
        check_max_length(data.max_length, config)
        check_vocab_fits(data.tokenizer, config)  # its token types
    except DataError as error:
        raise DataError(f"{refused}: {error}") from None


def predict(cli: LitbertCLI) -> Path | None:
    """`train.py predict`: the trained model's predictions of `data.predict_file`, written to `--output` (its path
    on rank 0)."""
    trainer, model, data, output = cli.trainer, cli.model, cli.datamodule, Path(cli.config.output)
    data.check_model(model.encoder.config)
    check_trained_head(model)
    data.check_predictions_path(output)
    if trainer.is_global_zero:
        print(f"litbert: predicting {data.predict_file} with {model.hparams.pretrained}", flush=True)
    written = predict_file(trainer, model, data, output)
    if written is not None:
        print(f"litbert: predictions      {written} ({data.describe_predictions()})", flush=True)
    return written


# What `--help` opens with, for each command: what it does (Lightning's own says "Lightning Trainer command line tool").
HELP = {"fit": __doc__.split("\n\n")[0],
        "predict": next(part for part in __doc__.split("\n\n") if part.startswith("`python train.py predict "))}


def main(args: Sequence[str] | None = None) -> LitbertCLI:
    """Parse `args` (default: the command line), run (or predict, after a first argument `predict`), and return
    the CLI with its trainer, model, datamodule and final `metrics` (`predictions`: the file written). Errors
    propagate; `cli_main` turns them into messages and exit statuses."""
    with RunSignals():  # a signal while the run is built (a tokenizer trained) stops it with its exit status too
        end_with_torchrun()
        cli = make_cli(args, HELP)
    if cli.command == "predict":
        with RunSignals():  # and while it predicts: the file is written whole or not at all
            cli.predictions = predict(cli)
    else:
        cli.metrics = run(cli)
    return cli


def cli_main(args: Sequence[str] | None = None) -> int:
    """`main`, with every way a run can end turned into a message and an exit status (see the module docstring).
    As the entry point, it leaves the process groups as it returns: a caller's own too, where it is called in a
    process that set one up."""
    try:
        main(args)
    except BaseException as error:
        status = exit_status(error, args)
        if status is None:  # a bug, KeyboardInterrupt or SystemExit: not litbert's to report
            raise
        end_after_launcher()
        return status
    finally:
        leave_process_groups()  # every collective is behind this rank: its groups go before the interpreter does
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
