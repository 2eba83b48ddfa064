"""Numbers against transformers: models built from small random configs (no download), saved, loaded."""

import dataclasses
import io
import json
import math

import pytest
import torch
import transformers
from runs import MINILM, SharedMasks

from encoders import Encoder, EncoderConfig, MaskedLMHead, SequenceClassificationHead, TokenClassificationHead
from encoders.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from encoders.hub import HubError

SIZES = dict(vocab_size=101, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=40,
             max_position_embeddings=40)


def hf_config(family: str, **overrides):
    if family == "distilbert":
        values = dict(vocab_size=101, dim=32, n_layers=3, n_heads=4, hidden_dim=40, max_position_embeddings=40)
        return transformers.DistilBertConfig(**{**values, **overrides})
    if family == "roberta":
        return transformers.RobertaConfig(**{**SIZES, "max_position_embeddings": 42, "type_vocab_size": 1,
                                             **overrides})
    if family == "electra":  # a discriminator: embeddings as wide as the hidden states
        return transformers.ElectraConfig(**{**SIZES, "embedding_size": SIZES["hidden_size"], "type_vocab_size": 2,
                                             **overrides})
    return transformers.BertConfig(**{**SIZES, "type_vocab_size": 2, **overrides})


def random_weights(model: torch.nn.Module) -> torch.nn.Module:
    """Break transformers' init symmetry (unit norms, zero biases) so every parameter's mapping is exercised."""
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return model.eval()


def inputs(family: str, pad_id: int):
    torch.manual_seed(1)
    ids = torch.randint(3, 101, (3, 17))
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = pad_id
    types = None
    if family == "bert":
        types = torch.zeros_like(ids)
        types[:, 8:] = 1
    return ids, mask, types


def max_diff_on_real_tokens(ours, theirs, mask):
    return (ours - theirs)[mask.bool()].abs().max().item()


FAMILIES = [("bert", "BertModel", "BertForMaskedLM"), ("roberta", "RobertaModel", "RobertaForMaskedLM"),
            ("distilbert", "DistilBertModel", "DistilBertForMaskedLM")]


@pytest.mark.parametrize(
    ("family", "base", "hidden_act"),
    [(family, base, act) for family, base, _ in FAMILIES for act in ("gelu", "gelu_new", "relu")
     if not (family == "distilbert" and act == "gelu_new")],  # DistilBERT's config offers only gelu and relu
)
def test_base_model_parity(tmp_path, family, base, hidden_act):
    key = "activation" if family == "distilbert" else "hidden_act"
    reference = random_weights(getattr(transformers, base)(hf_config(family, **{key: hidden_act})))
    reference.save_pretrained(tmp_path)
    encoder = Encoder.from_pretrained(tmp_path).eval()
    ids, mask, types = inputs(family, reference.config.pad_token_id)
    with torch.no_grad():
        kwargs = {"token_type_ids": types} if types is not None else {}
        expected = reference(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state
        ours = encoder(ids, mask, types)
    assert max_diff_on_real_tokens(ours, expected, mask) < 1e-5


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "electra", "modernbert"])
def test_a_loaded_encoder_drops_out_where_its_familys_transformers_model_does(family, tmp_path, monkeypatch):
    """Fine-tuning with the checkpoint's dropout: with the same masks on both sides, the encoder's training forward
    is transformers' (eager attention), the same tensors dropped in the same order: the embeddings, the attention
    probabilities, then the attention output (not in DistilBERT's blocks, which drop out the feed-forward output
    only) and the feed-forward output of each layer. ModernBERT's blocks drop out the attention output at the
    attention rate (its `out_drop`) and the feed-forward's inner activations (its mlp_dropout, before `Wo`), which
    the rates and the masks' shapes tell apart from BERT's."""
    from encoders import Kernels, kernels

    if family == "modernbert":  # its checkpoints have every dropout at 0: these are a fine-tune's
        reference = transformers.ModernBertModel(modernbert_config(
            attn_implementation="eager", embedding_dropout=0.1, mlp_dropout=0.1, attention_dropout=0.2,
            layer_types=["full_attention", "sliding_attention", "full_attention"], local_attention=8))
    else:
        base = {"bert": transformers.BertModel, "roberta": transformers.RobertaModel,
                "distilbert": transformers.DistilBertModel, "electra": transformers.ElectraModel}[family]
        reference = base(hf_config(family, attn_implementation="eager"))
    reference = random_weights(reference).train()
    reference.save_pretrained(tmp_path)
    encoder = Encoder.from_pretrained(tmp_path, Kernels(unpad_below=0)).train()  # the padded tensors' shapes
    config = encoder.config
    assert config.attention_output_dropout is (family != "distilbert")
    assert (config.attention_output_rate, config.feed_forward_dropout) == (
        ("attention", "inner") if family == "modernbert" else ("hidden", "output"))
    ids, mask, types = inputs("bert" if family == "electra" else family, reference.config.pad_token_id)
    kwargs = {"token_type_ids": types} if types is not None else {}
    ours, theirs = SharedMasks(0), SharedMasks(0)
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "dropout", ours)
        hidden = encoder(ids, mask, types)
    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "dropout", theirs)
        expected = reference(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state
    per_layer = 2 if family == "distilbert" else 3
    assert len(ours.shapes) == 1 + per_layer * config.num_layers and ours.shapes == theirs.shapes
    assert max_diff_on_real_tokens(hidden, expected, mask) < 1e-5


def test_a_distilbert_sinusoidal_table_that_was_trained_loads_as_it_is(tmp_path):
    """DistilBERT stores its sinusoidal table, and transformers 5 trains it: a table that is still the formula loads
    as litbert's computed one, a trained one as a learned table; either gives transformers' hidden states."""
    ids, mask, _ = inputs("distilbert", 0)
    for trained in (False, True):
        reference = transformers.DistilBertModel(hf_config("distilbert", sinusoidal_pos_embds=True)).eval()
        if trained:  # what fine-tuning in transformers does to it
            random_weights(reference)
        reference.save_pretrained(tmp_path / str(trained))
        encoder = Encoder.from_pretrained(tmp_path / str(trained)).eval()
        assert encoder.config.position == ("learned" if trained else "sinusoidal")
        with torch.no_grad():
            expected = reference(input_ids=ids, attention_mask=mask).last_hidden_state
            assert max_diff_on_real_tokens(encoder(ids, mask), expected, mask) < 1e-5


def test_a_family_is_a_table_entry_electra_discriminator(tmp_path):
    """ELECTRA's discriminator encoder is one `LAYOUTS` row and nothing else: it loads with BERT's numbers, and
    loading refuses an ELECTRA whose embeddings are narrower than its hidden states (an embeddings projection)."""
    config = transformers.ElectraConfig(**SIZES, embedding_size=32, type_vocab_size=2, hidden_act="gelu")
    reference = random_weights(transformers.ElectraModel(config))
    reference.save_pretrained(tmp_path)
    encoder = Encoder.from_pretrained(tmp_path).eval()
    ids, mask, types = inputs("bert", 0)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        assert max_diff_on_real_tokens(encoder(ids, mask, types), expected, mask) < 1e-5
    narrow = tmp_path / "narrow"
    transformers.ElectraModel(transformers.ElectraConfig(**SIZES, embedding_size=16)).save_pretrained(narrow)
    with pytest.raises(ValueError, match="embedding_size=16 differs from hidden_size=32"):
        Encoder.from_pretrained(narrow)


@pytest.mark.parametrize("kind", ["Sequence", "Token"])
def test_an_electra_classifier_loads_computes_and_exports_as_transformers(kind, tmp_path):
    """ELECTRA's classifiers load with transformers' numbers (its sequence classifier: a dense layer, GELU, and the
    output projection on the first token) and export to classes that compute the same; a new one has that GELU."""
    from encoders.heads import fine_tuning_head

    head_class = SequenceClassificationHead if kind == "Sequence" else TokenClassificationHead
    architecture = getattr(transformers, f"ElectraFor{kind}Classification")
    reference = random_weights(architecture(hf_config("electra", num_labels=3)))
    reference.save_pretrained(tmp_path / "in")
    encoder, head = Encoder.from_pretrained(tmp_path / "in").eval(), head_class.from_pretrained(tmp_path / "in").eval()
    ids, mask, types = inputs("bert", 0)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        hidden = encoder(ids, mask, types)
        logits = head(hidden, mask)[:, None] if kind == "Sequence" else head(hidden)
        tokens = mask[:, :1] if kind == "Sequence" else mask  # the logits of padding tokens are no one's
        assert max_diff_on_real_tokens(logits, expected.view(logits.shape), tokens) < 1e-5
        encoder.save_pretrained(tmp_path / "out", head=head)
        # The token classifier is BERT's and exports as BERT's; the sequence classifier as ELECTRA's.
        again = getattr(transformers, f"AutoModelFor{kind}Classification").from_pretrained(tmp_path / "out").eval()
        assert type(again).__name__ == f"{'Electra' if kind == 'Sequence' else 'Bert'}For{kind}Classification"
        exported = again(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        assert max_diff_on_real_tokens(exported.view(logits.shape), expected.view(logits.shape), tokens) < 1e-5
    transformers.ElectraModel(hf_config("electra")).save_pretrained(tmp_path / "encoder")
    checkpoint = load_checkpoint(tmp_path / "encoder")
    if kind == "Sequence":
        assert fine_tuning_head(head_class, checkpoint, checkpoint.config, 2).pooler_activation == "gelu"


def modernbert_config(**overrides):
    """A small ModernBERT with every layer global (unless overridden), pad id 0 as `inputs` pads."""
    values = dict(vocab_size=101, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=40,
                  max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
                  sep_token_id=2, layer_types=["full_attention"] * 3)
    return transformers.ModernBertConfig(**{**values, **overrides})


def flat_copy(folder, **flat_keys):
    """`folder/flat`: the checkpoint with the published ModernBERT checkpoints' flat config keys instead of
    transformers 5's `layer_types` and `rope_parameters`."""
    config = json.loads((folder / "config.json").read_text())
    for key in ("layer_types", "rope_parameters"):
        config.pop(key)
    (folder / "flat").mkdir()
    (folder / "flat" / "config.json").write_text(json.dumps(config | flat_keys))
    (folder / "flat" / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    return folder / "flat"


def test_a_family_is_a_table_entry_modernbert(tmp_path):
    """ModernBERT, a family without biases whose checkpoint fuses Q, K and V, is one `LAYOUTS` row: its MLM model
    loads with transformers' numbers (its padded rows taking litbert's unpadded path), whether its config.json has
    transformers 5's nested keys or the published checkpoints' flat ones."""
    reference = random_weights(transformers.ModernBertForMaskedLM(modernbert_config(
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 2_000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}})))
    reference.save_pretrained(tmp_path)
    ids, mask, _ = inputs("modernbert", 0)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).logits
    flat = flat_copy(tmp_path, global_attn_every_n_layers=1, global_rope_theta=2_000.0)
    for folder in (tmp_path, flat):
        encoder = Encoder.from_pretrained(folder).eval()
        head = MaskedLMHead.from_pretrained(folder, encoder).eval()
        config = encoder.config
        assert (config.position, config.rope_base, config.norm_placement, config.activation, config.bias,
                config.first_attention_norm) == ("rope", 2_000.0, "pre", "geglu", False, False)
        assert encoder.unpadded(mask) is not None  # the fast path is what is compared
        with torch.no_grad():
            assert max_diff_on_real_tokens(head(encoder(ids, mask)), expected, mask) < 1e-5


