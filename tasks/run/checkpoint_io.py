"""Checkpoint files a run can trust: `SafeCheckpointIO` writes a checkpoint to a temporary file beside the target,
syncs it and renames it over the target (POSIX rename is atomic), so a kill during a save leaves the previous
checkpoint whole. It reads every checkpoint, local or remote (http, https and fsspec URLs), with
`torch.load(weights_only=True)`, which refuses to unpickle code: a crafted checkpoint cannot execute anything.
The checkpoint a run resumes from is first checked against the CRC-32 of each of its entries, which torch.load does
not read: changed bytes in a tensor (a bad copy, a failing disk) would otherwise resume as other weights.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.plugins.io import TorchCheckpointIO

from data.sources import replaced_when_whole
from encoders.checkpoints import CheckpointError

LAST = "last.ckpt"  # the newest training state of a run, in <default_root_dir>/checkpoints


def _is_remote(path: str | os.PathLike[str]) -> bool:
    return "://" in str(path) and not str(path).startswith("file://")


def load_checkpoint_file(path: str | os.PathLike[str], map_location: Any = "cpu",
                         whole: bool = False) -> dict[str, Any]:
    """A Lightning checkpoint read with `torch.load(weights_only=True)`, from a local path, an http(s) URL
    (downloaded to a temporary file, never cached under its name) or another fsspec URL. `whole`: check the CRC-32
    of every entry of a local or downloaded file first (`check_whole`)."""
    path = str(path)
    try:
        if path.startswith(("http://", "https://")):
            with tempfile.TemporaryDirectory() as folder:
                local = Path(folder) / "download.ckpt"
                with urllib.request.urlopen(path, timeout=60) as response, local.open("wb") as out:  # noqa: S310
                    while chunk := response.read(1 << 20):
                        out.write(chunk)
                if whole:
                    check_whole(local, path)
                return torch.load(local, map_location=map_location, weights_only=True)
        if _is_remote(path):
            with get_filesystem(path).open(path, "rb") as handle:
                return torch.load(handle, map_location=map_location, weights_only=True)
        if not Path(path).is_file():
            raise CheckpointError(f"Checkpoint {path} does not exist; check --ckpt_path (runs keep theirs in "
                                  f"<default_root_dir>/checkpoints/, the newest as {LAST}).")
        if whole:
            check_whole(Path(path), path)
        return torch.load(path, map_location=map_location, weights_only=True, mmap=True)
    except pickle.UnpicklingError as error:
        reason = str(error).splitlines()[0]
        raise CheckpointError(
            f"Checkpoint {path} holds objects other than tensors and plain data ({reason}). litbert reads "
            f"checkpoints with torch.load(weights_only=True), which refuses to run code from a file; this one was "
            f"not written by litbert, or was tampered with. Use a checkpoint from a run you trust."
        ) from None
    except (RuntimeError, EOFError, OSError) as error:
        if isinstance(error, CheckpointError):
            raise
        raise CheckpointError(f"Checkpoint {path} cannot be read ({str(error).splitlines()[0]}); it is truncated or "
                              f"corrupt. {earlier_checkpoints(path)}") from None


def check_whole(file: Path, name: str) -> None:
    """Read every entry of the checkpoint `file` (a zip archive, as torch.save writes) against the CRC-32 stored
    with it. torch.load never reads them, so a checkpoint whose tensor bytes changed loads without an error. An
    entry stored without one (CRC 0: torch.serialization.set_crc32_options(False)) is not checked, nor a file that
    is no whole archive (torch.load says it is truncated or corrupt)."""
    try:
        archive = zipfile.ZipFile(file)
    except zipfile.BadZipFile:
        return
    with archive:
        for entry in archive.infolist():
            if entry.CRC == 0:
                continue
            try:
                with archive.open(entry) as data:
                    while data.read(1 << 24):  # zipfile raises at the end of an entry that does not match its CRC
                        pass
            except zipfile.BadZipFile as error:
                raise CheckpointError(f"Checkpoint {name} is corrupt ({error}): its bytes are not the ones it was "
                                      f"saved with. {earlier_checkpoints(name, copy=True)}"
                                      ) from None


def earlier_checkpoints(path: str | os.PathLike[str], copy: bool = False) -> str:
    """The way on from an unreadable checkpoint: the other checkpoints beside a local one (a run's best-<step>.ckpt
    beside its last.ckpt, newest first) to resume from, or what to do where there are none. `copy`: a good copy of
    this one would do too."""
    copy_of_it = ", or from a good copy of this one" if copy else ""
    folder = Path(path).parent
    if _is_remote(path) or not folder.is_dir():
        return f"Resume from an earlier checkpoint of the run{copy_of_it}."
    others = sorted((p for p in folder.glob("*.ckpt") if p.name != Path(path).name and p.is_file()),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    if not others:
        return (f"{folder} holds no other checkpoint: resume from a copy of this one saved elsewhere, or start the run "
                f"again (into its folder with --overwrite true).")
    return f"Resume from another checkpoint of the run{copy_of_it}: --ckpt_path {' or '.join(map(str, others[:3]))}."


class SafeCheckpointIO(TorchCheckpointIO):
    """Atomic local saves; `weights_only` loads of every checkpoint (see the module docstring)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike[str],
                        storage_options: Any | None = None) -> None:
        if _is_remote(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        if storage_options is not None:
            raise TypeError("SafeCheckpointIO.save_checkpoint takes no storage_options for local files.")
        path = Path(path)
        try:
            with replaced_when_whole(path, sole_writer=True) as temporary, temporary.open("wb") as handle:
                torch.save(checkpoint, handle)
                handle.flush()
                os.fsync(handle.fileno())
        except RuntimeError as error:
            # torch reports a failed write (a full disk) as its own RuntimeError, the OSError as its context.
            if isinstance(error.__context__, OSError):
                cause = error.__context__
                raise OSError(cause.errno, f"{cause.strerror}; the checkpoint was not written (the previous one at "
                                           f"that path, if any, is whole)", str(path)) from error
            raise
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a power loss
        finally:
            os.close(directory)

    def load_checkpoint(self, path: str | os.PathLike[str], map_location: Callable | None = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        if weights_only is False:
            raise CheckpointError(f"Refusing to load {path} with weights_only=False: litbert never unpickles code "
                                  f"from checkpoints.")
        return load_checkpoint_file(path, map_location if map_location is not None else "cpu")

