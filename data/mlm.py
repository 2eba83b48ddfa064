"""MLM pretraining data: raw text -> tokens -> examples, for BERT and RoBERTa.

Two ways to cut text into examples:
- `full_sentences` (RoBERTa, Liu et al., 2019, section 4.2 FULL-SENTENCES): documents are concatenated with a
  separator between them and cut into blocks of exactly `max_length` tokens that may cross document boundaries.
  No token lost, and no padding but in one batch: the last block keeps the remainder, and goes into the epoch's last
  batch with the full blocks left over there (`SameLengthBatchSampler`), padded to their length.
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
- Static masks are drawn once. BERT's `create_pretraining_data.py` wrote the corpus `dupe_factor` = 10 times, each
  copy masked anew, so that its 40 epochs saw each sequence under 10 masks (Liu et al., 2019, section 4.1); here
  every epoch sees the same one. `masking: dynamic` draws new masks every epoch.
Masking is done by `data.masking.MLMCollator`: dynamic (new masks each epoch) or static (fixed here, once, from
`seed`). Validation masks (and validation segments' split points) are always fixed, from `val_mask_seed`, so
validation losses are comparable across seeds.
"""

from __future__ import annotations

import bisect
import inspect
import itertools
import logging
import random
import re
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, Literal

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from datasets.arrow_writer import ArrowWriter
from transformers import PreTrainedTokenizerFast

from data.base import TokenizedDataModule
from data.loading import ResumableBatches, ResumableLoader, SameLengthBatchSampler, epoch_sampler
from data.masking import MLMCollator
from data.sources import (
    TABLE_READERS,
    DataError,
    cached_map,
    data_root,
    describe_files,
    file_identity,
    fingerprint,
    load_hub_split,
    local_split_file,
    map_into_cache,
    read_table,
    read_text_documents,
    replaced_when_whole,
)
from data.streaming import PackedStream, StreamingLoader, fetched_ahead
from data.tokenizers import SpecialTokenTemplate, TokenizerTraining, ensure_trained
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
        # Empty cells (None, or blank text) are no documents, as a hub dataset's blank texts are not.
        return [str(text) for text in read_table(path, [text_column])[text_column]
                if text is not None and str(text).strip()]
    if text_column != "text":
        raise DataError(f"data.text_column={text_column!r} names a column, but {path} is a plain-text file (a "
                        f"document per line, or per blank-line block); remove the setting.")
    return read_text_documents(path, blank_line_documents)


def iter_documents(path: str | Path, text_column: str = "text", blank_line_documents: bool = False) -> Iterator[str]:
    """The documents `read_documents` returns, one at a time; a plain-text file of a document per line is read line
    by line (the same lines as `str.splitlines`), so memory holds one line, not the file. Tables and blank-line
    blocks are read whole."""
    path = Path(path)
    if path.suffix.lower() in TABLE_READERS or blank_line_documents or text_column != "text" or not path.is_file() \
            or path.stat().st_size == 0:
        yield from read_documents(path, text_column, blank_line_documents)  # its checks and errors
        return
    try:
        with open(path, encoding="utf-8-sig") as handle:
            for line in handle:
                if "\x00" in line:
                    read_documents(path)  # raises the error that names the line of the NUL byte
                yield from (part for part in line.splitlines() if part.strip())
    except UnicodeDecodeError:
        read_documents(path)  # raises the error that names the line and bytes
        raise


def _separators(lengths: np.ndarray) -> np.ndarray:
    """Where the separators fall in the stream of documents of these lengths joined by one separator each."""
    return np.cumsum(lengths)[:-1] + np.arange(len(lengths) - 1)


def _rows(rows: np.ndarray) -> pa.ListArray:
    """(n, L) values as n lists."""
    offsets = np.arange(len(rows) + 1, dtype=np.int32) * rows.shape[1]
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(rows.reshape(-1)))


