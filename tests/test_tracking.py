"""What a run's W&B logger records and says, read back from offline runs with wandb's own reader (`runs.py`):
its project, the command that uploads it, the exit status of a run stopped by a signal, and the attention maps
logged beside other loggers. No training: each test drives the logger or callback the way a run does."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
from runs import wandb_history, wandb_records, wandb_runs

from tasks.run.tracking import WandbLogger


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """An offline W&B with no project of the user's, run from `tmp_path` (where wandb keeps its own files)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.chdir(tmp_path)
    yield
    import wandb

    if wandb.run is not None:  # a test that failed with its run open: the next test's logger would join that run
        wandb.finish()


def test_the_project_is_the_configs_else_wandb_project_else_litbert(monkeypatch, tmp_path):
    """WANDB_PROJECT, which wandb reads where the code names no project, names the run's project; a project the
    config names wins over it."""
    assert WandbLogger(save_dir=str(tmp_path))._wandb_init["project"] == "litbert"
    monkeypatch.setenv("WANDB_PROJECT", "theirs")
    assert WandbLogger(save_dir=str(tmp_path))._wandb_init["project"] == "theirs"
    assert WandbLogger(project="mine", save_dir=str(tmp_path))._wandb_init["project"] == "mine"


def test_a_disabled_run_says_that_nothing_was_logged(monkeypatch, tmp_path):
    """WANDB_MODE=disabled: wandb hands out a run whose folder is never made; the summary line does not name it."""
    import wandb

    monkeypatch.setenv("WANDB_MODE", "disabled")
    logger = WandbLogger(save_dir=str(tmp_path))
    try:
        logger.log_metrics({"train/loss": 1.0}, step=0)
        assert logger.describe() == "none: W&B is disabled (WANDB_MODE=disabled), so nothing was logged"
        logger.finish()
    finally:
        wandb.teardown()  # wandb keeps the mode it was set up in for the process: the next test's run is offline
    assert list(tmp_path.rglob("*.wandb")) == []


def test_an_offline_run_resumed_is_uploaded_with_every_part(tmp_path):
    """A resumed offline run is a folder per part, with the same id: the upload command names all of them, in
    order, not the last alone (which holds the steps since the resume only)."""
    first = WandbLogger(save_dir=str(tmp_path), id="resumed1")
    first.log_metrics({"train/loss": 1.0}, step=0)
    assert first.describe().endswith("(offline; upload with `wandb sync "
                                     f"{wandb_runs(tmp_path)[0]}`)")
    first.finish()
    second = WandbLogger(save_dir=str(tmp_path), id="resumed1")
    second.log_metrics({"train/loss": 0.5}, step=1)
    parts = wandb_runs(tmp_path)
    assert len(parts) == 2 and all("-resumed1" in part.name for part in parts)
    assert second.describe() == (f"{parts[1]} (offline, resumed: 2 parts; upload them all with `wandb sync "
                                 f"{parts[0]} {parts[1]}`)")
    second.finish()


def run_projects(root) -> list[str]:
    """The W&B project of each offline run part under `root`, oldest first, as its run record holds it."""
    return [record["run"]["project"] for part in wandb_runs(root) for record in wandb_records(
        next(part.glob("run-*.wandb"))) if record["type"] == "run"]


