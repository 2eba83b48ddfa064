"""Masked-language-model corruption, vectorised in torch.

BERT (Devlin et al., 2019, section 3.1): 15% of the tokens are chosen for prediction; of those, 80% become
`[MASK]`, 10% a random token and 10% stay unchanged. Special tokens (`[CLS]`, `[SEP]`, ...) and padding are never
chosen. RoBERTa (Liu et al., 2019, section 4.1) draws new masks every time a sequence is seen ("dynamic"); BERT
fixed them at preprocessing ("static", see `data.mlm`). Whole-word masking (BERT's 2019 release) chooses whole
words: all pieces of a word are masked together, a piece being a WordPiece `##` continuation or a byte-level BPE
token without the leading `Ġ` that marks a word start.

Deviations, on purpose:
- Each token (or word) is chosen independently with probability `mlm_probability`, as in transformers'
  `DataCollatorForLanguageModeling`, instead of exactly round(15% x length) per sequence; the rate is the same in
  expectation and the draw is one vectorised call.
- Random replacements are drawn from the non-special tokens, so no `[CLS]` or `[PAD]` appears mid-sequence.
- Under whole-word masking the 80/10/10 choice is still made per token, as in BERT's `create_pretraining_data.py`.
- Dynamic masks are keyed: the random numbers behind example i's masks in epoch e are a hash of (seed, e, i,
  position) (`keyed_uniform`), not draws from a generator. A run that stops and resumes mid-epoch therefore masks
  every later batch exactly as the uninterrupted run does, and the masks do not depend on the batch size, the
  number of data workers or of ranks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerFast

from data.collate import PaddingCollator
from data.sources import DataError

# Word-boundary rule of each tokenizer family: does this vocabulary entry continue the previous word?
WORD_CONTINUATION_RULES: dict[str, Callable[[str], bool]] = {
    "wordpiece": lambda token: token.startswith("##"),
    "byte_level": lambda token: not token.startswith("Ġ"),  # Ġ is the byte-level form of a leading space
}


def word_boundary_family(tokenizer: PreTrainedTokenizerFast) -> str:
    """Which `WORD_CONTINUATION_RULES` entry applies, read from the tokenizer's serialised pipeline."""
    pipeline = json.loads(tokenizer.backend_tokenizer.to_str())
    model = pipeline["model"]["type"]
    if model == "WordPiece":
        return "wordpiece"
    if model == "BPE" and "ByteLevel" in json.dumps(pipeline.get("pre_tokenizer")):
        return "byte_level"
    raise DataError(
        f"Whole-word masking knows word boundaries for WordPiece (##) and byte-level BPE (Ġ) tokenizers, not for "
        f"a {model} model; set data.whole_word_masking false or use one of those tokenizers."
    )


def continuation_table(tokenizer: PreTrainedTokenizerFast) -> torch.Tensor:
    """(vocab,) bool: True for tokens that continue the previous word."""
    rule = WORD_CONTINUATION_RULES[word_boundary_family(tokenizer)]
    table = torch.zeros(len(tokenizer), dtype=torch.bool)
    for token, index in tokenizer.get_vocab().items():
        table[index] = rule(token)
    return table


