"""Train, save and load tokenizers: BERT's WordPiece and RoBERTa's byte-level BPE, or any transformers folder.

References:
- WordPiece with BERT's normalisation and `[CLS] A [SEP] B [SEP]` with token types 0/1 (Devlin et al., 2019).
- Byte-level BPE (Radford et al., 2019) as used by RoBERTa (Liu et al., 2019): `<s> A </s></s> B </s>`.

Deviations, on purpose:
- The special tokens take the first ids (`[PAD]` = 0 for WordPiece as in BERT; `<s> <pad> </s> <unk> <mask>` =
  0..4 for BPE as in RoBERTa), so the presets' `pad_token_id` (0 and 1) match a freshly trained vocabulary.
- RoBERTa has no segment embedding (`type_vocab_size=1`), so the byte-level pair template gives every token type 0
  and the tokenizer emits no `token_type_ids` at all.
- `tokenizers`' WordPiece trainer numbers the `##c` continuation characters in the order it meets them in a hash
  map, and breaks ties between equally frequent merges by those numbers: the same text could give two different
  vocabularies (measured: 2 of 40 trainings on 3,000 WikiText lines learned 8 other tokens, and 36 of 40 with
  `TOKENIZERS_PARALLELISM=false`). litbert hands the trainer every `##c` of the text's alphabet, sorted, after the
  special tokens, so they are numbered in code-point order and every tie breaks the same way; the trained vocabulary
  is then renumbered (special tokens first, then word starts and `##` continuations, each in code-point order) into
  a fresh tokenizer whose only added tokens are the special ones. The same text and settings always give the same
  ids, so two runs of one config train the same model.

Everything is returned as a `transformers.PreTrainedTokenizerFast`, so a trained tokenizer saves to (and loads
from) the same folder layout as any transformers checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from data.sources import DataError
from encoders.hub import local_path

log = logging.getLogger(__name__)

TokenizerKind = Literal["wordpiece", "byte_level_bpe"]


@dataclass(frozen=True)
class TokenizerRecipe:
    """How one kind of tokenizer is built: its special tokens, templates and untrained pipeline."""

    special_tokens: dict[str, str]  # transformers role -> token; trained in this order, so ids 0, 1, ...
    single: str  # post-processor template for one sequence
    pair: str  # ... and for a pair; `:1` marks token type 1
    model_input_names: tuple[str, ...]
    build: Callable[[bool], Tokenizer]  # lowercase -> untrained tokenizer with normaliser and pre-tokeniser
    trainer: Callable[..., trainers.Trainer]
    # Tokens to number right after the special tokens, from the untrained tokenizer and the training texts, so that
    # the trainer numbers them (and breaks its ties) the same way on every run.
    numbered_first: Callable[[Tokenizer, list[str]], list[str]] | None = None
    # The trained tokenizer -> one with stable ids whose only added tokens are `special` (same lowercase setting).
    renumber: Callable[[Tokenizer, list[str], bool], Tokenizer] | None = None
    # Special tokens that take the space before them, as RoBERTa's `<mask>` does: "was <mask>." is then "Ġwas <mask> ."
    # as "was great." is "Ġwas Ġgreat .", the form masked in training, not "Ġwas Ġ <mask> .", which no training
    # input holds (byte-level BPE keeps the space as a token of its own).
    lstrip_tokens: tuple[str, ...] = ()


def _wordpiece(lowercase: bool) -> Tokenizer:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    # BERT strips accents exactly when it lowercases (the uncased models).
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                      strip_accents=lowercase, lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def _continuations(tokenizer: Tokenizer, texts: list[str]) -> list[str]:
    """`##c` for every character of the normalised texts that can continue a word: not whitespace, and not
    punctuation, which BERT's pre-tokeniser always splits off as a word of its own."""
    characters: set[str] = set()
    for text in texts:
        characters.update(tokenizer.normalizer.normalize_str(text))
    return [f"##{c}" for c in sorted(characters) if not c.isspace() and not _bert_punctuation(c)]


def _bert_punctuation(character: str) -> bool:
    code = ord(character)  # BERT counts every non-alphanumeric ASCII symbol as punctuation, beside Unicode's P*
    return 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126 or \
        unicodedata.category(character).startswith("P")


def _renumber_wordpiece(trained: Tokenizer, special: list[str], lowercase: bool) -> Tokenizer:
    vocabulary = trained.get_vocab(with_added_tokens=False)
    rest = sorted((token for token in vocabulary if token not in special), key=lambda t: (t.startswith("##"), t))
    ordered = {token: index for index, token in enumerate([*special, *rest])}
    tokenizer = _wordpiece(lowercase)  # fresh: the `##c` handed to the trainer must not stay added tokens
    tokenizer.model = models.WordPiece(vocab=ordered, unk_token="[UNK]", continuing_subword_prefix="##")
    tokenizer.add_special_tokens(special)
    return tokenizer


