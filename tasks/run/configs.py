"""Config files on the command line: `base:` includes and nulls under nested settings, resolved before jsonargparse
reads the arguments.

A config holds only what differs from the configs it extends (`base: ../glue/base.yaml`, or a list of them applied
in order). jsonargparse composes several `--config` files key by key, later ones winning, but a config cannot
include another by itself: `with_bases` puts each file's bases before it on the command line.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from pathlib import Path

import yaml

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def expand(args: Sequence[str]) -> list[str]:
    """The command line as jsonargparse should read it: `--config` files checked, their bases included, nested
    nulls spelled so that they arrive as nulls. `base` itself ends null: its files are read into the arguments, and
    the resolved config (`--print_config`, a run's config.yaml) holds their settings, where a base named relative to
    the first config's folder would not be found from another. `-c`, LightningCLI's short form, is read as
    `--config`."""
    args = ["--config" if arg == "-c" else f"--config={arg[3:]}" if arg.startswith("-c=") else arg for arg in args]
    return nested_nulls([*with_bases(args), "--base=null"])


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


class _RepeatedKey(yaml.YAMLError):
    def __init__(self, key: object, line: int, first: int) -> None:
        super().__init__(f"line {line}: the key {key!r} appears a second time in its mapping (first on line {first}); "
                         f"YAML would keep the second alone, dropping every setting under the first. Keep one "
                         f"{key!r}, with the settings of both")


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping: PyYAML keeps the last silently, so a second
    `init_args:` under `data:` dropped every setting of the first. A merge key (`<<: *defaults`) is no key of its
    own: the keys it brings may be given again, which is what it is for."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if not isinstance(key, Hashable):  # `? [a, b]`: PyYAML's own error names it
                continue
            if key in first:
                raise _RepeatedKey(key, line, first[key])
            first[key] = line
        return super().construct_mapping(node, deep=deep)


def read_config(path: Path) -> dict:
    """The settings of the config file `path`; an error naming the file, line and column where it is no valid YAML
    or holds a key twice, and the file where it holds no mapping of settings (an empty file, a list)."""
    try:
        with path.open(encoding="utf-8") as handle:
            content = yaml.load(handle, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except _RepeatedKey as error:
        raise ValueError(f"{path}, {error}.") from None
    except yaml.MarkedYAMLError as error:  # jsonargparse would print PyYAML's traceback
        mark = error.problem_mark or error.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem, opened = error.problem or str(error), error.context_mark
        if error.context and opened is not None and opened is not mark:
            problem += f", {error.context} that starts on line {opened.line + 1}, column {opened.column + 1}"
        tabs = " (YAML indents with spaces, never tabs)" if "'\\t'" in problem else ""
        raise ValueError(f"{path}{where}: not valid YAML: {problem}. Fix the file{tabs}.") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML: {error}. Fix the file.") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); save it as UTF-8.") \
            from None
    if not isinstance(content, dict):
        held = "nothing" if content is None else f"a {type(content).__name__}, not a mapping"
        raise ValueError(f"{path} holds {held}; a config file maps sections (trainer:, model:, data:) to their "
                         f"settings, as the files under configs/ do.")
    return content


def config_files(args: Sequence[str]) -> list[Path]:
    """The config files the command line reads (`--config F`, `--config=F`, bases included once `expand`ed), in
    order; inline configs are not files."""
    values = [arg.removeprefix("--config=") for arg in args if arg.startswith("--config=")]
    values += [value for flag, value in zip(args, args[1:], strict=False) if flag == "--config"]
    return [Path(value) for value in values if Path(value).is_file()]


def key_line(path: Path, keys: Sequence[str]) -> int | None:
    """The line of `path` (1-based) on which the setting at `keys` (`["trainer", "max_steps"]`) is given, or None
    where the file does not give it."""
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    line = None
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            return None
        found = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
        if found is None:
            return None
        line, node = found[0].start_mark.line + 1, found[1]
    return line


def _bases(path: Path, chain: list[Path]) -> list[str]:
    """The files `path` extends, in the order they apply: each `base` (one path or a list, relative to `path`)
    preceded by its own bases."""
    names = read_config(path).get("base")
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