@pytest.mark.parametrize("now", ["WANDB_PROJECT", "config", "unset"])
def test_a_resumed_run_continues_in_its_checkpoints_project(now, monkeypatch, tmp_path, caplog):
    """W&B names a run by entity, project and id. A run started with WANDB_PROJECT=first and resumed with another
    WANDB_PROJECT, another project in the config, or none (the default, litbert) continues its own run in `first`,
    where its checkpoint was logged, and says what it did not follow; the resumed part used to go to the project
    of the moment, as a second run of that id holding the steps after the resume only."""
    from jsonargparse import Namespace

    from tasks.run.checkpoints import LastCheckpoint
    from tasks.run.tracking import WANDB_LOGGER, configure_wandb

    monkeypatch.setenv("WANDB_PROJECT", "first")
    first = WandbLogger(save_dir=str(tmp_path), id="resumed2")
    first.log_metrics({"train/loss": 1.0}, step=0)
    saving = LastCheckpoint()
    saving._trainer = SimpleNamespace(loggers=[first])
    state = saving.state_dict()  # what last.ckpt holds of the run
    first.finish()

    monkeypatch.delenv("WANDB_PROJECT")
    project = None
    if now == "WANDB_PROJECT":
        monkeypatch.setenv("WANDB_PROJECT", "second")
    elif now == "config":
        project = "second"
    logger = Namespace(class_path=WANDB_LOGGER, init_args=Namespace(name=None, project=project, entity=None, id=None))
    configure_wandb(logger, tmp_path, state)
    setting = {"WANDB_PROJECT": "WANDB_PROJECT names 'second'", "config": "trainer.logger.init_args.project names "
               "'second'", "unset": "the default names 'litbert'"}[now]
    assert (f"litbert: the resumed run continues W&B run resumed2 in project 'first', where its checkpoint was "
            f"logged; {setting}, which would start a second run of that id there.") in caplog.text
    second = WandbLogger(save_dir=str(tmp_path), **logger.init_args.as_dict())
    second.log_metrics({"train/loss": 0.5}, step=1)
    second.finish()
    assert run_projects(tmp_path) == ["first", "first"]


def test_a_checkpoint_that_names_no_project_resumes_in_the_project_of_the_moment(monkeypatch):
    """A checkpoint saved before litbert kept the project holds the run id alone: the run resumes with it, in the
    project the config or WANDB_PROJECT names now, as it did; a run id the user gives is theirs to place."""
    from jsonargparse import Namespace

    from tasks.run.tracking import WANDB_LOGGER, configure_wandb

    logger = Namespace(class_path=WANDB_LOGGER, init_args=Namespace(name=None, project=None, entity=None, id=None))
    configure_wandb(logger, Path("runs/glue/rte"), {"wandb_id": "old1"})
    assert logger.init_args.as_dict() == {"name": "glue-rte", "project": None, "entity": None, "id": "old1"}
    logger.init_args.id = "mine"
    configure_wandb(logger, Path("runs/glue/rte"), {"wandb_id": "old1", "wandb_project": "first"})
    assert logger.init_args.as_dict() == {"name": "glue-rte", "project": None, "entity": None, "id": "mine"}


def test_a_run_stopped_by_a_signal_records_its_exit_status(tmp_path):
    """A run stopped by SIGTERM exits 143; its W&B run records 143, a run stopped, not one that failed (1)."""
    from tasks.run.errors import exit_status
    from tasks.run.signals import RunInterrupted

    logger = WandbLogger(save_dir=str(tmp_path))
    logger.log_metrics({"train/loss": 1.0}, step=0)
    assert exit_status(RunInterrupted(signal.SIGTERM, 3, None), ["--config", "configs/quickstart.yaml"]) == 143
    (run,) = wandb_runs(tmp_path)
    (path,) = run.glob("run-*.wandb")
    assert [record["exit"]["exit_code"] for record in wandb_records(path) if record["type"] == "exit"] == [143]


def test_attention_maps_are_logged_to_wandb_beside_another_logger(tmp_path, minilm_tokenizer):
    """W&B need not be the run's first logger (`--trainer.logger '[CSVLogger, ...WandbLogger]'`): the maps go to
    it, at the step validated."""
    pytest.importorskip("matplotlib")
    from lightning.pytorch.loggers import CSVLogger

    from encoders import Encoder, EncoderConfig
    from tasks.run.tracking import AttentionMaps

    wandb = WandbLogger(save_dir=str(tmp_path))
    trainer = SimpleNamespace(loggers=[CSVLogger(str(tmp_path)), wandb], logger=None, sanity_checking=False,
                              is_global_zero=True, global_step=3,
                              datamodule=SimpleNamespace(tokenizer=minilm_tokenizer))
    module = SimpleNamespace(encoder=Encoder(EncoderConfig.from_name("bert-tiny", vocab_size=30522)))
    maps = AttentionMaps()
    maps.on_fit_start(trainer, module)
    maps.on_validation_end(trainer, module)
    wandb.finish()
    images = [row for row in wandb_history(tmp_path) if "attention/maps._type" in row]
    assert [(row["trainer/global_step"], row["attention/maps._type"]) for row in images] == [(3, "images/separated")]


