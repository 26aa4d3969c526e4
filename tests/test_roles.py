"""Voita et al.'s head roles: detectors on hand-built attention maps with known answers, the CoNLL-U
reader, subword -> word aggregation, the demo grammar's gold parses, and head_roles end to end on
tiny random models."""
import math
import random

import numpy as np
import pytest
import torch

from conftest import tiny_bert
from headprune.demo import classification, corpora, grammar, parses
from headprune.scoring.roles import (
    SYNTACTIC_COLUMNS, Sentence, attention_argmax, attention_maps, head_roles, model_head_roles,
    positional_scores, rare_word_cases, rare_word_score, read_conllu, syntactic_baselines, syntactic_scores,
    token_word_map, word_attention, word_frequencies, write_conllu,
)

# --- hand-built maps --------------------------------------------------------------------------


def pointing(n, targets):
    """(n, n) attention: query i puts 0.9 on targets[i] and the rest evenly elsewhere."""
    a = np.full((n, n), 0.1 / max(n - 1, 1))
    for i, t in enumerate(targets):
        a[i, t] = 0.9 if n > 1 else 1.0
    return a


def previous_word(n):
    return pointing(n, [max(i - 1, 0) if i else min(1, n - 1) for i in range(n)])


def self_attention(n):
    return pointing(n, list(range(n)))


def test_positional_previous_and_next_word():
    lengths = [1, 2, 5, 7]
    maps = [np.stack([previous_word(n), pointing(n, [min(i + 1, n - 1) for i in range(n)]), self_attention(n)])
            for n in lengths]
    score, offset = positional_scores(maps)
    assert score.tolist() == [1.0, 1.0, 0.0]
    assert offset[:2].tolist() == [-1.0, 1.0]
    # a head that looks back 3 times out of 4 cases (first words are no case for offset -1)
    mixed = [pointing(5, [0, 0, 1, 2, 4])]  # queries 1-4: offsets -1, -1, -1, 0
    score, offset = positional_scores(mixed)
    assert float(score) == pytest.approx(3 / 4) and float(offset) == -1
    # too few cases: NaN
    score, offset = positional_scores([previous_word(3)], min_cases=5)
    assert math.isnan(float(score)) and math.isnan(float(offset))


def test_attention_argmax_of_float_and_pruned_rows():
    a = np.array([[[0.2, 0.8], [0.6, 0.4]], [[np.nan, np.nan], [np.nan, np.nan]]])
    assert attention_argmax(a).tolist() == [[1, 0], [-1, -1]]
    assert attention_argmax(np.array([[1, 0]])).tolist() == [[1, 0]]


def amod_sentences():
    # amod at varying distances: two adjectives before a noun, one right before, one after.
    s1 = Sentence("the big red dog barks .".split(), [4, 4, 4, 5, 0, 5],
                  ["det", "amod", "amod", "nsubj", "root", "punct"])
    s2 = Sentence("dogs see the old cat".split(), [2, 0, 5, 5, 2], ["nsubj", "root", "det", "amod", "dobj"])
    s3 = Sentence("the house red stands".split(), [2, 4, 2, 0], ["det", "nsubj", "amod", "root"])
    return [s1, s2, s3]


def test_syntactic_baselines_by_hand():
    baselines = syntactic_baselines(amod_sentences())
    # adjective -> noun offsets: big +2, red +1, old +1, red (after its noun) -1: +1 wins 2 of 4
    assert baselines["amod_dep2head"] == (0.5, 1, 4)
    # noun -> its adjectives: dog {-2, -1}, cat {-1}, house {+1}: -1 is right for 2 of 3 nouns
    assert baselines["amod_head2dep"] == (pytest.approx(2 / 3), -1, 3)
    # dobj is read as UD v2's obj: cat -> see at offset -3
    assert baselines["obj_dep2head"] == (1.0, -3, 1)
    # dog -> barks +1, dogs -> see +1, house -> stands +2
    assert baselines["nsubj_dep2head"] == (pytest.approx(2 / 3), 1, 3)
    assert math.isnan(baselines["advmod_dep2head"].accuracy) and baselines["advmod_dep2head"].cases == 0


