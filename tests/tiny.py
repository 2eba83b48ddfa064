"""Tiny models and data for the unit tests, defined once: an `EncoderConfig`, the `EncoderSpec` of a task, a
learnable synthetic MLM corpus and a quiet `Trainer`."""

from __future__ import annotations

import lightning as L
import torch

from encoders import EncoderConfig
from tasks.base import EncoderSpec

# Deterministic (no dropout) and small enough that a test builds dozens of them.
TINY_CONFIG = dict(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                   max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0)

# The encoder of a task under test: bert-tiny (2 layers of 128), no dropout.
TINY = EncoderSpec(preset="bert-tiny", hidden_dropout=0.0, attention_dropout=0.0)


def tiny_config(**overrides) -> EncoderConfig:
    return EncoderConfig(**{**TINY_CONFIG, **overrides})


def trainer(steps: int, **kwargs) -> L.Trainer:
    return L.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, **kwargs)


def mlm_batches(n: int, vocab: int = 64, seq: int = 24, batch: int = 8) -> list[dict[str, torch.Tensor]]:
    """A learnable corpus: each row alternates two random tokens, so masked tokens are predictable from context."""
    generator = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        motif = torch.randint(5, vocab, (batch, 2), generator=generator)
        ids = motif.repeat(1, seq // 2)
        labels = torch.full_like(ids, -100)
        masked = torch.rand(ids.shape, generator=generator) < 0.15
        masked[:, 0] = True
        labels[masked] = ids[masked]
        ids = ids.masked_fill(masked, 4)  # the [MASK] id
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})
    return out