def test_the_runs_summary_holds_metrics_json(tmp_path):
    """The W&B summary holds metrics.json's values, the early-stopping step among them (no history point has it)."""
    from tasks.run.results import summarise_in_trackers

    logger = WandbLogger(save_dir=str(tmp_path))
    logger.log_metrics({"val/loss": 0.9}, step=4)
    metrics = {"early_stopping/stopped_at_step": 10, "val/loss": 0.5}
    summarise_in_trackers(SimpleNamespace(loggers=[logger]), metrics)
    logger.finish()
    (path,) = wandb_runs(tmp_path)[0].glob("run-*.wandb")
    summary = {}
    for record in wandb_records(path):
        if record["type"] == "summary":
            summary.update({key: value for key, value in record["summary"]["update"].items()})
    assert {key: summary.get(key) for key in metrics} == metrics, summary


def test_a_resumed_csv_log_goes_on_in_its_file_without_the_stopped_parts_rows(tmp_path):
    """`--trainer.logger CSVLogger` resumed at step 4 from a part that logged up to step 5 before it was killed: the
    resumed run writes into the same metrics.csv (Lightning's logger would start version_1 beside it), drops the
    rows of steps 4 and 5 that it logs again, and widens the header for a new metric. Until it logs, the folder is
    left as it was (a resume refused for a changed setting keeps the log and its hparams.yaml)."""
    import csv

    from lightning.pytorch.loggers import CSVLogger

    from tasks.run.tracking import continue_csv_logs

    log = tmp_path / "version_0"
    log.mkdir()
    (log / "metrics.csv").write_text("epoch,step,train/loss,val/accuracy\n" + "".join(
        f"0,{step},0.{9 - step},\n" for step in range(6)) + "0,3,,0.5\n")
    (log / "hparams.yaml").write_text("lr: 0.1\n")
    logger = CSVLogger(str(tmp_path), name=None)
    continue_csv_logs([logger], resumed_step=4)
    logger.log_hyperparams({"lr": 0.2})
    assert logger.log_dir == str(log)
    assert (log / "hparams.yaml").read_text() == "lr: 0.1\n" and len((log / "metrics.csv").read_text().split()) == 8
    logger.log_metrics({"train/loss": 0.45, "train/tokens_per_sec": 9.0}, step=4)
    logger.save()
    logger.log_metrics({"train/loss": 0.35}, step=5)
    logger.finalize("success")
    rows = list(csv.DictReader((log / "metrics.csv").open()))
    assert [(row["step"], row["train/loss"], row["val/accuracy"], row["train/tokens_per_sec"]) for row in rows] == [
        ("0", "0.9", "", ""), ("1", "0.8", "", ""), ("2", "0.7", "", ""), ("3", "0.6", "", ""), ("3", "", "0.5", ""),
        ("4", "0.45", "", "9.0"), ("5", "0.35", "", "")]
    assert "lr: 0.2" in (log / "hparams.yaml").read_text()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["version_0"]


def test_a_kill_while_a_resumed_csv_log_is_rewritten_leaves_it_whole(tmp_path, monkeypatch):
    """The resumed run's first write rewrites metrics.csv without the stopped part's later rows: a signal in the
    middle of it leaves the earlier file as it was, and no partial file under the log's name."""
    import csv

    from lightning.pytorch.loggers import CSVLogger

    from tasks.run.tracking import continue_csv_logs

    log = tmp_path / "version_0"
    log.mkdir()
    before = "epoch,step,train/loss\n" + "".join(f"0,{step},0.{9 - step}\n" for step in range(6))
    (log / "metrics.csv").write_text(before)
    logger = CSVLogger(str(tmp_path), name=None)
    continue_csv_logs([logger], resumed_step=4)
    logger.log_metrics({"train/loss": 0.45}, step=4)

    def killed(self, rows):
        self.writerow(next(iter(rows)))
        raise KeyboardInterrupt

    monkeypatch.setattr(csv.DictWriter, "writerows", killed)
    with pytest.raises(KeyboardInterrupt):
        logger.save()
    assert (log / "metrics.csv").read_text() == before

