"""Packing with attention kept inside each document (`data.document_mask`): the blocks carry each token's document,
and the encoder then encodes every document of a packed row as it encodes that document alone (for the relative
position schemes, whose scores depend on distances only)."""

import pyarrow as pa
import pytest
import torch
from runs import MINILM
from tiny import tiny_config

import train
from data import DataError, MLMDataModule, block_documents, pack_blocks
from encoders import POSITIONS, Encoder, Kernels
from encoders.positions import PositionScheme


def test_block_documents_number_each_blocks_documents_from_zero():
    documents = pa.array([[10, 11, 12], [20], [30, 31, 32, 33, 34], [40, 41]], pa.list_(pa.int32()))
    blocks = pack_blocks(documents, 6, [1], [2], separator=3).to_pylist()
    ids = block_documents(documents, 6, [1], [2]).to_pylist()
    assert blocks == [[1, 10, 11, 12, 3, 2], [1, 20, 3, 30, 31, 2], [1, 32, 33, 34, 3, 2], [1, 40, 41, 2]]
    # The separator closes its document; [CLS] joins the first document of the block, [SEP] the last.
    assert ids == [[0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0]]
    assert [len(row) for row in ids] == [len(row) for row in blocks]
    # A block that starts on a separator: the separator is the end of the previous document.
    assert block_documents(documents, 5, [1], [2]).to_pylist()[1] == [0, 0, 1, 1, 1]
    assert pack_blocks(documents, 5, [1], [2], separator=3).to_pylist()[1] == [1, 3, 20, 3, 2]


# Every registered scheme that adds nothing to the embeddings (a token's code does not depend on where its document
# starts), each also under FlexAttention where it has a score_mod; the others take the dense boolean mask.
RELATIVE = [name for name, scheme in POSITIONS.items() if scheme.embed is PositionScheme.embed]
WITH_SCORE_MOD = [name for name in RELATIVE if POSITIONS[name].score_mod is not PositionScheme.score_mod]


@pytest.mark.parametrize(("position", "flex"), [(name, False) for name in RELATIVE] +
                         [(name, True) for name in WITH_SCORE_MOD])
def test_each_packed_document_is_encoded_as_if_alone(position, flex):
    torch.manual_seed(0)
    encoder = Encoder(tiny_config(position=position), Kernels(flex_attention=flex)).eval()
    first, second = torch.randint(5, 97, (1, 9)), torch.randint(5, 97, (1, 6))
    packed = torch.cat([first, second, torch.zeros(1, 3, dtype=torch.long)], dim=1)  # 3 padding tokens
    mask = torch.tensor([[1] * 15 + [0] * 3])
    documents = torch.tensor([[0] * 9 + [1] * 6 + [-1] * 3])
    with torch.no_grad():
        together = encoder(packed, mask, document_ids=documents)
        torch.testing.assert_close(together[:, :9], encoder(first), atol=1e-5, rtol=0)
        torch.testing.assert_close(together[:, 9:15], encoder(second), atol=1e-5, rtol=0)
        # Without the document mask the documents see each other.
        assert (encoder(packed, mask)[:, :9] - encoder(first)).abs().max() > 1e-3
        assert not together.isnan().any()  # padding queries keep keys of their own: no all-masked row


def test_absolute_positions_still_count_from_the_block_start():
    torch.manual_seed(0)
    encoder = Encoder(tiny_config(position="learned")).eval()
    ids = torch.randint(5, 97, (1, 10))
    documents = torch.tensor([[0] * 4 + [1] * 6])
    with torch.no_grad():
        together = encoder(ids, document_ids=documents)
        torch.testing.assert_close(together[:, :4], encoder(ids[:, :4]), atol=1e-5, rtol=0)
        assert (together[:, 4:] - encoder(ids[:, 4:])).abs().max() > 1e-3  # positions 4..9, not 0..5


def test_the_datamodule_batches_carry_documents(shared_data, tmp_path):
    data = MLMDataModule(MINILM, dataset="wikitext", dataset_config="wikitext-2-raw-v1", train_split="validation",
                         val_split="test", max_length=64, batch_size=8, document_mask=True,
                         max_documents=200, max_val_documents=20, data_root=str(shared_data),
                         cache_dir=str(tmp_path))
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    documents, ids = batch["document_ids"], batch["input_ids"]
    assert documents.shape == ids.shape and documents.dtype == torch.long
    sep = data.tokenizer.sep_token_id
    # Inside a block, the document number steps by one right after each separator that joins two documents.
    for row_ids, row_documents in zip(ids.tolist(), documents.tolist(), strict=True):
        steps = [i for i in range(1, len(row_ids) - 1) if row_documents[i] != row_documents[i - 1]]
        assert all(row_ids[i - 1] == sep and row_documents[i] == row_documents[i - 1] + 1 for i in steps)
        assert row_documents[0] == 0
    assert any(row[-2] > 0 for row in documents.tolist())  # some blocks hold several documents
    validation = next(iter(data.val_dataloader()))
    assert "document_ids" in validation and "labels" in validation
    plain = MLMDataModule(MINILM, dataset="wikitext", dataset_config="wikitext-2-raw-v1", train_split="validation",
                          val_split=None, max_length=64, batch_size=8, max_documents=200,
                          data_root=str(shared_data), cache_dir=str(tmp_path))
    plain.setup("fit")
    assert "document_ids" not in next(iter(plain.train_dataloader()))
    with pytest.raises(DataError, match="data.document_mask keeps attention within the documents .* "
                                        "data.packing='segments'"):
        MLMDataModule(MINILM, dataset="wikitext", dataset_config="wikitext-2-raw-v1", packing="segments",
                      document_mask=True, data_root=str(shared_data), cache_dir=str(tmp_path))


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
def test_document_masked_pretraining_through_train_py(shared_data, tmp_path, monkeypatch):
    """The README job's config with `--data.document_mask true` trains (loss falls), validates and exports."""
    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cli = train.main(["--config", "configs/quickstart.yaml", "--trainer.default_root_dir", str(tmp_path / "run"),
                      "--data.tokenizer", MINILM, "--data.train_tokenizer", "null", "--data.document_mask", "true",
                      "--data.max_documents", "400", "--data.max_val_documents", "20", "--trainer.max_steps", "30",
                      "--trainer.val_check_interval", "30", "--trainer.logger", "false",
                      "--trainer.enable_progress_bar", "false", "--model.encoder.num_layers", "1"])
    assert cli.datamodule.document_mask and cli.trainer.global_step == 30
    metrics = cli.trainer.callback_metrics
    assert torch.isfinite(metrics["val/loss"]) and float(metrics["val/loss"]) < 9.0  # ln(30522) = 10.3 at start
    assert (tmp_path / "run" / "model").is_dir()
