"""The position-scheme figures: each figure's numbers equal the formula it shows, and `python -m encoders.plots`
writes valid PNGs for a preset and for a checkpoint with its tokenizer."""

import math
import struct
from pathlib import Path

import pytest
import torch
from tiny import tiny_config

from data import save_tokenizer
from encoders import Encoder
from encoders.plots import (
    alibi_data,
    attention_data,
    learned_data,
    main,
    rope_data,
    sinusoidal_data,
    t5_data,
)

pytest.importorskip("matplotlib")


def png_size(path: Path) -> tuple[int, int]:
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", raw[16:24])


def test_sinusoidal_dot_product_is_a_sum_of_cosines_of_the_distance():
    dim = 64
    data = sinusoidal_data(num_positions=50, dim=dim, starts=(0, 7, 30), max_distance=20)
    assert data["table"].shape == (50, dim)
    frequencies = torch.pow(10000.0, -torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    expected = torch.cos(data["distances"].double()[:, None] * frequencies).sum(-1)
    for dots in data["dots"].values():  # the same curve whatever the first position: m - n only
        torch.testing.assert_close(dots.double(), expected, atol=1e-4, rtol=0)
    assert data["dots"][0][0] == pytest.approx(dim / 2, abs=1e-4)  # |PE(m)|^2 = d/2


def test_rope_curve_is_the_rotated_dot_product_and_the_bound_is_roformers():
    config = tiny_config(position="rope", hidden_size=64, num_heads=2)  # head dim 32
    data = rope_data(config, max_distance=50)
    q, k, theta = data["q"], data["k"], data["theta"]
    half = config.head_dim // 2
    # Channel j pairs with j + D/2 (rotate-half): as complex numbers, the score is Re(sum_j q_j conj(k_j) e^{-i d th_j})
    # for a key d positions after the query.
    qc, kc = torch.complex(q[:half], q[half:]), torch.complex(k[:half], k[half:])
    d = data["distances"].double()
    expected = (qc * kc.conj() * torch.exp(-1j * d[:, None] * theta)).sum(-1).real
    torch.testing.assert_close(data["scores"], expected, atol=1e-4, rtol=1e-5)  # the encoder's float32 angles
    # The bound: mean over j = 1..D/2 of |S_j|, S_j = sum_{k<j} e^{i d th_k}; at d = 0, |S_j| = j.
    for index in (0, 37, 77):
        terms = [abs(sum(complex(math.cos(d[index] * t), math.sin(d[index] * t)) for t in theta[:j]))
                 for j in range(1, half + 1)]
        assert data["bound"][index].item() == pytest.approx(sum(terms) / half, rel=1e-9)
    assert data["bound"][50].item() == pytest.approx((half + 1) / 2)
    assert data["bound"][50] == data["bound"].max()  # the bound decays away from d = 0


def test_alibi_bias_is_minus_slope_times_distance_with_geometric_slopes():
    config = tiny_config(position="alibi", num_heads=8)
    data = alibi_data(config, length=10)
    slopes = data["slopes"]
    torch.testing.assert_close(slopes, torch.tensor([2.0 ** (-(h + 1)) for h in range(8)]))  # 2^(-8/8 (h+1))
    i = torch.arange(10)
    expected = -slopes[:, None, None] * (i[None, :] - i[:, None]).abs()[None].float()
    torch.testing.assert_close(data["bias"], expected)


def test_t5_curve_reads_each_distances_bucket():
    encoder = Encoder(tiny_config(position="t5", t5_num_buckets=8, t5_max_distance=16))
    torch.nn.init.normal_(encoder.position.relative_bias.weight)
    data = t5_data(encoder)
    weight = encoder.position.relative_bias.weight.detach()
    for index, distance in enumerate(data["distances"].tolist()):
        bucket = data["buckets"][index]
        torch.testing.assert_close(data["bias"][:, index], weight[bucket])
        # The bias the encoder adds to query 20's score of key 20 + distance.
        torch.testing.assert_close(encoder.position.bias(41, 41)[:, 20, 20 + distance], weight[bucket])
    assert len(set(data["buckets"][14:19].tolist())) == 5  # near distances: one exact bucket each


def test_learned_table_similarity_is_the_cosine_of_its_rows():
    encoder = Encoder(tiny_config(position="learned", position_offset=2, pad_token_id=1))
    data = learned_data(encoder)
    rows = encoder.position.table.weight.detach()[2:]
    assert data["similarity"].shape == (len(rows), len(rows))
    expected = torch.nn.functional.cosine_similarity(rows[:, None], rows[None, :], dim=-1)
    torch.testing.assert_close(data["similarity"], expected, atol=1e-6, rtol=1e-5)


def test_attention_maps_equal_transformers_on_minilm(minilm, minilm_tokenizer):
    from transformers import BertModel

    encoder = Encoder.from_pretrained(minilm)
    data = attention_data(encoder, minilm_tokenizer, "Positions matter, and so does attention.")
    reference = BertModel.from_pretrained(minilm, attn_implementation="eager").eval()
    batch = minilm_tokenizer("Positions matter, and so does attention.", return_tensors="pt")
    with torch.no_grad():
        theirs = torch.stack([a[0] for a in reference(**batch, output_attentions=True).attentions])
    assert data["attentions"].shape == (6, 12, len(data["tokens"]), len(data["tokens"]))
    assert data["tokens"][0] == "[CLS]" and data["tokens"][-1] == "[SEP]"
    torch.testing.assert_close(data["attentions"], theirs, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(data["attentions"].sum(-1), torch.ones(6, 12, len(data["tokens"])))


def test_command_line_draws_every_figure(minilm_tokenizer, tmp_path, capsys):
    paths = main(["bert-tiny", "--position", "t5", "--out", str(tmp_path / "preset")])
    assert sorted(p.name for p in paths) == ["alibi.png", "rope.png", "sinusoidal.png", "t5.png"]
    # A trained checkpoint with its tokenizer beside it: learned table and attention maps as well.
    encoder = Encoder(tiny_config(vocab_size=len(minilm_tokenizer), position="learned"))
    encoder.save_pretrained(tmp_path / "model")
    save_tokenizer(minilm_tokenizer, tmp_path / "model")
    paths = main([str(tmp_path / "model"), "--out", str(tmp_path / "checkpoint")])
    assert sorted(p.name for p in paths) == ["alibi.png", "attention.png", "learned.png", "rope.png",
                                             "sinusoidal.png"]
    for path in paths:
        width, height = png_size(path)
        assert 300 < width < 4000 and 200 < height < 4000, (path.name, width, height)
    capsys.readouterr()
    # Bad input: the message and status 2, as argparse gives for its own errors, not a traceback.
    for args, message in (([str(tmp_path / "model"), "--position", "rope"], "--position applies to a preset"),
                          (["no-such-model"], "no-such-model is neither a checkpoint folder nor a preset"),
                          (["bert-tiny", "--position", "rotary"], "position='rotary'"),
                          ([str(tmp_path)], str(tmp_path))):
        with pytest.raises(SystemExit) as stopped:
            main([*args, "--out", str(tmp_path / "x")])
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert "python -m encoders.plots: error: " in err and message in err, err
    assert not (tmp_path / "x").exists()
