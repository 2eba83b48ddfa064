"""MLM pretraining data: raw text -> tokens -> examples, for BERT and RoBERTa.

Two ways to cut text into examples:
- `full_sentences` (RoBERTa, Liu et al., 2019, section 4.2 FULL-SENTENCES): documents are concatenated with a
  separator between them and cut into blocks of exactly `max_length` tokens that may cross document boundaries.
  No padding and no token lost: the last block keeps the remainder and is batched on its own.
- `segments` (BERT, Devlin et al., 2019, appendix A.2, without next-sentence prediction): each example is
  `[CLS] A [SEP] B [SEP]`, A and B being runs of consecutive sentences of one document split at a random sentence
  boundary; B is always the true continuation since there is no NSP objective.

Deviations, on purpose:
- Blocks are `template prefix + stream + template suffix` (`<s> ... </s>` or `[CLS] ... [SEP]`), and documents are
  joined by the separator token. fairseq prepends only `<s>`; the extra closing token keeps every block in the
  tokenizer's own single-sequence form.
- BERT truncated over-long segment pairs (`truncate_seq_pair`); here a sentence longer than an example is cut into
  full-length pieces instead, so every token is kept. There is no `short_seq_prob`.
- Sentences are split with a punctuation regex, not a trained sentence splitter.
Masking is done by `data.masking.MLMCollator`: dynamic (new masks each epoch) or static (fixed here, once, from
`seed`). Validation masks are always fixed, from `val_mask_seed`, so validation losses are comparable.
"""

from __future__ import annotations

import inspect
import logging
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from data.base import TokenizedDataModule
from data.loading import ResumableLoader, SameLengthBatchSampler, epoch_sampler
from data.masking import MLMCollator
from data.sources import (
    TABLE_READERS,
    DataError,
    cached_map,
    data_root,
    file_identity,
    fingerprint,
    load_hub_split,
    local_split_file,
    read_table,
    read_text_documents,
)
from data.tokenizers import TokenizerTraining, ensure_trained
from encoders.choices import check_choice

log = logging.getLogger(__name__)

Packing = Literal["full_sentences", "segments"]
Masking = Literal["dynamic", "static"]
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def read_documents(path: str | Path, text_column: str = "text", blank_line_documents: bool = False) -> list[str]:
    """Documents of a file: a column of a CSV/TSV/JSON/JSONL table, or the lines (or blocks) of a text file. A
    setting of the other kind of file (a column for a text file, blank-line documents for a table) is refused."""
    path = Path(path)
    if path.suffix.lower() in TABLE_READERS:
        if blank_line_documents:
            raise DataError(f"data.blank_line_documents is set, but {path} is a table (documents are its "
                            f"{text_column!r} column); remove the setting.")
        return [str(text) for text in read_table(path, [text_column])[text_column]]
    if text_column != "text":
        raise DataError(f"data.text_column={text_column!r} names a column, but {path} is a plain-text file (a "
                        f"document per line, or per blank-line block); remove the setting.")
    return read_text_documents(path, blank_line_documents)


def _separators(lengths: np.ndarray) -> np.ndarray:
    """Where the separators fall in the stream of documents of these lengths joined by one separator each."""
    return np.cumsum(lengths)[:-1] + np.arange(len(lengths) - 1)


def _cut(stream: np.ndarray, block_length: int, content: int,
         wrap: Callable[[np.ndarray], np.ndarray]) -> pa.ListArray:
    """The stream cut into pieces of `content` values, each row wrapped to its block by `wrap` ((n, L) -> (n, L')):
    every block `block_length` long but the last, which holds the remainder."""
    full = len(stream) // content
    values = wrap(stream[: full * content].reshape(full, content)).reshape(-1)
    offsets = np.arange(full + 1, dtype=np.int32) * block_length
    if len(stream) > full * content:
        values = np.concatenate([values, wrap(stream[full * content:][None]).reshape(-1)])
        offsets = np.append(offsets, len(values)).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def pack_blocks(token_ids: pa.ListArray, block_length: int, prefix: list[int], suffix: list[int],
                separator: int) -> pa.ListArray:
    """FULL-SENTENCES packing, vectorised: join documents with `separator`, cut the stream into pieces of
    `block_length - len(prefix) - len(suffix)` and wrap each piece. Every block is `block_length` long but the last.
    """
    lengths = pc.list_value_length(token_ids).to_numpy(zero_copy_only=False).astype(np.int64)
    values = token_ids.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    stream = np.full(len(values) + len(lengths) - 1, separator, dtype=np.int64)
    keep = np.ones(len(stream), dtype=bool)
    keep[_separators(lengths)] = False  # document d shifts right by d, the separators before it
    stream[keep] = values

    def wrap(body: np.ndarray) -> np.ndarray:
        return np.concatenate([np.tile(prefix, (len(body), 1)), body, np.tile(suffix, (len(body), 1))],
                              axis=1).astype(np.int32)

    return _cut(stream, block_length, block_length - len(prefix) - len(suffix), wrap)


