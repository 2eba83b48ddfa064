import pytest
import torch
import torch.nn.functional as F

from encoders import Encoder, EncoderConfig, MaskedLMHead, SequenceClassificationHead, TokenClassificationHead


@pytest.fixture
def model():
    config = EncoderConfig.from_name("bert-tiny", vocab_size=211, hidden_dropout=0.0, attention_dropout=0.0)
    encoder = Encoder(config)
    return encoder, MaskedLMHead(config, encoder.embeddings.word)


def test_sparse_mlm_head_equals_dense_loss_and_gradients(model):
    encoder, head = model
    ids = torch.randint(5, 211, (4, 32))
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(ids.shape) < 0.15
    labels[chosen] = ids[chosen]

    dense_loss = F.cross_entropy(head(encoder(ids)).flatten(0, 1), labels.flatten(), ignore_index=-100)
    dense_grads = torch.autograd.grad(dense_loss, list(encoder.parameters()) + [head.dense.weight, head.bias])

    masked = labels != -100
    sparse_logits = head(encoder(ids), masked)
    assert sparse_logits.shape == (int(masked.sum()), 211)
    sparse_loss = F.cross_entropy(sparse_logits, labels[masked])
    sparse_grads = torch.autograd.grad(sparse_loss, list(encoder.parameters()) + [head.dense.weight, head.bias])

    torch.testing.assert_close(sparse_loss, dense_loss)
    for dense, sparse in zip(dense_grads, sparse_grads, strict=True):
        torch.testing.assert_close(sparse, dense, atol=1e-6, rtol=1e-5)


def test_sparse_mlm_head_accepts_flat_indices(model):
    encoder, head = model
    ids = torch.randint(5, 211, (2, 8))
    hidden = encoder(ids)
    masked = torch.zeros(2, 8, dtype=torch.bool)
    masked[0, 3] = masked[1, 0] = masked[1, 7] = True
    torch.testing.assert_close(head(hidden, masked.flatten().nonzero().squeeze(1)), head(hidden)[masked])


def test_decoder_is_tied(model):
    encoder, head = model
    assert head.decoder.weight is encoder.embeddings.word.weight
    untied = MaskedLMHead(encoder.config)
    assert untied.decoder.weight is not encoder.embeddings.word.weight and not untied.tied


def test_mean_pooling_ignores_padding():
    torch.manual_seed(0)
    head = SequenceClassificationHead(16, num_labels=3, pooling="mean").eval()
    hidden = torch.randn(2, 6, 16)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    changed = hidden.clone()
    changed[0, 4:] = 100.0  # padding positions
    torch.testing.assert_close(head(hidden, mask), head(changed, mask))
    expected = head.classifier(head.pooler(hidden[0, :4].mean(0)))
    torch.testing.assert_close(head(hidden, mask)[0], expected)


def test_cls_pooling_reads_the_first_token():
    head = SequenceClassificationHead(16, num_labels=2).eval()
    hidden = torch.randn(2, 6, 16)
    changed = hidden.clone()
    changed[:, 1:] = 0.0
    torch.testing.assert_close(head(hidden), head(changed))


@pytest.mark.parametrize(("head", "message"), [
    (lambda: SequenceClassificationHead(16, 0), "num_labels=0"),
    (lambda: SequenceClassificationHead(16, 2, pooling="max"), "pooling='max'"),
    (lambda: TokenClassificationHead(16, 1), "num_labels=1; token classification needs at least 2"),
])
def test_head_arguments_are_checked(head, message):
    with pytest.raises(ValueError, match=message):
        head()


def test_hidden_states_and_dropout():
    config = EncoderConfig.from_name("bert-tiny", vocab_size=100, hidden_dropout=0.3)
    encoder = Encoder(config)
    ids = torch.randint(1, 100, (2, 7))
    out = encoder(ids, return_hidden_states=True)
    assert len(out.hidden_states) == config.num_layers + 1
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)
    assert not torch.allclose(encoder(ids), encoder(ids))  # dropout is active in training mode
    encoder.eval()
    torch.testing.assert_close(encoder(ids), encoder(ids))


def test_token_types_on_a_model_without_them_is_an_error():
    encoder = Encoder(EncoderConfig.from_name("distilbert-base", num_layers=1, hidden_size=64, num_heads=2,
                                              intermediate_size=64))
    ids = torch.randint(1, 100, (1, 5))
    with pytest.raises(ValueError, match="type_vocab_size=0"):
        encoder(ids, token_type_ids=torch.zeros_like(ids))


def test_bf16_autocast_runs_close_to_fp32():
    config = EncoderConfig.from_name("bert-tiny", vocab_size=100, position="alibi")
    encoder = Encoder(config).eval()
    ids = torch.randint(1, 100, (2, 16))
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    reference = encoder(ids, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = encoder(ids, mask)
    assert (low.float() - reference)[mask.bool()].abs().max() < 0.1


@pytest.mark.parametrize("preset", ["bert-tiny", "modern"])
def test_flop_count_matches_pytorch_counter(preset):
    from torch.utils.flop_counter import FlopCounterMode

    config = EncoderConfig.from_name(preset, num_layers=2, vocab_size=100)
    encoder = Encoder(config).eval()
    ids = torch.randint(1, 100, (3, 40))
    # The explicit attention path: the counter has no formula for the CPU SDPA kernel, but sees plain matmuls.
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        encoder(ids, return_attentions=True)
    assert encoder.flops_per_token(40) * ids.numel() == counter.get_total_flops()
