"""Training throughput in the progress bar and the logger: real (non-padding) tokens per second and model FLOPs
utilisation (MFU).

MFU = achieved model FLOP/s / peak FLOP/s of one device. Model FLOPs come from the task (`EncoderTask.training_flops`:
the encoder's matmuls for its own configuration, x3 for forward + backward, over real tokens only, plus the heads
and, when distilling, the teacher's forward pass). Work on padding is not counted, so padding lowers MFU.

The peak is `peak_flops` when given (e.g. a datasheet figure), else measured on the spot: the fastest of a few
square matmuls on the training device, in the dtype the training precision runs its matmuls in (bfloat16 for
`bf16-mixed`, float16 for `16-mixed`, float32 otherwise). A measured peak is what the device really reaches on a
large matmul, so the MFU it gives is higher than against a datasheet peak, and it moves with the machine's load.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch

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


def measure_matmul_peak(device: torch.device, dtype: torch.dtype, size: int | None = None, repeats: int = 3) -> float:
    """FLOP/s of the fastest of `repeats` (size x size) @ (size x size) matmuls after one warm-up; `size` defaults
    to 8192 on GPUs and 2048 elsewhere (about 0.2 s per float32 matmul on one core of this project's CPU), less on
    a CPU where that dtype is slow (`cpu_peak_size`, whose probe runs on the CPU)."""
    size = size or (8192 if device.type == "cuda" else cpu_peak_size(dtype) if device.type == "cpu" else 2048)
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    return 2 * size**3 / fastest_matmul_seconds(a, b, repeats)


def cpu_peak_size(dtype: torch.dtype, seconds_at_most: float = 2.0) -> int:
    """2048, unless one 2048 matmul in `dtype` would take over `seconds_at_most` on this CPU, judged from a 512 one
    (64x fewer FLOPs): then the size whose matmul takes about a quarter of that, a multiple of 64, at least 256. bf16 on
    a CPU without bf16 units is emulated: on an AVX2-only EPYC the 22 bf16 2048 matmuls of `bench/glue.py`'s peak ran
    on one core for over 13 minutes before its first run, where a 512 one takes under half a second."""
    probe = torch.randn(512, 512).to(dtype)
    seconds = fastest_matmul_seconds(probe, probe, 1)
    if 64 * seconds <= seconds_at_most:
        return 2048
    return max(256, int(512 * (seconds_at_most / 4 / seconds) ** (1 / 3)) // 64 * 64)


def fastest_matmul_seconds(a: torch.Tensor, b: torch.Tensor, repeats: int) -> float:
    """Seconds of the fastest of `repeats` `a @ b` (batched when 3-d) after one warm-up, synchronised on a GPU."""

    def sync() -> None:
        if a.device.type == "cuda":
            torch.cuda.synchronize(a.device)

    torch.matmul(a, b)
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        sync()
        best = min(best, time.perf_counter() - start)
    return best


class Throughput(L.Callback):
    """Logs `train/tokens_per_sec` and `train/mfu` (progress bar and logger) every `log_every_n_steps` optimizer
    steps, and `train/tflops` (achieved) to the logger, averaged over the batches since the last log and timed
    wall-clock (data loading and the optimizer included; validation excluded).

    Figures are per device: under DDP each rank times its own batches and rank 0's are logged; the job's rate is
    the world size times that. `peak_flops` is one device's peak in FLOP/s; None measures it at the start of fit.
    """

    def __init__(self, peak_flops: float | None = None, log_every_n_steps: int | None = None) -> None:
        super().__init__()
        if peak_flops is not None and peak_flops <= 0:
            raise ValueError(f"Throughput(peak_flops={peak_flops}): give the device's peak in FLOP/s (> 0) or None "
                             f"to measure it.")
        self.peak_flops = peak_flops
        self.log_every_n_steps = log_every_n_steps
        self._logged_step = -1
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
            dtype = matmul_dtype(trainer.precision)
            self.peak_flops = measure_matmul_peak(pl_module.device, dtype)
            pl_module.print(f"Throughput: measured matmul peak {self.peak_flops / 1e12:.3f} TFLOP/s "
                            f"({str(dtype).removeprefix('torch.')}, {pl_module.device}); MFU is against it.")

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._reset()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._reset()  # the next window starts at the next training batch: validation time is not training time

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self._started is None:
            self._synchronize(pl_module)
            self._started = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._batches.append(batch)
        every = self.log_every_n_steps or trainer.log_every_n_steps
        step = trainer.global_step  # already advanced when this batch ended an optimizer step
        if step != self._logged_step and step % max(1, every) == 0:
            self._logged_step = step
            self._synchronize(pl_module)
            elapsed = max(time.perf_counter() - self._started, 1e-9)
            tokens = sum(sum(sequence_lengths(b)) for b in self._batches)
            achieved = sum(pl_module.training_flops(b) for b in self._batches) / elapsed
            pl_module.log("train/tokens_per_sec", tokens / elapsed, prog_bar=True)
            pl_module.log("train/mfu", achieved / self.peak_flops, prog_bar=True)
            pl_module.log("train/tflops", achieved / 1e12)
            self._reset()
            self._started = time.perf_counter()

    @staticmethod
    def _synchronize(pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
