"""The exported model as others receive it: its model card, and its push to the Hugging Face Hub.

Every run that exports writes `README.md` into the export folder: what was trained (task, architecture, parameters,
base model), on what data, with which config and command line, and the final metrics (those of metrics.json) as a
table, under the hub's metadata header (`huggingface_hub.ModelCardData`). `--push_to_hub org/name` (or
`org/name@branch`) then uploads that folder, tokenizer and card included, at the end of the run; a push that could
not succeed (no token, a token the hub refuses, no network, HF_HUB_OFFLINE) is refused before training.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, ModelCardData, constants, get_token
from huggingface_hub.errors import HfHubHTTPError

from encoders.checkpoints import LITBERT_CONFIG
from encoders.hub import OLD_WEIGHT_FILES, TOKENIZER_FILES, WEIGHT_FILES, HubError, parse_id, unanswered
from tasks.base import EncoderTask
from tasks.run.export import litbert_format_reason
from tasks.run.folders import export_path, run_root

README = "README.md"
PIPELINE_TAGS = {"mlm": "fill-mask", "sequence_classification": "text-classification",
                 "token_classification": "token-classification"}  # by head kind: the hub's name of the task
# What a loader reads: files of these kinds in the repo that the export does not hold are deleted by the push, so
# that the repo never mixes this model with an earlier one (a config.json beside a new litbert.json, say).
MODEL_FILES = [*TOKENIZER_FILES, *WEIGHT_FILES, *OLD_WEIGHT_FILES]


def check_push(config: Any, export_dir: Path) -> None:
    """Refuse, before training, a `--push_to_hub` that cannot succeed at the end of the run."""
    target = config.push_to_hub
    if target is None:
        if config.hub_private is not None:
            raise ValueError(f"--hub_private {str(config.hub_private).lower()} sets the visibility of the repo "
                             f"--push_to_hub uploads to, but --push_to_hub is not set; set it or drop --hub_private.")
        return
    if parse_id(target) is None:
        raise ValueError(f"--push_to_hub {target}: not a Hugging Face Hub id; give org/name (your user name or an "
                         f"organisation, then the model's name), or org/name@branch.")
    repo = parse_id(target)[0]
    later = f"drop --push_to_hub and upload the export later with `hf upload {repo} {export_dir}`"
    if not config.export:
        raise ValueError(f"--push_to_hub {target} uploads the exported model, but --export is false; drop one.")
    if constants.HF_HUB_OFFLINE:
        raise ValueError(f"--push_to_hub {target} uploads at the end of the run, but HF_HUB_OFFLINE is set: unset "
                         f"it, or {later}.")
    if get_token() is None:
        raise ValueError(f"--push_to_hub {target} uploads at the end of the run, but no Hugging Face token is "
                         f"found (HF_TOKEN is unset, and none is stored in {constants.HF_TOKEN_PATH}). Set HF_TOKEN "
                         f"to a token with write access (https://huggingface.co/settings/tokens) or log in with "
                         f"`hf auth login`; or {later}.")
    try:  # the network and the token, asked now rather than after hours of training
        # whoami waits for ever for a hub that does not answer (a proxy that takes the connection and says nothing)
        unreachable = unanswered(repo)
        if unreachable is not None:
            raise unreachable
        HfApi().whoami()
    except HfHubHTTPError as error:
        raise ValueError(f"--push_to_hub {target}: the Hugging Face Hub refused the token "
                         f"({str(error).splitlines()[0]}). Set HF_TOKEN to a valid token with write access, or "
                         f"{later}.") from None
    except Exception as error:  # no network: httpx's and the OS's connection errors share no base class here
        raise ValueError(f"--push_to_hub {target}: the Hugging Face Hub cannot be reached ({type(error).__name__}: "
                         f"{error}). Check the network (or a proxy), or {later}.") from None


def push(directory: Path, target: str, private: bool | None) -> str:
    """Upload the export folder to the hub repo `target` (`org/name` or `org/name@branch`), creating the repo (and
    branch) where absent. Returns the URL of the commit."""
    repo, branch = parse_id(target)
    api = HfApi()
    try:
        api.create_repo(repo, private=private, exist_ok=True)
        if private is not None:  # an existing repo keeps its visibility unless told: --hub_private is honoured
            api.update_repo_settings(repo, private=private)
        if branch is not None:
            api.create_branch(repo, branch=branch, exist_ok=True)
        commit = api.upload_folder(repo_id=repo, folder_path=directory, revision=branch, delete_patterns=MODEL_FILES,
                                   commit_message="litbert: the exported model, its tokenizer and card")
    except Exception as error:  # an HTTP status, or the network lost since the check before training
        reason = str(error).splitlines()[0] if isinstance(error, HfHubHTTPError) else \
            f"{type(error).__name__}: {error}"
        raise HubError(f"--push_to_hub {target}: the upload failed ({reason}). The model stays in "
                       f"{directory}: upload it with `hf upload {repo} {directory}"
                       f"{f' --revision {branch}' if branch else ''}`.") from None
    return commit.commit_url


def write_card(directory: Path, model: EncoderTask, cli: Any, metrics: dict[str, float | int],
               trainer: Any) -> Path:
    """README.md in the export folder `directory` (see the module docstring). `model` is the exported task,
    unsharded."""
    config = cli.config
    init = config.model.init_args
    kind = getattr(model.head, "kind", None)
    header = ModelCardData(
        base_model=_hub_id(init.get("pretrained") or init.get("teacher")),
        datasets=_hub_id(config.data.init_args.get("dataset")),
        library_name="transformers" if (directory / "config.json").exists() else None,
        pipeline_tag=PIPELINE_TAGS.get(kind), tags=["litbert", *([kind] if kind else [])])
    data = config.data.init_args.as_dict()
    data_lines = [f"- `{key}`: {json.dumps(value) if isinstance(value, dict | list) else value}"
                  for key, value in data.items() if value is not None and key != "seed"]
    monitor, mode = model.monitor
    command = shlex.join(["python", "train.py", *getattr(cli, "command_line", [])])
    text = "\n".join([
        "---", header.to_yaml(), "---", "",
        f"# {config.push_to_hub or run_root(config).resolve().name}", "",
        "Trained with litbert.", "",
        "## Model", "",
        "| | |", "|---|---|", *(f"| {key} | {value} |" for key, value in _model_rows(model, init, directory)), "",
        "## Data", "",
        f"`{config.data.class_path}`, with" if data_lines else f"`{config.data.class_path}`.", "", *data_lines, "",
        "## Training", "",
        f"{trainer.global_step} optimizer steps, precision {trainer.precision}, seed {config.seed_everything}, data "
        f"seed {data.get('seed')}. The command line:", "",
        "```bash", command, "```", "",
        "The resolved config:", "",
        "```yaml", cli.parser.dump(config, skip_none=False).strip(), "```", "",
        "## Results", "",
        f"The final metrics (metrics.json) of the exported weights, the best checkpoint by `{monitor}` ({mode}):",
        "",
        "| Metric | Value |", "|---|---|", *(f"| {key} | {_value(value)} |" for key, value in metrics.items()), "",
        "## Use", "",
        # The export's own place, not `directory`: the export is written beside it and renamed into place.
        *_loading(directory, config.push_to_hub.partition("@")[0] if config.push_to_hub
                  else str(export_path(config))), *_cut_inputs(data, directory), "",
    ])
    path = directory / README
    path.write_text(text, encoding="utf-8")
    return path


def _model_rows(model: EncoderTask, init: Any, directory: Path) -> list[tuple[str, str]]:
    """The card's table of what was trained: task, architecture, parameters, where it started, format."""
    kind = getattr(model.head, "kind", None)
    labels = model.export_labels()
    encoder = model.encoder.config
    layers = f"{encoder.num_layers} layer{'s' if encoder.num_layers != 1 else ''}"
    parameters = {id(p): p for part in (model.encoder, model.head) for p in part.parameters()}  # the tied once
    total = sum(p.numel() for p in parameters.values())
    if init.get("pretrained"):
        start = _link(init.pretrained)
    elif init.get("teacher") and "student" in init and init.student is None:  # Distillation's default student
        start = "every other layer of the teacher"
    else:
        start = "none: trained from scratch"
    return [
        ("Task", f"`{type(model).__module__}.{type(model).__name__}` ({PIPELINE_TAGS.get(kind, kind)})"
                 + (f"; labels {', '.join(labels)}" if labels else "")
                 + (f"; multi-label: the labels whose probability exceeds {model.threshold}"
                    if model.problem_type == "multi_label_classification" else "")),
        ("Architecture", f"{layers}, hidden size {encoder.hidden_size}, {encoder.num_heads} heads, feed-forward "
                         f"{encoder.intermediate_size} ({encoder.activation}), {encoder.position} positions, "
                         f"{encoder.norm_placement}-norm {encoder.norm}, vocabulary {encoder.vocab_size} (preset "
                         f"{encoder.name})"),
        ("Parameters", f"{total:,} (of which the head's {total - model.encoder.num_parameters():,})"),
        ("Base model", start),
        *([("Teacher", _link(init.teacher))] if init.get("teacher") else []),
        ("Format", _format(directory, model)),
    ]


