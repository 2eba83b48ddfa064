"""Experiment tracking with Weights & Biases through Lightning's `WandbLogger`.

Online when the user is logged in (an API key in `WANDB_API_KEY` or in the netrc file that `wandb login` writes),
otherwise offline into the run folder, with one line on how to upload the run later. `WANDB_MODE` set by the user
wins over both (`disabled` logs nothing), and `WANDB_PROJECT` names the project where the config names none; a
resumed run continues in the project and entity its checkpoint was logged to. Lightning creates the run on rank 0
only. A run can track with CSV instead (`--trainer.logger CSVLogger`; a resumed run goes on in the same metrics.csv:
`ContinuedCSVWriter`), with TensorBoard (`--trainer.logger TensorBoardLogger`; a resumed run goes on in the same
folder: `ContinuedTensorBoardLogger`) or not at all (`--trainer.logger false`); a logger that writes files and is
given no `save_dir` writes them into the run folder, as the W&B logger does. The resolved config is saved as
`<default_root_dir>/config.yaml` whatever the logger.
"""

from __future__ import annotations

import csv
import netrc
import os
import re
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

import lightning as L
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only

from encoders.choices import check_choice
from tasks.run.folders import remove_earlier_metrics

TrackingMode = Literal["auto", "online", "offline"]
DEFAULT_PROJECT = "litbert"


