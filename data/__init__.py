"""litbert's data layer: tokenizers, readers and Lightning datamodules for MLM, GLUE, sentiment and NER."""

from data.checks import check_max_length, check_vocab_fits
from data.collate import PaddingCollator
from data.glue import GLUE_TASKS, GLUEDataModule, GlueTask, glue_task, write_submission
from data.loading import (
    Batches,
    EpochRandomSampler,
    LengthGroupedBatchSampler,
    ResumableLoader,
    SameLengthBatchSampler,
    ShardSampler,
)
from data.masking import MLMCollator, mask_tokens
from data.mlm import MLMDataModule, pack_blocks
from data.sentiment import SentimentDataModule
from data.sources import DataError, data_root
from data.token_classification import TokenClassificationDataModule, iob1_to_iob2
from data.tokenizers import SpecialTokenTemplate, load_tokenizer, save_tokenizer, train_tokenizer

__all__ = [
    "GLUE_TASKS",
    "Batches",
    "EpochRandomSampler",
    "ResumableLoader",
    "ShardSampler",
    "DataError",
    "GLUEDataModule",
    "GlueTask",
    "LengthGroupedBatchSampler",
    "MLMCollator",
    "MLMDataModule",
    "PaddingCollator",
    "SameLengthBatchSampler",
    "SentimentDataModule",
    "SpecialTokenTemplate",
    "TokenClassificationDataModule",
    "check_max_length",
    "check_vocab_fits",
    "data_root",
    "glue_task",
    "iob1_to_iob2",
    "load_tokenizer",
    "mask_tokens",
    "pack_blocks",
    "save_tokenizer",
    "train_tokenizer",
    "write_submission",
]
