"""The optimizer by name or class path, layer-wise learning-rate decay, the floor of the decays, and the `wsd` decay
that ends with trainer.max_time (on a fake clock), resumed exactly."""

import copy
import dataclasses
import math
import types

import lightning as L
import lightning.pytorch.callbacks.timer as lightning_timer
import pytest
import torch
import transformers
from tiny import TINY, mlm_batches, trainer
from torch.utils.data import DataLoader

from tasks.base import DivergenceError, Optimization, lr_lambda, parameter_groups
from tasks.classification import SequenceClassification
from tasks.mlm import MaskedLM
from tasks.run.timer import HostTimer


def classifier(**optimization) -> SequenceClassification:
    torch.manual_seed(0)
    return SequenceClassification(num_labels=2, encoder=TINY, vocab_size=64, classifier_dropout=0.0,
                                  optimization=Optimization(**{"learning_rate": 1e-3, "warmup": 0,
                                                               "schedule": "constant", **optimization}))


def batches(n: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    ids = [torch.randint(5, 64, (8, 12), generator=generator) for _ in range(n)]
    return [{"input_ids": i, "attention_mask": torch.ones_like(i), "labels": (i[:, 0] > 34).long()} for i in ids]


class StopAt(L.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            trainer.should_stop = True


@pytest.mark.parametrize(("name", "cls", "arguments"), [
    ("adamw", torch.optim.AdamW, {"betas": (0.9, 0.999), "eps": 1e-6, "fused": True}),
    ("adam", torch.optim.Adam, {"betas": (0.9, 0.999), "eps": 1e-6, "fused": True}),
    ("adafactor", torch.optim.Adafactor, {}),
    ("torch.optim.SGD", torch.optim.SGD, {"momentum": 0.9}),
])
def test_each_optimizer_steps_as_torch_builds_it_by_hand(name, cls, arguments):
    """Two steps through Lightning give the weights of two hand-written steps of the torch optimizer the name
    stands for, with the same decay/no-decay groups; Adam(W) fused."""
    extra = {"optimizer_args": {"momentum": 0.9}} if name == "torch.optim.SGD" else {}
    model = classifier(optimizer=name, **extra)
    reference = copy.deepcopy(model)
    data = batches(2)
    run = trainer(2)
    run.fit(model, DataLoader(data, batch_size=None))
    optimizer = run.optimizers[0]
    assert type(optimizer) is cls and optimizer.defaults.get("fused") == arguments.get("fused")

    by_hand = cls(parameter_groups(reference, 0.01), lr=1e-3, **arguments)
    for batch in data:
        reference.loss(reference(batch), batch["labels"]).backward()
        by_hand.step()
        by_hand.zero_grad()
    moved = 0.0
    for (name_, mine), theirs, first in zip(model.named_parameters(), reference.parameters(),
                                            classifier().parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, msg=name_)
        moved = max(moved, float((mine - first).detach().abs().max()))
    assert moved > 1e-4  # the steps changed the weights


def test_bad_lengths_and_rates_are_refused_by_name_and_value():
    with pytest.raises(ValueError, match=r"^model.optimization.learning_rate=-0.001 must be > 0"):
        Optimization(learning_rate=-1e-3)
    with pytest.raises(ValueError, match=r"^model.optimization.weight_decay=-0.1 must be >= 0"):
        Optimization(weight_decay=-0.1)
    # 1.5 used to become one step of warmup without a word.
    with pytest.raises(ValueError, match=r"^model.optimization.warmup=1.5: a length of 1 or more is a number of steps, "
                                         r"a whole number; give 1 or 2 steps, or a fraction of the run below 1"):
        Optimization(warmup=1.5)
    with pytest.raises(ValueError, match=r"^model.optimization.decay=250.5: .* give 250 or 251 steps"):
        Optimization(schedule="wsd", decay=250.5)
    assert Optimization(warmup=1.0).warmup_steps(100) == 1 and Optimization(warmup=500).warmup_steps(1000) == 500
    assert Optimization(warmup=0.06).warmup_steps(100) == 6


@pytest.mark.parametrize("settings, refused", [
    ({"betas": (1.5, 0.999)}, r"^model.optimization.betas=\(1.5, 0.999\): torch.optim.adamw.AdamW refuses it \(Invalid "
                              r"beta parameter at index 0: 1.5\)"),
    ({"optimizer": "adam", "eps": -1.0}, r"^model.optimization.eps=-1.0: torch.optim.adam.Adam refuses it"),
    ({"optimizer": "torch.optim.SGD", "optimizer_args": {"momentum": -1}},
     r"^model.optimization.optimizer_args.momentum=-1: torch.optim.sgd.SGD refuses it \(Invalid momentum value")])
def test_a_value_the_optimizer_refuses_is_refused_by_its_setting_when_configured(settings, refused):
    """torch's own checks of the values, at construction of the settings: they came when the optimizer was built,
    after the data was tokenised, naming torch's argument ('Invalid beta parameter') and not the setting."""
    with pytest.raises(ValueError, match=refused):
        Optimization(**settings)


class TwoDimensional(torch.optim.SGD):
    """An optimizer of 2-D parameters alone, as torch's Muon (torch >= 2.9) is."""

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        params = list(params)
        if any(param.ndim != 2 for param in params):
            raise ValueError("TwoDimensional only supports 2D parameters")
        super().__init__(params, lr=lr, weight_decay=weight_decay)


def test_an_optimizer_that_refuses_the_parameters_is_refused_by_its_name_not_by_the_values():
    """An optimizer that takes 2-D parameters alone refuses the stand-in parameter whatever the values: its refusal
    names no setting, and used to be put on all of them ("model.optimization.learning_rate=0.0001: ... refuses it"),
    sending the user to change a value it never refused."""
    with pytest.raises(ValueError) as refused:
        Optimization(optimizer="test_optimizers.TwoDimensional")
    assert str(refused.value).startswith(
        "model.optimization.optimizer='test_optimizers.TwoDimensional': test_optimizers.TwoDimensional refuses to be "
        "built (TwoDimensional only supports 2D parameters), here on a stand-in for the task's parameters")


def test_a_bad_optimizer_or_argument_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"optimizer='adamx' is no optimizer litbert knows; give one of adamw, adam, "
                                         r"adafactor, or the class path of a torch.optim.Optimizer"):
        Optimization(optimizer="adamx")
    with pytest.raises(ValueError, match=r"optimizer='torch.optim.Nope' cannot be imported"):
        Optimization(optimizer="torch.optim.Nope")
    with pytest.raises(ValueError, match=r"optimizer='torch.nn.Linear' is .*, not a torch.optim.Optimizer"):
        Optimization(optimizer="torch.nn.Linear")
    with pytest.raises(ValueError, match=r"optimizer_args.momentum: torch.optim.adamw.AdamW takes no such argument; "
                                         r"it takes .*amsgrad"):
        Optimization(optimizer_args={"momentum": 0.9})
    with pytest.raises(ValueError, match=r"optimizer_args.lr: litbert gives this argument from "
                                         r"model.optimization.learning_rate"):
        Optimization(optimizer="torch.optim.SGD", optimizer_args={"lr": 0.1})
    with pytest.raises(ValueError, match=r"optimizer_args.betas: .* from model.optimization.betas"):
        Optimization(optimizer="adam", optimizer_args={"betas": (0.8, 0.9)})
    with pytest.raises(ValueError, match=r"betas=\(0.8, 0.9\) is an Adam setting; .*'adafactor' does not read it"):
        Optimization(optimizer="adafactor", betas=(0.8, 0.9))
    with pytest.raises(ValueError, match=r"eps=1e-08 .*'adafactor' does not read it \(its own `eps` has another "
                                         r"form .*optimizer_args"):
        Optimization(optimizer="adafactor", eps=1e-8)
    with pytest.raises(ValueError, match=r"'torch.optim.Rprop' takes no `weight_decay` argument.*weight_decay 0"):
        Optimization(optimizer="torch.optim.Rprop")
    Optimization(optimizer="torch.optim.Rprop", weight_decay=0.0)
    Optimization(optimizer="adafactor", optimizer_args={"eps": (None, 1e-3), "beta2_decay": -0.7})
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="layer_decay"):
            Optimization(layer_decay=bad)


