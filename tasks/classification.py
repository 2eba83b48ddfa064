"""Fine-tuning: sequence classification (one class, or a set of labels: multi-label) and regression (GLUE,
sentiment), and token classification (NER).

Multi-label classification scores each label on its own: a sigmoid per logit and binary cross-entropy with the 0/1
targets, averaged over every (example, label) as transformers' `problem_type="multi_label_classification"` computes
it; a label is predicted where its probability exceeds `threshold`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from encoders import Kernels, SequenceClassificationHead, TokenClassificationHead
from encoders.heads import fine_tuning_head
from tasks.base import (
    EncoderSpec,
    EncoderTask,
    Optimization,
    build_encoder,
    example_rows,
    read_pretrained,
    sequence_lengths,
)
from tasks.distillation import Teacher, soft_target_loss
from tasks.metrics import EntityF1, classification_metrics, first_subtokens, is_chunk_tagging


def _given(**settings) -> dict:
    """The settings that are set: the others follow the checkpoint."""
    return {name: value for name, value in settings.items() if value is not None}


def _check_classifier_dropout(rate: float | None) -> None:
    """A rate as the encoder's dropouts take it: 1 would zero the classifier's every input in training, so that it
    learned its bias alone (the dropout module takes it, and refused a rate above 1 without naming the setting)."""
    if rate is not None and not 0.0 <= rate < 1.0:
        raise ValueError(f"model.classifier_dropout={rate} must lie in [0, 1) (0.1 is usual); unset, the pretrained "
                         f"checkpoint's rate.")


class SequenceClassification(EncoderTask):
    def __init__(
        self,
        num_labels: int = 2,
        metrics: Sequence[str] = ("accuracy",),
        validation_names: Sequence[str] = ("val",),
        label_names: Sequence[str] | None = None,
        multi_label: bool = False,
        threshold: float | None = None,
        encoder: EncoderSpec | None = None,
        pretrained: str | None = None,
        pretrained_layers: Sequence[int] | Literal["every_other"] | None = None,
        vocab_size: int | None = None,
        pad_token_id: int | None = None,
        pooling: Literal["cls", "mean"] | None = None,
        pooler_activation: Literal["tanh", "relu", "gelu"] | None = None,
        classifier_dropout: float | None = None,
        teacher: str | None = None,
        temperature: float | None = None,
        alpha_kd: float | None = None,
        kernels: Kernels | None = None,
        optimization: Optimization | None = None,
    ) -> None:
        """
        Args:
            num_labels: classes (or labels of a multi-label task), or 1 for regression (STS-B); linked from the
                datamodule.
            metrics: names from `tasks.metrics.METRICS` (`MULTILABEL_METRICS` for a multi-label task), the task's
                official ones; linked from the datamodule. The first is the checkpoint monitor's.
            validation_names: the log prefix of each validation set, e.g. ("val", "val_mismatched") for MNLI.
            label_names: the labels in id order, stored with the exported model; linked from the datamodule.
            multi_label: each example has a set of labels (sigmoid and binary cross-entropy per label), exported as
                transformers' `problem_type="multi_label_classification"`; linked from the datamodule.
            threshold: a multi-label task predicts the labels whose probability exceeds this (0.5 when unset); it
                decides the metrics and `train.py predict`'s labels, not the loss.
            encoder: preset and overrides for a new encoder (ignored when `pretrained` is given).
            pretrained: a litbert or transformers-format checkpoint directory to fine-tune, or a Hugging Face
                Hub id (`org/name[@revision]`, `encoders.hub`).
            pretrained_layers: keep only these layers of `pretrained`, in order: "every_other" makes DistilBERT's
                half-depth student of it (layers 0, 2, 4, ...), e.g. of a fine-tuned teacher; or a list of indices.
            vocab_size: the tokenizer's vocabulary size; linked from the datamodule.
            pad_token_id: the tokenizer's padding id; linked from the datamodule: a new encoder's padding row.
            pooling: "cls" (the pooler on the first token) or "mean" over real tokens; unset, the pretrained
                checkpoint's (a ModernBERT's `classifier_pooling`, a litbert classifier's own), else "cls".
            pooler_activation: the pooler's activation; unset, the pretrained checkpoint family's (BERT's and
                RoBERTa's tanh, DistilBERT's ReLU, ModernBERT's GELU) or the fine-tuned classifier's own, else tanh.
            classifier_dropout: dropout before the classifier; unset, the pretrained checkpoint's rate as
                transformers' classifier of it applies it (BERT's and RoBERTa's classifier_dropout, else
                hidden_dropout_prob, as model.encoder.hidden_dropout sets it; DistilBERT's seq_classif_dropout,
                0.2, or for tokens its dropout; ModernBERT's classifier_dropout, 0), else 0.1.
            teacher: a fine-tuned classifier checkpoint directory (or hub id) to distil from (logit KD): the loss
                becomes alpha * T^2 * KL(teacher || student at temperature T) + (1 - alpha) * cross-entropy with the
                labels; for regression alpha * MSE(student, teacher) + (1 - alpha) * MSE(student, labels).
            temperature: temperature T of the teacher's soft targets (2.0 when a teacher is given and this is unset);
                the same knob as `Distillation.temperature`.
            alpha_kd: weight alpha of the teacher's term (0.5 when unset), as `Distillation.alpha_kd`.
            kernels: how the encoder computes, not what (`encoders.Kernels`): when it skips padding tokens
                (`unpad_below`), FlexAttention for ALiBi and T5 (`flex_attention`), attention over the tokens
                packed without padding (`varlen`); chosen per run, never stored.
            optimization: AdamW and learning-rate schedule.
        """
        super().__init__(optimization)
        self.save_hyperparameters()
        _check_classifier_dropout(classifier_dropout)
        if teacher is None and (alpha_kd is not None or temperature is not None):
            raise ValueError("model.alpha_kd and model.temperature weigh and soften a teacher's logits, "
                             "but model.teacher is not set; set the teacher (a fine-tuned classifier folder) or remove "
                             "them.")
        alpha_kd = 0.5 if alpha_kd is None else alpha_kd
        temperature = 2.0 if temperature is None else temperature
        if not 0 <= alpha_kd <= 1 or temperature <= 0:
            raise ValueError(f"alpha_kd={alpha_kd} must be in [0, 1] and temperature={temperature} positive.")
        if label_names is not None and len(label_names) != num_labels:
            raise ValueError(f"{len(label_names)} label_names {list(label_names)} for num_labels={num_labels}.")
        if threshold is not None and not multi_label:
            raise ValueError(f"model.threshold={threshold} decides the labels of a multi-label task, but the data "
                             f"gives one class per example (multi_label false); remove it.")
        threshold = 0.5 if threshold is None else threshold
        if not 0 < threshold < 1:
            raise ValueError(f"model.threshold={threshold} must lie strictly between 0 and 1 (a probability).")
        if multi_label and num_labels < 2:
            raise ValueError(f"multi_label with num_labels={num_labels}: a single 0/1 label is binary "
                             f"classification; give it as one label column of two classes.")
        if multi_label and teacher is not None:
            raise ValueError(f"model.teacher={teacher}: distilling a multi-label classifier is not supported (the "
                             f"soft targets are a softmax over classes); remove the teacher.")
        self.label_names = list(label_names) if label_names is not None else None
        self.multi_label, self.threshold = multi_label, threshold
        self.regression = num_labels == 1 and not multi_label
        checkpoint = read_pretrained(pretrained, pretrained_layers)
        self.encoder = build_encoder(encoder, checkpoint, vocab_size, pad_token_id, kernels)
        self.head = fine_tuning_head(SequenceClassificationHead, checkpoint, self.encoder.config, num_labels,
                                     label_names=self.label_names, dropout=classifier_dropout,
                                     **_given(pooling=pooling, pooler_activation=pooler_activation))
        self.validation_names = list(validation_names)
        self.val_metrics = nn.ModuleList(
            classification_metrics(metrics, num_labels, multi_label).clone(prefix=f"{name}/")
            for name in self.validation_names
        )
        self.test_metrics = classification_metrics(metrics, num_labels, multi_label).clone(prefix="test/")
        # Example-weighted means, summed across ranks by torchmetrics: the exact dev-set loss under DDP too.
        self.val_losses = nn.ModuleList(MeanMetric() for _ in self.validation_names)
        self.test_loss = MeanMetric()
        self.monitor = (f"{self.validation_names[0]}/{metrics[0]}", "max")
        self.teacher = Teacher.classifier(teacher, kernels) if teacher is not None else None
        taught = self.teacher.label_names if self.teacher is not None else None
        if taught is not None and self.label_names is not None and taught != self.label_names:
            raise ValueError(f"The teacher {teacher} predicts the labels {taught} (in this order), the data has "
                             f"{self.label_names}: its soft targets would teach other labels. Distil from a teacher "
                             f"fine-tuned on these labels.")
        if self.teacher is not None and self.teacher.head.num_labels != num_labels:
            raise ValueError(f"The teacher {teacher} has {self.teacher.head.num_labels} outputs but this task has "
                             f"num_labels={num_labels}; distil from a teacher fine-tuned on the same task.")
        self.alpha_kd, self.temperature = alpha_kd, temperature

    def export_labels(self) -> Sequence[str] | None:
        return self.label_names

    def objective_settings(self) -> dict[str, Any]:
        settings = {"model.threshold": self.threshold} if self.multi_label else {}
        if self.teacher is not None:
            settings |= {"model.temperature": self.temperature, "model.alpha_kd": self.alpha_kd}
        return settings

    @property
    def problem_type(self) -> str | None:
        """transformers' `problem_type` of the exported classifier where the logits do not imply it: multi-label
        (regression is implied by a single output, single-label classification by several)."""
        return "multi_label_classification" if self.multi_label else None

    @property
    def first_token_only(self) -> bool:
        """BERT's pooler reads the first token only, so the encoder's last layer computes no other
        (`Encoder.forward`); mean pooling needs them all."""
        return self.head.pooling == "cls"

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mask = batch.get("attention_mask")
        hidden = self.encoder(batch["input_ids"], mask, batch.get("token_type_ids"),
                              first_token_only=self.first_token_only, unpad_index=batch.get("unpad_index"),
                              cu_seqlens=batch.get("cu_seqlens"))
        logits = self.head(hidden, mask)
        return logits.squeeze(-1) if self.regression else logits

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.regression:
            return F.mse_loss(logits.float(), labels.float())
        if self.multi_label:  # labels (B, num_labels) of 0/1
            return F.binary_cross_entropy_with_logits(logits.float(), labels.float())
        return F.cross_entropy(logits.float(), labels)

    def predictions(self, logits: torch.Tensor) -> torch.Tensor:
        """Scores (regression), class ids, or (multi-label) 0/1 per label: 1 where the probability exceeds the
        threshold, as torchmetrics thresholds probabilities."""
        if self.multi_label:
            return (logits.float().sigmoid() > self.threshold).long()
        return logits.float() if self.regression else logits.argmax(-1)

    def distillation_loss(self, logits: torch.Tensor, teacher_logits: torch.Tensor,
                          labels: torch.Tensor) -> dict[str, torch.Tensor]:
        """The logit-KD objective's terms and their weighted sum ("loss")."""
        if self.regression:
            soft = F.mse_loss(logits.float(), teacher_logits.squeeze(-1).float())
        else:
            soft = soft_target_loss(logits, teacher_logits, self.temperature)
        hard = self.loss(logits, labels)
        alpha = self.alpha_kd
        return {"loss": alpha * soft + (1 - alpha) * hard, "loss_teacher": soft, "loss_labels": hard}

    def training_flops(self, batch: dict[str, torch.Tensor]) -> int:
        """The encoder (forward and backward), plus the teacher's forward pass when distilling."""
        flops = self.encoder.flops(sequence_lengths(batch), training=True, first_token_only=self.first_token_only)
        if self.teacher is not None:
            flops += self.teacher.encoder.flops(sequence_lengths(batch))
        return flops

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        rows = example_rows(batch)
        logits, labels = self(batch)[rows], batch["labels"][rows]
        if self.teacher is None:
            loss = self.loss(logits, labels)
            self.log_training(loss, batch)
            return loss
        mask = batch.get("attention_mask")
        _, teacher_logits = self.teacher(batch["input_ids"], mask, batch.get("token_type_ids"), mask,
                                         unpad_index=batch.get("unpad_index"), cu_seqlens=batch.get("cu_seqlens"))
        losses = self.distillation_loss(logits, teacher_logits[rows], labels)
        self.log_training(losses["loss"], batch, **{k: v for k, v in losses.items() if k != "loss"})
        return losses["loss"]

    def _evaluate(self, batch: dict[str, torch.Tensor], metrics, loss: MeanMetric, prefix: str) -> None:
        rows = example_rows(batch)
        logits, labels = self(batch)[rows], batch["labels"][rows]
        loss.update(self.loss(logits, labels), weight=len(labels))
        metrics.update(self.predictions(logits), labels)
        self.log(f"{prefix}/loss", loss, add_dataloader_idx=False)
        self.log_dict(metrics, add_dataloader_idx=False)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._evaluate(batch, self.val_metrics[dataloader_idx], self.val_losses[dataloader_idx],
                       self.validation_names[dataloader_idx])

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, self.test_metrics, self.test_loss, "test")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        """The logits (for regression the scores) of each example: `predictions` turns them into class ids, the
        datamodule's `write_predictions` into labels and probabilities."""
        return self(batch).float()


