"""Streaming MLM data (`data.streaming`): the same blocks as cached packing, every document once across ranks and
loader workers, a resumed loader continuing with the very next batch and masks, and train.py refusing a stream
without `max_steps`."""

from __future__ import annotations

import pytest
import torch
from runs import MINILM, environment, train

from data import DataError, MLMDataModule
from data.streaming import StreamingLoader, shuffled

WIKITEXT = dict(dataset="wikitext", dataset_config="wikitext-2-v1", train_split="test", val_split=None, max_length=64)


def originals(batch: dict[str, torch.Tensor]) -> list[list[int]]:
    """The unmasked tokens of each row of a masked batch, padding removed."""
    ids = torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
    return [row[mask.bool()].tolist() for row, mask in zip(ids, batch["attention_mask"], strict=True)]


def stream_module(shared_data, tmp_path, **settings) -> MLMDataModule:
    return MLMDataModule(MINILM, **{**WIKITEXT, "streaming": True, "batch_size": 8, **settings},
                         data_root=str(shared_data), cache_dir=str(tmp_path))


def test_an_unshuffled_stream_makes_the_cached_blocks_in_order(shared_data, tmp_path):
    cached = MLMDataModule(MINILM, **WIKITEXT, data_root=str(shared_data), cache_dir=str(tmp_path))
    cached.setup("fit")
    streamed = stream_module(shared_data, tmp_path, shuffle_buffer=0)
    streamed.setup("fit")
    assert "train" not in streamed.datasets  # nothing built or cached for training
    rows = [row for batch in streamed.train_dataloader() for row in originals(batch)]
    assert rows == cached.datasets["train"]["input_ids"]


def test_ranks_and_workers_see_every_document_once(shared_data, tmp_path):
    whole = [row for batch in stream_module(shared_data, tmp_path).train_dataloader() for row in originals(batch)]
    shards = []
    for rank in range(2):
        module = stream_module(shared_data, tmp_path, num_workers=2)
        module.distributed = lambda rank=rank: {"num_replicas": 2, "rank": rank}
        shards.append([row for batch in module.train_dataloader() for row in originals(batch)])
    tokens = [sorted(token for row in rows for token in row[1:-1]) for rows in (whole, shards[0] + shards[1])]
    separator = MLMDataModule(MINILM, **WIKITEXT, data_root=str(shared_data)).tokenizer.sep_token_id
    # The same multiset of text tokens: each shard packs its own documents (separators differ in number).
    assert [t for t in tokens[0] if t != separator] == [t for t in tokens[1] if t != separator]
    assert min(map(len, shards)) > 0.4 * len(whole)


def test_a_resumed_loader_hands_out_the_next_batch_with_its_masks(shared_data, tmp_path):
    module = stream_module(shared_data, tmp_path, max_documents=300, shuffle_buffer=50)
    loader = module.train_dataloader()
    first_pass = list(loader)
    second_pass = list(loader)
    assert len(first_pass) > 10
    assert originals(second_pass[0]) != originals(first_pass[0])  # each pass its own order
    for stop in (4, len(first_pass) - 1):
        partial = module.train_dataloader()
        iterator = iter(partial)
        for _ in range(stop):
            next(iterator)
        state = partial.state_dict()
        resumed = module.train_dataloader()
        resumed.load_state_dict(state)
        nxt = next(iter(resumed))
        assert torch.equal(nxt["input_ids"], first_pass[stop]["input_ids"])
        assert torch.equal(nxt["labels"], first_pass[stop]["labels"])
    done = module.train_dataloader()
    list(done)
    assert done.state_dict() == {"epoch": 1, "batches": 0}  # a finished pass resumes at the next one
    again = module.train_dataloader()
    again.load_state_dict(done.state_dict())
    assert torch.equal(next(iter(again))["labels"], second_pass[0]["labels"])
    assert isinstance(again, StreamingLoader)
    # A position behind the loader's own (Lightning hands a checkpoint's back again after the resumed pass) is
    # stale and ignored: the next pass follows.
    done.load_state_dict({"epoch": 0, "batches": 4})
    assert torch.equal(next(iter(done))["labels"], second_pass[0]["labels"])


