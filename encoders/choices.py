"""One check for every setting that takes one of several values: a registry's keys or a `Literal`'s."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, get_args


def check_choice(setting: str, value: Any, choices: Any, error: type[ValueError] = ValueError) -> None:
    """`error` naming the setting, the value and the valid ones unless `value` is among `choices` (a `Literal`
    type, or a collection such as a registry)."""
    allowed: Collection[Any] = get_args(choices) or choices
    if value not in allowed:
        raise error(f"{setting}={value!r} is not known; choose one of {sorted(allowed, key=str)}.")
