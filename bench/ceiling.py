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

import torch
from common import ReadmeJob, print_table, readme_job, setup_run

from encoders.layers import activation_spec
from tasks.base import EncoderSpec
from tasks.throughput import fastest_matmul_seconds, measure_matmul_peak


def shapes(job: ReadmeJob) -> list[tuple[str, tuple[int, ...], tuple[int, ...], int]]:
    """(name, a's shape, b's shape, times per forward pass) of the encoder's and MLM head's matmuls."""
    config = EncoderSpec(**job.encoder).build()
    width, heads, layers = config.hidden_size, config.num_heads, config.num_layers
    feed_forward, branches = config.intermediate_size, 2 if activation_spec(config.activation).gated else 1
    batch, length, tokens = job.batch_size, job.length, job.batch_size * job.length
    head_dim, masked = width // heads, int(tokens * job.masking_rate)
    return [
        ("q, k, v, out projections", (tokens, width), (width, width), 4 * layers),
        (f"feed-forward up ({branches} branch{'es' if branches > 1 else ''})", (tokens, width),
         (width, branches * feed_forward), layers),
        ("feed-forward down", (tokens, feed_forward), (feed_forward, width), layers),
        ("attention scores", (batch * heads, length, head_dim), (batch * heads, head_dim, length), layers),
        ("attention x values", (batch * heads, length, length), (batch * heads, length, head_dim), layers),
        ("MLM transform (masked)", (masked, width), (width, width), 1),
        ("MLM decoder (masked)", (masked, width), (width, job.vocab_size), 1),
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
    job = readme_job()
    for name, a_shape, b_shape, count in shapes(job):
        a, b = torch.randn(a_shape), torch.randn(b_shape)
        seconds = fastest_matmul_seconds(a, b, args.repeats)
        flops = 2 * a.numel() * b_shape[-1]
        total_flops, total_seconds = total_flops + count * flops, total_seconds + count * seconds
        rows.append([name, " x ".join(map(str, a_shape)) + " @ " + " x ".join(map(str, b_shape)), count,
                     f"{flops / seconds / 1e9:.1f}", f"{flops / seconds / peak:.2f}"])
    print_table(["matmul", "shape", "per forward", "GFLOP/s", "of peak"], rows)
    rate = total_flops / total_seconds
    print(f"\nsquare 2048 fp32 peak: {peak / 1e9:.1f} GFLOP/s; the model's matmuls together: {rate / 1e9:.1f} "
          f"GFLOP/s = {rate / peak:.2f} of the peak; their forward pass alone: {total_seconds * 1e3:.1f} ms, so "
          f"forward + backward (3x) at best {3 * total_seconds * 1e3:.0f} ms per step = "
          f"{job.batch_size * job.length / (3 * total_seconds):,.0f} tokens/s")
    if args.tokens_per_second and args.mfu:
        first = args.tokens_per_second[0]
        for tokens_per_second in args.tokens_per_second:
            mfu = args.mfu * tokens_per_second / first
            print(f"{tokens_per_second:,.0f} tokens/s: MFU {mfu:.3f} of the square peak, {mfu * peak / rate:.2f} of "
                  f"the model's matmul ceiling")


if __name__ == "__main__":
    main()
