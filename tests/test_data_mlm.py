"""MLM data: FULL-SENTENCES packing keeps every token and adds no padding; BERT-style segments keep every token with
the right token types; tokenized data is cached so a second run does not tokenize; each rank of a distributed run
loads its own shard, with as many batches as the others."""

import logging
import signal

import datasets
import numpy as np
import pyarrow as pa
import pytest
import torch
from lightning.fabric.utilities.data import _replace_dunder_methods
from lightning.pytorch.utilities.data import _update_dataloader
from runs import MINILM
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, SequentialSampler

from data import DataError, MLMDataModule, ResumableLoader, SameLengthBatchSampler, pack_blocks
from data.mlm import BlockPacker, iter_documents, read_documents, write_blocks
from data.sources import cached_map
from tasks.run.signals import StoppedBeforeTraining


def test_pack_blocks_keeps_every_token():
    documents = pa.array([[10, 11, 12], [20], [30, 31, 32, 33, 34, 35, 36], [40, 41]], pa.list_(pa.int32()))
    blocks = pack_blocks(documents, block_length=6, prefix=[1], suffix=[2], separator=3).to_pylist()
    stream = [10, 11, 12, 3, 20, 3, 30, 31, 32, 33, 34, 35, 36, 3, 40, 41]  # 16 tokens: 4 pieces of 4
    assert blocks == [[1, *stream[i:i + 4], 2] for i in range(0, 16, 4)]
    odd = pack_blocks(documents, block_length=7, prefix=[1], suffix=[2], separator=3).to_pylist()
    assert [len(b) for b in odd] == [7, 7, 7, 3]  # the remainder (1 token) is a last, short block
    assert sum((b[1:-1] for b in odd), []) == stream


@pytest.mark.parametrize("documents_too", [False, True])
def test_packing_chunk_by_chunk_makes_the_same_blocks(documents_too):
    """The packer holds one chunk and one remainder at a time; the blocks do not depend on where chunks end."""
    rng = np.random.default_rng(0)
    documents = [list(rng.integers(10, 99, size=n)) for n in rng.integers(0, 40, size=200)]
    whole = BlockPacker(16, [1], [2], separator=3, documents=documents_too)
    expected = pa.concat_tables([whole.add(pa.array(documents, pa.list_(pa.int64()))), whole.finish()])
    for _ in range(5):
        cuts = sorted(rng.choice(np.arange(1, len(documents)), size=rng.integers(1, 30), replace=False))
        packer = BlockPacker(16, [1], [2], separator=3, documents=documents_too)
        parts = [packer.add(pa.array(documents[a:b], pa.list_(pa.int64())))
                 for a, b in zip([0, *cuts], [*cuts, len(documents)], strict=True)]
        assert pa.concat_tables([*parts, packer.finish()]).to_pydict() == expected.to_pydict()
    assert expected.num_rows > 20


def test_blocks_are_written_to_disk_and_read_back(tmp_path):
    documents = datasets.Dataset.from_dict({"input_ids": [[5] * n for n in range(1, 60)]})
    blocks = write_blocks(documents, tmp_path / "blocks.arrow", BlockPacker(8, [1], [2], separator=3), chunk=7)
    assert blocks.cache_files[0]["filename"] == str(tmp_path / "blocks.arrow")  # memory-mapped, not in memory
    expected = pack_blocks(pa.array(documents["input_ids"]), 8, [1], [2], separator=3).to_pylist()
    assert blocks["input_ids"] == expected
    assert blocks["example_index"] == list(range(len(expected)))
    assert [p.name for p in tmp_path.iterdir()] == ["blocks.arrow"]  # no scratch file left