def wnli_run(minilm: str, root: Path, steps: int, *extra: str) -> None:
    """A short WNLI run of bert-tiny through train.py that logs every step, validates and saves every 2: the runs
    of the resume-twice tests below, whose logger `extra` names."""
    from runs import REPO

    import train

    assert train.cli_main([
        "--config", str(REPO / "configs" / "glue" / "wnli.yaml"), "--model.encoder.preset", "bert-tiny",
        "--data.tokenizer", minilm, "--trainer.accelerator", "cpu", "--trainer.precision", "32",
        "--model.optimization.schedule", "constant", "--model.optimization.warmup", "0",
        "--trainer.default_root_dir", str(root), "--trainer.log_every_n_steps", "1",
        "--checkpoint.every_n_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches",
        "1", "--trainer.enable_progress_bar", "false", "--predict", "false", "--export", "false",
        "--trainer.max_steps", str(steps), *extra]) == 0


def csv_rows(root: Path) -> list[dict[str, str]]:
    import csv

    (log,) = root.glob("version_*/metrics.csv")  # one log, whatever the parts
    return [{key: value for key, value in row.items() if value and key != "train/tokens_per_sec"
             and key != "train/samples_per_sec" and key != "train/tflops"} for row in csv.DictReader(log.open())]


TIMINGS = ("tokens_per_sec", "samples_per_sec", "tflops")  # of the machine's speed at the time


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar point of the event files in `folder`, per tag, in the order TensorBoard reads them (by file
    name): what its data server reads before it drops a tag's points from a step that tag is logged at again (it
    heeds no purge marker). A file's name holds its time in seconds, the process id and the process's count of
    event files; a resumed part's process starts seconds after the earlier one, so its files sort after theirs. Here
    the parts may share a process and a second: the names are ordered by those numbers, as writing ordered them
    (by the text, a 10th file would come before a 9th)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util.tensor_util import make_ndarray

    def written(path: Path) -> tuple[int, ...]:  # (time, process, count) of events.out.tfevents.T.HOST.PID.N[SUFFIX]
        match = re.search(r"tfevents\.(\d+)\..+\.(\d+)\.(\d+)(?:\.\D[^.]*)?$", path.name)
        return tuple(map(int, match.groups())) if match else ()

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(folder.glob("*tfevents*"), key=lambda path: (written(path), path.name)):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value if event.HasField("summary") else []:
                if value.metadata.plugin_data.plugin_name == "scalars" and not value.tag.endswith(TIMINGS):
                    scalars.setdefault(value.tag, []).append((event.step, round(make_ndarray(value.tensor).item(), 6)))
    return scalars


def test_a_resumed_tensorboard_log_goes_on_in_its_folder_without_the_stopped_parts_events(tmp_path):
    """`--trainer.logger TensorBoardLogger` resumed at step 4 from a part that logged up to step 5, validated at
    step 6 after training and was killed as it wrote: the resumed run writes into the same folder (Lightning's
    logger would start version_1 beside it, a second run in TensorBoard), the earlier files lose their events of
    steps 4 on, which it logs again (their checksummed records otherwise kept), and the hyperparameters Lightning logs
    at step 0 are not logged twice. Until it logs, the folder is left as it was (a resume refused for a changed
    setting keeps the log)."""
    import struct

    from lightning.pytorch.loggers import TensorBoardLogger
    from torch.utils.tensorboard import SummaryWriter

    from tasks.run.tracking import ContinuedTensorBoardLogger, continue_tensorboard_logs

    log = tmp_path / "version_0"
    first = TensorBoardLogger(str(tmp_path), name=None, version=0)
    first.log_hyperparams({"lr": 0.1})
    first.log_metrics({"val/accuracy": 0.5}, step=3)
    for step in range(6):
        first.log_metrics({"train/loss": (9 - step) / 10}, step=step)
    first.finalize("success")
    after = SummaryWriter(str(log), filename_suffix=".after")  # the validation after training, in a file of its own
    after.add_scalar("val/accuracy", 0.75, 6)
    after.close()
    killed = next(log.glob("*tfevents*[0-9]"))
    killed.write_bytes(killed.read_bytes() + struct.pack("<Q", 32) + bytes(4) + b"event")  # a record cut short
    files = {path.name: path.read_bytes() for path in log.iterdir()}

    (logger,) = continue_tensorboard_logs([TensorBoardLogger(str(tmp_path), name=None)], resumed_step=4)
    assert isinstance(logger, ContinuedTensorBoardLogger) and logger.log_dir == str(log)
    logger.log_hyperparams({"lr": 0.2})
    logger.save()
    assert {path.name: path.read_bytes() for path in log.iterdir()} == files
    logger.log_metrics({"train/loss": 0.45}, step=4)
    logger.log_metrics({"train/loss": 0.35, "val/accuracy": 0.25}, step=5)
    logger.finalize("success")
    assert tensorboard_scalars(log) == {
        "hp_metric": [(0, -1.0)], "val/accuracy": [(3, 0.5), (5, 0.25)],
        "train/loss": [(0, 0.9), (1, 0.8), (2, 0.7), (3, 0.6), (4, 0.45), (5, 0.35)]}
    assert not any(log.glob("*.after"))  # left with no event of its own
    assert sorted(path.name for path in tmp_path.iterdir()) == ["version_0"]


