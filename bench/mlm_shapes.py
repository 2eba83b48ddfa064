"""Masked-LM step time of litbert encoder shapes on this machine: which model takes how many steps in a budget.

One process, one shape at a time: forward, loss, backward and a fused AdamW step of `MaskedLM` on one random
batch (with `--inference`, the encoder's forward pass in eval mode), the median of `--repeats` steps after 3 warm-up
steps. A shape is a comma-separated list of `EncoderSpec`
overrides (`preset=bert-tiny,num_layers=4,position=rope`) plus `vocab=`, `rate=` (masked fraction), `batch=` and
`length=`.

    python bench/mlm_shapes.py "preset=bert-mini" "preset=bert-mini,hidden_dropout=0,attention_dropout=0" \\
        "preset=bert-tiny,num_layers=4" "preset=bert-tiny,num_layers=4,vocab=8192,rate=0.3"
    python bench/mlm_shapes.py --device cuda --precision bf16-mixed \
        "preset=bert-base,length=512,position=alibi,attention_dropout=0,flex_attention=false" \
        "preset=bert-base,length=512,position=alibi,attention_dropout=0,flex_attention=true"
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import yaml
from common import PRECISIONS, autocast, device_name, synchronize

from tasks.base import EncoderSpec
from tasks.mlm import MaskedLM


def step_time(batch: int = 32, length: int = 128, vocab: int = 16384, rate: float = 0.15, repeats: int = 10,
              device: str = "cpu", precision: str = "fp32", inference: bool = False, **encoder) -> float:
    torch.manual_seed(0)
    model = MaskedLM(EncoderSpec(**{"preset": "bert-mini", **encoder}), vocab_size=vocab).to(device)
    if inference:
        return encode_time(model.encoder.eval(), batch, length, vocab, repeats, device, precision)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    ids = torch.randint(5, vocab, (batch, length), device=device)
    data = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "labels": torch.where(torch.rand(batch, length, device=device) < rate, ids, -100)}
    times = []
    for i in range(3 + repeats):
        synchronize(torch.device(device))
        start = time.perf_counter()
        with autocast(precision, torch.device(device)):
            loss = model(data)[0]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        synchronize(torch.device(device))
        if i >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


@torch.inference_mode()
def encode_time(encoder, batch: int, length: int, vocab: int, repeats: int, device: str, precision: str) -> float:
    """The encoder's forward pass alone, in eval mode."""
    ids = torch.randint(5, vocab, (batch, length), device=device)
    times = []
    for i in range(3 + repeats):
        synchronize(torch.device(device))
        start = time.perf_counter()
        with autocast(precision, torch.device(device)):
            encoder(ids, torch.ones_like(ids))
        synchronize(torch.device(device))
        if i >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="+")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32")
    parser.add_argument("--inference", action="store_true", help="time the encoder's forward pass in eval mode")
    args = parser.parse_args()
    mode = "inference" if args.inference else "training"
    print(f"{device_name(torch.device(args.device))}, {args.precision}, {mode}")
    print("| shape | ms/step | tokens/s |\n|---|---|---|")
    for shape in args.shapes:
        settings = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in shape.split(",") if item)}
        seconds = step_time(repeats=args.repeats, device=args.device, precision=args.precision,
                            inference=args.inference, **settings)
        tokens = settings.get("batch", 32) * settings.get("length", 128)
        print(f"| {shape} | {seconds * 1000:.0f} | {tokens / seconds:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
