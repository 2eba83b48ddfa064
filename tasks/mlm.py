"""Masked-language-model pretraining (BERT: Devlin et al., 2019; RoBERTa: Liu et al., 2019).

BERT and RoBERTa differ only by configuration: tokenizer, masking (static or dynamic), packing and preset.
There is no next-sentence prediction. The MLM head projects only the masked positions onto the vocabulary.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from encoders import Kernels, MaskedLMHead
from encoders.heads import new_head_stds
from tasks.base import EncoderSpec, EncoderTask, Optimization, build_encoder, read_pretrained

log = logging.getLogger(__name__)


class _VocabCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of (N, V) logits in any float dtype, computed in float32 a few rows at a time.

    `F.cross_entropy(logits.float(), targets)` makes several passes over an (N, V) float32 copy: the cast, the
    log-softmax, a zero-filled gradient, the log-softmax backward, the cast back. With V = 30,522 each pass leaves
    the cache. Here each block of rows is cast, reduced to its log-sum-exp and, in the backward pass, turned into
    softmax - one-hot while it is still in cache; only the logits themselves (in their own dtype) and N
    log-sum-exps are kept. bert-mini, 602 x 30,522 bf16 logits, forward + backward on one core: 105 ms against
    251 ms."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        rows = max(1, 2**17 // logits.shape[1])  # about 512 KiB of float32 per block
        dtype = torch.promote_types(logits.dtype, torch.float32)  # float32, or float64 for float64 logits
        lse = torch.empty(logits.shape[0], dtype=dtype, device=logits.device)
        for start in range(0, logits.shape[0], rows):
            torch.logsumexp(logits[start:start + rows].to(dtype), dim=-1, out=lse[start:start + rows])
        picked = logits.gather(1, targets[:, None]).squeeze(1).to(dtype)
        ctx.save_for_backward(logits, targets, lse)
        ctx.rows = rows
        return (lse - picked).mean()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits, targets, lse = ctx.saved_tensors
        rows, scale = ctx.rows, grad / logits.shape[0]
        out = torch.empty_like(logits)
        for start in range(0, logits.shape[0], rows):
            block = logits[start:start + rows].to(lse.dtype).sub_(lse[start:start + rows, None]).exp_()  # softmax
            block[torch.arange(block.shape[0], device=block.device), targets[start:start + rows]] -= 1.0
            out[start:start + rows] = block.mul_(scale)
        return out, None


def vocab_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over a large vocabulary, equal to `F.cross_entropy(logits.float(), targets)`; every
    target must be a valid class (no ignore index). Blocked on CPU (`_VocabCrossEntropy`); on GPUs and under
    torch.compile the fused library kernel is the fast one. With no targets (a batch in which masking chose no
    token, as a short last block can be) the mean is taken as 0, with zero gradients, where the library gives NaN:
    such a batch holds nothing to learn, and is no divergence."""
    if not targets.numel():
        return logits.float().sum() * 0.0
    if logits.device.type != "cpu" or torch.compiler.is_compiling() or not torch.is_grad_enabled():
        return F.cross_entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)), targets)
    return _VocabCrossEntropy.apply(logits, targets)