@pytest.mark.parametrize("packing", ["full_sentences", "segments"])
def test_tokenizing_in_two_processes_gives_the_same_data(packing, shared_data, tmp_path, monkeypatch):
    settings = dict(dataset="wikitext", dataset_config="wikitext-2-v1", train_split="test", val_split=None,
                    max_length=64, packing=packing, data_root=str(shared_data))
    one = MLMDataModule(MINILM, **settings, cache_dir=str(tmp_path / "one"))
    one.setup("fit")
    two = MLMDataModule(MINILM, **settings, num_proc=2, cache_dir=str(tmp_path / "two"))
    two.setup("fit")
    assert two.datasets["train"]["input_ids"] == one.datasets["train"]["input_ids"]
    shards = sorted(p.name for p in (tmp_path / "two").glob("mlm-test-*.arrow"))
    assert len(shards) == 2 and all("_of_00002" in name for name in shards)
    # A second run reads the two shards back and tokenizes nothing.
    again = MLMDataModule(MINILM, **settings, num_proc=2, cache_dir=str(tmp_path / "two"))
    calls = []
    monkeypatch.setattr(type(again.tokenizer), "__call__", lambda *a, **k: calls.append(1))
    again.setup("fit")
    assert calls == [] and again.datasets["train"]["input_ids"] == one.datasets["train"]["input_ids"]


def test_a_run_stopped_while_it_tokenizes_leaves_nothing_in_the_cache(tmp_path):
    """A signal while the data is tokenised stops the run with a SystemExit (`StoppedBeforeTraining`), which
    `datasets` does not clean up after: its temporary file, as large as the cache file it was becoming, stayed in the
    cache at every stop. Nothing stays, and the next run caches the data whole under its name."""
    texts = datasets.Dataset.from_dict({"text": ["a" * n for n in range(1, 41)]})

    def lengths(batch, indices):
        if indices[0] >= 10 and stop:  # the signal, raised by its handler in the third batch
            raise StoppedBeforeTraining(signal.SIGTERM)
        return {"length": [len(text) for text in batch["text"]]}

    stop = True
    with pytest.raises(StoppedBeforeTraining):
        cached_map(lambda: texts, lengths, cache_dir=tmp_path, name="mlm-train", key="k", batch_size=5,
                   with_indices=True)
    assert list(tmp_path.iterdir()) == []
    stop = False
    mapped = cached_map(lambda: texts, lengths, cache_dir=tmp_path, name="mlm-train", key="k", batch_size=5,
                        with_indices=True)
    assert mapped["length"] == list(range(1, 41))
    assert [path.name for path in tmp_path.iterdir()] == ["mlm-train-k.arrow"]
    assert mapped.cache_files[0]["filename"] == str(tmp_path / "mlm-train-k.arrow")


def test_num_proc_must_be_positive(tmp_path):
    with pytest.raises(DataError, match="num_proc=0"):
        MLMDataModule(MINILM, train_files=[str(tmp_path / "x.txt")], num_proc=0)


@pytest.mark.parametrize("max_length", [128, 512])
def test_full_sentences_packing_on_wikitext(max_length, shared_data, minilm_tokenizer, tmp_path):
    dm = MLMDataModule(MINILM, dataset="wikitext", dataset_config="wikitext-2-raw-v1", train_split="validation",
                       val_split=None, max_length=max_length, batch_size=16, data_root=str(shared_data),
                       cache_dir=str(tmp_path))
    dm.setup("fit")
    lines = (shared_data / "wikitext-2" / "wiki.valid.tokens").read_text(encoding="utf-8").splitlines()
    documents = [line for line in lines if line.strip()]
    tokens_in = minilm_tokenizer(documents, add_special_tokens=False)["input_ids"]
    blocks = dm.datasets["train"]["input_ids"]
    # Token count in == token count out, and the very same tokens in order.
    content = np.concatenate([np.asarray(b[1:-1]) for b in blocks])
    non_separator = content[content != minilm_tokenizer.sep_token_id]
    assert len(non_separator) == sum(map(len, tokens_in)) == dm.stats["train"]["tokens"]
    assert np.array_equal(non_separator, np.concatenate([np.asarray(t) for t in tokens_in]))
    assert (content == minilm_tokenizer.sep_token_id).sum() == len(documents) - 1  # one separator between documents
    assert all(len(b) == max_length for b in blocks[:-1]) and 0 < len(blocks[-1]) <= max_length
    assert all(b[0] == minilm_tokenizer.cls_token_id and b[-1] == minilm_tokenizer.sep_token_id for b in blocks)
    # Only the short last block is ever padded: every other row of every batch is a full, unpadded block.
    seen, padded_rows = 0, 0
    for batch in dm.train_dataloader():
        real = batch["attention_mask"].sum(dim=1)
        padded_rows += int((real < batch["input_ids"].shape[1]).sum())
        pads = (batch["input_ids"] == minilm_tokenizer.pad_token_id).sum(dim=1)
        assert (pads == batch["input_ids"].shape[1] - real).all()
        assert batch["labels"].shape == batch["input_ids"].shape
        seen += len(batch["input_ids"])
    assert seen == len(blocks)
    assert padded_rows == (len(blocks[-1]) < max_length)


