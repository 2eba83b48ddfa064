"""Masked-LM training steps: litbert against `transformers.BertForMaskedLM` (SDPA attention), side by side.

One process, one machine, the same model size, batch, precision and weights: litbert's `MaskedLM` task builds the
model, its weights are exported with `Encoder.save_pretrained(format="transformers")` and loaded into
`BertForMaskedLM`. The batch is wikitext-2 (validation) packed into full blocks with `data.pack_blocks` and masked
once by transformers' `DataCollatorForLanguageModeling`; both sides train on that very batch. Before timing, both
compute the loss of the batch with dropout off: it must agree (same weights, same batch).

A step is forward, loss, backward, `torch.optim.AdamW.step()` and zero-grad on both sides, with the same AdamW
implementation (`--optimizer`: foreach, torch's default, or fused, the transformers `Trainer`'s default).
litbert projects only the masked tokens onto the vocabulary (`MaskedLMHead`); transformers projects all of them.
Dropout is on (0.1) on both sides while timing. Repeats alternate litbert and transformers after warm-up; the
table shows medians.
FLOPs are model FLOPs, identical for both sides: the encoder (`Encoder.flops_per_token`, training) plus the MLM
head on the masked tokens only, so MFU ranks the sides as tokens/s does.

    LITBERT_DATA=../shared/data python -m bench.mlm --sizes bert-mini bert-base --seq 128 512 \\
        --precision fp32 bf16-mixed

Each case's row goes into `bench/results/mlm-<machine>.json` (`--json` elsewhere), replacing that case's earlier
row. The last line is `ratio: <litbert / transformers tokens/s>` of the headline case (`--headline`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import torch
from transformers import BertForMaskedLM, DataCollatorForLanguageModeling

from bench.common import (
    MINILM,
    PRECISIONS,
    alternate,
    autocast,
    machine_slug,
    peak_memory,
    print_table,
    report_machine,
    results_path,
    setup_run,
    synchronize,
    update_results,
)
from data import load_tokenizer, pack_blocks
from tasks.base import EncoderSpec
from tasks.mlm import MaskedLM


@dataclass
class Case:
    size: str
    seq: int
    precision: str

    @property
    def key(self) -> str:
        return f"{self.size},{self.seq},{self.precision}"


def wikitext_blocks(tokenizer, root: Path, seq: int, count: int) -> list[list[int]]:
    """The first `count` full blocks of `seq` tokens of wikitext-2's validation text, [CLS] ... [SEP] each."""
    lines = (root / "wikitext-2" / "wiki.valid.tokens").read_text(encoding="utf-8").splitlines()
    documents = [line for line in lines if line.strip()]
    ids = tokenizer(documents, add_special_tokens=False, verbose=False)["input_ids"]
    blocks = pack_blocks(pa.array(ids, pa.list_(pa.int32())), seq, [tokenizer.cls_token_id],
                         [tokenizer.sep_token_id], tokenizer.sep_token_id).to_pylist()
    full = [block for block in blocks if len(block) == seq]
    if len(full) < count:
        raise SystemExit(f"wikitext-2 validation has {len(full)} blocks of {seq}; lower --tokens.")
    return full[:count]


def build_pair(size: str, vocab_size: int, device: torch.device) -> tuple[MaskedLM, BertForMaskedLM]:
    """litbert's MLM task with a fresh model, and transformers' BertForMaskedLM holding a copy of its weights."""
    ours = MaskedLM(encoder=EncoderSpec(preset=size), vocab_size=vocab_size)
    with tempfile.TemporaryDirectory() as directory:
        ours.encoder.save_pretrained(directory, head=ours.head, format="transformers")
        theirs = BertForMaskedLM.from_pretrained(directory, attn_implementation="sdpa", dtype=torch.float32)
    return ours.to(device), theirs.to(device)