def test_layer_decay_gives_each_layer_its_rate_and_keeps_biases_and_norms_undecayed():
    """bert-tiny (2 layers) at layer_decay 0.5: the head (and pooler) at the peak, block 1 at half, block 0 at a
    quarter, the embeddings at an eighth; after steps of warmup every group keeps its share of the peak."""
    model = classifier(layer_decay=0.5, warmup=4, schedule="linear")
    run = trainer(8, callbacks=[StopAt(2)])
    run.fit(model, DataLoader(batches(2), batch_size=None))
    groups = run.optimizers[0].param_groups
    assert groups[0]["depth"] == 3  # the head's rate first: the one logged as train/lr
    rate = {id(p): (group["lr"], group["weight_decay"]) for group in groups for p in group["params"]}
    scale = 2 / 4  # two of the four warmup steps done
    expected_depth = {"embeddings": 0, "position": 0, "blocks.0": 1, "blocks.1": 2, "head": 3}
    seen = set()
    for name, param in model.named_parameters():
        part = "head" if name.startswith("head.") else name.split(".")[1]
        part = f"blocks.{name.split('.')[2]}" if part == "blocks" else part
        seen.add(part)
        lr, weight_decay = rate[id(param)]
        assert lr == pytest.approx(1e-3 * scale * 0.5 ** (3 - expected_depth[part])), name
        assert weight_decay == (0.0 if param.ndim < 2 or name.endswith(".bias") else 0.01), name
    assert seen == set(expected_depth)
    # Without layer_decay: the two groups of before, at one rate.
    assert [len(g["params"]) for g in parameter_groups(model, 0.01)] == [
        sum(len(g["params"]) for g in groups if g["weight_decay"]), sum(len(g["params"]) for g in groups
                                                                        if not g["weight_decay"])]


