"""Experiment tracking with Weights & Biases through Lightning's `WandbLogger`.

Online when the user is logged in (an API key in `WANDB_API_KEY` or in the netrc file that `wandb login` writes),
otherwise offline into the run folder, with one line on how to upload the run later. `WANDB_MODE` set by the user
wins over both. Lightning creates the run on rank 0 only. A run can track with CSV instead
(`--trainer.logger CSVLogger`) or not at all (`--trainer.logger false`).
"""

from __future__ import annotations

import netrc
import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.utilities import rank_zero_info

from encoders.choices import check_choice

TrackingMode = Literal["auto", "online", "offline"]


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
        project: W&B project.
        name: Display name of the run.
        save_dir: Folder of the `wandb/` run files; train.py sets it to the trainer's `default_root_dir`.
        mode: `auto` (online when logged in, else offline), `online` or `offline`.
        log_model: Upload checkpoints as artifacts: False, True (at the end) or `all` (each one as it is saved).
        entity: W&B team or user.
        group: Group of runs (e.g. a sweep).
        tags: Tags of the run.
        id: Id of a run to continue; train.py sets it, when resuming from a checkpoint, to the run the checkpoint
            was saved by.
    """

    def __init__(
        self,
        project: str = "litbert",
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
        if "WANDB_MODE" in os.environ:  # the user's explicit choice, e.g. `disabled` in CI
            offline = os.environ["WANDB_MODE"] in ("offline", "dryrun")
        if offline and log_model:  # W&B cannot upload artifacts from an offline run
            rank_zero_info("litbert: W&B is offline, so checkpoints are not logged as artifacts (log_model ignored); "
                           "they stay in the run's checkpoints folder.")
            log_model = False
        save_dir = save_dir or "."
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        resume = {"resume": "allow"} if id is not None else {}  # continue that run's history, or start it
        super().__init__(name=name, project=project, save_dir=save_dir, offline=offline, log_model=log_model,
                         entity=entity, group=group, tags=tags, id=id, **resume)
        self.mode = "offline" if offline else "online"

    def describe(self) -> str:
        """One line: where the run is, and for an offline run the command that uploads it."""
        run = self.experiment
        if self.mode == "offline":
            folder = Path(run.dir).parent  # .../wandb/offline-run-<time>-<id>; run.dir is its files/ folder
            return f"{folder} (offline; upload with `wandb sync {folder}`)"
        return str(getattr(run, "url", None) or Path(run.dir).parent)


    def finish(self) -> None:
        """End the W&B run, so that a later run in the same process starts its own instead of reusing it."""
        if self._experiment is not None:
            self._experiment.finish()
            self._experiment = None


class LogConfigCallback(SaveConfigCallback):
    """Saves the resolved config beside the run (Lightning's `config.yaml`) and logs it to the tracker."""

    def save_config(self, trainer, pl_module, stage: str) -> None:
        # Runs on rank 0 only: nothing here may communicate (`trainer.log_dir` broadcasts, so it is not used).
        for logger in trainer.loggers:
            logger.log_hyperparams({"config": self.config.as_dict()})
