"""The parts of a Transformer block (Vaswani et al., 2017; BERT's post-norm layout, Devlin et al., 2019).

Variant axes are string -> factory registries (`NORMS`, `ACTIVATIONS`); a bad key raises `ValueError` listing
the valid ones. GLU feed-forwards follow Shazeer (2020): `down(act(gate) * value)`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from encoders.choices import check_choice

if TYPE_CHECKING:  # annotations only: config.py imports the registries of this module and of positions.py
    from encoders.config import EncoderConfig
    from encoders.positions import PositionScheme


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
        self.down = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        if self.gated:
            gate, value = h.chunk(2, dim=-1)
            return self.down(self.activation(gate) * value)
        return self.down(self.activation(h))


def _random_keep(x: torch.Tensor, p: float) -> tuple[torch.Tensor, float]:
    """A keep-mask shaped like `x`, 1 or 0 in `x`'s dtype, each element dropped with probability `p` rounded to a
    multiple of 1/65536, and the matching scale 1 / (1 - that probability), so the expectation is exact.

    Draws 16 random bits per element, four from each 64-bit draw of torch's generator, and compares them with
    integer arithmetic. On one core of this CPU `F.dropout`'s `bernoulli_` took 56 ms for 4M elements (one
    generator call each) against 10 ms for the draws here, and comparisons producing `bool` tensors and
    `torch.where` on them ran 2-4x slower than the arithmetic below."""
    count = x.numel()
    words = torch.randint(-(2**63), 2**63 - 1, ((count + 3) // 4,), dtype=torch.int64, device=x.device)
    dropped = round(p * 65536)
    bits = words.view(torch.int16)[:count].view(x.shape).to(torch.int32)
    # bits >= threshold  <=>  the sign bit of bits - threshold is 0; shifting it down gives -1 or 0, plus 1: 0 or 1.
    keep = bits.sub_(dropped - 32768).bitwise_right_shift_(31).add_(1).to(x.dtype)
    return keep, 65536 / (65536 - dropped)


class _MaskAndScale(torch.autograd.Function):
    """x * keep * scale in one kernel (addcmul computes in float32 and rounds once, so a bfloat16 `x` is scaled
    by the exact factor), saving only the mask for the backward pass."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return torch.addcmul(x.new_zeros(()), x, keep, value=scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return torch.addcmul(grad.new_zeros(()), grad, keep, value=ctx.scale), None, None


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Inverted dropout, as `F.dropout`, with masks drawn 16 bits at a time on CPU (see `_random_keep`): the
    dropped fraction is `p` rounded to a multiple of 1/65536 (at most 7.6e-6 away) and the kept values are scaled
    by exactly the inverse of the kept fraction. GPUs and `torch.compile` keep `F.dropout`, whose Philox kernels
    are already fused and cheap."""
    if not training or p == 0.0:
        return x
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}.")
    if x.device.type != "cpu" or torch.compiler.is_compiling() or round(p * 65536) == 65536:
        return F.dropout(x, p, training=True)
    keep, scale = _random_keep(x, p)
    return _MaskAndScale.apply(x, keep, scale)


class Dropout(nn.Module):
    """`nn.Dropout` drawing its masks with `dropout` above (no parameters; checkpoints are unaffected)."""

    def __init__(self, p: float = 0.1) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}.")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


@dataclass(frozen=True)
class Unpadded:
    """Where the N real tokens of a right-padded (B, T) batch sit among its B * T rows. On the unpadded path the
    blocks carry (N, C) tokens: projections, norms and feed-forwards skip padding, and only attention pads
    its queries, keys and values back to (B, T) for `scaled_dot_product_attention`."""

    index: torch.Tensor  # (N,) rows of the flattened (B * T) batch that hold real tokens, ascending
    batch_size: int
    seq_len: int

    @classmethod
    def of(cls, attention_mask: torch.Tensor) -> Unpadded:
        return cls(attention_mask.flatten().nonzero().squeeze(1), *attention_mask.shape)

    def pad(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, F) -> (B, T, F), zeros at padding."""
        rows = tokens.new_zeros(self.batch_size * self.seq_len, tokens.shape[-1])
        return rows.index_copy(0, self.index, tokens).view(self.batch_size, self.seq_len, -1)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, F) -> (N, F)."""
        return x.reshape(-1, x.shape[-1]).index_select(0, self.index)


_compiled_flex_attention = None


def flex_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, score_mod, scale: float) -> torch.Tensor:
    """`torch.nn.attention.flex_attention`, compiled once per process on GPUs (it only runs fused when compiled):
    the score modification (position bias, key padding) is evaluated inside the attention kernel, so no
    (B, H, T, T) bias is read and the GPU keeps a flash-style kernel.

    On CPU it runs uncompiled, which materialises the scores as SDPA's math path does: torch 2.13's compiled CPU
    kernel returned wrong outputs on an AVX2-only AMD EPYC (largest error 0.73 against SDPA at T=24, 1.08 at T=8;
    right at T=128), so a forced CPU FlexAttention stays exact rather than fast."""
    global _compiled_flex_attention
    from torch.nn.attention.flex_attention import flex_attention as kernel

    if q.device.type == "cpu":
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            return kernel(q, k, v, score_mod=score_mod, scale=scale)
    if _compiled_flex_attention is None:
        _compiled_flex_attention = torch.compile(kernel)
    return _compiled_flex_attention(q, k, v, score_mod=score_mod, scale=scale)


class Attention(nn.Module):
    """Multi-head self-attention with one fused QKV projection and `scaled_dot_product_attention`."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.dropout = config.attention_dropout
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.bias)
        self.out = nn.Linear(config.hidden_size, config.hidden_size, bias=config.bias)

    def forward(
        self,
        x: torch.Tensor,
        position: PositionScheme,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        return_attention: bool = False,
        unpadded: Unpadded | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`mask` is boolean (B, 1, 1, T) (True = attend), an additive float (B or 1, H or 1, T, T) already in
        the dtype of the queries (`Encoder.forward` casts it once for all layers), or a FlexAttention score_mod
        holding both the position bias and the key padding (`Encoder.flex_attention`). With `unpadded`, `x` holds
        the real tokens only, (N, C), and so does the result."""
        qkv = self.qkv(x) if unpadded is None else unpadded.pad(self.qkv(x))  # (B, T, 3C)
        B, T, C = qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3
        qkv = qkv.view(B, T, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, T, D)
        q, k = position.rotate(q, k, positions)
        p = self.dropout if self.training else 0.0
        probs = None
        # With attention dropout on CPU, SDPA has no fused kernel and runs its math path anyway, drawing the
        # (B, H, T, T) mask with `bernoulli_`; the same math with litbert's `dropout` is faster (bert-mini shapes,
        # forward + backward, bf16: 52 ms against 87 ms at T=128, 180 ms against 467 ms at T=512).
        explicit = return_attention or (p > 0 and q.device.type == "cpu" and not torch.compiler.is_compiling())
        if callable(mask):  # Encoder.forward checked that attention dropout is off: FlexAttention has none
            y = flex_attention(q, k, v, mask, self.head_dim**-0.5)
        elif explicit:
            scores = (q * self.head_dim**-0.5) @ k.transpose(-2, -1)  # (B, H, T, T)
            if mask is not None:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min) if mask.dtype == torch.bool \
                    else scores + mask
            probs = scores.softmax(dim=-1)
            y = dropout(probs, p) @ v
            probs = probs if return_attention else None
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, H * D)
        if unpadded is not None:
            y = unpadded.unpad(y)  # (N, C)
        return self.out(y), probs


class Block(nn.Module):
    """Attention then feed-forward, each wrapped in dropout + residual, normalised after (post) or before (pre)."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.attention = Attention(config)
        self.attention_norm = build_norm(config)
        self.feed_forward = FeedForward(config)
        self.feed_forward_norm = build_norm(config)
        self.dropout = Dropout(config.hidden_dropout)

    def forward(
        self,
        x: torch.Tensor,
        position: PositionScheme,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        return_attention: bool = False,
        unpadded: Unpadded | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`x` is (B, T, C), or (N, C) real tokens with `unpadded`: everything but attention is per token."""
        if self.pre_norm:
            attended, probs = self.attention(self.attention_norm(x), position, positions, mask, return_attention,
                                             unpadded)
            x = x + self.dropout(attended)
            return x + self.dropout(self.feed_forward(self.feed_forward_norm(x))), probs
        attended, probs = self.attention(x, position, positions, mask, return_attention, unpadded)
        x = self.attention_norm(x + self.dropout(attended))
        return self.feed_forward_norm(x + self.dropout(self.feed_forward(x))), probs