def block_documents(token_ids: pa.ListArray, block_length: int, prefix: list[int], suffix: list[int]) -> pa.ListArray:
    """For the blocks `pack_blocks` makes of the same documents: each token's document, numbered from 0 within its
    block. A separator belongs to the document it ends, the prefix to the block's first document and the suffix to
    its last."""
    lengths = pc.list_value_length(token_ids).to_numpy(zero_copy_only=False).astype(np.int64)
    separators = np.zeros(int(lengths.sum()) + len(lengths) - 1, dtype=np.int64)
    separators[_separators(lengths)] = 1
    document = np.cumsum(separators) - separators  # separators before each position of the stream

    def wrap(body: np.ndarray) -> np.ndarray:  # numbered within the row
        body = body - body[:, :1]
        return np.concatenate([np.zeros((len(body), len(prefix)), np.int64), body,
                               np.repeat(body[:, -1:], len(suffix), axis=1)], axis=1).astype(np.int16)

    return _cut(document, block_length, block_length - len(prefix) - len(suffix), wrap)


class MLMDataModule(TokenizedDataModule):
    """Masked-language-model pretraining data from local text files or a (local copy of a) hub dataset.

    Args:
        tokenizer: Path to a tokenizer folder or tokenizer.json; with `train_tokenizer`, the folder to train it into.
        train_tokenizer: Train the tokenizer on the training documents when the `tokenizer` folder does not exist
            yet (reused when it holds one trained with the same settings on the same data).
        train_files: Local training files: .txt/.tokens (a document per line), .csv/.tsv/.json/.jsonl (`text_column`).
        val_files: Local validation files, same formats.
        dataset: Hub dataset name (e.g. `imdb`, `wikitext`), used when no files are given; known names resolve to
            the local copy under the data root first.
        dataset_config: The hub config name (e.g. `wikitext-2-raw-v1`).
        train_split: Split of `dataset` to train on (e.g. `unsupervised` for IMDB's unlabelled reviews).
        val_split: Split of `dataset` to validate on; None for no validation.
        text_column: Column holding the text in tables and hub datasets.
        blank_line_documents: Text files hold one sentence per line with blank lines between documents (BERT's
            format) instead of one document per line.
        max_length: Tokens per example, special tokens included.
        packing: `full_sentences` (RoBERTa blocks, no padding) or `segments` (BERT's A/B segment examples).
        masking: `dynamic` (new masks each epoch, RoBERTa) or `static` (masks fixed once from `seed`, BERT).
        whole_word_masking: Mask all pieces of a word together.
        document_mask: With `full_sentences` packing, keep attention within each packed document: the batches carry
            each token's document (`document_ids`) and the encoder attends only within it (a block-diagonal mask).
            Positions still count from the block's start; the relative schemes (RoPE, ALiBi, T5) see the same
            distances within a document either way.
        mlm_probability: Fraction of non-special tokens chosen for prediction in training (BERT 0.15; 0.3 as in
            Wettig et al., 2023, and ModernBERT).
        val_mlm_probability: The same fraction for the fixed validation masks. Kept at BERT's 0.15 whatever the
            training rate, so that validation losses and accuracies of runs that mask differently compare.
        max_documents: Train on the first N documents only (a user filter; the number left out is logged).
        max_val_documents: Validate on the first N documents only.
        batch_size: Training batch size.
        eval_batch_size: Validation batch size (defaults to `batch_size`).
        num_workers: DataLoader worker processes.
        data_root: Folder of local dataset copies (defaults to $LITBERT_DATA).
        cache_dir: Folder for tokenized caches (defaults to $LITBERT_CACHE or ~/.cache/litbert).
        seed: Seed of the static masks and of BERT's segment split points.
        val_mask_seed: Seed of the fixed validation masks.
    """

    def __init__(
        self,
        tokenizer: str | None = None,
        train_tokenizer: TokenizerTraining | None = None,
        train_files: list[str] | None = None,
        val_files: list[str] | None = None,
        dataset: str | None = None,
        dataset_config: str | None = None,
        train_split: str = "train",
        val_split: str | None = "validation",
        text_column: str = "text",
        blank_line_documents: bool = False,
        max_length: int = 512,
        packing: Packing = "full_sentences",
        masking: Masking = "dynamic",
        whole_word_masking: bool = False,
        document_mask: bool = False,
        mlm_probability: float = 0.15,
        val_mlm_probability: float = 0.15,
        max_documents: int | None = None,
        max_val_documents: int | None = None,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        data_root: str | None = None,
        cache_dir: str | None = None,
        seed: int = 0,
        val_mask_seed: int = 1234,
    ) -> None:
        check_choice("packing", packing, Packing, DataError)
        check_choice("masking", masking, Masking, DataError)
        if document_mask and packing != "full_sentences":
            raise DataError(f"data.document_mask keeps attention within the documents packed into a block, but "
                            f"data.packing={packing!r} makes each example from one document; remove "
                            f"data.document_mask or pack with full_sentences.")
        if train_files is None and dataset is None:
            raise DataError("MLMDataModule needs train_files or a dataset name; neither was given.")
        if train_files is not None and dataset is not None:
            raise DataError(f"data.dataset={dataset!r} and data.train_files are both set; one source is read, not "
                            f"both. Set data.dataset null to read the files, or remove them.")
        if dataset is None and (dataset_config is not None or data_root is not None):
            raise DataError("data.dataset_config and data.data_root apply to a named dataset, but the data comes "
                            "from local files; remove them.")
        defaults = inspect.signature(MLMDataModule.__init__).parameters
        for name, value, files in (("train_split", train_split, train_files), ("val_split", val_split, val_files)):
            if files is not None and value != defaults[name].default:
                raise DataError(f"data.{name}={value!r} picks a split of data.dataset, but that split comes from "
                                f"local files here; remove data.{name}.")
        self.train_files, self.val_files = train_files, val_files
        self.dataset, self.dataset_config = dataset, dataset_config
        self.train_split, self.val_split = train_split, val_split
        self.text_column, self.blank_line_documents = text_column, blank_line_documents
        self.max_documents, self.max_val_documents = max_documents, max_val_documents
        self.data_root = data_root
        if train_tokenizer is not None:
            if tokenizer is None:
                raise DataError("data.train_tokenizer needs data.tokenizer: the folder to train the tokenizer into.")
            identity, source = self._source(train_split, train_files)
            ensure_trained(tokenizer, train_tokenizer, lambda: self._documents(train_split, source, "train"),
                           fingerprint(identity, max_documents, text_column, blank_line_documents))
        super().__init__(tokenizer, max_length=max_length, batch_size=batch_size, eval_batch_size=eval_batch_size,
                         num_workers=num_workers, data_root=data_root, cache_dir=cache_dir, seed=seed)
        self.save_hyperparameters()
        if self.mask_token_id is None:
            raise DataError(f"Tokenizer {tokenizer} has no mask token; MLM needs one ([MASK] or <mask>).")
        self.packing, self.masking, self.document_mask = packing, masking, document_mask
        self.val_mask_seed = val_mask_seed
        self.collate = MLMCollator(self.tokenizer, mlm_probability, whole_word_masking, seed=seed)
        self.val_masks = MLMCollator(self.tokenizer, val_mlm_probability, whole_word_masking, seed=val_mask_seed)
        self.stats: dict[str, dict[str, int]] = {}

    # ---- sources ----------------------------------------------------------------------------------------------

    def _source(self, split: str, files: list[str] | None) -> tuple[Any, list[str] | datasets.Dataset]:
        """(identity for the cache key, the files or the hub dataset) of one split."""
        if files:
            return [file_identity(f) for f in files], [str(f) for f in files]
        if self.dataset is None:
            raise DataError(f"No {split!r} data: give {split}_files or a dataset name.")
        local = local_split_file(self.dataset, self.dataset_config, split, data_root(self.data_root))
        if local is not None:
            return [file_identity(local)], [str(local)]
        hub = load_hub_split(self.dataset, self.dataset_config, split)
        if self.text_column not in hub.column_names:
            raise DataError(f"Dataset {self.dataset!r} split {split!r} has no column {self.text_column!r}; "
                            f"its columns are {hub.column_names}. Set text_column.")
        return ["hub", self.dataset, self.dataset_config, split, hub._fingerprint], hub

    def _documents(self, split: str, source: list[str] | datasets.Dataset, role: str) -> list[str]:
        if isinstance(source, datasets.Dataset):
            if self.blank_line_documents:
                raise DataError(f"data.blank_line_documents applies to plain-text files, but {self.dataset!r} comes "
                                f"from the hub as a table; remove the setting.")
            documents = [text for text in source[self.text_column] if text and text.strip()]
        else:
            documents = [d for path in source for d in read_documents(path, self.text_column,
                                                                      self.blank_line_documents)]
        setting = "max_documents" if role == "train" else "max_val_documents"
        limit = getattr(self, setting)
        if limit is not None and len(documents) > limit:
            log.info("%s: %s=%d keeps %d of %d documents; %d left out by that setting", split, setting, limit,
                     limit, len(documents), len(documents) - limit)
            documents = documents[:limit]
        return documents

    # ---- tokenization -----------------------------------------------------------------------------------------

    def _tokenize_documents(self, batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        ids = self.tokenizer(batch["text"], add_special_tokens=False, return_attention_mask=False,
                             return_token_type_ids=False, verbose=False)["input_ids"]
        return {"input_ids": ids}

    def _segment_examples(self, batch: dict[str, list[str]], indices: list[int]) -> dict[str, list[list[int]]]:
        """BERT-style examples from a batch of documents; split points drawn from a generator seeded by the
        position of the batch, so the cached result does not depend on what ran before."""
        rng = random.Random(self.seed * 1_000_003 + indices[0])
        sentences = [SENTENCE_END.split(text.strip()) for text in batch["text"]]
        flat = [s for doc in sentences for s in doc]
        ids = self.tokenizer(flat, add_special_tokens=False, return_attention_mask=False,
                             return_token_type_ids=False, verbose=False)["input_ids"]
        budget = self.max_length - self.template.num_special(pair=True)
        out: dict[str, list[list[int]]] = {"input_ids": [], "token_type_ids": []}
        position = 0
        for doc in sentences:
            chunks: list[list[list[int]]] = [[]]  # runs of sentences that fit in one example
            for sentence in ids[position:position + len(doc)]:
                pieces = [sentence[i:i + budget] for i in range(0, len(sentence), budget)] or [[]]
                for piece in pieces:
                    if not piece:
                        continue
                    if sum(map(len, chunks[-1])) + len(piece) > budget:
                        chunks.append([])
                    chunks[-1].append(piece)
            position += len(doc)
            for chunk in chunks:
                if not chunk:
                    continue
                if len(chunk) == 1:
                    row, types = self.template.wrap(chunk[0])
                else:
                    split = rng.randint(1, len(chunk) - 1)
                    row, types = self.template.wrap(sum(chunk[:split], []), sum(chunk[split:], []))
                out["input_ids"].append(row)
                out["token_type_ids"].append(types)
        if not self.uses_token_types:
            del out["token_type_ids"]
        return out

    def _build(self, role: str, split: str, files: list[str] | None) -> datasets.Dataset:
        """The examples of `role` (train or validation) from `split` of the dataset, or from `files`."""
        identity, source = self._source(split, files)
        limit = self.max_documents if role == "train" else self.max_val_documents
        settings = dict(packing=self.packing, max_length=self.max_length, seed=self.seed,
                        blank_line_documents=self.blank_line_documents, text_column=self.text_column,
                        max_documents=limit, version=1)
        key = fingerprint(identity, self.tokenizer_key(), settings)

        def raw() -> datasets.Dataset:
            return datasets.Dataset.from_dict({"text": self._documents(split, source, role)})

        if self.packing == "segments":
            examples = cached_map(raw, self._segment_examples, cache_dir=self.cache_path, name=f"mlm-{split}",
                                  key=key, with_indices=True)
            tokens = int(pc.sum(pc.list_value_length(examples.data.column("input_ids"))).as_py() or 0)
            self.stats[role] = {"examples": len(examples), "tokens": tokens}
            log.info("%s: %d BERT-style segment examples, %d tokens with specials", split, len(examples), tokens)
            return examples
        documents = cached_map(raw, self._tokenize_documents, cache_dir=self.cache_path, name=f"mlm-{split}",
                               key=key)
        column = documents.data.column("input_ids").combine_chunks()
        prefix, suffix = self.template.single
        blocks = pack_blocks(column, self.max_length, prefix, suffix, self.tokenizer.sep_token_id)
        tokens = len(column.flatten())
        self.stats[role] = {"documents": len(documents), "tokens": tokens, "blocks": len(blocks)}
        log.info("%s: %d documents, %d tokens packed into %d blocks of %d (FULL-SENTENCES, no padding)",
                 split, len(documents), tokens, len(blocks), self.max_length)
        columns = {"input_ids": blocks}
        if self.document_mask:
            columns["document_ids"] = block_documents(column, self.max_length, prefix, suffix)
        return datasets.Dataset(pa.table(columns))

    def fixed_masks(self, dataset: datasets.Dataset, seed: int, masks: MLMCollator) -> datasets.Dataset:
        """The dataset with masks drawn once from `seed` by `masks` (stored as `input_ids` and `labels`)."""

        def mask(batch: dict[str, list[list[int]]], indices: list[int]) -> dict[str, list[list[int]]]:
            generator = torch.Generator().manual_seed(seed * 1_000_003 + indices[0])
            rows = batch["input_ids"]
            padded = masks.pad([{"input_ids": row} for row in rows])["input_ids"]
            lengths = torch.tensor([len(row) for row in rows])
            attended = torch.arange(padded.shape[1]) < lengths[:, None]
            corrupted, labels = masks.mask(padded, attended, generator=generator)
            return {"input_ids": [corrupted[i, :n].tolist() for i, n in enumerate(lengths.tolist())],
                    "labels": [labels[i, :n].tolist() for i, n in enumerate(lengths.tolist())]}

        return dataset.map(mask, batched=True, batch_size=1000, with_indices=True, keep_in_memory=True,
                           desc="fixing masks")

    def setup(self, stage: str | None = None) -> None:
        if "train" not in self.datasets and stage in (None, "fit"):
            train = self._build("train", self.train_split, self.train_files)
            if self.masking == "static":
                train = self.fixed_masks(train, self.seed, self.collate)
            else:  # the key of each example's dynamic masks (data.masking.keyed_uniform)
                train = train.add_column("example_index", np.arange(len(train), dtype=np.int64))
            self.datasets["train"] = train
        has_val = self.val_files is not None or (self.dataset is not None and self.val_split is not None)
        if "validation" not in self.datasets and stage in (None, "fit", "validate") and has_val:
            validation = self._build("validation", self.val_split or "validation", self.val_files)
            self.datasets["validation"] = self.fixed_masks(validation, self.val_mask_seed, self.val_masks)

    def _loader(self, split: str, train: bool) -> ResumableLoader:
        if self.packing == "segments":
            return super()._loader(split, train)
        dataset = self._model_view(self.datasets[split])
        lengths = pc.list_value_length(dataset.data.column("input_ids")).to_numpy()
        sampler = epoch_sampler(dataset, shuffle=train, seed=self.seed, distributed=self.distributed())
        batches = SameLengthBatchSampler(sampler, self.batch_size if train else self.eval_batch_size,
                                         drop_last=False, lengths=lengths)
        return self.loader(dataset, batches)

    def val_dataloader(self) -> ResumableLoader | list[ResumableLoader]:
        return self._loader("validation", train=False) if "validation" in self.datasets else []