def wandb_logged_in() -> bool:
    """Whether `wandb` has credentials for its server, without asking it (which may prompt or need the network)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


class WandbLogger(LightningWandbLogger):
    """Lightning's `WandbLogger` that picks online or offline by itself and logs into the run folder.

    Args:
        project: W&B project; None: `WANDB_PROJECT` where it is set, else `litbert`.
        name: Display name of the run.
        save_dir: Folder of the `wandb/` run files; litbert sets it to the trainer's `default_root_dir`.
        mode: `auto` (online when logged in, else offline), `online` or `offline`.
        log_model: Upload checkpoints as artifacts: False, True (at the end) or `all` (each one as it is saved).
        entity: W&B team or user.
        group: Group of runs (e.g. a sweep).
        tags: Tags of the run.
        id: Id of a run to continue; litbert sets it, when resuming from a checkpoint, to the run the checkpoint
            was saved by.
    """

    def __init__(
        self,
        project: str | None = None,
        name: str | None = None,
        save_dir: str | None = None,
        mode: TrackingMode = "auto",
        log_model: bool | Literal["all"] = False,
        entity: str | None = None,
        group: str | None = None,
        tags: list[str] | None = None,
        id: str | None = None,
    ) -> None:
        check_choice("WandbLogger mode", mode, TrackingMode)
        offline = mode == "offline" or (mode == "auto" and not wandb_logged_in())
        disabled = False
        if "WANDB_MODE" in os.environ:  # the user's explicit choice, e.g. `disabled` in CI
            offline = os.environ["WANDB_MODE"] in ("offline", "dryrun")
            disabled = os.environ["WANDB_MODE"] == "disabled"
        # Given explicitly, a project would void the user's WANDB_PROJECT (wandb lets an argument win over it).
        project = project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT
        if offline and log_model:  # W&B cannot upload artifacts from an offline run
            rank_zero_info("litbert: W&B is offline, so checkpoints are not logged as artifacts (log_model ignored); "
                           "they stay in the run's checkpoints folder.")
            log_model = False
        save_dir = save_dir or "."
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        resume = {"resume": "allow"} if id is not None else {}  # continue that run's history, or start it
        super().__init__(name=name, project=project, save_dir=save_dir, offline=offline, log_model=log_model,
                         entity=entity, group=group, tags=tags, id=id, **resume)
        self.mode = "disabled" if disabled else "offline" if offline else "online"

    def describe(self) -> str:
        """One line: where the run is, and for an offline run the command that uploads it: every part of it, where
        it was resumed (an offline run resumed is a folder per part, with the same id; `wandb sync` uploads the
        parts of one run in order, and the last part alone would upload only the steps since the resume)."""
        if self.mode == "disabled":  # wandb hands out a run that writes nothing, with a folder never made
            return "none: W&B is disabled (WANDB_MODE=disabled), so nothing was logged"
        run = self.experiment
        if self.mode == "offline":
            folder = Path(run.dir).parent  # .../wandb/offline-run-<time>-<id>; run.dir is its files/ folder
            # offline-run-<date>_<time>-<id>, and -<n> after it for a part started in the same second as another
            part = re.compile(rf"offline-run-\d{{8}}_\d{{6}}-{re.escape(run.id)}(-\d+)?")
            parts = sorted((path for path in folder.parent.iterdir() if part.fullmatch(path.name)),
                           key=lambda path: path.name)
            if len(parts) > 1:
                return (f"{folder} (offline, resumed: {len(parts)} parts; upload them all with `wandb sync "
                        f"{' '.join(str(part) for part in parts)}`)")
            return f"{folder} (offline; upload with `wandb sync {folder}`)"
        return str(getattr(run, "url", None) or Path(run.dir).parent)

    def finish(self) -> None:
        """End the W&B run, so that a later run in the same process starts its own instead of reusing it."""
        if self._experiment is not None:
            self._experiment.finish()
            self._experiment = None


WANDB_LOGGER = f"{WandbLogger.__module__}.{WandbLogger.__name__}"  # the class path of the default logger


def run_name(root: Path) -> str:
    """The W&B run name when none is set: the run folder under `runs/`, `-` for `/` (runs/glue/rte -> glue-rte)."""
    parts = root.parts[1:] if root.parts[:1] == ("runs",) else root.parts
    return "-".join(parts) if parts and not root.is_absolute() else root.name or "run"


def default_logger_folders(loggers: Any, root: Path) -> None:
    """Give every configured logger that takes a `save_dir` and names none the run folder, before the config is
    validated: CSVLogger and TensorBoardLogger require one, so `--trainer.logger CSVLogger` alone would be refused."""
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        init_args = getattr(logger, "init_args", None)
        if init_args is not None and "save_dir" in init_args and init_args.save_dir is None:
            init_args.save_dir = str(root)


def configure_wandb(loggers: Any, root: Path, resumed: dict[str, Any]) -> None:
    """Fill in the parsed config's W&B loggers (their files are in the run folder: `default_logger_folders`): the
    run named after the folder, and a resumed run continuing the W&B run its checkpoint was saved by (`resumed`: the
    checkpoint's `LastCheckpoint` state), in that run's project and entity. W&B names a run by entity, project and
    id: the same id in another project would start a second run there holding only the steps since the resume, so
    the checkpoint's project wins over a `WANDB_PROJECT` or config that now names another, and the run says so."""
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        if getattr(logger, "class_path", None) != WANDB_LOGGER:
            continue
        init_args = logger.init_args
        if init_args.name is None:
            init_args.name = run_name(root)
        run_id = resumed.get("wandb_id")
        if not run_id or init_args.id not in (None, run_id):  # a run of the user's choice: theirs to place
            continue
        init_args.id = run_id
        for key, variable, default in (("project", "WANDB_PROJECT", DEFAULT_PROJECT), ("entity", "WANDB_ENTITY", None)):
            saved = resumed.get(f"wandb_{key}")  # absent from a checkpoint of an earlier litbert: as it was
            if not saved:
                continue
            given, setting = (getattr(init_args, key), f"trainer.logger.init_args.{key}") if getattr(init_args, key) \
                else (os.environ.get(variable), variable) if os.environ.get(variable) else (default, "the default")
            if given is not None and given != saved:
                rank_zero_info(f"litbert: the resumed run continues W&B run {run_id} in {key} {saved!r}, where its "
                               f"checkpoint was logged; {setting} names {given!r}, which would start a second run of "
                               f"that id there. Start a new run (without --ckpt_path) to log elsewhere.")
            setattr(init_args, key, saved)


class ContinuedCSVWriter(ExperimentWriter):
    """A resumed run's `CSVLogger` writer: it goes on with the metrics.csv of the run's earlier parts, in their
    folder. Lightning's would start a `version_<n+1>` folder beside it (the curve split in two), or, given the
    version, delete it. At its first write, once the resume was accepted and training logs, it drops the rows from
    `resumed_step` on (logged after the checkpoint by a part that was stopped: the resumed run logs those steps
    again) and keeps the file's columns, which a new metric widens as Lightning's does. Until then the folder stays
    as it was, hparams.yaml too: a resume refused for a changed setting leaves the log whole."""

    def __init__(self, log_dir: str, resumed_step: int) -> None:
        self.resumed_step: int | None = resumed_step
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        pass  # Lightning's removes metrics.csv from a folder that holds one: here it is the run's log so far

    def log_hparams(self, params: dict[str, Any]) -> None:
        self.hparams.update(params)  # written with the metrics, once the resumed run logs

    def save(self) -> None:
        if not self.metrics:
            return
        if self.resumed_step is not None:
            if self._fs.isfile(self.metrics_file_path):
                with self._fs.open(self.metrics_file_path, "r", newline="") as file:
                    reader = csv.DictReader(file)
                    rows = [row for row in reader if int(float(row["step"])) < self.resumed_step]
                    self.metrics_keys = list(reader.fieldnames or [])
                partial = f"{self.metrics_file_path}.partial"  # a kill while it is written leaves the log whole
                with self._fs.open(partial, "w", newline="") as file:
                    writer = csv.DictWriter(file, fieldnames=self.metrics_keys)
                    writer.writeheader()
                    writer.writerows(rows)
                self._fs.mv(partial, self.metrics_file_path)
            self.resumed_step = None
        save_hparams_to_yaml(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE), self.hparams)
        super().save()


