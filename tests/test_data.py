"""headprune.data.datasets and headprune.data.glue: plain text files, sacrebleu test sets and GLUE tasks, all
served from 127.0.0.1 so that the real download code paths run without internet."""

from __future__ import annotations

import copy
import functools
import hashlib
import http.server
import io
import tarfile
import threading
import zipfile

import pytest
from sacrebleu.dataset import DATASETS

from headprune.data import glue as data
from headprune.data.datasets import MTNT_TESTSET, DataFormatError, fetch_sacrebleu_testset, read_lines, write_lines
from headprune.data.glue import GLUE_TASKS, extract_zip_members, prepare_glue_task, read_glue_split
from headprune.io.download import ChecksumError, DownloadError


class LocalServer:
    """Serves the files of one folder on 127.0.0.1 and records the requested paths."""

    def __init__(self, root):
        self.root = root
        self.requested: list[str] = []
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requested.append(self.path)
                super().do_GET()

        handler = functools.partial(Handler, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def add(self, name: str, content: bytes) -> str:
        """Publish `content` as /name; return its URL."""
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"


@pytest.fixture
def server(tmp_path):
    local = LocalServer(tmp_path / "served")
    local.root.mkdir()
    local.thread.start()
    yield local
    local.httpd.shutdown()
    local.httpd.server_close()


def sha256_of(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def make_zip(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text.encode("utf-8"))
    return buffer.getvalue()


def make_tgz(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in members.items():
            content = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def tsv(rows: list[list[str]]) -> str:
    return "".join("\t".join(row) + "\n" for row in rows)


# ---------------------------------------------------------------------------------------------
# read_lines / write_lines
# ---------------------------------------------------------------------------------------------


def test_lines_round_trip(tmp_path):
    path = tmp_path / "sub" / "lines.txt"
    lines = ["première ligne", "", "  spaces kept  ", "a\u2028b", "last"]
    assert write_lines(path, lines) == 5
    assert read_lines(path) == lines
    assert path.read_bytes().endswith(b"last\n")
    assert not list(tmp_path.glob("sub/.*tmp"))


def test_read_lines_strips_only_the_newline(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"a\r\nb \nc")
    assert read_lines(path) == ["a\r", "b ", "c"]
    path.write_bytes(b"")
    assert read_lines(path) == []


def test_write_lines_refuses_line_breaks(tmp_path):
    with pytest.raises(ValueError, match="line 2"):
        write_lines(tmp_path / "f.txt", ["ok", "not\nok"])
    assert not (tmp_path / "f.txt").exists()


# ---------------------------------------------------------------------------------------------
# GLUE
# ---------------------------------------------------------------------------------------------

MNLI_HEADER = [
    "index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
    "sentence1_parse", "sentence2_parse", "sentence1", "sentence2",
]  # fmt: skip


def mnli_row(index, sentence1, sentence2, labels):
    parses = ["( x )", "( y )", "(ROOT x)", "(ROOT y)"]
    return [str(index), "1", f"{index}n", "fiction", *parses, sentence1, sentence2, *labels]


def mnli_archive(dev_label="neutral") -> bytes:
    train = [MNLI_HEADER + ["label1", "gold_label"]]
    # Unbalanced quotes: a csv reader that honours quotes would swallow the next lines.
    train.append(mnli_row(0, 'He said "hello', "He spoke.", ["entailment", "entailment"]))
    train.append(mnli_row(1, "The cat sat.", 'No "cat" here', ["contradiction", "contradiction"]))
    train.append(mnli_row(2, "Rain fell.", "It was wet.", ["neutral", "neutral"]))
    dev_header = MNLI_HEADER + ["label1", "label2", "label3", "label4", "label5", "gold_label"]
    dev = [dev_header, mnli_row(0, "A.", "B.", ["neutral"] * 5 + ["entailment"])]
    dev.append(mnli_row(1, "C.", "D.", ["neutral"] * 5 + [dev_label]))
    mismatched = [dev_header, mnli_row(0, "E.", "F.", ["contradiction"] * 6)]
    return make_zip(
        {
            "MNLI/train.tsv": tsv(train),
            "MNLI/dev_matched.tsv": tsv(dev),
            "MNLI/dev_mismatched.tsv": tsv(mismatched),
            "MNLI/test_matched.tsv": tsv([MNLI_HEADER, mnli_row(0, "G.", "H.", [])]),
        }
    )


def local_task(name: str, url: str, sha256: str | None) -> dict:
    """The default spec of a task, pointed at the local server."""
    task = copy.deepcopy(GLUE_TASKS[name])
    task["url"] = url
    task["sha256"] = sha256
    return task


def test_mnli_like_task_with_header(server, tmp_path):
    archive = mnli_archive()
    task = local_task("MNLI", server.add("glue/MNLI.zip", archive), sha256_of(archive))
    raw_dir, out_dir = tmp_path / "raw", tmp_path / "out"

    counts = prepare_glue_task(task, raw_dir, out_dir)

    assert counts == {"train": 3, "dev": 2, "dev_mismatched": 1}
    texts, labels = read_glue_split(out_dir / "train.tsv")
    assert texts == [
        ('He said "hello', "He spoke."),
        ("The cat sat.", 'No "cat" here'),
        ("Rain fell.", "It was wet."),
    ]
    # labels: ["contradiction", "entailment", "neutral"]
    assert labels == [1, 0, 2]
    assert read_glue_split(out_dir / "dev.tsv") == ([("A.", "B."), ("C.", "D.")], [1, 2])
    assert read_glue_split(out_dir / "dev_mismatched.tsv") == ([("E.", "F.")], [0])
    assert (out_dir / "train.tsv").read_text().splitlines()[0] == "text_a\ttext_b\tlabel"
    # Only the members the task uses were extracted.
    assert (raw_dir / "MNLI.zip").exists()
    assert (raw_dir / "MNLI" / "dev_matched.tsv").exists()
    assert not (raw_dir / "MNLI" / "test_matched.tsv").exists()

    # A second run reuses the verified archive: no new request.
    prepare_glue_task(task, raw_dir, out_dir)
    assert server.requested == ["/glue/MNLI.zip"]


def test_cola_like_task_without_header(server, tmp_path):
    rows = [
        ["gj04", "1", "", "Our friends won't buy this analysis."],
        ["gj04", "0", "*", 'The "more we study verbs.'],
    ]
    archive = make_zip({"CoLA/train.tsv": tsv(rows), "CoLA/dev.tsv": tsv(rows[:1])})
    task = local_task("CoLA", server.add("CoLA.zip", archive), sha256_of(archive))

    counts = prepare_glue_task(task, tmp_path / "raw", tmp_path / "out")

    assert counts == {"train": 2, "dev": 1}
    texts, labels = read_glue_split(tmp_path / "out" / "train.tsv")
    assert texts == [("Our friends won't buy this analysis.", ""), ('The "more we study verbs.', "")]
    assert labels == [1, 0]


def test_unknown_label_names_file_line_and_value(server, tmp_path):
    archive = mnli_archive(dev_label="-")
    task = local_task("MNLI", server.add("MNLI.zip", archive), sha256_of(archive))
    with pytest.raises(DataFormatError) as caught:
        prepare_glue_task(task, tmp_path / "raw", tmp_path / "out")
    message = str(caught.value)
    assert "dev_matched.tsv" in message
    assert "line 3" in message  # header, first row, then the bad one
    assert "'-'" in message
    assert "MNLI" in message


def test_wrong_archive_sha256_fails_before_anything_is_written(server, tmp_path):
    archive = mnli_archive()
    task = local_task("MNLI", server.add("MNLI.zip", archive), "0" * 64)
    with pytest.raises(ChecksumError, match="MNLI.zip"):
        prepare_glue_task(task, tmp_path / "raw", tmp_path / "out")
    assert not (tmp_path / "raw" / "MNLI.zip").exists()
    assert not (tmp_path / "out").exists()


def test_row_with_wrong_field_count_is_reported(server, tmp_path):
    archive = make_zip({"SST-2/train.tsv": "sentence\tlabel\ngood\t1\nbad\t0\textra\n",
                        "SST-2/dev.tsv": "sentence\tlabel\n"})  # fmt: skip
    task = local_task("SST-2", server.add("SST-2.zip", archive), sha256_of(archive))
    with pytest.raises(DataFormatError, match=r"train\.tsv, line 3: 3 tab-separated fields"):
        prepare_glue_task(task, tmp_path / "raw", tmp_path / "out")


def test_missing_column_name_is_reported(server, tmp_path):
    archive = make_zip({"SST-2/train.tsv": "text\tlabel\ngood\t1\n", "SST-2/dev.tsv": ""})
    task = local_task("SST-2", server.add("SST-2.zip", archive), None)
    with pytest.raises(DataFormatError, match="no column 'sentence'"):
        prepare_glue_task(task, tmp_path / "raw", tmp_path / "out")


def test_mrpc_like_task_from_plain_files(server, tmp_path):
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    train_rows = [
        ["1", "702876", "702977", 'Amrozi accused his brother , whom he called " the witness " .',
         "Referring to him as only \" the witness \" ."],
        ["0", "2108705", "2108831", "Yucaipa owned Dominick 's .", "Yucaipa bought Dominick 's ."],
        ["1", "1330381", "1330521", "They had published an advertisement .", "On June 10 ."],
    ]  # fmt: skip
    test_rows = [["1", "1089874", "1089925", "PCCW 's chief .", "Current Chief ."]]
    # The real files start with a UTF-8 byte order mark.
    bom = "\ufeff"
    files = {
        "msr_paraphrase_train": ("senteval/msr_paraphrase_train.txt", bom + tsv([header] + train_rows)),
        "msr_paraphrase_test": ("senteval/msr_paraphrase_test.txt", bom + tsv([header] + test_rows)),
        "mrpc_dev_ids": ("glue/mrpc_dev_ids.tsv", "2108705\t2108831\r\n"),
    }
    task = copy.deepcopy(GLUE_TASKS["MRPC"])
    for key, (name, text) in files.items():
        content = text.encode("utf-8")
        task["files"][key] = {"url": server.add(name, content), "sha256": sha256_of(content)}

    counts = prepare_glue_task(task, tmp_path / "raw", tmp_path / "out")

    assert counts == {"train": 2, "dev": 1, "test": 1}
    train_texts, train_labels = read_glue_split(tmp_path / "out" / "train.tsv")
    assert train_texts[0][0].startswith("Amrozi") and train_labels == [1, 1]
    assert train_texts[1] == ("They had published an advertisement .", "On June 10 .")
    assert read_glue_split(tmp_path / "out" / "dev.tsv") == (
        [("Yucaipa owned Dominick 's .", "Yucaipa bought Dominick 's .")],
        [0],
    )
    assert read_glue_split(tmp_path / "out" / "test.tsv")[1] == [1]


def test_corrupt_mrpc_file_is_caught_by_its_sha256(server, tmp_path):
    task = copy.deepcopy(GLUE_TASKS["MRPC"])
    for key, spec in task["files"].items():
        spec["url"] = server.add(f"{key}.txt", b"not the real file\n")
    with pytest.raises(ChecksumError) as caught:
        prepare_glue_task(task, tmp_path / "raw", tmp_path / "out")
    # The real, published sha256 of the first file is what was expected.
    assert GLUE_TASKS["MRPC"]["files"]["msr_paraphrase_train"]["sha256"] in str(caught.value)


def test_archive_member_escaping_the_folder_is_refused(server, tmp_path):
    archive = make_zip({"../evil.tsv": "sentence\tlabel\nx\t1\n", "SST-2/dev.tsv": "sentence\tlabel\n"})
    task = local_task("SST-2", server.add("SST-2.zip", archive), sha256_of(archive))
    task["splits"]["train"] = "../evil.tsv"
    with pytest.raises(DataFormatError, match="refusing to extract"):
        prepare_glue_task(task, tmp_path / "raw", tmp_path / "out")
    assert not (tmp_path / "evil.tsv").exists()


@pytest.mark.parametrize(
    "member", ["../x.tsv", "a/../../x.tsv", "/etc/x.tsv", "\\x.tsv", "..\\x.tsv", "C:/x.tsv", ""]
)
def test_extract_refuses_unsafe_names(tmp_path, member):
    archive_path = tmp_path / "a.zip"
    archive_path.write_bytes(make_zip({"ok/a.tsv": "a\n"}))
    with pytest.raises(DataFormatError, match="refusing to extract"):
        extract_zip_members(archive_path, [member], tmp_path / "dest")


def test_extract_only_requested_members(tmp_path):
    archive_path = tmp_path / "a.zip"
    archive_path.write_bytes(make_zip({"T/a.tsv": "a\n", "T/b.tsv": "b\n"}))
    extracted = extract_zip_members(archive_path, ["T/a.tsv"], tmp_path / "dest")
    assert extracted == {"T/a.tsv": (tmp_path / "dest" / "T" / "a.tsv").resolve()}
    assert extracted["T/a.tsv"].read_text() == "a\n"
    assert not (tmp_path / "dest" / "T" / "b.tsv").exists()
    with pytest.raises(DataFormatError, match="no member 'T/c.tsv'"):
        extract_zip_members(archive_path, ["T/c.tsv"], tmp_path / "dest")


def test_extract_refuses_a_symlink_leading_outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "T").symlink_to(outside)
    archive_path = tmp_path / "a.zip"
    archive_path.write_bytes(make_zip({"T/a.tsv": "a\n"}))
    with pytest.raises(DataFormatError, match="refusing to extract"):
        extract_zip_members(archive_path, ["T/a.tsv"], dest)
    assert not (outside / "a.tsv").exists()


def test_task_shape_is_checked():
    task = copy.deepcopy(GLUE_TASKS["SST-2"])
    del task["labels"]
    with pytest.raises(ValueError, match="missing keys"):
        prepare_glue_task(task, "unused", "unused")
    task = copy.deepcopy(GLUE_TASKS["MRPC"])
    task["splits"]["dev"]["rows_with_ids_in"] = "nope"
    with pytest.raises(ValueError, match="split dev"):
        prepare_glue_task(task, "unused", "unused")
    task = copy.deepcopy(GLUE_TASKS["CoLA"])
    task["text_columns"] = ["sentence"]
    with pytest.raises(ValueError, match="without a header"):
        prepare_glue_task(task, "unused", "unused")


def test_default_tasks_are_well_formed():
    assert {"MNLI", "SST-2", "CoLA", "MRPC", "RTE", "QNLI"} <= GLUE_TASKS.keys()
    for name, task in GLUE_TASKS.items():
        assert task["name"] == name
        data._check_task(task)
        urls = [task.get("url")] + [spec["url"] for spec in task.get("files", {}).values()]
        for url in filter(None, urls):
            assert url.startswith("https://dl.fbaipublicfiles.com/")
        for spec in [task, *task.get("files", {}).values()]:
            if spec.get("sha256"):
                assert len(spec["sha256"]) == 64


def test_read_glue_split_rejects_other_files(tmp_path):
    path = tmp_path / "x.tsv"
    path.write_text("sentence\tlabel\n")
    with pytest.raises(DataFormatError, match="header"):
        read_glue_split(path)
    path.write_text("text_a\ttext_b\tlabel\na\tb\tx\n")
    with pytest.raises(DataFormatError, match="line 2"):
        read_glue_split(path)


# ---------------------------------------------------------------------------------------------
# sacrebleu test sets, through sacrebleu's own download and parsing code
# ---------------------------------------------------------------------------------------------


def fake_sgml(setid: str, lang: str, segments: list[str]) -> str:
    """The pre-2021 WMT 'SGML' layout that sacrebleu's FakeSGMLDataset parses."""
    lines = [f'<srcset setid="{setid}" srclang="any">', f'<doc docid="doc1" genre="news" origlang="{lang}">']
    lines += [f'<seg id="{number}">{text}</seg>' for number, text in enumerate(segments, 1)]
    lines += ["</doc>", "</srcset>"]
    return "\n".join(lines) + "\n"


def serve_testset(monkeypatch, server, testset: str, archive_name: str, members, md5=None):
    """Publish an archive and point sacrebleu's registry entry for `testset` at it."""
    content = make_tgz(members)
    url = server.add(archive_name, content)
    dataset = DATASETS[testset]
    monkeypatch.setattr(dataset, "data", [url])
    monkeypatch.setattr(dataset, "md5", [md5 or hashlib.md5(content).hexdigest()])
    return url


WMT13_EN = ["Hello  world .", "A second sentence."]
WMT13_FR = ["Bonjour le monde .", "Une deuxième phrase."]


def wmt13_members(french=WMT13_FR):
    return {
        "test/newstest2013-src.en.sgm": fake_sgml("newstest2013", "en", WMT13_EN),
        "test/newstest2013-src.fr.sgm": fake_sgml("newstest2013", "fr", french),
    }


def test_wmt_testset_end_to_end(monkeypatch, server, tmp_path):
    serve_testset(monkeypatch, server, "wmt13", "wmt13/test.tgz", wmt13_members())
    src, ref = tmp_path / "out" / "newstest2013.en", tmp_path / "out" / "newstest2013.fr"

    counts = fetch_sacrebleu_testset("wmt13", "en-fr", src, ref, cache_dir=tmp_path / "cache")

    assert counts == (2, 2)
    # sacrebleu's own cleaning collapses repeated spaces.
    assert read_lines(src) == ["Hello world .", "A second sentence."]
    assert read_lines(ref) == WMT13_FR
    assert server.requested == ["/wmt13/test.tgz"]
    assert (tmp_path / "cache" / "wmt13" / "raw" / "wmt13.test.tgz").exists()

    # Processed once: a second call reads sacrebleu's cache without downloading.
    fetch_sacrebleu_testset("wmt13", "en-fr", src, ref, cache_dir=tmp_path / "cache")
    assert server.requested == ["/wmt13/test.tgz"]


def test_wmt_testset_in_sacrebleus_default_cache(monkeypatch, server, tmp_path):
    # Without cache_dir, the registry entry's own folders are used (kept off ~/.sacrebleu here).
    serve_testset(monkeypatch, server, "wmt13", "test.tgz", wmt13_members())
    dataset = DATASETS["wmt13"]
    monkeypatch.setattr(dataset, "_outdir", str(tmp_path / "default" / "wmt13"))
    monkeypatch.setattr(dataset, "_rawdir", str(tmp_path / "default" / "wmt13" / "raw"))
    counts = fetch_sacrebleu_testset("wmt13", "en-fr", tmp_path / "s", tmp_path / "r")
    assert counts == (2, 2)
    assert (tmp_path / "default" / "wmt13" / "wmt13.en-fr.src").exists()


def test_mtnt_testset_end_to_end(monkeypatch, server, tmp_path):
    assert MTNT_TESTSET == "mtnt1.1/test"
    rows = [["0", "lol this is gr8", "mdr c'est génial"], ["1", "why tho ?", "pourquoi ?"]]
    serve_testset(
        monkeypatch, server, MTNT_TESTSET, "MTNT.1.1.tar.gz", {"MTNT/test/test.en-fr.tsv": tsv(rows)}
    )
    src, ref = tmp_path / "mtnt.en", tmp_path / "mtnt.fr"
    counts = fetch_sacrebleu_testset(MTNT_TESTSET, "en-fr", src, ref, cache_dir=tmp_path / "cache")
    assert counts == (2, 2)
    assert read_lines(src) == ["lol this is gr8", "why tho ?"]
    assert read_lines(ref) == ["mdr c'est génial", "pourquoi ?"]


def test_wrong_md5_becomes_download_error_and_archive_is_deleted(monkeypatch, server, tmp_path):
    serve_testset(monkeypatch, server, "wmt13", "test.tgz", wmt13_members(), md5="0" * 32)
    with pytest.raises(DownloadError, match="wmt13") as caught:
        fetch_sacrebleu_testset("wmt13", "en-fr", tmp_path / "s", tmp_path / "r", cache_dir=tmp_path / "c")
    assert "/test.tgz" in str(caught.value)
    # Left in place, sacrebleu would use the bad archive next time without checking it.
    assert not (tmp_path / "c" / "wmt13" / "raw" / "wmt13.test.tgz").exists()
    assert not (tmp_path / "s").exists()


def test_unreachable_testset_becomes_download_error(monkeypatch, tmp_path):
    probe = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = probe.server_address[1]
    probe.server_close()
    monkeypatch.setattr(DATASETS["wmt13"], "data", [f"http://127.0.0.1:{port}/test.tgz"])
    with pytest.raises(DownloadError, match="wmt13"):
        fetch_sacrebleu_testset("wmt13", "en-fr", tmp_path / "s", tmp_path / "r", cache_dir=tmp_path / "c")


def test_source_reference_count_mismatch_names_testset(monkeypatch, server, tmp_path):
    serve_testset(monkeypatch, server, "wmt13", "test.tgz", wmt13_members(french=WMT13_FR[:1]))
    with pytest.raises(DataFormatError, match="wmt13 en-fr: 2 source lines .* 1 reference lines"):
        fetch_sacrebleu_testset("wmt13", "en-fr", tmp_path / "s", tmp_path / "r", cache_dir=tmp_path / "c")
    assert not (tmp_path / "s").exists()


def test_unknown_testset_or_langpair():
    with pytest.raises(ValueError, match="no test set 'wmt99'"):
        fetch_sacrebleu_testset("wmt99", "en-fr", "s", "r")
    with pytest.raises(ValueError, match="no language pair 'en-xx'"):
        fetch_sacrebleu_testset("wmt13", "en-xx", "s", "r")


@pytest.mark.parametrize("testset", ["wmt09", "wmt10", "wmt11", "wmt12", "wmt13", "wmt14", MTNT_TESTSET])
def test_study_testsets_are_registered_for_en_fr(testset):
    # The names the pipeline uses exist in the pinned sacrebleu, with en-fr.
    assert "en-fr" in DATASETS[testset].langpairs


# ----------------------------------------------------------------------------------------------
# Fine-tuning batches: tokenized once, batched in each epoch's order


@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("paired", [True, False])
def test_encoded_pairs_batch_as_the_tokenizer_pads(tmp_path, padding_side, paired):
    """EncodedPairs.batches(order) equals tokenizing the examples in that order with padding=True, field for
    field (ids, attention mask, token types, labels), truncation included, on either padding side."""
    import random

    import torch
    from transformers import BertTokenizerFast

    from headprune.data.batching import EncodedPairs, classification_batches

    words = ["the", "cat", "dog", "sat", "ran", "on", "a", "mat", "far", "away", "quickly", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer = BertTokenizerFast(str(tmp_path / "vocab.txt"))
    tokenizer.padding_side = padding_side
    rng = random.Random(0)
    pairs = [(" ".join(rng.choices(words, k=rng.randint(1, 20))),
              " ".join(rng.choices(words, k=rng.randint(1, 9))) if paired else "") for _ in range(37)]
    labels = [rng.randrange(3) for _ in pairs]
    encoded = EncodedPairs(tokenizer, pairs, labels, max_length=16)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    ours = encoded.batches(order, 8)
    theirs = classification_batches(tokenizer, [pairs[i] for i in order], [labels[i] for i in order], 8, 16)
    assert len(ours) == len(theirs) == 5
    assert any(b["input_ids"].shape[1] == 16 for b in theirs)  # truncation happened somewhere
    for mine, reference in zip(ours, theirs):
        assert sorted(mine) == sorted(reference)
        for key in reference:
            assert torch.equal(mine[key], reference[key]), key
