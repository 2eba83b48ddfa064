"""The run folder (`trainer.default_root_dir`): what a run writes there, and the rules that keep two runs apart.

A second run into a used folder stops, or with `--overwrite true` replaces the first, instead of silently mixing
its checkpoints, metrics and export with the earlier run's; resuming (`--ckpt_path`) continues the run in place. A
run never removes or writes over its own input (a checkpoint or tokenizer inside the folder it would replace). Its
records, `config.yaml` and `metrics.json`, change with a resume once the resume is accepted
(`tasks.run.tracking.LogConfigCallback`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from data.sources import remove_path
from tasks.run.checkpoint_io import LAST

# What a run writes into its folder; any of them there means the folder holds a run.
RUN_FILES = ("config.yaml", "metrics.json", "checkpoints", "submission")
# What its loggers write there (`tasks.run.tracking.default_logger_folders`: CSV and TensorBoard logs, W&B's files),
# replaced with the run: left, a CSVLogger would log the new run beside the old one's, as its version_1. A logger
# that takes the run's W&B settings (`--trainer.logger CSVLogger`) has no name, and its versions are in the folder.
LOG_FOLDERS = ("lightning_logs", "wandb", "version_[0-9]*")


class RunFolderError(ValueError):
    """The run folder already holds another run."""


def run_root(config: Any) -> Path:
    return Path(config.trainer.default_root_dir or ".")


def export_path(config: Any) -> Path:
    return Path(config.export_dir) if config.export_dir else run_root(config) / "model"


def remove_earlier_metrics(path: Path) -> None:
    """A resumed run removes the metrics.json of the run's earlier end: it is the mark of a finished run, and one
    that now stops or diverges must not leave it behind as if it had finished. Written again when it does."""
    if path.exists():
        path.unlink()
        print(f"litbert: removed {path} of the run's earlier end; it is written again when this run finishes",
              flush=True)


def check_run_folder(config: Any, resume_path: str | None) -> None:
    """Refuse a run into a folder that holds another, or clear it for `--overwrite`; nothing when resuming."""
    if resume_path is not None:
        return
    root = run_root(config)
    used = [root / name for name in RUN_FILES if (root / name).exists()]
    export = export_path(config)
    # <root>/model is the run's export whether or not this run exports: one that does not (--export false) left the
    # earlier run's model beside its own metrics.json after --overwrite. (--export_dir needs --export.)
    if export.exists() and any(export.iterdir()):
        used.append(export)
    if not used:
        return
    if config.ckpt_path == "last" and all(
            path.name == "config.yaml" or path.name == "checkpoints" and not any(path.rglob("*.ckpt"))
            for path in used):
        # A relaunch (a requeued job) of a run that stopped before its first checkpoint: nothing to resume and
        # nothing of value to keep, so it starts afresh instead of being refused for its own config.yaml.
        for path in used:  # every rank of a job may get here: what another removed is gone
            remove_path(path)
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
        last = root / "checkpoints" / LAST
        resume = f"Resume it with --ckpt_path {last}, " if last.is_file() else \
            f"It holds no {last.relative_to(root)} to resume from: "  # stopped before its first, or saved none
        raise RunFolderError(
            f"trainer.default_root_dir={root} already holds a run ({listing}). {resume}choose another "
            f"--trainer.default_root_dir, or pass --overwrite true to replace it.")
    used += [path for name in LOG_FOLDERS for path in sorted(root.glob(name)) if path.is_dir()]
    for path in used:  # every rank of a job may get here: what another removed is gone
        remove_path(path)
    print(f"litbert: --overwrite: removed the earlier run's {', '.join(p.name for p in used)} from {root}",
          flush=True)
