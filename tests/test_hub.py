"""Hugging Face Hub ids for checkpoints and tokenizers (`encoders.hub`), and the model card and push of a run
(`tasks.run.publish`), all without a network: the hub cache is laid out here as `huggingface_hub` lays it out, filled
with the MiniLM-L6 package's files, and read under HF_HUB_OFFLINE=1; uploads are intercepted."""

from __future__ import annotations

import http.server
import json
import re
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import datasets
import pyarrow as pa
import pytest
import torch
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import HfHubHTTPError
from runs import MINILM, REPO, environment, last_lines, train

import train as train_py
from data import DataError, load_tokenizer, sources
from data.sources import load_hub_split
from encoders import Encoder, EncoderConfig, MaskedLMHead
from encoders import hub as hub_module
from encoders.checkpoints import load_checkpoint
from encoders.hub import HubError, local_path, parse_id
from tasks.run import publish

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
    assert parse_id("bert-base-uncased", bare=True) == ("bert-base-uncased", None)  # the hub's first models
    assert parse_id("bert-base-uncased@v1", bare=True) == ("bert-base-uncased", "v1")
    for path in ("runs/quickstart/model", "/abs/path", "./name", "~/model", "name@", "a b"):
        assert parse_id(path, bare=True) is None, path


def test_a_bare_hub_name_loads_from_the_cache_or_says_it_is_not_there(hub):
    """`bert-base-uncased`, as transformers takes it: read from the hub cache that transformers fills under that
    name; not cached, the offline message, never "not a hub id"."""
    bare = hub.parent / "models--minilm"
    bare.symlink_to(hub, target_is_directory=True)
    same_weights(Encoder.from_pretrained("minilm"), Encoder.from_pretrained(MINILM))
    assert load_tokenizer("minilm@v2").get_vocab() == load_tokenizer(MINILM).get_vocab()
    with pytest.raises(HubError, match=r"^model.pretrained=bert-base-uncased: no local folder of that name, and the "
                                       r"Hugging Face Hub model bert-base-uncased is not in the hub cache .*"
                                       r"HF_HUB_OFFLINE is set.*`hf download bert-base-uncased`"):
        local_path("bert-base-uncased", setting="model.pretrained")


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
    # The tokenizer compared with the checkpoint's is named by its setting too.
    with pytest.raises(HubError, match="^data.tokenizer=org/absent: no local folder of that name, .*HF_HUB_OFFLINE"):
        train_py.make_cli([*args, "--model.pretrained", "org/minilm", "--data.tokenizer", "org/absent"])


def test_only_the_files_litbert_reads_are_downloaded(tmp_path, monkeypatch):
    """Online, the snapshot is asked for configs, vocabularies and safetensors; `pytorch_model*.bin` only where
    the model has no safetensors, and no weights at all for a tokenizer."""
    asked = []

    def snapshot_download(repo, revision, allow_patterns, cache_dir, local_files_only):
        asked.append((repo, revision, allow_patterns))
        folder = tmp_path / repo.replace("/", "--")
        folder.mkdir(exist_ok=True)
        if repo == "org/new" and "*.safetensors" in allow_patterns:
            (folder / "model.safetensors").write_bytes(b"")
        return str(folder)

    monkeypatch.setattr(hub_module, "snapshot_download", snapshot_download)
    monkeypatch.setattr(hub_module, "unanswered", lambda repo, revision: None)  # the hub answers
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


def silent_socket() -> socket.socket:
    """A local socket that takes connections and never answers, as a proxy that says nothing. Closed after 20 s: a
    call without a timeout fails then rather than hanging the test."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections are queued and never answered
    threading.Timer(20, silent.close).start()
    return silent


def test_a_hub_that_does_not_answer_is_given_up_after_the_etag_timeout(hub, monkeypatch):
    """A network that drops packets, or a proxy that never answers (here a socket that is never read): the id is
    read from the cache within HF_HUB_ETAG_TIMEOUT, or named as unreachable, not waited on for ever."""
    silent = silent_socket()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 1)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    start = time.monotonic()
    with pytest.raises(HubError, match=r"^model.pretrained=org/silent: no local folder of that name, and the Hugging "
                                       r"Face Hub model org/silent is not in the hub cache .*: the Hugging Face Hub "
                                       r"cannot be reached \(ReadTimeout: check the network"):
        local_path("org/silent", setting="model.pretrained")
    assert local_path("org/minilm@v2") == hub / "snapshots" / V2  # cached: read from there
    assert time.monotonic() - start < 10


# ------------------------------------------------------------------------------------------------- datasets


def refused_endpoint() -> str:
    """The address of a port nothing listens on: the connection is refused at once, as on a machine without a
    network."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    return f"http://127.0.0.1:{port}"