def test_segments_keep_every_token_with_token_types(shared_data, minilm_tokenizer, tmp_path):
    dm = MLMDataModule(MINILM, dataset="wikitext", dataset_config="wikitext-2-v1", train_split="test",
                       val_split=None, packing="segments", max_length=64, max_documents=400,
                       data_root=str(shared_data), cache_dir=str(tmp_path))
    dm.setup("fit")
    data = dm.datasets["train"]
    lines = (shared_data / "wikitext-2" / "wiki.test.tokens").read_text(encoding="utf-8").splitlines()
    documents = [line for line in lines if line.strip()][:400]
    tokens_in = sum(map(len, minilm_tokenizer(documents, add_special_tokens=False)["input_ids"]))
    special = set(minilm_tokenizer.all_special_ids)
    tokens_out = sum(sum(t not in special for t in ids) for ids in data["input_ids"])
    assert tokens_out == tokens_in
    pairs = 0
    for ids, types in zip(data["input_ids"], data["token_type_ids"], strict=True):
        assert len(ids) <= 64 and ids[0] == minilm_tokenizer.cls_token_id and ids[-1] == minilm_tokenizer.sep_token_id
        seps = [i for i, t in enumerate(ids) if t == minilm_tokenizer.sep_token_id]
        if len(seps) == 2:  # [CLS] A [SEP] B [SEP]: A and its [SEP] type 0, B and the last [SEP] type 1
            pairs += 1
            assert types == [0] * (seps[0] + 1) + [1] * (len(ids) - seps[0] - 1)
        else:
            assert len(seps) == 1 and set(types) == {0}
    assert pairs > 100
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels", "unpad_index", "cu_seqlens",
                          "masked_index"}
    # The flat positions of the real and of the masked tokens, built on the host for the encoder and the MLM head.
    assert torch.equal(batch["unpad_index"], batch["attention_mask"].flatten().nonzero().squeeze(1))
    assert torch.equal(batch["masked_index"], (batch["labels"].flatten() != -100).nonzero().squeeze(1))
    padded = batch["attention_mask"] == 0
    assert padded.any() and (batch["labels"][padded] == -100).all()


def test_validation_segments_are_the_same_whatever_the_training_seed(shared_data, tmp_path):
    """BERT segments split each document at seeded points. The validation examples (and so their fixed masks) take
    `val_mask_seed`, so that the seeds of a sweep validate on the same examples; the training ones take `seed`."""

    def splits(seed: int) -> dict[str, list[list[int]]]:
        dm = MLMDataModule(MINILM, dataset="wikitext", dataset_config="wikitext-2-v1", train_split="test",
                           val_split="validation", packing="segments", max_length=64, max_documents=300,
                           max_val_documents=300, data_root=str(shared_data), cache_dir=str(tmp_path), seed=seed)
        dm.setup("fit")
        return {name: dm.datasets[name]["token_type_ids"] for name in ("train", "validation")}

    zero, five = splits(0), splits(5)
    assert five["validation"] == zero["validation"]
    assert five["train"] != zero["train"]


def test_byte_level_segments_tokenize_each_document_as_running_text(shared_data, tmp_path):
    """BERT segments over a byte-level BPE tokenizer: the tokens of each example, specials removed, are those of
    the document tokenized whole (each sentence tokenized alone lost its word-start `Ġ`: `ĠThe` became `The`)."""
    from data import save_tokenizer, train_tokenizer
    from data.mlm import segment_examples

    lines = [line for line in (shared_data / "wikitext-2" / "wiki.valid.tokens").read_text(encoding="utf-8")
             .splitlines() if line.strip()]
    bpe = train_tokenizer(lines[:2000], "byte_level_bpe", vocab_size=2000)
    save_tokenizer(bpe, tmp_path / "bpe")
    documents = [line for line in lines if line.count(". ") >= 3][:40]
    out = segment_examples({"text": documents}, list(range(len(documents))), tokenizer=bpe, max_length=512, seed=0)
    template = {bpe.cls_token_id, bpe.sep_token_id}  # <s> and </s> (the text's <unk> stays)
    got = [[t for t in ids if t not in template] for ids in out["input_ids"]]
    assert len(got) == len(documents)  # 512 tokens hold each of these documents: one example each
    assert got == bpe([d.strip() for d in documents], add_special_tokens=False)["input_ids"]
    assert any(bpe.convert_ids_to_tokens(ids).count("</s>") == 3 for ids in out["input_ids"])  # A </s></s> B


