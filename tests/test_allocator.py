"""The memory allocator train.py starts on (`tasks.allocator`): what LITBERT_ALLOCATOR chooses, what happens where
a library is missing, and, through `python train.py`, that the preloaded allocator changes no number."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from runs import MINILM, REPO, environment, train

from tasks import allocator
from tasks.allocator import AllocatorError, plan

TCMALLOC = allocator.find("tcmalloc")


@pytest.fixture
def installed(monkeypatch):
    """Pretend which allocators are installed: {name: library path}."""

    def pretend(libraries: dict[str, str]) -> None:
        monkeypatch.setattr(allocator, "find", lambda name: libraries.get(name))

    return pretend


def test_auto_preloads_tcmalloc_where_installed(installed):
    installed({"tcmalloc": "libtcmalloc_minimal.so.4", "jemalloc": "libjemalloc.so.2"})
    assert plan({}, "system") == ("libtcmalloc_minimal.so.4", None)
    assert plan({"LITBERT_ALLOCATOR": " Auto "}, "system") == ("libtcmalloc_minimal.so.4", None)
    assert plan({"LITBERT_ALLOCATOR": "jemalloc"}, "system") == ("libjemalloc.so.2", None)
    # Nothing to do: asked for the C library's, or already on another (preloaded by the user or a launcher).
    assert plan({"LITBERT_ALLOCATOR": "system"}, "system") == (None, None)
    assert plan({}, "jemalloc") == (None, None)
    assert plan({"LITBERT_ALLOCATOR": "tcmalloc"}, "tcmalloc") == (None, None)


def test_an_allocator_asked_for_against_the_one_preloaded_is_refused(installed):
    installed({"tcmalloc": "libtcmalloc_minimal.so.4"})
    for wanted in ("system", "tcmalloc"):
        with pytest.raises(AllocatorError, match=f"LITBERT_ALLOCATOR={wanted}, but this process was started on "
                                                 "jemalloc .*libjemalloc.so.2.*drop one of the two"):
            plan({"LITBERT_ALLOCATOR": wanted, "LD_PRELOAD": "libjemalloc.so.2"}, "jemalloc")


def test_outside_linux_only_auto_and_system_run(installed, monkeypatch):
    installed({"tcmalloc": "libtcmalloc_minimal.so.4"})
    monkeypatch.setattr(sys, "platform", "darwin")
    assert plan({}, "system") == (None, None)
    with pytest.raises(AllocatorError, match="LITBERT_ALLOCATOR=tcmalloc: litbert preloads an allocator on Linux"):
        plan({"LITBERT_ALLOCATOR": "tcmalloc"}, "system")


def test_auto_without_tcmalloc_runs_on_the_c_library_and_says_what_to_install(installed):
    installed({})
    library, note = plan({}, "system")
    assert library is None and "libtcmalloc-minimal4" in note and "LITBERT_ALLOCATOR=system" in note


def test_an_allocator_asked_for_by_name_must_be_installed(installed):
    installed({"tcmalloc": "libtcmalloc_minimal.so.4"})
    with pytest.raises(AllocatorError, match="LITBERT_ALLOCATOR=jemalloc: jemalloc is not installed .* libjemalloc2"):
        plan({"LITBERT_ALLOCATOR": "jemalloc"}, "system")
    with pytest.raises(AllocatorError, match=r"LITBERT_ALLOCATOR='tc-malloc' .* auto, system, tcmalloc, jemalloc"):
        plan({"LITBERT_ALLOCATOR": "tc-malloc"}, "system")


def test_a_preload_the_loader_refused_is_not_tried_again(installed):
    """The re-executed process still on the C library's malloc (the loader could not load the library) goes on, with
    a note, instead of re-executing forever."""
    installed({"tcmalloc": "/broken/libtcmalloc_minimal.so.4"})
    library, note = plan({"LITBERT_ALLOCATOR_PRELOADED": "/broken/libtcmalloc_minimal.so.4"}, "system")
    assert library is None and "could not be preloaded" in note


def test_a_process_knows_its_allocator():
    """Read from the process's own memory map: the C library's without a preload, tcmalloc with it."""
    ask = [sys.executable, "-c", "from tasks.allocator import running; print(running())"]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    assert subprocess.run(ask, cwd=REPO, env=env, capture_output=True, text=True).stdout.strip() == "system"
    if TCMALLOC:
        env["LD_PRELOAD"] = TCMALLOC
        assert subprocess.run(ask, cwd=REPO, env=env, capture_output=True, text=True).stdout.strip() == "tcmalloc"


def test_train_py_refuses_an_unknown_allocator(tmp_path):
    done = train("configs/glue/wnli.yaml", tmp_path, env=environment(LITBERT_ALLOCATOR="glibc"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "litbert: error: LITBERT_ALLOCATOR='glibc' is not an allocator litbert knows: choose one of auto, system, "
        "tcmalloc, jemalloc (or unset it for auto).")


def test_train_py_on_its_allocator_trains_the_same_weights_as_on_the_c_librarys(shared_data, tmp_path):
    """Three fine-tuning steps of WNLI from MiniLM, through train.py, on the allocator it picks by default and on the
    C library's malloc: the same weights bit for bit. Where tcmalloc is installed, the default run says it preloaded
    it; elsewhere it says what to install."""
    args = ["--model.pretrained", MINILM, "--trainer.max_steps", "3", "--checkpoint.every_n_steps", "3",
            "--trainer.limit_val_batches", "0", "--export", "false"]
    runs = {}
    for name in ("auto", "system"):
        env = environment(LITBERT_DATA=str(shared_data), LITBERT_CACHE=str(tmp_path / "cache"),
                          LITBERT_ALLOCATOR=name)
        done = train("configs/glue/wnli.yaml", tmp_path / name, *args, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        state = torch.load(tmp_path / name / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
        runs[name] = (done.stderr, state["state_dict"], state["global_step"])
    (auto_log, auto, auto_step), (system_log, system, system_step) = runs["auto"], runs["system"]
    assert auto_step == system_step == 3
    assert auto.keys() == system.keys()
    for key in auto:
        assert torch.equal(auto[key], system[key]), key
    if TCMALLOC:
        assert f"litbert: memory allocator: {TCMALLOC} (preloaded" in auto_log
        assert "could not be preloaded" not in auto_log
    else:
        assert "installing tcmalloc" in auto_log
    assert "memory allocator" not in system_log