@pytest.mark.parametrize(("pooling", "bias"), [("cls", False), ("mean", True)])
def test_a_modernbert_classifier_matches_transformers_and_exports_back(tmp_path, pooling, bias):
    """ModernBERT's classifier (pooling, dense, GELU, LayerNorm without bias, classifier) loads with transformers'
    logits in both poolings, with or without the dense bias (`classifier_bias`), and not as an MLM head although
    its transform has the MLM head's names; saved again it is a `ModernBertForSequenceClassification` with them."""
    config = modernbert_config(num_labels=3, classifier_pooling=pooling, classifier_bias=bias, norm_eps=1e-6)
    reference = random_weights(transformers.ModernBertForSequenceClassification(config))
    reference.save_pretrained(tmp_path / "hf")
    checkpoint = load_checkpoint(tmp_path / "hf")
    assert sorted(checkpoint.head_states) == ["sequence_classification", "token_classification"]  # head.* twice
    encoder = Encoder.from_pretrained(checkpoint).eval()
    head = SequenceClassificationHead.from_pretrained(checkpoint).eval()
    assert (head.pooling, head.pooler_activation, head.pooler_bias, head.pooler_norm, head.norm_eps) == (
        pooling, "gelu", bias, True, 1e-6)
    ids, mask, _ = inputs("modernbert", 0)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(head(encoder(ids, mask), mask), expected, atol=1e-5, rtol=0)
    encoder.save_pretrained(tmp_path / "out", head=head)
    exported = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (exported["architectures"], exported["classifier_pooling"], exported["classifier_bias"]) == (
        ["ModernBertForSequenceClassification"], pooling, bias)
    again = transformers.ModernBertForSequenceClassification.from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids, attention_mask=mask).logits, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("bias", [False, True])
def test_a_modernbert_token_classifier_matches_transformers_and_exports_back(tmp_path, bias):
    """ModernBERT's token classifier (dense, GELU, LayerNorm without bias on every token, then the classifier) loads
    with transformers' logits, with or without the dense bias, and exports back to a
    `ModernBertForTokenClassification` with them; a new one over an MLM checkpoint starts its transform from the MLM
    head's, as transformers' `from_pretrained` does, and a BERT token classifier keeps having none."""
    from encoders.heads import fine_tuning_head

    config = modernbert_config(num_labels=4, classifier_bias=bias, norm_eps=1e-6)
    reference = random_weights(transformers.ModernBertForTokenClassification(config))
    reference.save_pretrained(tmp_path / "hf")
    checkpoint = load_checkpoint(tmp_path / "hf")
    assert sorted(checkpoint.head_states) == ["sequence_classification", "token_classification"]  # its head.* too
    assert "classifier.weight" not in checkpoint.head_states["sequence_classification"]
    encoder = Encoder.from_pretrained(checkpoint).eval()
    head = TokenClassificationHead.from_pretrained(checkpoint).eval()
    assert (head.num_labels, head.transform_activation, head.transform_bias, head.transform_norm, head.norm_eps) == (
        4, "gelu", bias, True, 1e-6)
    ids, mask, _ = inputs("modernbert", 0)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).logits
        assert max_diff_on_real_tokens(head(encoder(ids, mask)), expected, mask) < 1e-5
    encoder.save_pretrained(tmp_path / "out", head=head, label_names=["O", "B-X", "I-X", "B-Y"])
    exported = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (exported["architectures"], exported["classifier_bias"], exported["id2label"]["1"]) == (
        ["ModernBertForTokenClassification"], bias, "B-X")
    again = transformers.ModernBertForTokenClassification.from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        assert max_diff_on_real_tokens(again(input_ids=ids, attention_mask=mask).logits, expected, mask) < 1e-5

    mlm = random_weights(transformers.ModernBertForMaskedLM(modernbert_config()))
    mlm.save_pretrained(tmp_path / "mlm")
    checkpoint = load_checkpoint(tmp_path / "mlm")
    fresh = fine_tuning_head(TokenClassificationHead, checkpoint, checkpoint.config, num_labels=3)
    theirs = transformers.ModernBertForTokenClassification.from_pretrained(tmp_path / "mlm", num_labels=3)
    torch.testing.assert_close(fresh.transform[0].weight, theirs.head.dense.weight)
    torch.testing.assert_close(fresh.transform[2].weight, theirs.head.norm.weight)
    assert fresh.classifier.weight.shape == (3, 32)

    transformers.BertForMaskedLM(hf_config("bert")).save_pretrained(tmp_path / "bert")
    checkpoint = load_checkpoint(tmp_path / "bert")
    bert = fine_tuning_head(TokenClassificationHead, checkpoint, checkpoint.config, num_labels=3)
    assert bert.transform is None and sorted(bert.state_dict()) == ["classifier.bias", "classifier.weight"]
    gelu = TokenClassificationHead(32, 3, transform_activation="gelu")
    with pytest.raises(ValueError, match=r"transform_activation='gelu' \(the Bert token classifier's is None\)"):
        Encoder.from_pretrained(tmp_path / "bert").save_pretrained(tmp_path / "no", head=gelu, format="transformers")


@pytest.mark.parametrize(("kind", "pooling"), [("sequence", "cls"), ("sequence", "mean"), ("token", "cls")])
def test_a_modernbert_classifier_trains_with_transformers_dropout(kind, pooling, tmp_path, monkeypatch):
    """A fine-tuned ModernBERT classifier at non-zero rates (its embedding, attention and MLP dropouts, and the
    classifier's after its head's dense, GELU and norm), in training mode with the same masks on both sides: the
    logits of transformers' `ModernBertFor*Classification` (eager attention, padded rows), in both poolings."""
    from encoders import Kernels, kernels
    from encoders.heads import fine_tuning_head

    model = {"sequence": transformers.ModernBertForSequenceClassification,
             "token": transformers.ModernBertForTokenClassification}[kind]
    reference = random_weights(model(modernbert_config(
        num_labels=3, classifier_pooling=pooling, attn_implementation="eager", embedding_dropout=0.1,
        mlp_dropout=0.1, attention_dropout=0.2, classifier_dropout=0.3))).train()
    reference.save_pretrained(tmp_path)
    checkpoint = load_checkpoint(tmp_path)
    encoder = Encoder.from_pretrained(checkpoint, Kernels(unpad_below=0)).train()
    head_class = SequenceClassificationHead if kind == "sequence" else TokenClassificationHead
    head = fine_tuning_head(head_class, checkpoint, encoder.config, 3).train()
    assert head.dropout.p == 0.3
    ids, mask, _ = inputs("modernbert", 0)
    ours, theirs = SharedMasks(0), SharedMasks(0)
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "dropout", ours)
        hidden = encoder(ids, mask)
        logits = head(hidden, mask) if kind == "sequence" else head(hidden)
    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "dropout", theirs)
        expected = reference(input_ids=ids, attention_mask=mask).logits
    assert len(ours.shapes) == 1 + 3 * 3 + 1 and ours.shapes == theirs.shapes
    if kind == "token":
        logits, expected = logits[mask.bool()], expected[mask.bool()]
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)


def test_a_classifier_over_a_checkpoint_has_its_familys_pooler(tmp_path):
    """A new classification head over a pretrained encoder is the one transformers' `*ForSequenceClassification`
    builds for it: DistilBERT's ReLU pre-classifier, and ModernBERT's GELU + norm head, started (as transformers does)
    from the MLM checkpoint's transform, pooling as its `classifier_pooling` says. A head litbert's family cannot
    hold is saved in litbert's format by "auto" and refused by "transformers", saying why."""
    from encoders.heads import fine_tuning_head

    mlm = random_weights(transformers.ModernBertForMaskedLM(modernbert_config(classifier_pooling="mean")))
    mlm.save_pretrained(tmp_path / "modernbert")
    checkpoint = load_checkpoint(tmp_path / "modernbert")
    head = fine_tuning_head(SequenceClassificationHead, checkpoint, checkpoint.config, num_labels=2)
    assert (head.pooling, head.pooler_activation, head.pooler_norm, head.pooler_bias) == ("mean", "gelu", True, False)
    classifier = transformers.ModernBertForSequenceClassification.from_pretrained(tmp_path / "modernbert", num_labels=2)
    torch.testing.assert_close(head.pooler[0].weight, classifier.head.dense.weight)
    torch.testing.assert_close(head.pooler[2].weight, classifier.head.norm.weight)
    assert fine_tuning_head(SequenceClassificationHead, checkpoint, checkpoint.config, num_labels=2,
                            pooling="cls").pooling == "cls"

    distilbert = transformers.DistilBertConfig(vocab_size=101, dim=32, n_layers=2, n_heads=4, hidden_dim=48)
    transformers.DistilBertForMaskedLM(distilbert).save_pretrained(tmp_path / "distilbert")
    checkpoint = load_checkpoint(tmp_path / "distilbert")
    head = fine_tuning_head(SequenceClassificationHead, checkpoint, checkpoint.config, num_labels=2)
    assert (head.pooling, head.pooler_activation, head.pooler_norm) == ("cls", "relu", False)

    encoder = Encoder(EncoderConfig.from_name("bert-tiny"))
    mean = SequenceClassificationHead(128, num_labels=2, pooling="mean")
    encoder.save_pretrained(tmp_path / "auto", head=mean)
    assert (tmp_path / "auto" / "litbert.json").exists()
    assert SequenceClassificationHead.from_pretrained(tmp_path / "auto").pooling == "mean"
    with pytest.raises(ValueError, match=r"pooling='mean' \(the Bert classifier's is 'cls'\)"):
        encoder.save_pretrained(tmp_path / "refused", head=mean, format="transformers")