def hub_at(monkeypatch, endpoint: str) -> None:
    """The hub at `endpoint`, for huggingface_hub and datasets alike (HF_ENDPOINT, read as they are imported)."""
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", endpoint)


@pytest.fixture
def datasets_cache(tmp_path, monkeypatch) -> Path:
    """datasets' cache holding the train split of the hub dataset someone/reviews as a download leaves it, an empty
    hub cache, HF_HUB_OFFLINE unset, and the question whether the hub answers given back to `data.sources`."""
    cache = tmp_path / "datasets"
    folder = cache / "someone___reviews" / "default" / "0.0.0" / "0123abcd"
    folder.mkdir(parents=True)
    table = datasets.Dataset.from_dict(REVIEWS).data.table
    with pa.OSFile(str(folder / "reviews-train.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    datasets.DatasetInfo(features=datasets.Features.from_arrow_schema(table.schema), config_name="default",
                         dataset_name="reviews", splits=[{"name": "train", "num_examples": 2,
                                                          "dataset_name": "reviews"}]).write_to_directory(str(folder))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(sources, "unanswered", hub_module.unanswered)
    return cache


REVIEWS = {"text": ["a b", "c"], "label": [0, 1]}


@pytest.mark.parametrize("network", ["none", "silent"])
def test_a_hub_dataset_is_read_from_the_cache_at_once_where_the_hub_cannot_be_reached(network, datasets_cache,
                                                                                       monkeypatch):
    """No network (a port that refuses), or a proxy that never answers: datasets retried the hub for half a minute
    (far longer behind the proxy) before it read its cache or failed. The hub is given up after
    HF_HUB_ETAG_TIMEOUT, a cached split read from datasets' cache, and one not cached refused with the reason and
    the way on."""
    hub_at(monkeypatch, refused_endpoint() if network == "none" else
           f"http://127.0.0.1:{silent_socket().getsockname()[1]}")
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 1)
    start = time.monotonic()
    assert load_hub_split("someone/reviews", None, "train")[:] == REVIEWS
    unreachable = "ConnectError" if network == "none" else "ReadTimeout"
    with pytest.raises(DataError, match=rf"^Could not load 'someone/absent' \(config None, split 'train'\): the "
                                        rf"Hugging Face Hub cannot be reached \({unreachable}: .*\), and datasets' "
                                        rf"cache \({datasets_cache}\) does not hold it\. Without network access, "
                                        rf"set \$LITBERT_DATA .*, or give local files instead\.$"):
        load_hub_split("someone/absent", None, "train")
    assert time.monotonic() - start < 6


def test_the_hub_is_asked_whether_it_answers_once_a_process_per_endpoint(datasets_cache, hub, monkeypatch):
    """GLUE reads three splits, and a run loads a model and its tokenizer besides: behind a proxy that never
    answers, each question cost HF_HUB_ETAG_TIMEOUT (GLUE's splits waited 30 s). The first answer (or its absence)
    stands for the rest of the process; another endpoint is asked anew."""
    asked = []
    question = HfApi.repo_info

    def repo_info(api, repo, **kwargs):
        asked.append((api.endpoint, repo))
        return question(api, repo, **kwargs)

    monkeypatch.setattr(HfApi, "repo_info", repo_info)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # `hub` set it; the cache it laid out stays
    silent = f"http://127.0.0.1:{silent_socket().getsockname()[1]}"
    hub_at(monkeypatch, silent)
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 1)
    for split in ("train", "train", "train"):
        assert load_hub_split("someone/reviews", None, split)[:] == REVIEWS
    with pytest.raises(DataError, match=r"the Hugging Face Hub cannot be reached \(ReadTimeout: "):
        load_hub_split("someone/absent", None, "validation")
    assert local_path("org/minilm@v2") == hub / "snapshots" / V2  # read from the cache, the hub not asked again
    assert asked == [(silent, "someone/reviews")]
    refused = refused_endpoint()
    hub_at(monkeypatch, refused)
    with pytest.raises(DataError, match=r"the Hugging Face Hub cannot be reached \(ConnectError: "):
        load_hub_split("someone/absent", None, "train")
    load_hub_split("someone/reviews", None, "train")
    assert asked == [(silent, "someone/reviews"), (refused, "someone/absent")]


