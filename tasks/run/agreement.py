"""Decisions every rank of a run must take alike at a step boundary, agreed over the hosts' network.

A signal reaches one rank, and each rank has its own clock; to stop or save together, the ranks agree on the largest
of a few integers every step, or take rank 0's clock. Over the training backend (NCCL on GPUs) that needs a device
tensor whose value the host then reads: a wait for the device at every step, which leaves the host no step ahead of
the GPU. `HostAgreement` all-reduces or broadcasts a host tensor over a gloo group instead: each host waits only for
the other hosts, never for its device.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class HostAgreement:
    """The largest of each of a few integers over all ranks, through a gloo group of its own. Build it on every rank
    at the same point (building the group is a collective); with one process it agrees with itself."""

    def __init__(self) -> None:
        self.group = None
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            self.group = dist.new_group(backend="gloo")

    def agree_max(self, values: list[int]) -> list[int]:
        """Every rank's largest of each value; all ranks call it at the same points."""
        if self.group is None:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group)
        return tensor.tolist()

    def from_rank_zero(self, values: list[float]) -> list[float]:
        """Rank 0's values (floats: a clock) on every rank; all ranks call it at the same points."""
        if self.group is None:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64)
        dist.broadcast(tensor, src=0, group=self.group)
        return tensor.tolist()
