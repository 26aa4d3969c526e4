"""Perplexity by the usual protocol (tokenize once, non-overlapping windows, each starting with the BOS the
tokenizer adds), gated and pruned, with its bootstrap; WikiText-2 read from the files its hosts publish and
fetched from a local server. tests/test_perplexity_bos.py: the BOS against plain transformers on a Gemma 3."""
import io
import math
import zipfile

import numpy as np
import pytest
import torch

from test_adapter_contract import tiny_gpt2, tiny_llama_gqa
from test_data import server  # noqa: F401  (the local HTTP server fixture)
from headprune.data.wikitext import fetch_wikitext, read_wikitext
from headprune.evaluation.perplexity import (
    paired_bootstrap_perplexity, perplexity, window_batches, window_nll_variants, windows)
from headprune.evaluation.runs import gates_without
from headprune.io.download import ChecksumError
from headprune.models.prune import prune_heads


class WordTokenizer:
    """One id per whitespace word (ids 3..), a BOS (1) first, as a Llama tokenizer adds it."""

    bos_token_id = 1

    def __call__(self, text, return_attention_mask=False, add_special_tokens=True):
        return {"input_ids": [1] * add_special_tokens + [3 + (sum(map(ord, word)) % 40) for word in text.split()]}


TEXT = " ".join(f"w{i % 17} x{i % 5}" for i in range(60))  # 120 words, 121 tokens with the BOS


def test_windows_are_consecutive_and_drop_the_short_remainder():
    chunks = windows(WordTokenizer(), TEXT, window=16)
    words = WordTokenizer()(TEXT, add_special_tokens=False)["input_ids"]
    assert len(chunks) == len(words) // 15 and all(len(c) == 16 for c in chunks)
    # tokenized once; every window the BOS, then the next 15 words, the last few dropped
    assert all(c[0] == 1 for c in chunks) and sum((c[1:] for c in chunks), []) == words[:len(chunks) * 15]
    assert windows(WordTokenizer(), TEXT, window=16, max_windows=3) == chunks[:3]
    with pytest.raises(ValueError, match="fewer than one window"):
        windows(WordTokenizer(), "a b c", window=16)


def reference_perplexity(model, chunks):
    """Independent: transformers' own mean loss per window (labels = inputs), weighted by its predicted tokens."""
    total, count = 0.0, 0
    with torch.no_grad():
        for chunk in chunks:
            ids = torch.tensor([chunk])
            total += float(model(input_ids=ids, labels=ids).loss) * (len(chunk) - 1)
            count += len(chunk) - 1
    return math.exp(total / count)


@pytest.mark.parametrize("make_model", [tiny_llama_gqa, tiny_gpt2])
def test_perplexity_equals_the_models_own_loss_and_gates_equal_pruning(make_model):
    model = make_model()
    chunks = windows(WordTokenizer(), TEXT, window=12)
    batches = window_batches(chunks, batch_size=4)
    removed = [("dec_self", 0, 1), ("dec_self", 1, 0), ("dec_self", 1, 1)]
    variants = [None, gates_without(model, removed), gates_without(model, [("dec_self", 0, 3)])]
    # 4 windows per batch and 8 rows per forward: the three settings run in two groups
    full, gated_out, other = window_nll_variants(model, batches, variants, variant_batch_size=8)
    assert len(full) == len(chunks) and all(n == 11 for _, n in full)
    assert perplexity(full) == pytest.approx(reference_perplexity(model, chunks), rel=1e-5)
    alone = window_nll_variants(model, batches, [variants[1]])[0]
    assert np.allclose(gated_out, alone, rtol=1e-5)
    prune_heads(model, {"dec_self": {0: [1], 1: [0, 1]}})
    assert perplexity(gated_out) == pytest.approx(reference_perplexity(model, chunks), rel=1e-5)
    assert perplexity(gated_out) != pytest.approx(perplexity(full), rel=1e-3)  # the heads mattered


def test_bootstrap_prefers_the_lower_perplexity():
    rng = np.random.default_rng(0)
    better = [(float(v), 100) for v in rng.normal(200, 5, 40)]
    worse = [(nll + 30.0, n) for nll, n in better]
    result = paired_bootstrap_perplexity(worse, better, n_resamples=200)
    assert result.score_a == pytest.approx(-perplexity(worse)) and result.wins_b == 200 and result.p_value == 0.0
    same = paired_bootstrap_perplexity(better, better, n_resamples=50)
    assert same.wins_a == same.wins_b == 0 and same.p_value == 1.0
    # by hand: two windows of 10 tokens with NLL 10 and 30 -> exp(40 / 20)
    assert perplexity([(10.0, 10), (30.0, 10)]) == pytest.approx(math.exp(2.0))


RAW = " = Valkyria Chronicles = \n\n Senjō no Valkyria 3 is a game . \n\n"


def wikitext_zip(member="wikitext-2-raw/wiki.test.raw", text=RAW) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(member, text)
        archive.writestr("wikitext-2-raw/wiki.train.raw", "train text")
    return buffer.getvalue()


