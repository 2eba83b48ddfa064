"""The shipped NER config trains as transformers' run_ner recipe does (bench/ner.py, BENCHMARKS.md): at equal
settings a litbert step on CoNLL-2003 from the real MiniLM-L6 is the `Trainer`'s."""

from __future__ import annotations

import pytest
from runs import MINILM, recorded_steps, trainer_losses, trainer_rows


@pytest.mark.slow  # trains MiniLM-L6 twice through 12 steps: minutes on 2 CPU cores
def test_the_shipped_ner_config_trains_as_run_ner_does_step_for_step(shared_data, tmp_path, monkeypatch):
    """The shipped CoNLL-2003 config from MiniLM-L6 and transformers' `Trainer` with `AutoModelForTokenClassification`
    at the same settings (float32, dropout off on both sides, the same classifier initialisation, the same batches in
    the same order, each word's label on its first sub-token as run_ner puts it) reach the same loss at every step,
    within float32 rounding: the token loss over labelled sub-tokens, the learning-rate schedule (warmup from 0,
    rounded up), AdamW's epsilon and decay groups and the clipping at 1.0 all enter from the second step on."""
    import torch
    import transformers

    from tasks.run.cli import make_cli

    steps = 12
    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    cli = make_cli([
        "--config", "configs/ner/conll2003.yaml", "--model.pretrained", MINILM, "--seed_everything", "0",
        "--trainer.precision", "32-true", "--trainer.accelerator", "cpu", "--trainer.max_steps", str(steps),
        "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false",
        "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false",
        "--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0", "--export", "false",
        "--model.encoder.hidden_dropout", "0", "--model.encoder.attention_dropout", "0",
        "--model.classifier_dropout", "0"])
    assert float(cli.config.trainer.gradient_clip_val) == 1.0 and not cli.datamodule.group_by_length
    head = {k: v.clone() for k, v in cli.model.head.classifier.state_dict().items()}
    batches, losses = recorded_steps(cli)
    assert len(losses) == steps
    rows = trainer_rows(batches)  # the batches' sentences, in their order
    tokenizer = transformers.AutoTokenizer.from_pretrained(MINILM)
    transformers.set_seed(0)
    model = transformers.AutoModelForTokenClassification.from_pretrained(
        MINILM, num_labels=len(cli.datamodule.label_names), attn_implementation="sdpa", dtype=torch.float32,
        classifier_dropout=0.0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model.classifier.load_state_dict(head)
    reference = trainer_losses(cli, model, rows, transformers.DataCollatorForTokenClassification(tokenizer),
                               tmp_path / "trainer")
    assert len(reference) == steps
    assert losses == pytest.approx(reference, rel=1e-5, abs=1e-5), list(zip(losses, reference, strict=True))
    weights, initial = cli.model.head.classifier.weight.detach(), head["weight"]
    assert (weights - initial).abs().max() > 1e-5  # 12 steps of a warmup to 5e-5 moved it
    torch.testing.assert_close(weights, model.classifier.weight.detach(), rtol=1e-5, atol=1e-6)
