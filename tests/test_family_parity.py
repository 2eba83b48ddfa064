"""Equal hyper-parameters give equal training from every family litbert fine-tunes: the shipped RTE config (a pair
task) from a BERT, RoBERTa, DistilBERT, ELECTRA or ModernBERT checkpoint folder, its tokenizer beside it, trains as
transformers' `Trainer` trains `AutoModelForSequenceClassification` of that folder: the same logits before the first
step, the same loss at every step. And each family's classifier, regressor and token classifier takes transformers'
AdamW step."""

from __future__ import annotations

import pytest
from runs import MINILM, SharedMasks, recorded_steps, trainer_losses, trainer_rows

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
# Where each family's sequence classifier keeps litbert's head: its pooler's dense layer (pooler.0; a ModernBERT's
# norm, pooler.2) and its classifier.
HEADS = {"bert": {"pooler.0": "bert.pooler.dense", "classifier": "classifier"},
         "roberta": {"pooler.0": "classifier.dense", "classifier": "classifier.out_proj"},
         "distilbert": {"pooler.0": "pre_classifier", "classifier": "classifier"},
         "electra": {"pooler.0": "classifier.dense", "classifier": "classifier.out_proj"},
         "modernbert": {"pooler.0": "head.dense", "pooler.2": "head.norm", "classifier": "classifier"}}