def _byte_level_bpe(lowercase: bool) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


TOKENIZER_RECIPES: dict[str, TokenizerRecipe] = {
    "wordpiece": TokenizerRecipe(
        special_tokens={"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                        "mask_token": "[MASK]"},
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        model_input_names=("input_ids", "token_type_ids", "attention_mask"),
        build=_wordpiece,
        trainer=lambda vocab_size, min_frequency, special: trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=special,
            continuing_subword_prefix="##"),
        numbered_first=_continuations,
        renumber=_renumber_wordpiece,
    ),
    "byte_level_bpe": TokenizerRecipe(
        special_tokens={"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>",
                        "mask_token": "<mask>", "cls_token": "<s>", "sep_token": "</s>"},
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        model_input_names=("input_ids", "attention_mask"),
        build=_byte_level_bpe,
        trainer=lambda vocab_size, min_frequency, special: trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=special,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
        lstrip_tokens=("<mask>",),
    ),
}


def train_tokenizer(
    texts: Iterable[str],
    kind: TokenizerKind = "wordpiece",
    vocab_size: int = 30522,
    lowercase: bool | None = None,
    min_frequency: int = 2,
    model_max_length: int = 512,
) -> PreTrainedTokenizerFast:
    """Train a tokenizer of `kind` on `texts`. `lowercase` defaults to True for WordPiece and False for BPE."""
    if kind not in TOKENIZER_RECIPES:
        raise ValueError(f"Unknown tokenizer kind {kind!r}; choose one of {sorted(TOKENIZER_RECIPES)}.")
    recipe = TOKENIZER_RECIPES[kind]
    special = list(dict.fromkeys(recipe.special_tokens.values()))  # unique, in order
    if vocab_size <= len(special):
        raise ValueError(f"vocab_size={vocab_size} leaves no room beside the {len(special)} special tokens.")
    lowercase = kind == "wordpiece" if lowercase is None else lowercase
    tokenizer = recipe.build(lowercase)
    first = list(special)
    if recipe.numbered_first is not None:
        texts = texts if isinstance(texts, list) else list(texts)  # read twice
        first += recipe.numbered_first(tokenizer, texts)
    tokenizer.train_from_iterator(texts, trainer=recipe.trainer(vocab_size, min_frequency, first))
    if tokenizer.get_vocab_size() > vocab_size:
        # The trainers keep every character of the text (every byte for byte-level BPE) and the special tokens,
        # whatever vocab_size asks for.
        raise DataError(f"vocab_size={vocab_size} (data.train_tokenizer.vocab_size) is below what a {kind} tokenizer "
                        f"of this text needs for its special tokens and alphabet alone: it came out with "
                        f"{tokenizer.get_vocab_size()} tokens. Set vocab_size to at least that.")
    if recipe.renumber is not None:
        tokenizer = recipe.renumber(tokenizer, special, lowercase)
    if tokenizer.get_vocab_size() < vocab_size:
        # The trainers stop, without a word, once no pair of tokens is seen min_frequency times: the model's
        # vocabulary would silently be smaller than the one asked for.
        size, lower = tokenizer.get_vocab_size(), " (or lower min_frequency)" if min_frequency > 1 else ""
        raise DataError(f"vocab_size={vocab_size} (data.train_tokenizer.vocab_size) is more than this text can give "
                        f"a {kind} tokenizer: it came out with {size} tokens, no pair of them left that the text "
                        f"holds min_frequency={min_frequency} times or more. Train on more text, or set vocab_size "
                        f"to {size}{lower}.")
    # (adding a special token again sets its options, its id kept)
    tokenizer.add_special_tokens([AddedToken(token, lstrip=True, normalized=False, special=True)
                                  for token in recipe.lstrip_tokens])
    ids = {token: tokenizer.token_to_id(token) for token in special}
    tokenizer.post_processor = processors.TemplateProcessing(
        single=recipe.single, pair=recipe.pair, special_tokens=list(ids.items()))
    log.info("trained a %s tokenizer with %d tokens", kind, tokenizer.get_vocab_size())
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=model_max_length,
                                   model_input_names=list(recipe.model_input_names), **recipe.special_tokens)


