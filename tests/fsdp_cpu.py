"""Lightning's `FSDPStrategy` (torch's FSDP1, as `--trainer.strategy fsdp` gives it) on two CPU processes over gloo,
for the tests only: litbert's `tasks.run.fsdp.FSDPStrategy` with the three changes below, so that the tests train,
checkpoint, resume and export through train.py under FSDP sharding:
`python train.py ... --trainer.accelerator cpu --trainer.devices 2 --trainer.strategy fsdp_cpu.CPUFSDPStrategy
--trainer.strategy.process_group_backend gloo`, with `tests/` on PYTHONPATH.

Lightning 2.6 and torch 2.13 do not run FSDP on the CPU. The changes, each without effect on what a GPU run does:

1. A subclass: Lightning refuses `strategy="fsdp"` and `FSDPStrategy(...)` unless the accelerator is CUDA
   (`lightning/pytorch/trainer/connectors/accelerator_connector.py`, `_check_strategy_and_fallback`), a check on
   the exact type.
2. `device_id=cpu`: Lightning wraps with `device_id=root_device.index`, None for the CPU, and torch's FSDP then
   looks for an accelerator and raises "FSDP needs a non-CPU accelerator device"
   (`torch/distributed/fsdp/_init_utils.py`, `_init_device_handle`).
3. Full state dicts (checkpoints) gathered without `offload_to_cpu`, which Lightning sets
   (`lightning/fabric/strategies/fsdp.py`, `_get_full_state_dict_context`) to spare the GPU, and which on the CPU
   breaks torch's FSDP, whose "move" to the CPU returns the same tensor: the weights' `FlatParamHandle.to_cpu` frees
   the storage it was to move (`torch/distributed/fsdp/_flat_param.py`; the process dies with SIGSEGV), and the
   optimizer's states come out as views of one reused buffer, so that every `exp_avg` saved is its `exp_avg_sq`
   (`torch/distributed/fsdp/_optim_utils.py`, `_unflatten_orig_param_states`: `value.cpu()` in place of a clone).
"""

from __future__ import annotations

import contextlib

import lightning.fabric.strategies.fsdp as fabric_fsdp
import lightning.fabric.strategies.model_parallel as fabric_model_parallel
import lightning.pytorch.strategies.fsdp as pytorch_fsdp
import torch
from lightning.pytorch.strategies import FSDPStrategy as LightningFSDPStrategy
from torch.distributed.fsdp import (
    FullOptimStateDictConfig,
    FullStateDictConfig,
    FullyShardedDataParallel,
    StateDictType,
)
from torch.nn import Module

from tasks.run.fsdp import FSDPStrategy


def _full_state_dict_context(module: Module, world_size: int,
                             rank0_only: bool = True) -> contextlib.AbstractContextManager:
    """Lightning's `_get_full_state_dict_context`, gathering where the shards are (the CPU)."""
    return FullyShardedDataParallel.state_dict_type(
        module, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=False, rank0_only=rank0_only),
        FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=rank0_only))


for _module in (fabric_fsdp, fabric_model_parallel, pytorch_fsdp):  # each imported the function by name
    _module._get_full_state_dict_context = _full_state_dict_context


class CPUFSDPStrategy(FSDPStrategy):
    """litbert's `FSDPStrategy` with the task wrapped for the CPU; Lightning's and litbert's code do the rest."""

    def _setup_model(self, model: Module) -> Module:
        if self._wrapped is None or self._wrapped[0] is not model:
            wrapped = FullyShardedDataParallel(model, cpu_offload=self.cpu_offload,
                                               mixed_precision=self.mixed_precision_config,
                                               sharding_strategy=self.sharding_strategy,
                                               device_id=torch.device("cpu"), **self.kwargs)
            # Lightning's, given a wrapped model, keeps the wrapping (and moves the metrics); litbert's keeps it
            self._wrapped = (model, LightningFSDPStrategy._setup_model(self, wrapped))
        return super()._setup_model(model)