@pytest.mark.parametrize("schedule", ["cosine", "wsd", "linear"])
def test_min_lr_ratio_floors_the_decay_as_transformers_schedules_do(schedule):
    """transformers' cosine_with_min_lr and WSD (linear decay) schedules, step for step (transformers' WSD warms up
    from the floor, litbert's from 0 as every schedule of it: they agree from the end of the warmup); the linear
    decay ends at the floor too."""
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=1.0)
    if schedule == "cosine":
        theirs = transformers.get_cosine_with_min_lr_schedule_with_warmup(optimizer, 10, 100, min_lr_rate=0.1)
    elif schedule == "wsd":
        theirs = transformers.get_wsd_schedule(optimizer, 10, 20, num_training_steps=100, decay_type="linear",
                                               min_lr_ratio=0.1)
    mine = [lr_lambda(step, 10, 100, schedule, 20, min_lr_ratio=0.1) for step in range(101)]
    if schedule != "linear":
        start = 10 if schedule == "wsd" else 0
        assert mine[start:] == pytest.approx([theirs.lr_lambdas[0](step) for step in range(start, 101)], abs=1e-12)
    assert mine[100] == pytest.approx(0.1) and min(mine[10:]) == pytest.approx(0.1)
    assert mine[5] == 0.5  # the warmup is not floored
    if schedule == "linear":
        assert mine[55] == pytest.approx(0.1 + 0.9 * 0.5)
    with pytest.raises(ValueError, match="min_lr_ratio=0.1 is where a decay ends, but schedule='constant'"):
        Optimization(schedule="constant", min_lr_ratio=0.1)