@pytest.mark.parametrize("family", ["bert", "roberta", "electra"])
def test_a_classifier_drops_out_where_its_familys_transformers_classifier_does(family, tmp_path, monkeypatch):
    """In training, a classifier over a checkpoint applies its dropout where transformers' `*ForSequenceClassification`
    of the family does: BERT's before the classifier only, RoBERTa's and ELECTRA's (`*ClassificationHead`) before
    their dense layer too. With the same masks the logits are transformers', so the same settings train alike."""
    from encoders import kernels
    from encoders.heads import fine_tuning_head

    model = random_weights(getattr(transformers, f"{family.capitalize()}ForSequenceClassification")(
        hf_config(family, classifier_dropout=0.5, num_labels=3)))
    model.save_pretrained(tmp_path)
    checkpoint = load_checkpoint(tmp_path)
    ours = fine_tuning_head(SequenceClassificationHead, checkpoint, checkpoint.config, num_labels=3).train()
    model.train()
    if family == "bert":  # the pooler sits in BertModel, the dropout and the classifier beside it
        def theirs(hidden):
            return model.classifier(model.dropout(model.bert.pooler(hidden)))
    else:
        theirs = model.classifier
    hidden = torch.randn(4, 7, checkpoint.config.hidden_size)
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "dropout", SharedMasks(0))
        logits = ours(hidden)
    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "dropout", SharedMasks(0))
        expected = theirs(hidden)
    torch.testing.assert_close(logits, expected)
    assert ours.dropout_before_pooler == (family != "bert")


@pytest.mark.parametrize("kind", ["Sequence", "Token"])
def test_a_new_modernbert_classifier_starts_as_transformers_starts_it(kind, tmp_path):
    """transformers starts ModernBERT's new classifier from a normal of std hidden_size ** -0.5 and a new head dense
    layer from one of std initializer_range / sqrt(2 num_layers), both cut off at `initializer_cutoff_factor` stds,
    not BERT's N(0, initializer_range); litbert's heads over a ModernBERT checkpoint start so too."""
    from encoders.heads import fine_tuning_head

    config = modernbert_config(hidden_size=128, num_attention_heads=4, initializer_cutoff_factor=1.5)
    transformers.ModernBertModel(config).save_pretrained(tmp_path)  # no head: the dense layer starts fresh too
    checkpoint = load_checkpoint(tmp_path)
    head_class = SequenceClassificationHead if kind == "Sequence" else TokenClassificationHead
    torch.manual_seed(0)
    ours = fine_tuning_head(head_class, checkpoint, checkpoint.config, num_labels=64)
    theirs = getattr(transformers, f"ModernBertFor{kind}Classification").from_pretrained(tmp_path, num_labels=64)
    dense = ours.pooler[0] if kind == "Sequence" else ours.transform[0]
    for weight, reference, std in [(ours.classifier.weight, theirs.classifier.weight, 128 ** -0.5),
                                   (dense.weight, theirs.head.dense.weight, 0.02 / 6 ** 0.5)]:
        for tensor in (weight, reference):
            assert tensor.abs().max() <= 1.5 * std
            # a normal cut at 1.5 stds has 0.74 of its std
            assert tensor.std().item() == pytest.approx(0.74 * std, rel=0.1), (kind, std)
    assert not ours.classifier.bias.any()



def cut_normal_std(std: float, cutoff: float) -> float:
    """The standard deviation of N(0, std) cut off at `cutoff` standard deviations."""
    density = math.exp(-cutoff ** 2 / 2) / math.sqrt(2 * math.pi)
    return std * math.sqrt(1 - 2 * cutoff * density / math.erf(cutoff / math.sqrt(2)))


def test_initializer_range_over_a_checkpoint_starts_new_heads_as_transformers_does(tmp_path):
    """model.encoder.initializer_range over a checkpoint is transformers' `from_pretrained(..., initializer_range=x)`:
    what the fine-tune adds starts from x (BERT's classifier and pooler from N(0, x); ModernBERT's head dense layer,
    of a classifier or an MLM head, at its family's scale of x), and the encoder's config, so its export, carry x."""
    from tasks.base import EncoderSpec
    from tasks.classification import SequenceClassification
    from tasks.mlm import MaskedLM

    transformers.BertModel(hf_config("bert", hidden_size=128, num_attention_heads=2),
                           add_pooling_layer=False).save_pretrained(tmp_path / "bert")
    transformers.ModernBertModel(modernbert_config(hidden_size=128)).save_pretrained(tmp_path / "modernbert")
    modernbert_dense = cut_normal_std(0.1 / 6 ** 0.5, 2.0)  # 3 layers, ModernBertConfig's cut-off
    for family, x in [("bert", 0.2), ("modernbert", 0.1)]:
        torch.manual_seed(0)
        ours = SequenceClassification(num_labels=3, pretrained=str(tmp_path / family),
                                      encoder=EncoderSpec(initializer_range=x))
        theirs = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / family, num_labels=3,
                                                                                 initializer_range=x)
        if family == "bert":
            pairs = [(ours.head.classifier.weight, theirs.classifier.weight, x),
                     (ours.head.pooler[0].weight, theirs.bert.pooler.dense.weight, x)]
        else:
            pairs = [(ours.head.pooler[0].weight, theirs.head.dense.weight, modernbert_dense)]
        for weight, reference, std in pairs:
            for tensor in (weight, reference):
                assert tensor.std().item() == pytest.approx(std, rel=0.15), (family, tuple(tensor.shape))
        assert ours.encoder.config.initializer_range == x
        ours.encoder.save_pretrained(tmp_path / f"{family}-export", head=ours.head)
        assert transformers.AutoConfig.from_pretrained(tmp_path / f"{family}-export").initializer_range == x
        assert load_checkpoint(tmp_path / f"{family}-export").config.initializer_range == x
    mlm = MaskedLM(pretrained=str(tmp_path / "modernbert"), encoder=EncoderSpec(initializer_range=0.1))
    theirs = transformers.ModernBertForMaskedLM.from_pretrained(tmp_path / "modernbert", initializer_range=0.1)
    for tensor in (mlm.head.dense.weight, theirs.head.dense.weight):
        assert tensor.std().item() == pytest.approx(modernbert_dense, rel=0.05)


@pytest.mark.parametrize("kind", ["Sequence", "Token", "MaskedLM"])
def test_a_new_modernbert_head_starts_at_the_scale_of_the_layers_it_is_built_over(kind, tmp_path):
    """transformers' ModernBERT starts a new head's dense layer (a classifier's, or the MLM head's) at
    initializer_range / sqrt(2 num_hidden_layers) of the model it builds, cut off at initializer_cutoff_factor: over
    `model.pretrained_layers` the kept depth (2 of 4 layers here), not the checkpoint's (a std sqrt(2) smaller), and
    an MLM head the checkpoint lacks as well as a classifier (not from BERT's N(0, initializer_range))."""
    from tasks.classification import SequenceClassification, TokenClassification
    from tasks.mlm import MaskedLM

    four = dict(hidden_size=128, num_hidden_layers=4, layer_types=["full_attention"] * 4, initializer_cutoff_factor=1.5)
    transformers.ModernBertModel(modernbert_config(**four)).save_pretrained(tmp_path)
    kept = modernbert_config(**four | dict(num_hidden_layers=2, layer_types=["full_attention"] * 2))
    torch.manual_seed(0)
    if kind == "Sequence":
        task = SequenceClassification(num_labels=3, pretrained=str(tmp_path), pretrained_layers="every_other")
        dense, theirs = task.head.pooler[0], transformers.ModernBertForSequenceClassification(kept)
    elif kind == "Token":
        task = TokenClassification(label_names=["O", "B-X", "I-X"], pretrained=str(tmp_path),
                                   pretrained_layers="every_other")
        dense, theirs = task.head.transform[0], transformers.ModernBertForTokenClassification(kept)
    else:  # all 4 layers: MaskedLM keeps them all
        task = MaskedLM(pretrained=str(tmp_path))
        dense, theirs = task.head.dense, transformers.ModernBertForMaskedLM.from_pretrained(tmp_path)
    depth = task.encoder.config.num_layers
    assert depth == (4 if kind == "MaskedLM" else 2)
    for tensor in (dense.weight, theirs.head.dense.weight):
        assert tensor.std().item() == pytest.approx(cut_normal_std(0.02 / (2 * depth) ** 0.5, 1.5), rel=0.05)
        assert tensor.abs().max() <= 1.5 * 0.02 / (2 * depth) ** 0.5


def test_a_modernbert_export_keeps_its_initializer_cutoff_factor(tmp_path):
    """ModernBERT's initializer_cutoff_factor (how far its new weights' normals reach) loads as initializer_cutoff
    (null: 3, as transformers 4 read it; absent: 2), is written back on export and reads back in transformers and
    litbert; BERT's families start new weights uncut, so an encoder cut off has no BERT export."""
    from encoders.heads import fine_tuning_head

    transformers.ModernBertForMaskedLM(modernbert_config(initializer_cutoff_factor=1.5)).save_pretrained(tmp_path)
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint.config.initializer_cutoff == 1.5
    encoder = Encoder.from_pretrained(checkpoint)
    head = fine_tuning_head(SequenceClassificationHead, checkpoint, encoder.config, num_labels=2)
    encoder.save_pretrained(tmp_path / "export", head=head)
    assert json.loads((tmp_path / "export" / "config.json").read_text())["initializer_cutoff_factor"] == 1.5
    assert transformers.AutoConfig.from_pretrained(tmp_path / "export").initializer_cutoff_factor == 1.5
    assert load_checkpoint(tmp_path / "export").config.initializer_cutoff == 1.5
    stored = json.loads((tmp_path / "config.json").read_text())
    for value, expected in [(None, 3.0), ("absent", 2.0)]:
        (tmp_path / "config.json").write_text(json.dumps(
            {k: v for k, v in stored.items() if k != "initializer_cutoff_factor"}
            | ({} if value == "absent" else {"initializer_cutoff_factor": value})))
        assert load_checkpoint(tmp_path).config.initializer_cutoff == expected

    cut = Encoder(EncoderConfig.from_name("bert-tiny", num_layers=1, vocab_size=101, initializer_cutoff=1.5))
    with pytest.raises(ValueError, match=r"initializer_cutoff=1.5 \(Bert has None\)"):
        cut.save_pretrained(tmp_path / "bert", format="transformers")
    assert Encoder.from_pretrained(cut.save_pretrained(tmp_path / "bert")).config == cut.config  # litbert's format


