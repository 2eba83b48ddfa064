"""The fast paths compute what the plain paths compute.

- The sparse MLM head (logits at the masked positions only) gives the loss and gradients of full logits.
- Packed blocks batched without padding give the loss and gradients of the same blocks padded into one batch.
- The float attention bias is cast to the compute dtype once per forward, and RoPE's cos/sin are computed once
  per forward, without changing the result.
"""

import pytest
import torch
import torch.nn.functional as F
from tiny import TINY_CONFIG, tiny_config

from encoders import Encoder, Kernels, MaskedLMHead
from encoders.positions import POSITIONS, PositionScheme, RotaryPositions
from tasks.mlm import masked_lm_loss

VOCAB = TINY_CONFIG["vocab_size"]
SCHEMES = sorted(POSITIONS)  # every registered scheme, so a new one is covered by default
# Every layer global, or every other layer within 3 tokens (ModernBERT's sliding windows).
WINDOWS = {"global": {}, "local": {"local_window": 3, "global_every": 2}}
BIAS_SCHEMES = sorted(name for name, scheme in POSITIONS.items() if scheme.score_mod is not PositionScheme.score_mod)


def mlm_model(dtype: torch.dtype = torch.float32, **overrides) -> tuple[Encoder, MaskedLMHead]:
    encoder = Encoder(tiny_config(**overrides)).to(dtype)
    head = MaskedLMHead(encoder.config, encoder.embeddings.word).to(dtype)
    return encoder, head


def parameters(encoder: Encoder, head: MaskedLMHead) -> list[torch.nn.Parameter]:
    unique = {id(p): p for module in (encoder, head) for p in module.parameters()}  # the tied decoder once
    return list(unique.values())


def mask_labels(ids: torch.Tensor, attention_mask: torch.Tensor, probability: float = 0.15) -> torch.Tensor:
    chosen = (torch.rand(ids.shape) < probability) & attention_mask.bool()
    chosen[0, 1] = True  # never an empty selection
    return torch.where(chosen, ids, -100)


