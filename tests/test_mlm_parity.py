"""Loss-curve parity with transformers: the same initial weights, data and masks give litbert's `MaskedLM` (trained
by Lightning with its own `configure_optimizers`) and `BertForMaskedLM` (a plain PyTorch loop, masks from
transformers' `DataCollatorForLanguageModeling`) the same training loss at every one of 50 steps."""

from pathlib import Path

import lightning as L
import pyarrow as pa
import pytest
import torch
from tiny import TINY, trainer
from torch.utils.data import DataLoader
from transformers import BertForMaskedLM, DataCollatorForLanguageModeling

from data import pack_blocks
from tasks.base import Optimization, parameter_groups
from tasks.mlm import MaskedLM

STEPS, BATCH, LENGTH = 50, 8, 64


class Losses(L.Callback):
    def __init__(self) -> None:
        self.values: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.values.append(outputs["loss"].item())


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_fifty_steps_follow_bert_for_masked_lm(shared_data: Path, minilm_tokenizer, tmp_path):
    tokenizer = minilm_tokenizer
    lines = (shared_data / "wikitext-2" / "wiki.valid.tokens").read_text(encoding="utf-8").splitlines()
    ids = tokenizer([line for line in lines if line.strip()][:2000], add_special_tokens=False)["input_ids"]
    blocks = pack_blocks(pa.array(ids, pa.list_(pa.int32())), LENGTH, [tokenizer.cls_token_id],
                         [tokenizer.sep_token_id], tokenizer.sep_token_id).to_pylist()[:STEPS * BATCH]
    assert len(blocks) == STEPS * BATCH and all(len(block) == LENGTH for block in blocks)
    # transformers' collator draws the masks (15%, 80/10/10) once; both sides train on exactly these batches.
    torch.manual_seed(0)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, return_tensors="pt")
    batches = [collator([{"input_ids": b} for b in blocks[i:i + BATCH]]) for i in range(0, len(blocks), BATCH)]
    for batch in batches:
        batch["attention_mask"] = torch.ones_like(batch["input_ids"])

    # Dropout off: the two sides draw their dropout masks from different streams.
    optimization = Optimization(learning_rate=1e-3, warmup=0, schedule="constant")
    ours = MaskedLM(TINY, vocab_size=len(tokenizer), optimization=optimization)
    ours.encoder.save_pretrained(tmp_path, head=ours.head, format="transformers")
    theirs = BertForMaskedLM.from_pretrained(tmp_path, attn_implementation="sdpa", dtype=torch.float32)
    assert theirs.config.hidden_dropout_prob == 0.0 and theirs.config.attention_probs_dropout_prob == 0.0

    # transformers' side: its usual loop, AdamW with the Trainer's grouping (no decay on biases and LayerNorms).
    names = {id(p): n for n, p in theirs.named_parameters()}
    groups = parameter_groups(theirs, optimization.weight_decay)
    assert not any("LayerNorm" in names[id(p)] or names[id(p)].endswith("bias") for p in groups[0]["params"])
    optimizer = torch.optim.AdamW(groups, lr=optimization.learning_rate, betas=optimization.betas,
                                  eps=optimization.eps)
    expected = []
    theirs.train()
    for batch in batches:
        loss = theirs(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(loss.item())

    losses = Losses()
    trainer(STEPS, callbacks=[losses]).fit(ours, DataLoader(batches, batch_size=None))
    assert len(losses.values) == STEPS
    # Learning happened (the comparison is not between two flat lines) ...
    assert expected[-1] < expected[0] - 1.0
    # ... and litbert followed it step for step, within float32 noise (2e-6 measured over the 50 steps).
    difference = torch.tensor(losses.values) - torch.tensor(expected)
    assert difference.abs().max() < 1e-4, difference
