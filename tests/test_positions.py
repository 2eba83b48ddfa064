"""Every position scheme, parametrised over the registry so a new scheme is covered by default."""

import math

import pytest
import torch
from runs import MINILM
from tiny import tiny_config
from transformers.models.t5.modeling_t5 import T5Attention

from encoders import POSITIONS, Encoder, EncoderConfig
from encoders.layers import ACTIVATIONS, NORMS
from encoders.positions import (
    PositionScheme,
    RotaryPositions,
    alibi_slopes,
    sinusoidal_table,
    t5_relative_bucket,
)

SCHEMES = sorted(POSITIONS)


def batch(seq_len: int = 12, batch_size: int = 3, vocab_size: int = 97) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(1, vocab_size, (batch_size, seq_len))
    mask = torch.ones_like(ids)
    mask[1, seq_len - 4:] = 0
    ids[mask == 0] = 0
    return ids, mask


@pytest.mark.parametrize("position", SCHEMES)
@pytest.mark.parametrize("norm_placement", ["post", "pre"])
@pytest.mark.parametrize("norm", sorted(NORMS))
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_forward_and_backward(position, norm_placement, norm, activation):
    encoder = Encoder(tiny_config(position=position, norm_placement=norm_placement, norm=norm, activation=activation))
    ids, mask = batch()
    hidden = encoder(ids, mask)
    assert hidden.shape == (3, 12, 32) and torch.isfinite(hidden).all()
    hidden[mask.bool()].pow(2).mean().backward()
    for name, param in encoder.named_parameters():
        if name.startswith("embeddings.token_type"):
            continue  # only type 0 is used here
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
        if param.dim() > 1 and not name.startswith("embeddings.word"):
            assert param.grad.abs().sum() > 0, f"{name} got no gradient"


@pytest.mark.parametrize("position", SCHEMES)
def test_padding_invariance(position):
    encoder = Encoder(tiny_config(position=position)).eval()
    ids = torch.randint(1, 97, (2, 9))
    reference = encoder(ids, torch.ones_like(ids))
    padded = torch.cat([ids, torch.zeros(2, 5, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones_like(ids), torch.zeros(2, 5, dtype=torch.long)], dim=1)
    torch.testing.assert_close(encoder(padded, mask)[:, :9], reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("position", SCHEMES)
def test_bidirectional(position):
    encoder = Encoder(tiny_config(position=position)).eval()
    ids = torch.randint(1, 97, (1, 10))
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] % 96) + 1
    first, second = encoder(ids)[0, 0], encoder(changed)[0, 0]
    assert (first - second).abs().max() > 1e-4


@pytest.mark.parametrize("position", SCHEMES)
def test_length_beyond_training(position):
    encoder = Encoder(tiny_config(position=position)).eval()
    length = 4 * encoder.config.max_position_embeddings
    ids = torch.randint(1, 97, (1, length))
    if POSITIONS[position].length_limit(encoder.config) is not None:
        with pytest.raises(ValueError, match=f"Sequence length {length} exceeds the learned position table"):
            encoder(ids)
    else:
        assert torch.isfinite(encoder(ids)).all()


@pytest.mark.parametrize("position", SCHEMES)
def test_attention_probabilities(position):
    """The explicit path that returns probabilities computes what SDPA computes."""
    encoder = Encoder(tiny_config(position=position)).eval()
    ids, mask = batch()
    out = encoder(ids, mask, return_attentions=True)
    torch.testing.assert_close(out.last_hidden_state, encoder(ids, mask), atol=1e-5, rtol=1e-5)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (3, 4, 12, 12)
    torch.testing.assert_close(out.attentions[0].sum(-1), torch.ones(3, 4, 12))
    assert out.attentions[0][1, :, :, 8:].abs().max() < 1e-6  # nothing attends to padding


def test_learned_offset_reads_from_padding_offset():
    config = tiny_config(position="learned", max_position_embeddings=18, position_offset=2, pad_token_id=1)
    encoder = Encoder(config)
    assert encoder.position.max_length == 16
    encoder(torch.randint(2, 97, (1, 16)))
    with pytest.raises(ValueError, match="at most 16 tokens"):
        encoder(torch.randint(2, 97, (1, 17)))