def test_hf_hub_offline_reads_datasets_cache_and_asks_the_hub_nothing(datasets_cache, monkeypatch):
    def asked(*args, **kwargs):
        raise AssertionError("the hub was asked under HF_HUB_OFFLINE")

    monkeypatch.setattr(sources, "unanswered", asked)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert load_hub_split("someone/reviews", None, "train")[:] == REVIEWS
    with pytest.raises(DataError, match=rf"^Could not load 'someone/absent' \(config None, split 'train'\): "
                                        rf"HF_HUB_OFFLINE is set, and datasets' cache \({datasets_cache}\) does not "
                                        rf"hold it\."):
        load_hub_split("someone/absent", None, "train")


def test_a_hub_that_answers_is_asked_for_the_dataset_by_datasets(datasets_cache, monkeypatch):
    """With a network, datasets asks the hub itself, as before (here a hub that knows no dataset, after which
    datasets reads its cache)."""
    asked = []

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_error(404)

        do_HEAD = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hub_at(monkeypatch, f"http://127.0.0.1:{server.server_address[1]}")
    try:
        assert load_hub_split("someone/reviews", None, "train")[:] == REVIEWS
    finally:
        server.shutdown()
    assert asked[0] == "/api/datasets/someone/reviews"  # litbert's question, then datasets' own
    assert any("README.md" in path for path in asked[1:]), asked


def test_train_py_on_a_named_dataset_without_a_network_fails_at_once(datasets_cache, monkeypatch, tmp_path,
                                                                      capsys):
    """`python train.py --config configs/glue/rte.yaml`, LITBERT_DATA unset, no network: the clear error came after
    half a minute of datasets' retries (23 s, then 40 s in all on 2 cores)."""
    hub_at(monkeypatch, refused_endpoint())
    monkeypatch.delenv("LITBERT_DATA", raising=False)
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    start = time.monotonic()
    assert train_py.cli_main(["--config", str(REPO / "configs/glue/rte.yaml"), "--model.pretrained", MINILM,
                              "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.logger", "false"]) == 2
    assert time.monotonic() - start < 20  # building the run takes seconds; the retries took 23
    assert ("Could not load 'nyu-mll/glue' (config 'rte', split 'test'): the Hugging Face Hub cannot be reached "
            "(ConnectError: ") in last_lines(capsys.readouterr().err, 1)


# ----------------------------------------------------------------------------------------------------- push


