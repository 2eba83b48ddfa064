"""Task modules on small synthetic batches: optimisation pieces, losses, metrics, distillation."""

import copy
import dataclasses
import math
import random
import typing
import warnings

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import Logger
from tiny import TINY, mlm_batches, trainer
from torch.utils.data import DataLoader

from encoders import Encoder, EncoderConfig, Kernels, MaskedLMHead
from tasks.base import (
    DivergenceError,
    EncoderSpec,
    Optimization,
    build_encoder,
    lr_lambda,
    parameter_groups,
    read_pretrained,
)
from tasks.classification import SequenceClassification, TokenClassification
from tasks.distillation import Distillation, distillation_losses, student_from_teacher
from tasks.metrics import EntityF1, classification_metrics, entity_spans, is_chunk_tagging
from tasks.mlm import MaskedLM


def test_lr_schedule():
    # Warmup from 0 at the first step, as BERT's optimizer and transformers' schedules (the Trainer's) have it.
    assert lr_lambda(0, 10, 100, "linear") == 0.0
    assert lr_lambda(1, 10, 100, "linear") == pytest.approx(0.1)
    assert lr_lambda(9, 10, 100, "linear") == pytest.approx(0.9)
    assert lr_lambda(10, 10, 100, "linear") == pytest.approx(1.0)
    assert lr_lambda(0, 0, 100, "linear") == 1.0  # no warmup: the peak from the first step
    assert lr_lambda(55, 10, 100, "linear") == pytest.approx(0.5)
    assert lr_lambda(100, 10, 100, "linear") == pytest.approx(0.0)
    assert lr_lambda(55, 10, 100, "cosine") == pytest.approx(0.5)
    assert lr_lambda(32, 10, 100, "cosine") == pytest.approx(0.5 * (1 + math.cos(math.pi * 22 / 90)))
    assert lr_lambda(80, 10, 100, "constant") == 1.0
    # Warmup-stable-decay: the peak until the last 20 steps, then a straight line to zero.
    assert [lr_lambda(s, 10, 100, "wsd", 20) for s in (5, 10, 79, 80, 90, 99, 100)] == pytest.approx(
        [0.5, 1.0, 1.0, 1.0, 0.5, 0.05, 0.0])


def test_warmup_steps_count_as_the_trainer_counts_them():
    """A fraction of the run rounds up (transformers' `TrainingArguments.get_warmup_steps`), a number of steps is
    taken as given, 0 is no warmup. Unlike the `Trainer`'s, no warmup outlasts the run: a longer one ends with it,
    so the peak is reached at the last step rather than never."""
    assert Optimization(warmup=0.1).warmup_steps(575) == 58  # MRPC's 5 epochs: 57.5 steps
    assert Optimization(warmup=0.1).warmup_steps(540) == 54
    assert Optimization(warmup=10).warmup_steps(100) == 10
    assert Optimization(warmup=0).warmup_steps(100) == 0
    with pytest.warns(UserWarning, match="warmup=500 steps is longer than the run's 100 steps"):
        assert Optimization(warmup=500).warmup_steps(100) == 100


def test_decay_length_belongs_to_wsd():
    with pytest.raises(ValueError, match="decay=0.1 is the decay length of the `wsd` schedule"):
        Optimization(schedule="linear", decay=0.1)
    assert Optimization(schedule="wsd", decay=0.1).steps(0.1, 500) == 50
    assert Optimization(schedule="wsd").steps(30, 500) == 30


def test_no_weight_decay_on_biases_and_norms():
    model = MaskedLM(encoder=TINY, vocab_size=64)
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(names[id(p)].endswith("weight") and p.ndim == 2 for p in decay["params"])
    assert any(names[id(p)].endswith("norm.weight") for p in no_decay["params"])
    assert all(p.ndim == 1 for p in no_decay["params"])
    # The tied decoder appears once.
    assert len(decay["params"]) + len(no_decay["params"]) == len({id(p) for p in model.parameters()})


