"""Host synchronisations per training step, counted through `train.py`.

A host synchronisation is an operation whose result the host must read back from the device before it can go on:
`.item()`, `bool()`, `int()` or `.tolist()` of a tensor, `nonzero`, boolean-mask indexing, `unique`, `equal`, and
on CUDA also a tensor made there from a Python number (`torch.tensor(0.5, device=...)`). On a GPU each one stalls
the host until the device has drained its queue, and a step that has any cannot be captured in a CUDA graph.

`HostSyncs` is a callback. It counts the operations of each training step, from the start of one batch to the start
of the next, and writes one record a step to a JSON file when training ends (each rank of a distributed run its own:
`HostSyncs.rank_output`):

- on CUDA through `torch.cuda.set_sync_debug_mode("warn")`, which warns at every synchronising CUDA call;
- elsewhere through a `TorchDispatchMode` that counts the operations above (`SYNCING`) on the tensors it sees,
  and a `TorchFunctionMode` that counts `.tolist()`, `.numpy()`, `.cpu()` and NumPy's conversions (`HOST_READS`),
  which read a tensor's values without an ATen operation on the CPU (on CUDA, a copy from the device that waits for
  it), and the tensors made from Python or NumPy values on a device (`HOST_WRITES` with a `device`: on CUDA a copy
  from pageable host memory, which waits for the device too, as `self.log` of a Python number makes one); both
  leave out the host work on host tensors: a DataLoader's collate function, and the ranks' agreement at a step
  boundary (`tasks.run.agreement`, over gloo on every device).

Each record has the step, whether Lightning logged at it (every `log_every_n_steps`), the count, and where each sync
came from (the innermost litbert, Lightning or torchmetrics frame).

    python train.py --config configs/glue/stsb.yaml --model.pretrained <MiniLM-L6> --trainer.max_steps 40 \\
        --trainer.callbacks+=bench.syncs.HostSyncs --trainer.callbacks.output syncs.json
    python -m bench.syncs syncs.json   # the summary: median and max per steady step, and the places
"""

from __future__ import annotations

import argparse
import json
import statistics
import traceback
import warnings
from collections import Counter
from pathlib import Path

import lightning as L
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
# The ATen operations that read a device tensor's value back to the host.
SYNCING = {
    aten._local_scalar_dense.default,  # .item(), bool(), int(), float() (not .tolist(): HOST_READS)
    aten.is_nonzero.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten.equal.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.repeat_interleave.Tensor,  # without output_size its size is data-dependent
}
# Reads of a tensor's values into Python, NumPy or host memory that reach no ATen operation on the CPU: the dispatch
# mode misses them there, while on CUDA each copies from the device and waits for it.
HOST_READS = {torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.__array__, torch.Tensor.cpu}
# Tensors made from host values; given a `device`, on CUDA a blocking copy from pageable memory (not on the CPU).
HOST_WRITES = {torch.tensor, torch.as_tensor}
_OWN = ("/encoders/", "/data/", "/tasks/", "/train.py", "/lightning/", "/torchmetrics/")


def _place(depth: int = 1) -> str:
    """The `depth` innermost frames of litbert, Lightning or torchmetrics on the stack: where a sync came from."""
    frames = [f"{frame.filename.split('/site-packages/')[-1]}:{frame.lineno} {frame.name}"
              for frame in reversed(traceback.extract_stack()[:-2])
              if any(part in frame.filename for part in _OWN) and "/bench/syncs.py" not in frame.filename]
    return " < ".join(frames[:depth]) or "elsewhere"


def _host_work() -> bool:
    """Inside a collate function or the ranks' agreement: host tensors by design, on CUDA as on the CPU."""
    return any(frame.name.startswith("collate") or "torch/utils/data" in frame.filename
               or frame.filename.endswith("tasks/run/agreement.py") for frame in traceback.extract_stack())


def _boolean_index(func, args) -> bool:
    return func is aten.index.Tensor and any(
        isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in (args[1] or []))


def _host_write(func, args, kwargs) -> bool:
    return (func in HOST_WRITES and kwargs.get("device") is not None and bool(args)
            and not isinstance(args[0], torch.Tensor))


