"""Attention over the real tokens packed into one sequence (`Kernels.varlen`, `encoders.kernels.PackedAttention`)
computes what the padded path computes: each row's real tokens, or each document of a packed row, attend within
themselves, at the positions the padded path gives them, for every registered position scheme.

On CPU the packed path runs its "dense" kernel (the packed mask and bias over all N x N token pairs; FlexAttention
has no backward on CPU), checked with gradients; FlexAttention's block mask is checked forward; torch's `varlen_attn`
and the compiled FlexAttention run on CUDA only, where the last tests check them."""

from collections import Counter

import pytest
import torch
from tiny import TINY_CONFIG, tiny_config

from bench.syncs import _DispatchCounter
from data import PaddingCollator
from encoders import Encoder, Kernels, MaskedLMHead
from encoders.kernels import cu_seqlens, sequence_starts
from encoders.positions import POSITIONS, PositionScheme
from tasks.mlm import masked_lm_loss

VOCAB = TINY_CONFIG["vocab_size"]
SCHEMES = sorted(POSITIONS)  # every registered scheme, so a new one is covered by default
BIAS_SCHEMES = sorted(name for name, scheme in POSITIONS.items() if scheme.score_mod is not PositionScheme.score_mod)
# Every layer global with post-norm (BERT), or pre-norm with every other layer within 3 positions (ModernBERT).
LAYOUTS = {"post-global": {"norm_placement": "post"},
           "pre-local": {"norm_placement": "pre", "local_window": 3, "global_every": 2}}
LENGTHS = (17, 3, 11, 7)  # the rows' real tokens: all shorter than T, as pad_to_multiple_of leaves them
# The rows' documents, each a run (as packing makes them): three in row 0, one in rows 1 and 3, two in row 2.
DOCUMENT_STARTS = ((0, 9, 15), (0,), (0, 4), (0,))


def batch(kind: str, seq_len: int = 20, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor | None,
                                                                       torch.Tensor | None]:
    """input_ids, attention_mask and document_ids of a batch of 4 rows: "padding" (36 real tokens of 80),
    "documents" (the same, in documents) or "documents without padding" (no mask)."""
    ids = torch.randint(5, VOCAB, (4, seq_len))
    mask = (torch.arange(seq_len) < torch.tensor(LENGTHS)[:, None]).long()
    documents = torch.zeros_like(ids)
    for row, starts in enumerate(DOCUMENT_STARTS):
        for start in starts[1:]:
            documents[row, start:] += 1
    if kind == "padding":
        documents = None
    elif kind == "documents without padding":
        mask = None
    else:
        documents = documents.masked_fill(mask == 0, -1)  # as the collator pads them
    ids = ids if mask is None else ids * mask
    return tuple(None if t is None else t.to(device) for t in (ids, mask, documents))


def encoder_and_head(position: str, layout: str, **overrides) -> tuple[Encoder, MaskedLMHead]:
    torch.manual_seed(0)
    encoder = Encoder(tiny_config(position=position, **LAYOUTS[layout], **overrides))
    if position == "t5":  # a bias large enough to matter (it starts at 0.02)
        torch.nn.init.normal_(encoder.position.relative_bias.weight, std=0.5)
    return encoder, MaskedLMHead(encoder.config, encoder.embeddings.word)


def run(encoder, head, ids, mask, documents, kernels, grad=True, **layout):
    """Hidden states at the real tokens, the MLM loss and its gradients, computed with `kernels`."""
    encoder.kernels = kernels
    real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
    labels = torch.where(real & (torch.arange(ids.shape[1], device=ids.device) % 3 == 1), ids, -100)
    with torch.set_grad_enabled(grad):
        hidden = encoder(ids, mask, document_ids=documents, **layout)
        loss = masked_lm_loss(head, hidden, labels)[0] + hidden[real].square().mean()
        params = list({id(p): p for m in (encoder, head) for p in m.parameters()}.values())
        grads = torch.autograd.grad(loss, params) if grad else ()
    return hidden[real].detach(), loss.detach(), grads


PADDED = Kernels(unpad_below=0.0, varlen=False)  # the reference: padded SDPA, a dense (B, 1, T, T) document mask


def packed_kernel(encoder, ids, mask, documents) -> str | None:
    layout = encoder.packed(torch.zeros(*ids.shape, encoder.config.hidden_size, device=ids.device), mask, documents,
                            None, None, outputs=False)
    return None if layout is None else layout[1].kernel