def test_a_new_encoder_and_its_heads_start_cut_off_at_initializer_cutoff():
    """initializer_cutoff cuts off the normals every new weight starts from, a new encoder's and its heads'."""
    from tasks.base import EncoderSpec
    from tasks.classification import SequenceClassification

    torch.manual_seed(0)
    task = SequenceClassification(num_labels=2, encoder=EncoderSpec(preset="bert-tiny", vocab_size=1000,
                                                                    initializer_cutoff=1.5))
    weights = [m.weight for m in task.modules() if isinstance(m, torch.nn.Linear | torch.nn.Embedding)]
    assert len(weights) > 10 and all(weight.abs().max() <= 1.5 * 0.02 for weight in weights)
    assert task.encoder.embeddings.word.weight.std().item() == pytest.approx(cut_normal_std(0.02, 1.5), rel=0.02)


def test_modernbert_sliding_window_layers_match_transformers(tmp_path):
    """The published pattern (every third layer global, the others within `local_attention // 2` tokens, with their
    own RoPE base) loads with transformers' numbers; windows and bases small enough here to change the outputs. A
    pattern litbert cannot express is refused, naming it."""
    ropes = {"full_attention": {"rope_type": "default", "rope_theta": 2_000.0},
             "sliding_attention": {"rope_type": "default", "rope_theta": 300.0}}
    config = modernbert_config(layer_types=None, num_hidden_layers=4, local_attention=6, rope_parameters=ropes)
    assert config.layer_types == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    reference = random_weights(transformers.ModernBertForMaskedLM(config))
    reference.save_pretrained(tmp_path)
    encoder = Encoder.from_pretrained(tmp_path).eval()
    head = MaskedLMHead.from_pretrained(tmp_path, encoder).eval()
    assert (encoder.config.global_every, encoder.config.local_window, encoder.config.rope_base,
            encoder.config.local_rope_base) == (3, 3, 2_000.0, 300.0)
    ids, mask, _ = inputs("modernbert", 0)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).logits
        assert max_diff_on_real_tokens(head(encoder(ids, mask)), expected, mask) < 1e-5
        # the windows matter: the same weights attending globally everywhere give other logits
        wide = Encoder(dataclasses.replace(encoder.config, local_window=0, global_every=1, local_rope_base=None))
        wide.load_state_dict(encoder.state_dict())
        assert max_diff_on_real_tokens(head(wide.eval()(ids, mask)), expected, mask) > 1e-2
        probs = encoder(ids, mask, return_attentions=True).attentions
    far = (torch.arange(17)[:, None] - torch.arange(17)[None, :]).abs() > 3
    assert probs[0][..., far].abs().max() > 0 and probs[1][..., far].abs().max() == 0 == probs[2][..., far].abs().max()
    # The published checkpoints' flat keys say the same.
    flat = flat_copy(tmp_path, global_attn_every_n_layers=3, global_rope_theta=2_000.0, local_rope_theta=300.0)
    assert Encoder.from_pretrained(flat).config == encoder.config
    odd = tmp_path / "odd"
    types = ["sliding_attention", "full_attention", "full_attention"]
    transformers.ModernBertModel(modernbert_config(layer_types=types)).save_pretrained(odd)
    with pytest.raises(ValueError, match=r"layer_types=\['sliding_attention', .* has no litbert equivalent"):
        Encoder.from_pretrained(odd)


def test_modernbert_preset_exports_to_transformers_and_back(tmp_path):
    """A litbert encoder of the ModernBERT shape (trained biases in its MLM transform) writes a ModernBertForMaskedLM
    that transformers loads with the same logits; a classifier with BERT's pooler (ModernBERT's has GELU and a norm)
    makes "auto" write litbert's own format and "transformers" refuse, saying why."""
    config = EncoderConfig.from_name("modernbert-base", num_layers=3, hidden_size=32, num_heads=4,
                                     intermediate_size=40, vocab_size=101, pad_token_id=0, rope_base=5_000.0,
                                     local_window=4, global_every=2, local_rope_base=500.0)
    encoder = random_weights(Encoder(config))
    head = random_weights(MaskedLMHead(config, encoder.embeddings.word))
    encoder.save_pretrained(tmp_path, head=head)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["ModernBertForMaskedLM"]
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert theirs.config.layer_types == ["full_attention", "sliding_attention", "full_attention"]
    assert theirs.config.classifier_bias and theirs.config.sliding_window == 4
    ids, mask, _ = inputs("modernbert", 0)
    with torch.no_grad():
        ours = head(encoder(ids, mask))
        assert max_diff_on_real_tokens(ours, theirs(input_ids=ids, attention_mask=mask).logits, mask) < 1e-5
        reloaded = Encoder.from_pretrained(tmp_path).eval()
        # new weights started uncut, which ModernBERT cannot state: its default cut-off comes back
        assert reloaded.config == dataclasses.replace(config, initializer_cutoff=2.0)
        again = MaskedLMHead.from_pretrained(tmp_path, reloaded).eval()(reloaded(ids, mask))
        assert max_diff_on_real_tokens(again, ours, mask) < 1e-6
    classifier = SequenceClassificationHead(32, num_labels=2)
    assert (encoder.save_pretrained(tmp_path / "auto", head=classifier) / "litbert.json").exists()
    with pytest.raises(ValueError, match=r"no transformers equivalent: pooler_activation='tanh' \(the ModernBert "
                                         r"classifier's is 'gelu'\); pooler_norm=False"):
        encoder.save_pretrained(tmp_path / "strict", head=classifier, format="transformers")


def modernbert_shaped(**overrides) -> EncoderConfig:
    """litbert's axes set as ModernBERT has them, from a BERT preset rather than `modernbert-base`: pre-norm
    LayerNorms without bias (none before the first attention), RoPE, GeGLU, no biases, no token types; every second
    layer global and the others within 3 tokens of the 17-token `inputs`, with their own RoPE base."""
    return EncoderConfig.from_name("bert-tiny", **{
        **dict(num_layers=4, hidden_size=32, num_heads=4, intermediate_size=40, vocab_size=101, type_vocab_size=0,
               position="rope", rope_base=5_000.0, local_rope_base=500.0, local_window=3, global_every=2,
               norm_placement="pre", norm="layernorm", first_attention_norm=False, norm_eps=1e-6,
               activation="geglu", bias=False), **overrides})


# head kind -> the transformers class its export is, and the head (ModernBERT's classifiers: GELU, a norm)
MODERNBERT_HEADS = {
    None: ("ModernBertModel", lambda config, encoder: None),
    "mlm": ("ModernBertForMaskedLM", lambda config, encoder: MaskedLMHead(config, encoder.embeddings.word)),
    "sequence_classification": ("ModernBertForSequenceClassification", lambda _, __: SequenceClassificationHead(
        32, 3, pooling="mean", pooler_activation="gelu", pooler_bias=False, pooler_norm=True, norm_eps=1e-6)),
    "token_classification": ("ModernBertForTokenClassification", lambda _, __: TokenClassificationHead(
        32, 4, transform_activation="gelu", transform_bias=False, transform_norm=True, norm_eps=1e-6)),
}


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("kind", list(MODERNBERT_HEADS))
def test_a_modernbert_shaped_model_exports_as_transformers_modernbert(tmp_path, kind, attention):
    """A model whose settings are ModernBERT's is saved by format "auto" as transformers' ModernBERT class of its
    head (the base model without one), which gives litbert's outputs in both of transformers' CPU attention
    implementations, windowed layers included; it loads back into litbert unchanged."""
    config = modernbert_shaped()
    encoder = random_weights(Encoder(config))
    architecture, build_head = MODERNBERT_HEADS[kind]
    head = build_head(config, encoder)
    head = random_weights(head) if head is not None else None
    encoder.save_pretrained(tmp_path, head=head)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == [architecture]
    assert not (tmp_path / "litbert.json").exists()
    theirs = getattr(transformers, architecture).from_pretrained(tmp_path, attn_implementation=attention).eval()
    assert theirs.config.layer_types == ["full_attention", "sliding_attention"] * 2
    assert theirs.config.sliding_window == 3
    # no special-token ids of ModernBERT's own vocabulary (50281, ...) in one of 101 tokens
    assert (theirs.config.cls_token_id, theirs.config.sep_token_id, theirs.config.bos_token_id) == (None,) * 3
    ids, mask, _ = inputs("modernbert", 0)
    with torch.no_grad():
        output = theirs(input_ids=ids, attention_mask=mask)
        hidden = encoder(ids, mask)
        if kind == "sequence_classification":
            torch.testing.assert_close(head(hidden, mask), output.logits, atol=1e-5, rtol=0)
        else:
            ours, expected = (hidden, output.last_hidden_state) if head is None else (head(hidden), output.logits)
            assert max_diff_on_real_tokens(ours, expected, mask) < 1e-5
    reloaded = Encoder.from_pretrained(tmp_path)
    # uncut: ModernBERT's default cut-off; and its dropout sites, where transformers' ModernBERT drops out
    assert reloaded.config == dataclasses.replace(config, initializer_cutoff=2.0, attention_output_rate="attention",
                                                  feed_forward_dropout="inner")
    pairs = [(reloaded, encoder)]
    if kind == "mlm":
        pairs.append((MaskedLMHead.from_pretrained(tmp_path, reloaded), head))
    elif kind is not None:
        pairs.append((type(head).from_pretrained(tmp_path), head))
        assert pairs[-1][0].options == head.options
    for loaded, saved in pairs:
        assert loaded.state_dict().keys() == saved.state_dict().keys()
        for name, value in saved.state_dict().items():
            torch.testing.assert_close(loaded.state_dict()[name], value, rtol=0, atol=0)


