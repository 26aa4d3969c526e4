"""The ``headprune`` command (issue #24): help, each subcommand end to end on tiny random models saved in
tmp_path (a Llama on a text file, a BERT classifier on a GLUE-format TSV), the pipeline's CSV columns, and
bad inputs answered with a message naming them and exit status 2."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import subprocess
import sys
import traceback
from pathlib import Path

import pandas as pd
import pytest

from tolerances import within_rounding
from headprune.analyses.sweeps import ABLATION_COLUMNS, PRUNING_COLUMNS

ROOT = Path(__file__).resolve().parents[1]
IMPORTANCE_COLUMNS = ["study", "attn_type", "layer", "head", "importance", "importance_token", "importance_example",
                      "importance_batch", "fisher", "attention_gradient", "entropy", "entropy_normalized",
                      "confidence", "estimator", "normalized"]
TEXT = "the cat sat on the mat and the dog sat on the log . " * 30
WORDS = sorted(set(TEXT.split()) | {"good", "bad", "film", "plot", "very"})


def headprune_process(*args, cwd=None) -> subprocess.CompletedProcess:
    """The command as a user runs it: ``python -m headprune.cli``, a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    return subprocess.run([sys.executable, "-m", "headprune.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def headprune(*args, cwd=None) -> subprocess.CompletedProcess:
    """The command run in this process: ``headprune.cli.main``, which ``python -m headprune.cli`` and the installed
    ``headprune`` call (test_help and test_the_installed_command_is_headprune run those), with its output, its
    log lines and its exit status as a process would give them (an exception that escapes: its traceback, status
    1). In this process the imports are paid once for the file instead of once per command (about 5 s each)."""
    from headprune import cli

    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("headprune: %(message)s"))
    logger = logging.getLogger("headprune")
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.chdir(cwd or os.getcwd()):
            try:
                code = cli.main([str(arg) for arg in args])
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            except Exception:  # noqa: BLE001 (a process prints the traceback and exits 1)
                traceback.print_exc(file=err)
                code = 1
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
    return subprocess.CompletedProcess(["headprune", *map(str, args)], code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("models") / "tiny-llama"
    words = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["<unk>", *WORDS])}, "<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>").save_pretrained(folder)
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=len(WORDS) + 1, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    folder = tmp_path_factory.mktemp("models") / "tiny-bert"
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    BertTokenizer(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(vocab_size=len(WORDS) + 5, hidden_size=16, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=32)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("data")
    (where / "corpus.txt").write_text(TEXT)
    rows = [("very good film", "good plot", 1), ("bad film", "", 0), ("good film", "", 1), ("very bad plot", "", 0)] * 3
    (where / "dev.tsv").write_text("text_a\ttext_b\tlabel\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows))
    (where / "corpus.md").write_text(TEXT)
    (where / "broken.tsv").write_text("sentence\tlabel\nfine\t1\n")
    return {path.name: path for path in where.iterdir()}


def test_help():
    result = headprune_process("--help")
    assert result.returncode == 0 and all(command in result.stdout for command in ("score", "sweep", "prune"))
    for command in ("score", "sweep", "prune"):
        result = headprune(command, "--help")
        assert result.returncode == 0 and "--data" in result.stdout, result.stderr
    assert "--percent" in headprune("prune", "--help").stdout


def test_score_a_language_model(llama, data, tmp_path):
    result = headprune("score", llama, "--data", data["corpus.txt"], "--window", 16, "--out", tmp_path / "imp.csv")
    assert result.returncode == 0, result.stderr
    assert "a text corpus: language modelling" in result.stderr
    table = pd.read_csv(tmp_path / "imp.csv")
    assert table.columns.tolist() == IMPORTANCE_COLUMNS and len(table) == 8
    assert set(table.study) == {"tiny-llama"} and set(table.attn_type) == {"dec_self"}


def test_sweep_a_classifier(bert, data, tmp_path):
    result = headprune("sweep", bert, "--data", data["dev.tsv"], "--resamples", 50, "--out", tmp_path / "abl.csv")
    assert result.returncode == 0, result.stderr
    assert "a GLUE-format TSV, 12 examples: classification" in result.stderr
    table = pd.read_csv(tmp_path / "abl.csv")
    assert table.columns.tolist() == list(ABLATION_COLUMNS) and len(table) == 4
    assert set(table.metric) == {"accuracy"} and table.p_ttest.notna().all() and table.p_bootstrap.between(0, 1).all()


def test_sweep_a_language_model_matches_the_api(llama, data, tmp_path):
    import headprune as hp

    assert headprune("sweep", llama, "--data", data["corpus.txt"], "--window", 16, "--resamples", 50, "--study", "s",
                     "--out", tmp_path / "abl.csv").returncode == 0
    model, tokenizer = hp.load_model(llama)
    expected = hp.single_head_sweep(model, tokenizer, hp.evalset_from_text(tokenizer, TEXT, 16), resamples=50,
                                    study="s", testset="corpus (16-token windows)")
    expected.to_csv(tmp_path / "api.csv", index=False)
    assert (tmp_path / "abl.csv").read_text() == (tmp_path / "api.csv").read_text()


def test_prune_by_percent_writes_the_model_and_the_curve(llama, data, tmp_path):
    import headprune as hp

    out = tmp_path / "pruned"
    result = headprune("prune", llama, "--data", data["corpus.txt"], "--window", 16, "--percent", 25, "--step", 25,
                       "--criterion", "entropy_low", "--out", out)
    assert result.returncode == 0, result.stderr
    curve = pd.read_csv(out / "pruning.csv")
    assert curve.columns.tolist() == list(PRUNING_COLUMNS)
    assert curve.percent_pruned.tolist() == [0, 25, 50, 75, 100] and curve.heads_left.tolist() == [8, 6, 4, 2, 0]
    assert set(curve.order) == {"entropy_low"} and set(curve.metric) == {"perplexity"}
    model, _ = hp.load_model(out)
    assert len(hp.all_heads(model)) == 8  # the original shape, two heads physically gone:
    assert sum(len(heads) for heads in model.config.headprune_pruned_heads["dec_self"].values()) == 2


def test_prune_named_heads_of_a_classifier(bert, data, tmp_path):
    import headprune as hp

    out = tmp_path / "pruned"
    result = headprune("prune", bert, "--data", data["dev.tsv"], "--heads", "0-1,enc_self-1-0", "--out", out)
    assert result.returncode == 0, result.stderr
    assert not (out / "pruning.csv").exists()
    model, _ = hp.load_model(out)
    assert model.config.headprune_pruned_heads == {"enc_self": {"0": [1], "1": [0]}}


def removed_in_card(folder) -> list[tuple[str, int, int]]:
    """The heads the model card's table lists as removed."""
    rows = re.findall(r"^\| .* \((\w+)\) \| (\d+) \| \d+ of \d+ \| ([\d, ]+) \|$", (folder / "README.md").read_text(),
                      re.MULTILINE)
    return [(t, int(layer), int(h)) for t, layer, heads in rows for h in heads.split(", ")]


def test_prune_with_a_uniform_layout_writes_a_stock_checkpoint(llama, data, tmp_path):
    """--layout uniform (#46): one whole key/value group off every layer (the Llama has 4 query heads on 2 kv heads
    a layer), the curve one group a layer a step, and a folder of transformers' own LlamaForCausalLM that loads
    without remote code and computes the full model with those heads gated off."""
    import torch
    from transformers import AutoModelForCausalLM

    import headprune as hp

    out = tmp_path / "stock"
    result = headprune("prune", llama, "--data", data["corpus.txt"], "--window", 16, "--percent", 50, "--layout",
                       "uniform", "--criterion", "entropy_low", "--out", out)
    assert result.returncode == 0, result.stderr
    curve = pd.read_csv(out / "pruning.csv")
    assert set(curve.layout) == {"uniform"} and curve.heads_left.tolist() == [8, 4, 0]
    assert not list(out.glob("*.py")) and "auto_map" not in (out / "config.json").read_text()
    card = (out / "README.md").read_text()
    assert "layout: uniform" in card and "trust_remote_code" not in card and "- pruning curve: cut at 50%" in card
    removed = removed_in_card(out)
    groups = {(layer, h // 2) for _, layer, h in removed}  # kv head h // 2: both its query heads gone, one a layer
    assert len(removed) == 4 and len(groups) == 2 and {layer for layer, _ in groups} == {0, 1}
    stock = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=False).eval()
    assert type(stock).__module__.startswith("transformers.") and stock.config.num_attention_heads == 2
    full, _ = hp.load_model(llama)
    ids = torch.tensor([[1, 5, 9, 3, 7, 2, 4]])
    with torch.no_grad(), hp.gated(full, hp.gates_without(full, removed)):
        expected = full(input_ids=ids).logits
    with torch.no_grad():
        assert within_rounding(stock(input_ids=ids).logits, expected)


def test_prune_with_a_free_layout_says_so_in_its_card(llama, data, tmp_path):
    out = tmp_path / "free"
    result = headprune("prune", llama, "--data", data["corpus.txt"], "--heads", "0-1,0-2,1-3", "--out", out)
    assert result.returncode == 0, result.stderr
    card = (out / "README.md").read_text()
    assert "- layout: free (each layer keeps its own heads): loads as remote code" in card
    assert "trust_remote_code=True" in card and "auto_map" in (out / "config.json").read_text()


def test_a_layout_of_its_own_is_a_choice_and_writes_its_own_card_line(llama, data, tmp_path, monkeypatch):
    """A layout is one class (headprune.analyses.layouts): registered, --layout takes it and the card says its line."""
    from headprune.analyses.layouts import LAYOUTS, Free

    class Toy(Free):
        paper, word = False, "toy"

        def card_line(self, same_size=False):
            return "- layout: toy (the layout of tests/test_cli.py)"

    monkeypatch.setitem(LAYOUTS, "toy", Toy())
    out = tmp_path / "toy"
    result = headprune("prune", llama, "--data", data["corpus.txt"], "--heads", "0-1", "--layout", "toy", "--out", out)
    assert result.returncode == 0, result.stderr
    assert "- layout: toy (the layout of tests/test_cli.py)" in (out / "README.md").read_text()


def test_a_uniform_layout_of_a_class_that_derives_the_head_size_is_saved_same_size(bert, data, tmp_path):
    """BERT cannot hold fewer heads of the same size in its own class (#46): --layout uniform saves it at its
    original size with the removed heads' weights zeroed, says so in its log and card, and computes the pruned
    model without remote code."""
    import torch
    from transformers import AutoModelForSequenceClassification

    import headprune as hp

    out = tmp_path / "same-size"
    result = headprune("prune", bert, "--data", data["dev.tsv"], "--heads", "0-1,1-0", "--layout", "uniform",
                       "--out", out)
    assert result.returncode == 0, result.stderr
    assert "--layout uniform: no smaller stock checkpoint (BertSelfAttention derives its head size" in result.stderr
    assert ("saved a same-size one instead, the same size as the original: every head kept in place, 2 of 4 heads' "
            "weights zeroed (they contribute nothing), so it computes the pruned model but gives no speed or memory "
            "gain") in result.stderr, result.stderr
    assert not list(out.glob("*.py")) and "auto_map" not in (out / "config.json").read_text()
    card = (out / "README.md").read_text()
    assert "same-size stock checkpoint" in card and "trust_remote_code" not in card
    assert "a smaller stock export needs a family whose config holds head_dim" in card
    stock = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=False).eval()
    assert type(stock).__module__.startswith("transformers.") and stock.config.num_attention_heads == 2
    full, _ = hp.load_model(bert)
    ids = torch.tensor([[2, 7, 9, 11, 3]])
    with torch.no_grad(), hp.gated(full, hp.gates_without(full, [("enc_self", 0, 1), ("enc_self", 1, 0)])):
        expected = full(input_ids=ids).logits
    with torch.no_grad():
        assert within_rounding(stock(input_ids=ids).logits, expected)


def test_a_free_layout_with_stock_is_saved_same_size(llama, data, tmp_path):
    """--stock: a free layout (a partial key/value group here) as transformers' own class, every head in place."""
    import torch
    from transformers import AutoModelForCausalLM

    import headprune as hp

    out = tmp_path / "free-stock"
    result = headprune("prune", llama, "--data", data["corpus.txt"], "--heads", "0-1,0-2,1-3", "--stock", "--out", out)
    assert result.returncode == 0, result.stderr
    assert ("--stock: saved a same-size stock checkpoint, the same size as the original: every head kept in place, 3 "
            "of 8 heads' weights zeroed") in result.stderr and "no speed or memory gain" in result.stderr
    assert not list(out.glob("*.py")) and "auto_map" not in (out / "config.json").read_text()
    card = (out / "README.md").read_text()
    assert "- layout: free (each layer keeps its own heads): a same-size stock checkpoint" in card
    assert "trust_remote_code" not in card
    stock = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=False).eval()
    assert stock.config.num_attention_heads == 4 and stock.config.num_key_value_heads == 2
    full, _ = hp.load_model(llama)
    ids = torch.tensor([[1, 5, 9, 3, 7, 2, 4]])
    with torch.no_grad(), hp.gated(full, hp.gates_without(full, [("dec_self", 0, 1), ("dec_self", 0, 2),
                                                                 ("dec_self", 1, 3)])):
        expected = full(input_ids=ids).logits
    with torch.no_grad():
        assert within_rounding(stock(input_ids=ids).logits, expected)


@pytest.mark.parametrize("model, heads, message", [
    ("llama", "0-0,0-1", "dec_self layers keep different head counts (layer 0: 2 on 1 kv, layer 1: 4 on 2 kv)"),
    ("llama", "0-0,1-0", "layer 0 keeps 3 query heads on 2 key/value heads unevenly"),
])
def test_a_uniform_layout_the_model_cannot_hold_is_named(model, heads, message, llama, bert, data, tmp_path):
    folder, text = {"llama": (llama, data["corpus.txt"]), "bert": (bert, data["dev.tsv"])}[model]
    result = headprune("prune", folder, "--data", text, "--heads", heads, "--layout", "uniform",
                       "--out", tmp_path / "o")
    assert result.returncode == 2 and "headprune: error: --layout uniform: a pruned" in result.stderr, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, message", [
    (["score", "{llama}", "--data", "missing.tsv"], "headprune: error: --data missing.tsv: no such file"),
    (["score", "{llama}", "--data", "{corpus.md}"], "cannot tell its format from the extension"),
    (["sweep", "{bert}", "--data", "{broken.tsv}"], "expected the header"),
    (["score", "./no-such-model", "--data", "{corpus.txt}"], "MODEL ./no-such-model: cannot load it"),
    (["prune", "{llama}", "--data", "{corpus.txt}", "--heads", "0-x", "--out", "o"], "argument --heads: '0-x' is not"),
    (["prune", "{llama}", "--data", "{corpus.txt}", "--heads", "5-0", "--out", "o"], "has 2 layers x 4 heads"),
    (["prune", "{llama}", "--data", "{corpus.txt}", "--percent", "150", "--out", "o"], "argument --percent: 150 is not"),
    (["prune", "{llama}", "--data", "{corpus.txt}", "--percent", "10", "--heads", "0-1", "--out", "o"], "not allowed"),
    (["prune", "{llama}", "--data", "{corpus.txt}", "--percent", "10", "--criterion", "best", "--out", "o"],
     "--criterion best: unknown"),
    (["prune", "{llama}", "--data", "{corpus.txt}", "--percent", "10"], "the following arguments are required: --out"),
    (["score", "{llama}", "--data", "{corpus.txt}", "--window", "5000"], "fewer than one window of 5000"),
])
def test_bad_input_is_named_with_exit_status_2(args, message, llama, bert, data, tmp_path):
    paths = {"{llama}": llama, "{bert}": bert, **{"{" + name + "}": path for name, path in data.items()}}
    result = headprune(*(paths.get(arg, arg) for arg in args), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_bad_input_ends_the_process_with_status_2():
    result = headprune_process("prune", "model", "--data", "corpus.txt", "--percent", "150", "--out", "o")
    assert result.returncode == 2 and "argument --percent: 150 is not" in result.stderr, result.stderr


def test_the_installed_command_is_headprune():
    """`pip install -e .` puts the `headprune` command beside the Python that installed it (pyproject's
    [project.scripts]); CI installs the package fresh, so there it runs."""
    command = Path(sys.executable).with_name("headprune")
    if not command.exists():
        pytest.skip("headprune is not installed in this environment (pip install -e .)")
    result = subprocess.run([str(command), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "prune" in result.stdout, result.stderr


@pytest.fixture(scope="module")
def whisper(tmp_path_factory) -> Path:
    """A tiny Whisper with tiny.en's head counts: 4 layers of 6 heads per stack (24 + 24 + 24 = 72 heads)."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    folder = tmp_path_factory.mktemp("models") / "tiny-whisper"
    torch.manual_seed(0)
    WhisperForConditionalGeneration(WhisperConfig(
        vocab_size=64, num_mel_bins=8, d_model=24, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
        decoder_attention_heads=6, encoder_ffn_dim=32, decoder_ffn_dim=32, max_source_positions=16,
        max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
    )).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("command", [["score"], ["prune", "--percent", "10", "--out", "o"]])
def test_a_speech_encoder_decoder_given_text_is_refused_not_cut_to_its_decoder(command, whisper, data, tmp_path):
    """A text corpus would load WhisperForCausalLM, the decoder alone (its 4 x 6 self-attention heads of the 72): one
    line names the class, what would have been scored, and nothing is written."""
    result = headprune(command[0], whisper, "--data", data["corpus.txt"], *command[1:], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("headprune: error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    for words in ("WhisperForConditionalGeneration is a speech encoder-decoder", "WhisperForCausalLM",
                  "its decoder alone (24 of its 72 heads"):
        assert words in errors[0], errors[0]
    assert "WhisperForCausalLM, " not in result.stderr.replace(errors[0], "")  # nothing was loaded before
    assert not (tmp_path / "o").exists()
