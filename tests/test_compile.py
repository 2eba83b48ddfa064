"""The torch.compile option: same results, unchanged checkpoint keys, no recompilation on every batch shape."""

import copy

import lightning as L
import torch
from tiny import TINY, mlm_batches
from torch.utils.data import DataLoader

from tasks.mlm import MaskedLM
from tasks.run.compile import CompileEncoder


def test_compiled_encoder_trains_like_eager_without_recompiling_per_length():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    model = MaskedLM(encoder=TINY, vocab_size=64)
    reference = copy.deepcopy(model)
    keys = list(model.state_dict())
    # Length-grouped fine-tuning or the short last block of an MLM corpus: several sequence lengths and batch sizes.
    batches = [*mlm_batches(2, seq=24), *mlm_batches(2, seq=16, batch=6), *mlm_batches(2, seq=20, batch=4),
               *mlm_batches(2, seq=12)]
    # "eager" runs the captured graphs without inductor's code generation: dynamo's tracing, guards and
    # recompilation are what is under test, and they do not depend on the backend.
    trainer = L.Trainer(max_steps=len(batches), accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[CompileEncoder(backend="eager")])
    trainer.fit(model, DataLoader(batches, batch_size=None))

    # One graph for the first shape, one dynamic graph after the first new shape; not one per length.
    assert 1 <= torch._dynamo.utils.counters["stats"]["unique_graphs"] <= 2
    assert list(model.state_dict()) == keys  # compiled in place: checkpoints keep their parameter names
    # The same updates as an eager run of the same batches (dropout is off in TINY).
    eager = L.Trainer(max_steps=len(batches), accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    eager.fit(reference, DataLoader(batches, batch_size=None))
    for (name, a), (_, b) in zip(model.state_dict().items(), reference.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=name)
