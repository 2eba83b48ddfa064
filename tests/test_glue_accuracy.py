"""The shipped GLUE defaults keep accuracy: STS-B from the real MiniLM-L6 through train.py and its shipped config,
one epoch, against transformers' `Trainer` at the same hyper-parameters (bench/glue.py, BENCHMARKS.md)."""

from __future__ import annotations

import json
import re
import statistics

import pytest
from runs import MINILM, SharedMasks, environment, recorded_steps, train, trainer_losses, trainer_rows

# transformers' Trainer, random batches, the shipped STS-B hyper-parameters, one epoch, full STS-B, 3 seeds on this
# project's CPU (bench/glue.py --tasks stsb --seeds 0 1 2 --epochs 1): dev Pearson 0.492, 0.531, 0.558.
TRANSFORMERS_PEARSON = (0.492, 0.531, 0.558)
# The length-grouped batches this config used before gave 0.28 after one epoch.


@pytest.mark.slow  # a full STS-B epoch of MiniLM-L6: minutes on 2 CPU cores
def test_shipped_stsb_config_reaches_the_transformers_baseline(shared_data, tmp_path):
    done = train("configs/glue/stsb.yaml", tmp_path, "--model.pretrained", MINILM, "--trainer.max_epochs", "1",
                 "--trainer.logger", "false", "--export", "false", "--predict", "false",
                 env=environment(LITBERT_DATA=str(shared_data), LITBERT_CACHE=str(tmp_path / "cache")), timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    # Within seed noise: litbert's own seeds spread as widely (0.456 to 0.538), so the bound is the baseline's lowest
    # seed less 0.05, far above the 0.28 of length-grouped batches.
    assert metrics["val/pearson"] >= min(TRANSFORMERS_PEARSON) - 0.05, metrics
    assert metrics["val/spearman"] >= 0.4, metrics


@pytest.mark.slow  # four fine-tunes of 32 RTE examples and their dev evaluations: about 3 minutes on 2 CPU cores
def test_the_glue_benchmark_resumes_a_sweep_from_its_json(shared_data, tmp_path):
    """A sweep too long for one sitting: the runs its --json already holds are kept, only the others run."""
    import subprocess
    import sys

    from runs import REPO

    results = tmp_path / "glue.json"
    command = [sys.executable, "-m", "bench.glue", "--tasks", "rte", "--max-train-examples", "32",
               "--epochs", "1", "--json", str(results)]
    env = environment(LITBERT_DATA=str(shared_data), LITBERT_CACHE=str(tmp_path / "cache"))
    subprocess.run([*command, "--seeds", "0", "--runs", "litbert"], check=True, cwd=REPO, env=env, timeout=900)
    first = json.loads(results.read_text())
    assert [(r["task"], r["run"], r["seed"], r["examples"]) for r in first] == [("rte", "litbert", 0, 32)]
    # A run recorded before MFU was: the resumed sweep fills in its work and peak.
    results.write_text(json.dumps([{k: v for k, v in first[0].items() if k not in ("model_flops", "peak_flops")}]))
    done = subprocess.run([*command, "--seeds", "0", "1", "--runs", "litbert", "transformers"], check=True, cwd=REPO,
                          env=env, timeout=900, capture_output=True, text=True)
    assert "rte seed 0 litbert: in " in done.stdout and done.stdout.count(": in ") == 1
    # Each run trained in a process of its own, not the sweep's.
    processes = re.findall(r"^rte seed \d \S+: .* \(process (\d+), malloc \w+\)$", done.stdout, flags=re.MULTILINE)
    assert len(processes) == 3 and len(set(processes)) == 3, done.stdout[-2000:]
    records = json.loads(results.read_text())
    # Both libraries' runs start on the sweep's own allocator (this process's environment), and record it.
    from bench.common import malloc

    assert {r["run"]: r["allocator"] for r in records} == {"litbert": malloc(), "transformers": malloc()}
    assert records[0]["seconds"] == first[0]["seconds"]  # kept, not run again
    assert records[0]["model_flops"] == first[0]["model_flops"] and records[0]["peak_flops"] > 1e9
    assert sorted((r["run"], r["seed"]) for r in records) == [("litbert", 0), ("litbert", 1), ("transformers", 0),
                                                               ("transformers", 1)]
    assert all(0.0 <= r["metrics"]["accuracy"] <= 1.0 for r in records)
    assert all(r["process"] == "fresh" for r in records)
    # A run that shared the machine keeps its metrics in the table, but not its time.
    contended = next(r for r in records if (r["run"], r["seed"]) == ("transformers", 0))
    contended |= {"contended": True, "seconds": 1e6, "samples_per_second": 1e-3}
    results.write_text(json.dumps(records))
    table = subprocess.run([sys.executable, "-m", "bench.glue", "--from-json", str(results)], check=True,
                           cwd=REPO, env=env, timeout=300, capture_output=True, text=True).stdout
    row = next(line for line in table.splitlines() if "| transformers" in line)
    other = next(r for r in records if (r["run"], r["seed"]) == ("transformers", 1))
    accuracy = (contended["metrics"]["accuracy"] + other["metrics"]["accuracy"]) / 2
    cells = [cell.strip() for cell in row.split("|")]
    assert f"accuracy {accuracy:.3f}" in row and f"{other['seconds']:.0f} (1)" in cells
    # MFU: the same useful work for both libraries (the real tokens' model FLOPs), against the measured peak.
    assert len({r["model_flops"] for r in records}) == 1 and all(r["peak_flops"] > 1e9 for r in records)
    mfu = statistics.median(r["model_flops"] / r["seconds"] / r["peak_flops"] for r in records if r["run"] == "litbert")
    cells = next(cells for line in table.splitlines() if (cells := [c.strip() for c in line.split("|")])[3:4] == [
        "litbert"])
    from bench.glue import percent

    assert cells[7] == percent(mfu)  # whole percents from 10%, two significant digits below
    # Each run records where it trained; a sweep does not resume into runs of another machine or precision.
    assert {(r["device"], r["precision"]) for r in records} == {(records[0]["device"], records[0]["precision"])}
    assert "threads on" in records[0]["device"] and records[0]["precision"] in ("32-true", "bf16-mixed")
    results.write_text(json.dumps([records[0] | {"device": "2 threads on another CPU"}]))
    refused = subprocess.run([*command, "--seeds", "0"], cwd=REPO, env=env, timeout=300, capture_output=True,
                             text=True)
    assert refused.returncode != 0
    assert f"{results} holds runs on 2 threads on another CPU, {records[0]['precision']}" in refused.stderr
    assert "give another --json" in refused.stderr
    assert json.loads(results.read_text())[0]["device"] == "2 threads on another CPU"  # nothing appended


@pytest.mark.slow  # one Trainer fine-tune of 32 RTE examples and a bfloat16 matmul peak (minutes on a CPU without AMX)
def test_the_glue_benchmark_runs_the_trainer_at_its_float32_default_beside_a_mixed_precision_sweep(shared_data,
                                                                                                     tmp_path):
    """Where litbert's shipped precision is a mixed one, `transformers-fp32` is the `Trainer` at its own default
    precision: the sweep's json keeps the shipped precision, the run its own, and its MFU is against the float32
    peak; where the shipped precision is float32 already, the run is refused."""
    import subprocess
    import sys

    from runs import REPO

    results = tmp_path / "glue.json"
    command = [sys.executable, "-m", "bench.glue", "--tasks", "rte", "--max-train-examples", "32",
               "--epochs", "1", "--seeds", "0", "--runs", "transformers-fp32", "--json", str(results)]
    env = environment(LITBERT_DATA=str(shared_data), LITBERT_CACHE=str(tmp_path / "cache"))
    refused = subprocess.run([*command, "--litbert-args", "--trainer.precision", "32-true"], cwd=REPO, env=env,
                             timeout=300, capture_output=True, text=True)
    assert refused.returncode != 0 and not results.exists()
    assert "shipped precision on this machine is 32-true already" in refused.stderr

    done = subprocess.run([*command, "--litbert-args", "--trainer.precision", "bf16-mixed"], check=True, cwd=REPO,
                          env=env, timeout=1200, capture_output=True, text=True)
    (record,) = json.loads(results.read_text())
    assert (record["run"], record["precision"], record["run_precision"]) == ("transformers-fp32", "bf16-mixed",
                                                                            "32-true")
    assert 0.0 <= record["metrics"]["accuracy"] <= 1.0
    peaks = re.search(r"matmul peak ([\d.]+) TFLOP/s \(bf16-mixed\), ([\d.]+) TFLOP/s \(32-true\)", done.stdout)
    assert peaks, done.stdout[-2000:]
    assert f"{record['peak_flops'] / 1e12:.3f}" == peaks[2] != peaks[1]


def _stsb_steps_of_both(shared_data, tmp_path, monkeypatch, steps, arguments, dropout, masks=None, **changes):
    """`steps` steps of the shipped STS-B config from MiniLM-L6 (float32, seed 0, with `arguments` added) and of
    transformers' `Trainer` at the same hyper-parameters (`changes` to its `TrainingArguments`) on the same batches in
    the same order, its classifier initialised as litbert's, its dropout rates `dropout`. With `masks` (litbert's,
    the `Trainer`'s), each side's dropout draws its masks from its own: litbert's `kernels.dropout` and torch's
    `F.dropout` are replaced while the side trains. Returns litbert's losses (one a batch), the `Trainer`'s (one a
    step), both models and the classifier's initial weights."""
    import torch
    import transformers

    from tasks.run.cli import make_cli

    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    cli = make_cli([
        "--config", "configs/glue/stsb.yaml", "--model.pretrained", MINILM, "--seed_everything", "0",
        "--trainer.precision", "32-true", "--trainer.accelerator", "cpu", "--trainer.max_steps", str(steps),
        "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false",
        "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false",
        "--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0", "--export", "false", *arguments])
    head = {k: v.clone() for k, v in cli.model.head.classifier.state_dict().items()}
    batches, losses = recorded_steps(cli, masks[0] if masks else None)
    assert cli.trainer.global_step == steps
    rows = trainer_rows(batches)
    transformers.set_seed(0)
    # eager attention: its dropout on the probabilities is `F.dropout`, where SDPA's is inside the kernel
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        MINILM, num_labels=1, attn_implementation="eager" if masks else "sdpa", dtype=torch.float32,
        classifier_dropout=dropout, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    model.classifier.load_state_dict(head)
    with monkeypatch.context() as patch:
        if masks:
            patch.setattr(torch.nn.functional, "dropout", masks[1])
        reference = trainer_losses(cli, model, rows, transformers.DataCollatorWithPadding(cli.datamodule.tokenizer),
                                   tmp_path / "trainer", **changes)
    assert len(reference) == steps
    return losses, reference, cli.model, model, head


def _assert_trained_alike(losses, reference, ours, theirs, initial, moved):
    """litbert's losses are the `Trainer`'s at every step, and its classifier moved from `initial` (by more than
    `moved` somewhere) to the `Trainer`'s weights."""
    import torch

    # The first loss is before any update; the later ones differ if any step's update does.
    assert losses == pytest.approx(reference, rel=1e-5, abs=1e-5), list(zip(losses, reference, strict=True))
    weights, reference_weights = ours.head.classifier.weight.detach(), theirs.classifier.weight.detach()
    assert (weights - initial["weight"]).abs().max() > moved
    torch.testing.assert_close(weights, reference_weights, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_the_shipped_stsb_config_trains_as_the_trainer_does_step_for_step(shared_data, tmp_path, monkeypatch):
    """Equal hyper-parameters give equal training: the shipped STS-B config from MiniLM-L6 and transformers'
    `Trainer` at the same settings (float32, dropout off on both sides, the same head initialisation, the same
    batches in the same order) reach the same loss at every step, within float32 rounding. The learning rate
    schedule (warmup from 0 at the first step, warmup steps rounded up), AdamW's decay groups, epsilon and
    clipping all enter from the second step on."""
    steps = 12  # warmup: 10% of 12 rounds up to 2 steps
    losses, reference, ours, theirs, head = _stsb_steps_of_both(
        shared_data, tmp_path, monkeypatch, steps, ["--model.encoder.hidden_dropout", "0",
                                                    "--model.encoder.attention_dropout", "0",
                                                    "--model.classifier_dropout", "0"], dropout=0.0)
    _assert_trained_alike(losses, reference, ours, theirs, head, moved=3e-5)  # the 12 learning rates add to 1.2e-4


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_the_shipped_stsb_config_drops_out_where_the_trainer_does(shared_data, tmp_path, monkeypatch):
    """With dropout on (the checkpoint's 0.1 everywhere, as shipped) and the same masks on both sides, litbert's
    STS-B training is the `Trainer`'s step for step: the same tensors are dropped, in the same order, at the same
    rates: embeddings, attention probabilities, attention and feed-forward outputs and the classifier's input. A
    dropout site one side has and the other lacks, or a different rate, changes the losses or the masks' sequence.
    Both sides' masks and scaling are `SharedMasks`'; litbert's own kernel (its rate rounding, scaling and masks'
    independence) is tested in tests/test_fast_paths.py. litbert runs its padded path here (`unpad_below 0`), where
    the tensors have the `Trainer`'s shapes; the unpadded path runs the same blocks on the real tokens only."""
    steps = 8
    masks = SharedMasks(0), SharedMasks(0)
    losses, reference, ours, theirs, head = _stsb_steps_of_both(
        shared_data, tmp_path, monkeypatch, steps, ["--model.kernels.unpad_below", "0"], dropout=0.1, masks=masks)
    config = ours.encoder.config
    assert config.hidden_dropout == config.attention_dropout == 0.1
    # per step: the embeddings, three per layer (attention probabilities, attention output, feed-forward output), the
    # classifier's input
    assert len(masks[0].shapes) == steps * (1 + 3 * config.num_layers + 1), len(masks[0].shapes)
    assert masks[0].shapes == masks[1].shapes
    _assert_trained_alike(losses, reference, ours, theirs, head, moved=2e-5)  # the 8 learning rates add up to 8e-5


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_with_accumulation_the_trainer_steps_as_litbert_at_its_clipping_and_epsilon_over_the_batches(
        shared_data, tmp_path, monkeypatch):
    """transformers 5's `Trainer` does not divide the loss of a BERT classifier by gradient_accumulation_steps (the
    model's `forward` takes **kwargs, so the `Trainer` leaves the division to a loss that never makes it:
    huggingface/transformers#47688): its gradient over A batches is the sum of their mean losses' gradients, A times
    the mean litbert takes, the last short window of an epoch included. AdamW sees that scale only through epsilon and
    the clipping bound, so litbert at max_grad_norm / A and eps / A trains as the `Trainer` does, step for step
    (docs/training.md). Nine batches in windows of two and a last one of one; the clipping bound among the steps'
    gradient norms (litbert's 15.2, 18.2, 16.4, 15.2 and 7.0 at 16), so that it clips some steps and not others. At
    equal settings instead (the `Trainer` at 16 and 5e-7 too) the fourth step's loss differs by 3.5e-4."""
    accumulate = 2
    losses, reference, ours, theirs, head = _stsb_steps_of_both(
        shared_data, tmp_path, monkeypatch, 5,
        ["--model.encoder.hidden_dropout", "0", "--model.encoder.attention_dropout", "0",
         "--model.classifier_dropout", "0", "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "9",
         "--trainer.accumulate_grad_batches", str(accumulate), "--trainer.gradient_clip_val", "16",
         "--model.optimization.eps", "5e-7"],
        dropout=0.0, max_grad_norm=16.0 * accumulate, adam_epsilon=5e-7 * accumulate)
    # litbert's losses are its batches' means over the window (Lightning divides each by A); the Trainer logs its
    # steps' sums of batch means.
    windows = [sum(losses[start:start + accumulate]) * accumulate for start in range(0, len(losses), accumulate)]
    assert len(losses) == 9
    assert windows == pytest.approx(reference, rel=1e-5, abs=1e-5), list(zip(windows, reference, strict=True))
    import torch

    weights, reference_weights = ours.head.classifier.weight.detach(), theirs.classifier.weight.detach()
    assert (weights - head["weight"]).abs().max() > 1e-5
    torch.testing.assert_close(weights, reference_weights, rtol=1e-5, atol=1e-6)
    embeddings = ours.encoder.embeddings.word.weight.detach()
    torch.testing.assert_close(embeddings, theirs.bert.embeddings.word_embeddings.weight.detach(), rtol=0, atol=2e-7)


def _built_run(optimization: dict, encoder: dict | None = None, **trainer):
    """What `bench.common.trainer_equivalents` reads of a built train.py run over a BERT checkpoint."""
    from types import SimpleNamespace

    from encoders import EncoderConfig
    from tasks.base import Optimization

    trainer = {"accumulate_grad_batches": 1, "max_steps": -1, "gradient_clip_algorithm": None, **trainer}
    return SimpleNamespace(
        model=SimpleNamespace(optimization=Optimization(**optimization),
                              encoder=SimpleNamespace(config=EncoderConfig.from_name("bert-mini", **(encoder or {}))),
                              head=SimpleNamespace(pooling="cls", pooler_activation="tanh")),
        config=SimpleNamespace(trainer=SimpleNamespace(**trainer)))


@pytest.mark.parametrize("schedule", [{"schedule": "constant", "warmup": 0.1}, {"schedule": "linear", "warmup": 7},
                                      {"schedule": "cosine", "warmup": 0.1},
                                      {"schedule": "cosine", "warmup": 0.1, "min_lr_ratio": 0.2}])
def test_the_benchmarks_trainer_takes_litberts_schedule_under_its_own_name(tmp_path, schedule):
    """The `Trainer` runs of bench.glue (and bench.ner, bench.multilabel) follow litbert's learning rates step for
    step. litbert's `constant` warms up over `warmup`: the `Trainer`'s `constant_with_warmup`. Given as
    lr_scheduler_type="constant", the `Trainer` ignored the warmup and trained at the peak from the first step."""
    import torch
    import transformers

    from bench.common import trainer_equivalents
    from bench.glue import trainer_arguments
    from tasks.base import lr_lambda

    settings = {"batch_size": 32, "eval_batch_size": 128, "learning_rate": 1.0, "weight_decay": 0.01,
                "betas": (0.9, 0.999), "eps": 1e-6, "warmup": schedule["warmup"], "epochs": 3, "max_grad_norm": 1.0,
                "precision": "32-true", **trainer_equivalents(_built_run(schedule))}
    arguments = trainer_arguments(settings, "transformers", 0, str(tmp_path))
    total = 80
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    theirs = transformers.get_scheduler(  # as Trainer.create_scheduler builds it
        arguments.lr_scheduler_type, optimizer, num_warmup_steps=arguments.get_warmup_steps(total),
        num_training_steps=total, scheduler_specific_kwargs=arguments.lr_scheduler_kwargs)
    warmup = 8 if schedule["warmup"] == 0.1 else 7
    mine = [lr_lambda(step, warmup, total, schedule["schedule"], min_lr_ratio=schedule.get("min_lr_ratio", 0.0))
            for step in range(total)]
    assert [theirs.lr_lambdas[0](step) for step in range(total)] == pytest.approx(mine, abs=1e-12)
    assert mine[0] == 0.0 and mine[warmup] == 1.0


def test_the_benchmarks_give_the_trainer_the_encoders_dropouts_and_refuse_what_it_cannot_take():
    """Settings given to the litbert runs reach the `Trainer`'s model (the encoder's dropouts, the new head's
    initialisation), or stop the benchmark with their names: before, the `Trainer` side kept the checkpoint's
    dropouts and ignored accumulation, layer-wise rates or a floor under the linear decay without a word."""
    from bench.common import trainer_equivalents

    run = _built_run({}, {"hidden_dropout": 0.0, "attention_dropout": 0.05, "initializer_range": 0.01})
    assert trainer_equivalents(run)["model"] == {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.05,
                                                 "initializer_range": 0.01}
    for refused, settings in (
            ("trainer.accumulate_grad_batches=2 (transformers 5's Trainer sums",
             ({}, None, {"accumulate_grad_batches": 2})),
            ("model.optimization.layer_decay=0.8", ({"layer_decay": 0.8}, None, {})),
            ("model.optimization.min_lr_ratio=0.1 (the Trainer floors the cosine alone",
             ({"min_lr_ratio": 0.1}, None, {})),
            ("model.optimization.schedule='wsd'", ({"schedule": "wsd", "warmup": 10}, None, {})),
            ("trainer.max_steps=100", ({}, None, {"max_steps": 100})),
            ("model.encoder.feed_forward_dropout='inner'", ({}, {"feed_forward_dropout": "inner"}, {}))):
        optimization, encoder, trainer = settings
        with pytest.raises(SystemExit, match=re.escape(f"No setting of the Trainer trains as {refused}")):
            trainer_equivalents(_built_run(optimization, encoder, **trainer))