def dense_mlm_loss(head: MaskedLMHead, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The plain path: logits for every token, padding included, and cross-entropy ignoring -100."""
    logits = head(hidden)  # (B, T, V)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # float32, float64 kept
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_sparse_mlm_loss_equals_dense_on_a_padded_batch(dtype):
    encoder, head = mlm_model(dtype)
    ids = torch.randint(5, VOCAB, (4, 24))
    attention_mask = torch.ones_like(ids)
    attention_mask[1, 15:] = 0
    attention_mask[3, 6:] = 0
    ids[attention_mask == 0] = 0
    labels = mask_labels(ids, attention_mask)
    params = parameters(encoder, head)

    hidden = encoder(ids, attention_mask)
    dense = dense_mlm_loss(head, hidden, labels)
    dense_grads = torch.autograd.grad(dense, params)
    sparse, logits, targets = masked_lm_loss(head, encoder(ids, attention_mask), labels)
    sparse_grads = torch.autograd.grad(sparse, params)

    assert logits.shape == (int((labels != -100).sum()), VOCAB) and torch.equal(targets, labels[labels != -100])
    # Both losses are taken in float32 (as in training), summed in another order: float32 rounding apart.
    torch.testing.assert_close(sparse, dense, atol=1e-6, rtol=1e-5)
    for sparse_grad, dense_grad in zip(sparse_grads, dense_grads, strict=True):
        torch.testing.assert_close(sparse_grad, dense_grad, atol=1e-6, rtol=1e-5)


def test_sparse_mlm_loss_equals_dense_under_bf16_autocast():
    encoder, head = mlm_model()
    ids = torch.randint(5, VOCAB, (4, 24))
    labels = mask_labels(ids, torch.ones_like(ids))
    params = parameters(encoder, head)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        dense = dense_mlm_loss(head, encoder(ids), labels)
        dense_grads = torch.autograd.grad(dense, params)
        sparse = masked_lm_loss(head, encoder(ids), labels)[0]
        sparse_grads = torch.autograd.grad(sparse, params)
    # The same bf16 products in another order: equal up to bf16 rounding.
    torch.testing.assert_close(sparse, dense, atol=1e-2, rtol=1e-2)
    for sparse_grad, dense_grad in zip(sparse_grads, dense_grads, strict=True):
        torch.testing.assert_close(sparse_grad, dense_grad, atol=2e-3, rtol=5e-2)


@pytest.mark.parametrize("position", SCHEMES)
def test_packed_blocks_equal_padded_batch(position):
    """`SameLengthBatchSampler` batches full blocks without any mask and the short last block on its own; a
    plain loader would pad them all into one batch. Both give the same summed loss and the same gradients."""
    encoder, head = mlm_model(torch.float64, position=position)
    blocks = [torch.randint(5, VOCAB, (16,)) for _ in range(3)] + [torch.randint(5, VOCAB, (7,))]
    labels = [mask_labels(block[None], torch.ones(1, len(block)))[0] for block in blocks]
    params = parameters(encoder, head)

    def summed_loss(ids: torch.Tensor, targets: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        loss, _, picked = masked_lm_loss(head, encoder(ids, attention_mask), targets)
        return loss * picked.numel()  # a sum over masked tokens, so batches of any size add up

    packed = (summed_loss(torch.stack(blocks[:3]), torch.stack(labels[:3]), None)
              + summed_loss(blocks[3][None], labels[3][None], None))
    packed_grads = torch.autograd.grad(packed, params)

    ids = torch.zeros(4, 16, dtype=torch.long)
    padded_labels = torch.full((4, 16), -100)
    attention_mask = torch.zeros(4, 16, dtype=torch.long)
    for row, (block, label) in enumerate(zip(blocks, labels, strict=True)):
        ids[row, : len(block)], padded_labels[row, : len(block)], attention_mask[row, : len(block)] = block, label, 1
    padded = summed_loss(ids, padded_labels, attention_mask)
    padded_grads = torch.autograd.grad(padded, params)

    torch.testing.assert_close(packed, padded)
    for packed_grad, padded_grad in zip(packed_grads, padded_grads, strict=True):
        torch.testing.assert_close(packed_grad, padded_grad)


@pytest.mark.parametrize("position", BIAS_SCHEMES)
def test_attention_bias_reaches_every_layer_in_the_compute_dtype(position):
    encoder = Encoder(tiny_config(position=position))
    ids = torch.randint(5, VOCAB, (2, 10))
    attention_mask = torch.ones_like(ids)
    attention_mask[1, 6:] = 0
    seen: list[torch.dtype] = []
    hooks = [block.attention.register_forward_pre_hook(lambda module, args: seen.append(args[1].mask.dtype))
             for block in encoder.blocks]
    reference = encoder(ids, attention_mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = encoder(ids, attention_mask)
    for hook in hooks:
        hook.remove()
    layers = encoder.config.num_layers
    assert seen == [torch.float32] * layers + [torch.bfloat16] * layers
    real = attention_mask.bool()
    torch.testing.assert_close(mixed[real].float(), reference[real], atol=0.1, rtol=0.05)
    bf16_mask = encoder.attention_mask(attention_mask, 10, torch.bfloat16)
    assert bf16_mask.dtype == torch.bfloat16
    assert (bf16_mask[1, :, :, 6:] == torch.finfo(torch.bfloat16).min).all()


def test_rope_tables_are_computed_once_per_forward():
    encoder = Encoder(tiny_config(position="rope"))
    ids = torch.randint(5, VOCAB, (2, 10))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        encoder(ids)
    cos_calls = sum(event.count for event in profile.key_averages() if event.key == "aten::cos")
    assert cos_calls == 1  # three layers, one table


def test_rope_tables_follow_a_new_length_and_dtype():
    encoder = Encoder(tiny_config(position="rope")).eval()
    fresh = Encoder(tiny_config(position="rope")).eval()
    fresh.load_state_dict(encoder.state_dict())
    long_ids, short_ids = torch.randint(5, VOCAB, (2, 12)), torch.randint(5, VOCAB, (2, 5))
    encoder(long_ids)  # leaves tables for 12 positions behind
    torch.testing.assert_close(encoder(short_ids), fresh(short_ids), atol=0.0, rtol=0.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        encoder(short_ids)  # bf16 tables for 5 positions
    torch.testing.assert_close(encoder(short_ids), fresh(short_ids), atol=0.0, rtol=0.0)

    rope = RotaryPositions(tiny_config(position="rope"))
    q = torch.randn(1, 4, 6, 8)
    positions = torch.arange(6)
    first, _ = rope.rotate(q, q, positions)
    again, _ = rope.rotate(q.double(), q.double(), positions)  # same positions, another dtype: recomputed
    assert again.dtype == torch.float64
    torch.testing.assert_close(again.float(), first)


def padded_batch(seq_len: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(5, VOCAB, (4, seq_len))
    attention_mask = torch.ones_like(ids)
    for row, length in enumerate((seq_len, 3, 11, 7)):  # 41 of 80 tokens are real
        attention_mask[row, length:] = 0
    return ids * attention_mask, attention_mask


@pytest.mark.parametrize("position", SCHEMES)
@pytest.mark.parametrize("norm_placement", ["post", "pre"])
@pytest.mark.parametrize("window", WINDOWS)
def test_unpadded_path_equals_padded_path(position, norm_placement, window):
    """The same model run padded (`unpad_below=0`) and unpadded (`unpad_below=1`): equal hidden states on
    real tokens, equal MLM loss and equal gradients."""
    encoder, head = mlm_model(position=position, norm_placement=norm_placement, **WINDOWS[window])
    ids, attention_mask = padded_batch()
    labels = mask_labels(ids, attention_mask, probability=0.3)
    params = parameters(encoder, head)
    results = {}
    for path, threshold in (("padded", 0.0), ("unpadded", 1.0)):
        encoder.kernels = Kernels(unpad_below=threshold)
        assert (encoder.unpadded(attention_mask) is None) == (path == "padded")
        hidden = encoder(ids, attention_mask)
        loss = masked_lm_loss(head, hidden, labels)[0] + hidden[attention_mask.bool()].pow(2).mean()
        results[path] = (hidden.detach(), loss.detach(), torch.autograd.grad(loss, params))
    real = attention_mask.bool()
    torch.testing.assert_close(results["unpadded"][0][real], results["padded"][0][real], atol=1e-5, rtol=1e-4)
    assert (results["unpadded"][0][~real] == 0).all()
    torch.testing.assert_close(results["unpadded"][1], results["padded"][1], atol=1e-6, rtol=1e-5)
    for unpadded_grad, padded_grad in zip(results["unpadded"][2], results["padded"][2], strict=True):
        torch.testing.assert_close(unpadded_grad, padded_grad, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("position", SCHEMES)
@pytest.mark.parametrize("norm_placement", ["post", "pre"])
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("path", ["padded", "unpadded", "documents", "explicit"])
def test_first_token_only_equals_the_full_last_layer(position, norm_placement, window, path):
    """`first_token_only` (what BERT's pooler reads) gives the full encoder's first token and its gradients, padded,
    unpadded, with packed documents' (B, 1, T, T) mask, and on the explicit attention path (training on CPU with
    attention dropout that rounds to nothing)."""
    torch.manual_seed(0)
    overrides = {"attention_dropout": 1e-9} if path == "explicit" else {}
    encoder = Encoder(tiny_config(position=position, norm_placement=norm_placement, **WINDOWS[window],
                                  **overrides)).double()
    if position == "t5":
        torch.nn.init.normal_(encoder.position.relative_bias.weight, std=0.5)
    encoder.kernels = Kernels(unpad_below=1.0 if path == "unpadded" else 0.0)
    encoder.train(path == "explicit")
    ids, attention_mask = padded_batch()
    documents = None
    if path == "documents":
        documents = (torch.arange(20) >= 9).long().expand(4, 20)  # two documents a row; the first token's is 0
    params = list(encoder.parameters())
    results = {}
    for first_only in (False, True):
        hidden = encoder(ids, attention_mask, document_ids=documents, first_token_only=first_only)
        first = hidden[:, :1]
        assert hidden.shape == ((4, 1, 32) if first_only else (4, 20, 32))
        loss = (first * torch.linspace(-1, 1, 32, dtype=torch.float64)).sum() + first.square().sum()
        results[first_only] = (first.detach(), torch.autograd.grad(loss, params, allow_unused=True))
    torch.testing.assert_close(results[True][0], results[False][0], atol=1e-12, rtol=1e-10)
    for fast, full in zip(results[True][1], results[False][1], strict=True):
        assert (fast is None) == (full is None)
        if full is not None:
            torch.testing.assert_close(fast, full, atol=1e-12, rtol=1e-9)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="the compiled FlexAttention kernel runs on GPUs only"))])
@pytest.mark.parametrize("position", BIAS_SCHEMES)
def test_first_token_only_under_flex_attention(position, device):
    """FlexAttention's score_mod sees the one query at index 0, the first token's true position; on a GPU through
    the compiled kernel, gradients too (heads of 16 channels, its minimum)."""
    torch.manual_seed(0)
    encoder = Encoder(tiny_config(position=position, hidden_size=64), Kernels(flex_attention=True)).to(device).eval()
    torch.nn.init.normal_(encoder.blocks[-1].attention.qkv.weight, std=0.5)
    if position == "t5":
        torch.nn.init.normal_(encoder.position.relative_bias.weight, std=0.5)
    ids, attention_mask = (t.to(device) for t in padded_batch(24))
    grad = device == "cuda"  # torch has FlexAttention's backward on GPUs only
    params = list(encoder.parameters())
    results = []
    for first_only in (False, True):
        with torch.set_grad_enabled(grad):
            first = encoder(ids, attention_mask, first_token_only=first_only)[:, :1]
            grads = torch.autograd.grad(first.square().sum(), params, allow_unused=True) if grad else ()
        results.append((first.detach(), grads))
    (full, full_grads), (fast, fast_grads) = results
    torch.testing.assert_close(fast, full, atol=2e-5, rtol=1e-4)
    for a, b in zip(fast_grads, full_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-3)


def test_first_token_only_gives_zeros_where_the_first_position_is_padding():
    """As the unpadded path gives zeros at every padding position: a left-padded row and an all-padding row."""
    torch.manual_seed(0)
    encoder = Encoder(tiny_config(), Kernels(unpad_below=1.0)).double().eval()
    ids, attention_mask = padded_batch()
    attention_mask[1] = 0  # all padding
    attention_mask[2] = torch.arange(20) >= 4  # left-padded
    with torch.no_grad():
        full = encoder(ids, attention_mask)[:, :1]
        first = encoder(ids, attention_mask, first_token_only=True)
    assert (full[1:3] == 0).all()
    torch.testing.assert_close(first, full, atol=1e-12, rtol=1e-10)


def test_first_token_only_counts_the_work_it_skips_and_refuses_every_token_outputs():
    encoder = Encoder(tiny_config(local_window=2, global_every=2))  # layer 1, the last, is local
    c, inner, lengths = 32, 64, [20, 3]
    full, fast = encoder.flops(lengths, training=True), encoder.flops(lengths, training=True, first_token_only=True)
    # Tokens after the first skip the last layer's query and output projections, feed-forward and attention products
    # (a local layer's token attends to at most 2 * 2 + 1 keys); they keep their key and value projections.
    skipped = sum((n - 1) * (2 * (2 * c * c + 2 * c * inner) + 4 * min(n, 5) * c) for n in lengths)
    assert full - fast == 3 * skipped
    assert encoder.flops(lengths, first_token_only=True) == encoder.flops(lengths) - skipped
    assert encoder.flops([0, 1], training=True, first_token_only=True) == encoder.flops([0, 1], training=True)
    ids = torch.randint(5, VOCAB, (2, 8))
    for outputs in ({"return_hidden_states": True}, {"return_attentions": True}):
        with pytest.raises(ValueError, match="first_token_only"):
            encoder(ids, first_token_only=True, **outputs)


def test_unpadded_path_is_taken_only_when_padding_is_large():
    encoder = Encoder(tiny_config())
    ids, attention_mask = padded_batch()  # 51% real tokens
    assert encoder.unpadded(attention_mask) is not None
    assert encoder.unpadded(torch.ones_like(attention_mask)) is None
    assert encoder.unpadded(None) is None
    nearly_full = torch.ones_like(attention_mask)
    nearly_full[0, -1] = 0  # 99% real: gathers would cost more than the padding saved
    assert encoder.unpadded(nearly_full) is None
    layout = encoder.unpadded(attention_mask)
    assert layout.index.numel() == int(attention_mask.sum())
    x = torch.randn(4, 20, 8)
    torch.testing.assert_close(layout.pad(layout.unpad(x)), x * attention_mask[..., None])
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the mixed-precision path also runs unpadded
        assert encoder(ids, attention_mask).shape == (4, 20, 32)


# --- dropout drawn 16 bits at a time, the explicit attention path, the blocked vocabulary cross-entropy ---

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_drops_the_requested_fraction_and_keeps_the_expectation(dtype, p):
    from encoders.kernels import dropout

    torch.manual_seed(0)
    x = torch.full((1000, 1000), 3.0, dtype=dtype, requires_grad=True)
    y = dropout(x, p)
    dropped = (y == 0).double().mean().item()
    # 1M Bernoulli draws: the standard error of the fraction is at most 5e-4.
    assert abs(dropped - p) < 3e-3
    scale = 65536 / (65536 - round(p * 65536))
    kept = y[y != 0].float()
    assert torch.all(kept == torch.tensor(3.0 * scale, dtype=dtype).float())  # one exact factor, rounded once
    y.backward(torch.ones_like(y))
    # The gradient uses the forward's mask and scale: zero where dropped, the same factor where kept.
    assert torch.equal(x.grad == 0, y == 0)
    assert torch.all(x.grad[y != 0].float() == torch.tensor(scale, dtype=dtype).float())


def test_dropout_is_reproducible_and_identity_when_off():
    from encoders.kernels import Dropout, dropout

    x = torch.randn(37, 11)  # an element count that is not a multiple of four
    torch.manual_seed(1)
    first = dropout(x, 0.3)
    torch.manual_seed(1)
    assert torch.equal(first, dropout(x, 0.3))
    assert dropout(x, 0.3, training=False) is x and dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    module = Dropout(0.3).eval()
    assert module(x) is x
    with pytest.raises(ValueError, match="must be in"):
        Dropout(1.5)
    # A probability that rounds to no drop at all keeps every element, unscaled.
    assert torch.equal(dropout(x, 1e-9), x)


def test_successive_dropout_masks_are_independent():
    """Each call draws a new mask: two draws at p = 0.1 agree on 0.9² + 0.1² = 0.82 of the elements, as independent
    masks do (a mask drawn again, or reused, agrees on all of them)."""
    from encoders.kernels import dropout

    torch.manual_seed(0)
    x = torch.ones(1000, 1000)
    first, second = dropout(x, 0.1) != 0, dropout(x, 0.1) != 0
    # 1M elements: the standard error of the agreement is 4e-4
    assert abs((first == second).double().mean().item() - 0.82) < 2e-3
    assert abs((first & second).double().mean().item() - 0.81) < 2e-3


def test_dropout_masks_do_not_depend_on_the_thread_count():
    """A resume on a machine with other cores gets the same dropout."""
    from encoders.kernels import dropout

    x = torch.ones(16, 12, 128, 128)  # 3.1M elements
    threads = torch.get_num_threads()
    masks = []
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            torch.manual_seed(5)
            masks.append(dropout(x, 0.1))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(masks[0], masks[1]) and torch.equal(masks[0], masks[2])
    assert abs((masks[0] == 0).double().mean().item() - 0.1) < 1e-3


@pytest.mark.parametrize("position", SCHEMES)
@pytest.mark.parametrize("window", WINDOWS)
def test_explicit_attention_path_equals_sdpa(position, window):
    """Training on CPU with attention dropout runs attention as explicit matmuls (to use litbert's dropout);
    with a dropout that rounds to no drop at all, it must give SDPA's output and gradients."""
    torch.manual_seed(0)
    # float64: exact comparison
    encoder = Encoder(tiny_config(position=position, attention_dropout=1e-9, **WINDOWS[window])).double()
    ids = torch.randint(5, VOCAB, (3, 20))
    attention_mask = torch.ones_like(ids)
    attention_mask[1, 12:] = 0
    encoder.train()
    explicit = encoder(ids, attention_mask)
    grads_explicit = torch.autograd.grad(explicit[attention_mask.bool()].square().sum(), list(encoder.parameters()))
    for block in encoder.blocks:
        block.attention.dropout = 0.0  # SDPA path
    sdpa = encoder(ids, attention_mask)
    grads_sdpa = torch.autograd.grad(sdpa[attention_mask.bool()].square().sum(), list(encoder.parameters()))
    real = attention_mask.bool()
    torch.testing.assert_close(explicit[real], sdpa[real], atol=1e-12, rtol=1e-10)
    for a, b in zip(grads_explicit, grads_sdpa, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_vocab_cross_entropy_equals_library_cross_entropy(dtype):
    from tasks.mlm import vocab_cross_entropy

    torch.manual_seed(0)
    base = (torch.randn(67, 5003) * 4).to(dtype)  # 67 rows: blocks of 26 rows and a short last one
    targets = torch.randint(0, 5003, (67,))
    ours_in, ref_in = base.clone().requires_grad_(), base.clone().requires_grad_()
    ours = vocab_cross_entropy(ours_in, targets)
    ref = F.cross_entropy(ref_in.to(torch.promote_types(dtype, torch.float32)), targets)
    (ours * 3).backward()
    (ref * 3).backward()
    assert ours.dtype == ref.dtype
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ours_in.grad, ref_in.grad, atol=1e-6 if dtype != torch.bfloat16 else 1e-4, rtol=1e-2)
    with torch.no_grad():
        torch.testing.assert_close(vocab_cross_entropy(base, targets), ref.detach(), atol=1e-6, rtol=1e-6)


def flex_and_dense(position: str, device: str, grad: bool, window: str = "global"):
    """Outputs on real tokens (and parameter gradients when `grad`) with FlexAttention forced, then without. Heads of
    16 channels: the compiled GPU kernel needs at least that."""
    torch.manual_seed(0)
    encoder = Encoder(tiny_config(position=position, hidden_size=64, **WINDOWS[window])).to(device)
    if position == "t5":
        torch.nn.init.normal_(encoder.position.relative_bias.weight, std=0.5)
    ids = torch.randint(5, VOCAB, (3, 24), device=device)
    attention_mask = torch.ones_like(ids)
    attention_mask[1, 13:] = 0
    real = attention_mask.bool()
    results = {}
    for flex in (True, False):
        encoder.kernels = Kernels(flex_attention=flex)
        with torch.set_grad_enabled(grad):
            hidden = encoder(ids, attention_mask)
            grads = torch.autograd.grad(hidden[real].square().sum(), list(encoder.parameters())) if grad else ()
        results[flex] = (hidden[real], grads)
    return results[True], results[False]


@pytest.mark.parametrize("position", BIAS_SCHEMES)
@pytest.mark.parametrize("window", WINDOWS)
def test_flex_attention_equals_the_dense_bias(position, window):
    """FlexAttention evaluates the ALiBi / T5 bias and the key padding inside the kernel (the GPU default for
    bias schemes). Forced on CPU, where torch has its forward only, it must give the dense-bias SDPA output."""
    (flex, _), (dense, _) = flex_and_dense(position, "cpu", grad=False, window=window)
    torch.testing.assert_close(flex, dense, atol=2e-5, rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention's backward exists on GPUs only")
@pytest.mark.parametrize("position", BIAS_SCHEMES)
def test_flex_attention_gradients_equal_the_dense_bias_on_gpu(position):
    (flex, flex_grads), (dense, dense_grads) = flex_and_dense(position, "cuda", grad=True)
    torch.testing.assert_close(flex, dense, atol=2e-5, rtol=1e-4)
    for a, b in zip(flex_grads, dense_grads, strict=True):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-3)


def test_flex_attention_is_chosen_only_where_it_applies():
    """Off unless asked for (on an H100 the dense bias through SDPA trained faster, BENCHMARKS.md), whatever the
    device; asked for, it needs a bias scheme and no attention dropout in training."""
    encoder = Encoder(tiny_config(position="alibi", attention_dropout=0.1)).eval()
    mask = torch.ones(2, 8, dtype=torch.long)
    for kernels in (Kernels(), Kernels(flex_attention=False)):
        encoder.kernels = kernels
        assert encoder.score_mod(mask, 8, False) is None
    encoder.kernels = Kernels(flex_attention=True)
    with torch.no_grad():  # torch's FlexAttention has no backward pass on CPU (see the test below)
        assert callable(encoder.score_mod(mask, 8, False))
    assert encoder.score_mod(mask, 8, True) is None  # attention probabilities requested: explicit path
    encoder.train()
    with pytest.raises(ValueError, match="attention_dropout"):
        encoder.score_mod(mask, 8, False)
    assert Encoder(tiny_config(position="rope"), Kernels(flex_attention=True)).score_mod(mask, 8, False) is None


@pytest.mark.parametrize("position", BIAS_SCHEMES)
def test_flex_attention_recording_gradients_on_cpu_is_refused_by_name(position):
    """torch's FlexAttention has no backward pass on CPU: a forward that records gradients (training, or gradients
    asked of a model in eval) is refused naming Kernels.flex_attention, not failed deep in torch; without gradients,
    or with every weight frozen, it computes what SDPA with the dense bias computes."""
    config = tiny_config(position=position, attention_dropout=0.0, hidden_dropout=0.0)
    encoder = Encoder(config, Kernels(flex_attention=True))
    dense = Encoder(config)
    dense.load_state_dict(encoder.state_dict())
    ids, attention_mask = padded_batch(12)
    for mode in (encoder.train, encoder.eval):
        mode()
        with pytest.raises(ValueError, match="Kernels.flex_attention=True, but torch's FlexAttention has no backward "
                                             "pass on CPU"):
            encoder(ids, attention_mask)
    with torch.no_grad():
        torch.testing.assert_close(encoder(ids, attention_mask), dense.eval()(ids, attention_mask))
    encoder.requires_grad_(False)
    torch.testing.assert_close(encoder(ids, attention_mask), dense(ids, attention_mask).detach())
