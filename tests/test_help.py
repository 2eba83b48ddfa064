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


@pytest.mark.parametrize("command", [[], ["predict"]])
def test_train_py_help_says_what_each_command_does(command, capsys):
    """`train.py --help` opens with what train.py does (not Lightning's "Lightning Trainer command line tool"), and
    `train.py predict --help` with what predict does and how it is called: the two read alike otherwise."""
    import train

    with pytest.raises(SystemExit) as stop:
        train.main([*command, "--help"])
    assert stop.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Lightning Trainer command line tool" not in out
    if command:
        assert out.startswith("usage: train.py predict ")
        assert ("`python train.py predict --config <run>/config.yaml --model.pretrained <run>/model "
                "--data.predict_file FILE --output FILE` predicts a file of new inputs") in out
    else:
        assert " ".join(train.__doc__.split("\n\n")[0].split()) in out
        assert "`python train.py predict --help`" in out