def test_documents_without_text_are_left_out_or_refused(tmp_path):
    """Empty cells of a table are no documents (a null was read as the text 'None'); a file with no text at all is
    refused by name; BERT's blank-line documents split on whitespace-only lines and Windows line ends too."""
    table = tmp_path / "docs.jsonl"
    table.write_text('{"text": "first doc here."}\n{"text": null}\n{"text": "  "}\n{"text": "last one."}\n')
    assert read_documents(table) == ["first doc here.", "last one."]
    blank = tmp_path / "blank.csv"
    blank.write_text("text\n\" \"\n\"\"\n")
    white = tmp_path / "white.txt"
    white.write_text("\n\n   \n\n")
    for path in (blank, white):
        dm = MLMDataModule(MINILM, train_files=[str(path)], val_files=None, cache_dir=str(tmp_path / "cache"))
        with pytest.raises(DataError, match=rf"{path.name} holds no document: .*only blank lines or empty values"):
            dm.setup("fit")
    blocks = tmp_path / "blocks.txt"
    blocks.write_bytes(b"Doc one, line one.\r\nDoc one, line two.\r\n \r\nDoc two.\r\n\t\r\nDoc three.\r\n")
    assert read_documents(blocks, blank_line_documents=True) == [
        "Doc one, line one. Doc one, line two.", "Doc two.", "Doc three."]


def test_second_run_reads_the_cache_and_does_not_tokenize(shared_data, tmp_path, monkeypatch):
    settings = dict(dataset="wikitext", dataset_config="wikitext-2-v1", train_split="validation", val_split="test",
                    max_length=128, data_root=str(shared_data), cache_dir=str(tmp_path))
    first = MLMDataModule(MINILM, **settings)
    first.setup("fit")
    cache_files = sorted(p.name for p in tmp_path.glob("mlm-*.arrow"))
    # each split's tokenized documents and its blocks, and the validation masks
    assert [name.split("-")[1] for name in cache_files] == ["blocks", "blocks", "masks", "test", "validation"]

    second = MLMDataModule(MINILM, **settings)
    calls = []
    monkeypatch.setattr(type(second.tokenizer), "__call__", lambda *a, **k: calls.append(1))
    second.setup("fit")
    assert calls == []  # nothing was tokenized
    assert second.datasets["train"]["input_ids"] == first.datasets["train"]["input_ids"]
    assert sorted(p.name for p in tmp_path.glob("mlm-*.arrow")) == cache_files
    # Another block length packs the same tokens anew (new blocks and masks), without tokenizing again.
    monkeypatch.undo()
    third = MLMDataModule(MINILM, **{**settings, "max_length": 64})
    monkeypatch.setattr(type(third.tokenizer), "__call__", lambda *a, **k: calls.append(1))
    third.setup("fit")
    assert calls == []
    assert len(list(tmp_path.glob("mlm-*.arrow"))) == 8
    assert set(map(len, third.datasets["train"]["input_ids"][:-1])) == {64}
    # Another setting of the training text is another tokenized cache of it (and its blocks); validation's stay.
    monkeypatch.undo()
    fourth = MLMDataModule(MINILM, **{**settings, "max_documents": 100})
    fourth.setup("fit")
    assert len(list(tmp_path.glob("mlm-*.arrow"))) == 10


def test_max_documents_filter_is_logged(shared_data, tmp_path, caplog):
    dm = MLMDataModule(MINILM, dataset="wikitext", dataset_config="wikitext-2-v1", train_split="validation",
                       val_split=None, max_length=128, max_documents=50, data_root=str(shared_data),
                       cache_dir=str(tmp_path))
    with caplog.at_level(logging.INFO, logger="data.mlm"):
        dm.setup("fit")
    assert "max_documents=50 keeps 50 of 2461 documents; 2411 left out" in caplog.text
    assert dm.stats["train"]["documents"] == 50