@pytest.mark.parametrize(("schedule", "theirs", "warmup"), [("linear", "linear", 0.25), ("cosine", "cosine", 3),
                                                       ("constant", "constant_with_warmup", 0.25)])
def test_the_learning_rate_is_the_trainers_at_every_step_across_epochs_and_accumulated_batches(tmp_path, schedule,
                                                                                              theirs, warmup):
    """The rate of every optimizer step is the one transformers' `Trainer` sets at the same settings: its steps
    counted per epoch as ceil(batches / accumulation), the last short batch and short window of an epoch kept, the
    fractional warmup rounded up (a warmup of 1 or more counted in steps), then the linear or cosine decay to 0 or
    (litbert's `constant`, the `Trainer`'s `constant_with_warmup`) the peak, across epoch boundaries. 13 batches of 4
    (the last of 2) a window of 3 for 2 epochs: 5 steps an epoch, a quarter of the run's 10 (rounded up to 3) or 3
    steps in warmup."""
    import datasets

    rates: list[float] = []

    class Rates(transformers.TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
            rates.append(optimizer.param_groups[0]["lr"])

    config = transformers.BertConfig(vocab_size=64, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                                     intermediate_size=8)
    rows = datasets.Dataset.from_dict({"input_ids": [[1, 5 + i % 50, 2] for i in range(50)], "labels": [0] * 50})
    settings = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, gradient_accumulation_steps=3, num_train_epochs=2,
        learning_rate=1e-3, warmup_steps=warmup, lr_scheduler_type=theirs, use_cpu=True, report_to="none",
        save_strategy="no", disable_tqdm=True)
    transformers.Trainer(model=transformers.BertForSequenceClassification(config), args=settings, train_dataset=rows,
                         callbacks=[Rates()]).train()

    ours: list[float] = []

    class Ours(L.Callback):
        def on_before_optimizer_step(self, trainer, module, optimizer):
            ours.append(optimizer.param_groups[0]["lr"])

    data = [{key: value[:4] for key, value in batch.items()} for batch in batches(13)]
    data[-1] = {key: value[:2] for key, value in data[-1].items()}
    trainer(-1, max_epochs=2, accumulate_grad_batches=3, callbacks=[Ours()]).fit(
        classifier(warmup=warmup, schedule=schedule), DataLoader(data, batch_size=None))
    assert len(rates) == 10 and rates[0] == 0.0 and rates[2] < 1e-3 and rates[3] == pytest.approx(1e-3)
    assert ours == pytest.approx(rates, rel=1e-12, abs=1e-15)


def test_a_run_bounded_by_time_alone_refuses_what_needs_its_step_count():
    for settings, refused in (({"schedule": "linear"}, "schedule='linear' decays over the run's steps"),
                              ({"schedule": "wsd"}, "warmup=0.06 is a fraction of the run's steps"),
                              ({"schedule": "wsd", "warmup": 10, "decay": 50}, "decay=50 steps cannot be placed")):
        with pytest.raises(ValueError, match=refused):
            Optimization(**settings).schedule_lengths(math.inf, 600.0)
    assert Optimization(schedule="wsd", warmup=10).schedule_lengths(math.inf, 600.0) == (math.inf, 10, 0, 120.0)
    # Bounded by both: the decay is the same share of the steps and of the time.
    assert Optimization(schedule="wsd", warmup=10, decay=50).schedule_lengths(1000, 600.0) == (1000, 10, 50, 30.0)



