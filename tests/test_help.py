"""Each command-line tool's `--help` opens with what the tool is: the first paragraph of its module docstring,
whole (its first line alone cut a sentence in half)."""

import importlib
import inspect
import sys

import pytest
from runs import REPO

MODULES = sorted(["tasks.run.sweep"] + [f"bench.{path.stem}" for path in (REPO / "bench").glob("*.py")
                                        if "def main(" in path.read_text()])


@pytest.mark.parametrize("name", MODULES)
def test_help_gives_the_first_paragraph_of_the_tool_whole(name, monkeypatch, capsys):
    module = importlib.import_module(name)
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    with pytest.raises(SystemExit) as stop:
        module.main(["--help"]) if inspect.signature(module.main).parameters else module.main()
    assert stop.value.code == 0
    first_paragraph = " ".join(module.__doc__.split("\n\n")[0].split())
    if name == "bench.syncs":  # a one-line summary of its own
        first_paragraph = "Summarise a HostSyncs file"
    assert first_paragraph in " ".join(capsys.readouterr().out.split())
