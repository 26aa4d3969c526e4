"""IWSLT 2014 de-en preparation (fairseq's prepare-iwslt14.sh rules) on small archives of the real layout,
downloaded from a server on 127.0.0.1."""
import functools
import hashlib
import http.server
import json
import tarfile
import threading

import pytest

from headprune.data import iwslt
from headprune.data.datasets import read_lines
from headprune.io.download import ChecksumError
from headprune.models.fairseq import build_fsmt_tokenizer, read_fairseq_dict

SETS = iwslt.IWSLT14_TEST_SETS


def normal_pair(i):
    return f"Satz Nummer {i} ist Kurz und Gut .", f"Sentence Number {i} is Short and Good ."


# Pairs the cleaning must drop, and why (clean-corpus-n.perl -ratio 1.5, 1-175 tokens).
DROPPED = {
    ("", "An English sentence without a German side."): "empty",
    ("   ", "Only spaces on the German side."): "empty",
    ("Ja.", "Yes , yes , yes , of course , yes ."): "ratio",
    (" ".join(["Wort"] * 176), " ".join(["word"] * 176)): "too_long",
}


def training_pairs():
    """60 normal pairs, with the dropped ones and two that need whitespace normalization in between."""
    pairs = [normal_pair(i) for i in range(60)]
    pairs.insert(5, ("  Das   ist\tGUT.  ", "That  is good. "))
    for offset, pair in enumerate(DROPPED):
        pairs.insert(10 + 7 * offset, pair)
    pairs.insert(40, ("Er sagte: „Nein“ – 3,5 % mehr.", "He said: \"No\" – 3.5% more."))
    return pairs


def held_out_sets():
    return {name: [(f"Test {k} Satz {i} mit Apostroph’s.", f"Test {k} sentence {i} with apostrophe’s.")
                   for i in range(3 + k)] for k, name in enumerate(SETS)}


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    folder = tmp_path_factory.mktemp("upstream")
    return iwslt.write_iwslt_archive(folder / "de-en.tgz", training_pairs(), held_out_sets(), talk_size=9,
                                     extra_files={"README": "IWSLT 2014\n"})