@pytest.mark.parametrize("position", SCHEMES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["padding", "documents", "documents without padding"])
def test_packed_path_equals_the_padded_path(position, layout, kind):
    """Hidden states at the real tokens, MLM loss and every gradient, float32, with `varlen=True` on CPU."""
    encoder, head = encoder_and_head(position, layout)
    ids, mask, documents = batch(kind)
    packed = Kernels(varlen=True)
    encoder.kernels = packed
    assert packed_kernel(encoder, ids, mask, documents) == "dense"
    (hidden, loss, grads), (reference, reference_loss, reference_grads) = (
        run(encoder, head, ids, mask, documents, kernels) for kernels in (packed, PADDED))
    torch.testing.assert_close(hidden, reference, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(loss, reference_loss, atol=1e-6, rtol=1e-5)
    for a, b in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("position", SCHEMES)
@pytest.mark.parametrize("kind", ["padding", "documents"])
def test_flex_block_mask_equals_the_padded_path(position, kind, monkeypatch):
    """FlexAttention with the sequences' block mask (the packed kernel on CUDA where varlen_attn does not apply),
    forced on CPU: forward only, as torch has FlexAttention's backward on GPUs only. Pre-norm ModernBERT layers."""
    encoder, head = encoder_and_head(position, "pre-local")
    ids, mask, documents = batch(kind)
    monkeypatch.setattr(Encoder, "packed_kernel", lambda self, *args: "flex")
    encoder.kernels = Kernels(varlen=True)
    assert packed_kernel(encoder, ids, mask, documents) == "flex"
    flex, flex_loss, _ = run(encoder, head, ids, mask, documents, Kernels(varlen=True), grad=False)
    reference, reference_loss, _ = run(encoder, head, ids, mask, documents, PADDED, grad=False)
    torch.testing.assert_close(flex, reference, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(flex_loss, reference_loss, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("position", SCHEMES)
@pytest.mark.parametrize("kind", ["padding", "documents"])
def test_first_token_only_on_the_packed_path(position, kind):
    """The last layer computing the first token only (BERT's pooler) after packed layers: that layer pads its keys
    and values back and reads the first query's row of the mask, (B, ., 1, T); equal to the padded path's full
    first token, gradients too (float64)."""
    encoder, _ = encoder_and_head(position, "pre-local")
    encoder = encoder.double()
    ids, mask, documents = batch(kind)
    params = list(encoder.parameters())
    results = []
    for kernels, first_only in ((Kernels(varlen=True), True), (PADDED, False)):
        encoder.kernels = kernels
        first = encoder(ids, mask, document_ids=documents, first_token_only=first_only)[:, :1]
        loss = (first * torch.linspace(-1, 1, 32, dtype=torch.float64)).sum() + first.square().sum()
        results.append((first.detach(), torch.autograd.grad(loss, params, allow_unused=True)))
    (fast, fast_grads), (full, full_grads) = results
    torch.testing.assert_close(fast, full, atol=1e-12, rtol=1e-10)
    for a, b in zip(fast_grads, full_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-9)


def test_the_collator_gives_cu_seqlens_built_on_the_host():
    """`cu_seqlens`: where each sequence starts among the real tokens, then their count, int32: a row's real tokens,
    or with document_ids each run of one document in a row. The encoder's packed sequences change exactly there."""
    collate = PaddingCollator(pad_token_id=0, pad_to_multiple_of=4)
    rows = [{"input_ids": [5, 6, 7]}, {"input_ids": [5, 6]}]
    batch_ = collate(rows)
    assert batch_["cu_seqlens"].dtype == torch.int32
    assert batch_["cu_seqlens"].tolist() == [0, 3, 5]  # of the 2 x 4 positions, 3 then 2 are real
    documents = collate([{"input_ids": [5, 6, 7, 8, 9], "document_ids": [0, 0, 1, 1, 2]},
                         {"input_ids": [5, 6], "document_ids": [0, 1]}])
    assert documents["input_ids"].shape == (2, 8)
    assert documents["cu_seqlens"].tolist() == [0, 2, 4, 5, 6, 7]
    # The encoder computes the same where a batch comes without them (a host sync), and numbers its tokens'
    # sequences to change at those boundaries; positions are each token's own in its row.
    encoder = Encoder(tiny_config(), Kernels(varlen=True))
    x = torch.zeros(2, 8, 32)
    unpadded, packed = encoder.packed(x, documents["attention_mask"], documents["document_ids"], None, None, False)
    starts = sequence_starts(unpadded.index, 8, documents["document_ids"])
    assert torch.equal(cu_seqlens(starts), documents["cu_seqlens"])
    lengths = torch.unique_consecutive(packed.sequences, return_counts=True)[1]
    assert lengths.tolist() == documents["cu_seqlens"].diff().tolist() == [2, 2, 1, 1, 1]
    assert packed.positions.tolist() == [0, 1, 2, 3, 4, 0, 1]
    assert packed.max_seqlen == 8  # the row length bounds every sequence, and is a shape: no host sync


def test_the_packed_path_makes_no_host_sync_with_the_collators_indices(monkeypatch):
    """With the collator's unpad_index and cu_seqlens the packed path reads nothing back from the device: no
    `nonzero` or `.item()` (each would stall the host on a GPU). Without cu_seqlens, varlen_attn's layout costs one
    `nonzero`. Counted as bench.syncs counts them, on CPU."""
    encoder = Encoder(tiny_config(position="alibi", local_window=3, global_every=2), Kernels(varlen=True))
    collated = PaddingCollator(pad_token_id=0)([{"input_ids": [5] * n, "document_ids": [0] * 2 + [1] * (n - 2)}
                                                for n in LENGTHS])
    ids, mask, documents = collated["input_ids"], collated["attention_mask"], collated["document_ids"]
    layout = {"unpad_index": collated["unpad_index"], "cu_seqlens": collated["cu_seqlens"]}
    syncs = Counter()
    with _DispatchCounter(syncs, depth=1):
        hidden = encoder(ids, mask, document_ids=documents, first_token_only=True, **layout)
        hidden.sum().backward()
    assert not syncs
    monkeypatch.setattr(Encoder, "packed_kernel", lambda self, *args: "varlen")  # its layout only: CUDA runs it
    x = torch.zeros(4, ids.shape[1], 32)
    with _DispatchCounter(syncs, depth=1):
        encoder.packed(x, mask, documents, layout["unpad_index"], layout["cu_seqlens"], False)
    assert not syncs
    with _DispatchCounter(syncs, depth=1):
        packed = encoder.packed(x, mask, documents, layout["unpad_index"], None, False)[1]
    assert sum(syncs.values()) == 1 and "nonzero" in next(iter(syncs))
    assert torch.equal(packed.cu_seqlens, layout["cu_seqlens"])


def test_varlen_is_chosen_where_it_applies_and_refused_where_it_cannot_be_honoured():
    """None (the default) packs on CUDA with varlen_attn only: never on CPU, never with a bias, float32, attention
    dropout in training or outputs asked for. True packs wherever there is something to pack, refusing, with the
    setting named, what its kernels cannot do. False never packs."""
    ids, mask, documents = batch("documents")
    rope, alibi = (Encoder(tiny_config(position=p, hidden_size=64)).eval() for p in ("rope", "alibi"))
    assert packed_kernel(rope, ids, mask, documents) is None  # the default on CPU: today's path
    rope.kernels = Kernels(varlen=True)
    assert packed_kernel(rope, ids, mask, documents) == "dense"
    assert packed_kernel(rope, ids, None, None) is None  # no padding, no documents: nothing to pack
    assert packed_kernel(rope, ids, torch.ones_like(ids), None) is None  # too little padding to skip (unpad_below)
    rope.kernels = Kernels(varlen=False)
    assert packed_kernel(rope, ids, mask, documents) is None
    cuda = torch.device("cuda")  # asked of the choice only; nothing runs there
    for kernels, encoder, dtype, kernel in ((Kernels(), rope, torch.float32, None),  # FlashAttention is half only
                                            (Kernels(), alibi, torch.bfloat16, None),  # no bias in varlen_attn
                                            (Kernels(varlen=True), rope, torch.float32, "flex"),
                                            (Kernels(varlen=True), alibi, torch.bfloat16, "flex")):
        encoder.kernels = kernels
        assert encoder.packed_kernel(dtype, cuda, encoder.position.score_mod(4, 4) is not None, False) == kernel
    dropout = Encoder(tiny_config(attention_dropout=0.1), Kernels(varlen=True))
    with pytest.raises(ValueError, match="attention_dropout=0.1"):
        dropout(ids, mask)
    dropout.eval()
    assert dropout(ids, mask).shape == (4, 20, 32)  # no dropout in evaluation
    dropout.kernels = Kernels()
    assert dropout.train().packed_kernel(torch.bfloat16, cuda, False, False) is None
    for outputs in ({"return_hidden_states": True}, {"return_attentions": True}):
        with pytest.raises(ValueError, match="varlen"):
            rope.kernels = Kernels(varlen=True)
            rope(ids, mask, **outputs)
        rope.kernels = Kernels()
        assert rope.packed_kernel(torch.bfloat16, cuda, False, True) is None


# --------------------------------------------------------------------------------------------------------- CUDA

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="varlen_attn and compiled FlexAttention are CUDA's")


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def cuda_case(position: str, layout: str, kind: str):
    """A model with heads of 16 channels (the compiled FlexAttention's minimum) and a batch on the GPU, with the
    indices the collator builds on the host; T=24 above every sequence's length, so max_seqlen is a bound only."""
    encoder, head = encoder_and_head(position, layout, hidden_size=64)
    ids, mask, documents = batch(kind, seq_len=24, device="cuda")
    starts = sequence_starts(mask.cpu().flatten().nonzero().squeeze(1), 24,
                             None if documents is None else documents.cpu())
    indices = {"unpad_index": mask.flatten().nonzero().squeeze(1), "cu_seqlens": cu_seqlens(starts).cuda()}
    return encoder.cuda(), head.cuda(), (ids, mask, documents), indices


@CUDA
@pytest.mark.parametrize("position", [name for name in SCHEMES if name not in BIAS_SCHEMES])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["padding", "documents"])
def test_varlen_attn_equals_the_padded_path_on_cuda(position, layout, kind):
    """Under bf16 autocast the default packs with varlen_attn; its hidden states and gradients are as close to the
    float32 padded path's as the padded path's own in bf16 (within twice its error, or 1% / 2%)."""
    encoder, head, inputs, indices = cuda_case(position, layout, kind)
    reference = run(encoder, head, *inputs, PADDED)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        encoder.kernels = Kernels()
        x = torch.zeros(4, 24, 64, device="cuda", dtype=torch.bfloat16)
        assert encoder.packed(x, inputs[1], inputs[2], None, None, False)[1].kernel == "varlen"
        varlen = run(encoder, head, *inputs, Kernels(), **indices)
        padded = run(encoder, head, *inputs, PADDED)
    assert relative_error(varlen[0], reference[0]) < max(2 * relative_error(padded[0], reference[0]), 1e-2)
    for a, b, c in zip(varlen[2], padded[2], reference[2], strict=True):
        assert relative_error(a, c) < max(2 * relative_error(b, c), 2e-2)


@CUDA
@pytest.mark.parametrize("position", BIAS_SCHEMES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["padding", "documents"])
def test_flex_packed_equals_the_padded_path_on_cuda(position, layout, kind):
    """ALiBi and T5 packed with varlen=True: compiled FlexAttention over the block mask, float32, forward and
    gradients to float32 accuracy."""
    encoder, head, inputs, indices = cuda_case(position, layout, kind)
    encoder.kernels = Kernels(varlen=True)
    assert packed_kernel(encoder, *inputs) == "flex"
    flex = run(encoder, head, *inputs, Kernels(varlen=True), **indices)
    reference = run(encoder, head, *inputs, PADDED)
    torch.testing.assert_close(flex[0], reference[0], atol=2e-5, rtol=1e-4)
    for a, b in zip(flex[2], reference[2], strict=True):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-3)


@CUDA
def test_varlen_path_makes_no_host_sync_on_cuda():
    """A bf16 forward and backward pass through varlen_attn, local layers and documents included, with the
    collator's indices, under `torch.cuda.set_sync_debug_mode("error")`: any host sync raises."""
    encoder, _ = encoder_and_head("rope", "pre-local", hidden_size=64)
    encoder = encoder.cuda()
    collated = PaddingCollator(pad_token_id=0, pad_to_multiple_of=8)(
        [{"input_ids": [5] * n, "document_ids": [0] * 2 + [1] * (n - 2)} for n in LENGTHS])
    batch_ = {key: value.cuda() for key, value in collated.items()}
    for attempt in range(2):  # the first call sets the kernels up; the second must not sync
        torch.cuda.set_sync_debug_mode("error" if attempt else "default")
        try:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                hidden = encoder(batch_["input_ids"], batch_["attention_mask"], document_ids=batch_["document_ids"],
                                 unpad_index=batch_["unpad_index"], cu_seqlens=batch_["cu_seqlens"])
            (hidden.float() * batch_["attention_mask"][..., None]).square().sum().backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(hidden).all()
