"""Batching: dynamic padding, and batch samplers that group examples by length.

Dynamic padding pads each batch to its own longest example rather than to `max_length`. Grouping by length
(as transformers' `group_by_length`, after fairseq's bucketing) puts similar lengths together so little padding
is left. Both batch samplers take a `sampler` argument, which is what Lightning replaces with a
`DistributedSampler` under distributed training: each rank then groups its own shard.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import BatchSampler, RandomSampler, Sampler, SequentialSampler

# Padding value of each column; "pad" means the tokenizer's pad id. Columns not listed are not padded.
PAD_VALUES: dict[str, int | str] = {
    "input_ids": "pad",
    "attention_mask": 0,
    "token_type_ids": 0,
    "special_tokens_mask": 1,
    "labels": -100,  # the ignore index of torch's cross-entropy
    "word_ids": -1,
}


class PaddingCollator:
    """Pads list columns to the longest example of the batch; scalar columns become (B,) tensors.

    Integer scalars become long tensors, floats float32 (STS-B's regression targets). Datasets store no
    attention mask (it would be all ones before padding); it is made here from the lengths.
    """

    def __init__(self, pad_token_id: int, pad_to_multiple_of: int | None = None) -> None:
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        batch: dict[str, torch.Tensor] = {}
        for column, first in examples[0].items():
            values = [example[column] for example in examples]
            if isinstance(first, (list, tuple, torch.Tensor)):
                batch[column] = self._pad(column, values)
            else:
                batch[column] = torch.tensor(values, dtype=torch.float32 if isinstance(first, float) else torch.long)
        if "input_ids" in batch and "attention_mask" not in batch:
            lengths = torch.tensor([len(example["input_ids"]) for example in examples])
            batch["attention_mask"] = (torch.arange(batch["input_ids"].shape[1]) < lengths[:, None]).long()
        return batch

    def _pad(self, column: str, values: list[Any]) -> torch.Tensor:
        if column not in PAD_VALUES:
            raise KeyError(f"Column {column!r} has no padding value; add it to data.collate.PAD_VALUES.")
        pad = self.pad_token_id if PAD_VALUES[column] == "pad" else PAD_VALUES[column]
        length = max(len(value) for value in values)
        if self.pad_to_multiple_of:
            length = math.ceil(length / self.pad_to_multiple_of) * self.pad_to_multiple_of
        out = torch.full((len(values), length), int(pad), dtype=torch.long)
        for row, value in enumerate(values):
            out[row, : len(value)] = torch.as_tensor(value, dtype=torch.long)
        return out


class LengthGroupedBatchSampler(BatchSampler):
    """Batches of similar length: take `megabatch` batches' worth of indices from `sampler`, sort them by
    length (longest first) and cut them into batches. Randomness comes from `sampler` alone.

    `drop_last` drops only the last, short batch of the epoch, as `BatchSampler` does.
    """

    def __init__(self, sampler: Sampler[int] | Sequence[int], batch_size: int, drop_last: bool,
                 lengths: Sequence[int], megabatch: int = 50) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.lengths = lengths
        self.megabatch = megabatch

    def _sorted_chunks(self, pool: list[int]) -> Iterator[list[int]]:
        pool.sort(key=lambda index: -self.lengths[index])
        for start in range(0, len(pool), self.batch_size):
            yield pool[start:start + self.batch_size]

    def __iter__(self) -> Iterator[list[int]]:
        pool: list[int] = []
        size = self.batch_size * self.megabatch
        for index in self.sampler:
            pool.append(index)
            if len(pool) == size:
                yield from self._sorted_chunks(pool)
                pool = []
        for batch in self._sorted_chunks(pool):
            if len(batch) == self.batch_size or not self.drop_last:
                yield batch

    def __len__(self) -> int:
        total = len(self.sampler)  # type: ignore[arg-type]
        return total // self.batch_size if self.drop_last else math.ceil(total / self.batch_size)


class SameLengthBatchSampler(BatchSampler):
    """Batches whose examples all have exactly the same length, so no padding is ever added.

    Made for packed MLM blocks, which all have the block length except the last one: that one gets a batch
    of its own instead of being padded. Batches come out in the order in which `sampler` fills them.
    `drop_last` drops every batch smaller than `batch_size`.
    """

    def __init__(self, sampler: Sampler[int] | Sequence[int], batch_size: int, drop_last: bool,
                 lengths: Sequence[int]) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.lengths = lengths

    def __iter__(self) -> Iterator[list[int]]:
        open_batches: dict[int, list[int]] = {}
        for index in self.sampler:
            batch = open_batches.setdefault(self.lengths[index], [])
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                open_batches[self.lengths[index]] = []
        if not self.drop_last:
            yield from (batch for batch in open_batches.values() if batch)

    def __len__(self) -> int:
        counts: dict[int, int] = {}
        # A full permutation has the dataset's histogram; iterating a RandomSampler would draw from the global RNG.
        permutation = isinstance(self.sampler, SequentialSampler) or (
            isinstance(self.sampler, RandomSampler) and not self.sampler.replacement
            and self.sampler.num_samples == len(self.sampler.data_source))
        for index in range(len(self.sampler)) if permutation else self.sampler:  # type: ignore[arg-type]
            counts[self.lengths[index]] = counts.get(self.lengths[index], 0) + 1
        rounding = math.floor if self.drop_last else math.ceil
        return sum(rounding(count / self.batch_size) for count in counts.values())
