"""Tokens/s, samples/s and MFU during training: the FLOP counts tasks report, and the callback that turns them into
rates."""

import lightning as L
import pytest
import torch
from tiny import TINY, mlm_batches
from torch.utils.data import DataLoader

from encoders import Encoder, EncoderConfig
from tasks.classification import SequenceClassification
from tasks.distillation import Distillation
from tasks.mlm import MaskedLM
from tasks.run.throughput import Throughput, matmul_dtype


def hand_flops_per_token(config: EncoderConfig, seq: int) -> int:
    """One forward pass per token, written out: Q, K, V and output projections, the feed-forward's two matmuls,
    and attention's QK^T and PV over `seq` keys; two FLOPs per multiply-add."""
    c, inner, layers = config.hidden_size, config.intermediate_size, config.num_layers
    projections = 4 * c * c + 2 * c * inner
    attention = 2 * seq * c
    return layers * 2 * (projections + attention)


def test_encoder_flops_count_real_tokens_at_their_own_length():
    config = EncoderConfig.from_name("bert-mini", vocab_size=100)
    encoder = Encoder(config)
    assert encoder.flops_per_token(128) == hand_flops_per_token(config, 128)
    assert encoder.flops_per_token(128, training=True) == 3 * hand_flops_per_token(config, 128)
    assert encoder.flops([10, 3]) == 10 * hand_flops_per_token(config, 10) + 3 * hand_flops_per_token(config, 3)


def test_sliding_window_layers_count_the_keys_in_their_window():
    """Four layers, every other within 8 tokens: at 128 tokens the two local layers attend to 17 keys, not 128."""
    config = EncoderConfig.from_name("bert-mini", vocab_size=100, local_window=8, global_every=2)
    full = hand_flops_per_token(config, 128)
    local = hand_flops_per_token(config, 17)
    assert Encoder(config).flops_per_token(128) == (full + local) // 2
    assert Encoder(config).flops_per_token(10) == hand_flops_per_token(config, 10)  # shorter than the window


@pytest.mark.parametrize("training", [False, True])
def test_first_token_only_counts_the_last_layers_keys_and_values_of_the_other_tokens(training):
    """A classifier's last layer computes the first token only (`first_token_only`): every other token counts its
    key and value projections there (4 c^2), not the rest of the layer, here a sliding-window layer of 17 keys."""
    config = EncoderConfig.from_name("bert-mini", vocab_size=100, local_window=8, global_every=2)  # layer 3: local
    encoder, c, factor = Encoder(config), config.hidden_size, 3 if training else 1
    for n in (5, 40):
        last_layer = hand_flops_per_token(config, min(n, 17)) // config.num_layers
        expected = encoder.flops([n], training) - factor * (n - 1) * (last_layer - 4 * c * c)
        assert encoder.flops([n], training, first_token_only=True) == expected
    assert encoder.flops([5, 40, 40], training, first_token_only=True) == (
        encoder.flops([5], training, first_token_only=True) + 2 * encoder.flops([40], training, first_token_only=True))


def test_masked_lm_flops_add_the_head_on_masked_tokens_only():
    model = MaskedLM(encoder=TINY, vocab_size=64)
    batch = mlm_batches(1)[0]
    batch["attention_mask"][1, 20:] = 0  # padding is not counted
    config = model.encoder.config
    lengths = batch["attention_mask"].sum(1).tolist()
    masked = int((batch["labels"] != -100).sum())
    c, v = config.hidden_size, config.vocab_size
    expected = sum(3 * hand_flops_per_token(config, n) * n for n in lengths) + masked * 3 * 2 * (c * c + c * v)
    assert model.training_flops(batch) == expected


def test_distillation_flops_add_the_teachers_forward(teacher_dir):  # noqa: F811 (fixture)
    model = Distillation(teacher=str(teacher_dir))
    batch = mlm_batches(1)[0]
    lengths = batch["attention_mask"].sum(1).tolist()
    masked = int((batch["labels"] != -100).sum())
    student = model.encoder.flops(lengths, training=True) + masked * model.head.flops_per_token(training=True)
    teacher = model.teacher.encoder.flops(lengths) + masked * model.teacher.head.flops_per_token()
    assert model.teacher.encoder.config.num_layers == 2 * model.encoder.config.num_layers
    assert model.training_flops(batch) == student + teacher
    assert teacher > student / 3  # the frozen teacher's forward is a real share of the step


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sequence_classification_flops_are_the_encoders(pooling):
    """BERT's pooler reads the first token, so the last layer computes no other (`first_token_only`); mean pooling
    needs every token's."""
    model = SequenceClassification(encoder=TINY, vocab_size=64, num_labels=2, pooling=pooling)
    ids = torch.randint(5, 64, (4, 12))
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    full = model.encoder.flops([5, 12, 12, 12], training=True)
    expected = model.encoder.flops([5, 12, 12, 12], training=True, first_token_only=True) if pooling == "cls" else full
    assert model.training_flops({"input_ids": ids, "attention_mask": mask}) == expected
    assert (expected < full) == (pooling == "cls")


