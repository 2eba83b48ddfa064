"""What each position scheme does, in pictures: the numbers behind each figure, and the figures (matplotlib).

    python -m encoders.plots runs/quickstart/model --out figures/        # a checkpoint litbert loads
    python -m encoders.plots bert-mini --position alibi --out figures/    # a preset, freshly initialised

Figures, each drawn when the encoder has what it shows (the formula-based ones always):
1. `sinusoidal.png`: the sinusoidal table (positions x dimensions) and the dot product of two positions' embeddings
   against their distance, for several first positions: the curves coincide because PE(m) . PE(n) =
   sum_i cos(w_i (m - n)) depends on m - n only (Vaswani et al., 2017).
2. `rope.png`: the attention score of one fixed query/key pair placed n - m apart, and RoFormer's long-term decay
   bound (Su et al., 2021, section 3.4.3): the mean over j of |S_j|, S_j = sum_{k<j} exp(i (m - n) theta_k).
3. `alibi.png`: each head's bias -slope_h |i - j| (Press et al., 2022), the slopes a geometric sequence.
4. `t5.png`: a T5 encoder's learned bias per head against relative distance (key - query), bucket by bucket.
5. `learned.png`: the cosine similarity of a learned position table's rows (position x position).
6. `attention.png`: the attention probabilities of every layer and head for a sentence, tokens on both axes
   (a checkpoint with its tokenizer).
Each `*_data` function returns the numbers its figure draws; tests check them against the formulas.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from encoders.config import PRESETS, EncoderConfig
from encoders.model import Encoder
from encoders.positions import ALiBiPositions, RotaryPositions, rotate_half, sinusoidal_table, t5_relative_bucket

SENTENCE = "The movie was not good, but the actors saved it."


# ---- the numbers ---------------------------------------------------------------------------------------------


def sinusoidal_data(num_positions: int = 50, dim: int = 128, starts: Sequence[int] = (0, 10, 25),
                    max_distance: int = 40) -> dict[str, Any]:
    """The table (num_positions, dim) and, for each first position m in `starts`, PE(m) . PE(m + d) for
    d in [0, max_distance]."""
    table = sinusoidal_table(max(num_positions, max(starts) + max_distance + 1), dim)
    distances = torch.arange(max_distance + 1)
    dots = {m: (table[m] * table[m + distances]).sum(-1) for m in starts}
    return {"table": table[:num_positions], "distances": distances, "dots": dots}


def rope_data(config: EncoderConfig, max_distance: int = 128, seed: int = 0) -> dict[str, Any]:
    """For one random query/key pair of a head: the score q(m) . k(m + d) after rotation, for d in
    [-max_distance, max_distance], and RoFormer's decay bound mean_j |S_j| at each |d|."""
    rope = RotaryPositions(config)
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, config.head_dim, generator=generator, dtype=torch.float64)
    distances = torch.arange(-max_distance, max_distance + 1)
    m = max_distance  # the query's position; keys sit at m + d >= 0
    positions = m + distances
    cos, sin = (t.double() for t in rope.cos_sin(positions, torch.float64))
    keys = k * cos + rotate_half(k) * sin  # (2M+1, D)
    query_cos, query_sin = cos[max_distance], sin[max_distance]
    query = q * query_cos + rotate_half(q) * query_sin
    scores = keys @ query
    theta = rope.inv_freq.double()  # (D/2,)
    phases = torch.exp(1j * distances.double()[:, None] * theta[None, :])  # (2M+1, D/2)
    partial = torch.cumsum(phases, dim=1)  # S_{j+1} = sum_{k<=j}
    bound = partial.abs().mean(dim=1)
    return {"distances": distances, "scores": scores, "bound": bound, "q": q, "k": k, "theta": theta}


def alibi_data(config: EncoderConfig, length: int = 16) -> dict[str, Any]:
    """Each head's (length x length) bias and the slopes."""
    alibi = ALiBiPositions(config)
    return {"bias": alibi.bias(length, length), "slopes": alibi.slopes}


def t5_data(encoder: Encoder, max_distance: int | None = None) -> dict[str, Any]:
    """The learned bias of each head at relative distances key - query in [-max_distance, max_distance]
    (default: the config's t5_max_distance), with the bucket of each distance."""
    scheme = encoder.position
    limit = max_distance or scheme.max_distance
    distances = torch.arange(-limit, limit + 1)
    buckets = t5_relative_bucket(distances, scheme.num_buckets, scheme.max_distance)
    bias = scheme.relative_bias.weight.detach()[buckets].T.float()  # (H, 2L+1)
    return {"distances": distances, "buckets": buckets, "bias": bias}


