"""headprune.training.train (the translation training loop of the demo and of Figure 5) and headprune.data.bpe."""
import collections
import math
import random

import pytest
import torch
import torch.nn.functional as F

from headprune.data import bpe
from headprune.demo import corpora
from headprune.models.fairseq import PAD_ID
from headprune.models.loading import load_translation
from headprune.training.train import (fit_translation_model, inverse_sqrt_schedule, token_batches, train_translation_model,
                             translation_loss, write_translation_tarball)

TINY = dict(layers=1, heads=2, d_model=32, ffn=32, batch_size=32, progress=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return corpora.make_translation_corpus(tmp_path_factory.mktemp("corpus"), 400, {"valid": 60}, seed=1)


# ----------------------------------------------------------------------------------------------
# BPE


def reference_learn_bpe(word_counts, num_merges):
    """The plain algorithm (recount every pair after each merge), as the demo first implemented it."""
    vocab = {tuple(word[:-1]) + (word[-1] + "</w>",): count for word, count in word_counts.items()}
    merges = []
    for _ in range(num_merges):
        pair_counts = collections.Counter()
        for symbols, count in vocab.items():
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] += count
        if not pair_counts:
            break
        best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))
        if pair_counts[best] < 2:
            break
        merges.append(best)
        new_vocab = {}
        for symbols, count in vocab.items():
            out, i = [], 0
            while i < len(symbols):
                if i < len(symbols) - 1 and (symbols[i], symbols[i + 1]) == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            new_vocab[tuple(out)] = count
        vocab = new_vocab
    return merges


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_incremental_bpe_learns_the_same_merges_as_the_plain_algorithm(seed):
    rng = random.Random(seed)
    # Small alphabet and repeated letters: many ties and overlapping pairs ("aaa").
    words = {"".join(rng.choice("aabbcd") for _ in range(rng.randint(1, 9))) for _ in range(400)}
    counts = {word: rng.choice([1, 1, 2, 3, 5, 8]) for word in words}
    expected = reference_learn_bpe(counts, 500)
    assert bpe.learn_bpe(counts, 500) == expected
    assert bpe.learn_bpe(counts, 7) == expected[:7]
    assert len(expected) < 500  # it stopped when no pair occurred twice


def test_incremental_bpe_on_real_looking_words():
    text = ("the quick brown fox jumps over the lazy dog . die schnelle braune fuchs springt über den faulen hund . "
            "unverhältnismäßig 1234 12345 aaaa aaaaa ababab") * 3
    counts = collections.Counter(text.split())
    assert bpe.learn_bpe(counts, 200) == reference_learn_bpe(counts, 200)
    assert bpe.learn_bpe({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 10)[:2] == [("s", "t</w>"), ("e", "st</w>")]
    assert bpe.learn_bpe({"": 3, "ab": 0}, 10) == []


def test_joined_dictionary_covers_every_character_and_merge():
    counts = {"abc": 3, "abd": 2, "x": 1}
    merges = bpe.learn_bpe(counts, 10)
    entries = bpe.joined_dictionary(counts, merges, extra_characters="z")
    tokens = dict(entries)
    assert [c for _, c in entries] == sorted((c for _, c in entries), reverse=True)
    for char in "abcdxz":
        assert char in tokens and char + "@@" in tokens
    for a, b in merges:
        assert a + b.replace("</w>", "") in tokens or (a + b + "@@") in tokens
    segmented = collections.Counter(t for w, n in counts.items()
                                    for t in bpe.bpe_segment(w, {p: r for r, p in enumerate(merges)}) for _ in range(n))
    assert {t: c for t, c in entries if c} == dict(segmented)


# ----------------------------------------------------------------------------------------------
# Pieces of the loop


def test_inverse_sqrt_schedule_is_fairseqs():
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=5e-4)
    schedule = inverse_sqrt_schedule(optimizer, warmup_updates=4000, warmup_init_lr=1e-7)
    rates = []
    for _ in range(16001):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert rates[0] == pytest.approx(1e-7)
    assert rates[2000] == pytest.approx(1e-7 + 2000 * (5e-4 - 1e-7) / 4000)
    assert rates[4000] == pytest.approx(5e-4)
    assert rates[16000] == pytest.approx(5e-4 * math.sqrt(4000 / 16000))  # half the peak at 4x the warmup
    assert max(rates) == pytest.approx(5e-4)


def test_token_batches_respect_max_tokens_and_cover_every_pair():
    rng = random.Random(0)
    sources = [rng.randint(1, 60) for _ in range(500)]
    targets = [rng.randint(1, 60) for _ in range(500)]
    batches = token_batches(sources, targets, max_tokens=300, seed=3)
    assert sorted(i for batch in batches for i in batch) == list(range(500))
    for batch in batches:
        assert max(max(sources[i], targets[i]) for i in batch) * len(batch) <= 300
    assert token_batches(sources, targets, 300, seed=3) == batches
    assert token_batches([500], [3], 100) == [[0]]  # too long alone: a batch of one