class TokenClassification(EncoderTask):
    def __init__(
        self,
        label_names: Sequence[str] = ("O",),
        encoder: EncoderSpec | None = None,
        pretrained: str | None = None,
        pretrained_layers: Sequence[int] | Literal["every_other"] | None = None,
        vocab_size: int | None = None,
        pad_token_id: int | None = None,
        classifier_dropout: float | None = None,
        kernels: Kernels | None = None,
        optimization: Optimization | None = None,
    ) -> None:
        """
        Args:
            label_names: the tag set in id order (IOB2, e.g. O, B-PER, I-PER, ...); linked from the datamodule.
            encoder: preset and overrides for a new encoder (ignored when `pretrained` is given).
            pretrained: a litbert or transformers-format checkpoint directory to fine-tune, or a Hugging Face
                Hub id (`org/name[@revision]`, `encoders.hub`).
            pretrained_layers: keep only these layers of `pretrained`, in order: "every_other" makes DistilBERT's
                half-depth student of it (layers 0, 2, 4, ...), e.g. of a fine-tuned teacher; or a list of indices.
            vocab_size: the tokenizer's vocabulary size; linked from the datamodule.
            pad_token_id: the tokenizer's padding id; linked from the datamodule: a new encoder's padding row.
            classifier_dropout: dropout before the classifier; unset, the pretrained checkpoint's rate as
                transformers' classifier of it applies it (BERT's and RoBERTa's classifier_dropout, else
                hidden_dropout_prob, as model.encoder.hidden_dropout sets it; DistilBERT's seq_classif_dropout,
                0.2, or for tokens its dropout; ModernBERT's classifier_dropout, 0), else 0.1.
            kernels: how the encoder computes, not what (`encoders.Kernels`): when it skips padding tokens
                (`unpad_below`), FlexAttention for ALiBi and T5 (`flex_attention`), attention over the tokens
                packed without padding (`varlen`); chosen per run, never stored.
            optimization: AdamW and learning-rate schedule.
        """
        super().__init__(optimization)
        self.save_hyperparameters()
        _check_classifier_dropout(classifier_dropout)
        self.label_names = list(label_names)
        checkpoint = read_pretrained(pretrained, pretrained_layers)
        self.encoder = build_encoder(encoder, checkpoint, vocab_size, pad_token_id, kernels)
        self.head = fine_tuning_head(TokenClassificationHead, checkpoint, self.encoder.config, len(self.label_names),
                                     label_names=self.label_names, dropout=classifier_dropout)
        # Chunks (NER) score entity F1 over whole sentences; tags of single tokens (POS) score accuracy. Either
        # on each word's first sub-token.
        self.chunks = is_chunk_tagging(self.label_names)
        self.val_entities, self.test_entities = (
            EntityF1(self.label_names) if self.chunks else MulticlassAccuracy(len(self.label_names), average="micro")
            for _ in range(2))
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()  # per labelled token, exact across ranks
        self.monitor = ("val/f1" if self.chunks else "val/accuracy", "max")

    def export_labels(self) -> Sequence[str] | None:
        return self.label_names

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.encoder(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"),
                              unpad_index=batch.get("unpad_index"), cu_seqlens=batch.get("cu_seqlens"))
        return self.head(hidden)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits, labels = self(batch), batch["labels"].flatten()
        tokens = (labels != -100).sum()  # on the device
        # The mean over the labelled tokens, 0 where there are none (cross_entropy's mean would be NaN).
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels, ignore_index=-100, reduction="sum")
        loss = loss / tokens.clamp(min=1)
        self.log_training(loss, batch, tokens=tokens)
        return self.token_loss(loss, tokens)  # the step's mean over all its labelled tokens

    def _evaluate(self, batch: dict[str, torch.Tensor], metric: EntityF1 | MulticlassAccuracy, loss: MeanMetric,
                  prefix: str) -> None:
        logits = self(batch)
        labelled = int((batch["labels"] != -100).sum())
        if labelled:
            loss.update(F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten(), ignore_index=-100),
                        weight=labelled)
        self.log(f"{prefix}/loss", loss)
        predictions, labels = logits.argmax(-1), batch["labels"]
        scored = labels != -100
        if "word_ids" in batch:  # each word's first sub-token, whatever label_all_subtokens trained on
            scored &= first_subtokens(batch["word_ids"])
        if self.chunks:
            metric.update(predictions, labels, scored, batch.get("sentence"), batch.get("window"), batch.get("parts"))
        else:
            metric.update(predictions[scored], labels[scored])

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, self.val_entities, self.val_loss, "val")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        """The tag id predicted on each token (padding included): the datamodule's `write_predictions` reads each
        word's first sub-token."""
        return self(batch).argmax(-1)

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, self.test_entities, self.test_loss, "test")

    def on_validation_epoch_end(self) -> None:
        self._log_entities(self.val_entities, "val")

    def on_test_epoch_end(self) -> None:
        self._log_entities(self.test_entities, "test")

    def _log_entities(self, metric: EntityF1 | MulticlassAccuracy, prefix: str) -> None:
        values = metric.compute() if self.chunks else {"accuracy": metric.compute()}
        self.log_dict({f"{prefix}/{name}": value for name, value in values.items()}, prog_bar=True)
        metric.reset()
