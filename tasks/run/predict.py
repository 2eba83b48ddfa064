"""Predictions of the unlabelled test sets (GLUE's), written as the files the benchmark's server takes."""

from __future__ import annotations

import lightning as L
import torch

from tasks.base import EncoderTask


def predict_test_sets(trainer: L.Trainer, model: EncoderTask, data: L.LightningDataModule) -> dict[str, list]:
    """The model's predictions (class ids, or scores for regression) on each unlabelled test set of `data`, in file
    order. Every rank predicts the whole sets (a sharded model needs every rank in its forward pass; the sets are
    small), so no example is dropped or repeated by a distributed sampler; rank 0 writes them."""
    data.setup("predict")
    splits = list(getattr(data, "test_split_names", []))
    if not splits:
        return {}
    loaders = data.predict_dataloader()
    loaders = loaders if isinstance(loaders, list) else [loaders]
    device = trainer.strategy.root_device
    model.eval()
    out: dict[str, list] = {}
    with torch.inference_mode(), trainer.precision_plugin.forward_context():
        for split, loader in zip(splits, loaders, strict=True):
            values = []
            for index, batch in enumerate(loader):
                batch = {key: value.to(device) for key, value in batch.items()}
                values.extend(model.predict_step(batch, index).float().cpu().tolist())
            out[split] = values
    return out