def test_transformers_format_names_what_differs_from_the_closest_family(tmp_path):
    """One setting from ModernBERT (the README job's RMSNorm before it took LayerNorm): "transformers" refuses,
    naming each differing setting with the family's value; "auto" saves litbert's format."""
    encoder = Encoder(modernbert_shaped(norm="rmsnorm", first_attention_norm=True))
    with pytest.raises(ValueError, match=r"no transformers equivalent: norm='rmsnorm' \(ModernBert has 'layernorm'\); "
                                         r"first_attention_norm=True \(ModernBert has False\) \(the closest family "
                                         r"is ModernBert\)\. Save it with format='litbert'"):
        encoder.save_pretrained(tmp_path / "strict", format="transformers")
    assert (encoder.save_pretrained(tmp_path / "auto") / "litbert.json").exists()


def test_a_modernbert_export_loads_with_transformers_and_sentence_transformers(tmp_path, minilm_tokenizer):
    """The README job's export in small: a ModernBERT-shaped encoder and MLM head saved with a tokenizer loads with
    `AutoModelForMaskedLM.from_pretrained` (litbert's logits) and embeds with sentence-transformers (the mean of
    litbert's hidden states over each sentence's tokens)."""
    from sentence_transformers import SentenceTransformer

    config = modernbert_shaped(vocab_size=len(minilm_tokenizer))
    encoder = random_weights(Encoder(config))
    head = random_weights(MaskedLMHead(config, encoder.embeddings.word))
    encoder.save_pretrained(tmp_path, head=head)
    minilm_tokenizer.save_pretrained(str(tmp_path))
    sentences = ["a quiet film that grows on you", "the plot never quite holds together, but the cast is a joy"]
    batch = minilm_tokenizer(sentences, padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert mask[0].sum() < mask[1].sum() and mask[1].sum() > 3 * 2 + 1  # padding, and longer than a window
    with torch.no_grad():
        hidden = encoder(ids, mask)
        theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
        assert max_diff_on_real_tokens(theirs(input_ids=ids, attention_mask=mask).logits, head(hidden), mask) < 1e-5
    weights = mask.unsqueeze(-1).float()
    expected = (hidden * weights).sum(dim=1) / weights.sum(dim=1)
    embedder = SentenceTransformer(str(tmp_path), device="cpu")
    torch.testing.assert_close(embedder.encode(sentences, convert_to_tensor=True), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(("encoder", "format", "limit"), [
    (dict(preset="bert-tiny", max_position_embeddings=64), "transformers", 64),
    (dict(preset="roberta-base", max_position_embeddings=66, pad_token_id=1), "transformers", 64),  # rows 2..65
    (dict(preset="distilbert-base", position="sinusoidal", max_position_embeddings=48), "transformers", 48),
    (dict(preset="bert-tiny", position="rope", max_position_embeddings=64), "litbert", 512),  # any length
])
def test_an_exports_tokenizer_truncates_to_the_positions_of_the_model(tmp_path, minilm_tokenizer, encoder, format,
                                                                      limit):
    """transformers' token-classification pipeline (and `truncation=True`) cuts inputs to the tokenizer's
    model_max_length. An export whose positions end before MiniLM's 512 saves the tokenizer with the model's limit
    (DistilBERT's sinusoidal table as transformers stores it), so that its pipeline tags a long text, cut to that
    length, as litbert tags it, instead of indexing past the position table; a RoPE encoder takes any length, and its
    tokenizer keeps 512."""
    from tasks.base import EncoderSpec
    from tasks.classification import TokenClassification

    labels = ["O", "B-X", "I-X"]
    spec = EncoderSpec(num_layers=2, hidden_size=32, num_heads=4, intermediate_size=48, hidden_dropout=0.0,
                       attention_dropout=0.0, **encoder)
    task = TokenClassification(label_names=labels, encoder=spec, vocab_size=len(minilm_tokenizer)).eval()
    export = task.export(tmp_path, minilm_tokenizer)
    assert (export / ("litbert.json" if format == "litbert" else "config.json")).exists()
    assert transformers.AutoTokenizer.from_pretrained(export).model_max_length == limit
    assert minilm_tokenizer.model_max_length == 512  # the run's tokenizer is left as it was
    if format == "transformers":
        text = " ".join(["a quiet film that grows on you"] * 20)  # 141 tokens
        tag = transformers.pipeline("token-classification", model=str(export))
        found = tag(text)  # cut to model_max_length by the pipeline itself
        batch = dict(minilm_tokenizer(text, truncation=True, max_length=limit, return_tensors="pt"))
        if not task.encoder.config.type_vocab_size:
            batch.pop("token_type_ids")
        with torch.no_grad():
            expected = task(batch)[0].softmax(-1)[1:-1]  # without [CLS] and [SEP]
        tags = expected.argmax(-1)
        kept = [(i, labels[t]) for i, t in enumerate(tags.tolist()) if labels[t] != "O"]
        assert [(item["index"] - 1, item["entity"]) for item in found] == kept
        assert [item["score"] for item in found] == pytest.approx([expected[i, tags[i]].item() for i, _ in kept],
                                                                  abs=1e-5)


@pytest.mark.parametrize(("encoder", "family"), [
    (dict(preset="bert-tiny"), "Bert"),
    (dict(preset="distilbert-base"), "DistilBert"),
    (dict(preset="modernbert-base", pad_token_id=0, local_window=0, global_every=1), "ModernBert"),
])
def test_an_exports_tokenizer_gives_token_types_only_to_a_model_that_reads_them(tmp_path, minilm_tokenizer, encoder,
                                                                                family):
    """An export without a token-type table (DistilBERT, ModernBERT) saves MiniLM's tokenizer so that it gives no
    token_type_ids: litbert's encoder refuses them, and so does transformers 4's DistilBERT, to which a pipeline
    passes them. Then the export's tokenizer feeds its model as it is, in litbert and in transformers."""
    from tasks.base import EncoderSpec
    from tasks.mlm import MaskedLM

    spec = EncoderSpec(**{**encoder, "num_layers": 2, "hidden_size": 32, "num_heads": 4, "intermediate_size": 48})
    task = MaskedLM(encoder=spec, vocab_size=len(minilm_tokenizer)).eval()
    export = task.export(tmp_path, minilm_tokenizer)
    assert json.loads((export / "config.json").read_text())["architectures"] == [f"{family}ForMaskedLM"]
    inputs = transformers.AutoTokenizer.from_pretrained(export)(["a quiet film", "loud"], ["that grows", "on you"],
                                                                 padding=True, return_tensors="pt")
    types = task.encoder.config.type_vocab_size > 0
    assert set(inputs) == {"input_ids", "attention_mask", *(["token_type_ids"] if types else [])}
    assert "token_type_ids" in minilm_tokenizer.model_input_names  # the run's tokenizer is left as it was
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        ours = task.head(Encoder.from_pretrained(export).eval()(**inputs))[real]
        theirs = transformers.AutoModelForMaskedLM.from_pretrained(export).eval()(**inputs).logits[real]
    torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-5)


def test_a_modernbert_student_keeps_layer_zero_first_and_each_layers_attention(tmp_path):
    """Layer 0 alone has no attention norm: a student may start from it or from another layer (which brings its
    norm), but may not move it later. Each kept layer attends as it did, globally or within its window; a choice of
    layers litbert's pattern cannot express is refused."""
    from encoders.checkpoints import select_layers

    transformers.ModernBertModel(modernbert_config(num_hidden_layers=4, layer_types=["full_attention"] * 4)) \
        .save_pretrained(tmp_path)
    checkpoint = load_checkpoint(tmp_path)
    for layers, first_norm in (("every_other", False), ([1, 3], True)):
        student = select_layers(checkpoint, layers)
        encoder = Encoder(student.config)
        encoder.load_state_dict(student.encoder_state, strict=True)
        assert student.config.first_attention_norm is first_norm
    with pytest.raises(ValueError, match=r"layers=\[2, 0\]: layer 0 .* has no attention norm"):
        select_layers(checkpoint, [2, 0])
    windowed = tmp_path / "windowed"  # layers global, local, local, global
    transformers.ModernBertModel(modernbert_config(num_hidden_layers=4, layer_types=None, local_attention=6)) \
        .save_pretrained(windowed)
    checkpoint = load_checkpoint(windowed)
    for layers, pattern in (("every_other", (3, 2)), ([0, 3], (0, 1)), ([0, 1, 3], (3, 2))):
        config = select_layers(checkpoint, layers).config
        assert (config.local_window, config.global_every) == pattern, layers
    with pytest.raises(ValueError, match=r"layers=\[1, 2\] .* 1 \(local\), 2 \(local\)"):
        select_layers(checkpoint, [1, 2])


def test_window_settings_apply_together_over_a_checkpoint_and_the_padding_row_stays(tmp_path):
    """local_window and global_every hold only together, so they are applied together over a checkpoint; the
    checkpoint's padding row is its own; a local RoPE base without local layers is refused, and the modernbert-base
    preset can be made all-global."""
    from tasks.base import EncoderSpec, build_encoder, over_checkpoint

    transformers.BertModel(hf_config("bert")).save_pretrained(tmp_path)
    checkpoint = load_checkpoint(tmp_path)
    config = over_checkpoint(EncoderSpec(local_window=4, global_every=2), checkpoint).config
    assert (config.local_window, config.global_every) == (4, 2)
    with pytest.raises(ValueError, match="pad_token_id=5: the padding row .* is 0"):
        over_checkpoint(EncoderSpec(pad_token_id=5), checkpoint)
    with pytest.raises(ValueError, match="local_rope_base=500.0 is the RoPE base of sliding-window layers"):
        build_encoder(EncoderSpec(preset="bert-tiny", position="rope", local_rope_base=500.0), None, 100)
    flat = build_encoder(EncoderSpec(preset="modernbert-base", num_layers=2, local_window=0, global_every=1), None, 100,
                         pad_token_id=0)
    assert flat.local_position is None and flat.config.is_global(1)


@pytest.mark.parametrize(("family", "_", "mlm"), FAMILIES)
def test_masked_lm_parity(tmp_path, family, _, mlm):
    reference = random_weights(getattr(transformers, mlm)(hf_config(family)))
    reference.save_pretrained(tmp_path)
    encoder = Encoder.from_pretrained(tmp_path).eval()
    head = MaskedLMHead.from_pretrained(tmp_path, encoder).eval()
    assert head.decoder.weight is encoder.embeddings.word.weight
    ids, mask, types = inputs(family, reference.config.pad_token_id)
    kwargs = {"token_type_ids": types} if types is not None else {}
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask, **kwargs).logits
        logits = head(encoder(ids, mask, types))
        masked = torch.zeros_like(mask, dtype=torch.bool)
        masked[0, [1, 4]] = masked[1, 9] = masked[2, 0] = True
        sparse = head(encoder(ids, mask, types), masked)
    assert max_diff_on_real_tokens(logits, expected, mask) < 1e-5
    assert sparse.shape == (4, 101)
    torch.testing.assert_close(sparse, expected[masked], atol=1e-5, rtol=0)