def test_a_pass_ends_with_a_full_size_batch_of_the_same_examples_and_masks(shared_data, tmp_path):
    """`pad_last_batch`: the pass's last, short batch is filled up to the batch size; its examples and their masks
    are those of the unfilled batch."""
    plain, filled = (list(stream_module(shared_data, tmp_path, max_documents=300, pad_last_batch=fill)
                          .train_dataloader()) for fill in (False, True))
    assert len(plain[-1]["input_ids"]) < 8 and {len(batch["input_ids"]) for batch in filled} == {8}
    last = filled[-1]
    assert last["num_examples"] == len(plain[-1]["input_ids"]) and "num_examples" not in filled[0]
    for column in ("input_ids", "labels", "attention_mask"):
        assert all(torch.equal(a[column][:len(b[column])], b[column]) for a, b in zip(filled, plain, strict=True))


def test_the_shuffle_buffer_keeps_every_document():
    import random

    documents = [str(i) for i in range(1000)]
    out = list(shuffled(documents, 64, random.Random(0)))
    assert sorted(out, key=int) == documents and out != documents
    assert list(shuffled(documents, 0, random.Random(0))) == documents


def test_streaming_refuses_what_it_cannot_do(shared_data, tmp_path):
    for settings, named in (({"packing": "segments"}, "packing"), ({"masking": "static"}, "masking")):
        try:
            stream_module(shared_data, tmp_path, **settings)
        except DataError as error:
            assert named in str(error)
        else:
            raise AssertionError(settings)
    try:
        MLMDataModule(MINILM, **WIKITEXT, shuffle_buffer=5, data_root=str(shared_data))
    except DataError as error:
        assert "data.streaming" in str(error)
    else:
        raise AssertionError("shuffle_buffer without streaming")


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_train_py_streams_with_max_steps_and_refuses_without(shared_data, tmp_path):
    env = environment(LITBERT_DATA=str(shared_data), LITBERT_CACHE=str(tmp_path / "cache"))
    args = ["--data.tokenizer", str(tmp_path / "tokenizer"), "--data.train_tokenizer.vocab_size", "2000",
            "--data.max_documents", "200", "--data.max_val_documents", "10", "--data.batch_size", "8",
            "--data.streaming", "true", "--trainer.val_check_interval", "5", "--trainer.logger", "false",
            "--export", "false"]
    done = train("configs/quickstart.yaml", tmp_path / "run", *args, "--trainer.max_steps", "10", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "metrics.json").is_file()
    refused = train("configs/quickstart.yaml", tmp_path / "epochs", *args, "--trainer.max_steps", "-1",
                    "--trainer.max_epochs", "1", env=env)
    assert refused.returncode != 0 and "trainer.max_steps" in refused.stderr


def test_a_stream_carries_each_tokens_document_with_document_mask(shared_data, tmp_path):
    cached = MLMDataModule(MINILM, **WIKITEXT, document_mask=True, data_root=str(shared_data),
                           cache_dir=str(tmp_path))
    cached.setup("fit")
    streamed = stream_module(shared_data, tmp_path, shuffle_buffer=0, document_mask=True)
    documents = [row[mask.bool()].tolist() for batch in streamed.train_dataloader()
                 for row, mask in zip(batch["document_ids"], batch["attention_mask"], strict=True)]
    assert documents == cached.datasets["train"]["document_ids"]


@pytest.mark.parametrize("hub_shards", [1, 4])
def test_loader_workers_read_every_document_of_a_streamed_hub_dataset(monkeypatch, tmp_path, hub_shards):
    """A streamed hub dataset gives a loader worker only its share of the hub's files when iterated as itself;
    `PackedStream` shards the stream over the workers on top, so each worker must read the whole stream."""
    import datasets

    texts = [f"review {i} says the film was fine" for i in range(200)]

    def fake_load_dataset(name, config, split, streaming=False):
        assert streaming
        return datasets.Dataset.from_dict({"text": texts}).to_iterable_dataset(num_shards=hub_shards)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    module = MLMDataModule(MINILM, dataset="someone/reviews", val_split=None, max_length=32, batch_size=4,
                           streaming=True, num_workers=2, cache_dir=str(tmp_path))
    trained = sorted(token for batch in module.train_dataloader() for row in originals(batch) for token in row
                     if token not in module.tokenizer.all_special_ids)
    encoded = module.tokenizer(texts, add_special_tokens=False)["input_ids"]
    expected = sorted(token for ids in encoded for token in ids)
    assert trained == expected
