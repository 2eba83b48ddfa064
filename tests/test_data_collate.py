"""Batching: dynamic padding pads to the batch's longest example with the right value per column; the
length-grouped sampler cuts padding and still yields every index once."""

import torch
from torch.utils.data import RandomSampler

from data import LengthGroupedBatchSampler, PaddingCollator


def test_dynamic_padding_values_per_column():
    collate = PaddingCollator(pad_token_id=7)
    batch = collate([{"input_ids": [1, 2, 3], "labels": [4, -100, 5], "token_type_ids": [0, 1, 1]},
                     {"input_ids": [1, 2], "labels": [4, 5], "token_type_ids": [0, 0]}])
    assert batch["input_ids"].tolist() == [[1, 2, 3], [1, 2, 7]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[4, -100, 5], [4, 5, -100]]
    assert batch["token_type_ids"].tolist() == [[0, 1, 1], [0, 0, 0]]
    scores = collate([{"input_ids": [1], "labels": 2.5}, {"input_ids": [1], "labels": 0.0}])["labels"]
    assert scores.dtype == torch.float32
    assert collate([{"input_ids": [1], "labels": 2}])["labels"].dtype == torch.long


def test_length_grouping_cuts_padding_and_keeps_every_index():
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, 200, (1000,), generator=generator).tolist()
    sampler = RandomSampler(range(1000), generator=generator)
    batches = list(LengthGroupedBatchSampler(sampler, batch_size=16, drop_last=False, lengths=lengths))
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert len(batches) == len(LengthGroupedBatchSampler(sampler, 16, False, lengths)) == 63

    def padding(batch_list):
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batch_list)

    random_batches = [list(range(i, min(i + 16, 1000))) for i in range(0, 1000, 16)]
    assert padding(batches) < padding(random_batches) / 5
