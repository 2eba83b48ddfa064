"""Hugging Face Hub ids for checkpoints and tokenizers (`encoders.hub`), without a network: the hub cache is laid
out here as `huggingface_hub` lays it out, filled with the MiniLM-L6 package's files, and read under
HF_HUB_OFFLINE=1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from huggingface_hub import constants
from runs import MINILM, REPO, environment, last_lines, train

import train as train_py
from data import load_tokenizer
from encoders import Encoder, EncoderConfig, MaskedLMHead
from encoders import hub as hub_module
from encoders.checkpoints import load_checkpoint
from encoders.hub import HubError, local_path, parse_id

MAIN = "0123456789abcdef0123456789abcdef01234567"  # the commit refs/main points at: MiniLM
V2 = "fedcba9876543210fedcba9876543210fedcba98"  # the commit of the tag v2: a tiny random BERT


def tiny_checkpoint(folder: Path, seed: int) -> Path:
    """bert-tiny over MiniLM's vocabulary, random, with MiniLM's tokenizer: a checkpoint unlike MiniLM."""
    tokenizer = load_tokenizer(MINILM)
    config = EncoderConfig.from_name("bert-tiny", vocab_size=len(tokenizer))
    torch.manual_seed(seed)
    encoder = Encoder(config)
    encoder.save_pretrained(folder, head=MaskedLMHead(config, encoder.embeddings.word))
    tokenizer.save_pretrained(str(folder))
    return folder


def lay_out_cache(cache: Path, tmp_path: Path) -> Path:
    """`models--org--minilm` as the hub cache holds it: refs/main -> MAIN (MiniLM's files), refs/v2 -> V2."""
    repo = cache / "models--org--minilm"
    snapshot = repo / "snapshots" / MAIN
    snapshot.mkdir(parents=True)
    for file in Path(MINILM).iterdir():
        if file.is_file():
            (snapshot / file.name).symlink_to(file)  # the hub cache links snapshots to blobs the same way
    tiny_checkpoint(repo / "snapshots" / V2, seed=1)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(MAIN)
    (repo / "refs" / "v2").write_text(V2)
    return repo


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Path:
    """An offline hub cache holding org/minilm, the process pointed at it, in a working folder of no checkpoints."""
    cache = tmp_path / "hub"
    repo = lay_out_cache(cache, tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return repo


def same_weights(a: Encoder, b: Encoder) -> None:
    assert a.state_dict().keys() == b.state_dict().keys()
    for name, tensor in a.state_dict().items():
        torch.testing.assert_close(tensor, b.state_dict()[name], rtol=0, atol=0, msg=name)


def test_ids_parse_and_paths_are_not_ids():
    assert parse_id("org/name") == ("org/name", None)
    assert parse_id("org/name@v1.0") == ("org/name", "v1.0")
    assert parse_id("org/name@refs/pr/3") == ("org/name", "refs/pr/3")  # a revision may hold slashes
    for path in ("name", "runs/quickstart/model", "/abs/path", "./org/name", "~/model", "org/name@", "a b/c"):
        assert parse_id(path) is None, path


def test_a_hub_id_loads_the_same_weights_and_tokenizer_as_the_folder(hub):
    by_id, by_folder = Encoder.from_pretrained("org/minilm"), Encoder.from_pretrained(MINILM)
    same_weights(by_id, by_folder)
    assert by_id.config == by_folder.config and by_id.config.num_layers == 6
    assert load_checkpoint("org/minilm").source == str(hub / "snapshots" / MAIN)
    assert load_tokenizer("org/minilm").get_vocab() == load_tokenizer(MINILM).get_vocab()


def test_a_revision_resolves_by_tag_and_by_commit(hub):
    tiny = Encoder.from_pretrained(hub / "snapshots" / V2)
    assert tiny.config.num_layers == 2
    same_weights(Encoder.from_pretrained("org/minilm@v2"), tiny)
    same_weights(Encoder.from_pretrained(f"org/minilm@{V2}"), tiny)
    assert local_path(f"org/minilm@{MAIN}") == local_path("org/minilm@main") == hub / "snapshots" / MAIN


def test_an_id_not_cached_offline_is_named_with_the_way_on(hub):
    with pytest.raises(HubError) as raised:
        local_path("org/absent", setting="model.pretrained")
    message = str(raised.value)
    assert message.startswith("model.pretrained=org/absent: no local folder of that name")
    assert "HF_HUB_OFFLINE" in message and "`hf download org/absent`" in message and "HF_HOME" in message
    with pytest.raises(HubError, match=r"org/minilm@v9: .* at revision v9 is not in the hub cache .*"
                                       r"`hf download org/minilm --revision v9`"):
        load_checkpoint("org/minilm@v9")
    with pytest.raises(HubError, match="runs/nope/model does not exist .* or a Hugging Face Hub id"):
        load_tokenizer("runs/nope/model")


def test_a_local_folder_of_the_same_name_wins(hub):
    local = tiny_checkpoint(Path("org/minilm"), seed=2)  # relative to the working folder, as a user's would be
    same_weights(Encoder.from_pretrained("org/minilm"), Encoder.from_pretrained(local.resolve()))
    assert Encoder.from_pretrained("org/minilm").config.num_layers == 2
    assert local_path("org/minilm") == Path("org/minilm")


def test_the_command_line_takes_a_hub_id_for_the_checkpoint_and_its_tokenizer(hub, shared_data, tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    args = ["--config", str(REPO / "configs/glue/rte.yaml"), "--trainer.logger", "false",
            "--trainer.default_root_dir", str(tmp_path / "run")]
    cli = train_py.make_cli([*args, "--model.pretrained", "org/minilm@v2"])
    same_weights(cli.model.encoder, Encoder.from_pretrained(hub / "snapshots" / V2))
    assert cli.config.data.init_args.tokenizer == "org/minilm@v2"  # kept as given: config.yaml and the card say so
    assert cli.datamodule.tokenizer.get_vocab() == load_tokenizer(MINILM).get_vocab()
    with pytest.raises(HubError, match="^model.teacher=org/absent: no local folder of that name, .*HF_HUB_OFFLINE"):
        train_py.make_cli([*args, "--model.pretrained", "org/minilm", "--model.teacher", "org/absent"])


def test_only_the_files_litbert_reads_are_downloaded(tmp_path, monkeypatch):
    """Online, the snapshot is asked for configs, vocabularies and safetensors; `pytorch_model*.bin` only where
    the model has no safetensors, and no weights at all for a tokenizer."""
    asked = []

    def snapshot_download(repo, revision, allow_patterns, cache_dir):
        asked.append((repo, revision, allow_patterns))
        folder = tmp_path / repo.replace("/", "--")
        folder.mkdir(exist_ok=True)
        if repo == "org/new" and "*.safetensors" in allow_patterns:
            (folder / "model.safetensors").write_bytes(b"")
        return str(folder)

    monkeypatch.setattr(hub_module, "snapshot_download", snapshot_download)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    local_path("org/new@v1")
    local_path("org/old")
    local_path("org/tokenizer", weights=False)
    assert asked == [("org/new", "v1", ["*.json", "*.txt", "*.model", "*.safetensors"]),
                     ("org/old", None, ["*.json", "*.txt", "*.model", "*.safetensors"]),
                     ("org/old", None, ["pytorch_model*.bin"]),
                     ("org/tokenizer", None, ["*.json", "*.txt", "*.model"])]
    local_path("org/new@v1")
    assert len(asked) == 4  # resolved once a process



@pytest.mark.slow  # trains MiniLM through train.py: .ci/run runs it with -m slow
def test_train_py_fine_tunes_a_hub_id_from_the_offline_cache_and_cards_it(shared_data, tmp_path):
    """As a user runs it: HF_HOME points at a copied hub cache, HF_HUB_OFFLINE=1, `--model.pretrained org/minilm`."""
    lay_out_cache(tmp_path / "home" / "hub", tmp_path)
    env = environment(HF_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1", LITBERT_DATA=str(shared_data),
                      LITBERT_CACHE=str(tmp_path / "cache"))
    for name in ("HF_HUB_CACHE", "HF_TOKEN", "TRANSFORMERS_OFFLINE"):
        env.pop(name, None)
    short = ["--trainer.logger", "false", "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1",
             "--trainer.num_sanity_val_steps", "0", "--data.batch_size", "4", "--data.eval_batch_size", "8",
             "--predict", "false", "--trainer.precision", "32-true"]
    done = train("configs/glue/rte.yaml", tmp_path / "run", "--model.pretrained", "org/minilm", *short, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    export = tmp_path / "run" / "model"
    assert "    pretrained: org/minilm\n" in (tmp_path / "run" / "config.yaml").read_text()
    assert load_tokenizer(export).get_vocab() == load_tokenizer(MINILM).get_vocab()  # the id's tokenizer
    assert Encoder.from_pretrained(export).config == Encoder.from_pretrained(MINILM).config
    # Not cached: refused before anything is built, with the id, HF_HUB_OFFLINE and how to fetch it.
    done = train("configs/glue/rte.yaml", tmp_path / "absent", "--model.pretrained", "org/absent@v1", *short,
                 env=env)
    assert done.returncode == 2
    line = last_lines(done.stderr, 1)
    assert line.startswith("model.pretrained=org/absent@v1: no local folder of that name"), done.stderr[-2000:]
    assert "HF_HUB_OFFLINE is set" in line and "`hf download org/absent --revision v1`" in line
