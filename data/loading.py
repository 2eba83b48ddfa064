"""Loading batches so that a run can stop anywhere and resume at exactly the next batch.

A run killed mid-epoch and resumed from a checkpoint must see the batches the uninterrupted run would have seen,
in the same order, with the same masks. So every random choice of the input pipeline is a function of
(seed, epoch, position), never of a generator's hidden state:

- `EpochRandomSampler` draws the epoch's permutation from (seed, epoch), as `DistributedSampler` does per rank;
  under distributed training the datamodules use `DistributedSampler` itself, seeded the same way.
- The batch samplers (`Batches`, `LengthGroupedBatchSampler`, `SameLengthBatchSampler`) can start at the k-th
  batch of an epoch: they recompute the epoch's batches (indices only, no data) and skip k.
- `ResumableLoader` counts the batches it has handed out in the current epoch. Its `state_dict()` is that count;
  Lightning stores it in every checkpoint (a loader with `state_dict` is resumable to Lightning) and hands it back
  on resume, and the next epoch iteration skips that many batches without loading them.
- Under `Batches`, batch k of every rank together are the examples k x size to (k + 1) x size of the epoch's one
  permutation (size = batch size x ranks; `DistributedSampler` deals it out round-robin). A position saved by
  another batch size or number of ranks therefore converts through the examples it has consumed
  (`ResumableLoader.load_state_dict`); whether a run may resume so is `EncoderTask`'s rule.
- Dynamic MLM masks are keyed by (seed, epoch, example index) (`data.masking`), so skipping batches skips their
  masks too. The epoch travels with the work: the batch sampler, in the main process, yields each batch's indices as
  a `Batch` that carries its epoch, and the examples fetched for it (`BatchDataset`) carry it on to the collator.
  Loader workers may therefore live across epochs (`persistent_workers`): their copy of the collator, made once,
  needs no news of the epoch.
- With `pad_last_batch`, a batch sampler asks for the epoch's last, short batch to be filled up to the batch size
  (`Batch.fill`), so that it has the shape of the others; the collator appends filler rows (`data.collate`).

`ShardSampler` splits evaluation sets across ranks without the padding `DistributedSampler` adds (it repeats
examples to even out the shards), so distributed metrics equal single-process ones.

Lightning wraps a loader's sampler in a `DistributedSampler` unless `loader.sampler` already is one; with a batch
sampler, `DataLoader.sampler` is an unused default, so `ResumableLoader.sampler` reports the batch sampler's own.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from data.sources import DataError


class EpochRandomSampler(RandomSampler):
    """A random permutation per epoch, drawn from (seed, epoch) alone: epoch e's order is the same whether or not
    the run stopped and resumed in between. `set_epoch` is called by Lightning before each epoch."""

    def __init__(self, data_source: Sequence[Any], seed: int = 0) -> None:
        super().__init__(data_source)
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()


class ShardSampler(DistributedSampler):
    """Evaluation shards: rank r takes examples r, r + world, r + 2 * world, ... in order, with no example
    repeated, so shards may differ in size by one. Metrics reduced across ranks then equal one process's."""

    def __init__(self, dataset: Sequence[Any], num_replicas: int, rank: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False, drop_last=False)
        self.num_samples = len(range(rank, len(dataset), num_replicas))
        self.total_size = len(dataset)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, len(self.dataset), self.num_replicas))


class Batch(list):
    """A batch's items (the example indices a batch sampler yields, then the examples fetched for them) with what
    the collator must know beyond them: the `epoch`, key of dynamic masks, and the number of filler rows to append
    (`fill`, from `pad_last_batch`). Made by the batch sampler in the main process, it travels with the indices to
    the worker that fetches and collates them, whose copy of the collator never hears from the main process again
    when the workers persist across epochs."""

    def __init__(self, items: Iterable[Any] = (), epoch: int = 0, fill: int = 0) -> None:
        super().__init__(items)
        self.epoch, self.fill = epoch, fill


class BatchDataset(Dataset):
    """`dataset` as a loader with a batch sampler fetches it, a `Batch` of indices at a time (`__getitems__`): the
    examples come back as a `Batch` with the indices' epoch and fill."""

    def __init__(self, dataset: Sequence[Any]) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[int]) -> Batch:
        getitems = getattr(self.dataset, "__getitems__", None)  # a datasets.Dataset reads a batch in one go
        rows = getitems(list(indices)) if getitems is not None else [self.dataset[i] for i in indices]
        return Batch(rows, getattr(indices, "epoch", 0), getattr(indices, "fill", 0))