def test_syntactic_scores_adjective_and_noun_heads():
    sentences = amod_sentences()
    maps = []
    for s in sentences:
        n = len(s)
        adjective_to_noun = [s.heads[i] - 1 if s.deprels[i] == "amod" else i for i in range(n)]
        first_adjective = {}
        for i in range(n):
            if s.deprels[i] == "amod":
                first_adjective.setdefault(s.heads[i] - 1, i)
        noun_to_adjective = [first_adjective.get(i, i) for i in range(n)]
        maps.append(np.stack([pointing(n, adjective_to_noun), pointing(n, noun_to_adjective)]))
    scores = syntactic_scores(maps, sentences)
    assert set(scores) == set(SYNTACTIC_COLUMNS)
    assert scores["amod_dep2head"].tolist() == [1.0, 0.0]
    assert scores["amod_head2dep"].tolist() == [0.0, 1.0]
    assert scores["nsubj_dep2head"].tolist() == [0.0, 0.0]  # subjects look at themselves
    assert np.isnan(scores["advmod_dep2head"]).all()  # no advmod in these sentences

    table = head_roles([m[None] for m in maps], sentences, None, min_cases=1)
    assert table["amod_dep2head_baseline"].tolist() == [0.5, 0.5]
    assert table["syntactic_best"].tolist() == ["amod_dep2head", "amod_head2dep"]
    assert table["syntactic_margin"].tolist() == pytest.approx([0.5, 1 / 3])
    assert table["role"].tolist() == ["syntactic", "syntactic"]


def test_rare_word_on_hand_built_frequencies():
    frequencies = {"the": 100, "dog": 50, "barks": 40, "cat": 30, "sleeps": 20, "aardvark": 2, ".": 100}
    sentences = [
        "the aardvark barks .".split(),  # rarest "aardvark" (2): outside the top 3 (counts >= 50)
        "the dog barks .".split(),  # rarest "barks" (40): outside the top 3 too
        "the dog .".split(),  # rarest "dog" (50) is the 3rd most frequent count: not a case
        "the zyzzyva sleeps zyzzyva".split(),  # unseen words count 0: both "zyzzyva"s are the rarest
    ]
    assert rare_word_cases(sentences, frequencies, top_k=3) == [[1], [2], None, [1, 3]]
    rare_head = [pointing(4, [1] * 4), pointing(4, [2] * 4), pointing(3, [0, 0, 0]), pointing(4, [1, 3, 3, 1])]
    self_head = [self_attention(4), self_attention(4), self_attention(3), self_attention(4)]
    maps = [np.stack([r, s]) for r, s in zip(rare_head, self_head)]
    scores = rare_word_score(maps, sentences, frequencies, top_k=3)
    # rare head: every query of the 3 counted sentences hits; self head: the rare words' own rows only
    assert scores.tolist() == pytest.approx([1.0, 4 / 12])
    assert math.isnan(float(rare_word_score(maps, sentences, frequencies, top_k=3, min_cases=13)[0]))
    # with every seen word among the frequent ones, only sentences with unseen words count
    assert rare_word_cases(sentences, frequencies, top_k=500) == [None, None, None, [1, 3]]


def test_head_roles_priority_and_columns():
    sentences = read_conllu(parses.demo_conllu(["ze frell dax gorps ak wug.", "ze blicket fims 42 quom toma om ak zorb.",
                                              "ak glim vames kwik.", "ze nok spiv mip iz tib."]))
    vocabulary = sorted({w for s in sentences for w in s.words})
    frequencies = {w: 10 * (i + 1) for i, w in enumerate(vocabulary)}  # distinct: one rarest word per sentence
    maps = []
    for s in sentences:
        n = len(s)
        counts = [frequencies.get(w, 0) for w in s.words]
        rarest = counts.index(min(counts))
        to_verb = [s.heads[i] - 1 if s.deprels[i] == "nsubj" else i for i in range(n)]
        maps.append(np.stack([previous_word(n), pointing(n, [rarest] * n), pointing(n, to_verb),
                              self_attention(n)])[None])
    table = head_roles(maps, sentences, frequencies, top_k=3, min_cases=1)
    assert len(table) == 4
    assert table[["attn_type", "layer", "head"]].values.tolist() == [["enc_self", 0, h] for h in range(4)]
    assert table["role"].tolist() == ["positional", "rare-word", "syntactic", "other"]
    assert table.loc[0, "positional"] == 1.0 and table.loc[0, "positional_offset"] == -1
    assert table.loc[1, "rare_word"] == 1.0
    assert table.loc[2, "nsubj_dep2head"] == 1.0
    assert table.loc[2, "syntactic_best"] == "nsubj_dep2head"
    expected = {"attn_type", "layer", "head", "positional", "positional_offset", "rare_word", *SYNTACTIC_COLUMNS,
                *(f"{c}_baseline" for c in SYNTACTIC_COLUMNS), "syntactic_best", "syntactic_margin", "functions",
                "role"}
    assert set(table.columns) == expected
    # thresholds decide: a stricter positional threshold than the head reaches leaves it to the next role
    assert head_roles(maps, sentences, frequencies, top_k=3, min_cases=1, positional_threshold=1.01).loc[0, "role"] != \
        "positional"
    with pytest.raises(ValueError, match="sentence 0 has 7 words"):
        head_roles([m[..., :-1, :-1] for m in maps], sentences, frequencies, min_cases=1)


