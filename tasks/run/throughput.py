"""Training throughput in the logger (and the progress bar, `tasks.run.progress`): real (non-padding) tokens per
second, sequences per second and model FLOPs utilisation (MFU).

MFU = achieved model FLOP/s / peak FLOP/s of one device. Model FLOPs come from the task (`EncoderTask.training_flops`:
the encoder's matmuls for its own configuration, x3 for forward + backward, over real tokens only, plus the heads
and, when distilling, the teacher's forward pass). Work on padding is not counted, so padding lowers MFU.

The peak is `peak_flops` when given (a datasheet figure, or one measured once by a benchmark), else the datasheet
peak from Lightning's table of devices (`get_available_flops`: NVIDIA GPUs, in the dtype the training precision
runs its matmuls in). Where the table does not know the device (a CPU), no MFU is logged: a peak measured inside
the run would cost every run its time and move with the machine's load.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.throughput import get_available_flops

from tasks.base import sequence_lengths


def matmul_dtype(precision: str) -> torch.dtype:
    """The dtype of the matmuls under a Lightning precision setting."""
    precision = str(precision)
    if precision.startswith("bf16"):
        return torch.bfloat16
    if precision.startswith("16"):
        return torch.float16
    if precision.startswith("64"):
        return torch.float64
    return torch.float32


class Throughput(L.Callback):
    """Logs `train/tokens_per_sec`, `train/samples_per_sec`, `train/mfu` and `train/tflops` (achieved) every
    `log_every_n_steps` optimizer steps, averaged over the batches since the last log and timed wall-clock (data
    loading and the optimizer included; validation excluded). The progress bar shows tokens/s and MFU as of the
    last log (`tasks.run.progress`).

    Figures are per device: under DDP each rank times its own batches and rank 0's are logged; the job's rate is
    the world size times that. `peak_flops` is one device's peak in FLOP/s; None takes it from Lightning's table
    of devices, and logs no MFU on a device the table does not hold (a CPU).
    """

    def __init__(self, peak_flops: float | None = None, log_every_n_steps: int | None = None) -> None:
        super().__init__()
        if peak_flops is not None and peak_flops <= 0:
            raise ValueError(f"Throughput(peak_flops={peak_flops}): give the device's peak in FLOP/s (> 0) or None "
                             f"to take it from Lightning's table of devices.")
        self.peak_flops = peak_flops
        self.log_every_n_steps = log_every_n_steps
        self._step_at_start = 0  # the optimizer steps taken when the current batch started
        self._reset()

    def _reset(self) -> None:
        self._started: float | None = None
        # The window's batches, counted when it is logged: counting tokens reads tensor values, which on a GPU
        # would wait for the step in flight after every batch instead of once per window.
        self._batches: list[dict[str, torch.Tensor]] = []

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not hasattr(pl_module, "training_flops"):
            raise TypeError(f"Throughput needs a task with `training_flops(batch)`; "
                            f"{type(pl_module).__name__} has none.")
        if self.peak_flops is None:
            self.peak_flops = get_available_flops(pl_module.device, matmul_dtype(trainer.precision))

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._reset()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._reset()  # the next window starts at the next training batch: validation time is not training time

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._step_at_start = trainer.global_step
        if self._started is None:
            # Not waiting for the device here, which would be a host sync in a step that logs nothing: a window
            # starts at the fit's first batch, an epoch's or the first after a validation, each just after the host
            # read values off the device (the weights moved there, the divergence check at an epoch's end, the
            # validation's metrics), so no earlier work is left in flight to be timed.
            self._started = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._batches.append(batch)
        every = self.log_every_n_steps or trainer.log_every_n_steps
        step = trainer.global_step  # already advanced when this batch ended an optimizer step
        # Only a batch that ended an optimizer step logs: under gradient accumulation the batches before it leave
        # the step where it was (at 0 before the first step, or a resumed run's multiple of `every`).
        if step != self._step_at_start and step % max(1, every) == 0:
            self._synchronize(pl_module)
            elapsed = max(time.perf_counter() - self._started, 1e-9)
            lengths = [length for b in self._batches for length in sequence_lengths(b)]
            achieved = sum(pl_module.training_flops(b) for b in self._batches) / elapsed
            pl_module.log("train/tokens_per_sec", sum(lengths) / elapsed)  # shown by tasks.run.progress
            pl_module.log("train/samples_per_sec", len(lengths) / elapsed)
            if self.peak_flops:
                pl_module.log("train/mfu", achieved / self.peak_flops)
            pl_module.log("train/tflops", achieved / 1e12)
            self._reset()
            self._started = time.perf_counter()

    @staticmethod
    def _synchronize(pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
