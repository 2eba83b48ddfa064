"""How fast can the README job's encoder go on this CPU? The matmul rate at the model's own shapes, against the
square-matmul peak that `train/mfu` divides by.

Times, in fp32 on the CPU's torch threads, each matmul of one training step's forward pass of the README job's
encoder (`configs/quickstart.yaml`: 4 layers of 128, 2 heads, GeGLU 2 x 344, a 4,096-id vocabulary, batches of
32 x 128 tokens, 30% of them masked and projected onto the vocabulary), the fastest of `--repeats`, and reports
their FLOPs over their summed time: the best rate the model's matmuls reach when nothing else runs (no norms,
activations, softmax, optimizer or data loading, which a real step adds). The backward pass multiplies the same
shapes transposed, so its rate is taken as the forward's.

Prints the square peak, the shapes' rate, and what a given tokens/s (`--tokens-per-second`, with its MFU from
train.py's log, `--mfu`) would need.

    python bench/ceiling.py --tokens-per-second 16675 26874 --mfu 0.468
"""

from __future__ import annotations

import argparse
import time

import torch
from common import print_table, setup_run

from tasks.throughput import measure_matmul_peak

BATCH, LENGTH, WIDTH, HEADS, FEED_FORWARD, VOCAB, LAYERS, MASKED = 32, 128, 128, 2, 344, 4096, 4, 0.3


def best_seconds(a: torch.Tensor, b: torch.Tensor, repeats: int) -> float:
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - start)
    return best


def shapes() -> list[tuple[str, tuple[int, ...], tuple[int, ...], int]]:
    """(name, a's shape, b's shape, times per forward pass) of the encoder's and MLM head's matmuls."""
    tokens, head_dim = BATCH * LENGTH, WIDTH // HEADS
    masked = int(tokens * MASKED)
    return [
        ("q, k, v, out projections", (tokens, WIDTH), (WIDTH, WIDTH), 4 * LAYERS),
        ("GeGLU up (2 branches)", (tokens, WIDTH), (WIDTH, 2 * FEED_FORWARD), LAYERS),
        ("GeGLU down", (tokens, FEED_FORWARD), (FEED_FORWARD, WIDTH), LAYERS),
        ("attention scores", (BATCH * HEADS, LENGTH, head_dim), (BATCH * HEADS, head_dim, LENGTH), LAYERS),
        ("attention x values", (BATCH * HEADS, LENGTH, LENGTH), (BATCH * HEADS, LENGTH, head_dim), LAYERS),
        ("MLM transform (masked)", (masked, WIDTH), (WIDTH, WIDTH), 1),
        ("MLM decoder (masked)", (masked, WIDTH), (WIDTH, VOCAB), 1),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--tokens-per-second", type=float, nargs="*", default=[],
                        help="training rates to place against the ceiling")
    parser.add_argument("--mfu", type=float, help="train/mfu logged at the first --tokens-per-second")
    args = parser.parse_args()
    setup_run(args.threads)
    torch.manual_seed(0)
    peak = measure_matmul_peak(torch.device("cpu"), torch.float32, repeats=args.repeats)
    rows, total_flops, total_seconds = [], 0.0, 0.0
    for name, a_shape, b_shape, count in shapes():
        a, b = torch.randn(a_shape), torch.randn(b_shape)
        seconds = best_seconds(a, b, args.repeats)
        flops = 2 * a.numel() * b_shape[-1]
        total_flops, total_seconds = total_flops + count * flops, total_seconds + count * seconds
        rows.append([name, " x ".join(map(str, a_shape)) + " @ " + " x ".join(map(str, b_shape)), count,
                     f"{flops / seconds / 1e9:.1f}", f"{flops / seconds / peak:.2f}"])
    print_table(["matmul", "shape", "per forward", "GFLOP/s", "of peak"], rows)
    rate = total_flops / total_seconds
    print(f"\nsquare 2048 fp32 peak: {peak / 1e9:.1f} GFLOP/s; the model's matmuls together: {rate / 1e9:.1f} "
          f"GFLOP/s = {rate / peak:.2f} of the peak; their forward pass alone: {total_seconds * 1e3:.1f} ms, so "
          f"forward + backward (3x) at best {3 * total_seconds * 1e3:.0f} ms per step = "
          f"{BATCH * LENGTH / (3 * total_seconds):,.0f} tokens/s")
    if args.tokens_per_second and args.mfu:
        first = args.tokens_per_second[0]
        for tokens_per_second in args.tokens_per_second:
            mfu = args.mfu * tokens_per_second / first
            print(f"{tokens_per_second:,.0f} tokens/s: MFU {mfu:.3f} of the square peak, {mfu * peak / rate:.2f} of "
                  f"the model's matmul ceiling")


if __name__ == "__main__":
    main()