class BlockPacker:
    """FULL-SENTENCES packing of documents that arrive chunk by chunk: joined by `separator`, cut into pieces of
    `block_length - len(prefix) - len(suffix)` tokens, each wrapped as `prefix + piece + suffix`. `add` returns
    the full blocks a chunk completes and keeps the rest for the next chunk; `finish` returns the last, shorter
    block holding the remainder. The blocks are the same however the documents are chunked, and only one chunk
    and one block's remainder are held at a time.

    With `documents`, each block also carries each token's document (`document_ids`), numbered from 0 within its
    block: a separator belongs to the document it ends, the prefix to the block's first document, the suffix to
    its last.
    """

    def __init__(self, block_length: int, prefix: list[int], suffix: list[int], separator: int,
                 documents: bool = False) -> None:
        self.block_length, self.prefix, self.suffix = block_length, prefix, suffix
        self.content = block_length - len(prefix) - len(suffix)
        if self.content <= 0:
            raise ValueError(f"block_length={block_length} leaves no room beside {len(prefix) + len(suffix)} "
                             f"special tokens.")
        self.separator, self.documents = separator, documents
        self.seen = 0  # documents added so far
        self.tail = np.empty(0, np.int64)
        self.tail_documents = np.empty(0, np.int64)

    def add(self, token_ids: pa.ListArray) -> pa.Table:
        """The full blocks completed by these documents (a list column of token ids each)."""
        lengths = pc.list_value_length(token_ids).to_numpy(zero_copy_only=False).astype(np.int64)
        if not len(lengths):
            return self._table(np.empty((0, self.content), np.int64), np.empty((0, self.content), np.int64))
        values = token_ids.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
        lead = 1 if self.seen else 0  # the separator between the last document before this chunk and its first
        separators = np.zeros(lead + len(values) + len(lengths) - 1, dtype=bool)
        separators[:lead] = True
        separators[lead + _separators(lengths)] = True  # document d shifts right by the separators before it
        stream = np.full(len(separators), self.separator, dtype=np.int64)
        stream[~separators] = values
        stream = np.concatenate([self.tail, stream])
        if self.documents:  # numbered over the whole corpus here; renumbered within each block by _table
            marks = separators.astype(np.int64)
            numbers = self.seen - lead + np.cumsum(marks) - marks
            numbers = np.concatenate([self.tail_documents, numbers])
        else:
            numbers = stream
        self.seen += len(lengths)
        full = len(stream) // self.content * self.content
        self.tail, self.tail_documents = stream[full:], numbers[full:]
        return self._table(stream[:full].reshape(-1, self.content), numbers[:full].reshape(-1, self.content))

    def finish(self) -> pa.Table:
        """The last block: the remainder of the stream, shorter than the others (no block if none is left)."""
        rows = self.tail[None] if len(self.tail) else np.empty((0, 0), np.int64)
        table = self._table(rows, self.tail_documents[None] if len(self.tail) else rows)
        self.tail, self.tail_documents = np.empty(0, np.int64), np.empty(0, np.int64)
        return table

    def _table(self, body: np.ndarray, numbers: np.ndarray) -> pa.Table:
        n = len(body)
        ids = np.concatenate([np.tile(self.prefix, (n, 1)), body, np.tile(self.suffix, (n, 1))], axis=1)
        columns = {"input_ids": _rows(ids.astype(np.int32))}
        if self.documents:
            numbers = numbers - numbers[:, :1]
            numbers = np.concatenate([np.zeros((n, len(self.prefix)), np.int64), numbers,
                                      np.repeat(numbers[:, -1:], len(self.suffix), axis=1)], axis=1)
            columns["document_ids"] = _rows(numbers.astype(np.int16))
        return pa.table(columns)


def pack_blocks(token_ids: pa.ListArray, block_length: int, prefix: list[int], suffix: list[int],
                separator: int) -> pa.ListArray:
    """FULL-SENTENCES packing of these documents at once (see `BlockPacker`): every block is `block_length` long
    but the last."""
    packer = BlockPacker(block_length, prefix, suffix, separator)
    return pa.concat_tables([packer.add(token_ids), packer.finish()]).column("input_ids").combine_chunks()


def block_documents(token_ids: pa.ListArray, block_length: int, prefix: list[int], suffix: list[int]) -> pa.ListArray:
    """For the blocks `pack_blocks` makes of the same documents: each token's document, numbered from 0 within its
    block (see `BlockPacker`)."""
    packer = BlockPacker(block_length, prefix, suffix, separator=0, documents=True)
    return pa.concat_tables([packer.add(token_ids), packer.finish()]).column("document_ids").combine_chunks()


