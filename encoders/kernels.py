"""The attention kernels and CPU fast paths the model's parts call: which attention kernel runs (`attend`),
dropout with cheap masks on CPU, skipping padding tokens (`Unpadded`), attention over those tokens without padding
them back (`PackedAttention`: torch's `varlen_attn` or FlexAttention), and the FlexAttention wrapper. The model
reads the same without them; each is measured in BENCHMARKS.md (`bench/fast_paths.py`). The choices a run may make
among them are `Kernels`, given to the `Encoder` beside its architecture (`EncoderConfig`)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Kernels:
    """How an encoder computes, chosen per run (`Encoder(config, kernels=...)`, `--model.kernels.unpad_below 0`):
    neither choice changes a weight or, beyond float rounding, an output, so neither is stored with the weights."""

    # The blocks skip padding tokens (`Unpadded`) when real tokens are fewer than this fraction of the batch;
    # measured on CPU (MiniLM-sized, batch 32): 40% real tokens ran 2.3x (fp32) / 1.5x (bf16) faster unpadded, 97%
    # real ran 3% / 12% slower, the gathers costing more than the padding they save. 0 never unpads.
    unpad_below: float = 0.8
    # FlexAttention for position schemes with a bias (ALiBi, T5): True computes the bias inside the attention kernel
    # (compiled on GPUs; it has no dropout, so attention_dropout must be 0 while training, and on CPU no backward
    # pass, so a CPU forward that records gradients is refused). Off by default: the bias goes to SDPA as a dense
    # (B, H, T, T) float mask, which measured faster on an H100 (bert-base ALiBi training, bf16, 32 x 512: 46 ms a
    # step against 109 ms; T5's compiled kernel did not fit in shared memory).
    flex_attention: bool = False
    # Attention over the real tokens packed into one sequence (`PackedAttention`), for batches the blocks run
    # unpadded (see unpad_below) and for packed documents, instead of padding queries, keys and values back to
    # (B, T) in every layer and masking documents with a dense (B, 1, T, T) mask. None: on CUDA where torch's
    # `varlen_attn` (FlashAttention over cu_seqlens) applies: a torch whose varlen_attn has `window_size`, a scheme
    # without a bias, float16 or bfloat16, head size a multiple of 8 up to 256, an Ampere or newer GPU, attention
    # dropout off, no attentions or hidden states asked for; elsewhere today's path. True: always for those batches,
    # with FlexAttention (compiled on CUDA) where varlen_attn does not apply, and on CPU computed densely over all
    # N x N token pairs, exact but slow (a test bench); refused with attention dropout in training, with attentions
    # or hidden states asked for, and under torch.compile. False: never. Not measured on a GPU yet.
    varlen: bool | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.unpad_below <= 1.0:
            raise ValueError(f"Kernels.unpad_below={self.unpad_below} is a fraction of real tokens in a batch; set it "
                             f"within [0, 1] (0 never skips padding, 1 whenever there is any).")


def _random_bits(count: int) -> torch.Tensor:
    """`count` random int16 values, uniform over all 65536, from torch's default CPU generator, so that
    `torch.manual_seed` fixes the masks and a checkpoint's saved torch RNG state resumes them. `random_(-2**63, None)`
    takes the generator's 64-bit draws as they come, four values each, where a bounded range (`randint`) reduces each
    draw modulo its width, a 64-bit division per word (1.36x slower here)."""
    words = torch.empty((count + 3) // 4, dtype=torch.int64).random_(-(2**63), None)
    return words.view(torch.int16)[:count]


def _random_keep(x: torch.Tensor, p: float) -> tuple[torch.Tensor, float]:
    """A keep-mask shaped like `x`, 1 or 0 in `x`'s dtype, each element dropped with probability `p` rounded to a
    multiple of 1/65536, and the matching scale 1 / (1 - that probability), so the expectation is exact.

    Each element takes 16 random bits (`_random_bits`) and is kept when they are at least a threshold, computed
    with integer arithmetic. On one core of this CPU `F.dropout`'s `bernoulli_` took 56 ms for 4M elements (one
    generator call each) against 10 ms for 16-bit draws from torch's generator; producing the mask through `bool`
    tensors (a comparison, then a cast or `torch.where`) ran 2-7x slower than the clamp below."""
    dropped = round(p * 65536)
    if dropped == 0:
        return torch.ones_like(x), 1.0
    below = dropped - 32768 - 1  # the largest dropped value: drop where bits <= below, i.e. `dropped` of 65536
    keep = torch.clamp(_random_bits(x.numel()), below, below + 1)  # below or below + 1
    return keep.sub_(below).to(x.dtype).view(x.shape), 65536 / (65536 - dropped)


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
    """Where the N real tokens of a padded (B, T) batch sit among its B * T rows. On the unpadded path the
    blocks carry (N, C) tokens: projections, norms and feed-forwards skip padding, and only attention pads
    its queries, keys and values back to (B, T) for `scaled_dot_product_attention`."""

    index: torch.Tensor  # (N,) rows of the flattened (B * T) batch that hold real tokens, ascending
    batch_size: int
    seq_len: int

    @property
    def whole(self) -> bool:
        """Every token is real (packed documents without padding): `index` is 0..B*T-1 and no gather is needed."""
        return self.index.numel() == self.batch_size * self.seq_len

    def pad(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, F) -> (B, T, F), zeros at padding."""
        if self.whole:
            return tokens.view(self.batch_size, self.seq_len, -1)
        rows = tokens.new_zeros(self.batch_size * self.seq_len, tokens.shape[-1])
        return rows.index_copy(0, self.index, tokens).view(self.batch_size, self.seq_len, -1)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, F) -> (N, F)."""
        if self.whole:
            return x.reshape(-1, x.shape[-1])
        return x.reshape(-1, x.shape[-1]).index_select(0, self.index)

    @functools.cached_property
    def _firsts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Where each sequence's position 0 sits among the N tokens (B,), and whether it is a real token (B,)."""
        where = torch.full((self.batch_size * self.seq_len,), -1, dtype=torch.long, device=self.index.device)
        where[self.index] = torch.arange(self.index.numel(), device=self.index.device)
        at = where[::self.seq_len]  # each row's position 0
        return at.clamp(min=0), at >= 0

    def first(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, F) -> (B, 1, F): each sequence's position 0, zeros where it is padding (as `pad` gives)."""
        if self.index.numel() == 0:
            return tokens.new_zeros(self.batch_size, 1, tokens.shape[-1])
        return self.first_real(tokens.index_select(0, self._firsts[0]).unsqueeze(1))

    def first_real(self, first: torch.Tensor) -> torch.Tensor:
        """(B, 1, F) values computed for each sequence's position 0, zeros where that position is padding (also where
        a row of padding alone attended to nothing and gave NaN)."""
        if self.index.numel() == 0:
            return torch.zeros_like(first)
        return torch.where(self._firsts[1][:, None, None], first, 0.0)


