"""`torch.compile` of the encoder, as an option: `--trainer.callbacks+=tasks.run.compile.CompileEncoder`.

Off by default because on this project's CPU it does not pay for training (bench/compile.py, BENCHMARKS.md): the
eager step uses litbert's CPU fast paths (16-bit dropout masks, explicit attention with them, the unpadded path),
which a compiled graph gives up for inductor's own kernels. For fixed-shape inference on CPU it measured
0.97-1.26x across runs. GPUs, where small kernels are launch-bound, are where it is expected to pay (not measured
here: no GPU was available).

Shapes: the first new sequence length or batch size recompiles once and marks that dimension dynamic
(`dynamic=None`, torch's automatic dynamic shapes), so length-grouped fine-tuning batches do not compile a graph
per length; `dynamic=True` starts dynamic, `False` specialises on every shape. The compiled module keeps its
parameter names, so checkpoints and exports are unchanged.
"""

from __future__ import annotations

from typing import Literal

import lightning as L


class CompileEncoder(L.Callback):
    """Compiles `pl_module.encoder` in place (`nn.Module.compile`) when fitting, validating, testing or predicting
    starts. A distillation teacher (`pl_module.teacher`, inference only) is compiled too."""

    def __init__(self, backend: str = "inductor", mode: Literal["default", "reduce-overhead", "max-autotune"] | None
                 = None, dynamic: bool | None = None, fullgraph: bool = False) -> None:
        super().__init__()
        self.options = {"backend": backend, "mode": mode, "dynamic": dynamic, "fullgraph": fullgraph}
        self._compiled: set[int] = set()

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not hasattr(pl_module, "encoder"):
            raise TypeError(f"CompileEncoder compiles `encoder`; {type(pl_module).__name__} has none.")
        for name in ("encoder", "teacher"):
            module = getattr(pl_module, name, None)
            if module is not None and id(module) not in self._compiled:
                module.compile(**self.options)
                self._compiled.add(id(module))