def test_sinusoidal_equals_formula():
    table = sinusoidal_table(50, 16)
    for pos in (0, 1, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    encoder = Encoder(tiny_config(position="sinusoidal"))
    x = torch.zeros(1, 40, 32)
    torch.testing.assert_close(encoder.position.embed(x, torch.arange(40))[0], sinusoidal_table(40, 32))
    scaled = Encoder(tiny_config(position="sinusoidal", sinusoidal_scale=0.028))  # the tokens' size, not 35x it
    torch.testing.assert_close(scaled.position.embed(x, torch.arange(40))[0], 0.028 * sinusoidal_table(40, 32))
    with pytest.raises(ValueError, match=r"EncoderConfig.sinusoidal_scale=0.0 must be > 0"):
        tiny_config(position="sinusoidal", sinusoidal_scale=0.0)


def test_embedding_scale_multiplies_the_token_embeddings_only():
    """Vaswani et al.'s sqrt(d): the token vectors grow, the sinusoidal table and token types do not."""
    ids, types = torch.tensor([[3, 5, 7, 2]]), torch.tensor([[0, 0, 1, 1]])
    plain = Encoder(tiny_config(position="sinusoidal"))
    scaled = Encoder(tiny_config(position="sinusoidal", embedding_scale=32 ** 0.5))
    scaled.load_state_dict(plain.state_dict())
    word, token_type = plain.embeddings.word(ids), plain.embeddings.token_type(types)
    torch.testing.assert_close(plain.embeddings(ids, types), word + token_type)
    torch.testing.assert_close(scaled.embeddings(ids, types), 32 ** 0.5 * word + token_type)
    with pytest.raises(ValueError, match=r"EncoderConfig.embedding_scale=-1.0 must be > 0"):
        tiny_config(embedding_scale=-1.0)


def test_rope_scores_depend_only_on_relative_offset():
    rope = RotaryPositions(tiny_config(position="rope", rope_base=500.0))
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(m: int, n: int) -> float:
        rq, _ = rope.rotate(q, q, torch.tensor([m]))
        _, rk = rope.rotate(k, k, torch.tensor([n]))
        return (rq * rk).sum().item()

    for m, n in [(0, 3), (5, 1), (2, 2)]:
        for shift in (1, 17, 100):
            assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-4)
    assert abs(score(0, 3) - score(0, 5)) > 1e-4  # and they do depend on the offset


def test_rope_matches_transformers_rotate_half():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    config = tiny_config(position="rope")
    rope = RotaryPositions(config)
    q, k = torch.randn(2, 4, 10, 8), torch.randn(2, 4, 10, 8)
    positions = torch.arange(10)
    freqs = positions[:, None].float() * rope.inv_freq[None]
    emb = torch.cat((freqs, freqs), dim=-1)
    expected = apply_rotary_pos_emb(q, k, emb.cos()[None], emb.sin()[None])
    for ours, theirs in zip(rope.rotate(q, k, positions), expected, strict=True):
        torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("num_heads", [8, 12, 6])
def test_alibi_slopes_follow_the_paper(num_heads):
    def paper(n: int) -> list[float]:
        # Press et al.: for n = 2^k, slopes 2^(-8i/n), i = 1..n; otherwise the 2^floor(log2 n) slopes followed by
        # the odd-indexed slopes (1st, 3rd, ...) of the 2 * 2^floor(log2 n) sequence.
        if math.log2(n).is_integer():
            return [2 ** (-8 * i / n) for i in range(1, n + 1)]
        closest = 2 ** math.floor(math.log2(n))
        return paper(closest) + paper(2 * closest)[0::2][: n - closest]

    torch.testing.assert_close(alibi_slopes(num_heads), torch.tensor(paper(num_heads)))
    if num_heads == 8:
        assert alibi_slopes(8).tolist() == pytest.approx([1 / 2 ** i for i in range(1, 9)])


def test_alibi_bias_is_symmetric_distance():
    encoder = Encoder(tiny_config(position="alibi"))
    bias = encoder.position.bias(5, 5)
    slopes = alibi_slopes(4)
    for i in range(5):
        for j in range(5):
            torch.testing.assert_close(bias[:, i, j], -slopes * abs(i - j))


def test_t5_buckets_equal_transformers():
    relative = torch.arange(-300, 301)[None, :] - torch.zeros(1, 1, dtype=torch.long)
    for num_buckets, max_distance in [(32, 128), (16, 64)]:
        expected = T5Attention._relative_position_bucket(relative, bidirectional=True, num_buckets=num_buckets,
                                                         max_distance=max_distance)
        assert torch.equal(t5_relative_bucket(relative, num_buckets, max_distance), expected)


def test_t5_bias_is_shared_across_layers():
    encoder = Encoder(tiny_config(position="t5", num_layers=3))
    tables = [name for name, _ in encoder.named_parameters() if "relative_bias" in name]
    assert tables == ["position.relative_bias.weight"]
    assert encoder.position.bias(6, 6).shape == (4, 6, 6)