def word_starts(input_ids: torch.Tensor, maskable: torch.Tensor, continuation: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: True where a word begins. After a special token or padding, a new word always begins."""
    previous_maskable = torch.nn.functional.pad(maskable[:, :-1], (1, 0), value=False)
    return ~continuation[input_ids] | ~maskable | ~previous_maskable


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (Steele et al., 2014) on uint64 arrays: a bijective, well-mixed hash."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def keyed_uniform(seed: int, epoch: int, example_index: torch.Tensor, length: int, streams: int) -> torch.Tensor:
    """(streams, B, length) float64 numbers, uniform in [0, 1), that depend only on (seed, epoch, example index,
    position, stream): the same example in the same epoch always gets the same numbers."""
    with np.errstate(over="ignore"):
        key = _splitmix64(np.array([seed & (2**64 - 1)], dtype=np.uint64))
        key = _splitmix64(key ^ np.uint64(epoch & (2**64 - 1)))
        rows = _splitmix64(key ^ example_index.numpy().astype(np.uint64))[None, :, None]  # (1, B, 1)
        # The stream in the high 32 bits, the position in the low: the counter of a token never depends on the
        # padded length of the batch it came in (a multiple of it did, so the 80/10/10 actions and replacements
        # changed with the batch's other examples).
        counters = ((np.arange(streams, dtype=np.uint64)[:, None, None] << np.uint64(32))
                    | np.arange(length, dtype=np.uint64)[None, None, :])  # (streams, 1, T)
        bits = _splitmix64(rows ^ _splitmix64(counters))
    return torch.from_numpy((bits >> np.uint64(11)).astype(np.float64) * 2.0**-53)


def mask_tokens(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    *,
    mask_token_id: int,
    replacement_ids: torch.Tensor,
    mlm_probability: float = 0.15,
    mask_fraction: float = 0.8,
    random_fraction: float = 0.1,
    starts: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    uniforms: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Corrupt `input_ids` (B, T) for MLM; returns (corrupted ids, labels with -100 where nothing is predicted).

    `maskable` (B, T) is False on special tokens and padding. With `starts` (from `word_starts`) every piece of
    a word takes the draw of its first piece, so words are chosen whole. The random numbers are `uniforms`
    ((3, B, T) in [0, 1): choice, action, replacement; from `keyed_uniform`) when given, else drawn from
    `generator` (torch's global generator when None).
    """
    if uniforms is not None:
        draw, action = uniforms[0], uniforms[1]
        picks = (uniforms[2] * len(replacement_ids)).long().clamp_(max=len(replacement_ids) - 1)
    else:
        draw = torch.rand(input_ids.shape, generator=generator)
    if starts is not None:
        positions = torch.arange(input_ids.shape[1]).expand_as(input_ids)
        first_piece = torch.where(starts, positions, 0).cummax(dim=1).values  # (B, T) position of each word's start
        draw = draw.gather(1, first_piece)
    chosen = (draw < mlm_probability) & maskable
    labels = torch.where(chosen, input_ids, -100)
    if uniforms is None:
        action = torch.rand(input_ids.shape, generator=generator)
        picks = torch.randint(len(replacement_ids), input_ids.shape, generator=generator)
    to_mask = chosen & (action < mask_fraction)
    to_random = chosen & (action >= mask_fraction) & (action < mask_fraction + random_fraction)
    random_ids = replacement_ids[picks]
    corrupted = torch.where(to_mask, mask_token_id, input_ids)
    corrupted = torch.where(to_random, random_ids, corrupted)
    return corrupted, labels


class MLMCollator:
    """Pads a batch and masks it. Examples that already carry `labels` (static or validation masks fixed at
    preprocessing) are only padded. The others get new masks each epoch (RoBERTa's dynamic masking): keyed by
    (`seed`, epoch, `example_index`) when the examples carry their index (`MLMDataModule` does; the epoch comes
    with the examples, a `data.loading.Batch`, 0 for a plain list), else drawn from torch's global generator.
    Filler rows (`pad_last_batch`) are one padding token, a special token: never masked.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerFast, mlm_probability: float = 0.15,
                 whole_word_masking: bool = False, mask_fraction: float = 0.8, random_fraction: float = 0.1,
                 seed: int = 0) -> None:
        if not 0.0 < mlm_probability < 1.0:
            raise ValueError(f"mlm_probability={mlm_probability} must lie in (0, 1).")
        if mask_fraction < 0 or random_fraction < 0 or mask_fraction + random_fraction > 1:
            raise ValueError(f"mask_fraction={mask_fraction} and random_fraction={random_fraction} must be >= 0 "
                             f"and sum to at most 1 (the rest stays unchanged).")
        if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
            raise DataError("MLM needs a tokenizer with a mask token and a pad token; this one lacks one of them.")
        self.pad = PaddingCollator(tokenizer.pad_token_id)
        self.mask_token_id = tokenizer.mask_token_id
        self.special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)))
        vocabulary = torch.arange(len(tokenizer))
        self.replacement_ids = vocabulary[~torch.isin(vocabulary, self.special_ids)]
        self.continuation = continuation_table(tokenizer) if whole_word_masking else None
        self.mlm_probability = mlm_probability
        self.mask_fraction = mask_fraction
        self.random_fraction = random_fraction
        self.seed = seed

    def maskable(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        maskable = ~torch.isin(input_ids, self.special_ids)
        return maskable if attention_mask is None else maskable & attention_mask.bool()

    def mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
             generator: torch.Generator | None = None, example_index: torch.Tensor | None = None,
             epoch: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        maskable = self.maskable(input_ids, attention_mask)
        starts = None if self.continuation is None else word_starts(input_ids, maskable, self.continuation)
        uniforms = None
        if example_index is not None:
            uniforms = keyed_uniform(self.seed, epoch, example_index, input_ids.shape[1], streams=3)
        return mask_tokens(input_ids, maskable, mask_token_id=self.mask_token_id,
                           replacement_ids=self.replacement_ids, mlm_probability=self.mlm_probability,
                           mask_fraction=self.mask_fraction, random_fraction=self.random_fraction, starts=starts,
                           generator=generator, uniforms=uniforms)

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        batch = self.pad(examples)
        example_index = batch.pop("example_index", None)
        if "labels" not in batch:
            batch["input_ids"], batch["labels"] = self.mask(batch["input_ids"], batch["attention_mask"],
                                                            example_index=example_index,
                                                            epoch=getattr(examples, "epoch", 0))
        # The masked positions among the B * T tokens, for the MLM head to project alone; built on the host for the
        # reason of `unpad_index` (data.collate).
        batch["masked_index"] = (batch["labels"].flatten() != -100).nonzero().squeeze(1)
        return batch