def file_log_versions(loggers: list[Any]) -> list[str]:
    """The version folder (`version_<n>`, or the version it names) of each of the run's CSV and TensorBoard loggers:
    `LastCheckpoint` keeps them in every checkpoint, for a resumed run to go on in its own (`_earlier_log`)."""
    return [logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
            for logger in loggers if isinstance(logger, (CSVLogger, TensorBoardLogger))]


def _earlier_log(logger: CSVLogger | TensorBoardLogger, files: str, versions: list[str] | None) -> bool:
    """Point a resumed run's logger at the folder of the run's last log, where it holds such `files` (a glob): the
    version it names, or the newest `version_<n>` under the logger's folder that holds them and is one of the run's
    `versions` (`file_log_versions`, as its checkpoint keeps them; None for a checkpoint that does not), rather than
    a new one. (Not merely the newest: a run that logs to CSV and TensorBoard has a version folder for each, and
    runs given one `save_dir` have theirs side by side: the newest may be another run's.)"""
    if logger._version is not None:
        return any(Path(logger.log_dir).glob(files))
    for version in range(logger._get_next_version() - 1, -1, -1):
        if versions is None or f"version_{version}" in versions:
            logger._version = version
            if any(Path(logger.log_dir).glob(files)):
                return True
    logger._version = None
    return False


def continue_csv_logs(loggers: list[Any], resumed_step: int, versions: list[str] | None = None) -> None:
    """A run resumed at `resumed_step` logs into the folder of its last CSV log (`_earlier_log` of `versions`):
    `ContinuedCSVWriter`. Rank 0 only, as Lightning's loggers write; nothing where no earlier part logged to CSV."""
    for logger in loggers:
        if not isinstance(logger, CSVLogger) or rank_zero_only.rank != 0 or logger._experiment is not None:
            continue
        if _earlier_log(logger, ExperimentWriter.NAME_METRICS_FILE, versions):
            logger._experiment = ContinuedCSVWriter(logger.log_dir, resumed_step)


