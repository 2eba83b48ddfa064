"""The torch.compile option (`tasks.run.compile.CompileEncoder`): over the batch shapes of a run's buckets the
training step's encoder compiles whole (fullgraph), to one static graph per shape, and trains to the weights an eager
run reaches; settings that would compile a graph per length, or lose CUDA graphs' outputs, are refused."""

import copy

import pytest
import torch
from runs import MINILM
from tiny import TINY_CONFIG, trainer
from torch.utils.data import DataLoader

from data.classification import ClassificationDataModule
from data.collate import PaddingCollator
from data.masking import MLMCollator
from tasks.base import EncoderSpec
from tasks.classification import SequenceClassification, TokenClassification
from tasks.mlm import MaskedLM
from tasks.run.compile import CompileEncoder, bucket_count

BUCKET = 16  # the data's pad_to_multiple_of (64 on CUDA)
# A MiniLM-like BERT, shrunk: learned positions, token types, post-norm, GELU; no dropout, float32.
ENCODER = {k: v for k, v in TINY_CONFIG.items() if k != "vocab_size"} | {"num_layers": 1}
CLS, SEP = 101, 102  # MiniLM's [CLS] and [SEP]
VOCAB = 2048  # MiniLM's first ids, its special tokens among them


def bucketed_examples(task: str, generator: torch.Generator) -> list[list[dict]]:
    """The batches of a run as its examples: lengths in two buckets of 16, then a short last batch."""
    batches = []
    plan = [(3, 16, 4), (17, 32, 4), (3, 16, 4), (17, 32, 4), (17, 32, 2)]
    for low, high, size in plan:
        examples = []
        for _ in range(size):
            length = int(torch.randint(low, high + 1, (), generator=generator))
            ids = [CLS, *torch.randint(1000, 2000, (length - 2,), generator=generator).tolist(), SEP]
            example = {"input_ids": ids}
            if task == "classification":  # a sentence pair
                example["token_type_ids"] = [0] * (length // 2) + [1] * (length - length // 2)
                example["labels"] = int(torch.randint(3, (), generator=generator))
            elif task == "ner":
                example["labels"] = [-100, *torch.randint(5, (length - 2,), generator=generator).tolist(), -100]
            examples.append(example)
        batches.append(examples)
    return batches


def run_batches(task: str, tokenizer) -> list[dict[str, torch.Tensor]]:
    """Batches as the run's collators make them: padded to the bucket, with `unpad_index` (and MLM's
    `masked_index`), whose sizes change with every batch."""
    generator = torch.Generator().manual_seed(0)
    if task == "mlm":
        collate = MLMCollator(tokenizer)
        collate.pad.pad_to_multiple_of = BUCKET
        collate.replacement_ids = collate.replacement_ids[collate.replacement_ids < VOCAB]  # the model's tokens
    else:
        collate = PaddingCollator(0, pad_to_multiple_of=BUCKET, max_length=64)
    return [collate(examples) for examples in bucketed_examples(task, generator)]


def build(task: str):
    spec = EncoderSpec(preset="bert-tiny", **ENCODER)
    if task == "classification":
        return SequenceClassification(num_labels=3, encoder=spec, vocab_size=VOCAB, classifier_dropout=0.0)
    if task == "ner":
        return TokenClassification(label_names=["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], encoder=spec,
                                   vocab_size=VOCAB, classifier_dropout=0.0)
    return MaskedLM(encoder=spec, vocab_size=VOCAB)


@pytest.mark.parametrize("task", ["classification", "mlm", pytest.param("ner", marks=pytest.mark.slow)])
def test_the_compiled_encoder_has_one_graph_a_bucket_and_trains_like_eager(task, minilm_tokenizer):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    batches = run_batches(task, minilm_tokenizer)
    shapes = {tuple(batch["input_ids"].shape) for batch in batches}
    assert len(shapes) == 3  # two lengths at the batch size, and the last batch
    if task == "mlm":
        assert len({batch["masked_index"].numel() for batch in batches}) > 1
    torch.manual_seed(0)
    model = build(task)
    reference = copy.deepcopy(model)
    keys = list(model.state_dict())
    # aot_eager traces forward and backward as inductor would, and runs them without generating code.
    trainer(len(batches), callbacks=[CompileEncoder(backend="aot_eager")]).fit(
        model, DataLoader(batches, batch_size=None))

    assert not torch._dynamo.utils.counters["graph_break"]  # fullgraph (the default) would have raised anyway
    # One static graph per batch shape, whatever the unpadded and masked token counts.
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == len(shapes)
    assert list(model.state_dict()) == keys  # compiled in place: checkpoints keep their parameter names
    trainer(len(batches)).fit(reference, DataLoader(batches, batch_size=None))
    for (name, a), (_, b) in zip(model.state_dict().items(), reference.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=name)


def test_static_shapes_need_buckets_and_cuda_graphs_refuse_accumulation(tmp_path, monkeypatch):
    path = tmp_path / "train.csv"
    path.write_text("text,label\nfine,1\nnot so fine,0\n")
    data = ClassificationDataModule(MINILM, train_files=str(path), val_files=str(path), max_length=128,
                                    cache_dir=str(tmp_path))
    model = SequenceClassification(num_labels=2, encoder=EncoderSpec(preset="bert-tiny", **ENCODER),
                                   vocab_size=data.vocab_size)
    # Off CUDA the data pads each batch to its own longest sequence: a graph per length.
    with pytest.raises(ValueError, match=r"data.pad_to_multiple_of 1.*up to 128 lengths.*--data.pad_to_multiple_of "
                                         r"64.*dynamic null"):
        trainer(1, callbacks=[CompileEncoder()]).fit(model, datamodule=data)
    # The ways on: torch's automatic dynamic shapes (a graph for the first length, a dynamic one after), or buckets.
    trainer(1, limit_val_batches=0, callbacks=[CompileEncoder(backend="eager", dynamic=None)]).fit(
        model, datamodule=data)
    data.pad_to_multiple_of = 64
    data.max_length = 130
    assert bucket_count(data) == (3, 64)  # 64, 128 and 130 (never past max_length)
    data.max_length = 128
    assert bucket_count(data) == (2, 64)
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 8)
    trainer(1, limit_val_batches=0, callbacks=[CompileEncoder(backend="eager")]).fit(model, datamodule=data)
    assert torch._dynamo.config.recompile_limit == 2 * 8  # two lengths, each in up to 8 batch shapes
    with pytest.raises(ValueError, match="accumulate_grad_batches=2 keeps gradients across batches"):
        trainer(1, accumulate_grad_batches=2, callbacks=[CompileEncoder(mode="reduce-overhead")]).fit(
            model, datamodule=data)
    with pytest.raises(ValueError, match="CompileEncoder.mode='fast' is not known"):
        CompileEncoder(mode="fast")