class Recorded(Logger):
    """The metrics Lightning hands its loggers, by step."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[int, dict[str, float]] = {}

    name, version = "recorded", 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.rows.setdefault(step, {}).update(metrics)

    def log_hyperparams(self, *args, **kwargs) -> None:
        pass


def test_an_accumulated_steps_logged_values_are_its_tokens_mean():
    """Lightning logs the value of a step's last batch; the `Trainer` logs the step's loss over all its batches. The
    MLM loss, accuracy and perplexity logged for a step of 2 accumulated batches are their means over the step's
    masked tokens, as its gradient is (`test_a_step_follows_the_mean_over_all_its_tokens`; perplexity: exp of the
    loss)."""
    torch.manual_seed(0)
    model = MaskedLM(encoder=TINY, vocab_size=64)
    losses, accuracies, counts = [], [], []

    def training_step(batch, batch_idx):
        loss, logits, targets = model(batch)  # (TINY has no dropout: the step's own computes the same)
        losses.append(loss.item())
        accuracies.append((logits.argmax(-1) == targets).float().mean().item())
        counts.append(targets.numel())
        return MaskedLM.training_step(model, batch, batch_idx)

    model.training_step = training_step
    logger = Recorded()
    L.Trainer(max_steps=3, accelerator="cpu", accumulate_grad_batches=2, log_every_n_steps=1, logger=logger,
              enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False).fit(
        model, DataLoader(mlm_batches(6), batch_size=None))
    for i in range(3):
        row, pair = logger.rows[i], slice(2 * i, 2 * i + 2)
        assert counts[2 * i] != counts[2 * i + 1]  # the batches' mean would be another number
        mean = sum(loss * n for loss, n in zip(losses[pair], counts[pair], strict=True)) / sum(counts[pair])
        accuracy = sum(value * n for value, n in zip(accuracies[pair], counts[pair], strict=True)) / sum(counts[pair])
        assert row["train/loss"] == pytest.approx(mean, rel=1e-6)
        assert row["train/accuracy"] == pytest.approx(accuracy, rel=1e-6)
        assert row["train/perplexity"] == pytest.approx(math.exp(mean), rel=1e-6)


def ner_batches(n: int) -> list[dict[str, torch.Tensor]]:
    """Tagging batches whose labelled tokens number differently (-100 on each row's last 1 to 7)."""
    generator = torch.Generator().manual_seed(3)
    batches = []
    for i in range(n):
        ids = torch.randint(5, 64, (4, 12), generator=generator)
        tags = torch.where(ids < 20, 1, torch.where(ids < 30, 2, 0))
        tags[:, 11 - (2 * i) % 7:] = -100
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": tags})
    return batches


def summed_token_loss(model, batch) -> tuple[torch.Tensor, int]:
    """A batch's token losses summed by hand, and their count."""
    if isinstance(model, MaskedLM):
        logits, targets = model(batch)[1:]
        return F.cross_entropy(logits.float(), targets, reduction="sum"), targets.numel()
    labels = batch["labels"].flatten()
    logits = model(batch).flatten(0, 1).float()
    return F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum"), int((labels != -100).sum())


class RecordGradients(L.Callback):
    """The gradient each optimizer step applied (after the task's hooks and clipping), by step. Recorded after the
    step: Lightning runs the step's last batch as the closure of `optimizer.step`, after its pre-hooks."""

    def __init__(self) -> None:
        self.steps: list[list[torch.Tensor]] = []

    def on_train_start(self, trainer, pl_module) -> None:
        def record(optimizer, args, kwargs):
            self.steps.append([p.grad.clone() for group in optimizer.param_groups for p in group["params"]])
        trainer.optimizers[0].register_step_post_hook(record)


@pytest.mark.parametrize("task", ["mlm", "ner"])
@pytest.mark.parametrize(("batches", "accumulate", "clip"), [(4, 2, None), (3, 4, None), (2, 2, 0.05)],
                         ids=["windows", "short-last-window", "clipped"])
def test_a_step_follows_the_mean_over_all_its_tokens(task, batches, accumulate, clip):
    """Each step of accumulated batches (2 steps of 2; the 3 of an epoch's short last step under 4) applies the
    gradient of the mean over all its batches' scored tokens, as transformers' `Trainer` does with
    `num_items_in_batch`, not the mean of the batches' means, which weighs a token by its batch's count; clipped by
    the norm of that gradient. (A learning rate of 1e-30 leaves the weights as they are: each step's reference is
    taken at the first weights.)"""
    torch.manual_seed(0)
    optimization = Optimization(learning_rate=1e-30, warmup=0)
    if task == "mlm":
        model, data = MaskedLM(encoder=TINY, vocab_size=64, optimization=optimization), mlm_batches(batches)
    else:
        model = TokenClassification(label_names=["O", "B-PER", "I-PER"], encoder=TINY, vocab_size=64,
                                    classifier_dropout=0.0, optimization=optimization)
        data = ner_batches(batches)
    steps = []
    for start in range(0, batches, accumulate):
        reference = copy.deepcopy(model)
        sums, counts = zip(*(summed_token_loss(reference, b) for b in data[start:start + accumulate]), strict=True)
        assert len(set(counts)) > 1  # else both means are one
        (sum(sums) / sum(counts)).backward()
        expected = [p.grad for group in parameter_groups(reference, 0.01) for p in group["params"]]
        if clip is not None:
            norm = torch.nn.utils.get_total_norm(expected)
            assert norm > clip
            expected = [grad * clip / (norm + 1e-6) for grad in expected]  # as clip_grad_norm_
        steps.append(expected)
    recorded = RecordGradients()
    trainer(-1, max_epochs=1, accumulate_grad_batches=accumulate, gradient_clip_val=clip, callbacks=[recorded]).fit(
        model, DataLoader(data, batch_size=None))
    assert len(recorded.steps) == len(steps)
    torch.testing.assert_close(recorded.steps, steps, rtol=1e-5, atol=1e-7)


def test_a_step_fp16s_loss_scaler_skips_leaves_no_count_behind():
    """fp16's loss scaler skips a step whose gradients overflow (here the first, at a scale of 2^126) after the task
    saw its tokens: the next step divides by its own tokens alone (a count left over would halve its gradient).
    The scaler on the CPU, with Lightning's clipping (a bound never reached), which takes the unfused AdamW."""
    torch.manual_seed(0)
    model = MaskedLM(encoder=TINY, vocab_size=64, optimization=Optimization(learning_rate=1e-30, warmup=0))
    data = mlm_batches(4)
    reference = copy.deepcopy(model)
    sums, counts = zip(*(summed_token_loss(reference, batch) for batch in data[2:]), strict=True)
    (sum(sums) / sum(counts)).backward()
    expected = torch.cat([p.grad.flatten() for group in parameter_groups(reference, 0.01) for p in group["params"]])
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**126, backoff_factor=2.0**-116)  # then 2^10
    recorded = RecordGradients()
    trainer(-1, max_epochs=1, accumulate_grad_batches=2, gradient_clip_val=1e9, callbacks=[recorded],
            plugins=[L.pytorch.plugins.MixedPrecision("16-mixed", "cpu", scaler)]).fit(
        model, DataLoader(data, batch_size=None))
    assert len(recorded.steps) == 1 and scaler.get_scale() == 2.0**10  # the first step skipped
    applied = torch.cat([grad.flatten() for grad in recorded.steps[0]])
    assert (applied - expected).norm() < 2e-3 * expected.norm()  # fp16's rounding: measured 4e-4


def test_fp16s_loss_scaler_steps_the_fused_adamw():
    """Without clipping, fp16 mixed precision (the default on a GPU without bf16, a T4 or V100) steps the fused AdamW
    through the loss scaler, which sets the optimizer's `grad_scale` and deletes it after the step. litbert's own
    clipping factor is removed after each step too, and removing the scaler's as well failed the first step
    (AttributeError: 'AdamW' object has no attribute 'grad_scale')."""
    torch.manual_seed(0)
    model = MaskedLM(encoder=TINY, vocab_size=64, optimization=Optimization(learning_rate=1e-3, warmup=0))
    before = copy.deepcopy(model.state_dict())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    fit = trainer(2, plugins=[L.pytorch.plugins.MixedPrecision("16-mixed", "cpu", scaler)])
    fit.fit(model, DataLoader(mlm_batches(2), batch_size=None))
    assert fit.optimizers[0].defaults["fused"] and fit.global_step == 2
    assert "grad_scale" not in fit.optimizers[0].__dict__
    word = "encoder.embeddings.word.weight"
    assert not torch.equal(before[word], model.state_dict()[word])  # stepped


def test_encoder_spec_and_vocab_link(tmp_path):
    spec = EncoderSpec(preset="roberta-base", position="rope", num_layers=1)
    config = spec.build()
    assert (config.position, config.num_layers, config.vocab_size) == ("rope", 1, 50265)
    assert build_encoder(EncoderSpec(preset="bert-tiny"), None, vocab_size=777).config.vocab_size == 777
    with pytest.raises(ValueError, match="tokenizer has 900 tokens but model.encoder.vocab_size=800"):
        build_encoder(EncoderSpec(preset="bert-tiny", vocab_size=800), None, vocab_size=900)
    Encoder(EncoderConfig.from_name("bert-tiny", vocab_size=50)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=f"checkpoint {tmp_path} embeds only 50"):
        build_encoder(None, read_pretrained(str(tmp_path)), vocab_size=60)


def test_masked_lm_loss_falls():
    torch.manual_seed(0)
    model = MaskedLM(encoder=TINY, vocab_size=64,
                     optimization=Optimization(learning_rate=1e-3, warmup=10, schedule="constant"))
    data = mlm_batches(40)
    before = model.eval()(data[0])[0].item()
    trainer(150).fit(model.train(), DataLoader(data, batch_size=None))
    after = model.eval()(data[0])[0].item()
    assert after < 0.5 * before, (before, after)  # from ~ln(64) towards ln(2)