class ResumableBatches(BatchSampler):
    """A batch sampler that starts at batch `skip` of the epoch, set by `ResumableLoader` before each iteration (a
    loader with workers asks for the iterator twice as it starts, so reading `skip` must not reset it). Subclasses
    write `batches()`, the whole epoch's batches in order; they come out as `Batch`es of their epoch. The epoch is
    the sampler's (Lightning calls `set_epoch` on the sampler, not on the batch sampler); an unshuffled sampler has
    none, and is at epoch 0. With `pad_last_batch`, a batch shorter than `batch_size` (the epoch's last) asks to be
    filled up to it."""

    def __init__(self, sampler: Sampler[int] | Sequence[int], batch_size: int, drop_last: bool,
                 pad_last_batch: bool = False) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.pad_last_batch = pad_last_batch
        self.skip = 0

    @property
    def epoch(self) -> int:
        return getattr(self.sampler, "epoch", 0)

    def batches(self) -> Iterator[list[int]]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Batch]:
        skip, epoch = self.skip, self.epoch
        size = self.batch_size if self.pad_last_batch else 0
        return (Batch(indices, epoch, max(0, size - len(indices)))
                for indices in itertools.islice(self.batches(), skip, None))


class Batches(ResumableBatches):
    """Consecutive batches of `sampler`'s order, as `BatchSampler`."""

    def batches(self) -> Iterator[list[int]]:
        return BatchSampler.__iter__(self)


class LengthGroupedBatchSampler(ResumableBatches):
    """Batches of similar length: take `megabatch` batches' worth of indices from `sampler`, sort them by
    length (longest first) and cut them into batches. Randomness comes from `sampler` alone.

    `drop_last` drops only the last, short batch of the epoch, as `BatchSampler` does.
    """

    def __init__(self, sampler: Sampler[int] | Sequence[int], batch_size: int, drop_last: bool,
                 lengths: Sequence[int], megabatch: int = 50, pad_last_batch: bool = False) -> None:
        super().__init__(sampler, batch_size, drop_last, pad_last_batch)
        self.lengths = lengths
        self.megabatch = megabatch

    def _sorted_chunks(self, pool: list[int]) -> Iterator[list[int]]:
        pool.sort(key=lambda index: -self.lengths[index])
        for start in range(0, len(pool), self.batch_size):
            yield pool[start:start + self.batch_size]

    def batches(self) -> Iterator[list[int]]:
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


class SameLengthBatchSampler(ResumableBatches):
    """Full batches whose examples all have exactly the same length, so they need no padding.

    Made for packed MLM blocks, which all have the block length except the last one. Each full batch comes out as
    soon as `sampler` has filled it; what is left at the end of the epoch (fewer than `batch_size` examples of
    each length) is batched together and padded, so an epoch has ceil(n / batch_size) batches whatever the lengths,
    the same number on every rank of a distributed run. `drop_last` drops the final short batch.
    """

    def __init__(self, sampler: Sampler[int] | Sequence[int], batch_size: int, drop_last: bool,
                 lengths: Sequence[int], pad_last_batch: bool = False) -> None:
        super().__init__(sampler, batch_size, drop_last, pad_last_batch)
        self.lengths = lengths

    def batches(self) -> Iterator[list[int]]:
        open_batches: dict[int, list[int]] = {}
        for index in self.sampler:
            batch = open_batches.setdefault(self.lengths[index], [])
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                open_batches[self.lengths[index]] = []
        rest = [index for batch in open_batches.values() for index in batch]
        for start in range(0, len(rest), self.batch_size):
            batch = rest[start:start + self.batch_size]
            if len(batch) == self.batch_size or not self.drop_last:
                yield batch