def test_a_run_nothing_bounds_refuses_a_decay_and_says_so():
    """trainer.max_epochs and max_steps -1 without max_time: the run trains until stopped, so no decay can end
    with it. `wsd`, whose decay would follow max_time, held the peak for ever with its decay dropped unsaid; and
    every refusal said max_time bounded the run."""
    for settings in ({"schedule": "wsd", "warmup": 10}, {"schedule": "linear"}, {"schedule": "cosine"}):
        with pytest.raises(ValueError, match=r"decays towards the run's end, but nothing bounds this run.*"
                                             r"Use schedule: constant"):
            Optimization(**settings).schedule_lengths(math.inf, None)
    with pytest.raises(ValueError, match=r"warmup=0.06 is a fraction of the run's steps, but nothing bounds"):
        Optimization(schedule="constant").schedule_lengths(math.inf, None)
    assert Optimization(schedule="constant", warmup=10).schedule_lengths(math.inf, None) == (math.inf, 10, 0, None)


class FakeClock(L.Callback):
    """Lightning's Timer reads this clock, which moves one second per training batch and stands still otherwise."""

    def __init__(self, monkeypatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(lightning_timer, "time", types.SimpleNamespace(monotonic=lambda: self.now))
        self.lrs: dict[int, float] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.now += 1.0
        self.lrs[trainer.global_step] = trainer.optimizers[0].param_groups[0]["lr"]


@pytest.mark.parametrize("timers", [("lightning", "lightning"), ("host", "host"), ("lightning", "host")])
def test_wsd_decays_to_its_floor_when_max_time_ends_the_run_and_resumes_exactly(timers, monkeypatch, tmp_path):
    """A run bounded by 12 (fake) seconds alone, a batch a second: warmup 2 steps, the peak held to 6 s, then the
    linear decay ends at the floor with the time (Lightning stops it after step 12). Stopped at step 4 and resumed
    from its checkpoint, it sets the same learning rates and ends with the same weights. The same with train.py's
    `HostTimer` in place of the Timer Lightning makes of max_time, and resumed with it from the Timer's checkpoint."""
    optimization = dict(learning_rate=1e-3, warmup=2, schedule="wsd", decay=0.5, min_lr_ratio=0.1)
    data = DataLoader(mlm_batches(2), batch_size=None)

    def run(*callbacks, ckpt_path=None):
        torch.manual_seed(0)
        model = MaskedLM(encoder=TINY, vocab_size=64, optimization=Optimization(**optimization))
        clock = FakeClock(monkeypatch)
        if timers[ckpt_path is not None] == "host":
            fit = trainer(-1, callbacks=[clock, HostTimer(duration={"seconds": 12}), *callbacks])
        else:
            fit = trainer(-1, max_time={"seconds": 12}, callbacks=[clock, *callbacks])
        fit.fit(model, data, ckpt_path=ckpt_path)
        return fit, model, clock

    whole, model, clock = run()
    assert whole.global_step == 12
    expected = {step: 1e-3 * lr_lambda(step, 2, math.inf, "wsd", 0, 0.1, (12 - step) / 6) for step in range(12)}
    assert clock.lrs == pytest.approx(expected, rel=1e-12)
    assert [round(clock.lrs[s] / 1e-3, 6) for s in (0, 1, 2, 6, 9, 11)] == [0.0, 0.5, 1.0, 1.0, 0.55, 0.25]
    assert whole.optimizers[0].param_groups[0]["lr"] == pytest.approx(1e-4)  # at the floor when the time is up

    first, _, _ = run(StopAt(4))
    first.save_checkpoint(tmp_path / "step4.ckpt")
    resumed, resumed_model, resumed_clock = run(ckpt_path=tmp_path / "step4.ckpt")
    assert resumed.global_step == 12
    assert resumed_clock.lrs == {step: clock.lrs[step] for step in range(4, 12)}
    for (name, mine), theirs in zip(resumed_model.named_parameters(), model.parameters(), strict=True):
        assert torch.equal(mine, theirs), name


def test_a_non_finite_step_stops_an_optimizer_that_cannot_skip_it_before_it_is_taken():
    """Adafactor has no `found_inf` to skip a step on the device: the host checks each step before it is taken, and
    a NaN gradient reaches no weight (taken, it would have made every weight NaN)."""
    model = classifier(optimizer="adafactor")
    with torch.no_grad():
        model.encoder.embeddings.word.weight[7].fill_(float("nan"))
    before = copy.deepcopy(model.state_dict())
    data = batches(1)
    data[0]["input_ids"][:, 1] = 7
    with pytest.raises(DivergenceError, match="The first training step gave loss nan"):
        trainer(1).fit(model, DataLoader(data, batch_size=None))
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]) or name == "encoder.embeddings.word.weight", name
    assert torch.isfinite(model.encoder.blocks[0].attention.qkv.weight).all()


