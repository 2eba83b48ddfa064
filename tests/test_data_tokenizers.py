"""Tokenizers: trained WordPiece and byte-level BPE encode and decode pairs with the right token types; transformers
folders load; the vocabulary and the position scheme are checked against the model config."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from runs import MINILM, REPO
from transformers import AutoTokenizer

from data import DataError, SpecialTokenTemplate, check_max_length, check_vocab_fits, load_tokenizer, save_tokenizer
from data.tokenizers import train_tokenizer
from encoders import EncoderConfig


@pytest.fixture(scope="module")
def corpus(shared_data: Path) -> list[str]:
    lines = (shared_data / "wikitext-2" / "wiki.valid.tokens").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip()]


@pytest.fixture(scope="module")
def wordpiece(corpus):
    return train_tokenizer(corpus, "wordpiece", vocab_size=3000)


@pytest.fixture(scope="module")
def bpe(corpus):
    return train_tokenizer(corpus, "byte_level_bpe", vocab_size=3000)


def test_wordpiece_pair_round_trip(wordpiece):
    encoded = wordpiece("The Lobster lives in the Sea.", "It is blue.")
    tokens = wordpiece.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and tokens[-1] == "[SEP]"
    first_sep = tokens.index("[SEP]")
    # Segment A (with [CLS] and its [SEP]) is type 0, segment B and the final [SEP] type 1.
    assert encoded["token_type_ids"] == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
    decoded = wordpiece.decode(encoded["input_ids"], skip_special_tokens=True)
    assert decoded == "the lobster lives in the sea. it is blue."
    assert len(wordpiece) == 3000
    specials = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    assert [wordpiece.convert_tokens_to_ids(t) for t in specials] == [0, 1, 2, 3, 4]


def test_byte_level_bpe_pair_round_trip(bpe):
    a, b = "The Lobster lives in the Sea.", "It is blue!"
    encoded = bpe(a, b, return_token_type_ids=True)
    tokens = bpe.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens[0] == "<s>" and tokens[-1] == "</s>"
    assert tokens.count("</s>") == 3  # <s> A </s></s> B </s>, as RoBERTa
    assert set(encoded["token_type_ids"]) == {0}  # RoBERTa has one segment type
    assert "token_type_ids" not in bpe(a, b)  # ... so the tokenizer does not emit them by default
    assert bpe.decode(encoded["input_ids"], skip_special_tokens=True) == a + b  # byte-level: case and spaces kept
    assert any(token.startswith("Ġ") for token in tokens)
    assert [bpe.convert_tokens_to_ids(t) for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")] == [0, 1, 2, 3, 4]


def test_a_byte_level_mask_token_takes_the_space_before_it(bpe, tmp_path):
    """"is <mask>." must read as "is" and a masked word, the form the model is trained on ("Ġis", mask, "."), not
    with a lone space token before the mask that no training input holds (RoBERTa's `<mask>` lstrip)."""
    folder = save_tokenizer(bpe, tmp_path / "bpe")
    for tokenizer in (bpe, AutoTokenizer.from_pretrained(folder), load_tokenizer(folder / "tokenizer.json")):
        before = tokenizer.convert_ids_to_tokens(tokenizer("The lobster is")["input_ids"])[:-1]  # without </s>
        masked = tokenizer.convert_ids_to_tokens(tokenizer("The lobster is <mask>.")["input_ids"])
        assert masked == [*before, "<mask>", ".", "</s>"]


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_save_and_load_give_the_same_ids(kind, wordpiece, bpe, tmp_path):
    tokenizer = {"wordpiece": wordpiece, "bpe": bpe}[kind]
    folder = save_tokenizer(tokenizer, tmp_path / kind)
    for loaded in (load_tokenizer(folder), load_tokenizer(folder / "tokenizer.json")):
        assert loaded("Homarus gammarus , a lobster", "second")["input_ids"] == \
            tokenizer("Homarus gammarus , a lobster", "second")["input_ids"]
        assert (loaded.pad_token_id, loaded.mask_token_id) == (tokenizer.pad_token_id, tokenizer.mask_token_id)


def test_saved_and_exported_tokenizers_name_a_class_transformers_4_has(wordpiece, bpe, minilm_tokenizer, tmp_path):
    """transformers 5 saves a tokenizer that is its tokenizer.json alone (litbert's trained ones) as
    `TokenizersBackend`, a class transformers 4 (which litbert supports, >= 4.48) does not have: its AutoTokenizer
    refuses such a folder ("Tokenizer class TokenizersBackend does not exist"). Saved, and exported beside a model
    after loading back, they name `PreTrainedTokenizerFast`, which both versions load, to the same ids; a tokenizer
    of a class of its own (MiniLM's BertTokenizer) keeps its name."""
    from tiny import TINY
    from transformers import AutoTokenizer

    from tasks.classification import SequenceClassification

    pair = ("Homarus gammarus , a lobster", "second")
    for name, tokenizer in (("wordpiece", wordpiece), ("bpe", bpe)):
        folder = save_tokenizer(tokenizer, tmp_path / name)
        task = SequenceClassification(num_labels=2, encoder=TINY, vocab_size=len(tokenizer),
                                      pad_token_id=tokenizer.pad_token_id)
        export = task.export(tmp_path / f"{name}-model", load_tokenizer(folder))
        for saved in (folder, export):
            assert json.loads((saved / "tokenizer_config.json").read_text())["tokenizer_class"] == \
                "PreTrainedTokenizerFast"
            loaded = AutoTokenizer.from_pretrained(saved)
            assert loaded(*pair) == tokenizer(*pair)
            assert loaded.special_tokens_map == tokenizer.special_tokens_map
    folder = save_tokenizer(minilm_tokenizer, tmp_path / "minilm")
    assert json.loads((folder / "tokenizer_config.json").read_text())["tokenizer_class"] == "BertTokenizer"


def test_a_bare_tokenizer_json_keeps_the_recipes_token_types(wordpiece, bpe, tmp_path):
    """Loaded from its tokenizer.json alone, a WordPiece tokenizer still gives BERT's segment B token type 1 (the
    folder's model_input_names), and byte-level BPE none, as from their folders."""
    for name, tokenizer in (("wordpiece", wordpiece), ("bpe", bpe)):
        folder = save_tokenizer(tokenizer, tmp_path / name)
        bare = load_tokenizer(folder / "tokenizer.json")
        assert bare.model_input_names == load_tokenizer(folder).model_input_names
    assert "token_type_ids" in load_tokenizer(tmp_path / "wordpiece" / "tokenizer.json")("a", "b")


def test_a_vocab_size_below_the_alphabet_is_refused(corpus):
    """The trainers keep every character (byte), whatever vocab_size says: a smaller one is refused, with the
    size the tokenizer came out at, instead of being silently exceeded."""
    for kind, size in (("wordpiece", 50), ("byte_level_bpe", 100)):
        with pytest.raises(DataError, match=rf"vocab_size={size} \(data.train_tokenizer.vocab_size\) is below .*"
                                            rf"came out with \d+ tokens"):
            train_tokenizer(corpus[:200], kind, vocab_size=size)


def test_a_vocabulary_larger_than_the_text_gives_is_refused_with_the_size_it_gives(corpus, tmp_path):
    """The trainers stop once no pair of tokens is seen min_frequency times: 30,522 tokens asked of 20 lines would
    give a model of a few hundred without a word. Refused, with the size the text gives, before any folder is
    written; that size trains."""
    from data.tokenizers import TokenizerTraining, ensure_trained

    for kind in ("wordpiece", "byte_level_bpe"):
        with pytest.raises(DataError, match=rf"vocab_size=30522 \(data.train_tokenizer.vocab_size\) is more than this "
                                            rf"text can give a {kind} tokenizer: it came out with \d+ tokens") as error:
            ensure_trained(tmp_path / kind, TokenizerTraining(kind, vocab_size=30522), lambda: corpus[:20], "text")
        assert not (tmp_path / kind).exists()
        size = int(re.search(r"set vocab_size to (\d+)", str(error.value)).group(1))
        assert len(train_tokenizer(corpus[:20], kind, vocab_size=size)) == size


def test_loads_minilm_transformers_folder():
    tokenizer = load_tokenizer(MINILM)
    assert len(tokenizer) == 30522
    assert (tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id) == \
        (0, 101, 102, 103)
    assert tokenizer("Hello world")["input_ids"] == [101, 7592, 2088, 102]


def test_special_token_template_matches_the_tokenizer(wordpiece, bpe):
    for tokenizer in (wordpiece, bpe):
        template = SpecialTokenTemplate.of(tokenizer)
        a = tokenizer("lobster pots", add_special_tokens=False)["input_ids"]
        b = tokenizer("blue", add_special_tokens=False)["input_ids"]
        expected = tokenizer("lobster pots", "blue", return_token_type_ids=True)
        ids, types = template.wrap(a, b)
        assert ids == expected["input_ids"] and types == expected["token_type_ids"]
        assert template.wrap(a)[0] == tokenizer("lobster pots")["input_ids"]


def test_vocab_larger_than_the_model_is_an_error():
    tokenizer = load_tokenizer(MINILM)
    check_vocab_fits(tokenizer, EncoderConfig.from_name("bert-tiny"))  # 30522 == 30522 fits
    with pytest.raises(DataError, match=r"30522 tokens but the model's vocab_size is 30000"):
        check_vocab_fits(tokenizer, EncoderConfig.from_name("bert-tiny", vocab_size=30000))


def test_pair_token_types_beyond_the_model_are_an_error():
    tokenizer = load_tokenizer(MINILM)
    with pytest.raises(DataError, match=r"type_vocab_size=1"):
        check_vocab_fits(tokenizer, EncoderConfig.from_name("bert-tiny", type_vocab_size=1))
    check_vocab_fits(tokenizer, EncoderConfig.from_name("bert-tiny", type_vocab_size=0))  # types ignored


def test_max_length_beyond_the_position_scheme_is_an_error():
    config = EncoderConfig.from_name("bert-tiny")
    check_max_length(512, config)
    with pytest.raises(DataError, match=r"max_length=513 .* allows \(512 positions"):
        check_max_length(513, config)
    roberta = EncoderConfig.from_name("roberta-base")
    with pytest.raises(DataError, match=r"lower the datamodule's max_length to 512"):
        check_max_length(514, roberta)
    check_max_length(100_000, EncoderConfig.from_name("bert-tiny", position="rope"))  # unbounded


def test_unknown_tokenizer_paths_are_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds none of"):
        load_tokenizer(tmp_path / "empty")
    with pytest.raises(ValueError, match="Unknown tokenizer kind"):
        train_tokenizer(["a"], "unigram")  # type: ignore[arg-type]


def test_a_model_saved_without_its_tokenizer_names_data_tokenizer(tmp_path, shared_data, monkeypatch):
    """transformers' `model.save_pretrained` alone leaves no tokenizer in the folder data.tokenizer defaults to: the
    error names the setting and the way on, not "is it a tokenizer folder?"."""
    import transformers

    import train as train_py

    monkeypatch.setenv("LITBERT_DATA", str(shared_data))
    config = transformers.BertConfig(vocab_size=99, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=8)
    transformers.BertModel(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=rf"data.tokenizer={tmp_path}: the folder {tmp_path} holds none of .* "
                                         r"\(unset, data.tokenizer is model.pretrained's folder.* Set data.tokenizer "
                                         r"to the tokenizer the model was trained with"):
        train_py.make_cli(["--config", str(REPO / "configs/glue/rte.yaml"), "--model.pretrained", str(tmp_path),
                           "--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path / "run")])


def test_ensure_trained_trains_once_reuses_and_refuses_a_different_recipe(tmp_path):
    from data.tokenizers import TokenizerTraining, ensure_trained

    texts = ["the cat sat on the mat", "a dog ate the bone", "the dog sat"] * 50
    calls = []

    def corpus():
        calls.append(1)
        return texts

    folder = tmp_path / "tok"
    training = TokenizerTraining(kind="wordpiece", vocab_size=43, min_frequency=1)  # all this text gives
    ensure_trained(folder, training, corpus, source="corpus-a")
    assert load_tokenizer(folder).tokenize("the cat") == ["the", "cat"]
    ensure_trained(folder, training, corpus, source="corpus-a")  # same settings, same data: reused
    assert len(calls) == 1
    with pytest.raises(DataError, match="vocab_size': 80"):
        ensure_trained(folder, TokenizerTraining(vocab_size=80, min_frequency=1), corpus, source="corpus-a")
    with pytest.raises(DataError, match=r"on data corpus-b \(the same settings on other training documents: "
                                        r"another source, or another data.max_documents"):
        ensure_trained(folder, training, corpus, source="corpus-b")
    foreign = tmp_path / "foreign"
    save_tokenizer(load_tokenizer(folder), foreign)
    with pytest.raises(DataError, match="not trained by litbert"):
        ensure_trained(foreign, training, corpus, source="corpus-a")


def test_a_datamodule_without_tokenizer_says_where_to_get_one():
    from data import GLUEDataModule

    with pytest.raises(DataError, match="set data.tokenizer"):
        GLUEDataModule("sst2")


@pytest.mark.slow  # trains through train.py: .ci/run runs it with -m slow
@pytest.mark.parametrize("kind", ["wordpiece", "byte_level_bpe"])
def test_training_twice_gives_the_same_ids(kind, corpus, shared_data):
    """The same text and settings give the same tokenizer, ids included, with the special tokens first; also in
    other processes, with and without `tokenizers`' threads (its WordPiece trainer breaks ties between merges in hash
    order: unchecked, about one training in twenty learned other tokens in one setting, most in the other)."""
    first, second = (train_tokenizer(corpus[:3000], kind, vocab_size=800) for _ in range(2))
    assert first.get_vocab() == second.get_vocab()
    script = ("import json, sys; from pathlib import Path; from data.tokenizers import train_tokenizer; "
              f"lines = [l for l in Path({str(shared_data)!r}, 'wikitext-2', 'wiki.valid.tokens').read_text("
              "encoding='utf-8').splitlines() if l.strip()]; "
              f"print(json.dumps(train_tokenizer(lines[:3000], {kind!r}, vocab_size=800).get_vocab()))")
    for parallel in ("true", "false"):
        done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True,
                              env=dict(os.environ, TOKENIZERS_PARALLELISM=parallel))
        assert json.loads(done.stdout.strip().splitlines()[-1]) == first.get_vocab()
    assert len(first.backend_tokenizer.get_added_tokens_decoder()) == 5  # the special tokens alone
    text = "The lobster's claws, unlike H. americanus, are smaller."
    assert first(text)["input_ids"] == second(text)["input_ids"]
    specials = {"wordpiece": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                "byte_level_bpe": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]}[kind]
    assert first.convert_ids_to_tokens(list(range(5))) == specials