class ResumableLoader(DataLoader):
    """A `DataLoader` over a `ResumableBatches` batch sampler whose position in the epoch is saved in checkpoints.

    `state_dict()` holds the epoch and the number of batches handed out in it; `load_state_dict()` makes the next
    iteration of that same epoch skip them (at the index level: skipped batches are never loaded). A saved position
    from another epoch is dropped: Lightning moves on to the next epoch when a checkpoint was taken at an epoch's
    end. The dataset is read through `BatchDataset`, so that the collate function receives each batch's epoch and
    fill with its examples.

    Iteration starts lazily, at the first batch, so that the epoch Lightning sets after creating the iterator is
    the one used, also with worker processes (which would otherwise pre-fetch from the previous epoch's order).
    """

    def __init__(self, dataset: Sequence[Any], *args: Any, **kwargs: Any) -> None:
        # (Lightning rebuilds a loader from its arguments or attributes: the dataset may come wrapped already.)
        super().__init__(dataset if isinstance(dataset, BatchDataset) else BatchDataset(dataset), *args, **kwargs)
        if not isinstance(self.batch_sampler, ResumableBatches):
            raise TypeError(f"ResumableLoader needs a ResumableBatches batch sampler, got "
                            f"{type(self.batch_sampler).__name__}.")
        # The sampler the batches are drawn from, so that Lightning sees a DistributedSampler when there is one.
        object.__setattr__(self, "sampler", self.batch_sampler.sampler)
        self._position = {"epoch": 0, "batches": 0}
        self._resume: dict[str, int] | None = None

    @property
    def processes(self) -> int:
        """The ranks that share each epoch: the distributed sampler's, 1 without one."""
        return getattr(self.sampler, "num_replicas", 1)

    def state_dict(self) -> dict[str, int]:
        return {**self._position, "batch_size": self.batch_sampler.batch_size, "processes": self.processes}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        """Resume at a saved position. One saved by another batch size or number of processes is converted through
        the examples it consumed (`converted`); a checkpoint from before they were kept is taken as this loader's."""
        batches = int(state_dict["batches"])
        size = int(state_dict.get("batch_size", self.batch_sampler.batch_size))
        processes = int(state_dict.get("processes", self.processes))
        if (size, processes) != (self.batch_sampler.batch_size, self.processes):
            batches = self.converted(batches, size, processes)
        self._resume = {"epoch": int(state_dict["epoch"]), "batches": batches}

    @property
    def resuming(self) -> dict[str, int] | None:
        """The position (epoch, batches) the next iteration starts at, set by `load_state_dict`; None once used."""
        return self._resume

    def converted(self, batches: int, batch_size: int, processes: int) -> int:
        """This loader's batches that cover the examples of `batches` batches of `batch_size` on each of `processes`
        ranks: under `Batches` both are the epoch permutation's first examples. A position past the epoch's last
        example (the last batch was short, or the shards were evened out with repeats) is the epoch's end."""
        examples, size = batches * batch_size * processes, self.batch_sampler.batch_size * self.processes
        if examples >= len(self.dataset):
            return len(self.batch_sampler)
        if examples % size:
            raise DataError(
                f"The checkpoint to resume stopped after {batches} batches of {batch_size} on each of {processes} "
                f"process(es), {examples} examples of the epoch, which is no whole number of this run's batches of "
                f"{self.batch_sampler.batch_size} on {self.processes} process(es) ({size} examples each). Resume "
                f"with a data.batch_size and process count whose product divides {examples}, or on "
                f"{processes} process(es) with --data.batch_size {batch_size}.")
        return examples // size

    def __iter__(self) -> Iterator[Any]:
        return self._batches()

    def _batches(self) -> Iterator[Any]:
        epoch = self.batch_sampler.epoch
        skip = 0
        if self._resume is not None:
            if self._resume["epoch"] == epoch:
                skip = min(self._resume["batches"], len(self.batch_sampler))
            self._resume = None
        self.batch_sampler.skip = skip
        self._position = {"epoch": epoch, "batches": skip}
        for batch in super().__iter__():
            self._position["batches"] += 1  # counted when handed out: the consumer now has it
            yield batch


def epoch_sampler(dataset: Sequence[Any], *, shuffle: bool, seed: int,
                  distributed: dict[str, int] | None) -> Sampler[int]:
    """The index sampler of a loader: a seeded per-epoch permutation when shuffling, in order otherwise; under
    distributed training (`distributed` = {num_replicas, rank}) a seeded `DistributedSampler` for training and an
    unpadded `ShardSampler` for evaluation."""
    if distributed is not None and distributed["num_replicas"] > 1:
        if shuffle:
            return DistributedSampler(dataset, num_replicas=distributed["num_replicas"], rank=distributed["rank"],
                                      shuffle=True, seed=seed, drop_last=False)
        return ShardSampler(dataset, distributed["num_replicas"], distributed["rank"])
    return EpochRandomSampler(dataset, seed=seed) if shuffle else SequentialSampler(dataset)
