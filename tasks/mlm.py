"""Masked-language-model pretraining (BERT: Devlin et al., 2019; RoBERTa: Liu et al., 2019).

BERT and RoBERTa differ only by configuration: tokenizer, masking (static or dynamic), packing and preset.
There is no next-sentence prediction. The MLM head projects only the masked positions onto the vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from encoders import MaskedLMHead
from tasks.base import EncoderSpec, EncoderTask, Optimization, build_encoder, read_pretrained


def masked_lm_loss(
    head: MaskedLMHead, hidden: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean cross-entropy, logits (N, V), targets (N,)) over the N positions whose label is not -100."""
    masked = labels != -100
    logits = head(hidden, masked)
    targets = labels[masked]
    return F.cross_entropy(logits.float(), targets), logits, targets


class MaskedLM(EncoderTask):
    def __init__(
        self,
        encoder: EncoderSpec | None = None,
        pretrained: str | None = None,
        vocab_size: int | None = None,
        optimization: Optimization | None = None,
    ) -> None:
        """
        Args:
            encoder: preset and overrides for a new encoder (ignored when `pretrained` is given).
            pretrained: a litbert or transformers-format checkpoint directory to continue from.
            vocab_size: the tokenizer's vocabulary size; linked from the datamodule.
            optimization: AdamW and learning-rate schedule.
        """
        super().__init__(optimization)
        self.save_hyperparameters()
        checkpoint = read_pretrained(pretrained)
        self.encoder = build_encoder(encoder, checkpoint, vocab_size)
        if checkpoint is not None and "mlm" in checkpoint.head_states:
            self.head = MaskedLMHead.from_pretrained(checkpoint, self.encoder)
        else:  # a new model, or a checkpoint without an MLM head (e.g. BertModel): the head starts fresh
            self.head = MaskedLMHead(self.encoder.config, self.encoder.embeddings.word)
        self.val_loss = MeanMetric()
        self.val_accuracy = MeanMetric()

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = self.encoder(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"))
        return masked_lm_loss(self.head, hidden, batch["labels"])

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, logits, targets = self(batch)
        accuracy = (logits.argmax(-1) == targets).float().mean()
        self.log_training(loss, batch, accuracy=accuracy, perplexity=loss.detach().exp())
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        loss, logits, targets = self(batch)
        # Weighted by masked tokens, so the epoch value is the per-token loss whatever the batch composition.
        self.val_loss.update(loss, weight=targets.numel())
        self.val_accuracy.update((logits.argmax(-1) == targets).float().mean(), weight=targets.numel())

    def on_validation_epoch_end(self) -> None:
        loss = self.val_loss.compute()
        self.log_dict({"val/loss": loss, "val/accuracy": self.val_accuracy.compute(), "val/perplexity": loss.exp()},
                      prog_bar=True, sync_dist=False)  # torchmetrics already reduced across ranks
        self.val_loss.reset()
        self.val_accuracy.reset()