class _DispatchCounter(TorchDispatchMode):
    def __init__(self, places: Counter, depth: int) -> None:
        super().__init__()
        self.places, self.depth = places, depth

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (func in SYNCING or _boolean_index(func, args)) and not _host_work():
            self.places[f"{func.__name__}: {_place(self.depth)}"] += 1
        return func(*args, **(kwargs or {}))


class _HostReadCounter(TorchFunctionMode):
    def __init__(self, places: Counter, depth: int) -> None:
        super().__init__()
        self.places, self.depth = places, depth

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (func in HOST_READS or _host_write(func, args, kwargs)) and not _host_work():
            self.places[f"{func.__name__}: {_place(self.depth)}"] += 1
        return func(*args, **kwargs)


class _CpuCounter:
    """Both CPU counters at once: the syncing ATen operations, and the host reads and writes that are none."""

    def __init__(self, places: Counter, depth: int) -> None:
        self._modes = (_DispatchCounter(places, depth), _HostReadCounter(places, depth))

    def __enter__(self) -> _CpuCounter:
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)


class _CudaCounter:
    """`set_sync_debug_mode("warn")` with a warnings hook that counts its warnings instead of printing them."""

    def __init__(self, places: Counter, depth: int) -> None:
        self.places, self.depth = places, depth

    def __enter__(self) -> _CudaCounter:
        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("always")
        self._show = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if "synchronizing" in str(message):
                self.places[f"cuda sync: {_place(self.depth)}"] += 1
            else:
                self._show(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc) -> None:
        torch.cuda.set_sync_debug_mode("default")
        warnings.showwarning = self._show
        self._catch.__exit__(*exc)


class HostSyncs(L.Callback):
    """Count the host synchronisations of every training step; write them to `output` when training ends. Each is
    placed by the `depth` innermost frames of litbert, Lightning or torchmetrics that led to it."""

    def __init__(self, output: str = "syncs.json", depth: int = 1) -> None:
        self.output = Path(output)
        self.depth = depth
        self.steps: list[dict] = []
        self._places: Counter | None = None
        self._counter = None

    def _close(self) -> None:
        if self._counter is not None:
            self._counter.__exit__(None, None, None)
            self.steps[-1]["syncs"] = sum(self._places.values())
            self.steps[-1]["places"] = dict(self._places)
            self._counter = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._close()
        loop = trainer.fit_loop.epoch_loop
        logs = (loop._batches_that_stepped + 1) % trainer.log_every_n_steps == 0
        self.steps.append({"step": trainer.global_step, "logs": logs})
        self._places = Counter()
        cuda = pl_module.device.type == "cuda"
        self._counter = (_CudaCounter if cuda else _CpuCounter)(self._places, self.depth)
        self._counter.__enter__()

    def on_train_end(self, trainer, pl_module) -> None:
        self._close()
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self.rank_output(trainer.global_rank).write_text(json.dumps(self.steps, indent=1) + "\n")

    def rank_output(self, rank: int) -> Path:
        """Where rank `rank` writes its records: `output` for rank 0, `<stem>.rank<N><suffix>` beside it for the
        others, whose steps may sync where rank 0's do not (a broadcast's receivers read its size)."""
        return self.output if rank == 0 else self.output.with_name(f"{self.output.stem}.rank{rank}{self.output.suffix}")

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._close()


def summary(steps: list[dict], first: int = 10, last: int = 30) -> dict:
    """Median and max syncs over the steady steps `first`..`last` that do not log, and where they came from."""
    complete = [s for s in steps if "syncs" in s]
    steady = [s for s in complete if first <= s["step"] <= last and not s["logs"]] or complete
    places: Counter = Counter()
    for step in steady:
        places.update(step["places"])
    return {"steps": [s["step"] for s in steady][:1] + [s["step"] for s in steady][-1:],
            "median": statistics.median(s["syncs"] for s in steady) if steady else None,
            "max": max((s["syncs"] for s in steady), default=None),
            "per_step": {place: count / len(steady) for place, count in places.most_common()} if steady else {}}


def main() -> None:
    parser = argparse.ArgumentParser(description="Summarise a HostSyncs file: syncs per steady training step.")
    parser.add_argument("file", type=Path)
    args = parser.parse_args()
    print(json.dumps(summary(json.loads(args.file.read_text())), indent=1))


if __name__ == "__main__":
    main()