def run_case(case: Case, args: argparse.Namespace, tokenizer, peaks: dict[str, float], device: torch.device):
    torch.manual_seed(args.seed)
    batch_size = max(1, args.tokens // case.seq)
    blocks = wikitext_blocks(tokenizer, Path(args.data_root), case.seq, batch_size)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, return_tensors="pt")
    batch = {k: v.to(device) for k, v in collator([{"input_ids": block} for block in blocks]).items()}
    ours, theirs = build_pair(case.size, len(tokenizer), device)

    # Same weights, same batch, dropout off: the same loss.
    ours.eval()
    theirs.eval()
    with torch.no_grad(), autocast(case.precision, device):
        first_ours = ours(batch)[0].item()
        first_theirs = theirs(**batch).loss.item()
    tolerance = 1e-4 if case.precision == "fp32" else 2e-2
    if abs(first_ours - first_theirs) > tolerance * abs(first_theirs):
        raise SystemExit(f"{case.key}: first losses differ: litbert {first_ours:.6f}, transformers {first_theirs:.6f}")
    ours.train()
    theirs.train()

    # The same optimizer on both sides: `--optimizer fused` is what transformers' Trainer uses by default.
    fused = {"fused": True} if args.optimizer == "fused" else {"foreach": True}
    optimizers = {"litbert": torch.optim.AdamW(ours.parameters(), lr=1e-4, **fused),
                  "transformers": torch.optim.AdamW(theirs.parameters(), lr=1e-4, **fused)}
    losses = {"litbert": lambda: ours(batch)[0], "transformers": lambda: theirs(**batch).loss}

    def step(side: str) -> None:
        with autocast(case.precision, device):
            loss = losses[side]()
        loss.backward()
        optimizers[side].step()
        optimizers[side].zero_grad(set_to_none=True)

    def timed(side: str) -> float:
        synchronize(device)
        start = time.perf_counter()
        for _ in range(args.steps):
            step(side)
        synchronize(device)
        return time.perf_counter() - start

    memory = {}
    for side in losses:
        for _ in range(args.warmup):
            step(side)
        with peak_memory(device) as peak:
            step(side)
        memory[side] = peak["MiB"]
    timings = alternate({side: (lambda side=side: timed(side)) for side in losses}, args.repeats)

    tokens = batch_size * case.seq * args.steps
    flops = ours.training_flops(batch) * args.steps  # encoder + MLM head on the masked tokens
    result = {}
    for side in losses:
        seconds = timings.median(side)
        result[side] = dict(tokens_per_s=tokens / seconds, flops_per_s=flops / seconds,
                            mfu=flops / seconds / peaks[case.precision], memory=memory[side],
                            spread=(min(timings.seconds[side]), max(timings.seconds[side])))
    result["first_loss"] = (first_ours, first_theirs)
    result["batch"] = batch_size
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["bert-mini", "bert-base"])
    parser.add_argument("--seq", nargs="+", type=int, default=[128, 512])
    parser.add_argument("--precision", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per batch; batch size = tokens // seq")
    parser.add_argument("--steps", type=int, default=3, help="training steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per side, alternating")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per side first")
    parser.add_argument("--headline", default="bert-base,128,bf16-mixed", help="size,seq,precision of `ratio:`")
    parser.add_argument("--optimizer", choices=("foreach", "fused"), default="foreach",
                        help="torch.optim.AdamW implementation, the same for both sides")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", type=Path, help="update this json's rows (default: bench/results/mlm-<machine>.json)")
    args = parser.parse_args()
    args.data_root = setup_run(args.threads)
    device = torch.device(args.device)
    tokenizer = load_tokenizer(MINILM)

    peaks = report_machine(args.precision, device)
    print(f"AdamW ({args.optimizer}); steps per repeat {args.steps}, repeats {args.repeats} (alternating), "
          f"warm-up {args.warmup}; "
          f"memory: {'peak CUDA allocation' if device.type == 'cuda' else 'peak RSS growth'} over one step")

    cases = [Case(size, seq, precision) for size in args.sizes for seq in args.seq for precision in args.precision]
    rows, ratios, records = [], {}, {}
    for case in cases:
        r = run_case(case, args, tokenizer, peaks, device)
        ours, theirs = r["litbert"], r["transformers"]
        ratios[case.key] = ours["tokens_per_s"] / theirs["tokens_per_s"]
        records[case.key] = {"batch": r["batch"], "first_loss": r["first_loss"], "peak_flops": peaks[case.precision],
                             "optimizer": args.optimizer, "litbert": ours, "transformers": theirs}
        rows.append([case.size, case.seq, case.precision, r["batch"],
                     f"{ours['tokens_per_s']:,.0f}", f"{theirs['tokens_per_s']:,.0f}", f"{ratios[case.key]:.2f}x",
                     f"{ours['flops_per_s'] / 1e12:.2f}", f"{100 * ours['mfu']:.1f}%",
                     f"{theirs['flops_per_s'] / 1e12:.2f}", f"{100 * theirs['mfu']:.1f}%",
                     f"{ours['memory']:,.0f}", f"{theirs['memory']:,.0f}",
                     f"{r['first_loss'][0]:.4f} / {r['first_loss'][1]:.4f}"])
        print(f"{case.key}: litbert {ours['tokens_per_s']:,.0f} tok/s (repeats {ours['spread'][0]:.2f}-"
              f"{ours['spread'][1]:.2f} s), transformers {theirs['tokens_per_s']:,.0f} tok/s (repeats "
              f"{theirs['spread'][0]:.2f}-{theirs['spread'][1]:.2f} s), ratio {ratios[case.key]:.2f}", flush=True)
    print()
    print_table(["size", "seq", "precision", "batch", "litbert tok/s", "transformers tok/s", "ratio",
                 "litbert TFLOP/s", "litbert MFU", "transformers TFLOP/s", "transformers MFU",
                 "litbert MiB", "transformers MiB", "first loss (litbert / transformers)"], rows)
    headline = args.headline if args.headline in ratios else cases[-1].key
    print(f"headline: {headline}")
    print(f"ratio: {ratios[headline]:.2f}")
    update_results(args.json or results_path(f"mlm-{machine_slug(device)}"), records, device)


if __name__ == "__main__":
    main()