# A value other than the default for each scheme's own settings (`PositionScheme.settings`).
SCHEME_SETTINGS = {"position_offset": 2, "sinusoidal_scale": 0.5, "rope_base": 500.0, "local_rope_base": 100.0,
                   "t5_num_buckets": 16, "t5_max_distance": 64}


@pytest.mark.parametrize("position", SCHEMES)
def test_another_schemes_setting_is_refused_in_python_too(position):
    """`from_name` honours a scheme's own settings and refuses another scheme's, which would change nothing, as the
    command line does (`model.encoder.rope_base` with ALiBi); a preset's own values of them stay allowed."""
    own = set(POSITIONS[position].settings)
    window = {"local_window": 4, "global_every": 2}  # local_rope_base needs local layers to be read
    honoured = EncoderConfig.from_name("bert-tiny", position=position, **window,
                                       **{name: SCHEME_SETTINGS[name] for name in own})
    assert all(getattr(honoured, name) == SCHEME_SETTINGS[name] for name in own)
    others = {name for scheme in POSITIONS.values() for name in scheme.settings} - own
    assert others
    for name in others:
        with pytest.raises(ValueError, match=f"EncoderConfig: {name}=.* belong to another position scheme; "
                                             f"position='{position}' does not read them"):
            EncoderConfig.from_name("bert-tiny", position=position, **window, **{name: SCHEME_SETTINGS[name]})
    EncoderConfig.from_name("roberta-base", position=position)  # its position_offset is the preset's
    if position == "rope":
        with pytest.raises(ValueError, match="local_rope_base=100.0 is the RoPE base of sliding-window layers"):
            EncoderConfig.from_name("bert-tiny", position="rope", local_rope_base=100.0)


class DistancePenalty(PositionScheme):
    """A throwaway scheme for the test below: every head subtracts `penalty` times the distance |i - j|."""

    settings = ()

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.calls = 0
        self.num_heads = config.num_heads

    def bias(self, q_len: int, k_len: int) -> torch.Tensor:
        self.calls += 1
        distance = (torch.arange(k_len)[None, :] - torch.arange(q_len)[:, None]).abs().float()
        return (-0.1 * distance).expand(self.num_heads, q_len, k_len)


def test_a_registered_scheme_runs_through_the_command_line(monkeypatch, shared_data, tmp_path):
    """One class and one registry entry: config validation, the CLI and a training run take the new scheme with no
    other edit, and its bias reaches attention."""

    import train

    monkeypatch.setitem(POSITIONS, "distance_penalty", DistancePenalty)
    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    cli = train.main(["--config", "configs/quickstart.yaml", "--model.encoder.position", "distance_penalty",
                      "--model.encoder.preset", "bert-tiny", "--data.tokenizer",
                      MINILM, "--data.train_tokenizer", "null",
                      "--data.max_documents", "40", "--data.max_val_documents", "8", "--trainer.max_steps", "2",
                      "--trainer.val_check_interval", "2", "--trainer.logger", "false", "--export", "false",
                      "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.enable_progress_bar", "false"])
    scheme = cli.model.encoder.position
    assert isinstance(scheme, DistancePenalty) and scheme.calls >= 3  # two training steps and a validation
    assert math.isfinite(cli.metrics["val/loss"])
    with pytest.raises(ValueError, match=r"position='distance_penalt' is not known; choose one of \['alibi', "
                                         r"'distance_penalty', 'learned'"):
        EncoderConfig(position="distance_penalt")


class WindowedPositions(PositionScheme):
    """A throwaway scheme with a length limit and a size rule of its own."""

    @classmethod
    def length_limit(cls, config: EncoderConfig) -> int | None:
        return 3 * config.num_heads

    @classmethod
    def check_config(cls, config: EncoderConfig) -> None:
        if config.num_heads < 2:
            raise ValueError("windowed needs num_heads >= 2")

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()


def test_a_registered_schemes_limit_and_checks_reach_the_config_and_the_data_checks(monkeypatch):
    """A scheme states its own length limit and size rules: the config and the data's length check read them from
    the registry, with no edit elsewhere."""
    from data.checks import check_max_length

    monkeypatch.setitem(POSITIONS, "windowed", WindowedPositions)
    config = EncoderConfig(position="windowed", hidden_size=32, num_heads=4, intermediate_size=64)
    assert config.max_sequence_length == 12
    check_max_length(12, config)
    with pytest.raises(ValueError, match="12"):
        check_max_length(13, config)
    with pytest.raises(ValueError, match="windowed needs num_heads >= 2"):
        EncoderConfig(position="windowed", hidden_size=32, num_heads=1, intermediate_size=64)
    assert EncoderConfig(position="rope", hidden_size=32, num_heads=4).max_sequence_length is None