def test_a_tensorboard_log_with_a_sub_dir_resumes_in_it(tmp_path):
    """`--trainer.logger.sub_dir train`: the events lie in version_0/train, where the resumed run goes on (not in a
    version_1, nor in version_0 beside the sub-folder), the stopped part's steps dropped."""
    from lightning.pytorch.loggers import TensorBoardLogger

    from tasks.run.tracking import continue_tensorboard_logs, file_log_versions

    first = TensorBoardLogger(str(tmp_path), name=None, sub_dir="train")
    for step in range(6):
        first.log_metrics({"train/loss": (9 - step) / 10}, step=step)
    first.finalize("success")
    versions = file_log_versions([first])
    (logger,) = continue_tensorboard_logs([TensorBoardLogger(str(tmp_path), name=None, sub_dir="train")],
                                         resumed_step=4, versions=versions)
    assert versions == ["version_0"] and logger.log_dir == str(tmp_path / "version_0" / "train")
    logger.log_metrics({"train/loss": 0.45}, step=4)
    logger.finalize("success")
    assert tensorboard_scalars(tmp_path / "version_0" / "train")["train/loss"] == [
        (0, 0.9), (1, 0.8), (2, 0.7), (3, 0.6), (4, 0.45)]
    assert [path.name for path in tmp_path.iterdir()] == ["version_0"]
    assert [path.name for path in (tmp_path / "version_0").iterdir()] == ["train"]


def test_a_tensorboard_log_resumed_from_step_0_keeps_its_hyperparameters(tmp_path):
    """A checkpoint of step 0 (a max_time that ran out within the first step's accumulation): the resumed run drops
    every earlier event from step 0 on but the hyperparameters, which Lightning logged at step 0 and the resumed run
    does not log again; TensorBoard's HPARAMS tab would otherwise be empty."""
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tasks.run.tracking import continue_tensorboard_logs

    log = tmp_path / "version_0"
    first = TensorBoardLogger(str(tmp_path), name=None, version=0)
    first.log_hyperparams({"lr": 0.1})
    first.log_metrics({"train/loss": 0.9}, step=0)
    first.finalize("success")
    (logger,) = continue_tensorboard_logs([TensorBoardLogger(str(tmp_path), name=None)], resumed_step=0)
    logger.log_metrics({"train/loss": 0.8}, step=0)
    logger.finalize("success")
    reader = EventAccumulator(str(log))
    reader.Reload()
    assert sorted(reader.PluginTagToContent("hparams")) == [
        "_hparams_/experiment", "_hparams_/session_end_info", "_hparams_/session_start_info"]
    assert tensorboard_scalars(log)["train/loss"] == [(0, 0.8)]