# --- CoNLL-U ----------------------------------------------------------------------------------

SNIPPET = """# newdoc id = x
# sent_id = 1
# text = I don't know.
1\tI\tI\tPRON\tPRP\t_\t4\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\tVBP\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_
4\tknow\tknow\tVERB\tVB\t_\t0\troot\t_\tSpaceAfter=No
4.1\tknown\t_\t_\t_\t_\t_\t_\t4:conj\t_
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

# sent_id = 2
1\tGo\tgo\tVERB\tVB\t_\t0\troot\t_\t_
2\thome\thome\tADV\tRB\t_\t1\tadvmod\t_\t_
"""


def test_read_conllu_skips_comments_multiword_tokens_and_empty_nodes(tmp_path):
    first, second = read_conllu(SNIPPET)
    assert first.words == ["I", "do", "n't", "know", "."]
    assert first.heads == [4, 4, 4, 0, 4]
    assert first.deprels == ["nsubj", "aux", "advmod", "root", "punct"]
    assert first.upos == ["PRON", "AUX", "PART", "VERB", "PUNCT"]
    assert first.comments == ["newdoc id = x", "sent_id = 1", "text = I don't know."]
    assert (second.words, second.heads, second.deprels) == (["Go", "home"], [0, 1], ["root", "advmod"])
    path = tmp_path / "x.conllu"
    write_conllu([first, second], path)
    assert read_conllu(path) == [first, second]
    assert read_conllu(str(path)) == [first, second]


@pytest.mark.parametrize("bad_line, line_number, message", [
    ("2\thome\thome\tADV\tRB\t_\t1\tadvmod\t_", 14, "10 tab-separated fields"),
    ("2\thome\thome\tADV\tRB\t_\tone\tadvmod\t_\t_", 14, "HEAD 'one'"),
    ("2\thome\thome\tADV\tRB\t_\t7\tadvmod\t_\t_", 14, "HEAD 7 is beyond"),
    ("3\thome\thome\tADV\tRB\t_\t1\tadvmod\t_\t_", 14, "ID 3 should be 2"),
])
def test_read_conllu_malformed_lines_name_file_and_line(tmp_path, bad_line, line_number, message):
    text = SNIPPET.replace("2\thome\thome\tADV\tRB\t_\t1\tadvmod\t_\t_", bad_line)
    with pytest.raises(ValueError, match=f"<text>:{line_number}: .*{message}"):
        read_conllu(text)
    path = tmp_path / "bad.conllu"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=f"bad.conllu:{line_number}: .*{message}"):
        read_conllu(path)


# --- subwords -> words ------------------------------------------------------------------------