@pytest.mark.parametrize(("family", "mlm"), [("bert", "BertForMaskedLM"), ("roberta", "RobertaForMaskedLM"),
                                           ("distilbert", "DistilBertForMaskedLM")])
def test_the_mlm_heads_activation_is_the_familys(tmp_path, family, mlm):
    """With a ReLU encoder, BERT's and DistilBERT's LM heads apply ReLU too, RoBERTa's always GELU: each loads with
    transformers' logits, exports back to them, and the student of a RoBERTa teacher keeps its head's GELU."""
    reference = random_weights(getattr(transformers, mlm)(hf_config(family, **{
        "activation" if family == "distilbert" else "hidden_act": "relu"})))
    reference.save_pretrained(tmp_path / "in")
    encoder = Encoder.from_pretrained(tmp_path / "in").eval()
    head = MaskedLMHead.from_pretrained(tmp_path / "in", encoder).eval()
    assert head.mlm_activation == ("gelu" if family == "roberta" else "relu")
    ids, mask, types = inputs(family, reference.config.pad_token_id)
    kwargs = {"token_type_ids": types} if types is not None else {}
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask, **kwargs).logits
        assert max_diff_on_real_tokens(head(encoder(ids, mask, types)), expected, mask) < 1e-5
    encoder.save_pretrained(tmp_path / "out", head=head, format="transformers")
    back = getattr(transformers, mlm).from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        assert max_diff_on_real_tokens(back(input_ids=ids, attention_mask=mask, **kwargs).logits, expected, mask) < 1e-5
    if family == "roberta":
        from tasks.distillation import student_from_teacher

        assert student_from_teacher(encoder, head)[1].mlm_activation == "gelu"


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
@pytest.mark.parametrize("num_labels", [1, 3])
def test_sequence_classification_parity(tmp_path, family, num_labels):
    cls = {"bert": transformers.BertForSequenceClassification, "roberta": transformers.RobertaForSequenceClassification,
           "distilbert": transformers.DistilBertForSequenceClassification}[family]
    reference = random_weights(cls(hf_config(family, num_labels=num_labels)))
    reference.save_pretrained(tmp_path)
    encoder = Encoder.from_pretrained(tmp_path).eval()
    head = SequenceClassificationHead.from_pretrained(tmp_path).eval()
    assert head.num_labels == num_labels
    ids, mask, types = inputs(family, reference.config.pad_token_id)
    kwargs = {"token_type_ids": types} if types is not None else {}
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask, **kwargs).logits
        ours = head(encoder(ids, mask, types), mask)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0)


def test_token_classification_parity(tmp_path):
    reference = random_weights(transformers.BertForTokenClassification(hf_config("bert", num_labels=5)))
    reference.save_pretrained(tmp_path)
    encoder = Encoder.from_pretrained(tmp_path).eval()
    head = TokenClassificationHead.from_pretrained(tmp_path).eval()
    assert head.num_labels == 5
    ids, mask, types = inputs("bert", 0)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        ours = head(encoder(ids, mask, types))
    assert max_diff_on_real_tokens(ours, expected, mask) < 1e-5


@pytest.mark.parametrize(("model", "overrides", "dropout"), [
    (transformers.BertForSequenceClassification, {}, "dropout"),
    (transformers.BertForSequenceClassification, {"hidden_dropout_prob": 0.15}, "dropout"),
    (transformers.BertForTokenClassification, {"classifier_dropout": 0.3}, "dropout"),
    (transformers.RobertaForSequenceClassification, {"classifier_dropout": 0.0}, "classifier.dropout"),
    (transformers.DistilBertForSequenceClassification, {}, "dropout"),  # seq_classif_dropout, 0.2
    (transformers.DistilBertForTokenClassification, {"dropout": 0.05}, "dropout"),
    (transformers.ModernBertForSequenceClassification, {}, "drop"),  # classifier_dropout, 0
    (transformers.ModernBertForTokenClassification, {"classifier_dropout": 0.2}, "drop"),
])
def test_a_classifier_over_a_checkpoint_drops_out_at_its_familys_rate(tmp_path, model, overrides, dropout):
    """Unset, the dropout before a new classifier is the rate of transformers' dropout there (`dropout`, its
    module) in the classifier of the checkpoint; model.classifier_dropout overrides it."""
    from tasks.classification import SequenceClassification, TokenClassification

    family = model.__name__.split("For")[0].lower()
    config = (transformers.ModernBertConfig(**SIZES, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
                                            sep_token_id=2, **overrides)
              if family == "modernbert" else hf_config(family, **overrides))
    reference = model(config)
    reference.save_pretrained(tmp_path)
    expected = reference.get_submodule(dropout).p
    task = SequenceClassification if "Sequence" in model.__name__ else TokenClassification
    labels = {"num_labels": 2} if task is SequenceClassification else {"label_names": ["O", "B-X"]}
    assert task(pretrained=str(tmp_path), **labels).head.dropout.p == expected
    assert task(pretrained=str(tmp_path), classifier_dropout=0.4, **labels).head.dropout.p == 0.4


@pytest.mark.parametrize(("model", "checkpoint", "dropout"), [
    (transformers.BertForSequenceClassification, {}, "dropout"),
    (transformers.BertForTokenClassification, {}, "dropout"),
    (transformers.BertForSequenceClassification, {"classifier_dropout": 0.05}, "dropout"),  # a rate of its own
    (transformers.RobertaForSequenceClassification, {}, "classifier.dropout"),
    (transformers.ElectraForSequenceClassification, {}, "classifier.dropout"),
    (transformers.DistilBertForSequenceClassification, {}, "dropout"),  # seq_classif_dropout, its own
    (transformers.DistilBertForTokenClassification, {}, "dropout"),  # the encoder's `dropout`
    (transformers.ModernBertForSequenceClassification, {}, "drop"),  # classifier_dropout, its own
])
def test_a_hidden_dropout_set_over_a_checkpoint_moves_the_classifiers_where_transformers_does(
        tmp_path, model, checkpoint, dropout):
    """The same setting on both sides: `--model.encoder.hidden_dropout 0.25` over a checkpoint, and transformers'
    `from_pretrained(..., hidden_dropout_prob=0.25)` (DistilBERT's `dropout`, ModernBERT's embedding and MLP
    dropouts). Where the family's classifier takes the encoder's rate (BERT's, RoBERTa's and ELECTRA's without a
    classifier_dropout, DistilBERT's token classifier), it drops out at 0.25 on both sides, not at the checkpoint's
    0.1; a classifier rate of its own stays."""
    from tasks.base import EncoderSpec
    from tasks.classification import SequenceClassification, TokenClassification

    family = model.__name__.split("For")[0].lower()
    config = (transformers.ModernBertConfig(**SIZES, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
                                            sep_token_id=2)
              if family == "modernbert" else hf_config(family, **checkpoint))
    model(config).save_pretrained(tmp_path)
    setting = {"distilbert": {"dropout": 0.25}, "modernbert": {"embedding_dropout": 0.25, "mlp_dropout": 0.25}}
    expected = model.from_pretrained(tmp_path, **setting.get(family, {"hidden_dropout_prob": 0.25}))
    task = SequenceClassification if "Sequence" in model.__name__ else TokenClassification
    labels = {"num_labels": 2} if task is SequenceClassification else {"label_names": ["O", "B-X"]}
    ours = task(pretrained=str(tmp_path), encoder=EncoderSpec(hidden_dropout=0.25), **labels)
    assert ours.encoder.config.hidden_dropout == 0.25
    assert ours.head.dropout.p == expected.get_submodule(dropout).p
    assert task(pretrained=str(tmp_path), encoder=EncoderSpec(hidden_dropout=0.25), classifier_dropout=0.4,
                **labels).head.dropout.p == 0.4


@pytest.mark.parametrize(("model", "dropout"), [
    (transformers.BertForSequenceClassification, "dropout"),
    (transformers.BertForTokenClassification, "dropout"),
    (transformers.DistilBertForSequenceClassification, "dropout"),
    (transformers.ModernBertForTokenClassification, "drop"),
])
def test_an_export_keeps_its_classifiers_dropout(tmp_path, model, dropout):
    """A classifier trained at a rate of its own exports it where transformers' classifier reads it, so that
    fine-tuning the export again, in transformers or in litbert, drops out at that rate."""
    from tasks.classification import SequenceClassification, TokenClassification

    family = model.__name__.split("For")[0].lower()
    config = (transformers.ModernBertConfig(**SIZES, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
                                            sep_token_id=2)
              if family == "modernbert" else hf_config(family))
    model(config).save_pretrained(tmp_path / "base")
    task = SequenceClassification if "Sequence" in model.__name__ else TokenClassification
    labels = {"num_labels": 2} if task is SequenceClassification else {"label_names": ["O", "B-X"]}
    trained = task(pretrained=str(tmp_path / "base"), classifier_dropout=0.35, **labels)
    save_checkpoint(trained.encoder, tmp_path / "export", trained.head)
    assert model.from_pretrained(tmp_path / "export").get_submodule(dropout).p == 0.35
    assert task(pretrained=str(tmp_path / "export"), **labels).head.dropout.p == 0.35


def test_bin_checkpoint_loads_with_weights_only(tmp_path):
    reference = random_weights(transformers.BertModel(hf_config("bert")))
    reference.config.save_pretrained(tmp_path)
    torch.save(reference.state_dict(), tmp_path / "pytorch_model.bin")  # the pre-safetensors layout
    encoder = Encoder.from_pretrained(tmp_path).eval()
    ids, mask, types = inputs("bert", 0)
    with torch.no_grad():
        diff = max_diff_on_real_tokens(encoder(ids, mask, types), reference(ids, mask, types).last_hidden_state, mask)
    assert diff < 1e-5