def test_masked_lm_validation_metrics():
    model = MaskedLM(encoder=TINY, vocab_size=64)
    data = mlm_batches(3)
    metrics = trainer(1).validate(model, DataLoader(data, batch_size=None), verbose=False)[0]
    losses = [model.eval()(batch) for batch in data]
    counts = [int((batch["labels"] != -100).sum()) for batch in data]
    expected = sum(loss[0].item() * n for loss, n in zip(losses, counts, strict=True)) / sum(counts)
    assert metrics["val/loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["val/perplexity"] == pytest.approx(math.exp(expected), rel=1e-5)


def classification_batches(n: int, regression: bool = False):
    generator = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        # Tokens come from a low (5-34) or a high (35-63) range; the label is the share of high tokens
        # (regression) or whether most are high (classification).
        share = torch.rand(8, 1, generator=generator) if regression else torch.tensor([[0.15], [0.85]]).repeat(4, 1)
        high = torch.rand(8, 12, generator=generator) < share
        ids = torch.where(high, torch.randint(35, 64, (8, 12), generator=generator),
                          torch.randint(5, 35, (8, 12), generator=generator))
        label = high.float().mean(1) * 5 if regression else (share[:, 0] > 0.5).long()
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": label})
    return out


@pytest.mark.parametrize(("num_labels", "metrics", "learning_rate", "steps"), [
    (2, ("accuracy", "f1", "matthews_corrcoef"), 1e-3, 120),
    (1, ("pearson", "spearman"), 5e-4, 100),
])
def test_sequence_classification_learns(num_labels, metrics, learning_rate, steps):
    torch.manual_seed(0)
    model = SequenceClassification(num_labels=num_labels, metrics=metrics, encoder=TINY, vocab_size=64,
                                   optimization=Optimization(learning_rate=learning_rate, warmup=5,
                                                             schedule="constant"))
    data = classification_batches(30, regression=num_labels == 1)
    before = trainer(1).validate(model, DataLoader(data[:4], batch_size=None), verbose=False)[0]
    trainer(steps).fit(model, DataLoader(data, batch_size=None))
    result = trainer(1).validate(model, DataLoader(data[:4], batch_size=None), verbose=False)[0]
    assert set(result) == {"val/loss", *(f"val/{m}" for m in metrics)}
    assert result["val/loss"] < before["val/loss"]
    if num_labels == 2:
        assert result["val/accuracy"] > 0.9
    else:
        assert result["val/pearson"] > 0.6 > before["val/pearson"] + 0.5


def test_validation_names_prefix_each_set():
    model = SequenceClassification(num_labels=3, metrics=("accuracy",), validation_names=("val", "val_mismatched"),
                                   encoder=TINY, vocab_size=64)
    data = classification_batches(2)
    loaders = [DataLoader(data, batch_size=None), DataLoader(data[:1], batch_size=None)]
    result = trainer(1).validate(model, loaders, verbose=False)
    assert "val/accuracy" in result[0] and "val_mismatched/accuracy" in result[1]


def test_metric_table_checks_names():
    with pytest.raises(ValueError, match=r"Unknown metric\(s\) \['bleu'\]"):
        classification_metrics(["bleu"], 2)
    with pytest.raises(ValueError, match="positive-class F1 of a binary task"):
        classification_metrics(["f1"], 3)


@pytest.mark.parametrize("num_labels", [2, 3])
def test_the_official_metrics_are_scikit_learns_and_scipys_on_the_same_predictions(num_labels):
    """GLUE's scorer and transformers' run_glue score with scikit-learn and scipy: litbert's metrics, fed batch by
    batch, give their numbers, also where a correlation is undefined: Matthews' of a constant prediction or a single
    gold class is 0 (torchmetrics' MatthewsCorrCoef gave -0.0025 and 1.0), Spearman's of a constant prediction NaN as
    Pearson's (torchmetrics' SpearmanCorrCoef gave 0)."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score, matthews_corrcoef

    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, num_labels, (400,), generator=generator)
    cases = {"random": torch.randint(0, num_labels, (400,), generator=generator),
             "mostly right": torch.where(torch.rand(400, generator=generator) < 0.8, labels, 0),
             "constant": torch.ones(400, dtype=torch.long),
             "one gold class, all right": torch.ones(400, dtype=torch.long)}
    names = ["accuracy", "matthews_corrcoef", *(["f1"] if num_labels == 2 else ["f1_macro"])]
    for case, predicted in cases.items():
        gold = torch.ones(400, dtype=torch.long) if case == "one gold class, all right" else labels
        metrics = classification_metrics(names, num_labels)
        for start in range(0, 400, 128):
            metrics.update(predicted[start:start + 128], gold[start:start + 128])
        found = {name: float(value) for name, value in metrics.compute().items()}
        expected = {"accuracy": float((predicted == gold).float().mean()),
                    "matthews_corrcoef": matthews_corrcoef(gold, predicted),
                    names[2]: f1_score(gold, predicted, average="binary" if num_labels == 2 else "macro",
                                       zero_division=0)}
        assert found == pytest.approx(expected, abs=1e-6), case
    scores = torch.rand(300, generator=generator) * 5
    for case, predicted in {"random": scores + torch.randn(300, generator=generator),
                            "ties": (scores + torch.randn(300, generator=generator)).round(),
                            "constant": torch.full((300,), 2.5)}.items():
        metrics = classification_metrics(["pearson", "spearman"], 1)
        for start in range(0, 300, 128):
            metrics.update(predicted[start:start + 128], scores[start:start + 128])
        found = {name: float(value) for name, value in metrics.compute().items()}
        with warnings.catch_warnings():  # scipy's, of a constant input
            warnings.simplefilter("ignore")
            expected = {"pearson": pearsonr(predicted, scores)[0], "spearman": spearmanr(predicted, scores)[0]}
        assert found == pytest.approx(expected, abs=1e-5, nan_ok=True), case


def test_entity_spans_follow_conlleval():
    assert entity_spans(["B-PER", "I-PER", "O", "B-LOC"]) == {(0, 2, "PER"), (3, 4, "LOC")}
    assert entity_spans(["I-PER", "I-PER", "I-LOC", "O"]) == {(0, 2, "PER"), (2, 3, "LOC")}  # IOB1
    assert entity_spans(["B-PER", "B-PER"]) == {(0, 1, "PER"), (1, 2, "PER")}
    assert entity_spans(["O", "I-ORG"]) == {(1, 2, "ORG")}


def test_entity_f1_equals_seqeval():
    from seqeval.metrics import f1_score, precision_score, recall_score

    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC", "I-MISC"]
    rng = random.Random(0)
    gold, predicted = [], []
    for _ in range(300):
        length = rng.randint(1, 20)
        sentence = [rng.choice(labels) for _ in range(length)]
        gold.append(sentence)
        predicted.append([tag if rng.random() < 0.7 else rng.choice(labels) for tag in sentence])
    metric = EntityF1(labels)
    for start in range(0, 300, 32):  # in batches, with padding marked -100, as the task sees them
        chunk_gold, chunk_pred = gold[start:start + 32], predicted[start:start + 32]
        width = max(len(s) for s in chunk_gold)
        gold_ids = torch.full((len(chunk_gold), width), -100)
        pred_ids = torch.zeros((len(chunk_gold), width), dtype=torch.long)
        for row, (g, p) in enumerate(zip(chunk_gold, chunk_pred, strict=True)):
            gold_ids[row, :len(g)] = torch.tensor([labels.index(t) for t in g])
            pred_ids[row, :len(p)] = torch.tensor([labels.index(t) for t in p])
        metric.update(pred_ids, gold_ids)
    result = metric.compute()
    assert result["precision"].item() == pytest.approx(precision_score(gold, predicted), abs=1e-6)
    assert result["recall"].item() == pytest.approx(recall_score(gold, predicted), abs=1e-6)
    assert result["f1"].item() == pytest.approx(f1_score(gold, predicted), abs=1e-6)


def test_entity_f1_scores_a_sentence_in_windows_whole():
    """The windows of one sentence are joined before their spans are read, whatever batches (and order) brought
    them, and a row repeated by a distributed sampler counts once: "new york city" cut after "york", with "city"
    predicted O, is one gold entity missed (conlleval), not a found one and a missed one. Only the positions
    `scored` marks (first sub-tokens) count."""
    labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    # window 0: [CLS] a b new york [SEP]; window 1: [CLS] city c [SEP]; another sentence whole: [CLS] Ann ##e [SEP]
    gold0, pred0 = torch.tensor([[-100, 0, 0, 1, 2, -100]]), torch.tensor([[0, 0, 0, 1, 2, 0]])
    gold1, pred1 = torch.tensor([[-100, 2, 0, -100]]), torch.tensor([[0, 0, 0, 0]])
    metric = EntityF1(labels)
    metric.update(pred1, gold1, sentence=torch.tensor([7]), window=torch.tensor([1]), parts=torch.tensor([2]))
    whole_gold, whole_pred = torch.tensor([[-100, 3, 4, -100]]), torch.tensor([[0, 3, 0, 0]])
    metric.update(whole_pred, whole_gold, scored=torch.tensor([[False, True, False, False]]),
                  sentence=torch.tensor([8]), window=torch.tensor([0]), parts=torch.tensor([1]))
    for _ in range(2):  # the second time as a distributed sampler's padding repeats it
        metric.update(pred0, gold0, sentence=torch.tensor([7]), window=torch.tensor([0]), parts=torch.tensor([2]))
    result = metric.compute()
    # Found: the PER of sentence 8 (its ##e unscored) and "new york"; gold: PER and "new york city": 1 of 2 each.
    assert (result["precision"].item(), result["recall"].item()) == (0.5, 0.5)
    per_window = EntityF1(labels)
    per_window.update(pred0, gold0)
    per_window.update(pred1, gold1)
    assert per_window.compute()["precision"].item() == 1.0  # what scoring each window alone would have said


def _entity_f1_rank(rank: int, port: int, out) -> None:
    """One of two gloo ranks: rank 0 sees the two windows of a split sentence, rank 1 a whole one only."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    metric = EntityF1(["O", "B-LOC", "I-LOC", "B-PER", "I-PER"])
    if rank == 0:
        metric.update(torch.tensor([[0, 0, 0, 1, 2, 0]]), torch.tensor([[-100, 0, 0, 1, 2, -100]]),
                      sentence=torch.tensor([7]), window=torch.tensor([0]), parts=torch.tensor([2]))
        metric.update(torch.tensor([[0, 0, 0, 0]]), torch.tensor([[-100, 2, 0, -100]]),
                      sentence=torch.tensor([7]), window=torch.tensor([1]), parts=torch.tensor([2]))
    else:
        metric.update(torch.tensor([[0, 3, 4, 0]]), torch.tensor([[-100, 3, 4, -100]]),
                      sentence=torch.tensor([8]), window=torch.tensor([0]), parts=torch.tensor([1]))
    out.put((rank, {name: value.item() for name, value in metric.compute().items()}))
    dist.destroy_process_group()


def test_entity_f1_syncs_across_ranks_that_saw_no_split_sentence():
    """Under DDP the windowed rows of one rank and none of another gather into the single-process counts (a rank
    without any used to send a state of another shape and dtype, and the gather failed)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    out = context.Queue()
    processes = [context.Process(target=_entity_f1_rank, args=(rank, port, out)) for rank in range(2)]
    for process in processes:
        process.start()
    results = dict(out.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    # Gold: "new york city" (LOC) and a PER of two tokens; found: "new york" and that PER. Rank 0's rows lost would
    # give 1.0, its windows scored apart 2 of 3.
    assert results[0] == results[1] == {"precision": 0.5, "recall": 0.5, "f1": 0.5}


def test_a_tag_set_without_chunks_is_scored_by_accuracy():
    assert is_chunk_tagging(["O", "B-PER", "I-PER", "E-PER", "S-PER"])
    assert not is_chunk_tagging(["NN", "VBZ", "-LRB-", "PRP$", "O"])
    assert is_chunk_tagging(["O"])
    model = TokenClassification(label_names=["NN", "VBZ", "DT"], encoder=TINY, vocab_size=64)
    assert model.monitor == ("val/accuracy", "max")
    assert TokenClassification(label_names=["O", "B-PER", "I-PER"], encoder=TINY, vocab_size=64).monitor == \
        ("val/f1", "max")



@pytest.mark.parametrize("rate", [-0.1, 1.0, 2.0])
def test_a_classifier_dropout_out_of_range_is_refused_by_its_setting(rate):
    """1 zeroed the classifier's every input in training (it learned its bias alone) without a word; above 1 and
    below 0 the dropout module refused it without naming model.classifier_dropout."""
    for task in (lambda: SequenceClassification(num_labels=2, encoder=TINY, vocab_size=64, classifier_dropout=rate),
                 lambda: TokenClassification(label_names=["O", "B-PER", "I-PER"], encoder=TINY, vocab_size=64,
                                             classifier_dropout=rate)):
        with pytest.raises(ValueError, match=rf"^model.classifier_dropout={rate} must lie in \[0, 1\)"):
            task()
    assert SequenceClassification(num_labels=2, encoder=TINY, vocab_size=64, classifier_dropout=0.0).head.dropout.p == 0

def test_token_classification_learns():
    torch.manual_seed(0)
    labels = ["O", "B-PER", "I-PER"]
    generator = torch.Generator().manual_seed(2)
    data = []
    for _ in range(20):
        ids = torch.randint(5, 64, (8, 10), generator=generator)
        tags = torch.where(ids < 20, 1, torch.where(ids < 30, 2, 0))  # the tag is a function of the token
        tags[:, -2:] = -100
        data.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": tags})
    model = TokenClassification(label_names=labels, encoder=TINY, vocab_size=64,
                                optimization=Optimization(learning_rate=3e-3, warmup=2))
    trainer(60).fit(model, DataLoader(data, batch_size=None))
    result = trainer(1).validate(model, DataLoader(data[:4], batch_size=None), verbose=False)[0]
    assert result["val/f1"] > 0.9


def test_student_is_initialised_from_every_other_teacher_layer(teacher_dir):
    teacher = Encoder.from_pretrained(teacher_dir)
    student, head = student_from_teacher(teacher, MaskedLMHead.from_pretrained(teacher_dir, teacher))
    assert student.config.num_layers == 3
    for i, j in enumerate([0, 2, 4]):
        for (name, ours), theirs in zip(student.blocks[i].state_dict().items(),
                                        teacher.blocks[j].state_dict().values(), strict=True):
            assert torch.equal(ours, theirs), name
    assert torch.equal(student.embeddings.word.weight, teacher.embeddings.word.weight)
    assert student.embeddings.word.weight is not teacher.embeddings.word.weight
    assert head.decoder.weight is student.embeddings.word.weight


def test_a_classifier_student_keeps_the_chosen_layers_of_its_pretrained_checkpoint(teacher_dir):
    """`pretrained_layers` builds DistilBERT's student of any checkpoint: the same blocks as the MLM student, and
    explicit indices in the order given; a wrong index or a missing checkpoint is refused with the setting named."""
    teacher = Encoder.from_pretrained(teacher_dir)
    student = SequenceClassification(pretrained=str(teacher_dir), pretrained_layers="every_other").encoder
    reference, _ = student_from_teacher(teacher, MaskedLMHead.from_pretrained(teacher_dir, teacher))
    assert student.config.num_layers == 3
    for (name, ours), theirs in zip(student.state_dict().items(), reference.state_dict().values(), strict=True):
        assert torch.equal(ours, theirs), name
    picked = SequenceClassification(pretrained=str(teacher_dir), pretrained_layers=[5, 1]).encoder
    assert picked.config.num_layers == 2
    assert torch.equal(picked.blocks[0].attention.qkv.weight, teacher.blocks[5].attention.qkv.weight)
    assert torch.equal(picked.blocks[1].attention.qkv.weight, teacher.blocks[1].attention.qkv.weight)
    with pytest.raises(ValueError, match=r"^model.pretrained_layers=\[0, 6\] must be distinct indices of the 6 layers"):
        SequenceClassification(pretrained=str(teacher_dir), pretrained_layers=[0, 6])
    with pytest.raises(ValueError, match="model.pretrained is not set"):
        SequenceClassification(pretrained_layers="every_other")


def test_distillation_loss_terms_match_a_hand_computation(teacher_dir):
    model = Distillation(teacher=str(teacher_dir), temperature=2.0).eval()
    batch = mlm_batches(1, batch=2, seq=8)[0]
    batch["attention_mask"][1, 6:] = 0
    losses = model(batch)

    masked = batch["labels"] != -100
    t_hidden = model.teacher.encoder(batch["input_ids"], batch["attention_mask"])
    s_hidden = model.encoder(batch["input_ids"], batch["attention_mask"])
    t_logits = model.teacher.head(t_hidden)[masked]
    s_logits = model.head(s_hidden)[masked]
    n, T = t_logits.shape[0], 2.0
    p_teacher = (t_logits / T).softmax(-1)
    kl = (p_teacher * (p_teacher.log() - (s_logits / T).log_softmax(-1))).sum() / n * T**2
    mlm = -(s_logits.log_softmax(-1)[torch.arange(n), batch["labels"][masked]]).mean()
    real = batch["attention_mask"].bool()
    cos = torch.stack([1 - torch.dot(a, b) / (a.norm() * b.norm()) for a, b in zip(s_hidden[real], t_hidden[real],
                                                                                strict=True)]).mean()
    torch.testing.assert_close(losses["kl"], kl, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(losses["mlm"], mlm, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(losses["cosine"], cos, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(losses["loss"], 5.0 * kl + 2.0 * mlm + 1.0 * cos, rtol=1e-4, atol=1e-6)
    # A student initialised from the teacher, given the teacher's own logits, has no KL to pay.
    same = distillation_losses(t_logits, t_logits, batch["labels"][masked], t_hidden, t_hidden,
                               batch["attention_mask"], 2.0)
    assert same["kl"].abs() < 1e-6 and same["cosine"].abs() < 1e-6


def test_a_student_of_another_width_distils_without_the_cosine_term(teacher_dir):
    """A bert-mini student (256 wide) of the 128-wide teacher, with alpha_cos 0 as its construction asks: the KL and
    MLM terms alone, with gradients (the hidden-state cosine would compare vectors of two widths)."""
    model = Distillation(teacher=str(teacher_dir), student=EncoderSpec(preset="bert-mini"), alpha_cos=0.0)
    losses = model(mlm_batches(1, batch=2, seq=8)[0])
    assert set(losses) == {"kl", "mlm", "loss"}
    torch.testing.assert_close(losses["loss"], 5.0 * losses["kl"] + 2.0 * losses["mlm"])
    losses["loss"].backward()
    assert model.encoder.blocks[0].attention.qkv.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match=r"student's hidden_size=256 differs from the teacher's 128; set "
                                         r"model.alpha_cos 0"):
        Distillation(teacher=str(teacher_dir), student=EncoderSpec(preset="bert-mini"))


def test_a_student_vocabulary_other_than_the_teachers_is_refused(teacher_dir):
    """The student predicts over the teacher's vocabulary (the KL term compares the two): another vocab_size given
    for it is refused rather than silently replaced; the teacher's own is accepted."""
    with pytest.raises(ValueError, match=r"model.student.vocab_size=500, but the student predicts over the teacher's "
                                         r"vocabulary of 64 tokens"):
        Distillation(teacher=str(teacher_dir), student=EncoderSpec(num_layers=1, vocab_size=500))
    student = Distillation(teacher=str(teacher_dir), student=EncoderSpec(num_layers=1, vocab_size=64)).encoder
    assert student.config.vocab_size == 64


@pytest.mark.parametrize("weights", [{"alpha_kd": -1.0}, {"alpha_cos": -0.5},
                                     {"alpha_kd": 0.0, "alpha_mlm": 0.0, "alpha_cos": 0.0}])
def test_distillation_refuses_a_negative_or_no_loss_weight(teacher_dir, weights):
    """A negative weight pushes the student away from its teacher (or its labels), and all zero leave nothing to
    learn: both are refused, naming the three settings."""
    with pytest.raises(ValueError, match=r"model.alpha_kd=.*, model.alpha_mlm=.* and model.alpha_cos=.* weigh the "
                                         r"loss terms: each must be >= 0, one at least positive"):
        Distillation(teacher=str(teacher_dir), **weights)


def test_a_teacher_without_its_mlm_head_is_refused_by_name(minilm):
    """MiniLM (a sentence encoder: BertModel, no MLM head) cannot teach general distillation: the message names
    model.teacher and what to give instead, rather than the head loader's advice to build a fresh head."""
    with pytest.raises(ValueError, match=rf"model.teacher={minilm} holds no masked-LM head; .* litbert MaskedLM "
                                         rf"export or a transformers \*ForMaskedLM checkpoint"):
        Distillation(teacher=minilm)


def test_distillation_leaves_filler_rows_out_of_every_term(teacher_dir):
    """The last batch filled up to the batch size (`data.pad_last_batch`): the same KL, MLM and hidden-state cosine
    terms and gradients as the batch alone. The cosine term averages over attended tokens, and a filler row has
    one."""
    from data import PaddingCollator
    from data.loading import Batch

    model = Distillation(teacher=str(teacher_dir)).eval()  # eval: the student inherits the teacher's dropout
    generator = torch.Generator().manual_seed(0)
    examples = []
    for length in (9, 6, 7):
        ids = torch.randint(5, 64, (length,), generator=generator)
        labels = torch.where(torch.rand(length, generator=generator) < 0.3, ids, -100)
        examples.append({"input_ids": ids.tolist(), "labels": labels.tolist()})
    results = []
    for batch in (PaddingCollator(0)(examples), PaddingCollator(0)(Batch(examples, fill=5))):
        model.zero_grad()
        losses = model(batch)
        losses["loss"].backward()
        results.append((losses, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (plain, plain_grads), (filled, filled_grads) = results
    assert len(PaddingCollator(0)(Batch(examples, fill=5))["input_ids"]) == 8
    torch.testing.assert_close(filled, plain, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(filled_grads, plain_grads, rtol=1e-4, atol=1e-7)


def test_a_batch_without_a_masked_token_is_trained_through_not_taken_for_divergence(teacher_dir):
    """A short last block in which masking chose nothing: the MLM and distillation losses are 0 with zero gradients
    (the library's mean over no targets is NaN, which stopped training as diverged), and the validation metrics,
    weighted by masked tokens, are those of the other batches."""
    batches = mlm_batches(3)
    batches[1]["labels"] = torch.full_like(batches[1]["labels"], -100)
    for model in (MaskedLM(encoder=TINY, vocab_size=64, optimization=Optimization(learning_rate=1e-3, warmup=1)),
                  Distillation(teacher=str(teacher_dir), optimization=Optimization(learning_rate=1e-3, warmup=1))):
        trainer(3).fit(model, DataLoader(batches, batch_size=None))
        assert model.trainer.global_step == 3
        out = model(batches[1])
        masked_terms = [out[0]] if isinstance(out, tuple) else [out["kl"], out["mlm"]]
        assert [term.item() for term in masked_terms] == [0.0] * len(masked_terms)
        with_empty = trainer(1).validate(model, DataLoader(batches, batch_size=None), verbose=False)[0]
        without = trainer(1).validate(model, DataLoader(batches[::2], batch_size=None), verbose=False)[0]
        assert math.isfinite(with_empty["val/loss"])
        assert with_empty["val/loss"] == pytest.approx(without["val/loss"], rel=1e-6)


def test_a_non_finite_first_step_is_not_called_a_learning_rate_problem():
    """NaN before any update comes from the weights, the data or the loss settings: the error says so instead of
    advising a lower learning rate (which at step 1 of a warmup is 0)."""
    model = MaskedLM(encoder=TINY, vocab_size=64, optimization=Optimization(learning_rate=1e-3, warmup=2))
    with torch.no_grad():
        model.encoder.embeddings.word.weight[7].fill_(float("nan"))
    batches = mlm_batches(2)
    batches[0]["input_ids"][:, 1] = 7
    with pytest.raises(DivergenceError, match="The first training step gave loss nan .* before any update: .* which "
                                              "no learning rate causes"):
        trainer(2).fit(model, DataLoader(batches, batch_size=None))


def test_teacher_is_frozen_during_training(teacher_dir):
    model = Distillation(teacher=str(teacher_dir), optimization=Optimization(learning_rate=1e-3, warmup=1))
    before = {k: v.clone() for k, v in model.teacher.state_dict().items()}
    student_before = model.encoder.blocks[0].attention.qkv.weight.clone()
    trainer(5).fit(model, DataLoader(mlm_batches(5), batch_size=None))
    assert not any(m.training for m in model.teacher.modules()) and model.encoder.training
    for name, value in model.teacher.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert all(not p.requires_grad for p in model.teacher.parameters())
    assert not torch.equal(model.encoder.blocks[0].attention.qkv.weight, student_before)
    # The tied student embeddings moved, the teacher's (a separate tensor) did not.
    teacher_words = model.teacher.encoder.embeddings.word.weight
    assert not torch.equal(model.encoder.embeddings.word.weight, teacher_words)
    assert F.cosine_similarity(model.encoder.embeddings.word.weight.flatten(), teacher_words.flatten(), dim=0) > 0.9


def test_checkpoints_keep_the_teachers_hash_not_its_weights(teacher_dir, tmp_path):
    """A distillation's checkpoint holds the student alone and a hash of the frozen teacher: it resumes (strict
    loading, the teacher taken from model.teacher) with that teacher, and is refused with another."""
    model = Distillation(teacher=str(teacher_dir), optimization=Optimization(learning_rate=1e-3, warmup=1))
    make_trainer(tmp_path, 4).fit(model, DataLoader(mlm_batches(4), batch_size=None))
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved["state_dict"] and not [k for k in saved["state_dict"] if k.startswith("teacher.")]
    assert saved["litbert_teacher"] == model.teacher.digest()
    model.teacher.to(torch.bfloat16)  # as bf16-true casts it after the checkpoint of a resume is read
    assert model.teacher.digest() == saved["litbert_teacher"]
    resumed = Distillation(teacher=str(teacher_dir), optimization=Optimization(learning_rate=1e-3, warmup=1))
    make_trainer(tmp_path, 6).fit(resumed, DataLoader(mlm_batches(6), batch_size=None),
                                  ckpt_path=tmp_path / "checkpoints" / "last.ckpt")
    assert resumed.trainer.global_step == 6
    other = Encoder.from_pretrained(teacher_dir)
    head = MaskedLMHead.from_pretrained(teacher_dir, other)
    with torch.no_grad():
        other.blocks[0].attention.qkv.weight.add_(0.01)
    other.save_pretrained(tmp_path / "other", head=head)
    stranger = Distillation(teacher=str(tmp_path / "other"))
    with pytest.raises(ValueError, match="distilled from another teacher than model.teacher="):
        stranger.on_load_checkpoint(saved)


def make_trainer(tmp_path, steps: int) -> L.Trainer:
    return L.Trainer(max_steps=steps, accelerator="cpu", logger=False, default_root_dir=tmp_path,
                     enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[ModelCheckpoint(tmp_path / "checkpoints", save_last=True, every_n_train_steps=4)])


def test_resume_continues_at_the_same_step_with_the_same_optimizer_state(tmp_path):
    torch.manual_seed(0)
    model = MaskedLM(encoder=TINY, vocab_size=64, optimization=Optimization(learning_rate=1e-3, warmup=2))
    data = DataLoader(mlm_batches(8), batch_size=None)
    make_trainer(tmp_path, 4).fit(model, data)
    checkpoint_path = tmp_path / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint_path, weights_only=True)
    assert saved["global_step"] == 4

    resumed_model = MaskedLM(encoder=TINY, vocab_size=64, optimization=Optimization(learning_rate=1e-3, warmup=2))
    trainer = make_trainer(tmp_path, 8)
    captured = {}

    class Capture(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if not captured:
                captured["step"] = trainer.global_step
                captured["optimizer"] = copy.deepcopy(trainer.optimizers[0].state_dict())
                captured["lr"] = trainer.lr_scheduler_configs[0].scheduler.last_epoch
                captured["weights"] = copy.deepcopy(module.state_dict())

    trainer.callbacks.append(Capture())
    trainer.fit(resumed_model, data, ckpt_path=checkpoint_path)
    assert captured["step"] == 4 and captured["lr"] == 4
    assert trainer.global_step == 8
    saved_state = saved["optimizer_states"][0]["state"]
    for index, state in captured["optimizer"]["state"].items():
        assert int(state["step"]) == 4
        torch.testing.assert_close(state["exp_avg"], saved_state[index]["exp_avg"])
        torch.testing.assert_close(state["exp_avg_sq"], saved_state[index]["exp_avg_sq"])
    for name, value in captured["weights"].items():  # the weights came back, not a fresh init
        torch.testing.assert_close(value, saved["state_dict"][name], msg=name)


def test_resuming_into_another_position_scheme_is_refused(tmp_path):
    """The same weights under another scheme (RoPE's have no position table, nor ALiBi's) load without an error, so
    the checkpoint's architecture is compared: the resume stops, naming the field and both values."""
    spec = EncoderSpec(preset="bert-tiny", position="rope", num_layers=1)
    make_trainer(tmp_path, 4).fit(MaskedLM(encoder=spec, vocab_size=64), DataLoader(mlm_batches(4), batch_size=None))
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["litbert_architecture"]["encoder"]["position"] == "rope"
    other = MaskedLM(encoder=dataclasses.replace(spec, position="alibi"), vocab_size=64)
    with pytest.raises(ValueError, match="model.encoder.position: 'rope' in the checkpoint, 'alibi' now"):
        make_trainer(tmp_path, 6).fit(other, DataLoader(mlm_batches(4), batch_size=None),
                                      ckpt_path=tmp_path / "checkpoints" / "last.ckpt")


def test_kernel_choices_apply_per_run_and_a_checkpoint_that_stored_them_resumes(tmp_path):
    """The run's `Kernels` reach the encoder and are no part of the checkpoint's architecture. A checkpoint of an
    earlier version, whose hyperparameters hold an encoder spec with the kernel choices of then (unpad_below,
    attention_groups, flex_attention), loads with `load_from_checkpoint` and resumes under other choices."""
    spec = EncoderSpec(preset="bert-tiny", num_layers=1)
    model = MaskedLM(encoder=spec, vocab_size=64, kernels=Kernels(unpad_below=0.5))
    assert model.encoder.kernels == Kernels(unpad_below=0.5)
    make_trainer(tmp_path, 4).fit(model, DataLoader(mlm_batches(4), batch_size=None))
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert not {"unpad_below", "flex_attention", "attention_groups"} & set(saved["litbert_architecture"]["encoder"])
    old = dataclasses.replace(spec)
    old.__dict__.update(unpad_below=0.5, attention_groups=2, flex_attention=False)  # as the earlier spec pickled
    saved["hyper_parameters"]["encoder"] = old
    del saved["hyper_parameters"]["kernels"]
    torch.save(saved, tmp_path / "old.ckpt")
    loaded = MaskedLM.load_from_checkpoint(tmp_path / "old.ckpt", weights_only=True)
    assert loaded.encoder.kernels == Kernels() and loaded.encoder.config == model.encoder.config
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    resumed = MaskedLM(encoder=spec, vocab_size=64, kernels=Kernels(unpad_below=0.0))
    trainer = make_trainer(tmp_path / "resumed", 6)
    trainer.fit(resumed, DataLoader(mlm_batches(4), batch_size=None), ckpt_path=tmp_path / "old.ckpt")
    assert trainer.global_step == 6


def test_a_checkpoint_from_before_the_architecture_was_stored_resumes_when_its_head_fits(tmp_path):
    """Checkpoints written before `litbert_architecture` existed resume as before; one whose head has other
    parameters (a ModernBERT token classifier from before its transform) stops with a message, not a traceback."""
    spec = EncoderSpec(preset="bert-tiny", num_layers=1)
    make_trainer(tmp_path, 4).fit(MaskedLM(encoder=spec, vocab_size=64), DataLoader(mlm_batches(4), batch_size=None))
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    del saved["litbert_architecture"]
    torch.save(saved, tmp_path / "old.ckpt")
    trainer = make_trainer(tmp_path / "resumed", 6)
    trainer.fit(MaskedLM(encoder=spec, vocab_size=64), DataLoader(mlm_batches(4), batch_size=None),
                ckpt_path=tmp_path / "old.ckpt")
    assert trainer.global_step == 6
    saved["state_dict"]["head.transform.0.weight"] = saved["state_dict"].pop("head.dense.weight")
    torch.save(saved, tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match=r"has the parameters \['head.transform.0.weight'\] and lacks "
                                         r"\['head.dense.weight'\].*earlier litbert"):
        make_trainer(tmp_path / "refused", 6).fit(MaskedLM(encoder=spec, vocab_size=64),
                                                  DataLoader(mlm_batches(4), batch_size=None),
                                                  ckpt_path=tmp_path / "other.ckpt")


def test_load_from_checkpoint_restores_hyperparameters(tmp_path):
    spec = EncoderSpec(preset="bert-tiny", position="alibi", num_layers=1)
    model = MaskedLM(encoder=spec, vocab_size=64)
    trainer = make_trainer(tmp_path, 1)
    trainer.fit(model, DataLoader(mlm_batches(1), batch_size=None))
    restored = MaskedLM.load_from_checkpoint(tmp_path / "checkpoints" / "last.ckpt")  # weights_only loading
    assert restored.encoder.config == model.encoder.config
    assert restored.encoder.config.position == "alibi" and restored.encoder.config.vocab_size == 64


def test_every_glue_task_has_its_metrics():
    from data import GLUE_TASKS

    assert len(GLUE_TASKS) == 9
    for name, task in GLUE_TASKS.items():
        collection = classification_metrics(task.metrics, task.num_labels)
        assert set(collection.keys()) == set(task.metrics), name


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_classifier_reads_what_the_full_encoder_computes(pooling, monkeypatch):
    """With BERT's pooler the encoder's last layer computes the first token only; logits and gradients are those of
    the full encoder's output under the head, and mean pooling still gets every token."""
    torch.manual_seed(0)
    model = SequenceClassification(num_labels=3, encoder=TINY, vocab_size=64, pooling=pooling, classifier_dropout=0.0)
    batch = classification_batches(1)[0]
    batch["attention_mask"][1, 7:] = 0
    asked, forward = [], model.encoder.forward

    def recording(*args, **kwargs):
        asked.append(kwargs["first_token_only"])
        return forward(*args, **kwargs)

    monkeypatch.setattr(model.encoder, "forward", recording)
    logits = model(batch)
    full = model.head(forward(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")),
                      batch["attention_mask"])
    assert asked == [pooling == "cls"]
    torch.testing.assert_close(logits, full, atol=1e-6, rtol=1e-5)
    params = list(model.parameters())
    fast_grads = torch.autograd.grad(logits.square().sum(), params)
    for a, b in zip(fast_grads, torch.autograd.grad(full.square().sum(), params), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_a_pretrained_pooler_alone_is_no_teacher_classifier(tmp_path):
    """A pretrained BERT keeps its pooler (BertModel's) for fine-tuning; as a logit-distillation teacher it is refused
    at once, since it has no classifier."""
    import transformers

    from tasks.distillation import Teacher

    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=48)
    transformers.BertModel(config).save_pretrained(tmp_path)
    assert "pooler.0.weight" in read_pretrained(str(tmp_path)).head_states["sequence_classification"]
    with pytest.raises(ValueError, match="holds no sequence-classification head"):
        Teacher.classifier(str(tmp_path))


def test_a_pretrained_directory_is_read_once(tmp_path, monkeypatch):
    import transformers

    import encoders.checkpoints as checkpoints

    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=48, num_labels=3)
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path)
    reads = []
    original = checkpoints.read_weights
    monkeypatch.setattr(checkpoints, "read_weights", lambda directory: reads.append(directory) or original(directory))
    model = SequenceClassification(num_labels=3, pretrained=str(tmp_path), vocab_size=64)
    assert len(reads) == 1
    # and both the encoder and the stored classifier came from it
    stored = checkpoints.load_file(str(tmp_path / "model.safetensors"))
    torch.testing.assert_close(model.head.classifier.weight, stored["classifier.weight"])
    torch.testing.assert_close(model.encoder.embeddings.word.weight, stored["bert.embeddings.word_embeddings.weight"])


def relative_difference(mine: torch.Tensor, theirs: torch.Tensor) -> float:
    """|mine - theirs| / |theirs| (Frobenius norms); 0 where both are zero, inf where only `theirs` is."""
    difference = float((mine - theirs).norm())
    scale = float(theirs.norm())
    return difference / scale if scale > 0 else (0.0 if difference == 0 else float("inf"))


def hand_written_steps(reference: SequenceClassification, data: list, precision: str,
                       clip: typing.Callable[[SequenceClassification], float]) -> tuple[torch.optim.AdamW, list[float]]:
    """The clipping tests' reference: a fused AdamW step of `reference` on each batch of `data`, its gradients
    clipped by `clip` first, which returns what it measured of them."""
    optimizer = torch.optim.AdamW(parameter_groups(reference, 0.01), lr=1e-3, betas=(0.9, 0.999), eps=1e-6, fused=True)
    measured = []
    for batch in data:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
            loss = reference.loss(reference(batch), batch["labels"])
        loss.backward()
        measured.append(clip(reference))
        optimizer.step()
        optimizer.zero_grad()
    return optimizer, measured


def assert_same_changes(model: SequenceClassification, reference: SequenceClassification,
                        start: SequenceClassification, precision: str) -> float:
    """Each weight of `model` as `reference`'s: elementwise in float32, and in both precisions by the relative norm
    of their changes from `start` (within the returned bound: 1e-4 in float32, 2% in bf16)."""
    bound = 1e-4 if precision == "32-true" else 0.02
    named = zip(model.named_parameters(), reference.parameters(), start.parameters(), strict=True)
    for (name, mine), theirs, first in named:
        if precision == "32-true":
            torch.testing.assert_close(mine, theirs, msg=name)
        assert relative_difference(mine - first, theirs - first) < bound, name
    return bound


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_gradient_clipping_keeps_the_fused_optimizer_and_clips_by_the_total_norm(precision):
    """`--trainer.gradient_clip_val` with the fused AdamW (which Lightning's mixed-precision plugin would refuse):
    two steps through Lightning train as two hand-written steps of clip_grad_norm_ + fused AdamW, at a bound well
    under the gradient norm so that clipping acts (by a factor of over 10).

    The two clip in different roundings (the fused step divides by the inverse factor), so after the first step some
    weights differ in their last bit. In float32 that stays rounding: the weights are compared elementwise. Under
    bf16-mixed the second forward rounds the weights to bfloat16, and a last-bit difference can land on the other side
    of a bfloat16 value: on an AVX2-only EPYC the second step's gradients were 2e-4 apart (relative to the largest)
    and Adam's moments 0.6%. So in both precisions each tensor's Adam moments and change from the start are compared
    by the relative norm of their difference (2% in bf16, 1e-4 in float32). Measured against this reference: no
    clipping moved the moments 29x (exp_avg) and 195x (exp_avg_sq); the first step's factor reused in the second,
    190% and 30%; a bound of 0.055 instead of 0.05, exp_avg 10%. Weight decay's share of a change is under the bf16
    bound; float32's elementwise check covers it."""
    torch.manual_seed(0)
    model = SequenceClassification(num_labels=2, encoder=TINY, vocab_size=64, classifier_dropout=0.0,
                                   optimization=Optimization(learning_rate=1e-3, warmup=0, schedule="constant"))
    reference, start = copy.deepcopy(model), copy.deepcopy(model)
    data = classification_batches(2)
    run = trainer(2, gradient_clip_val=0.05, precision=precision)
    run.fit(model, DataLoader(data, batch_size=None))
    assert run.optimizers[0].param_groups[0]["fused"] is True
    assert "grad_scale" not in vars(run.optimizers[0])  # the fused step's clipping factor was that step's alone

    optimizer, norms = hand_written_steps(
        reference, data, precision, lambda module: float(torch.nn.utils.clip_grad_norm_(module.parameters(), 0.05)))
    assert min(norms) > 0.5  # clipping scaled every step's gradient down
    bound = assert_same_changes(model, reference, start, precision)
    for (name, mine), theirs in zip(model.named_parameters(), reference.parameters(), strict=True):
        for moment in ("exp_avg", "exp_avg_sq"):
            mine_moment, their_moment = run.optimizers[0].state[mine][moment], optimizer.state[theirs][moment]
            assert relative_difference(mine_moment, their_moment) < bound, (name, moment)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_gradient_clipping_by_value_keeps_the_fused_optimizer_and_clamps_each_gradient(precision):
    """`--trainer.gradient_clip_algorithm value` clamps every gradient element to the bound, as clip_grad_value_
    does, before the fused AdamW steps (Lightning's plugin would refuse to clip it under bf16-mixed, and the unfused
    AdamW made the host read the divergence check every step): three steps as hand-written ones, at a bound that
    clamps some elements and not others. Compared as the norm clipping's test compares (elementwise in float32, by
    the relative norm of the changes in bf16)."""
    torch.manual_seed(0)
    model = SequenceClassification(num_labels=2, encoder=TINY, vocab_size=64, classifier_dropout=0.0,
                                   optimization=Optimization(learning_rate=1e-3, warmup=0, schedule="constant"))
    reference, start = copy.deepcopy(model), copy.deepcopy(model)
    data = classification_batches(3)
    run = trainer(3, gradient_clip_val=1e-3, gradient_clip_algorithm="value", precision=precision)
    run.fit(model, DataLoader(data, batch_size=None))
    assert run.optimizers[0].param_groups[0]["fused"] is True

    def clamp(module: SequenceClassification) -> float:  # the share of gradient elements the bound clamps
        grads = torch.cat([p.grad.flatten() for p in module.parameters() if p.grad is not None])
        share = float((grads.abs() > 1e-3).float().mean())
        torch.nn.utils.clip_grad_value_(module.parameters(), 1e-3)
        return share

    _, clamped = hand_written_steps(reference, data, precision, clamp)
    assert all(0.01 < share < 0.99 for share in clamped), clamped  # the bound clamped some elements, not all
    assert_same_changes(model, reference, start, precision)


def test_a_second_fit_takes_the_norm_over_the_modules_it_trains():
    """The gradient norm is taken over the parameters gathered once a fit (`on_before_optimizer_step`): a head
    replaced between two fits is in the second fit's norm, and so in its clipping."""
    torch.manual_seed(0)
    model = SequenceClassification(num_labels=2, encoder=TINY, vocab_size=64)
    data = classification_batches(1)
    trainer(1).fit(model, DataLoader(data, batch_size=None))
    model.head = copy.deepcopy(model.head)  # new parameters, with the same shapes
    second = trainer(1)
    second.fit(model, DataLoader(data, batch_size=None))
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert any(p.grad is not None for p in model.head.parameters())
    assert float(second.callback_metrics["train/grad_norm"]) == float(torch.nn.utils.get_total_norm(grads))


def test_both_teachers_stay_in_eval_mode_whatever_sets_their_submodules(teacher_dir, tmp_path):
    """Lightning restores every submodule's mode on its own around its loops, bypassing `Teacher.train`: a teacher
    whose modules were switched to training mode that way still runs without dropout, for the MLM teacher of
    `Distillation` and the classifier of logit distillation alike (one `Teacher` class for both)."""
    torch.manual_seed(0)
    classifier = SequenceClassification(num_labels=2, encoder=EncoderSpec(preset="bert-tiny", hidden_dropout=0.5),
                                        vocab_size=64)
    classifier.export(tmp_path / "classifier")
    models = [Distillation(teacher=str(teacher_dir)),
              SequenceClassification(num_labels=2, encoder=TINY, vocab_size=64, teacher=str(tmp_path / "classifier"))]
    batch = mlm_batches(1, batch=2, seq=8)[0]
    for model in models:
        model.train()
        for module in model.teacher.modules():
            module.training = True  # as Lightning's mode restore does, module by module
        head_input = batch["labels"] != -100 if isinstance(model, Distillation) else batch["attention_mask"]
        outputs = [model.teacher(batch["input_ids"], batch["attention_mask"], None, head_input)[1] for _ in range(2)]
        assert torch.equal(outputs[0], outputs[1])  # no dropout
        assert not any(module.training for module in model.teacher.modules())
        assert all(not p.requires_grad for p in model.teacher.parameters())


def test_a_new_classifier_starts_as_transformers_starts_it_from_the_checkpoints_initializer_range(tmp_path):
    """transformers draws a fine-tune's new classifier (and a pooler its checkpoint lacks) from N(0,
    config.initializer_range), zero biases; litbert's sequence and token classifiers start so too, for a checkpoint's
    range and a new encoder's, not from BERT's 0.02 whatever the checkpoint says."""
    import transformers

    config = transformers.BertConfig(vocab_size=97, hidden_size=128, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, initializer_range=0.2)
    transformers.BertModel(config, add_pooling_layer=False).save_pretrained(tmp_path)
    torch.manual_seed(0)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path, num_labels=3)
    sequence = SequenceClassification(num_labels=3, pretrained=str(tmp_path))
    tokens = TokenClassification(label_names=["O", "B-X", "I-X", "B-Y", "I-Y"], pretrained=str(tmp_path))
    new = SequenceClassification(num_labels=3, encoder=dataclasses.replace(TINY, initializer_range=0.05))
    for weight, std in [(theirs.classifier.weight, 0.2), (theirs.bert.pooler.dense.weight, 0.2),
                        (sequence.head.classifier.weight, 0.2), (sequence.head.pooler[0].weight, 0.2),
                        (tokens.head.classifier.weight, 0.2), (new.head.classifier.weight, 0.05)]:
        assert weight.std().item() == pytest.approx(std, rel=0.15) and weight.mean().abs() < std / 4
    for bias in (sequence.head.classifier.bias, sequence.head.pooler[0].bias, tokens.head.classifier.bias):
        assert not bias.any()