def test_word_attention_first_subword_row_summed_key_subwords():
    # tokens: [CLS] a b1 b2 c [SEP] -> words a, b, c
    index = [-1, 0, 1, 1, 2, -1]
    token = np.array([
        [.5, .1, .1, .1, .1, .1],
        [.1, .2, .3, .1, .2, .1],  # a
        [.0, .4, .1, .2, .1, .2],  # b1: b's row
        [.9, .0, .0, .0, .0, .1],  # b2: ignored
        [.2, .2, .2, .2, .1, .1],  # c
        [.1, .1, .1, .1, .1, .5],
    ])
    words = word_attention(np.stack([token, token[::-1, ::-1]]), index)
    assert words.shape == (2, 3, 3)
    np.testing.assert_allclose(words[0], [[.2, .4, .2], [.4, .3, .1], [.2, .4, .1]])
    flipped = token[::-1, ::-1]  # the same index read backwards is another hand check: rows 4, 2, 1
    np.testing.assert_allclose(words[1], [[flipped[1, 1], flipped[1, 2] + flipped[1, 3], flipped[1, 4]],
                                          [flipped[2, 1], flipped[2, 2] + flipped[2, 3], flipped[2, 4]],
                                          [flipped[4, 1], flipped[4, 2] + flipped[4, 3], flipped[4, 4]]])
    with pytest.raises(ValueError, match="word index for 5"):
        word_attention(token, index[:-1])


def bert_tokenizer(tmp_path, words):
    from transformers import BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(words)) + ["7", "##4", "##2", "##7"]
    (tmp_path / "vocab.txt").write_text("".join(v + "\n" for v in vocab), encoding="utf-8")
    return BertTokenizer(vocab=str(tmp_path / "vocab.txt"), do_lower_case=True)


def test_token_word_map_bert(tmp_path):
    tokenizer = bert_tokenizer(tmp_path, ["ze", "dax", "gorps", "."])
    ids, index = token_word_map(tokenizer, ["ze", "dax", "742", "gorps", "."])
    assert tokenizer.convert_ids_to_tokens(ids) == ["[CLS]", "ze", "dax", "7", "##4", "##2", "gorps", ".", "[SEP]"]
    assert index == [-1, 0, 1, 2, 2, 2, 3, 4, -1]


@pytest.fixture(scope="module")
def demo_bpe(tmp_path_factory):
    """The demo's BPE on a small corpus (rare nouns and numbers split into subwords) and its FSMTTokenizer."""
    from headprune.models.fairseq import build_fsmt_tokenizer

    folder = tmp_path_factory.mktemp("corpus")
    corpora.make_translation_corpus(folder, n_train=300, n_test_sets={}, num_merges=60, seed=0)
    return folder, build_fsmt_tokenizer(folder)


def test_token_word_map_demo_bpe(demo_bpe):
    folder, tokenizer = demo_bpe
    words = ["ze", "frell", "tazzle", "gorps", "742", "."]
    ids, index = token_word_map(tokenizer, words)
    pieces = [tokenizer.tokenize(w) for w in words]
    assert [len(p) for p in pieces][2] > 1 and len(pieces[4]) == 3  # a rare noun and a number are split
    assert index == [w for w, p in enumerate(pieces) for _ in p] + [-1]  # words ... </s>
    assert ids[-1] == tokenizer.sep_token_id
    assert ids == tokenizer("ze frell tazzle gorps 742.")["input_ids"]  # the same tokens as the whole sentence


# --- demo gold parses ---------------------------------------------------------------------------


def test_demo_conllu_hand_checked():
    sentences = read_conllu(parses.demo_conllu([
        "ze frell dax gorps ak wug.",
        "42 quom toma fims om ze zorb kwik ond ak glim vames.",
        "ze dax iz nok frell.",
        "ak nok spiv mip stribs ze lisk ond ze vorn drams ak prat ond ze fep iz welk.",
    ]))
    s = sentences[0]
    assert s.words == ["ze", "frell", "dax", "gorps", "ak", "wug", "."]
    assert s.heads == [3, 3, 4, 0, 6, 4, 4]
    assert s.deprels == ["det", "amod", "nsubj", "root", "det", "obj", "punct"]
    assert s.upos == ["DET", "ADJ", "NOUN", "VERB", "DET", "NOUN", "PUNCT"]
    assert s.comments == ["sent_id = 1", "text = ze frell dax gorps ak wug."]
    s = sentences[1]  # 42 quom toma fims om ze zorb kwik ond ak glim vames .
    assert s.heads == [3, 3, 4, 0, 7, 7, 4, 4, 12, 11, 12, 4, 4]
    assert s.deprels == ["nummod", "amod", "nsubj", "root", "case", "det", "obl", "advmod", "cc", "det", "nsubj",
                         "conj", "punct"]
    s = sentences[2]  # ze dax iz nok frell .
    assert s.heads == [2, 5, 5, 5, 0, 5]
    assert s.deprels == ["det", "nsubj", "cop", "advmod", "root", "punct"]
    s = sentences[3]  # three clauses (the last a copula clause): later clause heads are conj of the first verb
    assert s.words == "ak nok spiv mip stribs ze lisk ond ze vorn drams ak prat ond ze fep iz welk .".split()
    assert s.heads == [4, 3, 4, 5, 0, 7, 5, 11, 10, 11, 5, 13, 11, 18, 16, 18, 18, 5, 5]
    assert s.deprels == ["det", "advmod", "amod", "nsubj", "root", "det", "obj", "cc", "det", "nsubj", "conj", "det",
                         "obj", "cc", "det", "nsubj", "cop", "conj", "punct"]