@pytest.fixture(scope="module")
def server(archive):
    handler = functools.partial(QuietHandler, directory=str(archive.parent))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def digest(path, name):
    return hashlib.new(name, path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def prepared(archive, server, tmp_path_factory):
    root = tmp_path_factory.mktemp("prepared")
    spec = {"url": f"{server}/de-en.tgz", "sha256": digest(archive, "sha256"), "md5": digest(archive, "md5")}
    downloaded = iwslt.fetch_iwslt_archive(spec, root / "raw" / "de-en.tgz", progress=False)
    assert downloaded.read_bytes() == archive.read_bytes()
    summary = iwslt.prepare_iwslt(downloaded, root / "out", bpe_merges=60, expected_sizes={"train": 1})
    return root / "out", summary


# ----------------------------------------------------------------------------------------------


def test_archive_has_the_real_layout(archive):
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert {"de-en/train.tags.de-en.de", "de-en/train.tags.de-en.en", "de-en/README"} <= names
    for name in SETS:
        assert {f"de-en/{name}.de-en.de.xml", f"de-en/{name}.de-en.en.xml"} <= names
    again = iwslt.write_iwslt_archive(archive.parent / "again.tgz", training_pairs(), held_out_sets(), talk_size=9,
                                      extra_files={"README": "IWSLT 2014\n"})
    assert again.read_bytes() == archive.read_bytes()  # the bytes depend only on the content


def test_download_checks_both_checksums(archive, server, tmp_path):
    spec = {"url": f"{server}/de-en.tgz", "sha256": digest(archive, "sha256"), "md5": "0" * 32}
    with pytest.raises(ChecksumError, match="md5"):
        iwslt.fetch_iwslt_archive(spec, tmp_path / "de-en.tgz", progress=False)
    assert not (tmp_path / "de-en.tgz").exists()
    with pytest.raises(ChecksumError):
        iwslt.fetch_iwslt_archive({"url": f"{server}/de-en.tgz", "sha256": "0" * 64}, tmp_path / "x.tgz",
                                  progress=False)
    assert not (tmp_path / "x.tgz").exists()
    # a local path works too (how the demo and offline users point at an archive they have)
    assert iwslt.fetch_iwslt_archive({"url": str(archive)}, tmp_path / "local.tgz").read_bytes() == archive.read_bytes()


def test_tag_lines_follow_prepare_iwslt14(tmp_path):
    lines = ["<url>http://www.ted.com/talks/x.html</url>", "<keywords>talks, science</keywords>",
             "<talkid>535</talkid>", "<title>Rob Hopkins: Leben nach dem Öl</title>",
             "<description>TED Talk Subtitles and Transcript: Text</description>", "Ein Satz <url> mit Tag.",
             "Ein normaler Satz.", "", "<speaker>Rob Hopkins</speaker>"]
    assert iwslt.train_lines_from_tags(lines) == [
        "Rob Hopkins: Leben nach dem Öl", "TED Talk Subtitles and Transcript: Text", "Ein normaler Satz.", "",
        "<speaker>Rob Hopkins</speaker>"]  # fairseq's script keeps what it does not name
    xml = ('<?xml version="1.0"?>\n<doc docid="1">\n<title>T</title>\n<seg id="1"> Erster  Satz.  </seg>\n'
           '<seg id="12">It’s  the second.</seg>\n<seg id="">Leer</seg>\n</doc>\n')
    assert iwslt.segments_from_xml(xml) == ["Erster  Satz.", "It's  the second.", "Leer"]


def test_split_every_23rd_line():
    train, valid = iwslt.split_every(list(range(1, 101)), 23)
    assert valid == [23, 46, 69, 92]
    assert train == [i for i in range(1, 101) if i % 23]


def test_cleaning_rule_counts_moses_tokens():
    sources = ["Ja.", "Hallo, Welt!", "", "Ein " * 10 + ".", "x" * 1001]
    targets = ["Yes, yes, of course.", "Hello, world!", "Hi.", "A " * 15 + ".", "y"]
    kept, dropped = iwslt.clean_corpus(sources, targets, "de", "en")
    # "Ja ." 2 tokens vs "Yes , yes , of course ." 7: ratio; 11 vs 16 tokens: within 1.5
    assert kept == [1, 3]
    assert dropped == {"ratio": 1, "empty": 1, "long_word": 1}
    kept, dropped = iwslt.clean_corpus(sources, targets, "de", "en", iwslt.CleanRules(ratio=9, max_tokens=12))
    assert kept == [0, 1] and dropped == {"empty": 1, "too_long": 1, "long_word": 1}
    with pytest.raises(ValueError, match="not parallel"):
        iwslt.clean_corpus(["a"], [], "de", "en")


def test_prepared_splits(prepared):
    out, summary = prepared
    kept = [pair for pair in training_pairs() if pair not in DROPPED]
    expected = [(" ".join(s.split()).lower(), " ".join(t.split()).lower()) for s, t in kept]
    train = list(zip(read_lines(out / "train.de"), read_lines(out / "train.en")))
    valid = list(zip(read_lines(out / "valid.de"), read_lines(out / "valid.en")))
    assert valid == [pair for n, pair in enumerate(expected, start=1) if n % 23 == 0]
    assert train == [pair for n, pair in enumerate(expected, start=1) if n % 23 != 0]
    assert ("das ist gut.", "that is good.") in train  # whitespace normalized, lowercased
    assert summary["dropped"] == {"empty": 2, "ratio": 1, "too_long": 1}
    assert summary["raw_train_pairs"] == len(training_pairs())
    assert summary["sizes"] == {"train": len(train), "valid": len(valid), "test": sum(3 + k for k in range(5))}

    # test: the five sets in fairseq's order, tags removed, ’ -> ', lowercased
    sets = held_out_sets()
    expected_test = [(s.replace("’", "'").lower(), t.replace("’", "'").lower()) for name in SETS for s, t in sets[name]]
    assert list(zip(read_lines(out / "test.de"), read_lines(out / "test.en"))) == expected_test
    assert summary["test_set_sizes"] == {name: 3 + k for k, name in enumerate(SETS)}
    assert json.loads((out / "prepare.json").read_text()) == summary
    assert summary["expected_sizes"] == {"train": 1}


def test_bpe_and_dictionary_are_what_the_tokenizer_needs(prepared):
    out, summary = prepared
    codes = read_lines(out / "bpecodes")
    assert codes[0] == "#version: 0.2" and len(codes) == 1 + summary["bpe_merges"] > 1
    assert (out / "dict.de.txt").read_bytes() == (out / "dict.en.txt").read_bytes()  # joined
    tokens = read_fairseq_dict(out / "dict.de.txt")
    assert len(tokens) == summary["dictionary_size"]
    for src, tgt in (("de", "en"), ("en", "de")):
        tokenizer = build_fsmt_tokenizer(out, src, tgt)
        for line in read_lines(out / f"train.{src}") + read_lines(out / f"test.{src}"):
            # BPE was learned on exactly the words FSMTTokenizer gives it ...
            assert iwslt.moses_words(line, src) == tokenizer.moses_tokenize(tokenizer.moses_pipeline(line, src), src)
        for line in read_lines(out / f"train.{src}"):
            # ... so no training word maps to <unk> (the test sets have letters training never saw)
            assert tokenizer.unk_token_id not in tokenizer(line)["input_ids"], line


def test_mismatched_files_are_refused(tmp_path):
    archive = iwslt.write_iwslt_archive(tmp_path / "a.tgz", [("a", "b")], {"S": [("x", "y")]},
                                        extra_files={"S.de-en.en.xml": '<seg id="1">y</seg>\n<seg id="2">z</seg>\n'})
    with pytest.raises(ValueError, match="S has 1 de segments but 2 en segments"):
        iwslt.prepare_iwslt(archive, tmp_path / "out", test_sets=["S"])
    with pytest.raises(FileNotFoundError, match="IWSLT14.TED.dev2010.de-en.de.xml"):
        iwslt.prepare_iwslt(archive, tmp_path / "out")
