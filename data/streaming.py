"""Streaming MLM data: documents are read as they come (a hub dataset streamed by `datasets`, or local files one at
a time), tokenized and packed into FULL-SENTENCES blocks on the fly, for corpora larger than the disk. Nothing is
cached; a stream has no length, so training runs by `trainer.max_steps`.

Sharding. Each process of a distributed run and each of its loader workers is one shard: with `shards` = world size
x workers, shard `s` takes documents s, s + shards, s + 2 shards, ... of the (shuffled) stream, so no document is
seen twice in a pass and every one is seen once. Every shard reads the whole stream and tokenizes its own
documents only.

Order. Documents pass through a shuffle buffer (`shuffle_buffer` of them) drawn from (seed, pass): the same order
on every shard and on every rerun. Dynamic masks are keyed by (seed, pass, block number), as for cached data.

Resuming. `StreamingLoader.state_dict()` is (pass, batches handed out). Resuming replays the pass from its start
and drops the batches already trained on, before masking them: the same next batch and masks as the uninterrupted
run, at the cost of reading and tokenizing the skipped part again. With several loader workers the loader takes
their batches in turn, which is what the skip counts on; near the end of a pass, when one worker runs out before
the others, a resumed run may differ from the uninterrupted one by the order of those last batches. Dynamic masks
depend on the number of shards (a block's number counts within its shard): change `num_workers` or the world size
and the masks change.

Workers. Each pass sends the stream, with its pass number and the batches to skip, to new loader workers: the
workers do not persist across passes (`persistent_workers`), since a persistent worker's copy of the stream would
never learn them.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from transformers import PreTrainedTokenizerFast

from data.loading import Batch

if TYPE_CHECKING:
    from data.mlm import BlockPacker

CHUNK = 1000  # documents tokenized at a time


def shuffled(documents: Iterable[str], buffer: int, rng: random.Random) -> Iterator[str]:
    """`documents` through a shuffle buffer of `buffer` items (in order when `buffer` <= 1)."""
    if buffer <= 1:
        yield from documents
        return
    pool: list[str] = []
    for document in documents:
        if len(pool) < buffer:
            pool.append(document)
            continue
        i = rng.randrange(buffer)
        yield pool[i]
        pool[i] = document
    rng.shuffle(pool)
    yield from pool


class PackedStream(IterableDataset):
    """Batches of packed, masked blocks from a stream of documents (see the module's docstring). Yields whole
    batches: the loader does no batching of its own. With `pad_last_batch`, a pass's last, short batch is filled up
    to the batch size (`data.collate`)."""

    def __init__(self, documents: Callable[[int], Iterable[str]], tokenizer: PreTrainedTokenizerFast,
                 packer: Callable[[], BlockPacker], batch_size: int, collate: Callable[[list[dict[str, Any]]], Any],
                 *, seed: int, shuffle_buffer: int, rank: int = 0, world_size: int = 1,
                 pad_last_batch: bool = False) -> None:
        self.documents, self.tokenizer, self.packer = documents, tokenizer, packer
        self.batch_size, self.collate, self.pad_last_batch = batch_size, collate, pad_last_batch
        self.seed, self.shuffle_buffer = seed, shuffle_buffer
        self.rank, self.world_size = rank, world_size
        self.epoch, self.skip = 0, 0  # set by StreamingLoader before each pass

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        shards, shard = self.world_size * workers, self.rank * workers + worker
        # The loader takes batches from its workers in turn: worker w handed out these of the batches to skip.
        skip = self.skip // workers + (1 if worker < self.skip % workers else 0)
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        mine = itertools.islice(shuffled(self.documents(self.epoch), self.shuffle_buffer, rng), shard, None, shards)
        packer = self.packer()
        pending: list[dict[str, Any]] = []
        blocks = 0

        def take(table: pa.Table) -> None:
            nonlocal blocks
            for row in table.to_pylist():
                row["example_index"] = blocks * shards + shard  # unique over the shards
                pending.append(row)
                blocks += 1

        def ready(final: bool) -> Iterator[dict[str, torch.Tensor]]:
            nonlocal skip, pending
            while len(pending) >= self.batch_size or (final and pending):
                if final and len({len(row["input_ids"]) for row in pending[:self.batch_size]}) > 1:
                    pending.sort(key=lambda row: -len(row["input_ids"]))  # the short last block goes last
                batch, pending = pending[:self.batch_size], pending[self.batch_size:]
                if skip:
                    skip -= 1
                    continue
                fill = self.batch_size - len(batch) if self.pad_last_batch else 0
                yield self.collate(Batch(batch, self.epoch, fill))

        while chunk := list(itertools.islice(mine, CHUNK)):
            ids = self.tokenizer(chunk, add_special_tokens=False, return_attention_mask=False,
                                 return_token_type_ids=False, verbose=False)["input_ids"]
            take(packer.add(pa.array(ids, pa.list_(pa.int32()))))
            yield from ready(final=False)
        take(packer.finish())
        yield from ready(final=True)


class StreamingLoader(DataLoader):
    """A loader over a `PackedStream` whose position (pass, batches handed out) is saved in checkpoints, like
    `ResumableLoader`'s; each iteration is the next pass over the stream, read by new workers (not persistent: see
    the module's docstring)."""

    def __init__(self, stream: PackedStream, *, num_workers: int = 0, generator: torch.Generator | None = None,
                 fetched_ahead: Callable[[], int] = lambda: 0) -> None:
        super().__init__(stream, batch_size=None, num_workers=num_workers, generator=generator)
        self._position = {"epoch": 0, "batches": 0}  # where the next batch comes from
        self._resume: dict[str, int] | None = None
        self.fetched_ahead = fetched_ahead

    def state_dict(self) -> dict[str, int]:
        """The position of the next batch to train on: batches handed out, less those fetched ahead of training."""
        return {"epoch": self._position["epoch"], "batches": self._position["batches"] - self.fetched_ahead()}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        wanted = (int(state_dict["epoch"]), int(state_dict["batches"]))
        if wanted < (self._position["epoch"], self._position["batches"]):
            return  # behind where this loader is: a stale copy (Lightning hands a checkpoint's position back again)
        self._resume = {"epoch": wanted[0], "batches": wanted[1]}

    def __iter__(self) -> Iterator[Any]:
        return self._batches()

    def _batches(self) -> Iterator[Any]:
        if self._resume is not None:
            epoch, skip = self._resume["epoch"], self._resume["batches"]
            self._resume = None
        else:  # the next pass; a pass left unfinished by the last iteration is not continued
            epoch, skip = self._position["epoch"] + (1 if self._position["batches"] else 0), 0
        self.dataset.epoch, self.dataset.skip = epoch, skip
        self._position = {"epoch": epoch, "batches": skip}
        for batch in super().__iter__():
            self._position["batches"] += 1  # counted when handed out: the consumer now has it
            yield batch
        self._position = {"epoch": epoch + 1, "batches": 0}  # a pass ended: a checkpoint now resumes at the next


def fetched_ahead(trainer: Any) -> int:
    """Training batches Lightning has taken from the loader but not trained on yet: from a loader without a length
    it fetches one batch ahead, to know which batch is the last. (Lightning's `_PrefetchDataFetcher.batches`.)"""
    fetcher = getattr(getattr(trainer, "fit_loop", None), "_data_fetcher", None)
    return len(getattr(fetcher, "batches", None) or [])