def test_same_length_batches_under_a_distributed_sampler():
    """Each rank gets the same number of batches (a rank with one batch more would hang the others at the end of
    the epoch), all full batches are of one length, and only the last batch mixes lengths."""
    lengths = [8] * 37 + [3]
    seen, counts = [], []
    for rank in range(2):
        sampler = DistributedSampler(range(len(lengths)), num_replicas=2, rank=rank, shuffle=True, seed=0)
        batches = list(SameLengthBatchSampler(sampler, batch_size=4, drop_last=False, lengths=lengths))
        assert all(len({lengths[i] for i in batch}) == 1 for batch in batches[:-1])
        assert len(batches) == len(SameLengthBatchSampler(sampler, 4, False, lengths))
        counts.append(len(batches))
        seen += [i for batch in batches for i in batch]
    assert counts == [5, 5]  # 19 blocks per rank
    assert set(seen) == set(range(len(lengths)))  # every block on some rank (one repeated to even out the shards)


def test_each_rank_loads_its_shard_and_lightning_leaves_it(shared_data, tmp_path):
    """Under distributed training the datamodule shards the blocks itself (a seeded DistributedSampler), so
    Lightning, which wraps any loader whose sampler is not a DistributedSampler, leaves the loader as it is; every
    rank has the same number of batches."""
    dm = MLMDataModule(MINILM, dataset="wikitext", dataset_config="wikitext-2-v1", train_split="validation",
                       val_split=None, max_length=128, batch_size=8, max_documents=300, data_root=str(shared_data),
                       cache_dir=str(tmp_path))
    dm.setup("fit")
    blocks = len(dm.datasets["train"])
    shards, counts = [], []
    for rank in range(2):
        dm.distributed = lambda rank=rank: {"num_replicas": 2, "rank": rank}
        loader = dm.train_dataloader()
        assert isinstance(loader.sampler, DistributedSampler) and loader.sampler.rank == rank
        assert isinstance(loader.batch_sampler, SameLengthBatchSampler)
        sizes = [len(batch["input_ids"]) for batch in loader]
        counts.append(len(sizes))
        shards.append(sum(sizes))
    assert counts[0] == counts[1]
    assert shards == [(blocks + 1) // 2] * 2


def test_lightning_can_still_swap_the_sampler(shared_data, tmp_path):
    """What Lightning's data connector does when it must replace a sampler (e.g. `overfit_batches`): record the
    loader's arguments, then rebuild it around another sampler. The rebuilt loader keeps litbert's classes."""
    dm = MLMDataModule(MINILM, dataset="wikitext", dataset_config="wikitext-2-v1", train_split="validation",
                       val_split=None, max_length=128, batch_size=8, max_documents=300, data_root=str(shared_data),
                       cache_dir=str(tmp_path))
    dm.setup("fit")
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        loader = dm.train_dataloader()
    sampler = SequentialSampler(loader.dataset)
    rebuilt = _update_dataloader(loader, sampler)
    assert isinstance(rebuilt, ResumableLoader) and isinstance(rebuilt.batch_sampler, SameLengthBatchSampler)
    assert rebuilt.batch_sampler.sampler is sampler
    assert sum(len(batch["input_ids"]) for batch in rebuilt) == len(dm.datasets["train"])


def test_a_text_file_is_read_line_by_line_into_the_same_documents(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes("\ufeffone\r\ntwo\rthree\x0cfour\u2028five\n\n   \nsix".encode())
    assert list(iter_documents(path)) == read_documents(path) == ["one", "two", "three", "four", "five", "six"]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nbroken \xff here\n")
    with pytest.raises(DataError, match="line 2"):
        list(iter_documents(bad))


@pytest.mark.parametrize("streaming", [False, True])
def test_a_hub_table_gives_tokenizer_training_and_packing_the_same_documents(monkeypatch, tmp_path, streaming):
    """The tokenizer is trained on exactly the documents that are packed: a hub table's non-blank texts, in order,
    the first `max_documents` of them, whether the table is downloaded or streamed."""
    import data.tokenizers

    rows = [f"review {i} " + "great film " * (i % 5) for i in range(40)]
    rows[3], rows[10] = "  ", ""

    def fake_load_dataset(name, config, split, streaming=False):
        assert (name, config, split) == ("someone/reviews", None, "train")
        table = datasets.Dataset.from_dict({"body": rows})
        return table.to_iterable_dataset() if streaming else table

    seen = []
    train = data.tokenizers.train_tokenizer

    def spy(texts, **settings):
        seen.append(list(texts))
        return train(seen[-1], **settings)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr(data.tokenizers, "train_tokenizer", spy)
    dm = MLMDataModule(str(tmp_path / "tokenizer"), train_tokenizer=data.tokenizers.TokenizerTraining(vocab_size=59),
                       dataset="someone/reviews", text_column="body", val_split=None, max_documents=30,
                       max_length=32, streaming=streaming, cache_dir=str(tmp_path / "cache"))
    kept = [row for row in rows if row.strip()][:30]
    assert seen == [kept]
    if not streaming:
        dm.setup("fit")
        assert dm.stats["train"]["documents"] == 30
        tokens = sum(len(dm.tokenizer(text, add_special_tokens=False)["input_ids"]) for text in kept)
        assert dm.stats["train"]["tokens"] == tokens


def test_a_resume_with_another_vocabulary_of_the_same_size_is_refused(shared_data, tmp_path):
    """Two WordPiece vocabularies of 400 tokens, trained on other text: the model fits either, and would read the
    ids of the second as other tokens. A resume (the datamodule's checkpoint state) with the other one is refused,
    naming data.tokenizer; with the same tokenizer saved in another folder (a moved run, its export's copy) it
    goes on."""
    from data.tokenizers import save_tokenizer, train_tokenizer

    lines = [line for line in (shared_data / "wikitext-2" / "wiki.valid.tokens").read_text().splitlines()
             if line.strip()]
    first = train_tokenizer(lines[:1000], vocab_size=400)
    save_tokenizer(first, tmp_path / "first")
    save_tokenizer(first, tmp_path / "copy")
    save_tokenizer(train_tokenizer(lines[1000:2000], vocab_size=400), tmp_path / "other")
    text = tmp_path / "train.txt"
    text.write_text("\n".join(lines[:50]) + "\n")

    def datamodule(tokenizer: str) -> MLMDataModule:
        return MLMDataModule(str(tmp_path / tokenizer), train_files=str(text), max_length=64)

    saved = datamodule("first").state_dict()
    other = datamodule("other")
    assert other.vocab_size == 400
    with pytest.raises(DataError, match=rf"^The checkpoint to resume was trained with another tokenizer than "
                                        rf"data.tokenizer={tmp_path / 'other'}: the model would read its ids as other"):
        other.load_state_dict(saved)
    datamodule("copy").load_state_dict(saved)


def test_only_segments_batch_in_an_order_that_another_number_of_processes_keeps(tmp_path):
    """A resume on another number of processes with the same global batch (`EncoderTask._check_global_batch`) needs
    batches that are the epoch permutation's consecutive examples whatever the split: BERT-style segments are;
    packed blocks wait per process for the short last one, and a stream is dealt out per process."""
    text = tmp_path / "train.txt"
    text.write_text("Some text. And more of it.\n")

    def order(**settings) -> str | None:
        return MLMDataModule(MINILM, train_files=str(text), max_length=64, **settings).order_per_process()

    assert order(packing="segments") is None
    assert order().startswith("data.packing full_sentences batches each process's blocks by length")
    assert order(streaming=True).startswith("data.streaming deals the documents out to the processes")


def test_an_empty_dataset_mapped_into_the_cache_leaves_its_own_file_where_it_is(tmp_path):
    """`datasets` maps an empty dataset to itself, its cache files those of the dataset it was read from (a hub
    split's, in datasets' own cache): the map writes nothing, and that file stays where it is, not moved into the
    cache under its own name."""
    from datasets.arrow_writer import ArrowWriter

    from data.sources import map_into_cache

    source, cache = tmp_path / "source.arrow", tmp_path / "cache"
    cache.mkdir()
    with ArrowWriter(features=datasets.Features({"text": datasets.Value("string")}), path=str(source)) as writer:
        writer.finalize()
    mapped = map_into_cache(datasets.Dataset.from_file(str(source)), lambda batch: {"length": []},
                            cache / "mlm-train-k.arrow", batched=True, remove_columns=["text"])
    assert len(mapped) == 0 and source.is_file() and list(cache.iterdir()) == []