def test_matmul_dtype_follows_the_precision_setting():
    assert matmul_dtype("bf16-mixed") == torch.bfloat16
    assert matmul_dtype("16-mixed") == torch.float16
    assert matmul_dtype("32-true") == torch.float32
    with pytest.raises(ValueError, match="peak_flops"):
        Throughput(peak_flops=0)


class Recorder(L.Callback):
    """Every value the callback logged, step by step (callback_metrics keeps only the last)."""

    def __init__(self) -> None:
        self.logged: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("train/")}
        rate = metrics.get("train/tokens_per_sec")
        if rate is not None and (not self.logged or rate != self.logged[-1]["train/tokens_per_sec"]):
            self.logged.append(metrics)


@pytest.mark.parametrize("peak", [2e11, "table", None])
def test_callback_logs_tokens_and_samples_per_second_and_mfu(peak, monkeypatch):
    """A given peak, or the device's from Lightning's table (patched: the tests run on a CPU), gives MFU; a device the
    table does not know (this CPU) gives none, and is never probed inside the fit."""
    from tasks.run import throughput as module

    if peak == "table":
        asked = []
        monkeypatch.setattr(module, "get_available_flops", lambda device, dtype: asked.append((device, dtype)) or 3e11)
    torch.manual_seed(0)
    model = MaskedLM(encoder=TINY, vocab_size=64)
    batches = mlm_batches(12)
    for batch in batches[::2]:
        batch["attention_mask"][:, 18:] = 0  # some padded batches: their padding must not count
        batch["labels"][:, 18:] = -100
    throughput = Throughput(peak_flops=None if peak == "table" else peak, log_every_n_steps=3)
    recorder = Recorder()
    trainer = L.Trainer(max_steps=12, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[throughput, recorder])
    trainer.fit(model, DataLoader(batches, batch_size=None))

    expected_peak = {"table": 3e11, None: None}.get(peak, peak)
    assert throughput.peak_flops == expected_peak
    if peak == "table":
        assert asked == [(torch.device("cpu"), torch.float32)]
    assert len(recorder.logged) == 4  # steps 3, 6, 9, 12
    # Each window holds three batches; the rates share one elapsed time, so their ratio is exactly the
    # window's FLOPs per real token, which the batches fix.
    for window, metrics in enumerate(recorder.logged):
        chunk = batches[3 * window: 3 * window + 3]
        flops = sum(model.training_flops(b) for b in chunk)
        tokens = sum(int(b["attention_mask"].sum()) for b in chunk)
        samples = sum(len(b["input_ids"]) for b in chunk)
        assert metrics["train/tokens_per_sec"] > 0
        assert metrics["train/tflops"] * 1e12 / metrics["train/tokens_per_sec"] == pytest.approx(flops / tokens,
                                                                                              rel=1e-5)
        assert metrics["train/samples_per_sec"] / metrics["train/tokens_per_sec"] == pytest.approx(samples / tokens,
                                                                                                rel=1e-5)
        if expected_peak is None:
            assert "train/mfu" not in metrics
        else:
            assert metrics["train/mfu"] == pytest.approx(metrics["train/tflops"] * 1e12 / expected_peak, rel=1e-5)


def test_callback_refuses_a_module_without_a_flop_count():
    class Plain(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = L.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[Throughput(1e12)])
    with pytest.raises(TypeError, match="training_flops"):
        trainer.fit(Plain(), DataLoader([torch.randn(2)], batch_size=None))



def test_callback_waits_for_the_device_at_the_steps_it_logs_only(monkeypatch):
    """The wait for the device (a CUDA synchronize, a host sync) comes at the steps that log and nowhere else: not
    where a window starts (the fit's first batch, an epoch's, the first after a validation), and not after the
    first batch of an accumulated step, which ends no optimizer step (it logged a window of one batch at step 0)."""
    waits = []
    monkeypatch.setattr(Throughput, "_synchronize", staticmethod(lambda module: waits.append(run.global_step)))
    torch.manual_seed(0)
    throughput, recorder = Throughput(log_every_n_steps=3), Recorder()
    # 8 batches an epoch, 2 a step: 4 steps an epoch, a validation every 3 batches.
    run = L.Trainer(max_steps=6, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                    accumulate_grad_batches=2, val_check_interval=3, limit_val_batches=1,
                    callbacks=[throughput, recorder])
    batches = mlm_batches(8)
    run.fit(MaskedLM(encoder=TINY, vocab_size=64), DataLoader(batches, batch_size=None),
            DataLoader(batches[:1], batch_size=None))
    assert run.global_step == 6  # 4 steps in the first epoch, 2 in the second
    assert waits == [3, 6]
    assert len(recorder.logged) == 2
