"""Fully sharded data parallel training (`--trainer.strategy fsdp`): Lightning's `FSDPStrategy` (torch's FSDP1),
wrapping the task once per run.

Lightning wraps the module anew at each trainer entry point: fit, then validate, test and predict. After fit the
task's parameters are 1-D views of this rank's shard (FSDP's `use_orig_params`, which Lightning sets), so a second
wrapping takes those views for the parameters, and loading the best checkpoint into it fails with size mismatches
(`copying a param with shape [30522, 128] ... the shape in current model is [1713727]`; Lightning issues #20373 and
#20950, open). train.py validates, tests, exports and predicts after fit, so this strategy keeps the first wrapper
of the task. The views would also hide each parameter's shape from the task's optimizer, whose weight-decay groups
go by it (biases and norm scales, 1-d, are not decayed; every matrix would be too): the task configures its
optimizer with the whole parameters in view. `fsdp` and `fsdp_cpu_offload` name this strategy (`register`);
Lightning's own class is refused (`check_strategy`).

Checkpoints are full state dicts (Lightning's default `state_dict_type="full"`): rank 0 writes one file that a run on
as many processes resumes, or on another number that keeps the global batch (`EncoderTask._check_global_batch`;
FSDP shards the state anew on loading), and the export gathers the full weights the same way (`tasks.run.export`).
A checkpoint of one process or of DDP resumes under FSDP too: Lightning reads the integer keys of its optimizer state
as places in `model.parameters()`, as its FSDP checkpoints are keyed, where torch's optimizers number their
parameters group after group (weight-decayed first); read that way, the AdamW moments of one parameter went to
another, and the first step failed. This strategy keys them to their parameters as torch's
`Optimizer.load_state_dict` does (`by_model_order`).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import lightning.pytorch.strategies as strategies
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.strategies import StrategyRegistry
from torch.distributed.fsdp import FullyShardedDataParallel, OptimStateKeyType
from torch.nn import Module
from torch.optim import Optimizer


class FSDPStrategy(strategies.FSDPStrategy):
    """Lightning's `FSDPStrategy` (same arguments), wrapping the task once per run."""

    _wrapped: tuple[Module, Module] | None = None  # (the task, what the first setup made of it)

    def setup_environment(self) -> None:
        if self._state_dict_type != "full":
            raise ValueError(
                f"trainer.strategy.state_dict_type={self._state_dict_type!r}: litbert's checkpoints are single files "
                f"(the last and best checkpoints, resuming, the export), which needs 'full'. Remove the setting.")
        super().setup_environment()

    def _setup_model(self, model: Module) -> Module:
        if self._wrapped is None or self._wrapped[0] is not model:
            self._wrapped = (model, super()._setup_model(model))
        return self._wrapped[1]

    def setup_optimizers(self, trainer: L.Trainer) -> None:
        # Every rank holds the whole parameters for a moment (the same tensors, with their own shapes): memory for
        # one unsharded copy of the model, once a fit.
        with FullyShardedDataParallel.summon_full_params(self.model, writeback=False):
            super().setup_optimizers(trainer)

    def load_checkpoint(self, checkpoint_path: _PATH, weights_only: bool | None = None) -> dict[str, Any]:
        # Lightning names the parameters of an integer-keyed optimizer state with FSDP's `rekey_optim_state_dict`,
        # by their places in `model.parameters()`: each state is first keyed by that place (`by_model_order`).
        rekey = vars(FullyShardedDataParallel)["rekey_optim_state_dict"]
        optimizers = iter(self.optimizers)  # Lightning loads their states in this order

        def by_places(state: dict[str, Any], key_type: OptimStateKeyType, model: Module, *args: Any,
                      **kwargs: Any) -> dict[str, Any]:
            if key_type == OptimStateKeyType.PARAM_NAME and not args and not kwargs:
                state = by_model_order(state, next(optimizers), model)
            return rekey.__func__(state, key_type, model, *args, **kwargs)

        FullyShardedDataParallel.rekey_optim_state_dict = staticmethod(by_places)
        try:
            return super().load_checkpoint(checkpoint_path, weights_only)
        finally:
            FullyShardedDataParallel.rekey_optim_state_dict = rekey


def by_model_order(state: dict[str, Any], optimizer: Optimizer, model: Module) -> dict[str, Any]:
    """A saved optimizer state keyed by each parameter's place in `model.parameters()`. Its groups list their
    parameters in the order of `optimizer`'s groups, whatever numbers they bear (torch's optimizers number them group
    after group, Lightning's FSDP checkpoints by their places in the model): the numbers are matched to `optimizer`'s
    parameters by that order, as `Optimizer.load_state_dict` matches them. The state of an FSDP checkpoint stays
    as it is."""
    place = {id(parameter): index for index, parameter in enumerate(model.parameters())}
    groups = state["param_groups"]
    if [len(group["params"]) for group in groups] != [len(own["params"]) for own in optimizer.param_groups]:
        return state  # another model or optimizer setup: loading it fails as it would have
    key = {saved: place[id(parameter)]
           for group, own in zip(groups, optimizer.param_groups, strict=True)
           for saved, parameter in zip(group["params"], own["params"], strict=True)}
    return {**state, "state": {key[saved]: value for saved, value in state["state"].items()},
            "param_groups": [{**group, "params": [key[saved] for saved in group["params"]]} for group in groups]}


def register() -> None:
    """`--trainer.strategy fsdp` (and `fsdp_cpu_offload`) give litbert's `FSDPStrategy`. Lightning still checks
    these names against the accelerator, refusing them off CUDA, as for its own class."""
    StrategyRegistry.register("fsdp", FSDPStrategy, description="FSDP, wrapping the task once per run (litbert)",
                              override=True)
    StrategyRegistry.register("fsdp_cpu_offload", FSDPStrategy, description="FSDP with CPU offloading (litbert)",
                              override=True, cpu_offload=True)


def check_strategy(strategy: Any) -> None:
    """Refuse Lightning's own `FSDPStrategy`, whose evaluation after fit fails (see the module docstring)."""
    if type(strategy) is strategies.FSDPStrategy:
        raise ValueError(
            "trainer.strategy=lightning.pytorch.strategies.FSDPStrategy wraps the model again after fit, and "
            "validating the best checkpoint then fails (Lightning issue #20373). Use tasks.run.fsdp.FSDPStrategy "
            "(the same arguments) or --trainer.strategy fsdp.")
