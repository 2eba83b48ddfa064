"""Predictions through `trainer.predict`: of the unlabelled test sets (GLUE's), for the files the benchmark's server
takes (the datamodule's `write_submission`), and of a file of new inputs (`python train.py predict`, the datamodule's
`predict_file` and `write_predictions`).

The task's `predict_step` gives each batch's outputs (logits, scores for regression, tag ids for token
classification) and the datamodule's `predict_dataloader` one loader per set. Under a distributed strategy
Lightning gives each rank its share of every set without repeating an example, and `InFileOrder` puts the ranks'
predictions back in the order of the file, on every rank: also where the loader batches by length or reads with
worker processes. With `trainer.limit_predict_batches` a part of each set is predicted (a quick check of the path),
and none is given for the files: the server takes whole sets only, and `train.py predict` writes a line per input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info

from encoders.checkpoints import CheckpointError, load_checkpoint
from tasks.base import EncoderTask


class InFileOrder(BasePredictionWriter):
    """The predictions of every predict loader, gathered from all ranks in dataset order (`predictions`, a list a
    loader of each example's output as a float or a list of floats), and the size of each loader's dataset
    (`sizes`)."""

    def __init__(self) -> None:
        super().__init__(write_interval="epoch")
        self.predictions: list[list[Any]] = []
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
        self.predictions = [[value for _, value in sorted((pair for rank in ranks for pair in zip(*rank[loader],
                                                                                                    strict=True)),
                                                          key=lambda pair: pair[0])]
                            for loader in range(len(mine))]
        self.sizes = [len(loader.dataset) for loader in loaders]


def predict_in_order(trainer: L.Trainer, model: EncoderTask, data: L.LightningDataModule) -> InFileOrder:
    """`trainer.predict` over the datamodule's predict loaders, its outputs gathered in dataset order."""
    order = InFileOrder()
    trainer.callbacks.append(order)  # for this call only: fit, validate and test have no use for it
    try:
        trainer.predict(model, datamodule=data, return_predictions=False)
    finally:
        trainer.callbacks.remove(order)
    return order


def predict_test_sets(trainer: L.Trainer, model: EncoderTask, data: L.LightningDataModule) -> dict[str, list[float]]:
    """The predictions (class ids, or scores) of the model as it is (train.py has loaded the best checkpoint into
    it) for every unlabelled test set of `data`, whole and in file order, on every rank; empty where the data has no
    such set or only a part of the sets was predicted (`trainer.limit_predict_batches`)."""
    data.setup("predict")
    splits = list(getattr(data, "test_split_names", []))
    if not splits:
        return {}
    order = predict_in_order(trainer, model, data)
    if not order.predictions or any(len(values) < size for values, size in zip(order.predictions, order.sizes,
                                                                                strict=True)):
        counts = ", ".join(f"{split} {len(values)} of {size}"  # none at all for limit_predict_batches 0
                           for split, values, size in zip(splits, order.predictions, order.sizes, strict=False))
        rank_zero_info(f"litbert: trainer.limit_predict_batches={trainer.limit_predict_batches}: predicted "
                       f"{f'a part of the test sets ({counts})' if counts else 'none of the test sets'}; the "
                       f"submission files hold whole sets, so none was written.")
        return {}
    return {split: model.predictions(torch.tensor(values)).tolist()
            for split, values in zip(splits, order.predictions, strict=True)}


def check_trained_head(model: EncoderTask) -> None:
    """Refuse to predict with a head that `model.pretrained` did not train: a checkpoint without the task's head,
    or whose classifier predicts other labels (the task would have started a new, untrained one)."""
    pretrained = model.hparams.get("pretrained")
    if pretrained is None:
        raise ValueError("train.py predict predicts with a trained model: set --model.pretrained to its export "
                         "(<default_root_dir>/model of the run that trained it).")
    checkpoint = load_checkpoint(pretrained)
    kind = model.head.kind
    state = checkpoint.head_states.get(kind, {})
    if "classifier.weight" not in state:
        raise CheckpointError(f"model.pretrained={pretrained} holds no trained {kind.replace('_', ' ')} head (its "
                              f"heads: {sorted(checkpoint.head_states) or 'none'}), so its predictions would come "
                              f"from an untrained classifier. Predict with the export of a model fine-tuned for this "
                              f"task.")
    multi_label = "multi_label_classification"
    if (checkpoint.problem_type == multi_label) != (model.problem_type == multi_label):
        trained, asked = (("a set of labels", "one class") if checkpoint.problem_type == multi_label
                          else ("one class", "a set of labels"))
        raise CheckpointError(f"model.pretrained={pretrained} was trained to predict {trained} per input, but the "
                              f"data's config gives {asked}: its scores would be read the wrong way. Predict with the "
                              f"config of the run that trained it (<default_root_dir>/config.yaml).")
    stored, labels = checkpoint.label_names, list(model.label_names or [])
    if state["classifier.weight"].shape[0] != model.head.num_labels or \
            stored is not None and labels and sorted(stored) != sorted(labels):
        raise CheckpointError(f"model.pretrained={pretrained} predicts {stored or state['classifier.weight'].shape[0]} "
                              f"{'labels' if stored else 'outputs'}, but the data's config gives the labels {labels}: "
                              f"predict with the config of the run that trained it (<default_root_dir>/config.yaml).")


def predict_file(trainer: L.Trainer, model: EncoderTask, data: L.LightningDataModule, output: Path) -> Path | None:
    """The predictions of the datamodule's `predict_file`, a line per input in its order, written to `output` on
    rank 0 (its path; None on the other ranks)."""
    data.setup("predict")
    (values,) = predict_in_order(trainer, model, data).predictions
    # A multi-label model's threshold decides its labels; the datamodule writes them.
    threshold = {"threshold": model.threshold} if model.problem_type == "multi_label_classification" else {}
    return data.write_predictions(values, output, **threshold) if trainer.is_global_zero else None
