"""The parts of a Transformer block (Vaswani et al., 2017; BERT's post-norm layout, Devlin et al., 2019).

Variant axes are string -> factory registries (`NORMS`, `ACTIVATIONS`); a bad key raises `ValueError` listing
the valid ones. GLU feed-forwards follow Shazeer (2020): `down(act(gate) * value)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from encoders.choices import check_choice
from encoders.kernels import Dropout, PackedAttention, ScoreMod, Unpadded, attend

if TYPE_CHECKING:  # annotations only: config.py imports the registries of this module and of positions.py
    from encoders.config import EncoderConfig
    from encoders.positions import PositionScheme


def normal_init_(weight: torch.Tensor, std: float, cutoff: float | None = None) -> None:
    """Weights from N(0, std), cut off at `cutoff` standard deviations where given (ModernBERT's
    initializer_cutoff_factor, `EncoderConfig.initializer_cutoff`), as transformers starts them."""
    if cutoff is None:
        nn.init.normal_(weight, std=std)
    else:
        nn.init.trunc_normal_(weight, std=std, a=-cutoff * std, b=cutoff * std)


def _layernorm(config: EncoderConfig) -> nn.Module:
    return nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.bias)


def _rmsnorm(config: EncoderConfig) -> nn.Module:
    return nn.RMSNorm(config.hidden_size, eps=config.norm_eps)


NORMS: dict[str, Callable[[EncoderConfig], nn.Module]] = {"layernorm": _layernorm, "rmsnorm": _rmsnorm}


def build_norm(config: EncoderConfig) -> nn.Module:
    check_choice("norm", config.norm, NORMS)
    return NORMS[config.norm](config)


@dataclass(frozen=True)
class ActivationSpec:
    function: Callable[[], nn.Module]  # the nonlinearity, also used by the MLM head's transform
    gated: bool  # GLU: the up-projection is twice as wide and its halves multiply


ACTIVATIONS: dict[str, ActivationSpec] = {
    "gelu": ActivationSpec(nn.GELU, gated=False),
    "gelu_tanh": ActivationSpec(lambda: nn.GELU(approximate="tanh"), gated=False),
    "relu": ActivationSpec(nn.ReLU, gated=False),
    "geglu": ActivationSpec(nn.GELU, gated=True),
    "swiglu": ActivationSpec(nn.SiLU, gated=True),
}


def activation_spec(name: str) -> ActivationSpec:
    check_choice("activation", name, ACTIVATIONS)
    return ACTIVATIONS[name]


class FeedForward(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        spec = activation_spec(config.activation)
        self.gated = spec.gated
        width = 2 * config.intermediate_size if spec.gated else config.intermediate_size
        self.up = nn.Linear(config.hidden_size, width, bias=config.bias)
        self.activation = spec.function()
        # ModernBERT's mlp_dropout, on the inner activations (`EncoderConfig.feed_forward_dropout`)
        inner = config.feed_forward_dropout == "inner"
        self.dropout = Dropout(config.hidden_dropout) if inner else nn.Identity()
        self.down = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        if self.gated:
            gate, value = h.chunk(2, dim=-1)
            return self.down(self.dropout(self.activation(gate) * value))
        return self.down(self.dropout(self.activation(h)))


@dataclass(frozen=True)
class AttentionInputs:
    """What every block's attention needs beside its input, the same for all layers of one forward pass."""

    scheme: PositionScheme  # the position scheme: rotates queries and keys (RoPE), or is already in `mask`
    positions: torch.Tensor  # (T,) the token positions 0..T-1
    # See `kernels.attend`: padding, position bias, or a FlexAttention score_mod. With `packed`, the first query's
    # row only, (B, H or 1, 1, T), for a layer that computes the first token only.
    mask: torch.Tensor | ScoreMod | None
    unpadded: Unpadded | None = None  # set when the blocks carry the (N, C) real tokens only
    return_attention: bool = False  # also return each layer's (B, H, T, T) attention probabilities
    packed: PackedAttention | None = None  # attention over the N tokens without padding them back (Kernels.varlen)

    def first(self, x: torch.Tensor) -> torch.Tensor:
        """Each sequence's first token of a block's input, (B, 1, C)."""
        return self.unpadded.first(x) if self.unpadded is not None else x[:, :1]