@pytest.mark.parametrize("saved_as", ["Optimization", "config"])
def test_resuming_with_another_optimizer_is_refused(tmp_path, saved_as):
    """Also from a checkpoint of train.py, whose LightningCLI saves the config's settings (a dict) rather than the
    `Optimization` a task built in Python saves."""
    model = classifier()
    run = trainer(1)
    run.fit(model, DataLoader(batches(1), batch_size=None))
    run.save_checkpoint(tmp_path / "adamw.ckpt")
    if saved_as == "config":
        state = torch.load(tmp_path / "adamw.ckpt", weights_only=True)
        settings = dataclasses.asdict(state["hyper_parameters"]["optimization"])
        state["hyper_parameters"]["optimization"] = {**settings, "betas": list(settings["betas"])}
        torch.save(state, tmp_path / "adamw.ckpt")
    for changed, message in (({"optimizer": "adafactor"}, "optimizer: 'adamw' in the checkpoint, 'adafactor' now"),
                             ({"layer_decay": 0.8}, "layer_decay: None in the checkpoint, 0.8 now")):
        with pytest.raises(ValueError, match=f"another optimizer setup: model.optimization.{message}"):
            trainer(2).fit(classifier(**changed), DataLoader(batches(2), batch_size=None),
                           ckpt_path=tmp_path / "adamw.ckpt")


class Rates(L.Callback):
    """Each step's (learning rate, weight decay, betas) of every parameter group, as the step is taken."""

    def __init__(self) -> None:
        self.seen: dict[int, list[tuple]] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.seen[trainer.global_step] = [(g["lr"], g["weight_decay"], tuple(g["betas"]))
                                          for g in trainer.optimizers[0].param_groups]


def test_a_resume_with_another_schedule_says_so(tmp_path, capsys):
    """The schedule's settings are the resumed run's (the saved scheduler holds its position, not its shape), and
    the run names them as it names a changed learning rate."""
    first = trainer(8, callbacks=[StopAt(4)])
    first.fit(classifier(schedule="linear"), DataLoader(batches(8), batch_size=None))
    first.save_checkpoint(tmp_path / "step4.ckpt")
    capsys.readouterr()
    resumed = Rates()
    trainer(8, callbacks=[resumed]).fit(classifier(warmup=2), DataLoader(batches(8), batch_size=None),
                                        ckpt_path=tmp_path / "step4.ckpt")
    assert ("litbert: resuming with model.optimization.schedule='constant' (the checkpoint's: 'linear'), "
            "model.optimization.warmup=2 (the checkpoint's: 0)") in capsys.readouterr().out
    # From the first step on, the new schedule's rate (the old one's at step 4 was 5e-4).
    assert [resumed.seen[step][0][0] for step in (4, 5, 6, 7)] == pytest.approx([1e-3, 1e-3, 1e-3, 1e-3])


def test_a_resume_to_more_steps_decays_over_them_from_its_first_step(tmp_path):
    """Extending a linearly decaying run (a larger trainer.max_steps) decays over the new length from the resumed
    step on, as a run started with it does: the saved rate is the shorter schedule's."""
    first = trainer(8, callbacks=[StopAt(4)])
    first.fit(classifier(schedule="linear"), DataLoader(batches(8), batch_size=None))
    first.save_checkpoint(tmp_path / "step4.ckpt")
    resumed, fresh = Rates(), Rates()
    trainer(16, callbacks=[resumed]).fit(classifier(schedule="linear"), DataLoader(batches(8), batch_size=None),
                                         ckpt_path=tmp_path / "step4.ckpt")
    trainer(16, callbacks=[fresh]).fit(classifier(schedule="linear"), DataLoader(batches(8), batch_size=None))
    assert resumed.seen[4][0][0] == pytest.approx(1e-3 * 12 / 16)  # not 1e-3 * 4 / 8, the 8-step run's
    assert {step: rates for step, rates in resumed.seen.items()} == {step: fresh.seen[step] for step in resumed.seen}


