"""headprune.data.parsing: word splitting and counts, Stanza documents as CoNLL-U, and fetch_stanza against a
local HTTP server that plays the part of Stanza's resources site (no network, no real models)."""
import collections
import functools
import hashlib
import http.server
import io
import json
import threading
import zipfile

import pytest

from headprune.data import parsing
from headprune.scoring.roles import read_conllu

# ------------------------------------------------------------------------ words and counts


def test_text_words_splits_word_runs_and_single_punctuation():
    assert parsing.text_words("ak lisk welts ze norl lisk.") == ["ak", "lisk", "welts", "ze", "norl", "lisk", "."]
    # every non-space, non-word character stands alone, even in a run; spaces of any kind separate
    assert parsing.text_words("  ze,norl?!  don't\tak-lisk ") == ["ze", ",", "norl", "?", "!", "don", "'", "t",
                                                                  "ak", "-", "lisk"]
    # digits and underscores are word characters (\w), non-ASCII letters too
    assert parsing.text_words("2019 ak_47 Ökö.") == ["2019", "ak_47", "Ökö", "."]
    assert parsing.text_words("") == []
    assert parsing.text_words("   ") == []


def test_text_frequencies_counts_by_hand():
    counts = parsing.text_frequencies(["ak lisk welts ze norl lisk.", "Lisk, ze ak.", ""])
    assert isinstance(counts, collections.Counter)
    # line 1: ak lisk welts ze norl lisk .   line 2: Lisk , ze ak .   (case is kept: "Lisk" != "lisk")
    assert dict(counts) == {"ak": 2, "lisk": 2, "welts": 1, "ze": 2, "norl": 1, ".": 2, "Lisk": 1, ",": 1}
    assert sum(counts.values()) == 7 + 5
    # any iterable of lines, e.g. a generator, and no lines at all
    assert parsing.text_frequencies(line for line in ["ak ak", "ak"]) == collections.Counter({"ak": 3})
    assert parsing.text_frequencies([]) == collections.Counter()


# ------------------------------------------------------------------------ Stanza documents as CoNLL-U

SENTENCES = [
    # (word, head, deprel, upos); heads are 1-based, 0 = root
    [("ak", 2, "nsubj", "NOUN"), ("lisk", 0, "root", "VERB"), ("welts", 4, "amod", "ADJ"),
     ("norl", 2, "obj", "NOUN"), (".", 2, "punct", "PUNCT")],
    [("ze", 2, "advmod", "ADV"), ("norl", 0, "root", "VERB"), ("!", 2, "punct", "PUNCT")],
]


def stanza_document(with_text: bool):
    import stanza

    text = " ".join(" ".join(w for w, *_ in sentence) for sentence in SENTENCES)
    sentences, offset = [], 0
    for sentence in SENTENCES:
        words = []
        for number, (word, head, deprel, upos) in enumerate(sentence, 1):
            entry = {"id": number, "text": word, "head": head, "deprel": deprel, "upos": upos}
            if with_text:
                start = text.index(word, offset)
                offset = start + len(word)
                entry.update(start_char=start, end_char=offset)
            words.append(entry)
        sentences.append(words)
    return stanza.Document(sentences, text=text if with_text else None)


@pytest.mark.parametrize("with_text", [False, True])
def test_stanza_conllu_reads_back_the_words_heads_and_relations_put_in(with_text):
    conllu = parsing.stanza_conllu(stanza_document(with_text))
    parsed = read_conllu(conllu)
    assert len(parsed) == 2
    for sentence, expected in zip(parsed, SENTENCES):
        assert sentence.words == [w for w, _, _, _ in expected]
        assert sentence.heads == [h for _, h, _, _ in expected]
        assert sentence.deprels == [d for _, _, d, _ in expected]
        assert sentence.upos == [u for _, _, _, u in expected]
    assert parsed[0].comments[0] == "sent_id = 1"
    assert parsed[1].comments[0] == "sent_id = 2"
    if with_text:  # the sentence's own text: "ak lisk welts norl ." then "ze norl !"
        assert parsed[0].comments[1:] == ["text = ak lisk welts norl ."]
        assert parsed[1].comments[1:] == ["text = ze norl !"]
    else:  # no text known: no "# text =" line at all
        assert [s.comments for s in parsed] == [["sent_id = 1"], ["sent_id = 2"]]

    # CoNLL-U layout: one block per sentence, blocks separated by one empty line, file ends with one
    assert conllu.endswith("\n\n") and not conllu.endswith("\n\n\n")
    blocks = conllu.rstrip("\n").split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == ["# sent_id = 1", "# sent_id = 2"]
    token_lines = [line for line in conllu.splitlines() if line and not line.startswith("#")]
    assert len(token_lines) == 5 + 3
    assert all(len(line.split("\t")) == 10 for line in token_lines)
    assert [line.split("\t")[0] for line in token_lines] == ["1", "2", "3", "4", "5", "1", "2", "3"]


