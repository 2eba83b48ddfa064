"""DistilBERT knowledge distillation (Sanh et al., 2019).

A frozen teacher (always in eval mode, no gradients) and a student, by default half as deep and initialised
from every other teacher layer. On a masked-LM batch the loss is

    alpha_kd  * T^2 * KL(softmax(teacher / T) || softmax(student / T))   over masked positions (batch mean)
  + alpha_mlm * cross-entropy of the student against the masked labels
  + alpha_cos * mean(1 - cos(student_hidden, teacher_hidden))             over real tokens, last layer

with the paper's defaults alpha_kd=5 (its `alpha_ce`), alpha_mlm=2, alpha_cos=1, T=2. Deviations:
- the paper's student keeps layers (0, 2, 4, 7, 9, 11) of a 12-layer teacher; we take exactly every other layer
  (0, 2, 4, 6, 8, 10);
- the KL term covers the masked positions only. The paper's code (transformers' `examples/research_projects/
  distillation/distiller.py`) takes it over every real token unless `--restrict_ce_to_mask` is given, which its
  DistilBERT command does not; here both MLM heads project the masked positions alone (`masked_lm_loss`), so that a
  step costs a head over 15% of the tokens, not over all of them, twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import typing

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric

from encoders import Encoder, Kernels, MaskedLMHead, SequenceClassificationHead
from encoders.checkpoints import Checkpoint, load_checkpoint, select_layers
from encoders.config import check_scheme_settings
from tasks.base import (
    EncoderSpec,
    EncoderTask,
    Optimization,
    example_rows,
    sequence_lengths,
)
from tasks.mlm import masked_lm_loss, masked_positions, vocab_cross_entropy


def student_from_teacher(teacher: Encoder, teacher_head: MaskedLMHead) -> tuple[Encoder, MaskedLMHead]:
    """A student with half the teacher's layers: embeddings, positions, the final norm and the MLM head copied,
    block i copied from teacher block 2 * i."""
    config = dataclasses.replace(teacher.config, name=f"{teacher.config.name}-student")
    student = Encoder.from_pretrained(select_layers(Checkpoint(config, teacher.state_dict()), "every_other"),
                                      teacher.kernels)
    head = MaskedLMHead(student.config, student.embeddings.word, activation=teacher_head.mlm_activation)
    head.load_state_dict(teacher_head.state_dict())
    head.decoder.weight = student.embeddings.word.weight  # load_state_dict copied values; keep the tie
    return student, head


def soft_target_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 * KL(softmax(teacher / T) || softmax(student / T)), averaged over rows (Hinton et al., 2015); 0 over no
    rows (a batch in which masking chose no token)."""
    if not student_logits.shape[0]:
        return student_logits.float().sum() * 0.0
    soft_teacher = F.softmax(teacher_logits.float() / temperature, dim=-1)
    log_student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    return F.kl_div(log_student, soft_teacher, reduction="batchmean") * temperature**2