def write_blocks(documents: datasets.Dataset, path: Path, packer: BlockPacker, chunk: int = 10_000) -> datasets.Dataset:
    """The tokenized `documents` packed by `packer`, `chunk` documents at a time, into an Arrow file at `path`
    (written beside it and renamed into place), opened memory-mapped. Each block also holds its number
    (`example_index`, the key of its dynamic masks)."""
    features = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("int32"))})
    if packer.documents:
        features["document_ids"] = datasets.Sequence(datasets.Value("int16"))
    features["example_index"] = datasets.Value("int64")
    blocks = 0
    with replaced_when_whole(path) as scratch:
        writer = ArrowWriter(path=str(scratch), features=features)

        def write(table: pa.Table) -> None:
            nonlocal blocks
            index = pa.array(np.arange(blocks, blocks + table.num_rows, dtype=np.int64))
            writer.write_table(table.append_column("example_index", index))
            blocks += table.num_rows

        try:
            for batch in documents.data.table.select(["input_ids"]).to_batches(max_chunksize=chunk):
                write(packer.add(batch.column("input_ids")))
            write(packer.finish())
            writer.finalize()
        finally:
            writer.close()
    return datasets.Dataset.from_file(str(path))


def tokenize_documents(batch: dict[str, list[str]], tokenizer: PreTrainedTokenizerFast) -> dict[str, list[list[int]]]:
    """The token ids of each document, without special tokens."""
    ids = tokenizer(batch["text"], add_special_tokens=False, return_attention_mask=False,
                    return_token_type_ids=False, verbose=False)["input_ids"]
    return {"input_ids": ids}


def segment_examples(batch: dict[str, list[str]], indices: list[int], *, tokenizer: PreTrainedTokenizerFast,
                     max_length: int, seed: int) -> dict[str, list[list[int]]]:
    """BERT-style examples (`[CLS] A [SEP] B [SEP]`) of at most `max_length` tokens from a batch of documents.
    Each document's split points come from a generator seeded by its position in the corpus, so the cached
    result depends neither on what ran before nor on how the documents are batched or sharded across processes."""
    template = SpecialTokenTemplate.of(tokenizer)
    texts = [text.strip() for text in batch["text"]]
    # Each document is tokenized whole, as running text (a sentence tokenized alone would lose the word-start marker
    # of byte-level BPE, `ĠThe` becoming `The`), then cut into sentences: a token belongs to the sentence that
    # holds its last character.
    encoded = tokenizer(texts, add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False,
                        return_offsets_mapping=True, verbose=False)
    budget = max_length - template.num_special(pair=True)
    out: dict[str, list[list[int]]] = {"input_ids": [], "token_type_ids": []}
    for index, text, ids, offsets in zip(indices, texts, encoded["input_ids"], encoded["offset_mapping"],
                                         strict=True):
        rng = random.Random(seed * 1_000_003 + index)
        starts = [match.end() for match in SENTENCE_END.finditer(text)]
        sentences: dict[int, list[int]] = {}
        for token, (_, end) in zip(ids, offsets, strict=True):
            sentences.setdefault(bisect.bisect_right(starts, max(end - 1, 0)), []).append(token)
        chunks: list[list[list[int]]] = [[]]  # runs of sentences that fit in one example
        for sentence in sentences.values():
            pieces = [sentence[i:i + budget] for i in range(0, len(sentence), budget)] or [[]]
            for piece in pieces:
                if not piece:
                    continue
                if sum(map(len, chunks[-1])) + len(piece) > budget:
                    chunks.append([])
                chunks[-1].append(piece)
        for chunk in chunks:
            if not chunk:
                continue
            if len(chunk) == 1:
                row, types = template.wrap(chunk[0])
            else:
                split = rng.randint(1, len(chunk) - 1)
                row, types = template.wrap(sum(chunk[:split], []), sum(chunk[split:], []))
            out["input_ids"].append(row)
            out["token_type_ids"].append(types)
    if "token_type_ids" not in tokenizer.model_input_names:
        del out["token_type_ids"]
    return out


