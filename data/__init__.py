"""litbert's data layer: tokenizers, readers and Lightning datamodules for MLM, sequence classification (GLUE,
sentiment, any dataset of one or two texts) and token classification (NER)."""

from data.checks import check_max_length, check_vocab_fits
from data.classification import (
    GLUE_TASKS,
    TEXT_SETS,
    ClassificationDataModule,
    GLUEDataModule,
    TextSet,
    glue_task,
    text_set,
    write_submission,
)
from data.collate import PaddingCollator
from data.loading import (
    Batches,
    EpochRandomSampler,
    LengthGroupedBatchSampler,
    ResumableLoader,
    SameLengthBatchSampler,
    ShardSampler,
)
from data.masking import MLMCollator, mask_tokens
from data.mlm import MLMDataModule, block_documents, pack_blocks
from data.sources import DataError, data_root
from data.token_classification import TokenClassificationDataModule, iob1_to_iob2
from data.tokenizers import SpecialTokenTemplate, load_tokenizer, save_tokenizer, train_tokenizer

__all__ = [
    "GLUE_TASKS",
    "TEXT_SETS",
    "ClassificationDataModule",
    "Batches",
    "EpochRandomSampler",
    "ResumableLoader",
    "ShardSampler",
    "DataError",
    "GLUEDataModule",
    "LengthGroupedBatchSampler",
    "MLMCollator",
    "MLMDataModule",
    "PaddingCollator",
    "SameLengthBatchSampler",
    "SpecialTokenTemplate",
    "TextSet",
    "TokenClassificationDataModule",
    "check_max_length",
    "check_vocab_fits",
    "data_root",
    "glue_task",
    "iob1_to_iob2",
    "load_tokenizer",
    "mask_tokens",
    "block_documents",
    "pack_blocks",
    "save_tokenizer",
    "text_set",
    "train_tokenizer",
    "write_submission",
]
