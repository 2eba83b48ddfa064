"""Position schemes, each one small module behind one interface.

`Attention` and `Encoder` call three hooks and never ask which scheme they hold:

- `embed(x, positions)`  adds absolute information to the token embeddings   (learned, sinusoidal)
- `rotate(q, k, positions)` rotates queries and keys                          (rope)
- `bias(q_len, k_len)`   returns an additive attention bias (1, H, q, k)       (alibi, t5)

each a no-op in the base class. References: learned tables (Devlin et al., 2019; RoBERTa's padding offset,
Liu et al., 2019), sinusoidal (Vaswani et al., 2017, Sec. 3.5), RoPE (Su et al., 2021; the rotate-half channel
layout used by transformers), ALiBi (Press et al., 2022), T5 relative buckets (Raffel et al., 2020).

Deliberate deviations: the sinusoidal table is added unscaled by default, as DistilBERT adds it (Vaswani et al.
instead multiply the token embeddings by sqrt(d)); `sinusoidal_scale` scales the table to the tokens' size. ALiBi
uses the symmetric distance |i - j| because the encoder is bidirectional; the T5 bias is added to scaled dot products
(T5 itself does not scale), so the bias learns on the same footing as the other schemes.
Positions count from the first token of the row, so batches are padded on the right (transformers' RoBERTa
instead counts only non-padding tokens, which agrees for right padding).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from encoders.choices import check_choice
from encoders.kernels import ScoreMod

if TYPE_CHECKING:  # annotations only: config.py imports POSITIONS to validate `position`
    from encoders.config import EncoderConfig


class PositionScheme(nn.Module):
    """The interface; every hook is a no-op."""

    settings: tuple[str, ...] = ()  # the EncoderConfig fields of this scheme alone (t5_num_buckets, rope_base, ...)

    @classmethod
    def length_limit(cls, config: EncoderConfig) -> int | None:
        """The longest sequence the scheme encodes under `config` (`EncoderConfig.max_sequence_length`); None: no
        limit."""
        return None

    @classmethod
    def check_config(cls, config: EncoderConfig) -> None:
        """Raise ValueError, naming the settings, where `config` gives sizes the scheme cannot work with."""

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries (B, H, n, D) at the first n of `positions` (all, or the first token only) and keys (B, H, T, D)
        at all T, as the scheme moves them before attention (RoPE rotates them; the others leave them)."""
        return q, k

    def bias(self, q_len: int, k_len: int) -> torch.Tensor | None:
        return None

    def score_mod(self, q_len: int, k_len: int) -> ScoreMod | None:
        """The bias as a FlexAttention `score_mod` (score, batch, head, query, key) -> score, computed inside the
        attention kernel instead of read from a (H, q, k) tensor; None for schemes without a bias."""
        return None


class NoPositions(PositionScheme):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()


class LearnedPositions(PositionScheme):
    """An absolute table; token t reads row `offset + t` (RoBERTa keeps rows 0..pad for padding)."""

    settings = ("position_offset",)

    @classmethod
    def length_limit(cls, config: EncoderConfig) -> int | None:
        return config.max_position_embeddings - config.position_offset

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.offset = config.position_offset
        self.table = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.max_length = self.length_limit(config)

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if positions.numel() > self.max_length:
            raise ValueError(
                f"Sequence length {positions.numel()} exceeds the learned position table "
                f"({self.table.num_embeddings} rows, offset {self.offset}: at most {self.max_length} tokens). "
                f"Truncate or window the input, raise max_position_embeddings before training, or pick a scheme "
                f"that extrapolates: sinusoidal, rope, alibi or t5."
            )
        return x + self.table(positions + self.offset)


