"""How a run that does not finish ends: one message that says why and what to do, and the exit status.

- 0: the run finished;
- 1: training diverged or failed (`DivergenceError`);
- 2: the configuration, data or a checkpoint is wrong, or the run cannot write (a read-only folder, a full disk):
  the last lines printed are litbert's message naming the file, field or value, without a traceback
  (`LITBERT_TRACEBACK=1` shows it);
- 128 + N: stopped by signal N (Ctrl+C: 130, SIGTERM: 143), wherever it came, with the command that resumes the run
  where it saved its state, or starts it again where it stopped before training.

Any other error is a bug, and propagates with its traceback.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import importlib
import inspect
import os
import re
import shlex
import signal
import sys
import traceback
from collections.abc import Sequence

from jsonargparse import ArgumentParser
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException

from data.sources import DataError
from encoders.checkpoints import CheckpointError
from tasks.base import DivergenceError
from tasks.run.folders import RunFolderError
from tasks.run.signals import RunInterrupted, StoppedAfterTraining, StoppedAtOnce, StoppedBeforeTraining
from tasks.run.tracking import finish_tracking

# Errors about the user's configuration, data or files: shown as litbert's message, without a traceback. Lightning
# raises MisconfigurationException for trainer settings the machine cannot take (an accelerator it lacks, devices 0).
USER_ERRORS = (DataError, CheckpointError, RunFolderError, ValueError, FileNotFoundError, NotADirectoryError,
               PermissionError, IsADirectoryError, MisconfigurationException)

# litbert's own top-level packages and modules. A ModuleNotFoundError for another is a package the settings ask for
# and the machine lacks (TensorBoardLogger's tensorboard), the user's to install; for one of these (`tasks.run.gone`)
# it is a bug, with its traceback.
OWN_MODULES = ("bench", "data", "encoders", "tasks", "train")

# Storage the run cannot write to, a user's to fix as much as a missing file (PermissionError covers EACCES, EPERM).
STORAGE_ERRNOS = (errno.EROFS, errno.ENOSPC, errno.EDQUOT)

# The settings that point a datamodule at local data (files, a task folder, a data root), named where a setting of
# another datamodule's source (`--data.train_files` to GLUE's) is refused.
LOCAL_DATA = ("train_files", "data_dir", "data_root")

_PARSE_NOISE = ("Does not validate against any of the Union subtypes", "Subtypes:", "Errors:", "Given value type:",
                "- Expected a <class 'NoneType'>", "- Problem with given class_path")


def exit_status(error: BaseException, args: Sequence[str] | None) -> int | None:
    """Print `error` as litbert's message and return the exit status of the run it ended, or None for an error
    that is not the user's to fix (a bug, KeyboardInterrupt, SystemExit), which the caller re-raises. `args` is the
    command line (None: sys.argv), for the command that resumes an interrupted run."""
    # A signal's stop under the error of a clean-up it set off (datasets' pool of tokenising processes, asked for
    # the results of its stopped processes, raises TimeoutError): the run ended on the signal.
    error = next((e for e in causes(error) if isinstance(e, RunInterrupted | StoppedAtOnce | SIGTERMException)),
                 error)
    if isinstance(error, RunInterrupted | StoppedAtOnce):
        finish_tracking(128 + error.signum)  # W&B records the run's own exit status: stopped by a signal
        print(f"litbert: {error}{resume_hint(error, args)}", file=sys.stderr, flush=True)
        return 128 + error.signum
    if isinstance(error, StoppedBeforeTraining):
        finish_tracking(128 + error.signum)
        given = list(sys.argv[1:] if args is None else args)
        if given[:1] == ["predict"]:  # `train.py predict`, stopped while its model and data loaded, or it predicted
            print(f"litbert: stopped by {signal.Signals(error.signum).name} before the predictions were written "
                  f"whole; nothing was written.",
                  file=sys.stderr, flush=True)
            return 128 + error.signum
        print(f"litbert: stopped by {signal.Signals(error.signum).name} before training began (while the run was "
              f"built, its data read and tokenised, or in Lightning's sanity check){_requeued(error)}; nothing was "
              f"trained or saved, and no metrics.json was written.{restart_hint(given)}", file=sys.stderr, flush=True)
        return 128 + error.signum
    if isinstance(error, StoppedAfterTraining) and error.finishing:
        finish_tracking(128 + error.signum)
        print(f"litbert: stopped by {signal.Signals(error.signum).name} as the run finished: its metrics.json and "
              f"export are written, but not every submission file, the upload to the Hub or the summary. "
              f"{_after_training_resume(error, 'write them (it trains no step)')}{_requeued(error)}.",
              file=sys.stderr, flush=True)
        return 128 + error.signum
    if isinstance(error, SIGTERMException):  # after training (Lightning's own: from the evaluation loops)
        signum = getattr(error, "signum", signal.SIGTERM)
        finish_tracking(128 + signum)
        print(f"litbert: stopped by {signal.Signals(signum).name} after training, in the evaluation, export or test "
              f"predictions{_requeued(error)}; the run did not finish (metrics.json is written after the evaluation "
              f"and export, the predictions after it). "
              f"{_after_training_resume(error, 'evaluate, export and predict')}.", file=sys.stderr, flush=True)
        return 128 + signum
    if isinstance(error, DivergenceError):
        finish_tracking(1)
        print(f"litbert: error: {error}\nNothing was exported and no metrics.json was written.", file=sys.stderr,
              flush=True)
        return 1
    if isinstance(error, argparse.ArgumentError):
        print(f"litbert: error in the configuration:\n{condense_parse_error(str(error))}", file=sys.stderr,
              flush=True)
        return 2
    if isinstance(error, KeyboardInterrupt | SystemExit):
        return None
    own = own_error(error)
    storage = isinstance(own, OSError) and own.errno in STORAGE_ERRNOS
    lacking = isinstance(own, ModuleNotFoundError) and (own.name or "").split(".")[0] not in OWN_MODULES
    if not (isinstance(own, USER_ERRORS) or storage or lacking) or os.environ.get("LITBERT_TRACEBACK"):
        return None
    if isinstance(own, MisconfigurationException) and "self.log(" in str(own):
        return None  # a hook (a task's, a callback's) logging where Lightning allows it not: a bug, not a setting
    finish_tracking(2)
    said = lightning_refusal(own) if isinstance(own, MisconfigurationException) else own
    print(f"litbert: error{_origin(own)}; LITBERT_TRACEBACK=1 shows the traceback:\n{said}", file=sys.stderr,
          flush=True)
    return 2


def lightning_refusal(error: MisconfigurationException) -> str:
    """Lightning's refusal of a trainer setting, under the settings it names (`val_check_interval`), or where it
    names none (`No supported gpu backend found!`), under those that choose the machine."""
    import lightning as L  # here: only a refused run needs the Trainer's signature

    said = str(error)
    named = [name for name in inspect.signature(L.Trainer.__init__).parameters
             if name != "self" and re.search(rf"(?<![\w.]){name}(?!\w)", said)]
    named += ["max_time"] if "Timer(duration=" in said else []  # the Timer callback trainer.max_time makes
    settings = ", ".join(f"trainer.{name}" for name in named) or "the trainer settings (trainer.accelerator, " \
                                                                 "devices, strategy, ...)"
    return f"Lightning refused {settings}: {said}"


def causes(error: BaseException) -> list[BaseException]:
    """`error`, then the error it was raised from or while handling, and so on."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def own_error(error: BaseException) -> BaseException:
    """The error a constructor raised, under the wrapping that jsonargparse adds while instantiating classes
    ("Does not validate against any of the Union subtypes" and an argument dump)."""
    for candidate in causes(error):
        frames = traceback.extract_tb(candidate.__traceback__)
        if frames and "jsonargparse" not in frames[-1].filename:
            return candidate
    return error