def test_wikitext_from_the_zip_or_a_raw_file(tmp_path):
    (tmp_path / "w.zip").write_bytes(wikitext_zip())
    assert read_wikitext(tmp_path / "w.zip") == RAW
    assert read_wikitext(tmp_path / "w.zip", "train") == "train text"
    (tmp_path / "wiki.test.raw").write_text(RAW, encoding="utf-8")
    assert read_wikitext(tmp_path / "wiki.test.raw") == RAW
    (tmp_path / "bad.zip").write_bytes(wikitext_zip(member="other.txt"))
    with pytest.raises(ValueError, match="bad.zip: no wiki.test.raw"):
        read_wikitext(tmp_path / "bad.zip")


def test_wikitext_from_hugging_faces_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    import pandas as pd

    rows = [" = Valkyria Chronicles = \n", "", " Senjō no Valkyria 3 is a game . \n"]
    pd.DataFrame({"text": rows}).to_parquet(tmp_path / "test-00000-of-00001.parquet")
    assert read_wikitext(tmp_path / "test-00000-of-00001.parquet") == "\n\n".join(rows)


def test_wikitext_is_fetched_over_http_with_its_checksum(tmp_path, server):  # noqa: F811
    import hashlib

    content = wikitext_zip()
    url = server.add("wikitext-2-raw-v1.zip", content)
    text = fetch_wikitext(url, tmp_path / "wikitext-2-raw-v1.zip", hashlib.sha256(content).hexdigest())
    assert text == RAW and server.requested == ["/wikitext-2-raw-v1.zip"]
    with pytest.raises(ChecksumError):
        fetch_wikitext(url, tmp_path / "again.zip", "0" * 64)
    assert not (tmp_path / "again.zip").exists()


def test_corpus_splits_are_prepared_from_the_zip_or_one_file_per_split(tmp_path, server):  # noqa: F811
    """prepare_corpus (rule fetch_corpus): every split of WikiText's zip, or one parquet file per split over
    HTTP, written as the text the protocol tokenizes; a single file listed with several splits is refused."""
    from headprune.data.wikitext import prepare_corpus

    (tmp_path / "w.zip").write_bytes(wikitext_zip())
    sizes = prepare_corpus({"url": str(tmp_path / "w.zip"), "splits": ["train", "test"]}, tmp_path / "raw",
                           tmp_path / "corpus")
    assert (tmp_path / "corpus" / "test.txt").read_text() == RAW and sizes == {"train": 10, "test": len(RAW)}
    with pytest.raises(ValueError, match="a single file is one split"):
        prepare_corpus({"url": str(tmp_path / "w.zip") + ".raw", "splits": ["train", "test"]}, tmp_path / "raw",
                       tmp_path / "other")
    pytest.importorskip("pyarrow")
    import pandas as pd

    files = {}
    for split, rows in (("test", [" = A = \n", " the test . \n"]), ("validation", [" valid . \n"])):
        path = tmp_path / f"{split}.parquet"
        pd.DataFrame({"text": rows}).to_parquet(path)
        files[split] = {"url": server.add(f"{split}-00000-of-00001.parquet", path.read_bytes())}
    prepare_corpus({"files": files}, tmp_path / "raw2", tmp_path / "hf")
    assert (tmp_path / "hf" / "test.txt").read_text() == " = A = \n\n\n the test . \n"
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["test.txt", "validation.txt"]


def test_windows_saved_once_and_scored_through_the_study_evalset(tmp_path):
    """tokenize_corpus's .npy windows, read back by the pipeline's EvalSet, give the perplexity computed
    directly from the model; the ablation's significance and the oracle order read lower as better."""
    import pandas as pd

    from headprune.evaluation.perplexity import load_windows, save_windows
    from headprune.evaluation.runs import EvalSettings, compare_to_full, oracle_order, run_variants, score
    from headprune.workflow import load_evalset

    count = save_windows(WordTokenizer(), TEXT, 10, tmp_path / "test.npy")
    assert count == len(TEXT.split()) // 9 and load_windows(tmp_path / "test.npy", 5) == windows(WordTokenizer(), TEXT, 10)[:5]
    evalset = load_evalset({"kind": "language_modeling", "windows": str(tmp_path / "test.npy"), "max_items": None})
    assert evalset.metric == "perplexity" and len(evalset) == count
    model = tiny_llama_gqa()
    heads = [("dec_self", 0, 1), ("dec_self", 1, 2)]
    full, *ablated = run_variants(model, None, evalset, [None] + [gates_without(model, [h]) for h in heads],
                                  EvalSettings(batch_size=5))
    direct = window_nll_variants(model, window_batches(windows(WordTokenizer(), TEXT, 10), 12), [None])[0]
    assert score(evalset, full) == pytest.approx(perplexity(direct), rel=1e-6)
    rows = []
    for head, outputs in zip(heads, ablated):
        change = compare_to_full(evalset, {"score": score(evalset, full), "outputs": full},
                                 {"score": score(evalset, outputs), "outputs": outputs}, resamples=200)
        assert change["delta"] == pytest.approx(score(evalset, outputs) - score(evalset, full))
        rows.append({"attn_type": head[0], "layer": head[1], "head": head[2], "score": change["score"],
                     "metric": change["metric"]})
    table = pd.DataFrame(rows)
    best = min(rows, key=lambda r: r["score"])  # the lowest perplexity without the head: it hurts least
    assert oracle_order(table)[0] == (best["attn_type"], best["layer"], best["head"])