@pytest.fixture
def glue_args(shared_data, tmp_path, monkeypatch) -> list[str]:
    """A two-step fine-tune of a tiny checkpoint on 64 RTE pairs into tmp_path/run, with the hub online (and
    never reached)."""
    monkeypatch.setenv("LITBERT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    tiny = tiny_checkpoint(tmp_path / "tiny", seed=0)
    rte = tmp_path / "RTE"
    rte.mkdir()
    for name, rows in (("train.tsv", 64), ("dev.tsv", 16), ("test.tsv", 8)):
        lines = (shared_data / "glue" / "RTE" / name).read_text().splitlines()
        (rte / name).write_text("\n".join(lines[:rows + 1]) + "\n")
    return ["--config", str(REPO / "configs/glue/rte.yaml"), "--model.pretrained", str(tiny),
            "--data.data_dir", str(rte), "--trainer.precision", "32-true", "--data.max_length", "64",
            "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.logger", "false",
            "--trainer.enable_progress_bar", "false", "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1",
            "--trainer.num_sanity_val_steps", "0", "--data.batch_size", "4", "--data.eval_batch_size", "8",
            "--predict", "false"]


class FakeHub:
    """HfApi's calls of a push, recorded; the upload records the folder's files as they are when uploaded."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple] = []
        self.files: dict[str, bytes] = {}
        for name in ("create_repo", "update_repo_settings", "create_branch"):
            monkeypatch.setattr(HfApi, name, self._record(name))
        monkeypatch.setattr(HfApi, "upload_folder", self._upload())
        monkeypatch.setattr(HfApi, "whoami", lambda api: {"name": "me"})  # the check before training
        monkeypatch.setattr(publish, "unanswered", lambda repo: None)  # and the hub answers it

    def _record(self, name):
        def call(api, repo_id, **kwargs):
            self.calls.append((name, repo_id, kwargs))
        return call

    def _upload(self):
        def upload_folder(api, *, repo_id, folder_path, **kwargs):
            self.calls.append(("upload_folder", repo_id, kwargs))
            self.files = {str(p.relative_to(folder_path)): p.read_bytes() for p in Path(folder_path).rglob("*")
                          if p.is_file()}
            return SimpleNamespace(commit_url=f"https://huggingface.co/{repo_id}/commit/0123abc")
        return upload_folder


def test_a_push_uploads_the_export_with_its_card_and_metrics_table(glue_args, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    fake = FakeHub(monkeypatch)
    cli = train_py.main([*glue_args, "--push_to_hub", "me/tiny-rte@trial", "--hub_private", "true"])
    export = tmp_path / "run" / "model"
    assert [call[0] for call in fake.calls] == ["create_repo", "update_repo_settings", "create_branch",
                                                "upload_folder"]
    assert fake.calls[0][1:] == ("me/tiny-rte", {"private": True, "exist_ok": True})
    assert fake.calls[1][2] == {"private": True} and fake.calls[2][2] == {"branch": "trial", "exist_ok": True}
    upload = fake.calls[3][2]
    assert upload["revision"] == "trial" and "*.safetensors" in upload["delete_patterns"]
    # The export folder as it is: weights, config, tokenizer and card.
    assert set(fake.files) == {path.name for path in export.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"} <= set(
        fake.files)
    card = fake.files["README.md"].decode()
    assert card == (export / "README.md").read_text()
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics == pytest.approx(cli.metrics) and set(metrics) == {"val/accuracy", "val/loss"}
    table = card.split("| Metric | Value |\n|---|---|\n")[1].split("\n\n")[0].splitlines()
    assert table == [f"| {key} | {value:.4f} |" for key, value in metrics.items()]
    assert card.startswith("---\nlibrary_name: transformers\npipeline_tag: text-classification\n")
    assert "# me/tiny-rte@trial" in card
    assert f"| Base model | `{tmp_path / 'tiny'}` (a local folder) |" in card
    assert "| Format | transformers (`BertForSequenceClassification`) |" in card
    parameters = sum(p.numel() for p in {id(p): p for p in cli.model.parameters()}.values())
    assert f"| Parameters | {parameters:,} (of which the head's " in card
    assert "2 layers, hidden size 128, 2 heads, feed-forward 512 (gelu)" in card and "- `task`: rte" in card
    assert "python train.py --config " in card and "--push_to_hub me/tiny-rte@trial --hub_private true" in card
    assert "2 optimizer steps" in card and f"    pretrained: {tmp_path / 'tiny'}\n" in card  # the resolved config
    assert "from_pretrained('me/tiny-rte')" in card
    assert "litbert: pushed to hub    https://huggingface.co/me/tiny-rte/commit/0123abc" in capsys.readouterr().out


def test_a_failed_upload_says_how_to_retry_it(tmp_path, monkeypatch):
    from tasks.run.publish import push

    def refuse(api, **kwargs):
        raise HfHubHTTPError("403 Forbidden: no write access to me/x", response=SimpleNamespace(headers={},
                                                                                                request=None))

    FakeHub(monkeypatch)
    monkeypatch.setattr(HfApi, "upload_folder", refuse)
    with pytest.raises(HubError, match=rf"--push_to_hub me/x@b: the upload failed \(403 Forbidden: no write access "
                                       rf"to me/x\). The model stays in {tmp_path}: upload it with `hf upload me/x "
                                       rf"{tmp_path} --revision b`"):
        push(tmp_path, "me/x@b", None)

    def unreachable(api, **kwargs):
        raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.setattr(HfApi, "upload_folder", unreachable)  # the network lost during the run
    with pytest.raises(HubError, match=rf"--push_to_hub me/x: the upload failed \(ConnectionError: \[Errno -2\] Name "
                                       rf"or service not known\). The model stays in {tmp_path}: upload it with `hf "
                                       rf"upload me/x {tmp_path}`"):
        push(tmp_path, "me/x", None)


def test_a_push_that_cannot_succeed_is_refused_before_training(glue_args, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    fake = FakeHub(monkeypatch)
    with pytest.raises(ValueError, match=r"--push_to_hub me/x uploads at the end of the run, but no Hugging Face "
                                         r"token is found .* `hf auth login`; or drop --push_to_hub and upload the "
                                         r"export later with `hf upload me/x .*run/model`"):
        train_py.make_cli([*glue_args, "--push_to_hub", "me/x"])
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE is set: unset it, or drop --push_to_hub"):
        train_py.make_cli([*glue_args, "--push_to_hub", "me/x"])
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    def refused(api):
        raise HfHubHTTPError("401 Unauthorized: invalid token", response=SimpleNamespace(headers={}, request=None))

    def unreachable(api):
        raise ConnectionError("[Errno -2] Name or service not known")

    for whoami, message in ((refused, r"the Hugging Face Hub refused the token \(401 Unauthorized: invalid token\)\. "
                                      r"Set HF_TOKEN to a valid token with write access, or drop --push_to_hub"),
                            (unreachable, r"the Hugging Face Hub cannot be reached \(ConnectionError: \[Errno -2\] "
                                          r"Name or service not known\)\. Check the network \(or a proxy\), or drop "
                                          r"--push_to_hub and upload the export later with `hf upload me/x")):
        monkeypatch.setattr(HfApi, "whoami", whoami)
        with pytest.raises(ValueError, match=r"^--push_to_hub me/x: " + message):
            train_py.make_cli([*glue_args, "--push_to_hub", "me/x"])
    for extra, message in ((["--push_to_hub", "me/x", "--export", "false"], "but --export is false"),
                           (["--push_to_hub", "x"], "--push_to_hub x: not a Hugging Face Hub id"),
                           (["--hub_private", "true"], "but --push_to_hub is not set")):
        with pytest.raises(ValueError, match=message):
            train_py.make_cli([*glue_args, *extra])
    assert fake.calls == [] and not (tmp_path / "run").exists()


def test_a_push_to_a_hub_that_does_not_answer_is_refused_after_the_etag_timeout(glue_args, monkeypatch, capsys):
    """A proxy that takes the connection and never answers (here a socket that is never read): the check of
    --push_to_hub before training gives up after HF_HUB_ETAG_TIMEOUT, as every hub call of litbert does, and says how
    to go on; `whoami` alone waited for ever."""
    silent = silent_socket()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 1)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    start = time.monotonic()
    assert train_py.cli_main([*glue_args, "--push_to_hub", "me/x"]) == 2
    assert time.monotonic() - start < 10
    assert re.search(r"--push_to_hub me/x: the Hugging Face Hub cannot be reached \(ReadTimeout: .*\)\. Check the "
                     r"network \(or a proxy\), or drop --push_to_hub and upload the export later with `hf upload "
                     r"me/x .*run/model`\.$", capsys.readouterr().err.strip())


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
    card = (export / "README.md").read_text()
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert card.startswith("---\nbase_model: org/minilm\nlibrary_name: transformers\n")
    assert "| Base model | [org/minilm](https://huggingface.co/org/minilm) |" in card
    assert "--model.pretrained org/minilm" in card and "- `tokenizer`: org/minilm" in card
    assert f"| val/accuracy | {metrics['val/accuracy']:.4f} |" in card
    # Not cached: refused before anything is built, with the id, HF_HUB_OFFLINE and how to fetch it.
    done = train("configs/glue/rte.yaml", tmp_path / "absent", "--model.pretrained", "org/absent@v1", *short,
                 env=env)
    assert done.returncode == 2
    line = last_lines(done.stderr, 1)
    assert line.startswith("model.pretrained=org/absent@v1: no local folder of that name"), done.stderr[-2000:]
    assert "HF_HUB_OFFLINE is set" in line and "`hf download org/absent --revision v1`" in line
