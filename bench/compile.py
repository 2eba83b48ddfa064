"""Does `torch.compile` pay? litbert eager against litbert with its encoder compiled (`tasks.compile.CompileEncoder`
does the same in training), in one process, alternating, after the compilation is done.

- train: `MaskedLM` steps (forward, loss, backward, fused AdamW) on one batch of random ids of `--seq` tokens
  (`--tokens` per batch): `--model bert-mini` (30,522 ids, 15% masked, dropout 0.1) or `--model quickstart`, the
  README job's encoder from `configs/quickstart.yaml` (4 x 128, pre-norm, RoPE, RMSNorm, GeGLU, no biases, no
  dropout, 4,096 ids, 30% masked).
- inference: a MiniLM-L6-sized encoder (6 x 384, 12 heads) in eval mode under `torch.inference_mode()`,
  `--tokens` per batch at `--seq`.

Both start from the same weights. The compile column is the wall time of the first compiled call (tracing and
code generation). The last line is `ratio: <eager / compiled time>` of the headline case (above 1: compiling pays).

    python bench/compile.py --precision fp32 bf16-mixed --threads 1
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from common import PRECISIONS, alternate, autocast, device_name, print_table, readme_job, setup_run, synchronize

from encoders import Encoder, EncoderConfig
from tasks.base import EncoderSpec
from tasks.mlm import MaskedLM


def training_case(args: argparse.Namespace, device: torch.device):
    if args.model == "quickstart":
        job = readme_job()
        spec, vocab_size, rate = EncoderSpec(**job.encoder), job.vocab_size, job.masking_rate
    else:
        spec, vocab_size, rate = EncoderSpec(preset="bert-mini"), 30522, 0.15
    model = MaskedLM(encoder=spec, vocab_size=vocab_size).to(device).train()
    batch_size = args.tokens // args.seq
    ids = torch.randint(5, vocab_size, (batch_size, args.seq), device=device)
    labels = torch.where(torch.rand(ids.shape, device=device) < rate, ids, -100)
    batch = {"input_ids": ids, "labels": labels}
    models = {"eager": model, "compiled": copy.deepcopy(model)}
    models["compiled"].encoder.compile()
    optimizers = {name: torch.optim.AdamW(m.parameters(), fused=True) for name, m in models.items()}

    def step(name: str, precision: str) -> None:
        with autocast(precision, device):
            loss = models[name](batch)[0]
        loss.backward()
        optimizers[name].step()
        optimizers[name].zero_grad()

    return step


def inference_case(args: argparse.Namespace, device: torch.device):
    config = EncoderConfig.from_name("bert-base", num_layers=6, hidden_size=384, num_heads=12,
                                     intermediate_size=1536)
    model = Encoder(config).to(device).eval()
    ids = torch.randint(1000, 30000, (args.tokens // args.seq, args.seq), device=device)
    mask = torch.ones_like(ids)
    models = {"eager": model, "compiled": copy.deepcopy(model)}
    models["compiled"].compile()

    def step(name: str, precision: str) -> None:
        with torch.inference_mode(), autocast(precision, device):
            models[name](ids, mask)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=("train", "inference"), default=["train", "inference"])
    parser.add_argument("--precision", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--model", choices=("bert-mini", "quickstart"), default="bert-mini",
                        help="the training case's encoder")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--headline", default="train,bf16-mixed")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    setup_run(args.threads)
    device = torch.device(args.device)
    print(f"device: {device_name(device)}; torch {torch.__version__}")
    torch.manual_seed(0)
    builders = {"train": training_case, "inference": inference_case}
    rows, ratios = [], {}
    for case in args.cases:
        for precision in args.precision:
            step = builders[case](args, device)

            def timed(name: str, step=step, precision=precision) -> float:
                synchronize(device)
                start = time.perf_counter()
                step(name, precision)
                step(name, precision)
                synchronize(device)
                return (time.perf_counter() - start) / 2

            start = time.perf_counter()
            step("compiled", precision)
            compile_seconds = time.perf_counter() - start
            step("eager", precision)
            timings = alternate({name: (lambda name=name: timed(name)) for name in ("eager", "compiled")},
                                args.repeats)
            eager, compiled = timings.median("eager"), timings.median("compiled")
            ratios[f"{case},{precision}"] = eager / compiled
            rows.append([case, precision, f"{args.tokens // args.seq} x {args.seq}", f"{compile_seconds:.1f}",
                         f"{eager * 1e3:,.0f}", f"{compiled * 1e3:,.0f}", f"{eager / compiled:.2f}x"])
            print(f"{case},{precision}: eager {eager:.3f} s, compiled {compiled:.3f} s", flush=True)
    print()
    print_table(["case", "precision", "batch", "compile s", "eager ms", "compiled ms", "speed-up"], rows)
    print(f"headline: {args.headline}")
    print(f"ratio: {ratios[args.headline]:.2f}")


if __name__ == "__main__":
    main()