class Teacher(nn.Module):
    """A trained encoder and head that a student learns from: never any gradient, always in eval mode (no dropout).

    `train()` keeps it in eval mode, and `forward` puts it back there first: Lightning restores each submodule's mode
    by itself around its loops, which bypasses `train()`. Both distillation paths hold their teacher this way.
    """

    def __init__(self, encoder: Encoder, head: nn.Module) -> None:
        super().__init__()
        self.encoder, self.head = encoder, head
        self.requires_grad_(False)
        self.eval()
        self._digest = self._hash()
        self.label_names: list[str] | None = None  # a classifier's, where its checkpoint names them

    @classmethod
    def classifier(cls, directory: str, kernels: Kernels | None = None) -> Teacher:
        """A fine-tuned sequence classifier (logit distillation), computing with `kernels`."""
        checkpoint = load_checkpoint(directory)
        if "classifier.weight" not in checkpoint.head_states.get("sequence_classification", {}):
            # (a pretrained BERT's or ModernBERT's pooler alone is no classifier)
            raise ValueError(f"The teacher {directory} holds no sequence-classification head; logit distillation "
                             f"needs a fine-tuned classifier (e.g. the `model` folder a GLUE run exports).")
        if checkpoint.problem_type == "multi_label_classification":
            # its logits are a sigmoid's per label; a softmax over them (the soft targets) teaches other scores
            raise ValueError(f"The teacher {directory} is a multi-label classifier (problem_type "
                             f"multi_label_classification in its config), whose logits are scored per label, not as "
                             f"one class; logit distillation needs a teacher fine-tuned on the same single-label task.")
        teacher = cls(Encoder.from_pretrained(checkpoint, kernels),
                      SequenceClassificationHead.from_pretrained(checkpoint))
        teacher.label_names = checkpoint.label_names
        return teacher

    @classmethod
    def masked_lm(cls, directory: str, kernels: Kernels | None = None) -> Teacher:
        """An encoder with its MLM head (DistilBERT's general distillation), computing with `kernels`."""
        checkpoint = load_checkpoint(directory)  # read once for the encoder and its head
        if "mlm" not in checkpoint.head_states:  # (a BertModel, a sentence encoder, a fine-tuned classifier)
            raise ValueError(f"model.teacher={directory} holds no masked-LM head; general distillation needs the "
                             f"teacher's predictions over the vocabulary: give a litbert MaskedLM export or a "
                             f"transformers *ForMaskedLM checkpoint. A fine-tuned classifier teaches by logit "
                             f"distillation instead (configs/distill/kd.yaml over the task's config).")
        encoder = Encoder.from_pretrained(checkpoint, kernels)
        return cls(encoder, MaskedLMHead.from_pretrained(checkpoint, encoder))

    def train(self, mode: bool = True) -> Teacher:
        return super().train(False)

    def digest(self) -> str:
        """A hash of the teacher's weights as loaded, which training checkpoints keep in place of the weights
        themselves: taken at construction, before a strategy casts (bf16-true) or wraps them, so a resume, whose
        checkpoint is read before that, compares like with like."""
        return self._digest

    def _hash(self) -> str:
        hashed = hashlib.sha256()
        for name, tensor in self.state_dict().items():
            hashed.update(name.encode())
            hashed.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        return hashed.hexdigest()

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                token_type_ids: torch.Tensor | None, *head_inputs: torch.Tensor,
                document_ids: torch.Tensor | None = None, unpad_index: torch.Tensor | None = None,
                cu_seqlens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden states, the head's output on them and `head_inputs`: the masked positions for an MLM head, the
        attention mask for a classifier)."""
        self.eval()
        hidden = self.encoder(input_ids, attention_mask, token_type_ids, document_ids=document_ids,
                              unpad_index=unpad_index, cu_seqlens=cu_seqlens)
        return hidden, self.head(hidden, *head_inputs)


def distillation_losses(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, targets: torch.Tensor,
    student_hidden: torch.Tensor | None, teacher_hidden: torch.Tensor, attention_mask: torch.Tensor | None,
    temperature: float,
) -> dict[str, torch.Tensor]:
    """The three terms, unweighted. Logits are (N, V) at the N masked positions; hidden states (B, T, C). Without
    the student's hidden states (a student of another width) there is no cosine term."""
    kl = soft_target_loss(student_logits, teacher_logits, temperature)
    mlm = vocab_cross_entropy(student_logits, targets)
    if student_hidden is None:
        return {"kl": kl, "mlm": mlm}
    distance = 1 - F.cosine_similarity(student_hidden.float(), teacher_hidden.float(), dim=-1)  # (B, T)
    if attention_mask is None:
        return {"kl": kl, "mlm": mlm, "cosine": distance.mean()}
    # The mean over real tokens as a masked sum over their count: selecting them (`distance[mask.bool()]`) would
    # make the host wait for the device to learn how many there are, at every step (bench.syncs).
    real = attention_mask.bool()
    cosine = torch.where(real, distance, 0.0).sum() / real.sum()
    return {"kl": kl, "mlm": mlm, "cosine": cosine}