def test_a_bin_checkpoint_with_tensorflows_layernorm_names_loads_as_transformers_loads_it(tmp_path):
    """The first BERT checkpoints (bert-base-uncased's pytorch_model.bin, and models fine-tuned from it) name the
    LayerNorm parameters gamma and beta; transformers renames them on load, and so does litbert."""
    reference = random_weights(transformers.BertForMaskedLM(hf_config("bert")))
    reference.config.save_pretrained(tmp_path)
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in reference.state_dict().items()}
    assert "bert.embeddings.LayerNorm.gamma" in state and "cls.predictions.transform.LayerNorm.beta" in state
    torch.save(state, tmp_path / "pytorch_model.bin")
    encoder = Encoder.from_pretrained(tmp_path).eval()
    head = MaskedLMHead.from_pretrained(tmp_path, encoder).eval()
    ids, mask, types = inputs("bert", 0)
    with torch.no_grad():
        expected = transformers.BertForMaskedLM.from_pretrained(tmp_path).eval()(ids, mask, types).logits
        torch.testing.assert_close(expected, reference(ids, mask, types).logits)
        assert max_diff_on_real_tokens(head(encoder(ids, mask, types)), expected, mask) < 1e-5


def test_sharded_checkpoint(tmp_path):
    reference = random_weights(transformers.BertModel(hf_config("bert", hidden_size=64, intermediate_size=128)))
    reference.save_pretrained(tmp_path, max_shard_size="50KB")
    assert (tmp_path / "model.safetensors.index.json").exists() and len(list(tmp_path.glob("*.safetensors"))) > 2
    encoder = Encoder.from_pretrained(tmp_path).eval()
    ids, mask, types = inputs("bert", 0)
    with torch.no_grad():
        diff = max_diff_on_real_tokens(encoder(ids, mask, types), reference(ids, mask, types).last_hidden_state, mask)
    assert diff < 1e-5


def test_a_save_into_a_folder_of_earlier_weights_replaces_them(tmp_path):
    """Saving over a sharded or .bin checkpoint (or over the other format) leaves nothing of the earlier model that
    litbert or transformers would read instead of the new one."""
    reference = random_weights(transformers.BertModel(hf_config("bert", hidden_size=64, intermediate_size=128)))
    reference.save_pretrained(tmp_path, max_shard_size="50KB")
    torch.save(reference.state_dict(), tmp_path / "pytorch_model.bin")
    shards = [p.name for p in tmp_path.glob("model-*.safetensors")]
    encoder = random_weights(Encoder.from_pretrained(tmp_path))  # another model than the folder's
    encoder.save_pretrained(tmp_path, format="transformers")
    assert shards and not [p for p in tmp_path.iterdir() if p.name in shards or "index" in p.name or ".bin" in p.name]
    ids, mask, types = inputs("bert", 0)
    with torch.no_grad():
        expected = encoder(ids, mask, types)
        ours = Encoder.from_pretrained(tmp_path).eval()(ids, mask, types)
        theirs = transformers.BertModel.from_pretrained(tmp_path).eval()(ids, mask, types).last_hidden_state
    assert max_diff_on_real_tokens(ours, expected, mask) < 1e-6
    assert max_diff_on_real_tokens(theirs, expected, mask) < 1e-5
    encoder.save_pretrained(tmp_path, format="litbert")
    assert not (tmp_path / "config.json").exists()
    with torch.no_grad():
        reloaded = Encoder.from_pretrained(tmp_path).eval()(ids, mask, types)
    assert max_diff_on_real_tokens(reloaded, expected, mask) < 1e-6
    encoder.save_pretrained(tmp_path, format="transformers")
    assert not (tmp_path / "litbert.json").exists()


def test_real_minilm_checkpoint():
    directory = MINILM
    reference = transformers.BertModel.from_pretrained(directory).eval()
    encoder = Encoder.from_pretrained(directory).eval()
    assert (encoder.config.num_layers, encoder.config.hidden_size, encoder.config.num_heads) == (6, 384, 12)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    batch = tokenizer(["The encoder reads both directions.", "A second, rather longer sentence with more words."],
                      ["short pair", "another pair of words here"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = reference(**batch).last_hidden_state
        ours = encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    assert max_diff_on_real_tokens(ours, expected, batch["attention_mask"]) < 1e-5


def test_round_trip_to_transformers(tmp_path):
    encoder = Encoder(EncoderConfig.from_name("bert-tiny", vocab_size=120, hidden_dropout=0.0)).eval()
    random_weights(encoder)
    head = MaskedLMHead(encoder.config, encoder.embeddings.word).eval()
    random_weights(head)
    encoder.save_pretrained(tmp_path, head=head, format="transformers")
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    ids, mask, types = inputs("bert", 0)
    ids = ids.clamp(max=119)
    base = transformers.AutoModel.from_pretrained(tmp_path).eval()
    mlm = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        hidden = encoder(ids, mask, types)
        assert max_diff_on_real_tokens(hidden, base(ids, mask, types).last_hidden_state, mask) < 1e-5
        assert max_diff_on_real_tokens(head(hidden), mlm(ids, mask, types).logits, mask) < 1e-5


@pytest.mark.parametrize(
    ("preset", "overrides", "auto_class"),
    [("roberta-base", dict(activation="gelu_tanh"), "AutoModelForSequenceClassification"),
     ("distilbert-base", dict(position="sinusoidal"), "AutoModelForTokenClassification"),
     ("bert-base", dict(activation="relu"), "AutoModelForSequenceClassification")],
)
def test_round_trip_families_with_heads(tmp_path, preset, overrides, auto_class):
    config = EncoderConfig.from_name(preset, num_layers=2, hidden_size=32, num_heads=4, intermediate_size=48,
                                     vocab_size=90, **overrides)
    encoder = random_weights(Encoder(config))
    if auto_class == "AutoModelForTokenClassification":
        head = random_weights(TokenClassificationHead(32, num_labels=4))
    else:
        activation = "relu" if preset.startswith("distil") else "tanh"
        head = random_weights(SequenceClassificationHead(32, num_labels=3, pooler_activation=activation))
    encoder.save_pretrained(tmp_path, head=head)
    assert (tmp_path / "config.json").exists() and not (tmp_path / "litbert.json").exists()
    reference = getattr(transformers, auto_class).from_pretrained(tmp_path).eval()
    family = preset.split("-")[0]
    ids, mask, types = inputs(family, config.pad_token_id)
    ids = ids.clamp(max=89)
    kwargs = {"token_type_ids": types} if types is not None else {}
    with torch.no_grad():
        hidden = encoder(ids, mask, types)
        ours = head(hidden, mask) if isinstance(head, SequenceClassificationHead) else head(hidden)
        expected = reference(input_ids=ids, attention_mask=mask, **kwargs).logits
    if ours.dim() == 3:
        assert max_diff_on_real_tokens(ours, expected, mask) < 1e-5
    else:
        torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0)
    # And back: the exported directory loads into litbert with the same outputs.
    reloaded = Encoder.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert max_diff_on_real_tokens(reloaded(ids, mask, types), hidden, mask) < 1e-6


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [(dict(position="rope"), "position='rope'"), (dict(norm_placement="pre"), "norm_placement='pre'"),
     (dict(norm="rmsnorm"), "norm='rmsnorm'"), (dict(activation="swiglu"), "activation='swiglu'"),
     (dict(bias=False), "bias=False"),
     (dict(position="sinusoidal", sinusoidal_scale=0.03, type_vocab_size=0),
      r"sinusoidal_scale=0.03 \(DistilBert has 1.0\)"),
     (dict(embedding_scale=11.3), r"embedding_scale=11.3 \(Bert has 1.0\)")],
)
def test_transformers_export_refuses_with_reason(tmp_path, overrides, reason):
    encoder = Encoder(EncoderConfig.from_name("bert-tiny", **overrides))
    with pytest.raises(ValueError, match=f"no transformers equivalent: .*{reason}"):
        encoder.save_pretrained(tmp_path, format="transformers")


@pytest.mark.parametrize("preset", ["modern", "bert-tiny", "sinusoidal-scaled"])
def test_litbert_format_round_trip(tmp_path, preset):
    # A scaled sinusoidal table has no transformers family (DistilBERT adds it unscaled): "auto" writes litbert's own.
    extra = dict(position="sinusoidal", sinusoidal_scale=0.03, embedding_scale=8.0) \
        if preset == "sinusoidal-scaled" else {}
    config = EncoderConfig.from_name(preset.replace("sinusoidal-scaled", "distilbert-base"), num_layers=2,
                                     hidden_size=64, num_heads=4, intermediate_size=96, vocab_size=150,
                                     hidden_dropout=0.0, attention_dropout=0.0, **extra)
    encoder = random_weights(Encoder(config))
    head = random_weights(MaskedLMHead(config, encoder.embeddings.word))
    path = encoder.save_pretrained(tmp_path, head=head, format="litbert" if preset == "bert-tiny" else "auto")
    if extra:
        loaded = Encoder.from_pretrained(path)
        assert (loaded.position.scale, loaded.embeddings.scale) == (0.03, 8.0)
    assert (path / "litbert.json").exists() and not (path / "config.json").exists()
    reloaded = Encoder.from_pretrained(path).eval()
    reloaded_head = MaskedLMHead.from_pretrained(path, reloaded).eval()
    assert reloaded.config == config
    ids = torch.randint(1, 150, (2, 11))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids), encoder(ids))
        torch.testing.assert_close(reloaded_head(reloaded(ids)), head(encoder(ids)))


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(HubError, match="bert-base-uncased does not exist .* or a Hugging Face Hub id"):
        Encoder.from_pretrained(tmp_path / "bert-base-uncased")
    with pytest.raises(CheckpointError, match="neither litbert.json"):
        Encoder.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model_type='gpt2' is not supported"):
        Encoder.from_pretrained(tmp_path)
    transformers.BertConfig(**SIZES, position_embedding_type="relative_key").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="position_embedding_type='relative_key' has no litbert equivalent"):
        Encoder.from_pretrained(tmp_path)
    for model in (transformers.BertModel, transformers.RobertaModel, transformers.ElectraModel):
        # transformers' decoder variant (BertLMHeadModel's config) attends to earlier tokens only
        model(model.config_class(**SIZES, is_decoder=True)).save_pretrained(tmp_path / model.__name__)
        with pytest.raises(ValueError, match="is_decoder=True has no litbert equivalent"):
            Encoder.from_pretrained(tmp_path / model.__name__)
    transformers.BertConfig(**SIZES, pad_token_id=None).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="pad_token_id=null; litbert needs a value"):
        Encoder.from_pretrained(tmp_path)
    transformers.BertConfig(**SIZES).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="No weights in"):
        Encoder.from_pretrained(tmp_path)
    random_weights(transformers.BertModel(transformers.BertConfig(**SIZES))).save_pretrained(tmp_path)
    encoder = Encoder.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="holds no mlm head"):
        MaskedLMHead.from_pretrained(tmp_path, encoder)


