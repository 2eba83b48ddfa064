import json
import logging
import re
from dataclasses import fields

import pytest

from encoders import PRESETS, Encoder, EncoderConfig, Kernels


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds(name):
    config = EncoderConfig.from_name(name)
    assert config.name == name
    assert config.hidden_size % config.num_heads == 0


@pytest.mark.parametrize(
    ("name", "layers", "hidden", "heads", "ffn"),
    [("bert-tiny", 2, 128, 2, 512), ("bert-mini", 4, 256, 4, 1024), ("bert-small", 4, 512, 8, 2048),
     ("bert-medium", 8, 512, 8, 2048), ("bert-base", 12, 768, 12, 3072), ("bert-large", 24, 1024, 16, 4096),
     ("roberta-base", 12, 768, 12, 3072), ("distilbert-base", 6, 768, 12, 3072)],
)
def test_preset_sizes(name, layers, hidden, heads, ffn):
    config = EncoderConfig.from_name(name)
    assert (config.num_layers, config.hidden_size, config.num_heads, config.intermediate_size) == (
        layers, hidden, heads, ffn)


def test_preset_parameter_counts_match_published_models():
    # bert-base: 109.48M parameters with pooler (0.59M); 108.89M without. roberta-base: 124.65M with pooler.
    assert Encoder(EncoderConfig.from_name("bert-base")).num_parameters() == 108_891_648
    assert Encoder(EncoderConfig.from_name("roberta-base")).num_parameters() == 124_645_632 - 590_592
    assert Encoder(EncoderConfig.from_name("distilbert-base")).num_parameters() == 66_362_880


def test_modern_preset_composes_the_axes():
    config = EncoderConfig.from_name("modern")
    assert (config.position, config.norm, config.norm_placement, config.activation, config.bias) == (
        "rope", "rmsnorm", "pre", "geglu", False)
    encoder = Encoder(config)
    assert not any(name.endswith("bias") for name, _ in encoder.named_parameters())