def learned_data(encoder: Encoder, num_positions: int | None = None) -> dict[str, Any]:
    """The cosine similarity of every pair of the first `num_positions` rows of the learned table (the rows tokens
    use: past RoBERTa's padding offset)."""
    scheme = encoder.position
    rows = scheme.table.weight[scheme.offset:].detach().float()
    if num_positions is not None:
        rows = rows[:num_positions]
    unit = torch.nn.functional.normalize(rows, dim=-1)
    return {"similarity": unit @ unit.T}


def attention_data(encoder: Encoder, tokenizer, sentence: str = SENTENCE) -> dict[str, Any]:
    """The tokens of `sentence` and the attention probabilities, (layers, heads, T, T), of the encoder in eval."""
    batch = tokenizer(sentence, return_tensors="pt")
    was_training = encoder.training
    encoder.eval()
    types = batch.get("token_type_ids") if encoder.config.type_vocab_size else None
    with torch.no_grad():
        out = encoder(batch["input_ids"], batch.get("attention_mask"), types, return_attentions=True)
    encoder.train(was_training)
    return {"tokens": tokenizer.convert_ids_to_tokens(batch["input_ids"][0]),
            "attentions": torch.stack([a[0].float() for a in out.attentions])}


# ---- the figures ---------------------------------------------------------------------------------------------


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend, or an ImportError that says how to install it."""
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError("The figures need matplotlib: pip install 'litbert[plots]' (or matplotlib).") from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight")
    pyplot().close(figure)
    return path


def plot_sinusoidal(out: Path, dim: int = 128) -> Path:
    plt = pyplot()
    data = sinusoidal_data(dim=dim)
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    image = left.imshow(data["table"].numpy(), aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
    left.set(xlabel="dimension", ylabel="position", title=f"sinusoidal table, {len(data['table'])} positions")
    figure.colorbar(image, ax=left)
    for m, dots in data["dots"].items():
        right.plot(data["distances"].numpy(), dots.numpy(), label=f"m = {m}", linewidth=3 - 0.8 * len(right.lines))
    right.set(xlabel="distance n - m", ylabel="PE(m) . PE(n)", title="dot product: depends on n - m only")
    right.legend()
    return _save(figure, out / "sinusoidal.png")


def plot_rope(config: EncoderConfig, out: Path) -> Path:
    plt = pyplot()
    data = rope_data(config)
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    left.plot(data["distances"].numpy(), data["scores"].numpy())
    left.set(xlabel="relative distance n - m", ylabel="q(m) . k(n)",
             title=f"RoPE: one query/key pair (head dim {config.head_dim}, base {config.rope_base:g})")
    right.plot(data["distances"].numpy(), data["bound"].numpy())
    right.set(xlabel="relative distance n - m", ylabel="mean_j |S_j|", title="RoFormer's long-term decay bound")
    return _save(figure, out / "rope.png")


def plot_alibi(config: EncoderConfig, out: Path) -> Path:
    plt = pyplot()
    data = alibi_data(config)
    heads = data["bias"].shape[0]
    columns = min(heads, 4)
    rows = math.ceil(heads / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3 * columns, 3 * rows), squeeze=False)
    low = float(data["bias"].min())
    for h, axis in enumerate(axes.flat):
        if h >= heads:
            axis.axis("off")
            continue
        axis.imshow(data["bias"][h].numpy(), cmap="viridis", vmin=low, vmax=0)
        axis.set_title(f"head {h}: slope {data['slopes'][h]:.4g}")
        axis.set(xlabel="key", ylabel="query")
    figure.suptitle("ALiBi bias -slope |i - j|")
    return _save(figure, out / "alibi.png")


def plot_t5(encoder: Encoder, out: Path) -> Path:
    plt = pyplot()
    data = t5_data(encoder)
    figure, axis = plt.subplots(figsize=(8, 4))
    for h, row in enumerate(data["bias"]):
        axis.step(data["distances"].numpy(), row.numpy(), where="mid", label=f"head {h}")
    axis.set(xlabel="relative distance key - query", ylabel="bias",
             title=f"T5 relative bias per head ({encoder.position.num_buckets} buckets)")
    if len(data["bias"]) <= 12:
        axis.legend(fontsize=7, ncol=2)
    return _save(figure, out / "t5.png")


def plot_learned(encoder: Encoder, out: Path, num_positions: int | None = None) -> Path:
    plt = pyplot()
    data = learned_data(encoder, num_positions)
    figure, axis = plt.subplots(figsize=(6, 5))
    image = axis.imshow(data["similarity"].numpy(), cmap="RdBu", vmin=-1, vmax=1)
    axis.set(xlabel="position", ylabel="position", title="learned positions: cosine similarity")
    figure.colorbar(image, ax=axis)
    return _save(figure, out / "learned.png")


def plot_attention(encoder: Encoder, tokenizer, out: Path, sentence: str = SENTENCE) -> Path:
    plt = pyplot()
    data = attention_data(encoder, tokenizer, sentence)
    layers, heads, length, _ = data["attentions"].shape
    figure, axes = plt.subplots(layers, heads, figsize=(2.2 * heads, 2.2 * layers), squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            axis = axes[layer][head]
            axis.imshow(data["attentions"][layer, head].numpy(), cmap="viridis", vmin=0, vmax=1)
            axis.set_xticks([])
            axis.set_yticks([])
            if head == 0:
                axis.set_ylabel(f"layer {layer}")
            if layer == 0:
                axis.set_title(f"head {head}", fontsize=9)
    if length <= 32:  # tokens on the axes of the first panel; more would not be legible
        first = axes[0][0]
        first.set_yticks(range(length), data["tokens"], fontsize=5)
    figure.suptitle(f"attention probabilities: {sentence!r}")
    return _save(figure, out / "attention.png")


def plot_all(encoder: Encoder, out: Path, tokenizer=None, sentence: str = SENTENCE) -> list[Path]:
    """Every figure that applies to `encoder`: the formula figures (sinusoidal, RoPE and ALiBi, at this encoder's
    sizes), then the ones drawn from its weights (T5 bias, learned table) and, with a tokenizer, attention maps."""
    config = encoder.config
    rope_config = config if config.head_dim % 2 == 0 else EncoderConfig(hidden_size=64, num_heads=1)
    paths = [plot_sinusoidal(out, dim=config.hidden_size), plot_rope(rope_config, out), plot_alibi(config, out)]
    if config.position == "t5":
        paths.append(plot_t5(encoder, out))
    if config.position == "learned":
        paths.append(plot_learned(encoder, out))
    if tokenizer is not None:
        paths.append(plot_attention(encoder, tokenizer, out, sentence))
    return paths


def load(source: str, position: str | None = None) -> tuple[Encoder, Any]:
    """(encoder, tokenizer or None) of a checkpoint folder litbert loads, or of a preset name (new weights)."""
    if source in PRESETS:
        overrides = {} if position is None else {"position": position}
        return Encoder(EncoderConfig.from_name(source, **overrides)), None
    if not Path(source).exists():
        raise FileNotFoundError(f"{source} is neither a checkpoint folder nor a preset ({', '.join(PRESETS)}).")
    if position is not None:
        raise ValueError(f"--position applies to a preset; the checkpoint {source} has its own scheme.")
    # transformers' loader, not litbert's data package: the encoder knows nothing of data (issue 46).
    from transformers import AutoTokenizer

    encoder = Encoder.from_pretrained(source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError):
        tokenizer = None
    return encoder, tokenizer


def main(argv: Sequence[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(prog="python -m encoders.plots", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="a checkpoint folder (litbert or transformers format) or a preset name")
    parser.add_argument("--out", default="figures", help="folder for the PNG files")
    parser.add_argument("--position", help="position scheme of a preset (learned, sinusoidal, rope, alibi, t5, none)")
    parser.add_argument("--sentence", default=SENTENCE, help="the sentence of the attention maps")
    args = parser.parse_args(argv)
    try:
        encoder, tokenizer = load(args.source, args.position)
        pyplot()
    except (OSError, ValueError, ImportError) as error:  # a bad source or scheme, or no matplotlib: its message
        parser.error(str(error))
    if tokenizer is None:
        print("no tokenizer with this model: attention maps are left out")
    paths = plot_all(encoder, Path(args.out), tokenizer, args.sentence)
    for path in paths:
        print(path)
    return paths


if __name__ == "__main__":
    main()