def test_a_resume_with_other_dropouts_says_so(tmp_path, capsys):
    """Dropouts (and a distillation's temperature and loss weights), the precision and gradient clipping may change
    on resuming, as the learning rate may: they apply from the next step, and the run names them; unchanged ones are
    not named."""
    first = trainer(8, callbacks=[StopAt(4)])
    first.fit(classifier(), DataLoader(batches(8), batch_size=None))
    first.save_checkpoint(tmp_path / "step4.ckpt")
    capsys.readouterr()
    torch.manual_seed(0)
    resumed = SequenceClassification(num_labels=2, encoder=dataclasses.replace(TINY, hidden_dropout=0.2),
                                     vocab_size=64, classifier_dropout=0.3,
                                     optimization=Optimization(learning_rate=1e-3, warmup=0, schedule="constant"))
    trainer(8, precision="bf16-mixed", gradient_clip_val=0.5).fit(
        resumed, DataLoader(batches(8), batch_size=None), ckpt_path=tmp_path / "step4.ckpt")
    assert ("litbert: resuming with model.encoder.hidden_dropout=0.2 (the checkpoint's: 0.0), "
            "model.classifier_dropout=0.3 (the checkpoint's: 0.0), trainer.precision='bf16-mixed' (the checkpoint's: "
            "'32-true'), trainer.gradient_clip_val=0.5 (the checkpoint's: None); from its next step.") \
        in capsys.readouterr().out


@pytest.mark.parametrize("layer_decay", [None, 0.5])
def test_a_resumed_run_takes_its_own_learning_rate_weight_decay_and_betas(tmp_path, capsys, layer_decay):
    """Resuming with a lower learning rate (and another weight decay and betas) trains at them from the next step,
    at the schedule's position: each step's rates are those of a run started with the new settings, not the saved
    optimizer state's; the run names what it changed."""
    old = {"schedule": "linear", "layer_decay": layer_decay}
    new = {**old, "learning_rate": 2e-4, "weight_decay": 0.05, "betas": (0.8, 0.99)}
    first = trainer(8, callbacks=[StopAt(4)])
    first.fit(classifier(**old), DataLoader(batches(8), batch_size=None))
    first.save_checkpoint(tmp_path / "step4.ckpt")
    capsys.readouterr()
    resumed, fresh = Rates(), Rates()
    trainer(8, callbacks=[resumed]).fit(classifier(**new), DataLoader(batches(8), batch_size=None),
                                        ckpt_path=tmp_path / "step4.ckpt")
    assert ("litbert: resuming with model.optimization.learning_rate=0.0002 (the checkpoint's: 0.001), "
            "model.optimization.weight_decay=0.05 (the checkpoint's: 0.01), model.optimization.betas=(0.8, 0.99) "
            "(the checkpoint's: (0.9, 0.999))") in capsys.readouterr().out
    trainer(8, callbacks=[fresh]).fit(classifier(**new), DataLoader(batches(8), batch_size=None))
    assert sorted(resumed.seen) == [4, 5, 6, 7]
    for step, groups in resumed.seen.items():
        assert groups == pytest.approx(fresh.seen[step]), step
    rates = {lr for lr, _, _ in resumed.seen[4]}  # one, or one a depth: the head, TINY's 2 layers, the embeddings
    assert len(rates) == (1 if layer_decay is None else 4) and max(rates) == pytest.approx(1e-4)  # linear: half