# transformers 5 saves a tokenizer that is its tokenizer.json alone (litbert's trained ones) under the class name
# TokenizersBackend, which transformers 4 (pyproject allows >= 4.48) does not have: its AutoTokenizer refuses the
# folder. PreTrainedTokenizerFast names the same class in both.
PORTABLE_CLASS_NAMES = {"TokenizersBackend": "PreTrainedTokenizerFast"}


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: str | os.PathLike[str],
                   max_length: int | None = None, token_types: bool = True) -> Path:
    """Save as a transformers tokenizer folder (`tokenizer.json`, `tokenizer_config.json`) that transformers 4 and 5
    both load (`PORTABLE_CLASS_NAMES`). `max_length`: the longest input of the model saved beside it, where its
    positions limit it; a longer `model_max_length` is saved as this one, since transformers' pipelines and
    `truncation=True` cut inputs to model_max_length, and a longer input would index past the position table.
    `token_types` False: that model has no token-type table, and the tokenizer saved gives no `token_type_ids`
    (transformers 4's DistilBERT refuses them as an argument, litbert's encoder too, and pipelines pass them)."""
    folder = Path(folder)
    tokenizer.save_pretrained(str(folder))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    changes = {}
    if config.get("tokenizer_class") in PORTABLE_CLASS_NAMES:
        changes["tokenizer_class"] = PORTABLE_CLASS_NAMES[config["tokenizer_class"]]
    if max_length is not None and tokenizer.model_max_length > max_length:
        changes["model_max_length"] = max_length
    if not token_types and "token_type_ids" in tokenizer.model_input_names:
        changes["model_input_names"] = [name for name in tokenizer.model_input_names if name != "token_type_ids"]
    if changes:
        text = json.dumps(config | changes, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        config_path.write_text(text, encoding="utf-8")
    return folder


@dataclass(frozen=True)
class TokenizerTraining:
    """Settings of a tokenizer that a datamodule trains on its own training text (see `ensure_trained`)."""

    kind: TokenizerKind = "wordpiece"
    vocab_size: int = 30522
    lowercase: bool | None = None  # None: lowercase for WordPiece (BERT uncased), keep case for byte-level BPE
    min_frequency: int = 2


TRAINING_RECORD = "litbert_tokenizer.json"  # what a trained tokenizer folder was trained with, and on what


def ensure_trained(folder: str | os.PathLike[str], training: TokenizerTraining, texts: Callable[[], Iterable[str]],
                   source: str) -> Path:
    """`folder` holding a tokenizer trained with `training` on `texts()` (identified by `source`).

    Trains and saves it when the folder does not exist; reuses it when the folder records the same settings and
    source; refuses a folder trained otherwise, or not trained by litbert, rather than silently using it. Saving
    goes through a private folder renamed into place, so processes racing to train (one per DDP rank) all end up
    loading the same tokenizer.
    """
    folder = Path(folder).expanduser()
    wanted = {"training": asdict(training), "source": source}
    if not folder.exists():
        tokenizer = train_tokenizer(texts(), **asdict(training))
        private = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
        save_tokenizer(tokenizer, private)
        (private / TRAINING_RECORD).write_text(json.dumps(wanted, indent=2) + "\n")
        try:
            private.rename(folder)
            log.info("saved the trained tokenizer to %s", folder)
        except OSError:  # another process renamed its copy first; use that one
            shutil.rmtree(private, ignore_errors=True)
    record = folder / TRAINING_RECORD
    if not record.is_file():
        raise DataError(
            f"data.tokenizer={str(folder)!r} exists but was not trained by litbert (no {TRAINING_RECORD}), and "
            f"data.train_tokenizer asks to train one there. Remove train_tokenizer to use that tokenizer as is, or "
            f"point data.tokenizer to a new folder."
        )
    found = json.loads(record.read_text())
    if found != wanted:
        # The data is recorded as a fingerprint: say what it covers when it is all that differs.
        documents = (" (the same settings on other training documents: another source, or another "
                     "data.max_documents, data.text_column or data.blank_line_documents)"
                     if found["training"] == wanted["training"] else "")
        raise DataError(
            f"The tokenizer in {folder} was trained with {found['training']} on data {found['source']}, but this run "
            f"asks for {wanted['training']} on data {wanted['source']}{documents}. Delete the folder to retrain, or "
            f"point data.tokenizer to another folder."
        )
    return folder


def _recipe_settings_of(tokenizer: Tokenizer) -> dict[str, Any]:
    """A bare tokenizer.json does not say which token plays which role, nor whether the model takes token types:
    recognise the recipe by its tokens, and take both from it (BERT's segment B keeps its type 1)."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    for recipe in TOKENIZER_RECIPES.values():
        if all(token in vocab for token in recipe.special_tokens.values()):
            return {**recipe.special_tokens, "model_input_names": list(recipe.model_input_names)}
    return {}


def load_tokenizer(path: str | os.PathLike[str], setting: str | None = None) -> PreTrainedTokenizerFast:
    """A transformers tokenizer folder (e.g. MiniLM's, or one from `save_tokenizer`), a bare `tokenizer.json`, or
    a Hugging Face Hub id (`encoders.hub`); errors name `setting` (`data.tokenizer`) where given."""
    given, path = path, local_path(path, weights=False, setting=setting)
    if path.is_file():
        if path.suffix != ".json":
            raise DataError(f"Tokenizer file {path} is not a tokenizer.json; pass the folder that holds it instead.")
        backend = Tokenizer.from_file(str(path))
        return PreTrainedTokenizerFast(tokenizer_object=backend, **_recipe_settings_of(backend))
    known = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json")
    if not any((path / name).is_file() for name in known):
        if setting is None:
            raise DataError(f"Tokenizer folder {path} holds none of {list(known)}; is it a tokenizer folder?")
        # data.tokenizer defaults to model.pretrained's folder, which a model saved without its tokenizer (transformers'
        # `model.save_pretrained` alone) leaves without one
        raise DataError(f"{setting}={given}: the folder {path} holds none of {list(known)}, so no tokenizer (unset, "
                        f"{setting} is model.pretrained's folder; a model saved without its tokenizer has none). "
                        f"Set {setting} to the tokenizer the model was trained with: a folder, a tokenizer.json or "
                        f"a hub id.")
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if not tokenizer.is_fast:
        raise DataError(f"Tokenizer {path} loaded as a slow (Python) tokenizer; litbert needs a fast one.")
    return tokenizer


def describe(tokenizer: PreTrainedTokenizerFast) -> str:
    """What identifies a tokenizer for caching: its full serialised pipeline and special tokens."""
    return tokenizer.backend_tokenizer.to_str() + repr(sorted(tokenizer.special_tokens_map.items()))


@dataclass(frozen=True)
class SpecialTokenTemplate:
    """The special tokens a tokenizer puts around one sequence or a pair, with their token types.

    Learned from the tokenizer itself (by encoding the unknown token as a stand-in for each sequence), so code
    that cuts or packs token ids can add `[CLS] ... [SEP]` or `<s> ... </s></s> ... </s>` without knowing the
    tokenizer's family.
    """

    single: tuple[list[int], list[int]]  # ids before and after A
    pair: tuple[list[int], list[int], list[int]]  # ids before A, between A and B, after B
    single_types: tuple[list[int], int, list[int]]  # types of the prefix, of A, of the suffix
    pair_types: tuple[list[int], int, list[int], int, list[int]]

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerFast) -> SpecialTokenTemplate:
        unk, unk_id = tokenizer.unk_token, tokenizer.unk_token_id
        if unk is None or unk_id is None:
            raise DataError("The tokenizer has no unknown token; litbert needs one to learn its special tokens.")
        one = tokenizer(unk, return_token_type_ids=True)
        two = tokenizer(unk, unk, return_token_type_ids=True)
        i = one["input_ids"].index(unk_id)
        a, b = [k for k, token in enumerate(two["input_ids"]) if token == unk_id]
        ids, types = one["input_ids"], one["token_type_ids"]
        pair_ids, pair_types = two["input_ids"], two["token_type_ids"]
        return cls(
            single=(ids[:i], ids[i + 1:]),
            pair=(pair_ids[:a], pair_ids[a + 1:b], pair_ids[b + 1:]),
            single_types=(types[:i], types[i], types[i + 1:]),
            pair_types=(pair_types[:a], pair_types[a], pair_types[a + 1:b], pair_types[b], pair_types[b + 1:]),
        )

    def num_special(self, pair: bool = False) -> int:
        return sum(len(part) for part in (self.pair if pair else self.single))

    def wrap(self, a: list[int], b: list[int] | None = None) -> tuple[list[int], list[int]]:
        """`a` (and `b`) with the special tokens added: (input_ids, token_type_ids)."""
        if b is None:
            (before, after), (t_before, t_a, t_after) = self.single, self.single_types
            return before + a + after, t_before + [t_a] * len(a) + t_after
        before, middle, after = self.pair
        t_before, t_a, t_middle, t_b, t_after = self.pair_types
        return (before + a + middle + b + after,
                t_before + [t_a] * len(a) + t_middle + [t_b] * len(b) + t_after)