_compiled_flex_attention = None


def flex_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, score_mod, scale: float,
                   block_mask=None) -> torch.Tensor:
    """`torch.nn.attention.flex_attention`, compiled once per process on GPUs (it only runs fused when compiled):
    the score modification (position bias, key padding) is evaluated inside the attention kernel, so no
    (B, H, T, T) bias is read and the GPU keeps a flash-style kernel; a `block_mask` skips the blocks of keys no
    query of a block attends to.

    On CPU it runs uncompiled, which materialises the scores as SDPA's math path does: torch 2.13's compiled CPU
    kernel returned wrong outputs on an AVX2-only AMD EPYC (largest error 0.73 against SDPA at T=24, 1.08 at T=8;
    right at T=128), so a forced CPU FlexAttention stays exact rather than fast."""
    global _compiled_flex_attention
    from torch.nn.attention.flex_attention import flex_attention as kernel

    if q.device.type == "cpu":
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            return kernel(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
    if _compiled_flex_attention is None:
        _compiled_flex_attention = torch.compile(kernel)
    return _compiled_flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


# FlexAttention's score modification: (score, batch index, head index, query index, key index) -> new score.
ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def sequence_starts(index: torch.Tensor, seq_len: int, document_ids: torch.Tensor | None = None) -> torch.Tensor:
    """(N,) True at each of the real tokens `index` (ascending among a (B, seq_len) batch's flat positions) that
    starts a sequence of `PackedAttention`: a row's first real token, and with `document_ids` (B, T) also each token
    whose document differs from the real token before it in its row. A document is thus a run of one id, as
    packing numbers them (`data.mlm`). No host sync, wherever the tensors are."""
    rows = torch.div(index, seq_len, rounding_mode="floor")
    starts = torch.ones_like(index, dtype=torch.bool)
    changed = rows[1:] != rows[:-1]
    if document_ids is not None:
        documents = document_ids.flatten().index_select(0, index)
        changed |= documents[1:] != documents[:-1]
    starts[1:] = changed
    return starts


def cu_seqlens(starts: torch.Tensor) -> torch.Tensor:
    """(S + 1,) int32: where each of the S sequences `starts` marks begins among the N tokens, then N, as
    `varlen_attn` takes them. `nonzero` makes the host wait for a GPU: the collator computes it on the host
    (`data.collate`), the encoder only for batches that came without it."""
    ends = torch.tensor([starts.numel()], device=starts.device)
    return torch.cat([starts.nonzero().squeeze(1), ends]).int()


@functools.lru_cache(maxsize=8)
def _flash_capable(device_index: int) -> bool:
    """FlashAttention, which `varlen_attn` calls, runs on Ampere (compute capability 8.0) and newer."""
    return torch.cuda.get_device_capability(device_index) >= (8, 0)


@functools.lru_cache(maxsize=1)
def varlen_kernel() -> Callable | None:
    """torch's `varlen_attn` where this torch has it with a sliding window (`window_size`), else None."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn if "window_size" in inspect.signature(varlen_attn).parameters else None


def varlen_applies(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """Whether torch's `varlen_attn` (FlashAttention) can compute attention over queries of this device, dtype and
    head size (a position bias is the caller's to rule out)."""
    if device.type != "cuda" or dtype not in (torch.float16, torch.bfloat16) or varlen_kernel() is None:
        return False
    if head_dim % 8 or head_dim > 256:
        return False
    return _flash_capable(device.index if device.index is not None else torch.cuda.current_device())


_compiled_create_block_mask = None


def block_mask(mask_mod, length: int, device: torch.device):
    """FlexAttention's block mask of `mask_mod` over `length` queries and keys. Compiled once per process on GPUs,
    where the uncompiled function would first build the whole (length, length) mask (and its integer intermediates:
    gigabytes at 16k tokens); uncompiled on CPU, for the reason of `flex_attention`."""
    global _compiled_create_block_mask
    from torch.nn.attention.flex_attention import create_block_mask

    if device.type == "cpu":
        return create_block_mask(mask_mod, None, None, length, length, device=device)
    if _compiled_create_block_mask is None:
        _compiled_create_block_mask = torch.compile(create_block_mask)
    return _compiled_create_block_mask(mask_mod, None, None, length, length, device=device)


@dataclass(frozen=True)
class PackedAttention:
    """Self-attention over the N tokens of an `Unpadded` batch as one packed sequence of shorter sequences (each
    row's real tokens, or each document of a row), with no padding between them and no (B, T, T) mask: a token
    attends to the tokens of its own sequence (within `window` positions of it in a local layer), its scores biased
    by `score_mod` taken at the tokens' positions in their rows, the positions the padded path gives them.

    Kernels (`kernel`): "varlen", torch's `varlen_attn` over `cu_seqlens` (CUDA; no bias, no dropout; its window
    counts tokens, which are the positions since each sequence is a run of contiguous real tokens); "flex",
    FlexAttention with a block mask of the sequences (compiled on CUDA); "dense", the same mask and bias evaluated for
    all N x N pairs and given to SDPA, which on CPU is what uncompiled FlexAttention computes anyway, and has a
    backward pass there (FlexAttention has none on CPU)."""

    kernel: str  # "varlen", "flex" or "dense"
    num_heads: int
    sequences: torch.Tensor  # (N,) each token's sequence number, ascending
    positions: torch.Tensor  # (N,) each token's position in its row
    cu_seqlens: torch.Tensor | None  # (S + 1,) int32, see `cu_seqlens`: needed by "varlen" only
    max_seqlen: int  # at least the longest sequence (the row length: a shape, so no host sync)
    score_mod: ScoreMod | None = None  # the position scheme's bias over row positions (ALiBi, T5)
    window: int | None = None  # a local layer's: keys at most this many positions away

    def local(self, window: int) -> PackedAttention:
        """The same for the local layers: within `window` positions."""
        return dataclasses.replace(self, window=window)

    def mask_mod(self):
        """FlexAttention's mask_mod over token numbers among the N: same sequence, and within the window. (Closures
        over tensors, as the other score_mods: what torch.compile takes as inputs rather than constants.)"""
        sequences, positions, window = self.sequences, self.positions, self.window

        def same_sequence(batch, head, query, key):
            return sequences[query] == sequences[key]

        def same_sequence_within_window(batch, head, query, key):
            near = (positions[query] - positions[key]).abs() <= window
            return (sequences[query] == sequences[key]) & near

        return same_sequence if window is None else same_sequence_within_window

    def row_score_mod(self) -> ScoreMod | None:
        """The position scheme's score_mod taken at the row positions of tokens `query` and `key`."""
        position_mod, positions = self.score_mod, self.positions
        if position_mod is None:
            return None

        def at_row_positions(score, batch, head, query, key):
            return position_mod(score, batch, head, positions[query], positions[key])

        return at_row_positions

    @functools.cached_property
    def block_mask(self):
        """The block mask of `mask_mod`, built once per forward and shared by the layers."""
        return block_mask(self.mask_mod(), self.sequences.numel(), self.sequences.device)

    @functools.cached_property
    def dense_mask(self) -> torch.Tensor:
        """(N, N) boolean `mask_mod`, or the (H, N, N) bias with the masked pairs at its dtype's minimum."""
        index = torch.arange(self.sequences.numel(), device=self.sequences.device)
        keep = self.mask_mod()(0, None, index[:, None], index[None, :])
        if self.score_mod is None:
            return keep
        heads = torch.arange(self.num_heads, device=index.device)[:, None, None]
        zero = torch.zeros((), device=index.device)
        bias = self.row_score_mod()(zero, 0, heads, index[None, :, None], index[None, None, :])
        return bias.masked_fill(~keep, torch.finfo(bias.dtype).min)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(D) + bias) v within each sequence, for (1, H, N, D) queries, keys and values;
        (N, H * D)."""
        _, heads, n, head_dim = q.shape
        if self.kernel == "varlen":
            window = {} if self.window is None else {"window_size": (self.window, self.window)}
            q, k, v = (t[0].transpose(0, 1) for t in (q, k, v))  # each (N, H, D)
            y = varlen_kernel()(q, k, v, self.cu_seqlens, self.cu_seqlens, self.max_seqlen, self.max_seqlen, **window)
            return y.reshape(n, heads * head_dim)
        if self.kernel == "flex":
            y = flex_attention(q, k, v, self.row_score_mod(), head_dim**-0.5, block_mask=self.block_mask)
        else:
            mask = self.dense_mask
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask if mask.dtype == torch.bool else
                                               mask.to(q.dtype))
        return y[0].transpose(0, 1).reshape(n, heads * head_dim)  # (N, H * D)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | ScoreMod | None,
           dropout_p: float, return_probs: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(q k^T / sqrt(D) + mask) v for (B, H, T, D) queries, keys and values, with dropout on the
    probabilities, and the probabilities themselves when `return_probs`.

    `mask` is None, boolean (B, 1, 1, T) or (B, 1, T, T) (True = attend), an additive float (B or 1, H or 1, T, T)
    in the dtype of the queries, or a FlexAttention score_mod holding the position bias and the key padding or
    documents (the caller checked that dropout is off: FlexAttention has none). The kernel: FlexAttention for a
    score_mod; the explicit math when the probabilities are wanted, or with dropout on CPU, where SDPA has no fused
    kernel and draws its (B, H, T, T) mask with `bernoulli_` (the same math with `dropout` here, bert-mini shapes,
    forward + backward, bf16: 52 ms against 87 ms at T=128, 180 ms against 467 ms at T=512); SDPA otherwise."""
    scale = q.shape[-1] ** -0.5
    if callable(mask):
        return flex_attention(q, k, v, mask, scale), None
    explicit = return_probs or (dropout_p > 0 and q.device.type == "cpu" and not torch.compiler.is_compiling())
    if not explicit:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None
    scores = (q * scale) @ k.transpose(-2, -1)  # (B, H, T, T)
    if mask is not None:
        if mask.dtype == torch.bool:  # as a bias: one pass over the scores, and a backward pass that passes through
            mask = torch.zeros(mask.shape, dtype=scores.dtype, device=mask.device).masked_fill_(
                ~mask, torch.finfo(scores.dtype).min)
        scores = scores.add_(mask)  # the product's own (B, H, T, T) output: its backward needs q and k, not it
    probs = scores.softmax(dim=-1)
    return dropout(probs, dropout_p) @ v, probs if return_probs else None
