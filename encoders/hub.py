"""Checkpoints and tokenizers named by a Hugging Face Hub id, as transformers' `from_pretrained` takes them.

A name is a local folder (or file) when one of that name exists, as in transformers; otherwise `org/name` (or a bare
`name`, as the hub's first models such as `bert-base-uncased` have it), with an optional revision after `@` (a
branch, tag or commit: `org/name@v1.0`, the form of the hub's own `hf://` paths), is the hub model of that id,
downloaded by `huggingface_hub.snapshot_download` into the hub cache (`HF_HUB_CACHE`, by default `$HF_HOME/hub`).
Once cached, the same id loads without a network under `HF_HUB_OFFLINE=1`.

Deliberate deviations from a plain `snapshot_download`: only the files litbert reads are fetched (JSON configs,
vocabularies, safetensors weights, and `pytorch_model*.bin` only where a model has no safetensors), not a repo's
TensorFlow, Flax or ONNX copies; each id is resolved once a process; and whether the hub answers at all is asked
once a process, within HF_HUB_ETAG_TIMEOUT (`unanswered`), the datasets of `data.sources` included.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from huggingface_hub import HfApi, constants, errors, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import validate_repo_id

# huggingface_hub 2 tells a snapshot cached in part from one not cached at all; older versions raise the latter.
IncompleteSnapshotError = getattr(errors, "IncompleteSnapshotError", ())

TOKENIZER_FILES = ("*.json", "*.txt", "*.model")  # configs, vocabularies and merges, sentencepiece models
WEIGHT_FILES = ("*.safetensors",)
OLD_WEIGHT_FILES = ("pytorch_model*.bin",)  # read only where a model has no safetensors


class HubError(FileNotFoundError):
    """A name that is neither a local path nor a hub model litbert can have. The message names it and the way on."""


def parse_id(name: str, bare: bool = False) -> tuple[str, str | None] | None:
    """`org/name[@revision]` as (repo id, revision or None); None where `name` is not of that form. `bare` also takes
    a name without its `org/`, as the hub's first models have it (`bert-base-uncased`): the hub redirects it to the
    organisation's copy, transformers loads it, and the hub caches of transformers' users hold it by that name."""
    repo, at, revision = str(name).partition("@")
    if repo.count("/") not in ((0, 1) if bare else (1,)) or (at and not revision):
        return None
    try:
        validate_repo_id(repo)
    except HFValidationError:
        return None
    return repo, revision or None


def local_path(name: str | os.PathLike[str], weights: bool = True, setting: str | None = None) -> Path:
    """The local folder or file that `name` names: itself where it exists, else the cached snapshot of the hub id
    (downloaded first unless HF_HUB_OFFLINE is set). `weights=False` fetches a tokenizer's files alone; errors name
    `setting` (`model.pretrained`) where given."""
    label = f"{setting}={name}" if setting else str(name)
    path = Path(name).expanduser()
    if path.exists():
        return path
    parsed = parse_id(str(name), bare=True)
    if parsed is None:
        raise HubError(f"{label} does not exist (relative to {Path.cwd()}). Give a local folder, or a Hugging Face "
                       f"Hub id: org/name (or a bare name such as bert-base-uncased), or org/name@revision for a "
                       f"branch, tag or commit.")
    repo, revision = parsed
    try:
        folder = _snapshot(repo, revision, TOKENIZER_FILES + WEIGHT_FILES if weights else TOKENIZER_FILES,
                           constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE)
        if weights and not any(folder.glob("*.safetensors")):
            folder = _snapshot(repo, revision, OLD_WEIGHT_FILES, constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE)
    except HubError as error:
        raise HubError(f"{label}: {error}") from None
    return folder


@functools.cache
def _snapshot(repo: str, revision: str | None, patterns: tuple[str, ...], cache: str, offline: bool) -> Path:
    # The cache folder and offline mode are part of the key: a process that changes them asks again.
    fetch = f"`hf download {repo}{f' --revision {revision}' if revision else ''}`"
    way_on = (f"Download it on a machine with a network ({fetch}) and copy its hub cache here, pointing HF_HOME "
              f"(or HF_HUB_CACHE) at the copy; or give the folder of a local copy instead of the id.")
    unreachable = None if offline else unanswered(repo, revision)  # then only the cache is read
    try:
        return Path(snapshot_download(repo, revision=revision, allow_patterns=list(patterns), cache_dir=cache,
                                      local_files_only=unreachable is not None))
    except GatedRepoError:
        raise HubError(f"{repo} is a gated model on the Hugging Face Hub: accept its terms on "
                       f"https://huggingface.co/{repo} and log in (`hf auth login`, or set HF_TOKEN).") from None
    except RepositoryNotFoundError:
        raise HubError(f"no local folder of that name, and the Hugging Face Hub has no model {repo} (or it is "
                       f"private: log in with `hf auth login`, or set HF_TOKEN). Check the name.") from None
    except RevisionNotFoundError:
        raise HubError(f"the Hugging Face Hub model {repo} has no revision {revision!r} (a branch, tag or commit). "
                       f"Check the part after '@'.") from None
    except LocalEntryNotFoundError as error:  # not cached (or cached in part), and the hub was not asked or reached
        reason = ("HF_HUB_OFFLINE is set, so litbert looks only in the cache" if offline else
                  f"the Hugging Face Hub cannot be reached ({type(unreachable or error.__cause__ or error).__name__}: "
                  f"check the network; with HF_HUB_OFFLINE=1 litbert looks only in the cache)")
        cached = f"is not in the hub cache {cache}"
        if isinstance(error, IncompleteSnapshotError):  # e.g. its tokenizer was fetched alone, or a download cut
            cached = f"is only partly in the hub cache {cache} ({str(error).split(': ', 1)[-1].split('. ')[0]})"
        raise HubError(f"no local folder of that name, and the Hugging Face Hub model {repo}"
                       f"{f' at revision {revision}' if revision else ''} {cached}: {reason}. {way_on}") from None
    except HfHubHTTPError as error:
        raise HubError(f"the Hugging Face Hub refused the download of {repo} ({str(error).splitlines()[0]}). "
                       f"{way_on}") from None


# Whether the hub at each endpoint answered (None) or not (the error), asked once a process: a hub that does not
# answer costs HF_HUB_ETAG_TIMEOUT a question, and a run asks for several splits, models and tokenizers.
_verdicts: dict[str, Exception | None] = {}


def unanswered(repo: str, revision: str | None = None, repo_type: str | None = None) -> Exception | None:
    """The error where the hub does not answer about `repo` (a model, or a `repo_type` "dataset") within
    HF_HUB_ETAG_TIMEOUT seconds (10), else None: asked before a call that waits longer. snapshot_download and
    `HfApi.whoami` ask with no time limit, and datasets' load_dataset retries for half a minute: a network that drops
    packets, or a proxy that never answers, would hold the run there for minutes or for ever, where transformers
    gives up after that timeout. The verdict is the hub's, not the repo's: the first question to an endpoint
    (HF_ENDPOINT) is its answer for the rest of the process (`forget_verdicts` asks again)."""
    endpoint = constants.ENDPOINT
    if endpoint in _verdicts:
        return _verdicts[endpoint]
    verdict = _ask(repo, revision, repo_type)
    if not isinstance(verdict, HFValidationError):  # a malformed id, refused before any question: no verdict
        _verdicts[endpoint] = verdict
    return verdict


def forget_verdicts() -> None:
    """Ask each hub again whether it answers (a process whose network changed; tests of several networks)."""
    _verdicts.clear()


def _ask(repo: str, revision: str | None, repo_type: str | None) -> Exception | None:
    try:
        HfApi().repo_info(repo, revision=revision, repo_type=repo_type, timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except HfHubHTTPError:  # it answered: snapshot_download asks again and says what (not found, gated, ...)
        return None
    except Exception as error:  # no answer: httpx's and the OS's connection errors share no base class here
        return error
    return None