class Distillation(EncoderTask):
    encoder_setting = "model.student"

    def __init__(
        self,
        teacher: str,
        student: EncoderSpec | None = None,
        temperature: float = 2.0,
        alpha_kd: float = 5.0,
        alpha_mlm: float = 2.0,
        alpha_cos: float = 1.0,
        kernels: Kernels | None = None,
        optimization: Optimization | None = None,
    ) -> None:
        """
        Args:
            teacher: a litbert or transformers-format MLM checkpoint directory or hub id (`org/name[@revision]`);
                it must hold the MLM head.
            student: a fresh student: a preset and overrides, or overrides of the teacher's configuration when no preset
                is named (e.g. `num_layers: 3`); None initialises it from every other teacher layer.
            temperature: softmax temperature T of the soft targets.
            alpha_kd: weight of the soft-target KL term (multiplied by T^2); DistilBERT's `alpha_ce`.
            alpha_mlm: weight of the student's own MLM loss.
            alpha_cos: weight of the hidden-state cosine loss; 0 for a student of another hidden size than the
                teacher's (there is no such term then).
            kernels: how the student and the teacher compute, not what (`encoders.Kernels`): when they skip padding
                tokens (`unpad_below`), FlexAttention for ALiBi and T5 (`flex_attention`), attention over the tokens
                packed without padding (`varlen`); chosen per run, never stored.
            optimization: AdamW and learning-rate schedule.
        """
        super().__init__(optimization)
        self.save_hyperparameters()
        if temperature <= 0:
            raise ValueError(f"model.temperature={temperature} must be positive (DistilBERT: 2).")
        if min(alpha_kd, alpha_mlm, alpha_cos) < 0 or not (alpha_kd or alpha_mlm or alpha_cos):
            # A negative weight would push the student away from its teacher or its labels, and zero weights leave
            # nothing to learn.
            raise ValueError(f"model.alpha_kd={alpha_kd}, model.alpha_mlm={alpha_mlm} and model.alpha_cos="
                             f"{alpha_cos} weigh the loss terms: each must be >= 0, one at least positive "
                             f"(DistilBERT: 5, 2 and 1).")
        self.temperature, self.alphas = temperature, {"kl": alpha_kd, "mlm": alpha_mlm, "cosine": alpha_cos}
        self.teacher = Teacher.masked_lm(teacher, kernels)
        if student is None:
            self.encoder, self.head = student_from_teacher(self.teacher.encoder, self.teacher.head)
        else:
            teacher_config = self.teacher.encoder.config
            base = student.build() if student.preset else dataclasses.replace(teacher_config, **student.overrides())
            # The teacher's vocabulary and padding row: the data is tokenized with the teacher's tokenizer.
            if student.vocab_size not in (None, teacher_config.vocab_size):  # the KL term compares the two outputs
                raise ValueError(f"model.student.vocab_size={student.vocab_size}, but the student predicts over the "
                                 f"teacher's vocabulary of {teacher_config.vocab_size} tokens (its tokenizer's); "
                                 f"remove the override.")
            if student.pad_token_id not in (None, teacher_config.pad_token_id):
                raise ValueError(f"model.student.pad_token_id={student.pad_token_id}, but the teacher's tokenizer pads "
                                 f"with id {teacher_config.pad_token_id}; remove the override.")
            config = dataclasses.replace(base, vocab_size=teacher_config.vocab_size,
                                         pad_token_id=teacher_config.pad_token_id,
                                         name=base.name if student.preset else f"{base.name}-student")
            check_scheme_settings(config, student.overrides(), "model.student")
            if config.hidden_size != teacher_config.hidden_size and alpha_cos:
                raise ValueError(
                    f"The cosine loss compares hidden states, but the student's hidden_size={config.hidden_size} "
                    f"differs from the teacher's {teacher_config.hidden_size}; set model.alpha_cos 0 (or the student's "
                    f"hidden_size to the teacher's)."
                )
            self.encoder = Encoder(config, kernels)
            # A student of the teacher's own family keeps an activation that family fixes for its head (RoBERTa's
            # GELU); else, as a preset, its head takes the student's own.
            head_activation = self.teacher.head.mlm_activation
            activation = None if student.preset or head_activation == teacher_config.activation else head_activation
            self.head = MaskedLMHead(config, self.encoder.embeddings.word, activation=activation)
        self.val_loss = MeanMetric()

    def objective_settings(self) -> dict[str, typing.Any]:
        return {"model.temperature": self.temperature, "model.alpha_kd": self.alphas["kl"],
                "model.alpha_mlm": self.alphas["mlm"], "model.alpha_cos": self.alphas["cosine"]}

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        mask, types, documents = batch.get("attention_mask"), batch.get("token_type_ids"), batch.get("document_ids")
        masked = masked_positions(batch)
        layout = {"unpad_index": batch.get("unpad_index"), "cu_seqlens": batch.get("cu_seqlens")}
        teacher_hidden, teacher_logits = self.teacher(batch["input_ids"], mask, types, masked,
                                                      document_ids=documents, **layout)
        student_hidden = self.encoder(batch["input_ids"], mask, types, document_ids=documents, **layout)
        _, student_logits, targets = masked_lm_loss(self.head, student_hidden, batch["labels"], masked)
        rows = example_rows(batch)  # the masked positions are examples' already; the cosine term's tokens not
        # A student of another width (alpha_cos 0, checked at construction) has no hidden states to compare.
        compared = student_hidden[rows] if student_hidden.shape[-1] == teacher_hidden.shape[-1] else None
        losses = distillation_losses(student_logits, teacher_logits, targets, compared, teacher_hidden[rows],
                                     None if mask is None else mask[rows], self.temperature)
        losses["loss"] = sum(self.alphas[name] * losses[name] for name in losses)
        return losses

    def training_flops(self, batch: dict[str, torch.Tensor]) -> int:
        """The student's encoder and MLM head (forward and backward), plus the teacher's forward pass."""
        masked = masked_positions(batch).numel()
        student = super().training_flops(batch) + masked * self.head.flops_per_token(training=True)
        teacher = self.teacher.encoder.flops(sequence_lengths(batch)) + masked * self.teacher.head.flops_per_token()
        return student + teacher

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        losses = self(batch)
        self.log_training(losses["loss"], batch, **{f"loss_{k}": v for k, v in losses.items() if k != "loss"})
        return losses["loss"]

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.val_loss.update(self(batch)["mlm"], weight=masked_positions(batch).numel())

    def on_validation_epoch_end(self) -> None:
        loss = self.val_loss.compute()
        self.log_dict({"val/loss": loss, "val/perplexity": loss.exp()}, prog_bar=True)
        self.val_loss.reset()
