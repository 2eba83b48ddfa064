"""What every litbert datamodule shares: the tokenizer, the values the model needs, caching and the loaders."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import datasets
import lightning as L
import pyarrow.compute as pc
import torch
from torch.utils.data import DataLoader

from data.checks import ModelLimits, check_max_length, check_vocab_fits
from data.collate import PaddingCollator
from data.loading import Batches, LengthGroupedBatchSampler, ResumableBatches, ResumableLoader, epoch_sampler
from data.sources import DataError, cache_root, fingerprint
from data.tokenizers import SpecialTokenTemplate, describe, load_tokenizer

log = logging.getLogger(__name__)

# Data settings a resume may change: where the same data lies, how it is loaded, cached and padded (padding changes no
# result), and what only evaluation or prediction reads. The seed and labels are checked on their own.
RESUMABLE_DATA_SETTINGS = ("tokenizer", "train_tokenizer", "data_root", "data_dir", "cache_dir", "num_workers",
                           "num_proc", "eval_batch_size", "pad_to_multiple_of", "pad_last_batch", "seed", "val_files",
                           "test_files", "predict_file", "predict_format", "val_split", "max_val_documents",
                           "val_mlm_probability", "val_mask_seed", "metrics")

# Columns a batch hands to the model; a dataset may hold more (word ids, sentence index) for later use.
# `example_index` keys an example's dynamic MLM masks; the collator removes it.
MODEL_COLUMNS = ("input_ids", "attention_mask", "token_type_ids", "labels", "example_index", "document_ids")


class TokenizedDataModule(L.LightningDataModule):
    """The skeleton of the datamodules. It loads the tokenizer at construction, so that `vocab_size`, `pad_token_id`
    and `mask_token_id` are known before `setup()` (LightningCLI links them into the model config); `setup` builds
    the splits a stage needs (`stage_splits`) with the subclass's `_build(split)`; the loaders serve them; the label
    map (`label_state`) travels in every checkpoint, so a model is reloaded with its own.

    A subclass takes the loader settings below as `**loading` and hands them on, so they are stated here once (the
    command line finds them through the subclass's signature).

    Args:
        batch_size: Training batch size.
        eval_batch_size: Evaluation and prediction batch size (defaults to `batch_size`).
        num_workers: DataLoader worker processes; they live across epochs (`persistent_workers`).
        data_root: Folder of local dataset copies (defaults to $LITBERT_DATA); without one, the hub is used.
        cache_dir: Folder for tokenized caches (defaults to $LITBERT_CACHE or ~/.cache/litbert).
        group_by_length: Batch similar lengths together (faster; changes the batches' composition).
        pad_to_multiple_of: Pad each batch's length up to a multiple of this (never past max_length), so that a run
            meets a handful of shapes: GPU attention kernels prepare a plan per shape, and compiled or graphed steps
            need one each. Unset: 64 on CUDA, 1 elsewhere. Padding changes no result (it is masked).
        pad_last_batch: Fill the last, short batch of each training and evaluation epoch up to the batch size with
            filler rows, so that it is no new shape either. Filler rows count nowhere: not in losses, gradients,
            metrics or token counts. Unset: on for CUDA runs, off elsewhere. (Prediction batches are not filled.)
        seed: Seed of the training order (for MLM also of the masks and segment split points). Unset, `train.py`
            gives it the run's `seed_everything`, so each seed of a sweep draws its own batches, as the
            `Trainer`'s `seed` does; 0 where nothing sets it. A checkpoint keeps it, and resuming with another is
            refused.
    """

    label_state: tuple[str, ...] = ()  # attributes holding the label map, saved in checkpoints

    def __init__(self, tokenizer: str | None, *, max_length: int, batch_size: int = 32,
                 eval_batch_size: int | None = None, num_workers: int = 0, data_root: str | None = None,
                 cache_dir: str | None = None, group_by_length: bool = False, pad_to_multiple_of: int | None = None,
                 pad_last_batch: bool | None = None, seed: int | None = None) -> None:
        super().__init__()
        if tokenizer is None:
            raise DataError(
                f"{type(self).__name__} has no tokenizer: set data.tokenizer (a tokenizer folder or tokenizer.json), "
                f"or fine-tune from --model.pretrained <dir> with the tokenizer saved in that folder."
            )
        self.tokenizer_path = tokenizer
        self.tokenizer = load_tokenizer(tokenizer, setting="data.tokenizer")
        self.template = SpecialTokenTemplate.of(self.tokenizer)
        if max_length <= self.template.num_special(pair=True):
            raise DataError(f"max_length={max_length} leaves no room for text beside the special tokens; raise it.")
        if batch_size <= 0:
            raise DataError(f"data.batch_size={batch_size} must be positive.")
        if eval_batch_size is not None and eval_batch_size <= 0:  # (0 would silently read as unset)
            raise DataError(f"data.eval_batch_size={eval_batch_size} must be positive; leave it unset to evaluate "
                            f"with data.batch_size.")
        if num_workers < 0:
            raise DataError(f"data.num_workers={num_workers} must be 0 (load in the training process) or more.")
        self.max_length = max_length
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.data_root = data_root
        self.cache_dir = cache_dir
        self.group_by_length = group_by_length
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise DataError(f"pad_to_multiple_of={pad_to_multiple_of} must be at least 1 (1 pads to the longest "
                            f"sequence of each batch).")
        self.pad_to_multiple_of = pad_to_multiple_of
        self.pad_last_batch = pad_last_batch
        self.seed = 0 if seed is None else seed
        self.vocab_size: int = len(self.tokenizer)
        self.pad_token_id: int = self.tokenizer.pad_token_id
        self.mask_token_id: int | None = self.tokenizer.mask_token_id
        self.uses_token_types = "token_type_ids" in self.tokenizer.model_input_names
        # Whether the model reads token types (`check_model`): a model without a token-type table (DistilBERT,
        # ModernBERT) is given none, as transformers' DistilBERT ignores them. transformers 5 loads DistilBERT's
        # tokenizer as BertTokenizer, which gives them.
        self.model_token_types = True
        self.datasets: dict[str, datasets.Dataset] = {}
        # The local files a subclass was given per split (train, validation, test); none: the dataset's own splits.
        self.files: dict[str, str | None] = {}
        self.predict_file: str | None = None  # new inputs (`train.py predict`), set by a subclass that reads them
        self.val_split_names: list[str] = ["validation"]
        self.collate: Callable[[Sequence[dict[str, Any]]], dict[str, Any]] = PaddingCollator(self.pad_token_id)

    def check_model(self, config: ModelLimits) -> None:
        """Errors, before training, when the model cannot take this data (positions or vocabulary too small); the
        batches of a model without token types carry none."""
        check_max_length(self.max_length, config)
        check_vocab_fits(self.tokenizer, config)
        self.model_token_types = config.type_vocab_size > 0

    @property
    def cache_path(self) -> Path:
        return cache_root(self.cache_dir)

    def tokenizer_key(self) -> str:
        return describe(self.tokenizer)

    def encode_types(self, ids: list[int], types: list[int]) -> dict[str, list[int]]:
        row = {"input_ids": ids}
        if self.uses_token_types:
            row["token_type_ids"] = types
        return row

    # ---- the label map travels with checkpoints ---------------------------------------------------------------

    def training_settings(self) -> dict[str, str]:
        """The settings that decide what the training batches hold (each value's repr), kept in checkpoints: a run
        resumed with another length or source would not go on with the batches it would have seen. The seed and
        labels are checked on their own, the batch size by the task with the process count and accumulation."""
        settings = {name: value for name, value in self.hparams.items() if name not in RESUMABLE_DATA_SETTINGS}
        settings.update(batch_size=self.batch_size, max_length=self.max_length, group_by_length=self.group_by_length)
        return {name: repr(value) for name, value in sorted(settings.items())}

    def saved_batch_size(self, checkpoint: dict[str, Any]) -> int | None:
        """data.batch_size of the run that wrote `checkpoint` (Lightning keeps this state under the class's name);
        None where the checkpoint does not say."""
        kept = checkpoint.get(type(self).__qualname__, {}).get("training_settings", {})
        return int(kept["batch_size"]) if "batch_size" in kept else None

    def order_per_process(self) -> str | None:
        """Why the training batches depend on the number of processes and the batch size, beyond which examples
        each optimizer step takes; None where they do not: batch k of every process together are examples
        k x (batch size x processes) onward of the epoch's one permutation (`data.loading`), so a run may resume on
        another number of processes with the same global batch."""
        if self.group_by_length:
            return ("data.group_by_length sorts each process's share of the data by length, in pools of its own batch "
                    "size")
        return None

    def state_dict(self) -> dict[str, Any]:
        # The tokenizer by its content, not its folder (which a resume may move): another vocabulary of the same size
        # fits the model, and would give it ids of other tokens.
        return {"seed": self.seed, "training_settings": self.training_settings(),
                "tokenizer": fingerprint(self.tokenizer_key()),
                **{name: list(getattr(self, name)) for name in self.label_state}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("seed", self.seed)  # checkpoints from before the seed was kept: not checked
        if saved != self.seed:
            raise DataError(
                f"The checkpoint to resume drew its training order from data.seed={saved}; this run's is {self.seed} "
                f"(data.seed, or seed_everything where data.seed is unset). The resumed batches would not be the "
                f"ones the run would have seen: resume with --data.seed {saved}, or start a new run.")
        if state_dict.get("tokenizer", fingerprint(self.tokenizer_key())) != fingerprint(self.tokenizer_key()):
            raise DataError(  # (older checkpoints keep no tokenizer: not checked)
                f"The checkpoint to resume was trained with another tokenizer than data.tokenizer="
                f"{self.tokenizer_path}: the model would read its ids as other tokens. Resume with the run's own "
                f"tokenizer (its folder, or the copy in the run's exported model), or start a new run.")
        kept, now = state_dict.get("training_settings", {}), self.training_settings()  # older checkpoints: none
        # The batch size is the task's to check, with the process count and accumulation: together they make what
        # one optimizer step averages over (`EncoderTask._check_global_batch`).
        changed = [f"data.{name}: {value} in the checkpoint, {now.get(name, '(none)')} now"
                   for name, value in kept.items() if now.get(name) != value and name != "batch_size"]
        if changed:
            raise DataError(
                f"The checkpoint to resume was trained on other batches: {'; '.join(changed)}. The resumed run would "
                f"not go on with the batches the run would have seen (its saved position counts batches): resume with "
                f"these set as in the checkpoint, or start a new run (from its weights: --model.pretrained on its "
                f"export).")
        changed = [name for name in self.label_state if list(state_dict[name]) != list(getattr(self, name))]
        if changed and self.datasets:
            # Built already (a resume sets the data up before restoring it): its label ids are this run's, and the
            # checkpoint's model predicts in its own order.
            raise DataError(
                f"The checkpoint to resume was trained with the labels {list(state_dict['label_names'])}; this run's "
                f"data gives {self.label_names}. Its outputs would be read as other labels: resume with "
                f"--data.label_names set as in the checkpoint, or start a new run.")
        for name in self.label_state:
            setattr(self, name, list(state_dict[name]))
        if self.label_state:
            self.num_labels = len(self.label_names)

    # ---- splits ---------------------------------------------------------------------------------------------

    def given_file(self, split: str) -> str | None:
        """The local file given for `split`, or None when the data is a dataset's (no training file given). Local
        training files need their other splits as files too: a missing one is an error naming its setting."""
        if self.files.get("train") is None:
            return None
        path = self.files.get(split)
        if path is None:
            raise DataError(f"No {split} file given; set data.{'val' if split == 'validation' else split}_files.")
        return path

    @property
    def has_test_split(self) -> bool:
        """Whether there is a labelled `test` split to run: the dataset's own, or a test file beside local training
        files."""
        return self.files.get("train") is None or self.files.get("test") is not None

    def stage_splits(self, stage: str | None) -> list[str]:
        """The splits `stage` needs (every stage's for None)."""
        splits = {"fit": ["train", *self.val_split_names], "validate": self.val_split_names,
                  "test": ["test"] if self.has_test_split else [], "predict": ["predict"] if self.predict_file else []}
        return [split for name, names in splits.items() if stage in (None, name) for split in names]

    def _build(self, split: str) -> datasets.Dataset:
        """The tokenized examples of one split."""
        raise NotImplementedError

    def describe_source(self) -> str:
        """Where the data comes from (a dataset and its splits, or files), for the line a run prints at its start."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        for split in self.stage_splits(stage):
            if split not in self.datasets:
                self.datasets[split] = self._build(split)

    # ---- loaders ----------------------------------------------------------------------------------------------

    #: Columns evaluation batches carry besides `MODEL_COLUMNS`, for the task's metrics (not for the model).
    eval_columns: tuple[str, ...] = ()

    def _model_view(self, dataset: datasets.Dataset, train: bool = True) -> datasets.Dataset:
        columns = MODEL_COLUMNS if train else MODEL_COLUMNS + self.eval_columns
        if not self.model_token_types:
            columns = tuple(c for c in columns if c != "token_type_ids")
        return dataset.with_format(columns=[c for c in columns if c in dataset.column_names])

    def distributed(self) -> dict[str, int] | None:
        """{num_replicas, rank} when the trainer shards data across processes (DDP, FSDP), else None. With
        `Trainer(use_distributed_sampler=False)` the loaders do not shard (train.py refuses it over several
        processes)."""
        trainer = self.trainer
        if trainer is None or not getattr(trainer._accelerator_connector, "use_distributed_sampler", True):
            return None
        kwargs = trainer.distributed_sampler_kwargs
        return {"num_replicas": kwargs["num_replicas"], "rank": kwargs["rank"]} if kwargs else None

    def batch_sampler(self, dataset: datasets.Dataset, train: bool, batch_size: int) -> ResumableBatches:
        """Batches of `dataset`: shuffled per epoch from `seed` for training, in order for evaluation, sharded
        across ranks under distributed training; grouped by length when `group_by_length`."""
        sampler = epoch_sampler(dataset, shuffle=train, seed=self.seed, distributed=self.distributed())
        if self.group_by_length:
            # Through the dataset's own view: after `select`, `shuffle` or `filter`, `dataset.data` is still the
            # whole underlying table, and its lengths would not belong to the rows the sampler indexes.
            lengths = pc.list_value_length(dataset.with_format("arrow")["input_ids"]).to_numpy()
            return LengthGroupedBatchSampler(sampler, batch_size, drop_last=False, lengths=lengths,
                                             pad_last_batch=self.fills_last_batch())
        return Batches(sampler, batch_size, drop_last=False, pad_last_batch=self.fills_last_batch())

    def on_cuda(self) -> bool:
        return self.trainer is not None and self.trainer.strategy.root_device.type == "cuda"

    def fills_last_batch(self) -> bool:
        """`pad_last_batch`, resolved for the device the run trains on."""
        return self.on_cuda() if self.pad_last_batch is None else self.pad_last_batch

    def padding(self) -> PaddingCollator:
        """The collator's padding, with the length multiple resolved for the device the run trains on."""
        padding = getattr(self.collate, "pad", self.collate)  # MLMCollator pads with a PaddingCollator
        multiple = self.pad_to_multiple_of
        padding.pad_to_multiple_of = multiple if multiple is not None else 64 if self.on_cuda() else 1
        padding.max_length = self.max_length
        return padding

    def loader(self, dataset: datasets.Dataset, batches: ResumableBatches) -> ResumableLoader:
        # A generator of its own: creating an iterator draws worker seeds from it, and drawing them from torch's
        # global generator would shift the model's dropout stream by a validation run or a resume. Pinned host
        # memory lets the copy to a GPU run beside the step. Workers persist across epochs: the epoch reaches their
        # collator with each batch (`data.loading.Batch`), and its padding is set here, before they start.
        self.padding()
        return ResumableLoader(dataset, batch_sampler=batches, collate_fn=self.collate, num_workers=self.num_workers,
                               persistent_workers=self.num_workers > 0, pin_memory=self.on_cuda(),
                               generator=torch.Generator().manual_seed(self.seed))

    def _loader(self, split: str, train: bool) -> ResumableLoader:
        if split not in self.datasets:
            raise DataError(f"{type(self).__name__} has no {split!r} split; call setup() first or add that split.")
        dataset = self._model_view(self.datasets[split], train)
        batch_size = self.batch_size if train else self.eval_batch_size
        return self.loader(dataset, self.batch_sampler(dataset, train, batch_size))

    def train_dataloader(self) -> ResumableLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> ResumableLoader | list[ResumableLoader]:
        loaders = [self._loader(split, train=False) for split in self.val_split_names]
        return loaders[0] if len(loaders) == 1 else loaders

    def test_dataloader(self) -> ResumableLoader:
        return self._loader("test", train=False)

    def predict_dataloader(self) -> DataLoader:
        """The inputs of `predict_file`, batched as evaluation sets are (length-grouped with `group_by_length`):
        `tasks.run.predict.InFileOrder` puts the predictions back in the file's order. A torch `DataLoader`, which
        Lightning re-creates to record each batch's dataset indices (and under DDP to shard it without repeats)."""
        if "predict" not in self.datasets:
            raise DataError(f"{type(self).__name__} has no inputs to predict; set data.predict_file and call "
                            f"setup('predict').")
        dataset = self._model_view(self.datasets["predict"], train=False)
        self.padding()
        return DataLoader(dataset, batch_sampler=self.batch_sampler(dataset, False, self.eval_batch_size),
                          collate_fn=self.collate, num_workers=self.num_workers, pin_memory=self.on_cuda())
