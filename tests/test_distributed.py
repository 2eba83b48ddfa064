"""Two CPU processes (gloo) train what one process trains, through `python train.py` and configs/glue/wnli.yaml: DDP,
and FSDP (litbert's `tasks.run.fsdp.FSDPStrategy`, run on the CPU by `tests/fsdp_cpu.py`). A random bert-tiny
without dropout, float32, a constant learning rate; each rank takes half of one process's batch of 16 (the
distributed sampler deals the same shuffled order out to the ranks), so every step averages the gradient of the
same 16 examples and clips it by the norm of the whole of it (above 1 at half the steps). The exported weights,
metrics and test predictions are one process's, and an FSDP run resumed from its checkpoint ends with them too. A
checkpoint of the two ranks resumes on one process that keeps the global batch of 16 (with MLM: the same examples
and masks a step)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from recording import recorded
from runs import MINILM, REPO, by_step, environment, train, wandb_history, wandb_runs
from safetensors.torch import load_file

from tasks.run.checkpoint_io import LAST
from tasks.run.cli import make_cli

GLUE = "configs/glue/wnli.yaml"  # 635 training pairs
MLM = "configs/quickstart.yaml"
STRATEGIES = {"ddp": ["--trainer.strategy", "ddp"],
              "fsdp": ["--trainer.strategy", "fsdp_cpu.CPUFSDPStrategy", "--trainer.strategy.process_group_backend",
                       "gloo"]}
# The largest difference between a weight trained by two ranks and by one process in 6 steps: the ranks sum each
# gradient in another order (measured: 9.5e-8 under FSDP). One step moves a weight by up to the learning rate, 1e-3,
# and the weight decay of 1.0 shrinks the matrices (not the biases and norm scales) by 0.1% a step.
ATOL = 1e-6


@pytest.fixture(scope="module")
def env(shared_data, tmp_path_factory) -> dict[str, str]:
    """The ranks import `fsdp_cpu` from tests/."""
    paths = [str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH", "")]
    return environment(LITBERT_DATA=str(shared_data), LITBERT_CACHE=str(tmp_path_factory.mktemp("cache")),
                       PYTHONPATH=os.pathsep.join(p for p in paths if p))


def args(*extra: str) -> list[str]:
    return ["--model.encoder.preset", "bert-tiny", "--model.encoder.hidden_dropout", "0",
            "--model.encoder.attention_dropout", "0", "--model.classifier_dropout", "0", "--data.tokenizer", MINILM,
            "--trainer.accelerator", "cpu", "--trainer.precision", "32", "--model.optimization.learning_rate", "1e-3",
            "--model.optimization.schedule", "constant", "--model.optimization.warmup", "0",
            "--model.optimization.weight_decay", "1.0", "--checkpoint.every_n_steps", "3", "--trainer.max_steps", "6",
            "--trainer.log_every_n_steps", "2", *extra]


def two_ranks(strategy: str, *extra: str) -> list[str]:
    return args("--trainer.devices", "2", "--data.batch_size", "8", *STRATEGIES[strategy], *extra)


def assert_ok(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, f"status {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def assert_same_weights(ours: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> None:
    assert ours.keys() == reference.keys()
    for name, value in reference.items():
        torch.testing.assert_close(ours[name], value, rtol=0, atol=ATOL, msg=name)


def keep_every_3(folder: Path) -> list[str]:
    """Lightning's ModelCheckpoint keeps every save in `folder` (litbert's last.ckpt only the newest)."""
    return ["--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
            "--trainer.callbacks.every_n_train_steps", "3", "--trainer.callbacks.save_top_k", "-1",
            "--trainer.callbacks.dirpath", str(folder), "--export", "false", "--predict", "false"]


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]


@pytest.fixture(scope="module")
def single(env, tmp_path_factory) -> Path:
    """One process, batches of 16: the run the two ranks must repeat."""
    root = tmp_path_factory.mktemp("single")
    assert_ok(train(GLUE, root, *args("--trainer.devices", "1", "--data.batch_size", "16"), env=env))
    return root


@pytest.mark.slow  # three train.py runs, two of them of two processes: minutes on 2 cores
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_processes_train_and_export_what_one_process_does(strategy, single, env, tmp_path):
    """fit, validation of the best checkpoint loaded into the (sharded) model, export gathered from the shards,
    prediction of the test set: the exported model, metrics.json and the submission are one process's, written
    once, with one W&B run."""
    assert_ok(train(GLUE, tmp_path, *two_ranks(strategy), env=env))
    ours = load_file(tmp_path / "model" / "model.safetensors")
    reference = load_file(single / "model" / "model.safetensors")
    assert_same_weights(ours, reference)
    assert ours["bert.embeddings.word_embeddings.weight"].shape == (30522, 128)  # whole, not a rank's shard
    assert (tmp_path / "model" / "config.json").read_text() == (single / "model" / "config.json").read_text()
    metrics, expected = (json.loads((root / "metrics.json").read_text()) for root in (tmp_path, single))
    assert metrics["val/accuracy"] == expected["val/accuracy"]
    assert metrics["val/loss"] == pytest.approx(expected["val/loss"], rel=1e-5)
    assert (tmp_path / "submission" / "WNLI.tsv").read_text() == (single / "submission" / "WNLI.tsv").read_text()
    assert len(wandb_runs(tmp_path)) == 1
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["best-6.ckpt", LAST]
    # The logged training loss is the whole batch's (the mean of the ranks' halves), not rank 0's half.
    losses, expected_losses = (by_step(wandb_history(root), "train/loss") for root in (tmp_path, single))
    assert sorted(losses) == sorted(expected_losses) == [1, 3, 5]  # logged every 2 steps: steps 2, 4 and 6
    assert losses == pytest.approx(expected_losses, rel=1e-5)


@pytest.mark.slow  # two train.py runs of two processes, beside the single one: minutes on 2 cores
def test_an_fsdp_run_resumed_from_its_checkpoint_ends_as_one_process_does(single, env, tmp_path):
    """FSDP checkpoints hold the full state (Lightning's `state_dict_type="full"`): one file of whole tensors. A run
    resumed from the checkpoint of its step 3 (weights, AdamW's moments, the data position) ends at step 6 with the
    weights of the uninterrupted FSDP run, bit for bit, and of one process's run."""
    kept = tmp_path / "kept"
    assert_ok(train(GLUE, tmp_path / "whole", *two_ranks("fsdp", *keep_every_3(kept)), env=env))
    halfway, whole = kept / "epoch=0-step=3.ckpt", kept / "epoch=0-step=6.ckpt"
    state = torch.load(halfway, map_location="cpu", weights_only=True)
    reference = weights(single / "checkpoints" / LAST)
    assert state["global_step"] == 3
    assert {k: v.shape for k, v in state["state_dict"].items()} == {k: v.shape for k, v in reference.items()}
    (optimizer,) = state["optimizer_states"]
    assert {tuple(moments["exp_avg"].shape) for moments in optimizer["state"].values()} >= {(30522, 128), (2, 128)}
    # Three steps more move the weights far beyond the tolerance: a resume that lost the moments, or repeated or
    # skipped batches, would not end at the reference.
    assert max((state["state_dict"][k] - v).abs().max() for k, v in reference.items()) > 100 * ATOL

    resumed = tmp_path / "resumed"
    assert_ok(train(GLUE, resumed, *two_ranks("fsdp", "--ckpt_path", str(halfway), "--export", "false",
                                              "--predict", "false"), env=env))
    last = weights(resumed / "checkpoints" / LAST)
    assert torch.load(resumed / "checkpoints" / LAST, map_location="cpu", weights_only=True)["global_step"] == 6
    assert all(torch.equal(last[k], v) for k, v in weights(whole).items())
    assert_same_weights(last, reference)

    # A resume that changes the optimizer's settings trains with them under FSDP as under DDP. Lightning's FSDP loads
    # the optimizer state before the task gives its groups the new settings, and kept the checkpoint's weight decay
    # and eps (only the schedule carried the new rate), while the run said it resumed with them.
    changed = ("--model.optimization.weight_decay", "0", "--model.optimization.learning_rate", "3e-3",
               "--model.optimization.eps", "1e-3", "--ckpt_path", str(halfway), "--export", "false", "--predict",
               "false")
    ends = {}
    for strategy in ("fsdp", "ddp"):
        done = train(GLUE, tmp_path / f"changed-{strategy}", *two_ranks(strategy, *changed), env=env)
        assert_ok(done)
        assert "resuming with model.optimization.learning_rate=0.003 (the checkpoint's: 0.001)" in done.stdout
        ends[strategy] = weights(tmp_path / f"changed-{strategy}" / "checkpoints" / LAST)
    assert_same_weights(ends["fsdp"], ends["ddp"])
    assert max((ends["fsdp"][k] - v).abs().max() for k, v in last.items()) > 100 * ATOL  # the settings took effect

    # The full state resumes on another number of processes with the same global batch: one process of 16 ends with
    # the weights of the two ranks' run.
    alone = tmp_path / "alone"
    assert_ok(train(GLUE, alone, *args("--trainer.devices", "1", "--data.batch_size", "16", "--ckpt_path",
                                       str(halfway), "--export", "false", "--predict", "false"), env=env))
    assert_same_weights(weights(alone / "checkpoints" / LAST), reference)


def test_fsdp_is_litberts_strategy_and_refused_on_the_cpu(tmp_path, monkeypatch, shared_data):
    """`--trainer.strategy fsdp` names litbert's FSDPStrategy, which Lightning refuses off CUDA; Lightning's own class
    (whose evaluation after fit fails) and sharded checkpoints are refused with the way on."""
    from lightning.pytorch.strategies import FSDPStrategy as LightningFSDP
    from lightning.pytorch.strategies import StrategyRegistry

    from tasks.run.fsdp import FSDPStrategy, check_strategy

    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    common = ["--config", GLUE, *args(), "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false"]
    with pytest.raises(ValueError, match="The strategy `fsdp` requires a GPU accelerator, but received `accelerator="):
        make_cli([*common, "--trainer.devices", "2", "--trainer.strategy", "fsdp"])
    assert StrategyRegistry["fsdp"]["strategy"] is FSDPStrategy
    assert StrategyRegistry["fsdp_cpu_offload"]["init_params"] == {"cpu_offload": True}
    with pytest.raises(ValueError, match="Use tasks.run.fsdp.FSDPStrategy"):
        check_strategy(LightningFSDP())
    check_strategy(FSDPStrategy())
    with pytest.raises(ValueError, match="state_dict_type='sharded': litbert's checkpoints are single files"):
        FSDPStrategy(state_dict_type="sharded").setup_environment()


@pytest.mark.slow  # five train.py runs, two of them of two processes: two minutes on 2 cores
def test_a_ddp_checkpoint_resumes_under_fsdp_and_on_one_process_with_the_same_global_batch(single, env, tmp_path):
    """A run moves from DDP to FSDP at a checkpoint (its model outgrew a device): resumed under FSDP from the DDP
    run's step 3, it ends at step 6 with one process's weights. torch's AdamW numbers its parameters group after
    group (the decayed ones first), and Lightning's FSDP read the numbers as places in the model: the moments of one
    parameter went to another, and the ranks failed at the first step (status 1, gloo's "Connection closed by peer").

    A run that lost a process goes on with the same global batch of 16: one process of 16, or of 8 twice a step,
    takes at each step the examples the two ranks would have (the data position converted: 3 batches of 8 on each
    rank are 6 of 8 on one), and ends with their weights (measured: 6e-8 apart). One process of 8, whose steps
    would average over 8 examples, is refused, naming the split that keeps 16."""
    kept = tmp_path / "kept"
    assert_ok(train(GLUE, tmp_path / "ddp", *two_ranks("ddp", *keep_every_3(kept)), env=env))
    halfway = kept / "epoch=0-step=3.ckpt"
    resumed = tmp_path / "resumed"
    assert_ok(train(GLUE, resumed, *two_ranks("fsdp", "--ckpt_path", str(halfway), "--export", "false", "--predict",
                                              "false"), env=env))
    assert torch.load(resumed / "checkpoints" / LAST, map_location="cpu", weights_only=True)["global_step"] == 6
    reference = weights(single / "checkpoints" / LAST)
    assert_same_weights(weights(resumed / "checkpoints" / LAST), reference)

    for batch_size, accumulation in (("16", "1"), ("8", "2")):
        alone = tmp_path / f"alone-{batch_size}"
        done = train(GLUE, alone, *args("--trainer.devices", "1", "--data.batch_size", batch_size,
                                        "--trainer.accumulate_grad_batches", accumulation, "--ckpt_path",
                                        str(halfway), "--export", "false", "--predict", "false"), env=env)
        assert_ok(done)
        assert (f"litbert: resuming on 1 process(es) x data.batch_size {batch_size} x trainer.accumulate_grad_batches "
                f"{accumulation} (the checkpoint's: 2 process(es) x data.batch_size 8 x "
                f"trainer.accumulate_grad_batches 1), the same global batch of 16: each step takes the examples the "
                f"run's would" in done.stdout)
        last = torch.load(alone / "checkpoints" / LAST, map_location="cpu", weights_only=True)
        assert last["global_step"] == 6
        assert last["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["completed"] == 6 * int(accumulation)
        assert_same_weights(last["state_dict"], reference)

    halved = train(GLUE, tmp_path / "halved", *args("--trainer.devices", "1", "--data.batch_size", "8",
                                                   "--ckpt_path", str(halfway)), env=env)
    assert halved.returncode == 2, halved.stderr[-3000:]
    assert ("The checkpoint to resume averaged each step over 2 process(es) x data.batch_size 8 x "
            "trainer.accumulate_grad_batches 1; this run's is 1 process(es) x data.batch_size 8 x "
            "trainer.accumulate_grad_batches 1: each step would average over 8 examples instead of 16. Resume with "
            "--data.batch_size 8 --trainer.accumulate_grad_batches 2 so that the global batch stays 16"
            in " ".join(halved.stderr.split()))


# BERT-style segments (`--data.packing segments`) batched from the epoch's one permutation, with dynamic masks keyed
# by (seed, epoch, example); the quickstart's model has no dropout. AdamW's eps of 1e-3: at 1e-6 the tied decoder's
# rows of tokens no batch holds, whose gradients are of the order of eps, turn float rounding into differences of
# 2e-5 in 6 steps of the learning rate of 3e-3 (one process of 8 against one of 4 twice a step; 1.2e-7 at 1e-3).
MLM_ARGS = ["--data.tokenizer", MINILM, "--data.train_tokenizer", "null", "--data.max_documents", "60",
            "--data.max_val_documents", "10", "--data.packing", "segments", "--trainer.val_check_interval", "100",
            "--trainer.accelerator", "cpu", "--trainer.precision", "32", "--trainer.max_steps", "6",
            "--checkpoint.every_n_steps", "3", "--model.optimization.schedule", "constant",
            "--model.optimization.warmup", "0", "--model.optimization.eps", "1e-3", "--export", "false",
            "--predict", "false"]


def recording(folder: Path) -> list[str]:
    return ["--trainer.callbacks+=recording.RecordSteps", "--trainer.callbacks.folder", str(folder)]


@pytest.fixture(scope="module")
def mlm_two_ranks(env, tmp_path_factory) -> Path:
    """An MLM run of 2 processes of batch 4: its steps' examples in `two-steps`, its step-3 and step-6 checkpoints
    in `kept`."""
    root = tmp_path_factory.mktemp("mlm")
    assert_ok(train(MLM, root / "two", *MLM_ARGS, "--trainer.devices", "2", "--trainer.strategy", "ddp",
                    "--data.batch_size", "4", *recording(root / "two-steps"), *keep_every_3(root / "kept"), env=env))
    return root


@pytest.mark.slow  # two MLM train.py runs of one process, beside the two processes': a minute on 2 cores
def test_an_mlm_step_of_two_processes_is_one_processs_over_the_same_tokens(mlm_two_ranks, env, tmp_path):
    """The masked-LM loss of a step is the mean over all the masked tokens of its batches, on every process, as the
    `Trainer` computes it with `num_items_in_batch` (`EncoderTask.token_loss`): 2 processes of 4, one of 8 and one
    of 4 twice a step end with the same weights, though the halves of a step hold other counts of masked tokens
    (99 and 118 at a step) than one batch of 8 or its halves do. (Averaging each batch's own tokens, as litbert
    did, one process of 8 ended 7.6e-3 from one of 4 twice a step.)"""
    reference = weights(mlm_two_ranks / "kept" / "epoch=0-step=6.ckpt")
    for batch_size, accumulation in (("8", "1"), ("4", "2")):
        root = tmp_path / f"one-{batch_size}"
        assert_ok(train(MLM, root, *MLM_ARGS, "--data.batch_size", batch_size, "--trainer.accumulate_grad_batches",
                        accumulation, env=env))
        assert_same_weights(weights(root / "checkpoints" / LAST), reference)


@pytest.mark.slow  # two MLM train.py runs, beside the two processes': a minute on 2 cores
def test_an_mlm_run_resumes_on_one_process_with_the_same_examples_and_masks(mlm_two_ranks, env, tmp_path):
    """A 2-process run of batch 4 resumed at step 3 on one process of batch 8, or of 4 twice a step, trains each
    later step on the very examples and masked tokens of the two ranks' step, and ends with their weights."""
    kept, two = mlm_two_ranks / "kept", recorded(mlm_two_ranks / "two-steps")
    assert sorted(two) == list(range(6)) and all(len(examples) == 8 for examples in two.values())
    for batch_size, accumulation in (("8", "1"), ("4", "2")):
        name = f"one-{batch_size}"
        done = train(MLM, tmp_path / name, *MLM_ARGS, "--data.batch_size", batch_size,
                     "--trainer.accumulate_grad_batches", accumulation,
                     "--ckpt_path", str(kept / "epoch=0-step=3.ckpt"),
                     *recording(tmp_path / f"{name}-steps"), env=env)
        assert_ok(done)
        assert "the same global batch of 8" in done.stdout
        one = recorded(tmp_path / f"{name}-steps")
        assert sorted(one) == [3, 4, 5] and all(one[step] == two[step] for step in one)
        assert any(label != -100 for _, labels in one[3] for label in labels)  # masks compared, not just tokens
        assert_same_weights(weights(tmp_path / name / "checkpoints" / LAST), weights(kept / "epoch=0-step=6.ckpt"))


def test_a_run_leaves_its_process_groups_before_the_interpreter_ends(tmp_path):
    """`train.py` destroys its process groups as it returns, whatever the outcome: Lightning does so at exit for NCCL
    only, and a gloo group left to the interpreter's shutdown intermittently ended a 2-rank run that had succeeded in
    SIGABRT ("terminate called without an active exception", as its worker threads outlived Python)."""
    import torch.distributed as dist

    import train

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert train.cli_main(["--config", str(tmp_path / "missing.yaml")]) != 0
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