@pytest.mark.parametrize("first", ["CSVLogger", "TensorBoardLogger"])
def test_a_run_logged_to_csv_and_tensorboard_resumes_each_log_in_its_own_folder(tmp_path, first):
    """`--trainer.logger '[CSVLogger, TensorBoardLogger]'`: both log into the run folder, each into a version folder
    of its own (the one that logs first takes version_0). Resumed, each goes on in its own folder; the one whose
    folder was not the newest used to start a version_2, its curve split across two folders."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from tasks.run.tracking import ContinuedTensorBoardLogger, continue_csv_logs, continue_tensorboard_logs

    classes = {"CSVLogger": CSVLogger, "TensorBoardLogger": TensorBoardLogger}
    earlier = [cls(str(tmp_path), name="") for cls in (classes.pop(first), *classes.values())]
    for logger in earlier:
        for step in range(6):
            logger.log_metrics({"train/loss": (9 - step) / 10}, step=step)
        logger.finalize("success")
    folders = {type(logger).__name__: logger.log_dir for logger in earlier}
    assert sorted(Path(folder).name for folder in folders.values()) == ["version_0", "version_1"]

    loggers = [CSVLogger(str(tmp_path), name=""), TensorBoardLogger(str(tmp_path), name="")]
    continue_csv_logs(loggers, resumed_step=4)
    csv_logger, tensorboard = continue_tensorboard_logs(loggers, resumed_step=4)
    assert isinstance(tensorboard, ContinuedTensorBoardLogger)
    assert (csv_logger.log_dir, tensorboard.log_dir) == (folders["CSVLogger"], folders["TensorBoardLogger"])
    for logger in (csv_logger, tensorboard):
        logger.log_metrics({"train/loss": 0.45}, step=4)
        logger.finalize("success")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["version_0", "version_1"]
    assert [row["step"] for row in csv_rows(tmp_path)] == ["0", "1", "2", "3", "4"]
    assert tensorboard_scalars(Path(folders["TensorBoardLogger"]))["train/loss"] == [
        (0, 0.9), (1, 0.8), (2, 0.7), (3, 0.6), (4, 0.45)]


def test_a_resumed_log_goes_on_in_its_own_run_s_folder_where_runs_share_one(tmp_path):
    """Runs given one `save_dir` have their version folders side by side: run A logged to CSV and TensorBoard in
    version_0 and version_1, then run B in version_2 and version_3. Resumed, A goes on in the folders its checkpoint
    names (`LastCheckpoint` keeps the run's version folders), and B's logs are left as they were; A used to go on in
    the newest folders, B's, and drop their rows and events from A's resumed step on. A checkpoint that names no
    such folder starts a new one; one that keeps none (an earlier litbert's) the newest that holds the logger's
    files, as before."""
    import csv

    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from tasks.run.checkpoints import LastCheckpoint
    from tasks.run.tracking import continue_csv_logs, continue_tensorboard_logs

    for run in ("A", "B"):
        loggers = [CSVLogger(str(tmp_path), name=""), TensorBoardLogger(str(tmp_path), name="")]
        for logger in loggers:
            for step in range(6):
                logger.log_metrics({f"train/loss_{run}": (9 - step) / 10}, step=step)
            logger.finalize("success")
        if run == "A":
            callback = LastCheckpoint()
            callback._trainer = SimpleNamespace(loggers=loggers)
            kept = callback.state_dict()["file_logs"]
    assert kept == ["version_0", "version_1"]  # A's CSV and TensorBoard folders; B's are version_2 and version_3
    runs_b = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file() and
              path.parent.name in ("version_2", "version_3")}

    def resumed(versions: list[str] | None) -> list:
        loggers = [CSVLogger(str(tmp_path), name=""), TensorBoardLogger(str(tmp_path), name="")]
        continue_csv_logs(loggers, 4, versions)
        return continue_tensorboard_logs(loggers, 4, versions)

    assert [Path(logger.log_dir).name for logger in resumed(None)] == ["version_2", "version_3"]
    assert [Path(logger.log_dir).name for logger in resumed(["version_9"])] == ["version_4"] * 2  # the next, unmade
    for logger in resumed(kept):
        assert Path(logger.log_dir).name == kept[isinstance(logger, TensorBoardLogger)]
        logger.log_metrics({"train/loss_A": 0.45}, step=4)
        logger.finalize("success")
    assert {path: path.read_bytes() for path in runs_b} == runs_b
    assert [row["step"] for row in csv.DictReader((tmp_path / "version_0" / "metrics.csv").open())] == [
        "0", "1", "2", "3", "4"]


@pytest.mark.slow  # four short runs of bert-tiny: 40 s on 2 cores
def test_a_csv_log_resumed_twice_holds_the_uninterrupted_runs_rows(shared_data, minilm, monkeypatch, tmp_path,
                                                                    capsys):
    """A CSV-logged WNLI run of 8 steps, and the same run in parts: 4 steps, resumed to 6, then resumed again from
    the step-4 checkpoint (as after a kill -9 that lost the checkpoint of step 6) to 8. The parts' log is one
    metrics.csv holding the uninterrupted run's rows: every step once, at its own step, with the same losses,
    validations and final evaluation; the same best checkpoint, metrics.json and closing lines, which name the log.
    (A resume used to start a version_<n> folder per part; and a part resumed from a fit that had ended on a
    validation logged every step one too far on.)"""
    import shutil


    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))

    def run(root: Path, steps: int, *extra: str) -> None:
        wnli_run(minilm, root, steps, "--trainer.logger", "CSVLogger", "--trainer.logger.flush_logs_every_n_steps",
                 "1", *extra)

    def closing_lines(root: Path) -> list[str]:  # the summary printed last, with the run folder's name out
        lines = capsys.readouterr().out.splitlines()
        return [line.replace(str(root), "<run>") for line in lines[lines.index(next(
            line for line in lines if line.startswith("litbert: resolved config"))):]]

    whole, parts = tmp_path / "whole", tmp_path / "parts"
    run(whole, 8)
    expected = closing_lines(whole)
    assert "litbert: CSV log          <run>/version_0/metrics.csv" in expected
    run(parts, 4)
    last = parts / "checkpoints" / "last.ckpt"
    shutil.copy(last, tmp_path / "step4.ckpt")
    run(parts, 6, "--ckpt_path", "last")
    shutil.copy(tmp_path / "step4.ckpt", last)
    capsys.readouterr()
    run(parts, 8, "--ckpt_path", "last")
    assert closing_lines(parts) == expected
    reference = csv_rows(whole)
    assert [row["step"] for row in reference if "train/loss" in row] == [str(step) for step in range(8)]
    assert csv_rows(parts) == reference
    # The whole run's results, not the last part's: its best checkpoint over every validation, and its metrics.
    assert sorted(path.name for path in (parts / "checkpoints").iterdir()) == \
        sorted(path.name for path in (whole / "checkpoints").iterdir())
    assert (parts / "metrics.json").read_text() == (whole / "metrics.json").read_text()


@pytest.mark.slow  # four short runs of bert-tiny, as the CSV test's
def test_a_tensorboard_log_resumed_twice_holds_the_uninterrupted_runs_scalars(shared_data, minilm, monkeypatch,
                                                                            tmp_path):
    """The WNLI run of the CSV test above in TensorBoard: 8 steps at once, and in parts (4 steps, resumed to 6, then
    resumed again from the step-4 checkpoint as after a kill -9). The parts are one run, one version folder, whose
    event files hold every point of the uninterrupted run once, at its step, with the same values: training losses,
    validations and the final evaluation, as TensorBoard's data server (which heeds no purge marker) and its Python
    reader (EventAccumulator) show them. (A resume used to start a version_<n> folder per part, each its own run.)"""
    import shutil

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))

    def run(root: Path, steps: int, *extra: str) -> None:
        wnli_run(minilm, root, steps, "--trainer.logger", "TensorBoardLogger", *extra)

    def scalars(root: Path) -> dict[str, list[tuple[int, float]]]:
        (log,) = root.glob("version_*")  # one run, whatever the parts
        reader = EventAccumulator(str(log))
        reader.Reload()
        shown = {tag: [(point.step, round(point.value, 6)) for point in reader.Scalars(tag)]
                 for tag in reader.Tags()["scalars"] if not tag.endswith(TIMINGS)}
        assert shown == tensorboard_scalars(log)
        return shown

    whole, parts = tmp_path / "whole", tmp_path / "parts"
    run(whole, 8)
    run(parts, 4)
    last = parts / "checkpoints" / "last.ckpt"
    shutil.copy(last, tmp_path / "step4.ckpt")
    run(parts, 6, "--ckpt_path", "last")
    shutil.copy(tmp_path / "step4.ckpt", last)
    run(parts, 8, "--ckpt_path", "last")
    reference = scalars(whole)
    assert [step for step, _ in reference["train/loss"]] == list(range(8))
    assert [step for step, _ in reference["val/loss"]] == [1, 3, 5, 7, 8]  # 8: the best checkpoint's, after training
    assert scalars(parts) == reference