def test_demo_conllu_rejects_sentences_outside_the_grammar():
    with pytest.raises(ValueError, match="sentence 2 'ze dax ze gorps.' .*expected a verb or 'iz', found word 3 'ze'"):
        parses.demo_conllu(["ze dax gorps.", "ze dax ze gorps."])
    with pytest.raises(ValueError, match="found word 2 'cat'"):
        parses.demo_conllu(["ze cat gorps."])
    with pytest.raises(ValueError, match="expected a noun, found the end"):
        parses.demo_conllu(["ze frell"])


def sampled_demo_sentences(n=200):
    """n sentences from each sampler: translation (in domain and shifted), mnli (premises and
    hypotheses, shifted too), sst2, grammatical cola, mrpc (both sides)."""
    sentences = []
    for shifted in (False, True):
        sampler = grammar._SentenceSampler(random.Random(7), shifted=shifted)
        sentences += [sampler.sentence()[0] for _ in range(n)]
    for kind, shifted in [("mnli", False), ("mnli", True), ("sst2", False), ("cola", False), ("mrpc", False)]:
        rows = classification._classification_split(kind, n, random.Random(8), shifted)
        rows = [row for row in rows if kind != "cola" or row[2] == 1]  # cola's label 0 breaks the grammar
        sentences += [a for a, _, _ in rows] + [b for _, b, _ in rows if b]
    return sentences


def test_demo_conllu_parses_sampled_sentences():
    texts = sampled_demo_sentences()
    sentences = read_conllu(parses.demo_conllu(texts))
    assert len(sentences) == len(texts) > 1500
    for text, s in zip(texts, sentences):
        assert " ".join(s.words) == text[:-1] + " ."
        assert s.heads.count(0) == 1 and s.deprels[s.heads.index(0)] == "root"
        assert all(0 <= h <= len(s) for h in s.heads) and all(h != i + 1 for i, h in enumerate(s.heads))
        for i in range(len(s)):  # every word reaches the root: no cycles
            seen, j = set(), i
            while s.heads[j]:
                assert j not in seen
                seen.add(j)
                j = s.heads[j] - 1
    relations = {d for s in sentences for d in s.deprels}
    assert {"nsubj", "obj", "amod", "advmod", "det", "nummod", "case", "obl", "cc", "conj", "cop", "punct"} <= relations
    cola_broken = [a for a, _, label in classification._classification_split("cola", 100, random.Random(9), False) if not label]
    for text in cola_broken:
        with pytest.raises(ValueError, match="outside the demo grammar"):
            parses.demo_conllu([text])


# --- end to end on tiny random models ----------------------------------------------------------


def demo_parses(n, seed=0):
    sampler = grammar._SentenceSampler(random.Random(seed))
    return read_conllu(parses.demo_conllu([sampler.sentence()[0] for _ in range(n)]))