def sinusoidal_table(length: int, dim: int, device: torch.device | None = None) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)); shape (length, dim)."""
    position = torch.arange(length, dtype=torch.float64, device=device)[:, None]
    inv_freq = torch.pow(10000.0, -torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim)
    table = torch.zeros(length, dim, dtype=torch.float64, device=device)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table.float()


class SinusoidalPositions(PositionScheme):
    """The fixed table times `sinusoidal_scale`, added to the token embeddings."""

    settings = ("sinusoidal_scale",)

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.dim = config.hidden_size
        self.scale = config.sinusoidal_scale
        self.register_buffer("table", sinusoidal_table(config.max_position_embeddings, self.dim), persistent=False)

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if positions.numel() > self.table.shape[0]:  # longer than ever seen: grow the cache, no limit
            self.table = sinusoidal_table(2 * positions.numel(), self.dim, device=x.device)
        table = self.table[positions]
        return x + (table if self.scale == 1.0 else self.scale * table).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class RotaryPositions(PositionScheme):
    """Rotates channel i with channel i + D/2 by angle pos * base^(-2i/D) (transformers' rotate-half layout).

    `Encoder.forward` makes one `positions` tensor per call and hands it to every layer, so the cos/sin tables
    are computed for the first layer and reused by the others (kept until a different `positions` or dtype comes).
    """

    settings = ("rope_base", "local_rope_base")

    @classmethod
    def check_config(cls, config: EncoderConfig) -> None:
        if config.head_dim % 2:
            raise ValueError(
                f"position='rope' rotates pairs of channels, but the head dimension is odd "
                f"(hidden_size={config.hidden_size} / num_heads={config.num_heads} = {config.head_dim}); "
                f"pick sizes that give an even head dimension."
            )

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        dim = config.head_dim
        self.register_buffer(
            "inv_freq", 1.0 / config.rope_base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim),
            persistent=False,
        )
        self._tables: tuple[torch.Tensor, torch.dtype, torch.Tensor, torch.Tensor] | None = None

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of the angles, each (T, D) in `dtype`."""
        cached = self._tables
        if cached is not None and cached[0] is positions and cached[1] == dtype:
            return cached[2], cached[3]
        angles = positions.float()[:, None] * self.inv_freq[None, :].float()  # (T, D/2)
        angles = torch.cat((angles, angles), dim=-1)  # (T, D)
        cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
        # Under torch.compile the graph computes them once anyway, and a module attribute set while tracing
        # would become a guard; outside it, an identity check against the last call's positions suffices.
        if not torch.compiler.is_compiling():
            self._tables = (positions, dtype, cos, sin)
        return cos, sin

    def rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.cos_sin(positions, q.dtype)
        n = q.shape[-2]  # the queries may be the first n positions only (`Encoder.forward`'s first_token_only)
        return q * cos[:n] + rotate_half(q) * sin[:n], k * cos + rotate_half(k) * sin


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """Press et al.: the geometric sequence 2^(-8/n), 2^(-16/n), ... for n a power of two; otherwise the slopes
    of the closest smaller power of two followed by every other slope of twice that."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_two(closest)
    if closest < num_heads:
        slopes += power_of_two(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes)


class ALiBiPositions(PositionScheme):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(config.num_heads), persistent=False)

    def bias(self, q_len: int, k_len: int) -> torch.Tensor:
        device = self.slopes.device
        distance = (torch.arange(k_len, device=device)[None, :] - torch.arange(q_len, device=device)[:, None]).abs()
        return -self.slopes[:, None, None] * distance[None].float()  # (H, q, k)

    def score_mod(self, q_len: int, k_len: int) -> ScoreMod:
        slopes = self.slopes

        def alibi(score, batch, head, query, key):
            return score - slopes[head] * (query - key).abs()

        return alibi


def t5_relative_bucket(relative_position: torch.Tensor, num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """Bidirectional T5 buckets for `relative_position = key - query`: half the buckets per direction; within a
    direction, exact buckets for distances below a quarter of all buckets, then logarithmic up to max_distance."""
    half = num_buckets // 2
    bucket = (relative_position > 0).long() * half
    distance = relative_position.abs()
    exact = half // 2
    logarithmic = exact + (
        torch.log(distance.float().clamp(min=1) / exact) / math.log(max_distance / exact) * (half - exact)
    ).long()
    logarithmic = logarithmic.clamp(max=half - 1)
    return bucket + torch.where(distance < exact, distance, logarithmic)


class T5RelativeBias(PositionScheme):
    """One learned scalar per (bucket, head), shared by every layer as in T5."""

    settings = ("t5_num_buckets", "t5_max_distance")

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.num_buckets = config.t5_num_buckets
        self.max_distance = config.t5_max_distance
        self.relative_bias = nn.Embedding(self.num_buckets, config.num_heads)

    def bias(self, q_len: int, k_len: int) -> torch.Tensor:
        device = self.relative_bias.weight.device
        relative = torch.arange(k_len, device=device)[None, :] - torch.arange(q_len, device=device)[:, None]
        buckets = t5_relative_bucket(relative, self.num_buckets, self.max_distance)  # (q, k)
        return self.relative_bias(buckets).permute(2, 0, 1)  # (H, q, k)

    def score_mod(self, q_len: int, k_len: int) -> ScoreMod:
        # The bias depends on key - query only: one (H, q_len + k_len - 1) row per head instead of (H, q, k).
        # (Indexing an (H, q, k) table by query also trips inductor's CPU FlexAttention template in torch 2.13.)
        device = self.relative_bias.weight.device
        relative = torch.arange(-(q_len - 1), k_len, device=device)
        table = self.relative_bias(t5_relative_bucket(relative, self.num_buckets, self.max_distance)).T
        offset = q_len - 1

        def t5(score, batch, head, query, key):
            return score + table[head, key - query + offset]

        return t5


POSITIONS: dict[str, type[PositionScheme]] = {
    "learned": LearnedPositions,
    "sinusoidal": SinusoidalPositions,
    "rope": RotaryPositions,
    "alibi": ALiBiPositions,
    "t5": T5RelativeBias,
    "none": NoPositions,
}


def build_position(config: EncoderConfig) -> PositionScheme:
    check_choice("position", config.position, POSITIONS)
    return POSITIONS[config.position](config)