class ContinuedTensorBoardLogger(TensorBoardLogger):
    """A resumed run's `TensorBoardLogger`: it goes on in the version folder of the run's earlier parts, which
    TensorBoard shows as one run. Lightning's would start a `version_<n+1>` folder beside it, a second run of the
    steps since the resume. As it opens its event file, once the resume was accepted and the run logs, it removes the
    events of `resumed_step` on from the folder's earlier files (logged after the checkpoint by a part that was
    stopped: the resumed run logs those steps again; `drop_events_from`). SummaryWriter's `purge_step` marker would
    not do: TensorBoard's data server, its default reader, ignores it and drops a tag's points only from a step that
    tag is logged at again (the evaluation an earlier part ran as it ended, at its checkpoint's step, would stay),
    and its Python reader takes a run's first marker for the run's start. Lightning logs the hyperparameters (and
    graph) at step 0 at every fit, validate and test; the earlier parts hold them, and this logs them no more. Until
    it logs, the folder stays as it was: a resume refused for a changed setting leaves the log whole."""

    def __init__(self, logger: TensorBoardLogger, resumed_step: int) -> None:
        vars(self).update(vars(logger))  # the logger as configured; it has written nothing yet
        self.resumed_step = resumed_step

    @property
    def experiment(self) -> Any:
        if self._experiment is None:
            drop_events_from(self.log_dir, self.resumed_step)
        return super().experiment

    @rank_zero_only
    def log_hyperparams(self, params: Any, metrics: Any = None, step: int | None = None) -> None:
        pass  # in the earlier parts' events (and hparams.yaml), at step 0

    @rank_zero_only
    def log_graph(self, model: Any, input_array: Any = None) -> None:
        pass  # as log_hyperparams

    @rank_zero_only
    def save(self) -> None:
        if self._experiment is not None:  # Lightning saves after logging the hyperparameters: nothing to write
            super().save()


def drop_events_from(folder: str, step: int) -> None:
    """Rewrite the TensorBoard event files in `folder` without their events of `step` on, but for the
    hyperparameters (which a resume from step 0 would lose: `ContinuedTensorBoardLogger`). An event file is a
    sequence of records (a length, its checksum, one serialized `Event`, its checksum), kept byte for byte; a record
    cut short (by a part killed as it wrote) goes, as readers stop there. Each file is replaced whole, so a kill
    meanwhile leaves it as it was; one left with no event but its header is removed."""
    from google.protobuf.message import DecodeError

    try:
        from tensorboard.compat.proto.event_pb2 import Event
    except ImportError:  # Lightning's TensorBoardLogger writes with tensorboardX where tensorboard is missing
        from tensorboardX.proto.event_pb2 import Event
    for path in sorted(Path(folder).glob("*tfevents*")):
        data, kept, start, logged = path.read_bytes(), bytearray(), 0, False
        while start + 12 <= len(data):
            (length,) = struct.unpack_from("<Q", data, start)
            end = start + 12 + length + 4
            if end > len(data):
                break
            try:
                event = Event.FromString(data[start + 12:end - 4])
            except DecodeError:
                break  # readers stop at a record they cannot read, too
            # The hyperparameters stay: Lightning logs them at step 0 only, and the resumed run not again.
            if event.step < step or any(value.metadata.plugin_data.plugin_name == "hparams"
                                        for value in event.summary.value):
                kept += data[start:end]
                logged |= event.WhichOneof("what") != "file_version"
            start = end
        if len(kept) == len(data):
            continue
        if not logged:  # nothing left but the file's header
            path.unlink()
            continue
        partial = path.with_name(".litbert-events.partial")  # no "tfevents" in its name: not read meanwhile
        partial.write_bytes(kept)
        os.replace(partial, path)


def continue_tensorboard_logs(loggers: list[Any], resumed_step: int, versions: list[str] | None = None) -> list[Any]:
    """The run's loggers, each TensorBoardLogger of Lightning's that logged an earlier part of the run (its event
    files, `_earlier_log` of `versions`) replaced by a `ContinuedTensorBoardLogger` of its settings. Rank 0 only, as
    Lightning's loggers write."""
    continued = list(loggers)
    for index, logger in enumerate(loggers):
        if type(logger) is not TensorBoardLogger or rank_zero_only.rank != 0 or logger._experiment is not None:
            continue  # (a subclass of the user's keeps its own ways)
        if _earlier_log(logger, "*tfevents*", versions):
            continued[index] = ContinuedTensorBoardLogger(logger, resumed_step)
    return continued


def file_logs(loggers: list[Any]) -> list[tuple[str, str]]:
    """What each of the run's file loggers wrote, as (kind, path): a CSV logger's metrics.csv, a TensorBoard logger's
    folder (one for all of a resumed run's parts)."""
    logs = []
    for logger in loggers:
        if isinstance(logger, CSVLogger):
            logs.append(("CSV log", logger.experiment.metrics_file_path))
        elif isinstance(logger, TensorBoardLogger):
            logs.append(("TensorBoard log", logger.log_dir))
    return logs


