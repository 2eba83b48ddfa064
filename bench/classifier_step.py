"""A sequence classifier's training step with the last layer computing the first token only (what BERT's pooler
reads; `Encoder.forward(first_token_only=True)`, the default of `SequenceClassification` with "cls" pooling) against
the same step computing every token.

One process, the same weights and batches on both sides: a MiniLM-L6-shaped encoder (6 x 384, 12 heads, 1,536
inner, 30,522 ids; `--layers` and `--hidden` change its depth and width) with BERT's pooler and a 2-way classifier,
batches of `--batch` random ids whose lengths are drawn once from 8 to `--max-length` tokens (right-padded:
SST-2/GLUE-like, so the unpadded path runs as in fine-tuning). A step is forward, cross-entropy, backward and a fused
AdamW step. The two sides alternate, `--repeats` times `--steps` steps each after a warm-up; medians are shown.
Before timing, both sides' logits on one batch must agree.

    python bench/classifier_step.py --threads 2
    python bench/classifier_step.py --device cuda --precision bf16-mixed --batch 256
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import PRECISIONS, alternate, autocast, device_name, print_table, synchronize

from tasks.base import EncoderSpec
from tasks.classification import SequenceClassification


class EveryToken(SequenceClassification):
    """The same task with the last layer computing every token."""

    @property
    def first_token_only(self) -> bool:
        return False


def batches(count: int, batch: int, max_length: int, device: torch.device, seed: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        lengths = torch.randint(8, max_length + 1, (batch,), generator=generator)
        width = int(lengths.max())
        mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
        ids = torch.randint(1000, 30000, (batch, width), generator=generator) * mask
        labels = torch.randint(0, 2, (batch,), generator=generator)
        out.append({k: v.to(device) for k, v in
                    {"input_ids": ids, "attention_mask": mask, "labels": labels}.items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=384, help="hidden size (heads of 32 channels, 4x inner)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    spec = EncoderSpec(preset="bert-base", num_layers=args.layers, hidden_size=args.hidden,
                       num_heads=args.hidden // 32, intermediate_size=4 * args.hidden)
    models = {}
    for name, cls in (("first token only", SequenceClassification), ("every token", EveryToken)):
        torch.manual_seed(0)
        models[name] = cls(num_labels=2, encoder=spec, vocab_size=30522).to(device).train()
    data = batches(args.steps, args.batch, args.max_length, device, seed=1)
    with torch.no_grad():
        a, b = (model.eval()(data[0]) for model in models.values())
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    optimizers = {name: torch.optim.AdamW(model.train().parameters(), lr=2e-5, fused=True)
                  for name, model in models.items()}

    def run(name: str) -> float:
        model, optimizer = models[name], optimizers[name]
        synchronize(device)
        start = time.perf_counter()
        for batch in data:
            with autocast(args.precision, device):
                loss = model.loss(model(batch), batch["labels"])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        synchronize(device)
        return time.perf_counter() - start

    for name in models:  # warm-up
        run(name)
    timings = alternate({name: (lambda name=name: run(name)) for name in models}, args.repeats)
    tokens = sum(int(batch["attention_mask"].sum()) for batch in data)
    print(f"{device_name(device)}, {args.precision}; {args.layers} layers x {args.hidden}, batch {args.batch}, "
          f"lengths 8 to {args.max_length}, {args.steps} steps x {args.repeats} repeats (alternating)")
    seconds = {name: statistics.median(values) for name, values in timings.seconds.items()}
    rows = [[name, f"{1000 * s / args.steps:.1f}", f"{tokens / s:,.0f}", f"{seconds['every token'] / s:.2f}x"]
            for name, s in seconds.items()]
    print_table(["last layer", "ms/step", "real tokens/s", "speed-up"], rows)
    print(f"ratio: {seconds['every token'] / seconds['first token only']:.2f}")


if __name__ == "__main__":
    main()
