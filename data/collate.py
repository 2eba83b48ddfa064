"""Batching: dynamic padding pads each batch to its own longest example rather than to `max_length`, and filler
rows fill an epoch's last, short batch up to the batch size (`pad_last_batch`). The batch samplers that group
examples by length are in `data.loading`."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from encoders.kernels import cu_seqlens, sequence_starts

# Padding value of each column; "pad" means the tokenizer's pad id. Columns not listed are not padded.
PAD_VALUES: dict[str, int | str] = {
    "input_ids": "pad",
    "attention_mask": 0,
    "token_type_ids": 0,
    "special_tokens_mask": 1,
    "labels": -100,  # the ignore index of torch's cross-entropy
    "word_ids": -1,
    "document_ids": -1,  # the packed document of each token (MLMDataModule's document_mask); -1 is padding
}

# A filler row's value of each column: one padding token, attended (a row that attends to nothing makes NaN in
# attention), in a document of its own, labelled with nothing; 0 where not listed.
FILLER_VALUES: dict[str, int | str] = {"input_ids": "pad", "attention_mask": 1, "special_tokens_mask": 1,
                                       "labels": -100, "word_ids": -1}


class PaddingCollator:
    """Pads list columns to the longest example of the batch; scalar columns become (B,) tensors.

    Integer scalars become long tensors, floats float32 (STS-B's regression targets). `stacked` list columns have
    one length in every example (a multi-label target, a 0/1 per label) and are stacked as they are, never padded.
    Datasets store no attention mask (it would be all ones before padding); it is made here from the lengths.

    A `data.loading.Batch` of examples that asks for `fill` rows gets them appended: filler rows (`FILLER_VALUES`)
    that keep the batch at its full size, hence at a shape the run has met already. The batch then says how many
    of its rows are examples (`num_examples`, a Python number the host reads without waiting for a device); the
    tasks leave the rest out of every loss, metric, count and prediction (`tasks.base.example_rows`).
    """

    def __init__(self, pad_token_id: int, pad_to_multiple_of: int = 1, max_length: int | None = None,
                 stacked: tuple[str, ...] = ()) -> None:
        self.pad_token_id = pad_token_id
        self.stacked = stacked
        # Lengths padded up to a multiple of this, never past `max_length`: few shapes (`TokenizedDataModule`).
        self.pad_to_multiple_of = pad_to_multiple_of
        self.max_length = max_length

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        fill = getattr(examples, "fill", 0)
        if fill:
            examples = [*examples, *[self.filler(examples[0])] * fill]
        batch: dict[str, Any] = {}
        real: dict[str, torch.Tensor] = {}  # each padded column's (B, T) True at the examples' own values
        for column, first in examples[0].items():
            values = [example[column] for example in examples]
            if column in self.stacked and isinstance(first, (list, tuple, torch.Tensor)):
                batch[column] = torch.stack([torch.as_tensor(value, dtype=torch.long) for value in values])
            elif isinstance(first, (list, tuple, torch.Tensor)):
                batch[column], real[column] = self._pad(column, values)
            else:
                batch[column] = torch.tensor(values, dtype=torch.float32 if isinstance(first, float) else torch.long)
        if "input_ids" in batch and "attention_mask" not in batch:
            batch["attention_mask"] = real["input_ids"].long()
        if "attention_mask" in batch:
            # Where the real tokens sit among the batch's B * T, for the encoder to skip padding with. Read off the
            # mask here, on the host: on the device a `nonzero` makes the host wait for the GPU (a host sync).
            batch["unpad_index"] = batch["attention_mask"].flatten().nonzero().squeeze(1)
            # Where each sequence (a row's real tokens, or a packed document) starts among them, for varlen_attn
            # (`encoders.kernels.PackedAttention`); here on the host for the same reason.
            starts = sequence_starts(batch["unpad_index"], batch["attention_mask"].shape[1], batch.get("document_ids"))
            batch["cu_seqlens"] = cu_seqlens(starts)
        if fill:
            batch["num_examples"] = len(examples) - fill
        return batch

    def filler(self, example: Mapping[str, Any]) -> dict[str, Any]:
        """A filler row with the columns of `example`."""
        row = {}
        for column, value in example.items():
            filler = FILLER_VALUES.get(column, 0)
            filler = self.pad_token_id if filler == "pad" else filler
            row[column] = [filler] if isinstance(value, (list, tuple, torch.Tensor)) else \
                float(filler) if isinstance(value, float) else filler
        return row

    def _pad(self, column: str, values: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """The column padded, and (B, T) True where it holds the examples' own values."""
        if column not in PAD_VALUES:
            raise KeyError(f"Column {column!r} has no padding value; add it to data.collate.PAD_VALUES.")
        pad = self.pad_token_id if PAD_VALUES[column] == "pad" else PAD_VALUES[column]
        lengths = [len(value) for value in values]
        longest = max(lengths)
        length = -(-longest // self.pad_to_multiple_of) * self.pad_to_multiple_of
        if self.max_length is not None:
            length = max(longest, min(length, self.max_length))
        out = torch.full((len(values), length), int(pad), dtype=torch.long)
        real = torch.arange(length) < torch.tensor(lengths)[:, None]
        # The values in one tensor, written in one go: a copy per row cost twice as much (the collator runs in the
        # training process unless data.num_workers says otherwise, between every two steps).
        if all(isinstance(value, (list, tuple)) for value in values):
            flat = torch.tensor(list(itertools.chain.from_iterable(values)), dtype=torch.long)
        else:  # tensors (a filler row's values are lists)
            flat = torch.cat([torch.as_tensor(value, dtype=torch.long).flatten() for value in values])
        out[real] = flat
        return out, real
