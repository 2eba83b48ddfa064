"""MLM masking: the 15% / 80-10-10 rates over more than a million tokens, special and padding tokens never masked,
whole words masked whole (WordPiece `##` and byte-level `Ġ`), dynamic masks new each epoch, static ones fixed."""

import itertools
from pathlib import Path

import pytest
import torch
from lightning.fabric.utilities.data import _set_sampler_epoch

from data import MLMCollator, MLMDataModule, save_tokenizer, train_tokenizer
from data.masking import keyed_uniform
from data.sources import DataError


@pytest.fixture(scope="module")
def wiki_lines(shared_data: Path) -> list[str]:
    lines = (shared_data / "wikitext-2" / "wiki.valid.tokens").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if len(line.split()) > 20]


def random_batch(tokenizer, rows: int, length: int, generator: torch.Generator):
    """(input_ids, attention_mask): [CLS] random tokens [SEP] then padding, with random lengths."""
    specials = torch.tensor(tokenizer.all_special_ids)
    ids = torch.randint(1000, len(tokenizer), (rows, length), generator=generator)
    lengths = torch.randint(length // 2, length + 1, (rows,), generator=generator)
    positions = torch.arange(length).expand(rows, length)
    ids[:, 0] = tokenizer.cls_token_id
    ids[positions == (lengths - 1)[:, None]] = tokenizer.sep_token_id
    # Sprinkle special tokens mid-sequence too: they must never be chosen either.
    sprinkle = torch.rand(rows, length, generator=generator) < 0.02
    ids[sprinkle] = specials[torch.randint(len(specials), (int(sprinkle.sum()),), generator=generator)]
    attention = (positions < lengths[:, None]).long()
    ids[attention == 0] = tokenizer.pad_token_id
    return ids, attention


def test_an_examples_dynamic_masks_do_not_depend_on_the_batch_it_comes_in():
    """The keyed numbers of a token are the same whatever the padded length of its batch (its neighbours, the batch
    size, the workers), in all three streams: which tokens are chosen, the 80/10/10 action and the replacement."""
    index = torch.tensor([3, 17])
    alone = keyed_uniform(7, 2, index, 40, 3)
    padded = keyed_uniform(7, 2, index, 120, 3)
    assert torch.equal(alone, padded[:, :, :40])
    assert not torch.equal(alone[0], alone[1]) and not torch.equal(alone[1], alone[2])  # the streams differ


def test_masking_rates_over_a_million_tokens(minilm_tokenizer):
    collator = MLMCollator(minilm_tokenizer)
    generator = torch.Generator().manual_seed(0)
    ids, attention = random_batch(minilm_tokenizer, 3000, 512, generator)
    maskable = collator.maskable(ids, attention)
    assert maskable.sum() >= 1_000_000
    corrupted, labels = collator.mask(ids, attention, generator=generator)
    chosen = labels != -100
    rate = chosen.sum() / maskable.sum()
    assert abs(rate.item() - 0.15) < 0.003
    assert torch.equal(labels[chosen], ids[chosen])  # labels are the original tokens
    as_mask = (corrupted[chosen] == minilm_tokenizer.mask_token_id).float().mean().item()
    unchanged = (corrupted[chosen] == ids[chosen]).float().mean().item()
    replaced = 1 - as_mask - unchanged
    assert abs(as_mask - 0.8) < 0.01 and abs(unchanged - 0.1) < 0.01 and abs(replaced - 0.1) < 0.01
    # Nothing outside the chosen positions changes; special tokens and padding are never chosen.
    assert torch.equal(corrupted[~chosen], ids[~chosen])
    assert not chosen[~maskable].any()
    assert not chosen[attention == 0].any()
    assert not chosen[torch.isin(ids, torch.tensor(minilm_tokenizer.all_special_ids))].any()
    # Random replacements are ordinary tokens.
    random_ids = corrupted[chosen & (corrupted != minilm_tokenizer.mask_token_id) & (corrupted != ids)]
    assert not torch.isin(random_ids, torch.tensor(minilm_tokenizer.all_special_ids)).any()


def words_of(tokens: list[str], continues, specials: set[str]) -> list[list[int]]:
    """Positions of each word, computed independently of the collator, from the token strings."""
    words: list[list[int]] = []
    for i, token in enumerate(tokens):
        if token in specials:
            words.append([])  # specials end words
            continue
        if words and words[-1] and continues(token):
            words[-1].append(i)
        else:
            words.append([i])
    return [w for w in words if w]


@pytest.mark.parametrize("family", ["wordpiece", "byte_level"])
def test_whole_word_masking_masks_whole_words(family, minilm_tokenizer, wiki_lines, tmp_path):
    if family == "wordpiece":
        tokenizer, continues = minilm_tokenizer, (lambda token: token.startswith("##"))
    else:
        tokenizer = train_tokenizer(wiki_lines, "byte_level_bpe", vocab_size=2000)
        continues = lambda token: not token.startswith("Ġ")  # noqa: E731
    collator = MLMCollator(tokenizer, whole_word_masking=True)
    encoded = tokenizer(wiki_lines[:400], truncation=True, max_length=128)
    batch = collator([{"input_ids": ids} for ids in encoded["input_ids"]])
    chosen = batch["labels"] != -100
    multi_piece_masked = 0
    for row in range(len(encoded["input_ids"])):
        tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"][row])
        for word in words_of(tokens, continues, set(tokenizer.all_special_tokens)):
            states = chosen[row, word]
            assert states.all() or not states.any(), f"word {[tokens[i] for i in word]} partly masked"
            multi_piece_masked += int(len(word) > 1 and bool(states.all()))
    assert multi_piece_masked > 20  # the property was exercised on real multi-piece words
    original = collator.pad([{"input_ids": ids} for ids in encoded["input_ids"]])["input_ids"]
    rate = chosen.sum() / collator.maskable(original, batch["attention_mask"]).sum()
    assert 0.12 < rate.item() < 0.18


def write_corpus(folder: Path, lines: list[str]) -> str:
    path = folder / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def masks_by_block(loader, epoch: int = 0) -> dict[tuple[int, ...], tuple[int, ...]]:
    """One epoch: each block's original tokens (restored from the labels) -> its corrupted tokens and labels."""
    _set_sampler_epoch(loader, epoch)  # what Lightning does before each epoch
    out = {}
    for batch in loader:
        original = torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
        for block, ids, labels in zip(original, batch["input_ids"], batch["labels"], strict=True):
            out[tuple(block.tolist())] = tuple(ids.tolist() + labels.tolist())
    return out


@pytest.mark.parametrize("masking", ["dynamic", "static"])
def test_dynamic_masks_differ_between_epochs_static_do_not(masking, minilm_tokenizer, wiki_lines, tmp_path):
    corpus = write_corpus(tmp_path, wiki_lines[:300])
    folder = str(save_tokenizer(minilm_tokenizer, tmp_path / "tok"))
    dm = MLMDataModule(folder, train_files=[corpus], max_length=64, batch_size=16, cache_dir=str(tmp_path),
                       masking=masking)
    dm.setup("fit")
    loader = dm.train_dataloader()
    first, second = masks_by_block(loader, 0), masks_by_block(loader, 1)  # two epochs of the same loader
    assert first.keys() == second.keys() and len(first) == len(dm.datasets["train"]) > 100
    same = sum(first[block] == second[block] for block in first)
    assert same == (len(first) if masking == "static" else 0)
    assert masks_by_block(loader, 1) == second  # an epoch's masks are a function of the epoch, not of history
    chosen = [labels[64:] for labels in first.values() if len(labels) == 128]
    rate = sum(sum(t != -100 for t in labels) for labels in chosen) / (62 * len(chosen))
    assert abs(rate - 0.15) < 0.01  # 15% of the 62 non-special tokens of each block


def test_validation_masks_are_fixed_by_seed(minilm_tokenizer, wiki_lines, tmp_path):
    corpus = write_corpus(tmp_path, wiki_lines[:200])
    folder = str(save_tokenizer(minilm_tokenizer, tmp_path / "tok"))

    def val_labels(seed: int) -> torch.Tensor:
        dm = MLMDataModule(folder, train_files=[corpus], val_files=[corpus], max_length=64, batch_size=8,
                           cache_dir=str(tmp_path), val_mask_seed=seed)
        dm.setup("fit")
        torch.manual_seed(seed + 7)  # global RNG differs between calls; validation must not care
        return torch.cat([batch["labels"].flatten() for batch in dm.val_dataloader()])

    assert torch.equal(val_labels(5), val_labels(5))
    assert not torch.equal(val_labels(5), val_labels(6))


def test_validation_masks_keep_their_own_rate(minilm_tokenizer, wiki_lines, tmp_path):
    """Training at 30% (Wettig et al.) leaves validation at 15%, so runs that mask differently compare."""
    corpus = write_corpus(tmp_path, wiki_lines[:300])
    folder = str(save_tokenizer(minilm_tokenizer, tmp_path / "tok"))

    def rates(**settings) -> tuple[float, float]:
        dm = MLMDataModule(folder, train_files=[corpus], val_files=[corpus], max_length=64, batch_size=16,
                           cache_dir=str(tmp_path), **settings)
        dm.setup("fit")
        out = []
        for loader in (dm.train_dataloader(), dm.val_dataloader()):
            batches = list(loader)
            chosen = sum(int((b["labels"] != -100).sum()) for b in batches)
            maskable = sum(int(dm.collate.maskable(b["input_ids"], b["attention_mask"]).sum()
                               + ((b["labels"] != -100) & ~dm.collate.maskable(b["input_ids"])).sum())
                           for b in batches)  # chosen tokens replaced by [MASK] are no longer "maskable"
            out.append(chosen / maskable)
        return out[0], out[1]

    train, val = rates(mlm_probability=0.3)
    assert abs(train - 0.3) < 0.02 and abs(val - 0.15) < 0.015
    train, val = rates(mlm_probability=0.3, val_mlm_probability=0.4)
    assert abs(val - 0.4) < 0.02


def test_masks_are_the_same_with_workers_kept_across_epochs_and_after_a_resume(minilm_tokenizer, wiki_lines,
                                                                              tmp_path):
    """The epoch reaches the collator with each batch, not through the main process's copy of it: no worker, two
    workers started anew each epoch, and two kept alive across epochs (as the datamodules' loaders keep them) give
    the same masks over three epochs, and so does a loader of persistent workers resumed mid-epoch."""
    from data import ResumableLoader

    corpus = write_corpus(tmp_path, wiki_lines[:40])
    folder = str(save_tokenizer(minilm_tokenizer, tmp_path / "tok"))

    def datamodule(workers: int) -> MLMDataModule:
        dm = MLMDataModule(folder, train_files=[corpus], max_length=64, batch_size=8, cache_dir=str(tmp_path),
                           num_workers=workers)
        dm.setup("fit")
        return dm

    def masked(batches) -> list[list[int]]:
        return [torch.cat([b["input_ids"], b["labels"]], dim=1).tolist() for b in batches]

    def epochs(loader, first: int, last: int) -> list[list[list[int]]]:
        out = []
        for epoch in range(first, last):
            _set_sampler_epoch(loader, epoch)  # what Lightning does before each epoch
            out.append(masked(loader))
        return out

    reference = epochs(datamodule(0).train_dataloader(), 0, 3)
    assert len(reference[0]) >= 4 and reference[0] != reference[1]  # dynamic masks: new ones each epoch
    persistent = datamodule(2).train_dataloader()
    assert persistent.persistent_workers
    assert epochs(persistent, 0, 3) == reference
    dm = datamodule(2)
    view = dm._model_view(dm.datasets["train"])
    fresh = ResumableLoader(view, batch_sampler=dm.batch_sampler(view, True, 8), collate_fn=dm.collate, num_workers=2)
    assert not fresh.persistent_workers and epochs(fresh, 0, 3) == reference

    stopped = datamodule(2).train_dataloader()
    epochs(stopped, 0, 1)
    _set_sampler_epoch(stopped, 1)
    taken = masked(itertools.islice(stopped, 2))  # stopped after two batches of epoch 1
    resumed = datamodule(2).train_dataloader()
    resumed.load_state_dict(stopped.state_dict())
    rest_of_epoch_1, epoch_2 = epochs(resumed, 1, 3)
    assert [taken + rest_of_epoch_1, epoch_2] == reference[1:]


def replacement_shares(loader, mask_token_id: int) -> tuple[float, float, float]:
    """Of the tokens chosen for prediction: the shares replaced by the mask token, by another token, and unchanged."""
    counts = torch.zeros(3)
    for batch in loader:
        chosen = batch["labels"] != -100
        given, original = batch["input_ids"][chosen], batch["labels"][chosen]
        as_mask = given == mask_token_id
        counts += torch.tensor([as_mask.sum(), (~as_mask & (given != original)).sum(), (given == original).sum()])
    return tuple((counts / counts.sum()).tolist())


@pytest.mark.parametrize(("mask", "random"), [(1.0, 0.0), (0.0, 1.0), (0.5, 0.3)])
def test_replacement_probabilities_reach_the_training_masks(mask, random, minilm_tokenizer, wiki_lines, tmp_path):
    """data.mask_replace_probability / random_replace_probability (transformers' names, without the abbreviation)
    share out the chosen training tokens; validation masks keep BERT's 80/10/10, as they keep their rate."""
    corpus = write_corpus(tmp_path, wiki_lines[:300])
    folder = str(save_tokenizer(minilm_tokenizer, tmp_path / "tok"))
    dm = MLMDataModule(folder, train_files=[corpus], val_files=[corpus], max_length=64, batch_size=16,
                       cache_dir=str(tmp_path), mask_replace_probability=mask, random_replace_probability=random)
    dm.setup("fit")
    as_mask, replaced, unchanged = replacement_shares(dm.train_dataloader(), minilm_tokenizer.mask_token_id)
    # A random replacement equals the original token once in ~30k (MiniLM's vocabulary).
    assert as_mask == pytest.approx(mask, abs=0.02 if 0 < mask < 1 else 0)
    assert replaced == pytest.approx(random, abs=0.02 if 0 < random < 1 else 0.001)
    assert unchanged == pytest.approx(1 - mask - random, abs=0.02 if 0 < mask < 1 else 0.001)
    val = replacement_shares(dm.val_dataloader(), minilm_tokenizer.mask_token_id)
    assert val == pytest.approx((0.8, 0.1, 0.1), abs=0.02)


def test_replacement_probabilities_out_of_range_are_refused_by_name(tmp_path):
    for mask, random in ((0.9, 0.2), (-0.1, 0.5), (0.5, 1.5)):
        with pytest.raises(DataError, match=rf"data.mask_replace_probability={mask} and "
                                            rf"data.random_replace_probability={random} .* sum at most 1"):
            MLMDataModule(str(tmp_path), train_files=[str(tmp_path / "x.txt")], mask_replace_probability=mask,
                          random_replace_probability=random)
