"""Batching: dynamic padding pads to the batch's longest example with the right value per column; the
length-grouped sampler cuts padding and still yields every index once."""

import pytest
import torch
import torch.nn.functional as F
from runs import MINILM
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


def test_the_collator_gives_host_built_indices_and_pads_to_a_multiple():
    collate = PaddingCollator(pad_token_id=0, pad_to_multiple_of=4, max_length=6)
    batch = collate([{"input_ids": [5, 6, 7]}, {"input_ids": [5, 6]}])
    assert batch["input_ids"].shape == (2, 4)  # 3 up to 4
    assert batch["unpad_index"].tolist() == [0, 1, 2, 4, 5]  # the real tokens among the 2 x 4
    assert collate([{"input_ids": [1] * 5}])["input_ids"].shape == (1, 6)  # 8, but never past max_length
    assert collate([{"input_ids": [1] * 7}])["input_ids"].shape == (1, 7)  # longer than max_length: as it is


@pytest.mark.parametrize("task", ["stsb", "ner"])
def test_bucketed_lengths_give_the_losses_of_unbucketed_ones(task, shared_data):
    """Batches padded to multiples of 64 (the CUDA default) against the same batches padded to their longest: equal
    losses in float32 without dropout, on the padded and the unpadded path alike (the multiple leaves more of a
    batch padding, so more batches skip it)."""
    from data import GLUEDataModule, TokenClassificationDataModule
    from tasks.classification import SequenceClassification, TokenClassification

    root = str(shared_data)
    if task == "stsb":
        data = {m: GLUEDataModule(task="stsb", tokenizer=MINILM, data_root=root, pad_to_multiple_of=m) for m in (1, 64)}
        model = SequenceClassification(num_labels=1, metrics=("pearson",), pretrained=MINILM)

        def loss_of(batch):
            return model.loss(model(batch), batch["labels"])
    else:
        data = {m: TokenClassificationDataModule(MINILM, dataset="conll2003", data_root=root, pad_to_multiple_of=m)
                for m in (1, 64)}
        model = TokenClassification(label_names=data[1].label_names, pretrained=MINILM)

        def loss_of(batch):
            return F.cross_entropy(model(batch).flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
    model.eval()
    for module in data.values():
        module.setup("fit")
    losses = {}
    for multiple, module in data.items():
        batches = iter(module.train_dataloader())
        with torch.no_grad():
            losses[multiple] = [loss_of(next(batches)) for _ in range(3)]
    shapes = [next(iter(data[m].train_dataloader()))["input_ids"].shape[1] for m in (1, 64)]
    assert shapes[1] % 64 == 0 and shapes[0] < shapes[1]
    torch.testing.assert_close(torch.stack(losses[64]), torch.stack(losses[1]), rtol=1e-5, atol=1e-6)
