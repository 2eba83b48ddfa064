"""Checks that data and model agree, run before training starts rather than failing deep inside an embedding."""

from __future__ import annotations

from typing import Protocol

from transformers import PreTrainedTokenizerFast

from data.sources import DataError


class ModelLimits(Protocol):
    """What the checks read from a model config (`encoders.EncoderConfig` has all of it)."""

    vocab_size: int
    type_vocab_size: int

    @property
    def max_sequence_length(self) -> int | None: ...


def check_max_length(max_length: int, config: ModelLimits) -> None:
    """Error when sequences of `max_length` tokens are longer than the model's position scheme can encode."""
    if max_length <= 0:
        raise DataError(f"max_length={max_length} must be positive.")
    limit = config.max_sequence_length
    if limit is not None and max_length > limit:
        raise DataError(
            f"max_length={max_length} is longer than the model's position scheme allows ({limit} positions for "
            f"position={getattr(config, 'position', '?')!r} with max_position_embeddings="
            f"{getattr(config, 'max_position_embeddings', '?')}); lower the datamodule's max_length to {limit} "
            f"or use a model with more positions (or an unbounded scheme such as rope or alibi)."
        )


def check_vocab_fits(tokenizer: PreTrainedTokenizerFast, config: ModelLimits) -> None:
    """Error when the tokenizer can emit ids past the model's embedding table (or token types it lacks)."""
    size = len(tokenizer)  # includes added tokens, unlike tokenizer.vocab_size
    if size > config.vocab_size:
        raise DataError(
            f"The tokenizer has {size} tokens but the model's vocab_size is {config.vocab_size}; ids >= "
            f"{config.vocab_size} would index past the embedding table. Set vocab_size >= {size} in the model "
            f"config (or train a smaller tokenizer)."
        )
    # A pair tokenizer that emits type 1 needs a second row in the token-type table; a model without one
    # (type_vocab_size=0) ignores token types altogether.
    if "token_type_ids" in tokenizer.model_input_names and config.type_vocab_size > 0:
        types = tokenizer("a", "b", return_token_type_ids=True)["token_type_ids"]
        if max(types) >= config.type_vocab_size:
            raise DataError(
                f"The tokenizer gives pairs token type ids up to {max(types)} but the model has "
                f"type_vocab_size={config.type_vocab_size}; use type_vocab_size=2 or a single-segment tokenizer."
            )
