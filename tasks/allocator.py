"""Which `malloc` a training process runs on (Linux), chosen before torch is imported.

PyTorch's CPU tensors are allocated with the C library's `malloc`, and a training step on CPU allocates and frees
hundreds of them, many of a megabyte or more. With tcmalloc (Debian's `libtcmalloc-minimal4`) preloaded instead of
glibc's, fine-tuning steps of MiniLM-L6 ran 1.15x faster on CoLA (32 short sentences a batch; median of 16
alternating rounds, 0.98-1.24x) and 1.03x on MRPC, and full CoLA runs took 100.5 s against 118.2 s (BENCHMARKS.md,
"The memory allocator"). jemalloc gained less (0.98x as Debian ships it, 1.13x with the settings PyTorch's CPU
launcher gives it), glibc with larger trim and mmap thresholds 1.04x, inside the noise. No number is computed
differently: the weights after training are the same bit for bit. PyTorch's own CPU launcher
(`torch.backends.xeon.run_cpu`) preloads tcmalloc by default as well.

A library can only be preloaded when a process starts, so `preload()` re-executes the command once with
`LD_PRELOAD` naming it (same process id, same arguments). `LITBERT_ALLOCATOR` chooses:

- `auto` (default): tcmalloc where it is installed, else glibc's `malloc` (with a note saying what to install);
- `tcmalloc` or `jemalloc`: that library, or an error saying how to install it (jemalloc measured no faster);
- `system`: the C library's own, nothing preloaded.

A process that already runs on tcmalloc or jemalloc (preloaded by the user, or inherited by a distributed run's
ranks) is left as it is; a `LITBERT_ALLOCATOR` naming another is refused, as is `tcmalloc` or `jemalloc` outside
Linux.

This module imports no torch: `train.py` calls `preload()` before its other imports.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from pathlib import Path

VARIABLE = "LITBERT_ALLOCATOR"
CHOICES = ("auto", "system", "tcmalloc", "jemalloc")
# Each allocator's library names as ctypes.util.find_library takes them (the first found wins), and the package
# that installs it.
LIBRARIES = {
    "tcmalloc": (("tcmalloc_minimal", "tcmalloc"), "libtcmalloc-minimal4 (Debian/Ubuntu), gperftools (conda-forge)"),
    "jemalloc": (("jemalloc",), "libjemalloc2 (Debian/Ubuntu), jemalloc (conda-forge)"),
}
# Set on the re-executed process: the library it was started with, so a preload the loader refused is not
# attempted again.
_TRIED = "LITBERT_ALLOCATOR_PRELOADED"


class AllocatorError(ValueError):
    """LITBERT_ALLOCATOR names an unknown allocator, or one that is not installed."""


def running() -> str:
    """The allocator this process runs on: "tcmalloc", "jemalloc" or "system" (read from its memory map)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    for name in LIBRARIES:
        if f"lib{name}" in maps:
            return name
    return "system"


def find(name: str) -> str | None:
    """The shared library of allocator `name` as the dynamic loader finds it, or None where it is not installed."""
    for library in LIBRARIES[name][0]:
        found = ctypes.util.find_library(library)
        if found:
            return found
    return None


def choice(environ: os._Environ | dict) -> str:
    value = environ.get(VARIABLE, "auto").strip().lower() or "auto"
    if value not in CHOICES:
        raise AllocatorError(f"{VARIABLE}={environ[VARIABLE]!r} is not an allocator litbert knows: choose one of "
                             f"{', '.join(CHOICES)} (or unset it for auto).")
    return value


def plan(environ: os._Environ | dict, current: str) -> tuple[str | None, str | None]:
    """(library to preload or None, a note to print or None) for a process running on `current` with `environ`."""
    wanted = choice(environ)
    if current != "system":  # started with an allocator preloaded: by the user, or by a launcher (DDP's ranks)
        if wanted not in ("auto", current):
            raise AllocatorError(f"{VARIABLE}={wanted}, but this process was started on {current} (LD_PRELOAD="
                                 f"{environ.get('LD_PRELOAD', '')!r}): drop one of the two.")
        return None, None
    if wanted == "system":
        return None, None
    if not sys.platform.startswith("linux"):
        if wanted == "auto":
            return None, None
        raise AllocatorError(f"{VARIABLE}={wanted}: litbert preloads an allocator on Linux only; unset it here.")
    name = "tcmalloc" if wanted == "auto" else wanted
    library = find(name)
    if library is None:
        if wanted == "auto":
            return None, (f"litbert: memory allocator: the C library's malloc; installing tcmalloc "
                          f"({LIBRARIES['tcmalloc'][1]}) makes CPU training steps faster (1.15x on CoLA, "
                          f"BENCHMARKS.md). {VARIABLE}=system silences this note.")
        raise AllocatorError(f"{VARIABLE}={wanted}: {name} is not installed (the loader finds none of "
                             f"{', '.join('lib' + n for n in LIBRARIES[name][0])}); install {LIBRARIES[name][1]}, "
                             f"or set {VARIABLE}=auto or system.")
    if environ.get(_TRIED) == library:  # started with it already, and the loader did not load it
        return None, (f"litbert: memory allocator: {library} could not be preloaded (the loader's message is "
                      f"above); running on the C library's malloc. {VARIABLE}=system silences this note.")
    return library, None


def preloading(environ: os._Environ | dict, library: str | None) -> dict[str, str]:
    """A copy of `environ` whose LD_PRELOAD loads `library` first (unchanged for None)."""
    environ = dict(environ)
    if library is not None:
        environ["LD_PRELOAD"] = " ".join(filter(None, [library, environ.get("LD_PRELOAD")]))
    return environ


def preload() -> None:
    """Re-execute this process's command with the chosen allocator preloaded, or print why not; returns when the
    process is to go on as it is. An invalid LITBERT_ALLOCATOR exits with status 2, as train.py's other errors."""
    try:
        library, note = plan(os.environ, running())
    except AllocatorError as error:
        print(f"litbert: error: {error}", file=sys.stderr, flush=True)
        sys.exit(2)
    if note:
        print(note, file=sys.stderr, flush=True)
    if library is None:
        return
    print(f"litbert: memory allocator: {library} (preloaded; {VARIABLE}=system keeps the C library's malloc)",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], preloading(os.environ, library) | {_TRIED: library})