class MLMDataModule(TokenizedDataModule):
    """Masked-language-model pretraining data from local text files or a (local copy of a) hub dataset.

    Args:
        tokenizer: A tokenizer folder, tokenizer.json or hub id (`org/name[@revision]`); with `train_tokenizer`, the
            folder to train it into.
        train_tokenizer: Train the tokenizer on the training documents when the `tokenizer` folder does not exist
            yet (reused when it holds one trained with the same settings on the same data).
        train_files: Local training file(s) (one path or a list): .txt/.tokens (a document per line),
            .csv/.tsv/.json/.jsonl (`text_column`).
        val_files: Local validation file(s), same formats; none: no validation.
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
        streaming: Read the training documents as a stream (a hub dataset streamed by `datasets`, or the local
            files one at a time), tokenized and packed on the fly in each process and loader worker, for corpora
            larger than the disk; nothing is cached. Needs `trainer.max_steps`, FULL-SENTENCES packing and dynamic
            masking (see `data.streaming`). Validation data is built as usual.
        shuffle_buffer: With `streaming`: documents held in the shuffle buffer (1 or 0: the stream's own order).
        mlm_probability: Fraction of non-special tokens chosen for prediction in training (BERT 0.15; 0.3 as in
            Wettig et al., 2023, and ModernBERT).
        val_mlm_probability: The same fraction for the fixed validation masks. Kept at BERT's 0.15 whatever the
            training rate, so that validation losses and accuracies of runs that mask differently compare.
        mask_replace_probability: Of the tokens chosen in training, the fraction replaced by the mask token (BERT
            0.8; transformers' `DataCollatorForLanguageModeling(mask_replace_prob=...)`).
        random_replace_probability: Of the tokens chosen in training, the fraction replaced by a random token (BERT
            0.1); the rest stay unchanged. Validation masks keep BERT's 80/10/10, as they keep their rate.
        max_documents: Train on the first N documents only (a user filter; the number left out is logged).
        max_val_documents: Validate on the first N documents only.
        batch_size: Training batch size.
        eval_batch_size: Validation batch size (defaults to `batch_size`).
        num_workers: DataLoader worker processes; they live across epochs, except a stream's (`data.streaming`).
        num_proc: Processes that tokenize the text (`datasets.map(num_proc=...)`), each writing a shard of the
            tokenized cache; the cache is the same whatever the number.
        data_root: Folder of local dataset copies (defaults to $LITBERT_DATA).
        cache_dir: Folder for tokenized caches (defaults to $LITBERT_CACHE or ~/.cache/litbert).
        pad_to_multiple_of: See `TokenizedDataModule`: batches of unequal lengths (BERT segments, the last block of
            a document) padded to a multiple of this; unset, 64 on CUDA, 1 elsewhere.
        pad_last_batch: See `TokenizedDataModule`: the epoch's (or a stream's pass's) last batch filled up to the
            batch size with rows that count nowhere; unset, on for CUDA runs, off elsewhere.
        seed: Seed of the training order, the masks (static or dynamic) and BERT's segment split points; unset,
            the run's `seed_everything` (see `TokenizedDataModule`).
        val_mask_seed: Seed of the fixed validation masks and of the validation segments' split points: the same
            validation examples and masks whatever `seed`.
    """

    def __init__(
        self,
        tokenizer: str | None = None,
        train_tokenizer: TokenizerTraining | None = None,
        train_files: str | list[str] | None = None,
        val_files: str | list[str] | None = None,
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
        streaming: bool = False,
        shuffle_buffer: int = 10_000,
        mlm_probability: float = 0.15,
        val_mlm_probability: float = 0.15,
        mask_replace_probability: float = 0.8,
        random_replace_probability: float = 0.1,
        max_documents: int | None = None,
        max_val_documents: int | None = None,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        num_proc: int = 1,
        data_root: str | None = None,
        cache_dir: str | None = None,
        pad_to_multiple_of: int | None = None,
        pad_last_batch: bool | None = None,
        seed: int | None = None,
        val_mask_seed: int = 1234,
    ) -> None:
        check_choice("packing", packing, Packing, DataError)
        check_choice("masking", masking, Masking, DataError)
        if document_mask and packing != "full_sentences":
            raise DataError(f"data.document_mask keeps attention within the documents packed into a block, but "
                            f"data.packing={packing!r} makes each example from one document; remove "
                            f"data.document_mask or pack with full_sentences.")
        if streaming and (packing != "full_sentences" or masking != "dynamic"):
            raise DataError(f"data.streaming packs and masks blocks as the documents come, so it needs packing: "
                            f"full_sentences and masking: dynamic (got packing={packing!r}, masking={masking!r}).")
        for name, value in (("mlm_probability", mlm_probability), ("val_mlm_probability", val_mlm_probability)):
            if not 0 < value < 1:  # 0 masks nothing to learn from, 1 leaves no context to predict from
                raise DataError(f"data.{name}={value} is the fraction of tokens chosen for prediction: it must lie "
                                f"strictly between 0 and 1 (BERT 0.15; Wettig et al., 2023, 0.3).")
        if not (0 <= mask_replace_probability <= 1 and 0 <= random_replace_probability <= 1
                and mask_replace_probability + random_replace_probability <= 1):
            raise DataError(f"data.mask_replace_probability={mask_replace_probability} and "
                            f"data.random_replace_probability={random_replace_probability} share out the tokens "
                            f"chosen for prediction (the rest stay unchanged): each must lie in [0, 1] and their sum "
                            f"at most 1 (BERT: 0.8 and 0.1).")
        if shuffle_buffer < 0:
            raise DataError(f"data.shuffle_buffer={shuffle_buffer} must be >= 0 (0 or 1: no shuffling).")
        if not streaming and shuffle_buffer != 10_000:
            raise DataError(f"data.shuffle_buffer={shuffle_buffer} is a setting of data.streaming, which is off; "
                            f"cached data is shuffled whole each epoch. Remove it or set data.streaming true.")
        train_files, val_files = ([files] if isinstance(files, str) else files for files in (train_files, val_files))
        if train_files is None and dataset is None:
            raise DataError("MLMDataModule needs train_files or a dataset name; neither was given.")
        if train_files is not None and dataset is not None:
            raise DataError(f"data.dataset={dataset!r} and data.train_files are both set in one place; one source is "
                            f"read, not both. Remove one of them (files or a dataset given on the command line "
                            f"replace the config's source by themselves).")
        if dataset is None and (dataset_config is not None or data_root is not None):
            raise DataError("data.dataset_config and data.data_root apply to a named dataset, but the data comes "
                            "from local files; remove them.")
        defaults = inspect.signature(MLMDataModule.__init__).parameters
        for name, value, files in (("train_split", train_split, train_files), ("val_split", val_split, val_files)):
            if files is not None and value != defaults[name].default:
                raise DataError(f"data.{name}={value!r} picks a split of data.dataset, but that split comes from "
                                f"local files here; remove data.{name} (or set it to its default, "
                                f"{defaults[name].default!r}).")
        self.train_files, self.val_files = train_files, val_files
        self.dataset, self.dataset_config = dataset, dataset_config
        self.train_split, self.val_split = train_split, val_split
        self.text_column, self.blank_line_documents = text_column, blank_line_documents
        self.max_documents, self.max_val_documents = max_documents, max_val_documents
        self.data_root = data_root
        if num_proc < 1:
            raise DataError(f"data.num_proc={num_proc} must be at least 1 (the processes that tokenize the text).")
        for name, value in (("max_documents", max_documents), ("max_val_documents", max_val_documents)):
            if value is not None and value < 1:  # (0 failed deep in the packing, a negative one in islice)
                raise DataError(f"data.{name}={value} must be at least 1; leave it unset to read every document.")
        self.num_proc = num_proc
        if train_tokenizer is not None:
            if tokenizer is None:
                raise DataError("data.train_tokenizer needs data.tokenizer: the folder to train the tokenizer into.")
            identity, source = self._source(train_split, train_files, streaming)
            ensure_trained(tokenizer, train_tokenizer, lambda: self._stream(source),
                           fingerprint(identity, max_documents, text_column, blank_line_documents))
        super().__init__(tokenizer, max_length=max_length, batch_size=batch_size, eval_batch_size=eval_batch_size,
                         num_workers=num_workers, data_root=data_root, cache_dir=cache_dir,
                         pad_to_multiple_of=pad_to_multiple_of, pad_last_batch=pad_last_batch, seed=seed)
        self.save_hyperparameters()
        if self.mask_token_id is None:
            raise DataError(f"Tokenizer {tokenizer} has no mask token; MLM needs one ([MASK] or <mask>).")
        self.packing, self.masking, self.document_mask = packing, masking, document_mask
        self.streaming, self.shuffle_buffer = streaming, shuffle_buffer
        self.val_mask_seed = val_mask_seed
        self.collate = MLMCollator(self.tokenizer, mlm_probability, whole_word_masking,
                                   mask_fraction=mask_replace_probability, random_fraction=random_replace_probability,
                                   seed=self.seed)
        self.val_masks = MLMCollator(self.tokenizer, val_mlm_probability, whole_word_masking, seed=val_mask_seed)
        self.stats: dict[str, dict[str, int]] = {}

    # ---- sources ----------------------------------------------------------------------------------------------

    def _source(self, split: str, files: list[str] | None,
                streaming: bool = False) -> tuple[Any, list[str] | datasets.Dataset | datasets.IterableDataset]:
        """(identity for the cache key, the files or the hub dataset) of one split; with `streaming`, a hub dataset
        is streamed rather than downloaded."""
        if files:
            return [file_identity(f) for f in files], [str(f) for f in files]
        if self.dataset is None:
            raise DataError(f"No {split!r} data: give data.{'val' if split == 'validation' else split}_files or a "
                            f"dataset name.")
        local = local_split_file(self.dataset, self.dataset_config, split, data_root(self.data_root))
        if local is not None:
            return [file_identity(local)], [str(local)]
        hub = load_hub_split(self.dataset, self.dataset_config, split, streaming=streaming,
                             root=data_root(self.data_root), files="your own text files (data.train_files)")
        if hub.column_names is not None and self.text_column not in hub.column_names:
            raise DataError(f"Dataset {self.dataset!r} split {split!r} has no column {self.text_column!r}; "
                            f"its columns are {hub.column_names}. Set text_column.")
        if streaming:
            return ["hub-stream", self.dataset, self.dataset_config, split], hub
        return ["hub", self.dataset, self.dataset_config, split, hub._fingerprint], hub

    def describe_source(self) -> str:
        if self.train_files:
            return f"files: {describe_files({'train': self.train_files, 'validation': self.val_files})}"

        def split(name: str, streamed: bool = False) -> str:
            local = local_split_file(self.dataset, self.dataset_config, name, data_root(self.data_root))
            return f"{name!r} ({local if local is not None else 'streamed from the hub' if streamed else 'the hub'})"

        validation = f"files {', '.join(self.val_files)}" if self.val_files else \
            f"split {split(self.val_split)}" if self.val_split is not None else "none"
        name = f"{self.dataset}{f' ({self.dataset_config})' if self.dataset_config else ''}"
        return f"dataset {name}: train split {split(self.train_split, self.streaming)}, validation {validation}"

    def _limit(self, role: str) -> tuple[str, int | None]:
        """The setting that limits the documents of `role` (train or validation), and its value."""
        setting = "max_documents" if role == "train" else "max_val_documents"
        return setting, getattr(self, setting)

    def _all_documents(self, source: list[str] | datasets.Dataset | datasets.IterableDataset) -> Iterator[str]:
        """Every non-blank document of a split, one at a time and in order: the files' documents (a text file is
        read line by line, a table whole), or the hub dataset's texts."""
        if isinstance(source, list):
            for path in source:
                found = False
                for document in iter_documents(path, self.text_column, self.blank_line_documents):
                    found = True
                    yield document
                if not found:
                    where = f"its {self.text_column!r} column" if Path(path).suffix.lower() in TABLE_READERS \
                        else "it"
                    raise DataError(f"Data file {path} holds no document: {where} has only blank lines or empty "
                                    f"values. Fill it or remove it from the config.")
            return
        if self.blank_line_documents:
            raise DataError(f"data.blank_line_documents applies to plain-text files, but {self.dataset!r} comes "
                            f"from the hub as a table; remove the setting.")
        if isinstance(source, datasets.IterableDataset):
            # `iter`, not `for row in source`: in a loader worker, a streamed dataset's own iterator gives that worker
            # only its share of the hub's files, and `PackedStream` then takes its share of that again (3 of 4
            # documents lost with 4 workers). The whole stream it is: `PackedStream` does the sharding.
            texts: Iterator[str] = (text for batch in source.iter(batch_size=1000)
                                    for text in batch[self.text_column])
        else:
            texts = (text for batch in source.select_columns([self.text_column]).iter(batch_size=1000)
                     for text in batch[self.text_column])
        yield from (text for text in texts if text and text.strip())

    def _stream(self, source: list[str] | datasets.Dataset | datasets.IterableDataset) -> Iterator[str]:
        """The training documents as they come, the first `max_documents` only when set; for tokenizer training and
        streamed pretraining. The same every pass: `PackedStream` shuffles by epoch."""
        return itertools.islice(self._all_documents(source), self._limit("train")[1])

    def _documents(self, split: str, source: list[str] | datasets.Dataset, role: str, folder: Path) -> datasets.Dataset:
        """The documents of a split as a one-column (`text`) dataset on disk: a hub dataset's non-blank texts
        (filtered in `num_proc` processes), or the files' documents written under `folder` 10,000 at a time. The
        role's limit (`max_documents` or `max_val_documents`) keeps the first N, and the number left out is logged."""
        setting, limit = self._limit(role)
        if isinstance(source, datasets.Dataset) and not self.blank_line_documents:
            column = self.text_column
            documents = source.select_columns([column]).filter(
                lambda batch: [bool(text and text.strip()) for text in batch[column]], batched=True,
                num_proc=self.num_proc if self.num_proc > 1 else None, desc=f"non-blank {split} documents")
            if column != "text":
                documents = documents.rename_column(column, "text")
            total = len(documents)
            if limit is not None and total > limit:
                documents = documents.select(range(limit))
        else:
            path = folder / f"documents-{split}.arrow"
            writer = ArrowWriter(path=str(path), features=datasets.Features({"text": datasets.Value("string")}))
            every = self._all_documents(source)
            try:
                total = 0
                while batch := list(itertools.islice(every, 10_000 if limit is None else min(10_000, limit - total))):
                    writer.write_batch({"text": batch})
                    total += len(batch)
                writer.finalize()
            finally:
                writer.close()
            total += sum(1 for _ in every)  # the documents the limit leaves out, counted for the log
            documents = datasets.Dataset.from_file(str(path))
        if not total:
            raise DataError(f"The {split} split of {self.dataset!r} has no non-blank text in its "
                            f"{self.text_column!r} column (data.text_column); choose the column that holds it.")
        if limit is not None and total > limit:
            log.info("%s: %s=%d keeps %d of %d documents; %d left out by that setting", split, setting, limit,
                     limit, total, total - limit)
        return documents

    # ---- examples ---------------------------------------------------------------------------------------------

    def _build(self, role: str, split: str, files: list[str] | None) -> datasets.Dataset:
        """The examples of `role` (train or validation) from `split` of the dataset, or from `files`: tokenized
        (in `num_proc` processes) and packed into files of the cache, opened memory-mapped."""
        identity, source = self._source(split, files)
        settings = dict(blank_line_documents=self.blank_line_documents, text_column=self.text_column,
                        max_documents=self._limit(role)[1], version=3)
        # Validation segments split at points of their own seed, as their masks are: with the training seed, each
        # seed of a sweep validated on other examples.
        seed = self.seed if role == "train" else self.val_mask_seed
        if self.packing == "segments":  # the examples themselves; FULL-SENTENCES caches the documents' tokens
            settings.update(packing=self.packing, max_length=self.max_length, seed=seed)
        key = fingerprint(identity, self.tokenizer_key(), settings)
        if self.packing == "segments":
            function = partial(segment_examples, tokenizer=self.tokenizer, max_length=self.max_length, seed=seed)
        else:
            function = partial(tokenize_documents, tokenizer=self.tokenizer)
        with tempfile.TemporaryDirectory(dir=self.cache_path, prefix=".documents-") as folder:
            tokenized = cached_map(lambda: self._documents(split, source, role, Path(folder)), function,
                                   cache_dir=self.cache_path, name=f"mlm-{split}", key=key,
                                   with_indices=self.packing == "segments", num_proc=self.num_proc)
        tokens = int(pc.sum(pc.list_value_length(tokenized.data.column("input_ids"))).as_py() or 0)
        if self.packing == "segments":
            self.stats[role] = {"examples": len(tokenized), "tokens": tokens}
            log.info("%s: %d BERT-style segment examples, %d tokens with specials", split, len(tokenized), tokens)
            return tokenized
        prefix, suffix = self.template.single
        packer = BlockPacker(self.max_length, prefix, suffix, self.tokenizer.sep_token_id, self.document_mask)
        path = self.cache_path / f"mlm-blocks-{split}-{fingerprint(key, self.max_length, self.document_mask)}.arrow"
        blocks = datasets.Dataset.from_file(str(path)) if path.is_file() else write_blocks(tokenized, path, packer)
        self.stats[role] = {"documents": len(tokenized), "tokens": tokens, "blocks": len(blocks)}
        log.info("%s: %d documents, %d tokens packed into %d blocks of %d (FULL-SENTENCES; the last one shorter)",
                 split, len(tokenized), tokens, len(blocks), self.max_length)
        return blocks

    def fixed_masks(self, dataset: datasets.Dataset, seed: int, masks: MLMCollator) -> datasets.Dataset:
        """The dataset with masks drawn once from `seed` by `masks` (stored as `input_ids` and `labels`), written to
        a file of the cache (keyed by the dataset's files and the masking settings) and opened memory-mapped."""

        def mask(batch: dict[str, list[list[int]]], indices: list[int]) -> dict[str, list[list[int]]]:
            generator = torch.Generator().manual_seed(seed * 1_000_003 + indices[0])
            rows = batch["input_ids"]
            padded = masks.pad([{"input_ids": row} for row in rows])["input_ids"]
            lengths = torch.tensor([len(row) for row in rows])
            attended = torch.arange(padded.shape[1]) < lengths[:, None]
            corrupted, labels = masks.mask(padded, attended, generator=generator)
            return {"input_ids": [corrupted[i, :n].tolist() for i, n in enumerate(lengths.tolist())],
                    "labels": [labels[i, :n].tolist() for i, n in enumerate(lengths.tolist())]}

        if "example_index" in dataset.column_names:  # the key of dynamic masks only
            dataset = dataset.remove_columns("example_index")
        key = fingerprint([f["filename"] for f in dataset.cache_files], seed, masks.mlm_probability,
                          masks.mask_fraction, masks.random_fraction, masks.continuation is not None)
        path = self.cache_path / f"mlm-masks-{key}.arrow"
        if path.is_file():
            return datasets.Dataset.from_file(str(path))
        return map_into_cache(dataset, mask, path, batched=True, batch_size=1000, with_indices=True,
                              new_fingerprint=key, desc="fixing masks")

    def setup(self, stage: str | None = None) -> None:
        if "train" not in self.datasets and stage in (None, "fit") and not self.streaming:
            train = self._build("train", self.train_split, self.train_files)
            if self.masking == "static":
                train = self.fixed_masks(train, self.seed, self.collate)
            elif "example_index" not in train.column_names:  # segments; blocks carry theirs from write_blocks
                train = train.add_column("example_index", np.arange(len(train), dtype=np.int64))
            self.datasets["train"] = train
        has_val = self.val_files is not None or (self.dataset is not None and self.val_split is not None)
        if "validation" not in self.datasets and stage in (None, "fit", "validate") and has_val:
            validation = self._build("validation", self.val_split or "validation", self.val_files)
            self.datasets["validation"] = self.fixed_masks(validation, self.val_mask_seed, self.val_masks)

    def order_per_process(self) -> str | None:
        if self.streaming:
            return ("data.streaming deals the documents out to the processes and loader workers, and numbers the "
                    "blocks and their masks within each")
        if self.packing == "full_sentences":
            return ("data.packing full_sentences batches each process's blocks by length: the short last block waits "
                    "for its process's last batch, shifting the blocks after it")
        return super().order_per_process()

    def batch_sampler(self, dataset: datasets.Dataset, train: bool, batch_size: int) -> ResumableBatches:
        """FULL-SENTENCES blocks all have the block length but the last: full batches of equal lengths, no padding."""
        if self.packing == "segments":
            return super().batch_sampler(dataset, train, batch_size)
        lengths = pc.list_value_length(dataset.data.column("input_ids")).to_numpy()
        sampler = epoch_sampler(dataset, shuffle=train, seed=self.seed, distributed=self.distributed())
        return SameLengthBatchSampler(sampler, batch_size, drop_last=False, lengths=lengths,
                                      pad_last_batch=self.fills_last_batch())

    def train_dataloader(self) -> ResumableLoader | StreamingLoader:
        if not self.streaming:
            return self._loader("train", train=True)
        if self.trainer is not None and self.trainer.max_steps < 0:
            raise DataError("data.streaming reads the corpus as a stream of unknown length, so an epoch has no "
                            "known end; set trainer.max_steps (and leave max_epochs unset).")
        if self.blank_line_documents and not self.train_files and self.dataset is not None:
            raise DataError(f"data.blank_line_documents applies to plain-text files, but {self.dataset!r} comes "
                            f"from the hub as a table; remove the setting.")
        _, source = self._source(self.train_split, self.train_files, streaming=True)
        prefix, suffix = self.template.single
        sharding = self.distributed() or {"num_replicas": 1, "rank": 0}
        stream = PackedStream(
            lambda epoch: self._stream(source), self.tokenizer,
            partial(BlockPacker, self.max_length, prefix, suffix, self.tokenizer.sep_token_id, self.document_mask),
            self.batch_size, self.collate, seed=self.seed, shuffle_buffer=self.shuffle_buffer,
            rank=sharding["rank"], world_size=sharding["num_replicas"], pad_last_batch=self.fills_last_batch())
        self.padding()
        return StreamingLoader(stream, num_workers=self.num_workers, generator=torch.Generator().manual_seed(self.seed),
                               fetched_ahead=lambda: fetched_ahead(self.trainer))

    def val_dataloader(self) -> ResumableLoader | list[ResumableLoader]:
        return self._loader("validation", train=False) if "validation" in self.datasets else []