def test_label_smoothed_loss_is_fairseqs():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11)
    labels = torch.tensor([[4, 5, 6, 2, PAD_ID], [7, 8, 2, PAD_ID, PAD_ID]])
    loss, nll, tokens = translation_loss(logits, labels)
    assert tokens == 7 and loss is nll
    assert loss == pytest.approx(float(F.cross_entropy(logits.reshape(-1, 11), labels.reshape(-1), ignore_index=PAD_ID)))

    eps = 0.1
    smoothed, nll, _ = translation_loss(logits, labels, eps)
    lprobs = F.log_softmax(logits, -1)[labels.ne(PAD_ID)]
    target = labels[labels.ne(PAD_ID)]
    by_hand = [(1 - eps - eps / 10) * -lp[t] + eps / 10 * -lp.sum() for lp, t in zip(lprobs, target)]
    assert float(smoothed) == pytest.approx(float(sum(by_hand) / 7), rel=1e-6)
    assert float(nll) == pytest.approx(float(loss), rel=1e-6)


# ----------------------------------------------------------------------------------------------
# The loop


@pytest.mark.parametrize("normalize_before", [False, True], ids=["post-norm", "pre-norm"])
def test_loss_decreases_and_checkpoints_are_written_at_exactly_the_configured_epochs(corpus, tmp_path,
                                                                                     normalize_before):
    folder = corpus["bpecodes"].parent
    seen, snapshots = [], {}

    def on_checkpoint(epoch, model, record):
        assert not model.training and record["epoch"] == epoch
        seen.append(epoch)
        snapshots[epoch] = {k: v.clone() for k, v in model.state_dict().items()}
        write_translation_tarball(model, folder, tmp_path / f"epoch{epoch}.tar.bz2", f"tiny.epoch{epoch}")

    run = train_translation_model(corpus, epochs=5, checkpoint_epochs=[4, 1, 2], on_checkpoint=on_checkpoint,
                                  valid=(folder / "valid.en", folder / "valid.fr"), lr=3e-3, seed=0,
                                  normalize_before=normalize_before, **TINY)
    assert type(run.model).__name__ == ("PreNormTransformer" if normalize_before else "FSMTForConditionalGeneration")
    assert seen == [1, 2, 4]
    assert sorted(p.name for p in tmp_path.glob("*.tar.bz2")) == ["epoch1.tar.bz2", "epoch2.tar.bz2", "epoch4.tar.bz2"]
    history = run.history_frame()
    assert list(history.epoch) == [1, 2, 3, 4, 5]
    assert list(history.updates) == [13, 26, 39, 52, 65]  # 400 pairs, batches of 32
    assert history.train_loss.is_monotonic_decreasing and history.valid_nll.is_monotonic_decreasing
    assert history.train_loss.iloc[-1] < 0.8 * history.train_loss.iloc[0]
    assert (history.train_loss == history.train_nll).all()  # no label smoothing
    assert history.lr.iloc[-1] == 0.0  # linear decay to zero

    # Each tarball holds the model as it was at that epoch, not the final one.
    for epoch in (1, 4):
        loaded, _ = load_translation(tmp_path / f"epoch{epoch}.tar.bz2", "en", "fr")
        state = loaded.state_dict()
        for name, tensor in snapshots[epoch].items():
            assert torch.equal(state[name], tensor), name
    final = run.model.state_dict()
    assert not all(torch.equal(final[n], t) for n, t in snapshots[4].items())


def test_fairseq_options_train_too(corpus):
    """The real config's path: token batches, inverse_sqrt, label smoothing, weight decay, no clipping."""
    run = train_translation_model(corpus, epochs=3, lr=2e-3, lr_schedule="inverse_sqrt", warmup_updates=10,
                                  max_tokens=600, label_smoothing=0.1, weight_decay=1e-4, clip_norm=None,
                                  dropout=0.3, seed=0, **TINY)
    history = run.history_frame()
    assert history.train_nll.is_monotonic_decreasing
    assert (history.train_loss > history.train_nll).all()  # the smoothing term
    assert history.updates.iloc[0] == history.updates.iloc[1] - history.updates.iloc[0]  # fixed batches per epoch


def test_demo_defaults_are_the_training_loop_defaults(corpus):
    model, _ = fit_translation_model(corpus, epochs=1, seed=0, **TINY)
    run = train_translation_model(corpus, epochs=1, seed=0, **TINY)
    for (name, a), (_, b) in zip(model.state_dict().items(), run.model.state_dict().items()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("kwargs, message", [
    (dict(checkpoint_epochs=[0, 2]), "outside 1..3"),
    (dict(checkpoint_epochs=[4]), "outside 1..3"),
    (dict(checkpoint_epochs=[2]), "on_checkpoint"),
    (dict(lr_schedule="cosine"), "lr_schedule"),
    (dict(lr_schedule="inverse_sqrt"), "warmup_updates"),
])
def test_bad_settings_are_refused_before_training(corpus, kwargs, message):
    with pytest.raises(ValueError, match=message):
        train_translation_model(corpus, epochs=3, **TINY, **kwargs)