def roberta_tokenizer(folder, shared_data):
    """RoBERTa's tokenizer (byte-level BPE, `<s> A </s></s> B </s>`, no token types) over a vocabulary learned from
    RTE: transformers' `RobertaTokenizerFast` of that vocabulary, as a RoBERTa checkpoint folder holds it."""
    import transformers
    from tokenizers import ByteLevelBPETokenizer

    lines = (shared_data / "glue" / "RTE" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([text for line in lines for text in line.split("\t")[1:3]], vocab_size=1000,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    folder.mkdir(parents=True)
    bpe.save_model(str(folder))  # vocab.json and merges.txt, as RoBERTa's folders hold them
    tokenizer = transformers.RobertaTokenizerFast.from_pretrained(folder)
    assert len(tokenizer) == 1000  # (transformers 5's constructor takes vocab and merges, not their files)
    return tokenizer


def checkpoint(family, folder, shared_data):
    """A small randomly initialised pretraining model of `family`, saved with its tokenizer into `folder`."""
    import torch
    import transformers

    torch.manual_seed(0)
    if family == "roberta":
        tokenizer = roberta_tokenizer(folder / "bpe", shared_data)
    else:
        tokenizer = transformers.AutoTokenizer.from_pretrained(MINILM)  # a WordPiece with token types
    vocab = len(tokenizer)
    model = {
        "bert": lambda: transformers.BertModel(transformers.BertConfig(vocab_size=vocab, **SIZES)),  # a pooler
        "roberta": lambda: transformers.RobertaForMaskedLM(transformers.RobertaConfig(
            vocab_size=vocab, max_position_embeddings=130, type_vocab_size=1, **SIZES)),
        "distilbert": lambda: transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(
            vocab_size=vocab, dim=32, n_layers=2, n_heads=4, hidden_dim=64)),
        "electra": lambda: transformers.ElectraForPreTraining(transformers.ElectraConfig(
            vocab_size=vocab, embedding_size=32, **SIZES)),
        # a window of 16 tokens in every other layer: RTE's pairs are longer. Its published checkpoints have every
        # dropout at 0; these rates are a fine-tune's, each where ModernBERT drops out.
        "modernbert": lambda: transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(
            vocab_size=vocab, pad_token_id=0, global_attn_every_n_layers=2, local_attention=16, embedding_dropout=0.1,
            mlp_dropout=0.1, attention_dropout=0.2, classifier_dropout=0.3, **SIZES)),
    }[family]()
    with torch.no_grad():  # weights away from their initialisation: every norm and bias counts
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.02)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.slow  # trains five small checkpoints through train.py's CLI and the Trainer: about a minute
@pytest.mark.parametrize("family", list(HEADS))
def test_the_shipped_rte_config_trains_each_family_as_the_trainer_does(family, shared_data, tmp_path, monkeypatch):
    """At the checkpoint's own dropout rates (0.1 in the encoder; DistilBERT's 0.2 before its classifier, RoBERTa's
    and ELECTRA's before their dense layer too; ModernBERT's at its own sites: the attention output at its attention
    rate, the feed-forward before `Wo`, and 0.3 after its head) with the same masks on both sides, float32,
    the same classifier initialisation and the same batches in the same order, the pairs tokenized as run_glue
    tokenizes them. A dropout site one side has and the other lacks, or a head or position mapping that differs,
    changes the losses or the masks' sequence."""
    import copy

    import torch
    import transformers

    from tasks.run.cli import make_cli

    folder = checkpoint(family, tmp_path / family, shared_data)
    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    steps = 6
    cli = make_cli([
        "--config", "configs/glue/rte.yaml", "--model.pretrained", str(folder), "--seed_everything", "0",
        "--trainer.precision", "32-true", "--trainer.accelerator", "cpu", "--trainer.max_steps", str(steps),
        "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.logger", "false",
        "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false",
        "--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0", "--export", "false",
        # the padded path: the tensors the masks are drawn for have the Trainer's shapes
        "--model.kernels.unpad_below", "0"])
    initial = copy.deepcopy(cli.model).eval()
    head = {name: value.clone() for name, value in cli.model.head.state_dict().items()}
    masks = SharedMasks(0), SharedMasks(0)
    batches, losses = recorded_steps(cli, masks[0])
    assert len(losses) == steps

    # eager attention: its dropout on the probabilities is `F.dropout`, where SDPA's is inside the kernel
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        folder, num_labels=2, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():
        for ours, theirs in HEADS[family].items():
            for name, parameter in model.get_submodule(theirs).named_parameters():
                parameter.copy_(head[f"{ours}.{name}"])
    model.eval()
    first = {k: v for k, v in batches[0].items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        torch.testing.assert_close(initial(batches[0]), model(**first).logits, rtol=0, atol=1e-5)
    assert ("token_type_ids" in first) == (family in ("bert", "electra"))

    # The pairs are the family's tokenizer's, as run_glue makes them (truncation=True: longest_first): RoBERTa's
    # `<s> A </s></s> B </s>` without token types, BERT's `[CLS] A [SEP] B [SEP]` with them.
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    with (shared_data / "glue" / "RTE" / "train.tsv").open(encoding="utf-8") as handle:
        pairs = [line.rstrip("\n").split("\t")[1:3] for line in handle][1:]
    expected = tokenizer([a for a, _ in pairs], [b for _, b in pairs], truncation=True, max_length=128)
    encoded = cli.datamodule.datasets["train"]
    assert encoded["input_ids"] == expected["input_ids"] and cli.datamodule.truncated["train"] > 250
    if "token_type_ids" in expected:
        assert encoded["token_type_ids"] == expected["token_type_ids"]
    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "dropout", masks[1])
        reference = trainer_losses(cli, model.train(), trainer_rows(batches),
                                   transformers.DataCollatorWithPadding(tokenizer), tmp_path / "trainer")
    # the embeddings; per layer the attention probabilities, (not DistilBERT's) attention output and feed-forward;
    # the classifier's input (RoBERTa's and ELECTRA's dense layer's too)
    per_step = 1 + (2 if family == "distilbert" else 3) * SIZES["num_hidden_layers"] + 1 + (
        family in ("roberta", "electra"))
    assert masks[0].shapes == masks[1].shapes and len(masks[0].shapes) == steps * per_step
    assert losses == pytest.approx(reference, rel=1e-5, abs=1e-5), list(zip(losses, reference, strict=True))
    classifier = model.get_submodule(HEADS[family]["classifier"]).weight.detach()
    assert (cli.model.head.classifier.weight.detach() - head["classifier.weight"]).abs().max() > 1e-6
    torch.testing.assert_close(cli.model.head.classifier.weight.detach(), classifier, rtol=1e-5, atol=1e-6)


# Where each family's token classifier keeps litbert's head: its classifier (a ModernBERT's transform before it).
TOKEN_HEADS = {"modernbert": {"transform.0": "head.dense", "transform.2": "head.norm", "classifier": "classifier"}}
TASKS = {"classification": 3, "regression": 1, "tokens": 4}  # labels of each