def test_stanza_conllu_of_an_empty_document_is_empty():
    import stanza

    assert parsing.stanza_conllu(stanza.Document([])) == ""


# ------------------------------------------------------------------------ fetch_stanza on a local server

class _Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, requested, **kwargs):
        self.requested = requested
        super().__init__(*args, **kwargs)

    def do_GET(self):
        self.requested.append(self.path)
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def local_site(tmp_path, monkeypatch):
    """A folder served on 127.0.0.1 by a thread; yields (base url, folder, paths requested); shut down after."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    site = tmp_path / "site"
    site.mkdir()
    requested = []
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(site), requested=requested))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", site, requested
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert not thread.is_alive()


MODEL_BYTES = {"depparse/combined.pt": b"not really a model\x00\x01\x02", "tokenize/combined.pt": b"tok" * 100}


def _publish(site, base_url, model_bytes, declared_md5=None):
    """Stanza's resources json (resources_<version>.json) naming a default.zip served from the same site, as
    stanza.download fetches them: <resources_url>/resources_<version>.json, then the json's 'url' template
    filled with lang, resources_version and filename="default.zip", checked against the json's default_md5."""
    from stanza.resources.common import DEFAULT_RESOURCES_VERSION as version

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in model_bytes.items():
            archive.writestr(name, data)
    zipped = buffer.getvalue()
    (site / "models" / "en" / version).mkdir(parents=True)
    (site / "models" / "en" / version / "default.zip").write_bytes(zipped)
    md5 = hashlib.md5(zipped).hexdigest()
    resources = {"url": base_url + "/models/{lang}/{resources_version}/{filename}",
                 "en": {"lang_name": "English", "default_md5": declared_md5 or md5}}
    (site / "stanza").mkdir()
    (site / "stanza" / f"resources_{version}.json").write_text(json.dumps(resources))
    return version, md5


def test_fetch_stanza_downloads_and_unzips_the_default_package(tmp_path, local_site):
    base_url, site, requested = local_site
    version, md5 = _publish(site, base_url, MODEL_BYTES)
    model_dir = tmp_path / "stanza_models"

    assert parsing.fetch_stanza(model_dir, lang="en", resources_url=base_url + "/stanza") == model_dir

    assert requested == [f"/stanza/resources_{version}.json", f"/models/en/{version}/default.zip"]
    for name, data in MODEL_BYTES.items():
        assert (model_dir / "en" / name).read_bytes() == data
    assert hashlib.md5((model_dir / "en" / "default.zip").read_bytes()).hexdigest() == md5
    assert json.loads((model_dir / "resources.json").read_text())["en"]["default_md5"] == md5
    # Stanza's temporary download folders are gone
    assert sorted(p.name for p in (model_dir / "en").iterdir()) == ["default.zip", "depparse", "tokenize"]


def test_fetch_stanza_refuses_a_zip_whose_md5_is_not_the_declared_one(tmp_path, local_site):
    base_url, site, requested = local_site
    version, md5 = _publish(site, base_url, MODEL_BYTES, declared_md5="0" * 32)
    model_dir = tmp_path / "stanza_models"

    with pytest.raises(ValueError, match="md5"):
        parsing.fetch_stanza(model_dir, lang="en", resources_url=base_url + "/stanza")

    assert requested == [f"/stanza/resources_{version}.json", f"/models/en/{version}/default.zip"]
    # Stanza checks the md5 after moving the download into place and before unzipping; the folder is filled
    # under a temporary name (headprune.io.atomic), deleted with the bad zip: nothing is left.
    assert not model_dir.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_fetch_stanza_of_a_language_the_resources_do_not_list_raises(tmp_path, local_site):
    from stanza.resources.common import UnknownLanguageError

    base_url, site, requested = local_site
    version, _ = _publish(site, base_url, MODEL_BYTES)
    with pytest.raises(UnknownLanguageError):
        parsing.fetch_stanza(tmp_path / "m", lang="fr", resources_url=base_url + "/stanza")
    assert requested == [f"/stanza/resources_{version}.json"]  # no model fetched