def test_overrides():
    config = EncoderConfig.from_name("roberta-base", position="alibi", num_layers=3)
    assert config.position == "alibi" and config.num_layers == 3 and config.vocab_size == 50265


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(hidden_size=100, num_heads=3), "hidden_size=100 is not divisible by num_heads=3"),
        (dict(hidden_size=120, num_heads=8, position="rope"), "head dimension is odd"),
        (dict(position="xpos"), "position='xpos' is not known; choose one of ['alibi', 'learned', 'none', 'rope'"),
        (dict(norm="batchnorm"), "norm='batchnorm' is not known; choose one of ['layernorm', 'rmsnorm']"),
        (dict(activation="tanh"), "activation='tanh' is not known; choose one of ['geglu', 'gelu'"),
        (dict(norm_placement="sandwich"), "norm_placement='sandwich' is not known; choose one of ['post', 'pre']"),
        (dict(hidden_dropout=1.5), "hidden_dropout=1.5 must lie in [0, 1)"),
        (dict(feed_forward_dropout="input"), "feed_forward_dropout='input' is not known; choose one of ['inner', "),
        (dict(attention_output_rate=0.1), "attention_output_rate=0.1 is not known; choose one of ['attention', "),
        (dict(num_layers=0), "num_layers=0 must be positive"),
        (dict(pad_token_id=40000), "pad_token_id=40000 must lie in [0, vocab_size)"),
        # All four were refused in one sentence, without the one given or its value.
        (dict(norm_eps=-1.0), "EncoderConfig.norm_eps=-1.0 must be > 0."),
        (dict(rope_base=1.0), "EncoderConfig.rope_base=1.0 must be > 1."),
        (dict(embedding_scale=0.0), "EncoderConfig.embedding_scale=0.0 must be > 0."),
    ],
)
def test_validation_names_the_field(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        EncoderConfig.from_name("bert-base", **overrides)


def test_unknown_preset_and_field():
    with pytest.raises(ValueError, match="Unknown preset 'bert-huge'; choose one of"):
        EncoderConfig.from_name("bert-huge")
    with pytest.raises(ValueError, match=r"Unknown EncoderConfig field\(s\) \['hiden_size'\]"):
        EncoderConfig.from_name("bert-base", hiden_size=10)


def test_dict_round_trip():
    config = EncoderConfig.from_name("modern", num_layers=2)
    assert EncoderConfig.from_dict(config.to_dict()) == config


def test_a_stored_config_of_an_earlier_version_still_reads(tmp_path, caplog):
    """litbert.json files of earlier versions hold kernel choices among the architecture's fields: they are dropped,
    with one warning line for a value that is not honoured (the run's `Kernels` choose now)."""
    config = EncoderConfig.from_name("bert-mini", vocab_size=100)
    defaults = {"unpad_below": 0.8, "attention_groups": None, "flex_attention": None}
    with caplog.at_level(logging.WARNING, logger="encoders.config"):
        assert EncoderConfig.from_dict({**config.to_dict(), **defaults}) == config
        assert EncoderConfig.from_dict({**config.to_dict(), "attention_groups": 2, "flex_attention": False}) == config
    assert caplog.records == []
    Encoder(config).save_pretrained(tmp_path, format="litbert")
    stored = json.loads((tmp_path / "litbert.json").read_text())
    stored["encoder"].update(unpad_below=0.3, attention_groups=1, flex_attention=True)
    (tmp_path / "litbert.json").write_text(json.dumps(stored))
    with caplog.at_level(logging.WARNING, logger="encoders.config"):
        encoder = Encoder.from_pretrained(tmp_path)
    assert encoder.config == config and encoder.kernels == Kernels()
    [warning] = caplog.records
    assert "unpad_below=0.3, flex_attention=True" in warning.getMessage() and "\n" not in warning.getMessage()


def test_kernel_choices_are_checked_and_named():
    assert Kernels() == Kernels(unpad_below=0.8, flex_attention=False)
    with pytest.raises(ValueError, match=re.escape("Kernels.unpad_below=1.5 is a fraction of real tokens")):
        Kernels(unpad_below=1.5)
    with pytest.raises(ValueError, match=re.escape("Kernels.unpad_below=-0.1")):
        Encoder(EncoderConfig.from_name("bert-tiny"), Kernels(unpad_below=-0.1))
    assert not {"unpad_below", "flex_attention", "attention_groups"} & {f.name for f in fields(EncoderConfig)}


def test_max_sequence_length():
    assert EncoderConfig.from_name("bert-base").max_sequence_length == 512
    assert EncoderConfig.from_name("roberta-base").max_sequence_length == 512
    assert EncoderConfig.from_name("bert-base", position="alibi").max_sequence_length is None


def test_modernbert_preset_is_transformers_modernbert_base():
    """The preset is transformers' ModernBertConfig defaults (ModernBERT-base, Warner et al., 2024): the same
    parameters one for one (149M), the same global and sliding-window layers, window and RoPE bases."""
    import transformers

    theirs = transformers.ModernBertConfig()
    ours = EncoderConfig.from_name("modernbert-base")
    assert Encoder(ours).num_parameters() == transformers.ModernBertModel(theirs).num_parameters() == 149_014_272
    assert [("full_attention" if ours.is_global(i) else "sliding_attention") for i in range(ours.num_layers)] == \
        theirs.layer_types
    assert (ours.local_window, ours.rope_base, ours.local_rope_base) == (
        theirs.sliding_window, theirs.rope_parameters["full_attention"]["rope_theta"],
        theirs.rope_parameters["sliding_attention"]["rope_theta"])


def test_only_pre_norm_can_leave_the_first_attention_input_alone():
    with pytest.raises(ValueError, match="first_attention_norm=False .* only pre-norm blocks have"):
        EncoderConfig.from_name("bert-tiny", first_attention_norm=False)
    encoder = Encoder(EncoderConfig.from_name("modern", num_layers=3, first_attention_norm=False))
    norms = [type(block.attention_norm).__name__ for block in encoder.blocks]
    assert norms == ["Identity", "RMSNorm", "RMSNorm"]


def test_the_encoder_package_imports_nothing_of_data_tasks_or_runs():
    """The encoder knows nothing of data, losses, optimizers or runs (issue 46): no module of encoders/ imports
    data, tasks, bench or train, at the top or inside a function."""
    import ast
    from pathlib import Path

    import encoders

    outside = {"data", "tasks", "bench", "train"}
    found = []
    for path in sorted(Path(encoders.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.name}: {name}" for name in names if name.split(".")[0] in outside]
    assert found == []