def bare_checkpoint(family, folder):
    """A small random pretraining model of `family` with every dropout at 0, saved into `folder` (no tokenizer)."""
    import torch
    import transformers

    torch.manual_seed(0)
    off = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = {
        "bert": lambda: transformers.BertModel(transformers.BertConfig(vocab_size=99, **SIZES, **off)),
        "roberta": lambda: transformers.RobertaForMaskedLM(transformers.RobertaConfig(
            vocab_size=99, max_position_embeddings=40, type_vocab_size=1, **SIZES, **off)),
        "distilbert": lambda: transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(
            vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=64, dropout=0.0, attention_dropout=0.0,
            seq_classif_dropout=0.0)),
        "electra": lambda: transformers.ElectraForPreTraining(transformers.ElectraConfig(
            vocab_size=99, embedding_size=32, **SIZES, **off)),
        "modernbert": lambda: transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(
            vocab_size=99, pad_token_id=0, global_attn_every_n_layers=2, local_attention=8, **SIZES)),
    }[family]()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.02)
    model.save_pretrained(folder)
    return model.config.pad_token_id


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("family", list(HEADS))
def test_one_adamw_step_of_each_family_and_head_is_transformers(family, task, tmp_path):
    """Without dropout, from the same weights and on one right-padded batch, a litbert classifier's training step
    (its loss; then AdamW at the `Trainer`'s settings over litbert's parameter groups) is transformers'
    `AutoModelFor*` one: the same loss (cross-entropy; MSE for one label, as STS-B's regression; the mean over the
    labelled tokens, -100 and padding left out), the same weights after the step (compared in the export's names)."""
    import torch
    import transformers
    from safetensors.torch import load_file

    from tasks.base import Optimization, parameter_groups
    from tasks.classification import SequenceClassification, TokenClassification

    pad = bare_checkpoint(family, tmp_path / "checkpoint")
    labels, optimization = TASKS[task], Optimization(learning_rate=1e-3, weight_decay=0.01, eps=1e-8)
    if task == "tokens":
        ours = TokenClassification(label_names=[f"T{i}" for i in range(labels)],
                                   pretrained=str(tmp_path / "checkpoint"), optimization=optimization)
        model = transformers.AutoModelForTokenClassification
        heads = TOKEN_HEADS.get(family, {"classifier": "classifier"})
    else:
        ours = SequenceClassification(num_labels=labels, metrics=("pearson",) if labels == 1 else ("accuracy",),
                                      pretrained=str(tmp_path / "checkpoint"), optimization=optimization)
        model, heads = transformers.AutoModelForSequenceClassification, HEADS[family]
    theirs = model.from_pretrained(tmp_path / "checkpoint", num_labels=labels, attn_implementation="eager",
                                   dtype=torch.float32)
    head = ours.head.state_dict()
    with torch.no_grad():
        for mine, name in heads.items():
            for parameter_name, parameter in theirs.get_submodule(name).named_parameters():
                parameter.copy_(head[f"{mine}.{parameter_name}"])
    generator = torch.Generator().manual_seed(1)
    mask = (torch.arange(12) < torch.tensor([12, 9, 5, 11])[:, None]).long()
    batch = {"input_ids": torch.randint(5, 99, (4, 12), generator=generator).masked_fill(mask == 0, pad),
             "attention_mask": mask}
    if family in ("bert", "electra"):
        batch["token_type_ids"] = (torch.arange(12) >= 4).long() * mask
    if task == "tokens":
        batch["labels"] = torch.randint(0, labels, (4, 12), generator=generator).masked_fill(mask == 0, -100)
        batch["labels"][:, 0] = batch["labels"][1, 3] = -100  # [CLS] and a continuation sub-token
    else:
        batch["labels"] = torch.rand(4, generator=generator) * 5 if labels == 1 else torch.randint(0, labels, (4,))
    ours.log_training = lambda *args, **kwargs: None  # no Trainer to log to
    ours.train(), theirs.train()
    loss = ours.training_step(batch, 0)
    expected = theirs(**batch).loss
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6, abs=1e-6)
    decayed = set(transformers.Trainer.get_decay_parameter_names(None, theirs))
    steps = [torch.optim.AdamW(parameter_groups(ours, 0.01), lr=1e-3, eps=1e-8),
             torch.optim.AdamW([{"params": [p for n, p in theirs.named_parameters() if n in decayed],
                                 "weight_decay": 0.01},
                                {"params": [p for n, p in theirs.named_parameters() if n not in decayed],
                                 "weight_decay": 0.0}], lr=1e-3, eps=1e-8)]
    loss.backward(), expected.backward()
    for optimizer in steps:
        optimizer.step()
    ours.encoder.save_pretrained(tmp_path / "export", head=ours.head, format="transformers")
    state, exported = theirs.state_dict(), load_file(tmp_path / "export" / "model.safetensors")
    # An ELECTRA without its GELU pooler exports as the BERT it then is: the same weights under BERT's prefix.
    exported = {(f"{theirs.base_model_prefix}.{k.split('.', 1)[1]}" if k.startswith("bert.") else k): v
                for k, v in exported.items()}
    assert exported.keys() <= state.keys() and len(exported) >= len(list(theirs.parameters()))
    # (AdamW's first step moves each weight by about the learning rate, 1e-3)
    assert max((state[name] - value).abs().max().item() for name, value in exported.items()) < 1e-5