def test_checkpoints_that_do_not_fit_their_heads_or_config_are_refused_by_name(tmp_path, caplog):
    """An untied MLM decoder (litbert's head projects onto the word embeddings), a classifier weight without its
    bias, weights of another width than config.json's and a missing attention projection are each refused with a
    CheckpointError naming what is wrong; weights of no litbert head are named in a warning, as transformers does."""
    untied = random_weights(transformers.BertForMaskedLM(hf_config("bert", tie_word_embeddings=False)))
    untied.save_pretrained(tmp_path / "untied")
    encoder = Encoder.from_pretrained(tmp_path / "untied")
    with pytest.raises(CheckpointError, match="untied.*its MLM decoder is a matrix of its own"):
        MaskedLMHead.from_pretrained(tmp_path / "untied", encoder)
    tied = random_weights(transformers.BertForMaskedLM(hf_config("bert")))
    tied.save_pretrained(tmp_path / "tied")
    MaskedLMHead.from_pretrained(tmp_path / "tied", Encoder.from_pretrained(tmp_path / "tied"))

    classifier = random_weights(transformers.BertForSequenceClassification(hf_config("bert", num_labels=3)))
    state = {k: v for k, v in classifier.state_dict().items() if k != "classifier.bias"}
    classifier.config.architectures = ["BertForSequenceClassification"]
    classifier.config.save_pretrained(tmp_path / "no_bias")
    torch.save(state, tmp_path / "no_bias" / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"missing \['classifier.bias'\]"):
        SequenceClassificationHead.from_pretrained(tmp_path / "no_bias")

    qa = random_weights(transformers.BertForQuestionAnswering(hf_config("bert")))
    qa.save_pretrained(tmp_path / "qa")
    with caplog.at_level("WARNING"):
        Encoder.from_pretrained(tmp_path / "qa")
    assert "weights of no litbert head, not used: ['qa_outputs.bias', 'qa_outputs.weight']" in caplog.text
    # ModernBERT's question answering and RoBERTa's multiple choice name their layer `classifier`, as the classifiers
    # litbert loads do: their architecture says it is another task's, and it is named too.
    caplog.clear()
    for model in (transformers.ModernBertForQuestionAnswering(modernbert_config()),
                  transformers.RobertaForMultipleChoice(hf_config("roberta"))):
        random_weights(model).save_pretrained(tmp_path / "other_task")
        with caplog.at_level("WARNING"):
            Encoder.from_pretrained(tmp_path / "other_task")
        assert "not used: ['classifier.bias', 'classifier.weight'" in caplog.text
        caplog.clear()

    wide = tmp_path / "wide"
    tied.save_pretrained(wide)
    config = json.loads((wide / "config.json").read_text())
    (wide / "config.json").write_text(json.dumps({**config, "intermediate_size": 48}))
    with pytest.raises(CheckpointError, match=r"do not have the shapes its config describes.*\(40, 32\) where its "
                                              r"config gives \(48, 32\)"):
        Encoder.from_pretrained(wide)
    (wide / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 4}))
    with pytest.raises(CheckpointError, match=r"no 'encoder.layer.3.attention.self.query.weight' weights, which its "
                                              r"config \(4 layers\) calls for"):
        Encoder.from_pretrained(wide)


def test_a_stored_classifier_is_used_in_the_datas_label_order(tmp_path, caplog):
    """A fine-tuned classifier whose config names its labels (id2label) is reused by name, not by row: its rows are
    put in the data's label order; a classifier of other labels is replaced by a new one, with a warning; a
    teacher of the same labels in another order is refused (its soft targets would teach other labels)."""
    from tasks.classification import SequenceClassification, TokenClassification

    tags = ["O", "B-PER", "I-PER"]
    ner = random_weights(transformers.BertForTokenClassification(
        hf_config("bert", num_labels=3, id2label=dict(enumerate(tags)), label2id={t: i for i, t in enumerate(tags)})))
    ner.save_pretrained(tmp_path / "ner")
    stored = ner.classifier.weight.detach()
    reordered = TokenClassification(label_names=["B-PER", "I-PER", "O"], pretrained=str(tmp_path / "ner"))
    torch.testing.assert_close(reordered.head.classifier.weight, stored[[1, 2, 0]])
    same = TokenClassification(label_names=tags, pretrained=str(tmp_path / "ner"))
    torch.testing.assert_close(same.head.classifier.weight, stored)
    with caplog.at_level("WARNING"):
        other = TokenClassification(label_names=["O", "B-LOC", "I-LOC"], pretrained=str(tmp_path / "ner"))
    assert "predicts the labels ['O', 'B-PER', 'I-PER'], the data has ['O', 'B-LOC', 'I-LOC']" in caplog.text
    assert not torch.allclose(other.head.classifier.weight, stored)
    ids, mask, _ = inputs("bert", 0)
    with torch.no_grad():  # the reordered model predicts the same tags by name
        theirs = ner(ids, mask).logits.argmax(-1)
        ours = reordered.eval()({"input_ids": ids, "attention_mask": mask}).argmax(-1)
    assert [[tags[i] for i in row] for row in theirs.tolist()] == \
        [[reordered.label_names[i] for i in row] for row in ours.tolist()]

    sentiment = random_weights(transformers.BertForSequenceClassification(
        hf_config("bert", num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})))
    sentiment.save_pretrained(tmp_path / "teacher")
    with pytest.raises(ValueError, match=r"predicts the labels \['neg', 'pos'\] \(in this order\), the data has "
                                         r"\['pos', 'neg'\]"):
        SequenceClassification(num_labels=2, label_names=["pos", "neg"], pretrained=str(tmp_path / "teacher"),
                               teacher=str(tmp_path / "teacher"))


def test_a_stored_classifier_of_another_size_is_replaced_with_a_warning(tmp_path, caplog):
    """A classifier whose config names no labels, of another size than the data's (3 classes, or a regression's one
    score, against 2), is not used; the new one is announced, as transformers' size-mismatch warning announces it,
    and the pooler before it is kept."""
    from tasks.classification import SequenceClassification, TokenClassification

    for name, model, labels in (("three", transformers.BertForSequenceClassification, 3),
                                ("score", transformers.BertForSequenceClassification, 1),
                                ("tags", transformers.BertForTokenClassification, 5)):
        stored = random_weights(model(hf_config("bert", num_labels=labels)))
        stored.save_pretrained(tmp_path / name)
        caplog.clear()
        with caplog.at_level("WARNING"):
            task = (TokenClassification(label_names=["O", "B-X"], pretrained=str(tmp_path / name))
                    if model is transformers.BertForTokenClassification
                    else SequenceClassification(num_labels=2, pretrained=str(tmp_path / name)))
        assert task.head.classifier.weight.shape[0] == 2
        head = "token classifier" if model is transformers.BertForTokenClassification else "classifier"
        assert f"{tmp_path / name}: its {head} has {labels} output{'s' * (labels != 1)}, the data 2: a new {head} " \
               f"is trained" in caplog.text, name
        if model is transformers.BertForSequenceClassification:
            torch.testing.assert_close(task.head.pooler[0].weight, stored.bert.pooler.dense.weight)


def test_corrupt_or_unsafe_files_name_the_file(tmp_path):
    """Truncated safetensors and .bin files, a broken config.json and a .bin that would run code on unpickling
    each give one CheckpointError naming the file, never a library's bare message or an executed payload."""
    model = random_weights(transformers.BertModel(transformers.BertConfig(**SIZES)))
    model.save_pretrained(tmp_path / "good")
    weights = (tmp_path / "good" / "model.safetensors").read_bytes()
    config = (tmp_path / "good" / "config.json").read_text()

    def folder(name: str, files: dict[str, bytes | str]):
        path = tmp_path / name
        path.mkdir()
        for file, content in files.items():
            (path / file).write_bytes(content) if isinstance(content, bytes) else (path / file).write_text(content)
        return path

    truncated = folder("truncated", {"config.json": config, "model.safetensors": weights[: len(weights) // 2]})
    with pytest.raises(CheckpointError, match=r"truncated/model.safetensors is truncated or corrupt"):
        Encoder.from_pretrained(truncated)
    broken_json = folder("json", {"config.json": config[:40], "model.safetensors": weights})
    with pytest.raises(CheckpointError, match=r"json/config.json is not valid JSON"):
        Encoder.from_pretrained(broken_json)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    short_bin = folder("bin", {"config.json": config, "pytorch_model.bin": buffer.getvalue()[:5000]})
    with pytest.raises(CheckpointError, match=r"bin/pytorch_model.bin is truncated or corrupt"):
        Encoder.from_pretrained(short_bin)
    marker = tmp_path / "payload-ran"
    evil = folder("evil", {"config.json": config})
    torch.save({"weight": _Payload(str(marker))}, evil / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"evil/pytorch_model.bin holds objects other than tensors"):
        Encoder.from_pretrained(evil)
    assert not marker.exists()


class _Payload:
    """Unpickling this runs `open(path, "w")`: what a crafted checkpoint would do with a worse command."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_masked_lm_over_a_checkpoint_without_its_head_says_the_head_is_new(tmp_path, caplog):
    """Continued pretraining of a checkpoint saved without an MLM head (a BertModel, a sentence encoder) starts a new
    head, whose first losses are far above the checkpoint's own: the run says so, as transformers does; one with
    the head loads it without a word."""
    from tasks.mlm import MaskedLM

    transformers.BertModel(hf_config("bert")).save_pretrained(tmp_path / "base")
    transformers.BertForMaskedLM(hf_config("bert")).save_pretrained(tmp_path / "mlm")
    with caplog.at_level("WARNING"):
        MaskedLM(pretrained=str(tmp_path / "base"))
    assert f"{tmp_path / 'base'} holds no masked-LM head: a new one is trained" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        MaskedLM(pretrained=str(tmp_path / "mlm"))
    assert "masked-LM head" not in caplog.text
