"""The training precision a run gets when its configuration leaves `trainer.precision` unset.

bf16 mixed precision is the fast choice only where the hardware multiplies bf16 natively: GPUs with bf16 tensor
cores (Ampere and later), and CPUs with AMX or AVX-512 BF16. Elsewhere it is slower, not faster: on an AVX2-only
AMD EPYC, torch 2.13 multiplied 1024 x 1024 bf16 matrices at 0.9 GFLOP/s against 113 GFLOP/s in fp32 (two
threads), so a bf16-mixed run there takes about a hundred times as long. So the shipped configs leave the precision
unset and the run picks it per machine (`choose_precision`); a precision the user sets is used as given, with
a warning where the hardware lacks it.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

BF16 = ("bf16-mixed", "bf16-true", "bf16")
FP16_MIXED = ("16-mixed", "16")


def accelerator_type(accelerator: Any) -> str:
    """`cpu`, `cuda`, `mps` or another name for a Trainer `accelerator` setting (`auto` resolved as Lightning
    does: a GPU when one is visible)."""
    name = accelerator if isinstance(accelerator, str) else type(accelerator).__name__
    name = str(name).lower().removesuffix("accelerator")
    if name in ("auto", "gpu"):
        if torch.cuda.is_available():
            return "cuda"
        if name == "auto" and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu" if name == "auto" else "cuda"
    return name


def native_bf16(device_type: str) -> bool:
    """Whether `device_type` multiplies bf16 matrices in hardware."""
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    if device_type == "cpu":
        capabilities = torch.cpu.get_capabilities()
        return bool(capabilities.get("amx_bf16") or capabilities.get("avx512_bf16") or capabilities.get("bf16")
                    or capabilities.get("sve_bf16"))
    return False


def default_precision(device_type: str) -> tuple[str, str]:
    """(precision, reason) for a run on `device_type` whose configuration sets none."""
    if native_bf16(device_type):
        return "bf16-mixed", f"this {device_type.upper()} multiplies bf16 natively"
    if device_type == "cuda":
        return "16-mixed", "this GPU has no bf16 tensor cores"
    return "32-true", f"this {device_type.upper()} has no native bf16 matrix units, so bf16 would run slower than fp32"


def bf16_warning(precision: Any, device_type: str) -> str | None:
    """A warning when a bf16 precision is set for hardware that emulates bf16, else None."""
    if str(precision) not in BF16 or native_bf16(device_type):
        return None
    return (f"trainer.precision={precision} on a {device_type.upper()} without native bf16 matrix units: bf16 "
            f"matmuls are emulated there and can run many times slower than fp32 (measured 100x on an AVX2 CPU). "
            f"Leave trainer.precision unset to let litbert choose, or set 32-true.")


def choose_precision(trainer: Any) -> None:
    """An unset `trainer.precision` (of the parsed config) becomes the machine's fast one, said in one line; a bf16
    precision set for hardware without bf16 units is kept, with a warning; fp16 mixed precision on the CPU, which
    Lightning would replace with bf16, is refused."""
    device_type = accelerator_type(trainer.accelerator)
    if device_type == "cpu" and str(trainer.precision) in FP16_MIXED:
        # Lightning would run bf16-mixed instead, with a warning: another precision than the one set (and on a CPU
        # without bf16 units, one many times slower than fp32).
        raise ValueError(f"trainer.precision={trainer.precision} on the CPU: torch has no fp16 mixed precision "
                         f"there. Set 32-true, bf16-mixed (fast where the CPU multiplies bf16 natively), or leave "
                         f"trainer.precision unset to let litbert choose.")
    if trainer.precision is None:
        trainer.precision, reason = default_precision(device_type)
        rank_zero_info(f"litbert: trainer.precision={trainer.precision}: {reason}. Set trainer.precision to choose "
                       f"another.")
    elif warning := bf16_warning(trainer.precision, device_type):
        rank_zero_warn(warning)
