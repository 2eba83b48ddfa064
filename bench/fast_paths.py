"""The CPU fast paths one at a time, against the library call each replaces, at bert-mini training shapes.

- dropout: `encoders.layers.dropout` (16-bit integer draws) against `F.dropout` (`bernoulli_`), forward + backward,
  on hidden states (B*T, C) and on attention probabilities (B, H, T, T).
- attention with dropout: the explicit path (`Attention` when training on CPU with attention dropout) against
  `F.scaled_dot_product_attention(dropout_p=...)`, forward + backward.
- vocabulary cross-entropy: `tasks.mlm.vocab_cross_entropy` against `F.cross_entropy(logits.float())` on the
  masked tokens' logits (15% of the batch x 30,522), forward + backward.
- the MLM decoder bias added inside the matmul against added afterwards, forward + backward.

Each pair runs alternately in one process after a warm-up; the table shows the medians.

    python bench/fast_paths.py --threads 1
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from common import alternate, device_name, print_table

from encoders.kernels import dropout
from tasks.mlm import vocab_cross_entropy


def timed(fn, repeats: int = 5):
    def run() -> float:
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - start) / repeats

    return run


def explicit_attention(q, k, v, p):
    probs = ((q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)).softmax(dim=-1)
    return dropout(probs, p) @ v


def cases(batch: int, seq: int, dtype: torch.dtype):
    heads, width, vocab = 4, 256, 30522
    hidden = torch.randn(batch * seq, width, dtype=dtype, requires_grad=True)
    probs = torch.randn(batch, heads, seq, seq, dtype=dtype).softmax(-1).requires_grad_()
    q, k, v = (torch.randn(batch, heads, seq, width // heads, dtype=dtype, requires_grad=True) for _ in range(3))
    masked = int(0.15 * batch * seq)
    logits = (torch.randn(masked, vocab) * 3).to(dtype).requires_grad_()
    targets = torch.randint(0, vocab, (masked,))
    features = torch.randn(masked, width, dtype=dtype, requires_grad=True)
    weight = (torch.randn(vocab, width) * 0.02).to(dtype).requires_grad_()
    bias = torch.zeros(vocab, requires_grad=True)  # float32, as the head's parameter under autocast

    def backward(out):
        out.backward(torch.ones_like(out)) if out.ndim else out.backward()

    return {
        "dropout, hidden (B*T, C)": (lambda: backward(dropout(hidden, 0.1)),
                                     lambda: backward(F.dropout(hidden, 0.1, True))),
        "dropout, attention (B, H, T, T)": (lambda: backward(dropout(probs, 0.1)),
                                            lambda: backward(F.dropout(probs, 0.1, True))),
        "attention with dropout": (lambda: backward(explicit_attention(q, k, v, 0.1)),
                                   lambda: backward(F.scaled_dot_product_attention(q, k, v, dropout_p=0.1))),
        "vocabulary cross-entropy": (lambda: backward(vocab_cross_entropy(logits, targets)),
                                     lambda: backward(F.cross_entropy(logits.float(), targets))),
        "decoder bias": (lambda: backward(F.linear(features, weight, bias.to(dtype))),
                         lambda: backward(F.linear(features, weight) + bias)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["32x128", "8x512"], help="batch x sequence length")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"device: {device_name(torch.device('cpu'))}; torch {torch.__version__}")
    torch.manual_seed(0)
    rows = []
    for shape in args.shapes:
        batch, seq = (int(n) for n in shape.split("x"))
        for dtype in (torch.float32, torch.bfloat16):
            for name, (ours, library) in cases(batch, seq, dtype).items():
                ours(), library()  # warm-up
                timings = alternate({"litbert": timed(ours), "library": timed(library)}, args.repeats)
                a, b = timings.median("litbert"), timings.median("library")
                rows.append([name, shape, str(dtype).removeprefix("torch."), f"{b * 1e3:.1f}", f"{a * 1e3:.1f}",
                             f"{b / a:.2f}x"])
                print(f"{name}, {shape}, {dtype}: library {b * 1e3:.1f} ms, litbert {a * 1e3:.1f} ms", flush=True)
    print()
    print_table(["path", "batch", "dtype", "library ms", "litbert ms", "speed-up"], rows)


if __name__ == "__main__":
    main()
