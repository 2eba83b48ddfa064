"""A steady training step makes the host wait for the device nowhere: no `.item()`, `.tolist()`, `nonzero`,
boolean-mask indexing, `unique` or `equal` between the start of one batch and the start of the next, except at the
steps that log (every `log_every_n_steps`). Counted through `train.py` and the shipped configs, progress bar on, by
`bench.syncs.HostSyncs` (a TorchDispatchMode and a TorchFunctionMode on the CPU; the same code runs on CUDA, where
each such call stalls the host until the GPU drains, and rules out CUDA graphs)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from runs import MINILM, REPO, environment
from tiny import TINY, mlm_batches, tiny_config, trainer
from torch.utils.data import DataLoader

from bench.syncs import HostSyncs
from data import MLMCollator, load_tokenizer, train_tokenizer
from encoders import Encoder, EncoderConfig, MaskedLMHead, SequenceClassificationHead
from tasks.classification import SequenceClassification, TokenClassification
from tasks.distillation import Distillation
from tasks.mlm import MaskedLM

# WikiText-2's validation text as both splits: local, and quicker to tokenize than the configs' corpora.
WIKITEXT = ["--data.dataset", "wikitext", "--data.dataset_config", "wikitext-2-raw-v1", "--data.train_split",
            "validation", "--data.val_split", "validation"]
# The config's preset (its positions, norms, activation), narrow and shallow.
SMALL = ["--model.encoder.num_layers", "2", "--model.encoder.hidden_size", "64", "--model.encoder.num_heads", "2",
         "--model.encoder.intermediate_size", "128"]
RUNS = {
    "glue": ["--config", "configs/glue/stsb.yaml", "--model.pretrained", MINILM],
    # Two DDP ranks: the ranks agree on signals and save times over the hosts, and Lightning's own per-step SIGTERM
    # broadcast is left out while litbert holds the signals.
    "glue-ddp": ["--config", "configs/glue/stsb.yaml", "--model.pretrained", MINILM, "--trainer.accelerator", "cpu",
                 "--trainer.devices", "2", "--trainer.strategy", "ddp"],
    "ner": ["--config", "configs/ner/conll2003.yaml", "--model.pretrained", MINILM],
    "multilabel": ["--config", "configs/multilabel/conll-entity-types.yaml", "--model.pretrained", MINILM],
    # The README job's model, masking and data module.
    "mlm": ["--config", "configs/quickstart.yaml", "--trainer.max_time", "null", *WIKITEXT],
    # Two DDP ranks: the step's masked tokens counted on each and summed over them on the device; bounded by
    # trainer.max_time too, as the README job is, whose stop and wsd decay take rank 0's clock over the hosts.
    "mlm-ddp": ["--config", "configs/quickstart.yaml", *WIKITEXT,
                "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"],
    # RoBERTa's recipe: byte-level BPE, FULL-SENTENCES blocks, dynamic masking, the DDP strategy.
    "roberta": ["--config", "configs/pretrain/roberta-base.yaml", *SMALL, *WIKITEXT, "--data.num_workers", "0",
                "--data.max_length", "128", "--data.batch_size", "16", "--data.train_tokenizer.vocab_size", "2000"],
    # Logit distillation of SST-2: a half-depth student of a fine-tuned classifier, its soft targets and the labels.
    "kd": ["--config", "configs/distill/sst2.yaml", "--model.pretrained", "{classifier}", "--model.teacher",
           "{classifier}"],
    # DistilBERT's general distillation: soft targets, the student's MLM and the hidden-state cosine.
    "distillation": ["--config", "configs/distill/distilbert.yaml", "--model.teacher", "{mlm_teacher}", *WIKITEXT,
                     "--data.num_workers", "0", "--data.max_length", "128"],
}


@pytest.fixture(scope="module")
def teachers(tmp_path_factory) -> dict[str, str]:
    """Random 4-layer bert-tiny teachers with MiniLM's tokenizer: a classifier of two labels and a masked LM."""
    root = tmp_path_factory.mktemp("teachers")
    tokenizer = load_tokenizer(MINILM)
    config = EncoderConfig.from_name("bert-tiny", num_layers=4, vocab_size=len(tokenizer))
    heads = {"classifier": lambda _: SequenceClassificationHead(config.hidden_size, 2),
             "mlm_teacher": lambda encoder: MaskedLMHead(config, encoder.embeddings.word)}
    for name, head in heads.items():
        encoder = Encoder(config)
        encoder.save_pretrained(root / name, head=head(encoder))
        tokenizer.save_pretrained(str(root / name))
    return {name: str(root / name) for name in heads}


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
@pytest.mark.parametrize("task", sorted(RUNS))
def test_a_steady_training_step_has_no_host_sync(task, shared_data, teachers, tmp_path):
    output = tmp_path / "syncs.json"
    # Pretraining configs train their tokenizer into the run's folder: here, not into the repository.
    extra = ["--data.tokenizer", str(tmp_path / "tokenizer")] if task in ("mlm", "mlm-ddp", "roberta") else []
    done = subprocess.run(
        [sys.executable, "train.py", *(arg.format(**teachers) for arg in RUNS[task]), *extra,
         "--trainer.default_root_dir", str(tmp_path / "run"),
         "--trainer.max_steps", "14", "--trainer.log_every_n_steps", "5", "--trainer.limit_val_batches", "0",
         "--trainer.logger", "false", "--trainer.callbacks+=bench.syncs.HostSyncs",
         "--trainer.callbacks.output", str(output), "--trainer.callbacks.depth", "3"],
        cwd=REPO, env=environment(LITBERT_DATA=str(shared_data)),
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = 2 if task.endswith("-ddp") else 1
    for rank in range(ranks):  # each rank's steps: a broadcast's receivers may wait where its sender does not
        steps = json.loads(HostSyncs(output=str(output)).rank_output(rank).read_text())
        assert [s["step"] for s in steps] == list(range(14))
        assert [s["step"] for s in steps if s["logs"]] == [4, 9]
        # The last step (13) reads everything, as training ends.
        steady = {s["step"]: s["places"] for s in steps if s["step"] <= 12 and not s["logs"]}
        assert steady and not {step: places for step, places in steady.items() if places}, rank


def test_a_steady_distillation_step_has_no_host_sync(shared_data, tmp_path):
    """DistilBERT's three terms on the MLM collator's batches of padded rows, in process: the quick guard of the
    distillation losses, whose cosine term once picked the real tokens by a boolean mask (two syncs a step)."""
    text = (shared_data / "wikitext-2" / "wiki.valid.tokens").read_text().splitlines()
    lines = [line for line in text if len(line.split()) > 8][:96]
    tokenizer = train_tokenizer(lines, vocab_size=400)
    config = tiny_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    teacher = Encoder(config)
    teacher.save_pretrained(tmp_path / "teacher", head=MaskedLMHead(config, teacher.embeddings.word))
    examples = [{"input_ids": ids} for ids in tokenizer(lines, truncation=True, max_length=48)["input_ids"]]
    batches = DataLoader(examples, batch_size=8, collate_fn=MLMCollator(tokenizer, mlm_probability=0.3))
    syncs = HostSyncs(output=str(tmp_path / "syncs.json"))
    trainer(7, log_every_n_steps=3, callbacks=[syncs]).fit(Distillation(teacher=str(tmp_path / "teacher")), batches)
    assert [s["step"] for s in syncs.steps if s["logs"]] == [2, 5]
    # The last step (6) reads everything, as training ends.
    steady = {s["step"]: s["places"] for s in syncs.steps if s["step"] < 6 and not s["logs"]}
    assert len(steady) == 4 and not {step: places for step, places in steady.items() if places}


def test_an_accumulated_token_loss_counts_its_tokens_without_a_host_sync(shared_data, tmp_path):
    """MLM and NER over 2 accumulated batches: each batch's token count is kept on the device and the step's
    gradient divided by it there (`EncoderTask.token_loss`), in process, on the MLM collator's batches (whose
    masked positions the host knows) and on tagging batches (whose labelled tokens it does not)."""
    text = (shared_data / "wikitext-2" / "wiki.valid.tokens").read_text().splitlines()
    lines = [line for line in text if len(line.split()) > 8][:96]
    tokenizer = train_tokenizer(lines, vocab_size=400)
    examples = [{"input_ids": ids} for ids in tokenizer(lines, truncation=True, max_length=48)["input_ids"]]
    masked = DataLoader(examples, batch_size=8, collate_fn=MLMCollator(tokenizer, mlm_probability=0.3))
    generator = torch.Generator().manual_seed(0)
    tagged = []
    for i in range(14):
        ids = torch.randint(5, 64, (4, 12), generator=generator)
        tags = torch.where(ids < 20, 1, 0)
        tags[:, 11 - i % 5:] = -100
        tagged.append({"input_ids": ids, "labels": tags})  # no padding: no mask to read its tokens off
    runs = [(MaskedLM(encoder=TINY, vocab_size=len(tokenizer)), masked),
            (TokenClassification(label_names=["O", "B-X"], encoder=TINY, vocab_size=64),
             DataLoader(tagged, batch_size=None))]
    for model, batches in runs:
        syncs = HostSyncs(output=str(tmp_path / "syncs.json"))
        trainer(6, accumulate_grad_batches=2, log_every_n_steps=3, callbacks=[syncs]).fit(model, batches)
        assert [s["step"] for s in syncs.steps] == [step for step in range(6) for _ in range(2)]
        # The steps that log (2, 5) read their values; the last one everything, as training ends.
        steady = [s["places"] for s in syncs.steps if s["step"] not in (2, 5)]
        assert len(steady) == 8 and not [places for places in steady if places]


def test_a_step_clipped_by_value_has_no_host_sync(tmp_path):
    """Clipping by value (`--trainer.gradient_clip_algorithm value`) keeps the fused AdamW, which skips a non-finite
    step on the device: with Lightning's clipping it took the unfused AdamW, whose divergence check the host read
    every step (and, on the CPU, the unfused AdamW's step count of each parameter: dozens of syncs a step)."""
    generator = torch.Generator().manual_seed(0)
    batches = [{"input_ids": torch.randint(5, 64, (8, 12), generator=generator),
                "labels": torch.randint(0, 2, (8,), generator=generator)} for _ in range(7)]
    syncs = HostSyncs(output=str(tmp_path / "syncs.json"))
    trainer(7, log_every_n_steps=3, gradient_clip_val=1e-3, gradient_clip_algorithm="value", callbacks=[syncs]).fit(
        SequenceClassification(encoder=TINY, vocab_size=64), DataLoader(batches, batch_size=None))
    # The steps that log (2, 5) read their values; the last one (6) everything, as training ends.
    steady = {s["step"]: s["places"] for s in syncs.steps if s["step"] not in (2, 5, 6)}
    assert len(steady) == 4 and not {step: places for step, places in steady.items() if places}


class _ReadsTheHost(MaskedLM):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        batch["labels"].tolist()
        np.asarray(loss.detach())
        loss.detach().cpu()
        torch.tensor(batch_idx, device=loss.device)
        return loss


def test_the_cpu_count_includes_the_reads_and_writes_that_wait_for_a_gpu(tmp_path):
    """`.tolist()`, `.cpu()` and NumPy's conversions reach no ATen operation on the CPU, but on CUDA each copies from
    the device and waits for it, as a tensor made on the device from a Python number (`self.log` of a float makes
    one) copies to it and waits: the CPU count has them, so a test on the CPU catches them."""
    syncs = HostSyncs(output=str(tmp_path / "syncs.json"))
    trainer(3, callbacks=[syncs]).fit(_ReadsTheHost(encoder=TINY, vocab_size=64),
                                      DataLoader(mlm_batches(3), batch_size=None))
    reads = [{kind: count for place, count in step["places"].items()
              if (kind := place.split(":")[0]) in ("tolist", "__array__", "cpu", "tensor")} for step in syncs.steps[:2]]
    assert reads == [{"tolist": 1, "__array__": 1, "cpu": 1, "tensor": 1}] * 2
