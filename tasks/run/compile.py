"""`torch.compile` of the encoder, as an option: `--trainer.callbacks+=tasks.run.compile.CompileEncoder`, and CUDA
graphs with `--trainer.callbacks.mode reduce-overhead`.

What is compiled is the encoder (and a distillation teacher), not the task's whole step. The encoder holds most of
a step's kernels (every layer's projections, attention, norms and activations, forward and backward), and its inputs
have the batch's shape, which the data pads to a few buckets (`data.pad_to_multiple_of`, 64 on CUDA): one static
graph per bucket, each of which CUDA graphs can replay. A region that also held the MLM head would take the batch's
masked positions, whose number changes with every batch (a new graph, or a dynamic one that CUDA graphs record again
for every count); the classifier heads and losses left out are a few small kernels, and Lightning's logging and the
optimizer (one fused kernel) stay as they are.

Shapes: `dynamic=False` (the default) compiles one graph per batch shape (a bucket's length at the training batch
size, at the last batch's, at the evaluation batch size): never recompiled, each kernel specialised to its shape, as
CUDA graphs need. A run whose data pads each batch to its own longest sequence (`pad_to_multiple_of` 1, the default
off CUDA) would compile one graph per length, so it is refused with the way on. `dynamic=None` is torch's automatic
dynamic shapes (the second shape of a dimension recompiles it as dynamic) and `True` starts dynamic.
`fullgraph=True` (the default) makes anything that would split the encoder's graph (a host sync, an unsupported
call) an error naming it, rather than a silent fall back to Python between pieces.

CUDA graphs (`mode="reduce-overhead"`, or `max-autotune`): the graphs' outputs live in memory the next replay writes
over, so each training, validation, test or prediction batch starts a new generation of them
(`torch.compiler.cudagraph_mark_step_begin`): within a batch a teacher's outputs stay valid while the student runs.
Gradient accumulation would keep one batch's gradients, graph outputs, into the next, so it is refused with them.
Nothing in the encoder reads a value back to the host or makes a tensor on the CPU (fullgraph refuses the one, every
tensor is made on the input's device). Off by default: not yet measured on a GPU (`bench.compiled`, docs/speed.md).

On CPU compiling does not pay for training (BENCHMARKS.md: a bert-mini step 0.54x in bf16, 0.81x in fp32): the eager
step has litbert's CPU paths (16-bit dropout masks, the unpadded path), which a compiled graph gives up for
inductor's own kernels. The compiled module keeps its parameter names, so checkpoints and exports are unchanged.
"""

from __future__ import annotations

import math
from typing import Literal

import lightning as L
import torch

from encoders.choices import check_choice

Mode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
# The batch shapes a length may come in: a full and a last batch of training, validation, test and prediction (a
# second validation set adds its own last batch); each a graph of its own when shapes are static.
SHAPES_PER_LENGTH = 8


def bucket_count(datamodule: object) -> tuple[int, int] | None:
    """(sequence lengths a batch of the run can have, the length multiple they are padded to), read off a litbert
    datamodule's collator (`TokenizedDataModule.padding`); None for data that does not say (plain loaders)."""
    padding = getattr(datamodule, "padding", None)
    if padding is None:
        return None
    collator = padding()
    if collator.max_length is None:
        return None
    return math.ceil(collator.max_length / collator.pad_to_multiple_of), collator.pad_to_multiple_of


class CompileEncoder(L.Callback):
    """Compiles `pl_module.encoder` in place (`nn.Module.compile`) when fitting, validating, testing or predicting
    starts. A distillation teacher (`pl_module.teacher`, inference only) is compiled too.

    Args:
        backend: torch.compile's backend (`inductor`; `aot_eager` traces and runs the graphs without generating code).
        mode: inductor's mode: None or `default`; `reduce-overhead` replays CUDA graphs; `max-autotune` tunes
            kernels and replays CUDA graphs.
        dynamic: False: one static graph per batch shape (the data's buckets); None: torch's automatic dynamic
            shapes; True: dynamic from the start.
        fullgraph: an error, instead of a fall back to Python, wherever the encoder's graph would break.
    """

    def __init__(self, backend: str = "inductor", mode: Mode | None = None, dynamic: bool | None = False,
                 fullgraph: bool = True) -> None:
        super().__init__()
        if mode is not None:
            check_choice("CompileEncoder.mode", mode, Mode)
        self.options = {"backend": backend, "mode": mode, "dynamic": dynamic, "fullgraph": fullgraph}
        self.cuda_graphs = mode in ("reduce-overhead", "max-autotune")
        self._compiled: set[int] = set()

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not hasattr(pl_module, "encoder"):
            raise TypeError(f"CompileEncoder compiles `encoder`; {type(pl_module).__name__} has none.")
        if self.cuda_graphs and trainer.accumulate_grad_batches > 1:
            raise ValueError(
                f"CompileEncoder(mode={self.options['mode']!r}) replays CUDA graphs, whose outputs the next batch "
                f"overwrites, but --trainer.accumulate_grad_batches={trainer.accumulate_grad_batches} keeps gradients "
                f"across batches. Use mode default (compiled, without CUDA graphs) or accumulate_grad_batches 1.")
        modules = [module for module in (pl_module.encoder, getattr(pl_module, "teacher", None))
                   if module is not None and id(module) not in self._compiled]
        buckets = bucket_count(trainer.datamodule)
        if modules and buckets is not None and self.options["dynamic"] is False:
            lengths, multiple = buckets
            if multiple == 1:
                raise ValueError(
                    f"CompileEncoder(dynamic=False) compiles one graph per batch shape, but the data pads each batch "
                    f"to its own longest sequence (data.pad_to_multiple_of 1, the default off CUDA): up to {lengths} "
                    f"lengths, each compiled. Set --data.pad_to_multiple_of 64 (CUDA's default), or "
                    f"--trainer.callbacks.dynamic null for torch's automatic dynamic shapes.")
            # torch counts the graphs of one code object, here `Encoder.forward` for the student and the teacher
            # together; past the limit fullgraph raises (and without it torch would fall back to eager).
            graphs = SHAPES_PER_LENGTH * lengths * len(modules)
            config = torch._dynamo.config
            config.recompile_limit = max(config.recompile_limit, graphs)
            config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, graphs)
        for module in modules:
            module.compile(**self.options)
            self._compiled.add(id(module))

    def _new_generation(self) -> None:
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        self._new_generation()

    def on_validation_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        self._new_generation()

    def on_test_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        self._new_generation()

    def on_predict_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int,
                               dataloader_idx: int = 0) -> None:
        self._new_generation()
