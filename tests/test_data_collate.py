"""Batching: dynamic padding pads to the batch's longest example with the right value per column; the
length-grouped sampler cuts padding and still yields every index once; lengths bucketed to a multiple and last
batches filled up to the batch size (fewer shapes on a GPU) change no result."""

import pytest
import torch
import torch.nn.functional as F
from runs import MINILM
from torch.utils.data import RandomSampler

from data import DataError, LengthGroupedBatchSampler, PaddingCollator
from data.loading import Batches, ResumableLoader, epoch_sampler


def test_dynamic_padding_values_per_column():
    collate = PaddingCollator(pad_token_id=7)
    batch = collate([{"input_ids": [1, 2, 3], "labels": [4, -100, 5], "token_type_ids": [0, 1, 1]},
                     {"input_ids": [1, 2], "labels": [4, 5], "token_type_ids": [0, 0]}])
    assert batch["input_ids"].tolist() == [[1, 2, 3], [1, 2, 7]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[4, -100, 5], [4, 5, -100]]
    assert batch["token_type_ids"].tolist() == [[0, 1, 1], [0, 0, 0]]
    scores = collate([{"input_ids": [1], "labels": 2.5}, {"input_ids": [1], "labels": 0.0}])["labels"]
    assert scores.dtype == torch.float32
    assert collate([{"input_ids": [1], "labels": 2}])["labels"].dtype == torch.long


def test_tensor_examples_pad_as_lists_do_with_empty_ones_and_filler_rows():
    """Examples read as tensors (a dataset in torch format) pad to the same batch as lists, an empty sequence too;
    a short batch's filler rows, built as lists, join them."""
    from data.loading import Batch

    lists = [{"input_ids": [1, 2, 3], "token_type_ids": [0, 1, 1], "labels": 1},
             {"input_ids": [], "token_type_ids": [], "labels": 0},
             {"input_ids": [4], "token_type_ids": [0], "labels": 1}]
    tensors = [{column: torch.tensor(value, dtype=torch.int32) if isinstance(value, list) else value
                for column, value in example.items()} for example in lists]
    collate = PaddingCollator(pad_token_id=7, pad_to_multiple_of=4)
    for fill in (0, 2):
        from_lists, from_tensors = collate(Batch(lists, fill=fill)), collate(Batch(tensors, fill=fill))
        assert from_lists.keys() == from_tensors.keys()
        for column, value in from_lists.items():
            assert torch.equal(value, from_tensors[column]) if isinstance(value, torch.Tensor) else \
                value == from_tensors[column]
    assert from_lists["input_ids"].tolist() == [[1, 2, 3, 7], [7, 7, 7, 7], [4, 7, 7, 7], [7, 7, 7, 7], [7, 7, 7, 7]]
    assert from_lists["attention_mask"].tolist() == [[1, 1, 1, 0], [0] * 4, [1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]]
    assert from_lists["input_ids"].dtype == from_tensors["token_type_ids"].dtype == torch.long


def test_length_grouping_cuts_padding_and_keeps_every_index():
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, 200, (1000,), generator=generator).tolist()
    sampler = RandomSampler(range(1000), generator=generator)
    batches = list(LengthGroupedBatchSampler(sampler, batch_size=16, drop_last=False, lengths=lengths))
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert len(batches) == len(LengthGroupedBatchSampler(sampler, 16, False, lengths)) == 63

    def padding(batch_list):
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batch_list)

    random_batches = [list(range(i, min(i + 16, 1000))) for i in range(0, 1000, 16)]
    assert padding(batches) < padding(random_batches) / 5