def _origin(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    frame = frames[-1]
    try:
        where = os.path.relpath(frame.filename)
    except ValueError:
        where = frame.filename
    return f" in {where}:{frame.lineno} ({frame.name})"


def condense_parse_error(message: str) -> str:
    """jsonargparse's report of a bad command-line or config value, nested once per level of the configuration and
    ending in an argument dump, cut to the setting, the value given and what was expected."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    path = [match.group(1) for line in lines if (match := re.match(r'(?:error: )?Parser key "([^"]+)":', line))]
    given = next((line.removeprefix("Given value:").strip() for line in lines if line.startswith("Given value:")),
                 None)
    problems = []
    for line in lines:
        if line.startswith(_PARSE_NOISE) or line.startswith("Given value:") or re.match(r"(error: )?Parser key", line):
            continue
        line = re.sub(r"<class '([\w.]+)'>", r"\1", line.removeprefix("- "))
        if line not in problems:
            problems.append(line)
    if not path:
        return str(message).strip()
    setting = ".".join(path)
    unknown = re.findall(r"Option '(\w+)' is not accepted", message)
    classes = re.findall(r"Problem with given class_path '([\w.]+)'", message)
    if unknown and classes:
        return unknown_setting(setting, unknown[-1], classes[-1], help_of=(path[0], classes[0]))
    value = f"={given}" if given is not None and not given.startswith("NestedArg") else ""
    return (f"{setting}{value}: {'; '.join(problems) or 'not a valid value'}. `python train.py --config <config> "
            f"--print_config` shows every setting and its current value; `--help` lists them.")


def unknown_setting(setting: str, key: str, class_path: str, help_of: tuple[str, str]) -> str:
    """`setting.key` that the class at `class_path` does not take: the settings it takes that come closest (by
    spelling; for a source of data, such as `train_files` to GLUE, the settings it reads its data by), each with
    the first sentence of its help, and the help that lists them all (`--data.help data.GLUEDataModule`)."""
    from tasks.run.cli import SOURCE_SETTINGS  # here: the command line imports what every run needs

    section, outer = help_of
    refused = f"{setting}.{key}: {class_path} has no setting {key!r}"
    way_on = f"`python train.py --{section}.help {outer}` lists its settings."
    settings = settings_of(class_path)
    if settings is None:  # not importable here: nothing to compare with
        return f"{refused}. {way_on}"
    sources = {name for names in SOURCE_SETTINGS.values() for name in names}
    located = [name for name in LOCAL_DATA if name in settings] if key in sources else []
    closest = located or difflib.get_close_matches(key, list(settings), n=3)
    if not closest:
        listed = f"its settings are {', '.join(sorted(settings))}" if settings else "it takes no settings"
        return f"{refused}; {listed}. {way_on}"
    said = [f"{setting}.{name}" + (f" ({settings[name]})" if settings[name] else "") for name in closest]
    said = f"{', '.join(said[:-1]) + ' or ' if len(said) > 1 else ''}{said[-1]}"
    return f"{refused}: it reads local data by {said}. {way_on}" if located else \
        f"{refused}. Did you mean {said}? {way_on}"


def settings_of(class_path: str) -> dict[str, str] | None:
    """The constructor arguments of the class at `class_path`, as the command line takes them, each with the first
    sentence of its help (empty where it has none); None where the class cannot be imported."""
    module, _, name = class_path.rpartition(".")
    parser = ArgumentParser(exit_on_error=False)
    try:
        parser.add_class_arguments(getattr(importlib.import_module(module), name), "x", fail_untyped=False,
                                   sub_configs=True)
    except (ImportError, AttributeError, ValueError):
        return None
    settings: dict[str, str] = {}
    for action in parser._actions:  # argparse keeps no public list of a parser's arguments
        if action.dest.startswith("x.") and action.dest.count(".") == 1:
            help_text = " ".join(str(action.help or "").split())
            settings[action.dest[2:]] = re.split(r"(?<=\.) ", help_text, maxsplit=1)[0].removesuffix(".")
    return settings


def unrecognized_hint(message: str, options: Sequence[str]) -> str:
    """argparse's `unrecognized arguments: --trainer.acumulate_grad_batches 1`, with the options of `options`
    closest to each unknown one (`; did you mean --trainer.accumulate_grad_batches?`)."""
    if not message.startswith("unrecognized arguments:"):
        return ""
    unknown = [arg.split("=", 1)[0] for arg in message.split(":", 1)[1].split() if arg.startswith("--")]
    closest = []
    for arg in unknown:
        group = arg.rpartition(".")[0] + "."  # `--trainer.`: the options of the same group come first
        near = [option for option in options if option.startswith(group) and not option.endswith(".help")]
        closest += [option for option in difflib.get_close_matches(arg, near or list(options), n=1)
                    if option not in closest]
    return f"; did you mean {' or '.join(closest)}?" if closest else ""


def unaccepted_setting(message: str, options: Sequence[str], args: Sequence[str]) -> str | None:
    """jsonargparse's refusal of a key under a section without a class (`Group 'trainer' does not accept option
    'max_stepz'`, `Option 'foo' is not accepted` at the top), as a config file or an inline value gives it: the
    setting by its full name, the config files and lines that give it, and the settings of `options` closest to it.
    None for another message."""
    from tasks.run.configs import config_files, key_line  # here: the command line imports what every run needs

    # (The same words inside a longer report are a class's, which `condense_parse_error` names.)
    if match := re.fullmatch(r"Group '([\w.]+)' does not accept option '(\w+)'", message.strip()):
        group, key = match.groups()
    elif match := re.fullmatch(r"Option '(\w+)' is not accepted", message.strip()):
        group, key = "", match.group(1)
    else:
        return None
    setting = f"{group}.{key}" if group else key
    given = [f"{path}, line {line}" for path in config_files(args)
             if (line := key_line(path, setting.split("."))) is not None]
    where = f" ({'; '.join(given)})" if given else ""
    prefix = f"--{group}." if group else "--"
    near = [option for option in options if option.startswith(prefix) and not option.endswith(".help")
            and (group or "." not in option)]
    closest = [option[2:] for option in difflib.get_close_matches(f"{prefix}{key}", near, n=2)]
    hint = f" Did you mean {' or '.join(closest)}?" if closest else ""
    section = f"the {group} section" if group else "a config's top level"
    return (f"{setting}{where}: {section} has no setting {key!r}.{hint} `python train.py --help` lists the "
            f"settings.")


def _after_training_resume(error: BaseException, to: str) -> str:
    """How a run stopped after training gets its results: resumed from the checkpoint of its final training state
    (`train.run` sets `error.checkpoint`), or, where checkpointing was off and there is none, run again."""
    checkpoint = getattr(error, "checkpoint", None)
    if checkpoint is None:
        return (f"No checkpoint holds its final training state (trainer.enable_checkpointing is false): run it again "
                f"to {to}")
    return f"It has its final training state in {checkpoint}: resume with --ckpt_path last to {to}"


def _requeued(error: BaseException) -> str:
    return "; the SLURM job was requeued" if getattr(error, "requeued", False) else ""


def resume_hint(error: RunInterrupted | StoppedAtOnce, args: Sequence[str] | None) -> str:
    """The command that resumes an interrupted run: its own command line (quoted for a shell) with `--ckpt_path`
    the saved state, and without `--overwrite`, which would replace the run instead and is refused beside it."""
    if not error.checkpoint:
        return ""
    return f"\nlitbert: resume with: {_command(args, error.checkpoint)}"


def restart_hint(args: Sequence[str] | None) -> str:
    """The command that starts again a run stopped before it trained: its own command line, resuming from the
    checkpoint it resumed from, if any; otherwise with `--ckpt_path last`, which starts afresh in a folder where the
    run stopped before its first checkpoint (as the plain command would not: the folder holds its config.yaml)."""
    given, checkpoint = list(sys.argv[1:] if args is None else args), "last"
    for i, arg in enumerate(given):
        if arg == "--ckpt_path" and i + 1 < len(given):
            checkpoint = given[i + 1]
        elif arg.startswith("--ckpt_path="):
            checkpoint = arg.split("=", 1)[1]
    return f"\nlitbert: start it again with: {_command(args, checkpoint)}"


def _command(args: Sequence[str] | None, checkpoint: str) -> str:
    """The run's command line with `--ckpt_path checkpoint` in place of its own, and without `--overwrite`."""
    kept, given = [], list(sys.argv[1:] if args is None else args)
    while given:
        arg = given.pop(0)
        if arg in ("--ckpt_path", "--overwrite"):
            if given and not given[0].startswith("--"):
                given.pop(0)  # its value
        elif not arg.startswith(("--ckpt_path=", "--overwrite=")):
            kept.append(arg)
    return f"python train.py {shlex.join(kept)} --ckpt_path {shlex.quote(checkpoint)}"
