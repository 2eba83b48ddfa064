"""Predictions of the unlabelled test sets (GLUE's) through `trainer.predict`, for the files the benchmark's server
takes (the datamodule's `write_submission`).

The task's `predict_step` gives each batch's predictions (class ids, or scores for regression) and the datamodule's
`predict_dataloader` one loader per test set. Under a distributed strategy Lightning gives each rank its share of
every set without repeating an example, and `InFileOrder` puts the ranks' predictions back in the order of the file,
on every rank. With `trainer.limit_predict_batches` a part of each set is predicted (a quick check of the path),
and none is given for the files: the server takes whole sets only.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch.distributed as dist
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info

from tasks.base import EncoderTask


class InFileOrder(BasePredictionWriter):
    """The predictions of every predict loader, gathered from all ranks in dataset order (`predictions`, a list of
    floats a loader), and the size of each loader's dataset (`sizes`)."""

    def __init__(self) -> None:
        super().__init__(write_interval="epoch")
        self.predictions: list[list[float]] = []
        self.sizes: list[int] = []

    def write_on_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, predictions: Any,
                           batch_indices: Any) -> None:
        loaders = trainer.predict_dataloaders
        loaders = loaders if isinstance(loaders, list) else [loaders]
        if len(loaders) == 1:
            predictions = [predictions]  # Lightning unnests a single loader's batches, not their indices
        mine = [([index for batch in indices for index in batch],
                 [value for batch in outputs for value in batch.float().tolist()])
                for outputs, indices in zip(predictions, batch_indices, strict=True)]
        if any(len(indices) != len(values) for indices, values in mine):
            raise RuntimeError("Lightning recorded no dataset index for some predictions; the predict loaders must "
                               "be torch DataLoaders.")
        ranks = [mine]
        if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
            ranks = [None] * trainer.world_size
            dist.all_gather_object(ranks, mine)
        self.predictions = [[value for _, value in sorted(pair for rank in ranks for pair in zip(*rank[loader],
                                                                                                  strict=True))]
                            for loader in range(len(mine))]
        self.sizes = [len(loader.dataset) for loader in loaders]


def predict_test_sets(trainer: L.Trainer, model: EncoderTask, data: L.LightningDataModule) -> dict[str, list[float]]:
    """The predictions of the model as it is (train.py has loaded the best checkpoint into it) for every unlabelled
    test set of `data`, whole and in file order, on every rank; empty where the data has no such set or only a part
    of the sets was predicted (`trainer.limit_predict_batches`)."""
    data.setup("predict")
    splits = list(getattr(data, "test_split_names", []))
    if not splits:
        return {}
    order = InFileOrder()
    trainer.callbacks.append(order)  # for this call only: fit, validate and test have no use for it
    try:
        trainer.predict(model, datamodule=data, return_predictions=False)
    finally:
        trainer.callbacks.remove(order)
    if not order.predictions or any(len(values) < size for values, size in zip(order.predictions, order.sizes,
                                                                                strict=True)):
        counts = ", ".join(f"{split} {len(values)} of {size}"  # none at all for limit_predict_batches 0
                           for split, values, size in zip(splits, order.predictions, order.sizes, strict=False))
        rank_zero_info(f"litbert: trainer.limit_predict_batches={trainer.limit_predict_batches}: predicted "
                       f"{f'a part of the test sets ({counts})' if counts else 'none of the test sets'}; the "
                       f"submission files hold whole sets, so none was written.")
        return {}
    return dict(zip(splits, order.predictions, strict=True))