def test_a_position_converts_to_another_batch_size_and_number_of_processes():
    """Batch k of every rank together are the examples k x size onward of the epoch's one permutation (the
    distributed sampler deals it out round-robin): a position saved by 2 ranks of batch 4 resumes one process's
    loader of batch 8, or 4 x 2 batches, at the very next examples; one that falls inside a batch is refused, and
    the epoch's end (past its 37th example: the shards were evened out with a repeat) stays its end."""
    examples = list(range(37))

    def loader(batch_size: int, processes: int = 1, rank: int = 0) -> ResumableLoader:
        distributed = {"num_replicas": processes, "rank": rank} if processes > 1 else None
        sampler = epoch_sampler(examples, shuffle=True, seed=3, distributed=distributed)
        sampler.set_epoch(1)
        return ResumableLoader(examples, batch_sampler=Batches(sampler, batch_size, drop_last=False),
                               collate_fn=list)

    order = [index for batch in loader(1) for index in batch]  # the epoch's permutation
    ranks = [loader(4, 2, rank) for rank in range(2)]
    iterators = [iter(rank) for rank in ranks]
    trained = [index for _ in range(3) for it in iterators for index in next(it)]  # 3 steps of 8 examples
    assert sorted(trained) == sorted(order[:24])
    saved = ranks[0].state_dict()
    assert saved == {"epoch": 1, "batches": 3, "batch_size": 4, "processes": 2}
    for batch_size in (8, 4, 2):
        resumed = loader(batch_size)
        resumed.load_state_dict(saved)
        assert resumed.resuming == {"epoch": 1, "batches": 24 // batch_size}
        assert [index for batch in resumed for index in batch] == order[24:]
    with pytest.raises(DataError, match=r"stopped after 3 batches of 4 on each of 2 process\(es\), 24 examples of "
                                        r"the epoch, which is no whole number of this run's batches of 5 on 1 "
                                        r"process\(es\) \(5 examples each\)"):
        loader(5).load_state_dict(saved)
    ended = loader(8)
    ended.load_state_dict({**saved, "batches": 5})  # 40 examples: the epoch's 37 and 3 repeated to even the shards
    assert ended.resuming["batches"] == len(ended.batch_sampler) == 5 and list(ended) == []


def test_the_collator_gives_host_built_indices_and_pads_to_a_multiple():
    collate = PaddingCollator(pad_token_id=0, pad_to_multiple_of=4, max_length=6)
    batch = collate([{"input_ids": [5, 6, 7]}, {"input_ids": [5, 6]}])
    assert batch["input_ids"].shape == (2, 4)  # 3 up to 4
    assert batch["unpad_index"].tolist() == [0, 1, 2, 4, 5]  # the real tokens among the 2 x 4
    assert collate([{"input_ids": [1] * 5}])["input_ids"].shape == (1, 6)  # 8, but never past max_length
    assert collate([{"input_ids": [1] * 7}])["input_ids"].shape == (1, 7)  # longer than max_length: as it is


@pytest.mark.parametrize("task", ["stsb", "ner"])
def test_bucketed_lengths_give_the_losses_of_unbucketed_ones(task, shared_data):
    """Batches padded to multiples of 64 (the CUDA default) against the same batches padded to their longest: equal
    losses in float32 without dropout, on the padded and the unpadded path alike (the multiple leaves more of a
    batch padding, so more batches skip it)."""
    from data import GLUEDataModule, TokenClassificationDataModule
    from tasks.classification import SequenceClassification, TokenClassification

    root = str(shared_data)
    if task == "stsb":
        data = {m: GLUEDataModule(task="stsb", tokenizer=MINILM, data_root=root, pad_to_multiple_of=m) for m in (1, 64)}
        model = SequenceClassification(num_labels=1, metrics=("pearson",), pretrained=MINILM)

        def loss_of(batch):
            return model.loss(model(batch), batch["labels"])
    else:
        data = {m: TokenClassificationDataModule(MINILM, dataset="conll2003", data_root=root, pad_to_multiple_of=m)
                for m in (1, 64)}
        model = TokenClassification(label_names=data[1].label_names, pretrained=MINILM)

        def loss_of(batch):
            return F.cross_entropy(model(batch).flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
    model.eval()
    for module in data.values():
        module.setup("fit")
    losses = {}
    for multiple, module in data.items():
        batches = iter(module.train_dataloader())
        with torch.no_grad():
            losses[multiple] = [loss_of(next(batches)) for _ in range(3)]
    shapes = [next(iter(data[m].train_dataloader()))["input_ids"].shape[1] for m in (1, 64)]
    assert shapes[1] % 64 == 0 and shapes[0] < shapes[1]
    torch.testing.assert_close(torch.stack(losses[64]), torch.stack(losses[1]), rtol=1e-5, atol=1e-6)


def test_a_short_batch_is_filled_with_rows_that_count_nowhere():
    from data.loading import Batch
    from tasks.base import example_rows, sequence_lengths

    collate = PaddingCollator(pad_token_id=7)
    examples = [{"input_ids": [1, 2, 3], "labels": 2.5, "word_ids": [0, 1, 1], "document_ids": [0, 0, 1]},
                {"input_ids": [1, 2], "labels": 0.5, "word_ids": [0, 0], "document_ids": [0, 0]}]
    plain, filled = collate(examples), collate(Batch(examples, epoch=3, fill=2))
    assert "num_examples" not in plain and filled["num_examples"] == 2
    assert filled["input_ids"].tolist() == [[1, 2, 3], [1, 2, 7], [7, 7, 7], [7, 7, 7]]
    # One attended padding token each: no row attends to nothing (NaN in attention), and in no real document.
    assert filled["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0]]
    assert filled["document_ids"][2:].tolist() == [[0, -1, -1]] * 2 and filled["word_ids"][2:].max() == -1
    assert filled["labels"].tolist() == [2.5, 0.5, -100.0, -100.0] and filled["labels"].dtype == torch.float32
    assert filled["unpad_index"].tolist() == [0, 1, 2, 3, 4, 6, 9]
    for column in ("input_ids", "labels", "attention_mask"):
        assert torch.equal(filled[column][example_rows(filled)], plain[column])
    assert sequence_lengths(filled) == sequence_lengths(plain) == [3, 2]


class Recorder:
    """What a fit saw: each training step's loss, gradients, rows and token counts, and each evaluation batch's
    rows; a Lightning callback."""

    def __new__(cls):
        import lightning as L

        from tasks.base import sequence_lengths

        class _Recorder(L.Callback):
            def __init__(self) -> None:
                self.losses, self.grads, self.lengths, self.rows, self.eval_rows = [], [], [], [], []

            def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
                self.losses.append(outputs["loss"].detach())
                self.lengths.append(sequence_lengths(batch))
                self.rows.append(len(batch["input_ids"]))

            def on_before_optimizer_step(self, trainer, module, optimizer):
                self.grads.append(torch.cat([p.grad.flatten() for p in module.parameters() if p.grad is not None]))

            def on_validation_batch_end(self, trainer, module, outputs, batch, batch_idx, dataloader_idx=0):
                self.eval_rows.append(len(batch["input_ids"]))

        return _Recorder()


def _rows(path, columns, count, skip=1):
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[skip:skip + count]
    header = [name for name, _ in columns]
    return [header] + [[row[i] for _, i in columns] for row in rows]


def _write_csv(path, rows):
    import csv

    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return str(path)


def _task_and_data(task, root, tmp_path, pad_last_batch):
    """A tiny model (no dropout) and a few training and validation examples in batches of 4 and 3, the last of each
    epoch short."""
    from tiny import TINY

    from data import ClassificationDataModule, MLMDataModule, TokenClassificationDataModule
    from encoders import Encoder, EncoderConfig, SequenceClassificationHead
    from tasks.classification import SequenceClassification, TokenClassification
    from tasks.mlm import MaskedLM

    sizes = dict(batch_size=4, eval_batch_size=3, cache_dir=str(tmp_path / "cache"), pad_last_batch=pad_last_batch)
    if task in ("classification", "regression"):
        if task == "classification":
            folder, columns, label = root / "glue" / "SST-2", [("sentence", 0), ("label", 1)], {}
        else:
            folder, columns, label = root / "glue" / "STS-B", [("s1", 7), ("s2", 8), ("score", 9)], \
                {"regression": True}
        files = {f"{split}_files": _write_csv(tmp_path / f"{split}.csv", _rows(folder / name, columns, count))
                 for split, name, count in (("train", "train.tsv", 10), ("val", "dev.tsv", 7))}
        text = [name for name, _ in columns[:-1]]
        metrics = ["accuracy", "f1", "matthews_corrcoef"] if task == "classification" else None
        data = ClassificationDataModule(MINILM, **files, text_columns=text, label_column=columns[-1][0],
                                        metrics=metrics, **label, **sizes)
        teacher = None
        if task == "classification":  # logit distillation: its soft-target term and the labels' cross-entropy
            teacher = tmp_path / "teacher"
            if not teacher.is_dir():
                encoder = Encoder(EncoderConfig.from_name("bert-tiny", vocab_size=data.vocab_size))
                encoder.save_pretrained(teacher, head=SequenceClassificationHead(encoder.config.hidden_size, 2))
        torch.manual_seed(0)
        model = SequenceClassification(num_labels=data.num_labels, metrics=data.metric_names, encoder=TINY,
                                       vocab_size=data.vocab_size, classifier_dropout=0.0,
                                       teacher=None if teacher is None else str(teacher))
    elif task == "ner":
        sentences = [s for s in (root / "conll2003" / "train.txt").read_text().split("\n\n") if "DOCSTART" not in s]
        files = {"train_files": sentences[:10], "val_files": sentences[10:17]}
        for name, chosen in files.items():
            (tmp_path / name).write_text("\n\n".join(chosen) + "\n")
            files[name] = str(tmp_path / name)
        data = TokenClassificationDataModule(MINILM, **files, **sizes)
        torch.manual_seed(0)
        model = TokenClassification(label_names=data.label_names, encoder=TINY, vocab_size=data.vocab_size,
                                    classifier_dropout=0.0)
    else:
        lines = [line for line in (root / "wikitext-2" / "wiki.valid.tokens").read_text().splitlines()
                 if len(line.split()) > 20]
        for name, chosen in (("train.txt", lines[:4]), ("val.txt", lines[10:13])):
            (tmp_path / name).write_text("\n".join(chosen) + "\n")
        data = MLMDataModule(MINILM, train_files=[str(tmp_path / "train.txt")], val_files=[str(tmp_path / "val.txt")],
                             packing="segments", max_length=48, **sizes)
        torch.manual_seed(0)
        model = MaskedLM(encoder=TINY, vocab_size=data.vocab_size, pad_token_id=data.pad_token_id)
    return model, data


# Two fits each; regression (the loss filler rows would change most visibly) runs by default, the others with -m slow.
@pytest.mark.parametrize("task", ["regression", *(pytest.param(task, marks=pytest.mark.slow)
                                                 for task in ("classification", "ner", "mlm"))])
def test_filling_the_last_batch_changes_no_loss_gradient_weight_or_metric(task, shared_data, tmp_path):
    """An epoch of training and validation with `pad_last_batch` and without: the same losses, gradients, token
    counts, final weights and validation metrics (float32, no dropout), while every filled batch has the full
    size. Classification distils from a teacher (cross-entropy and soft targets), regression is STS-B's MSE with
    Pearson and Spearman, NER's token cross-entropy with entity F1, MLM's dynamic masks with their accuracy."""
    from tiny import trainer

    runs = {}
    for fill in (False, True):
        model, data = _task_and_data(task, shared_data, tmp_path, fill)
        record = Recorder()
        fit = trainer(-1, max_epochs=1, callbacks=[record])
        fit.fit(model, datamodule=data)
        runs[fill] = record, model.state_dict(), {k: v for k, v in fit.callback_metrics.items() if "val" in k}
    (plain, plain_weights, plain_metrics), (filled, filled_weights, filled_metrics) = runs[False], runs[True]
    assert plain.rows[-1] < 4 and plain.eval_rows[-1] < 3  # the data makes short last batches
    assert set(filled.rows) == {4} and set(filled.eval_rows) == {3}
    torch.testing.assert_close(torch.stack(filled.losses), torch.stack(plain.losses), rtol=1e-5, atol=1e-6)
    for a, b in zip(filled.grads, plain.grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    assert filled.lengths == plain.lengths
    torch.testing.assert_close(filled_weights, plain_weights, rtol=1e-4, atol=1e-6)
    assert len(plain_metrics) >= 2 and filled_metrics.keys() == plain_metrics.keys()
    # Looser: Pearson divides by the spread of an untrained model's nearly constant predictions, which magnifies
    # the last-bit differences a 4-row matmul has from a 1-row one.
    torch.testing.assert_close(filled_metrics, plain_metrics, rtol=1e-3, atol=1e-5)