def finish_tracking(exit_code: int) -> None:
    """End an open W&B run now, so that its closing lines come before litbert's message, not after it, with the
    run's exit status (128 + N for a run stopped by signal N, as the process exits: W&B records it)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish(exit_code=exit_code)


class LogConfigCallback(SaveConfigCallback):
    """Saves the resolved config as `<default_root_dir>/config.yaml` and logs it to the tracker.

    Lightning's callback saves it into `trainer.log_dir`, a logger's own folder (`<save_dir>/version_0` for a
    CSVLogger), where neither the run-folder checks (`tasks.run.folders`) nor `train.py predict --config
    <run>/config.yaml` look; litbert builds it with `save_to_log_dir=False`.

    A run that `resumes` changes its folder's records once the checkpoint is loaded and checked, after every restore
    (under FSDP the module's comes after `on_fit_start`): as its training starts, or as fit ends for a finished run,
    which trains no step. The config.yaml is then written and the metrics.json of the run's earlier end removed (it
    is written again when this run finishes). A resume refused for a changed setting leaves both as they were: the
    config does not claim a setting the run never trained with, and the finished run keeps its results."""

    def __init__(self, *args: Any, resumes: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resumes = resumes

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not self.resumes:
            super().setup(trainer, pl_module, stage)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._accept_resume(trainer, pl_module)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._accept_resume(trainer, pl_module)  # nothing where training started

    def _accept_resume(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.resumes or self.already_saved:
            return
        super().setup(trainer, pl_module, "fit")  # on every rank: it agrees `already_saved` over them
        if trainer.is_global_zero:
            remove_earlier_metrics(Path(trainer.default_root_dir) / "metrics.json")

    def save_config(self, trainer, pl_module, stage: str) -> None:
        # Runs on rank 0 only: nothing here may communicate (`trainer.log_dir` broadcasts, so it is not used).
        root = Path(trainer.default_root_dir)
        root.mkdir(parents=True, exist_ok=True)
        self.parser.save(self.config, root / self.config_filename, skip_none=False, overwrite=self.overwrite,
                         multifile=self.multifile)
        for logger in trainer.loggers:
            logger.log_hyperparams({"config": self.config.as_dict()})


class AttentionMaps(L.Callback):
    """After every validation, draws the attention probabilities of every layer and head for one fixed sentence
    (`encoders.plots.plot_attention`) and logs the picture to W&B as `attention/maps`, so a run shows how its
    attention patterns form. Add it with `--trainer.callbacks+=tasks.run.tracking.AttentionMaps`; it needs
    matplotlib, a W&B logger and a datamodule with a tokenizer, and says so at the start of training when one is
    missing.

    Args:
        sentence: The sentence drawn at every validation.
    """

    def __init__(self, sentence: str = "The movie was not good, but the actors saved it.") -> None:
        self.sentence = sentence
        self.logger: LightningWandbLogger | None = None  # the run's W&B logger, found as fitting starts

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from encoders.plots import pyplot

        pyplot()  # ImportError with the install command when matplotlib is missing
        self.logger = next((logger for logger in trainer.loggers if isinstance(logger, LightningWandbLogger)), None)
        if self.logger is None:  # W&B may be any of the run's loggers, not only the first
            found = ", ".join(type(logger).__name__ for logger in trainer.loggers) or "none"
            raise ValueError(f"AttentionMaps logs pictures to W&B, but the run's logger is {found}; use the default "
                             f"W&B logger (beside others: --trainer.logger+=...) or remove the callback.")
        if getattr(trainer.datamodule, "tokenizer", None) is None:
            raise ValueError("AttentionMaps needs the datamodule's tokenizer to encode its sentence; this "
                             "datamodule has none.")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        from encoders.plots import plot_attention

        with tempfile.TemporaryDirectory() as folder:
            path = plot_attention(pl_module.encoder, trainer.datamodule.tokenizer, Path(folder), self.sentence)
            self.logger.log_image("attention/maps", [str(path)], step=trainer.global_step)