class Attention(nn.Module):
    """Multi-head self-attention with one fused QKV projection."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.dropout = config.attention_dropout
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.bias)
        self.out = nn.Linear(config.hidden_size, config.hidden_size, bias=config.bias)

    def forward(self, x: torch.Tensor, inputs: AttentionInputs,
                first_only: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, T, C) -> (B, T, C), and the attention probabilities when asked for; with `inputs.unpadded`, `x` and
        the result hold the real tokens only, (N, C). With `first_only`, only each sequence's first token queries
        (every token is still a key and value): the result is (B, 1, C)."""
        if first_only:
            return self.first_query(x, inputs)
        qkv = self.qkv(x)
        if inputs.packed is not None:
            N = qkv.shape[0]
            q, k, v = qkv.view(N, 3, self.num_heads, self.head_dim).permute(1, 2, 0, 3).unsqueeze(1)  # (1, H, N, D)
            q, k = inputs.scheme.rotate(q, k, inputs.packed.positions)
            return self.out(inputs.packed.attend(q, k, v)), None  # (N, C)
        if inputs.unpadded is not None:
            qkv = inputs.unpadded.pad(qkv)  # (B, T, 3C): attention works on whole sequences
        B, T, C = qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3
        q, k, v = qkv.view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # each (B, H, T, D)
        q, k = inputs.scheme.rotate(q, k, inputs.positions)
        y, probs = attend(q, k, v, inputs.mask, self.dropout if self.training else 0.0, inputs.return_attention)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, H * D)
        if inputs.unpadded is not None:
            y = inputs.unpadded.unpad(y)  # (N, C)
        return self.out(y), probs

    def first_query(self, x: torch.Tensor, inputs: AttentionInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`forward` for each sequence's first token only: keys and values of every token, one query per sequence."""
        C = self.out.in_features
        weight, bias = self.qkv.weight, self.qkv.bias
        q = F.linear(inputs.first(x), weight[:C], None if bias is None else bias[:C])  # (B, 1, C)
        kv = F.linear(x, weight[C:], None if bias is None else bias[C:])
        if inputs.unpadded is not None:
            kv = inputs.unpadded.pad(kv)  # (B, T, 2C)
        B, T = kv.shape[0], kv.shape[1]
        k, v = kv.view(B, T, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # each (B, H, T, D)
        q = q.view(B, 1, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, 1, D)
        q, k = inputs.scheme.rotate(q, k, inputs.positions)
        mask = inputs.mask
        if isinstance(mask, torch.Tensor) and mask.shape[-2] > 1:
            mask = mask[..., :1, :]  # the first query's row of a (.., T, T) mask or bias
        y, probs = attend(q, k, v, mask, self.dropout if self.training else 0.0, inputs.return_attention)
        return self.out(y.transpose(1, 2).reshape(B, 1, C)), probs


class Block(nn.Module):
    """Attention then feed-forward, each wrapped in dropout + residual, normalised after (post) or before (pre); the
    config says which dropouts (`attention_output_dropout`, `feed_forward_dropout`)."""

    def __init__(self, config: EncoderConfig, first: bool = False) -> None:
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.attention = Attention(config)
        skip = first and not config.first_attention_norm  # the embeddings' norm already normalised the input
        self.attention_norm = nn.Identity() if skip else build_norm(config)
        self.feed_forward = FeedForward(config)
        self.feed_forward_norm = build_norm(config)
        # (`EncoderConfig.attention_output_dropout`, `attention_output_rate`, `feed_forward_dropout`)
        self.dropout = Dropout(config.hidden_dropout) if config.feed_forward_dropout == "output" else nn.Identity()
        rate = config.attention_dropout if config.attention_output_rate == "attention" else config.hidden_dropout
        self.attention_output_dropout = Dropout(rate) if config.attention_output_dropout else nn.Identity()

    def forward(self, x: torch.Tensor, inputs: AttentionInputs,
                first_only: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`x` is (B, T, C), or (N, C) real tokens with `inputs.unpadded`: everything but attention is per token.
        With `first_only` the block computes each sequence's first token only, (B, 1, C), from all of `x`."""
        residual = inputs.first(x) if first_only else x
        if self.pre_norm:
            attended, probs = self.attention(self.attention_norm(x), inputs, first_only)
            x = residual + self.attention_output_dropout(attended)
            return x + self.dropout(self.feed_forward(self.feed_forward_norm(x))), probs
        attended, probs = self.attention(x, inputs, first_only)
        x = self.attention_norm(residual + self.attention_output_dropout(attended))
        return self.feed_forward_norm(x + self.dropout(self.feed_forward(x))), probs