def masked_positions(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The flat positions among the batch's B * T of the N tokens whose label is not -100: the collator's
    `masked_index`, computed on the host (`data.masking.MLMCollator`), else read off the labels on the device, a
    selection whose size the host must wait for."""
    if "masked_index" in batch:
        return batch["masked_index"]
    return (batch["labels"].flatten() != -100).nonzero().squeeze(1)


def masked_lm_loss(
    head: MaskedLMHead, hidden: torch.Tensor, labels: torch.Tensor, masked_index: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean cross-entropy, logits (N, V), targets (N,)) over the N positions whose label is not -100, at
    `masked_index` when given (`masked_positions`)."""
    if masked_index is None:
        masked_index = masked_positions({"labels": labels})
    logits = head(hidden, masked_index)
    targets = labels.flatten().index_select(0, masked_index)
    return vocab_cross_entropy(logits, targets), logits, targets


class MaskedLM(EncoderTask):
    def __init__(
        self,
        encoder: EncoderSpec | None = None,
        pretrained: str | None = None,
        vocab_size: int | None = None,
        pad_token_id: int | None = None,
        kernels: Kernels | None = None,
        optimization: Optimization | None = None,
    ) -> None:
        """
        Args:
            encoder: preset and overrides for a new encoder (ignored when `pretrained` is given).
            pretrained: a litbert or transformers-format checkpoint directory, or a Hugging Face Hub id
                (`org/name[@revision]`), to continue from.
            vocab_size: the tokenizer's vocabulary size; linked from the datamodule.
            pad_token_id: the tokenizer's padding id; linked from the datamodule: a new encoder's padding row.
            kernels: how the encoder computes, not what (`encoders.Kernels`): when it skips padding tokens
                (`unpad_below`), FlexAttention for ALiBi and T5 (`flex_attention`), attention over the tokens
                packed without padding (`varlen`); chosen per run, never stored.
            optimization: AdamW and learning-rate schedule.
        """
        super().__init__(optimization)
        self.save_hyperparameters()
        checkpoint = read_pretrained(pretrained)
        self.encoder = build_encoder(encoder, checkpoint, vocab_size, pad_token_id, kernels)
        if checkpoint is not None and "mlm" in checkpoint.head_states:
            self.head = MaskedLMHead.from_pretrained(checkpoint, self.encoder)
        else:  # a new model, or a checkpoint without an MLM head (e.g. BertModel): the head starts fresh, with the
            # activation of the checkpoint family's head (RoBERTa's GELU), as the family starts it
            activation = checkpoint.head_options.get("mlm_activation") if checkpoint is not None else None
            dense_std = new_head_stds(checkpoint, self.encoder.config)["initializer_range"]
            if checkpoint is not None:  # a loss that starts high is the new head's, not a broken checkpoint's
                log.warning("%s holds no masked-LM head: a new one is trained", checkpoint.source)
            self.head = MaskedLMHead(self.encoder.config, self.encoder.embeddings.word, activation=activation,
                                     initializer_range=dense_std)
        self.val_loss = MeanMetric()
        self.val_accuracy = MeanMetric()

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = self.encoder(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"),
                              document_ids=batch.get("document_ids"), unpad_index=batch.get("unpad_index"),
                              cu_seqlens=batch.get("cu_seqlens"))
        return masked_lm_loss(self.head, hidden, batch["labels"], masked_positions(batch))

    def training_flops(self, batch: dict[str, torch.Tensor]) -> int:
        """The encoder, plus the MLM head on the masked tokens only (the unmasked ones are never projected)."""
        masked = masked_positions(batch).numel()
        return super().training_flops(batch) + masked * self.head.flops_per_token(training=True)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, logits, targets = self(batch)
        # A batch without a masked token (see `vocab_cross_entropy`) has no accuracy to log.
        scored = {"accuracy": (logits.argmax(-1) == targets).float().mean()} if targets.numel() else {}
        self.log_training(loss, batch, perplexity=True, tokens=targets.numel(), **scored)
        return self.token_loss(loss, targets.numel())  # the step's mean over all its masked tokens

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        loss, logits, targets = self(batch)
        if not targets.numel():
            return
        # Weighted by masked tokens, so the epoch value is the per-token loss whatever the batch composition.
        self.val_loss.update(loss, weight=targets.numel())
        self.val_accuracy.update((logits.argmax(-1) == targets).float().mean(), weight=targets.numel())

    def on_validation_epoch_end(self) -> None:
        loss = self.val_loss.compute()
        self.log_dict({"val/loss": loss, "val/accuracy": self.val_accuracy.compute(), "val/perplexity": loss.exp()},
                      prog_bar=True, sync_dist=False)  # torchmetrics already reduced across ranks
        self.val_loss.reset()
        self.val_accuracy.reset()