def _hub_id(name: str | None) -> str | None:
    """The hub id (without its revision) that `name` names, where it names one rather than a local path."""
    if name is None or Path(name).expanduser().exists() or parse_id(name, bare=True) is None:
        return None
    return parse_id(name, bare=True)[0]


def _link(name: str) -> str:
    repo = _hub_id(name)
    return f"[{name}](https://huggingface.co/{repo})" if repo else f"`{name}` (a local folder)"


def _format(directory: Path, model: EncoderTask) -> str:
    if (directory / LITBERT_CONFIG).exists():
        return f"litbert (`{LITBERT_CONFIG}`): {litbert_format_reason(model)}"
    architectures = json.loads((directory / "config.json").read_text()).get("architectures") or ["?"]
    return f"transformers (`{architectures[0]}`)"


def _value(value: float | int) -> str:
    if isinstance(value, int):  # a step (early_stopping/stopped_at_step), not a score
        return str(value)
    return f"{value:.4f}" if math.isfinite(value) else f"undefined ({value})"


def _cut_inputs(data: dict[str, Any], directory: Path) -> list[str]:
    """For a transformers export trained on texts cut elsewhere than at their end (`data.truncation` tail or
    head+tail): a tokenizer called with `truncation=True` keeps a long text's start, and scores other inputs."""
    truncation = data.get("truncation")
    if truncation not in ("tail", "head+tail") or (directory / LITBERT_CONFIG).exists():
        return []
    kept = "their end" if truncation == "tail" else \
        f"their start ({data.get('head_fraction', 0.25):.0%} of the tokens) and their end"
    return ["", f"Texts longer than {data.get('max_length')} tokens were cut to {kept} in training and evaluation "
                f"(`data.truncation: {truncation}`); a tokenizer called with `truncation=True` keeps their start "
                f"instead. Cut long texts the same way to get the results above (`python train.py predict` does)."]


def _loading(directory: Path, name: str) -> list[str]:
    litbert = f"With litbert, fine-tune or distil from it with `--model.pretrained {name}` (or `--model.teacher`)."
    if (directory / LITBERT_CONFIG).exists():
        return [litbert]
    architecture = json.loads((directory / "config.json").read_text()).get("architectures", ["AutoModel"])[0]
    return ["With transformers:", "", "```python", f"from transformers import AutoTokenizer, {architecture}", "",
            f"tokenizer = AutoTokenizer.from_pretrained({name!r})",
            f"model = {architecture}.from_pretrained({name!r})", "```", "", litbert]
