"""Config files on the command line: `base:` includes and nulls under nested settings, resolved before jsonargparse
reads the arguments.

A config holds only what differs from the configs it extends (`base: ../glue/base.yaml`, or a list of them applied
in order). jsonargparse composes several `--config` files key by key, later ones winning, but a config cannot
include another by itself: `with_bases` puts each file's bases before it on the command line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import yaml

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def expand(args: Sequence[str]) -> list[str]:
    """The command line as jsonargparse should read it: `--config` files checked, their bases included, nested
    nulls spelled so that they arrive as nulls."""
    return nested_nulls(with_bases(args))


def _config_file(value: str) -> Path | None:
    """The file a `--config` value names, or None for a config given inline (`--config '{trainer: {...}}'`). A value
    that is neither an existing file nor a YAML mapping is refused by name (jsonargparse would only say
    'config: not a valid value')."""
    path = Path(value)
    if path.is_file():
        return path if path.suffix in CONFIG_SUFFIXES else None
    try:
        inline = isinstance(yaml.safe_load(value), dict)
    except yaml.YAMLError:
        inline = False
    if not inline:
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()}, the folder train.py runs in)"
        problem = "is a folder, not a config file" if path.is_dir() else "does not exist"
        raise FileNotFoundError(f"--config {value}: the file {problem}{where}. Give the path of a config file, "
                                f"such as configs/quickstart.yaml; the configs litbert ships are under configs/.")
    return None


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
    applied in order; recursively), so that a config holds only what differs from the configs it extends."""
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