def test_head_roles_tiny_bert(tmp_path):
    sentences = demo_parses(40)
    tokenizer = bert_tokenizer(tmp_path, [w for s in sentences for w in s.words if not w.isdigit()])
    model = tiny_bert()
    model.resize_token_embeddings(len(tokenizer.get_vocab()))
    frequencies = word_frequencies(demo_parses(300, seed=1))

    table = model_head_roles(model, tokenizer, sentences, frequencies, batch_size=16, progress=False, top_k=20,
                             min_cases=5)
    assert len(table) == 2 * 4 and set(table["attn_type"]) == {"enc_self"}
    assert table[["layer", "head"]].values.tolist() == [[layer, head] for layer in range(2) for head in range(4)]
    scores = table[["positional", "rare_word", "nsubj_dep2head", "amod_head2dep"]].to_numpy()
    assert np.isfinite(scores).all() and (scores >= 0).all() and (scores <= 1).all()
    assert set(table["positional_offset"]) <= {-1.0, 1.0}
    assert set(table["role"]) <= {"positional", "rare-word", "syntactic", "other"}
    assert table["amod_dep2head_baseline"].nunique() == 1

    # float maps: word rows hold what [CLS]/[SEP] did not take; batched equals one at a time
    maps = attention_maps(model, tokenizer, sentences[:5], batch_size=5, progress=False)["enc_self"]
    for s, m in zip(sentences[:5], maps):
        assert m.shape == (2, 4, len(s), len(s))
        assert ((m.sum(-1) > 0) & (m.sum(-1) <= 1 + 1e-5)).all()
    one = attention_maps(model, tokenizer, sentences[4:5], batch_size=1, progress=False)["enc_self"][0]
    np.testing.assert_allclose(maps[4], one, atol=1e-5)
    # against the model's own token attention, aggregated by hand
    ids, index = token_word_map(tokenizer, sentences[0].words)
    with torch.no_grad():
        token = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    token = torch.stack(token)[:, 0].numpy()  # (layers, heads, tokens, tokens)
    first = [index.index(w) for w in range(len(sentences[0]))]
    expected = np.stack([token[..., first, :][..., [t for t in range(len(ids)) if index[t] == w]].sum(-1)
                         for w in range(len(sentences[0]))], -1)
    np.testing.assert_allclose(maps[0], expected, atol=1e-5)
    argmax = attention_maps(model, tokenizer, sentences[:5], argmax=True, progress=False)["enc_self"]
    for m, a in zip(maps, argmax):
        assert (a == m.argmax(-1)).all()


def test_attention_maps_translation_encoder_and_pruned_heads(demo_bpe):
    from transformers import FSMTConfig, FSMTForConditionalGeneration

    from headprune.models.prune import prune_heads

    folder, tokenizer = demo_bpe
    torch.manual_seed(0)
    config = FSMTConfig(langs=["en", "fr"], src_vocab_size=tokenizer.src_vocab_size,
                        tgt_vocab_size=tokenizer.tgt_vocab_size, d_model=16, encoder_layers=2, decoder_layers=1,
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32,
                        max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id, bos_token_id=0,
                        eos_token_id=tokenizer.sep_token_id, dropout=0.0, attention_dropout=0.0,
                        activation_dropout=0.0, tie_word_embeddings=False)
    model = FSMTForConditionalGeneration(config).eval()
    sentences = read_conllu(parses.demo_conllu(["ze frell tazzle gorps 742 lisk.", "ak dax fims.",
                                              "ze wug blats om 17 kulp oft ond ze mip iz zint."]))
    maps = attention_maps(model, tokenizer, sentences, batch_size=2, progress=False)
    assert set(maps) == {"enc_self"}  # decoder attention gets no roles
    for s, m in zip(sentences, maps["enc_self"]):
        assert m.shape == (2, 4, len(s), len(s))
        assert ((m.sum(-1) > 0) & (m.sum(-1) < 1)).all()  # </s> keeps some weight

    prune_heads(model, {"enc_self": {0: [1, 3], 1: [0, 1, 2, 3]}})
    pruned = attention_maps(model, tokenizer, sentences, argmax=True, progress=False)["enc_self"]
    assert (pruned[0][0, [1, 3]] == -1).all() and (pruned[0][1] == -1).all()
    assert (pruned[0][0, [0, 2]] >= 0).all()
    table = head_roles(pruned, sentences, word_frequencies(sentences), top_k=5, min_cases=1)
    assert table.set_index(["layer", "head"])["role"].loc[[(0, 1), (0, 3), (1, 0), (1, 3)]].eq("pruned").all()
    assert table.set_index(["layer", "head"])["positional"].loc[[(1, 2)]].isna().all()
    assert table.set_index(["layer", "head"])["role"].loc[[(0, 0), (0, 2)]].ne("pruned").all()
