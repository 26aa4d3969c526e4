"""Tests for headprune.models.fairseq: reading/writing fairseq translation checkpoints via FSMT.

Tiny fairseq-format checkpoints are built from scratch (random weights in fairseq's own
parameter names, tests/fairseq_reference.py), and FSMT's output is checked against an
independent plain-torch forward pass written from fairseq's transformer equations.
"""

import argparse
import io
import os
import pickle
import subprocess
import tarfile

import numpy
import pytest
import torch
from transformers import FSMTConfig, FSMTForConditionalGeneration

from fairseq_reference import (BPECODES_TEXT, D_MODEL, EN_TOKENS, EOS, FFN, FR_TOKENS, HEADS, JOINED_TOKENS, LAYERS, UNK,
                               PAD, SPECIALS, assert_matches_reference, fairseq_args, padded_batch,
                               random_fairseq_state, reference_ids, write_fairseq_folder)
from headprune.models import fairseq as fs


@pytest.fixture(scope="module")
def old_style_folder(tmp_path_factory):
    """Like the 2018 wmt14 checkpoint: joined dict, shared embeddings, fused in_proj,
    layer_norms.N names, fp16 weights, torch's pre-1.6 file format, a numpy value in extra_state."""
    vocab = len(SPECIALS) + len(JOINED_TOKENS)
    state = random_fairseq_state(vocab, vocab, naming="old", share_all=True, dtype=torch.float16)
    return write_fairseq_folder(
        tmp_path_factory.mktemp("old") / "wmt-tiny.joined-dict.transformer", fairseq_args(), state,
        JOINED_TOKENS, JOINED_TOKENS, legacy_format=True, extra_state={"val_loss": numpy.float64(3.25)},
    )


@pytest.fixture(scope="module")
def new_style_folder(tmp_path_factory):
    """Newer naming: separate q/k/v, named norms, separate vocabularies and output projection, gelu."""
    src_vocab, tgt_vocab = len(SPECIALS) + len(EN_TOKENS), len(SPECIALS) + len(FR_TOKENS)
    state = random_fairseq_state(src_vocab, tgt_vocab, naming="new", share_all=False, seed=1)
    args = fairseq_args(share_all_embeddings=False, share_decoder_input_output_embed=False,
                        activation_fn="gelu", activation_dropout=0.0)
    return write_fairseq_folder(tmp_path_factory.mktemp("new") / "model", args, state, EN_TOKENS, FR_TOKENS)



# ----------------------------------------------------------------------------------------------
# Conversion against the reference


def test_old_style_checkpoint_matches_fairseq_reference(old_style_folder):
    model, _ = fs.load_fairseq_translation_model(old_style_folder)
    assert not model.training and model.dtype == torch.float32
    # share_all_embeddings: one tied matrix for source, target and output projection.
    inner = model.model
    assert inner.encoder.embed_tokens.weight is inner.decoder.embed_tokens.weight
    assert inner.decoder.output_projection.weight is inner.decoder.embed_tokens.weight
    assert_matches_reference(old_style_folder, model)


def test_new_style_checkpoint_matches_fairseq_reference(new_style_folder):
    model, tokenizer = fs.load_fairseq_translation_model(new_style_folder)
    assert model.config.activation_function == "gelu"
    assert model.config.src_vocab_size == 4 + len(EN_TOKENS)
    assert model.config.tgt_vocab_size == 4 + len(FR_TOKENS)
    assert not torch.equal(model.model.decoder.output_projection.weight, model.model.decoder.embed_tokens.weight)
    assert_matches_reference(new_style_folder, model)


def test_tokenizer_matches_moses_bpe_dictionary_reference(old_style_folder, new_style_folder):
    _, tokenizer = fs.load_fairseq_translation_model(old_style_folder)
    for text in ["the cat sat on the mat.", "The dog's hat isn't red!", "quiz the cat, tapis?"]:
        assert tokenizer(text)["input_ids"] == reference_ids(text, "en", JOINED_TOKENS)
    assert UNK in tokenizer("quiz")["input_ids"]

    _, tokenizer = fs.load_fairseq_translation_model(new_style_folder)
    text = "the cat sat on the mat."
    assert tokenizer(text)["input_ids"] == reference_ids(text, "en", EN_TOKENS)
    # Decoding uses the TARGET dictionary and undoes BPE and Moses (including the escaping).
    french = "le chat est sur le tapis."
    generated = [EOS] + reference_ids(french, "fr", FR_TOKENS)  # as generate() returns them
    assert tokenizer.decode(generated, skip_special_tokens=True) == french
    french = "c'est le chat."
    assert tokenizer.decode(reference_ids(french, "fr", FR_TOKENS), skip_special_tokens=True) == french


def test_target_tokenizer_uses_target_moses_rules_and_dictionary(new_style_folder):
    _, source_tokenizer = fs.load_fairseq_translation_model(new_style_folder)
    target_tokenizer = fs.build_target_tokenizer(new_style_folder)
    french = "l'homme est sur le tapis."
    assert target_tokenizer(french)["input_ids"] == reference_ids(french, "fr", FR_TOKENS)
    assert source_tokenizer(french)["input_ids"] != reference_ids(french, "fr", FR_TOKENS)


def test_loaded_model_translates_end_to_end(old_style_folder):
    model, tokenizer = fs.load_fairseq_translation_model(old_style_folder)
    batch = tokenizer(["the cat sat on the mat.", "the dog"], return_tensors="pt", padding=True)
    output = model.generate(**batch, num_beams=5, max_length=10)
    assert output[:, 0].eq(EOS).all()  # fairseq and FSMT start decoding from </s>
    assert all(isinstance(t, str) for t in tokenizer.batch_decode(output, skip_special_tokens=True))


# ----------------------------------------------------------------------------------------------
# Writing and round trip


def tiny_fsmt_model(seed=0, tie=True, src_vocab=None, tgt_vocab=None):
    torch.manual_seed(seed)
    vocab = 4 + len(JOINED_TOKENS)
    config = FSMTConfig(
        langs=["en", "fr"], src_vocab_size=src_vocab or vocab, tgt_vocab_size=tgt_vocab or vocab,
        d_model=D_MODEL, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, max_position_embeddings=64,
        tie_word_embeddings=tie, dropout=0.1, init_std=0.3,
    )
    return FSMTForConditionalGeneration(config).eval()


def test_round_trip_through_tarball(tmp_path):
    model = tiny_fsmt_model()
    bpecodes = tmp_path / "codes"
    bpecodes.write_text(BPECODES_TEXT)
    tar_path = fs.write_fairseq_tarball(
        model, JOINED_TOKENS, JOINED_TOKENS, bpecodes, tmp_path / "out" / "tiny.tar.bz2", "tiny.joined-dict.transformer"
    )

    # The archive has the real distribution's layout.
    with tarfile.open(tar_path, "r:bz2") as archive:
        names = set(archive.getnames())
    assert names == {"tiny.joined-dict.transformer"} | {
        f"tiny.joined-dict.transformer/{n}" for n in ("model.pt", "dict.en.txt", "dict.fr.txt", "bpecodes")
    }

    loaded, tokenizer = fs.load_fairseq_translation_model(tar_path)
    src = padded_batch([[9, 14, 30, 22, 7, EOS], [40, 11, EOS]])
    prev = padded_batch([[EOS, 9, 5, 17, 23, 8], [EOS, 60, 6]])
    with torch.no_grad():
        before = model(input_ids=src, attention_mask=src.ne(PAD), decoder_input_ids=prev, use_cache=False).logits
        after = loaded(input_ids=src, attention_mask=src.ne(PAD), decoder_input_ids=prev).logits
    assert torch.equal(before, after)
    generate = dict(attention_mask=src.ne(PAD), num_beams=5, max_length=12)
    assert torch.equal(model.generate(src, **generate), loaded.generate(src, **generate))

    # The tarball was extracted once, next to it, and is reused.
    extracted = tmp_path / "out" / "tiny.extracted" / "tiny.joined-dict.transformer"
    assert (extracted / "model.pt").is_file()
    again, _ = fs.load_fairseq_translation_model(tar_path)
    assert torch.equal(again.model.encoder.embed_tokens.weight, loaded.model.encoder.embed_tokens.weight)


def test_written_checkpoint_uses_real_fairseq_format(tmp_path):
    model = tiny_fsmt_model()
    bpecodes = tmp_path / "codes"
    bpecodes.write_text(BPECODES_TEXT)
    folder = fs.write_fairseq_checkpoint_dir(
        model, [(t, 7) for t in JOINED_TOKENS], JOINED_TOKENS, bpecodes, tmp_path / "ckpt"
    )
    checkpoint = torch.load(folder / "model.pt", weights_only=False)
    args, state = checkpoint["args"], checkpoint["model"]
    assert isinstance(args, argparse.Namespace)
    assert args.share_all_embeddings and not args.encoder_normalize_before and args.encoder_embed_dim == D_MODEL
    assert args.encoder_attention_heads == HEADS and args.decoder_ffn_embed_dim == FFN
    assert "encoder.layers.0.self_attn.in_proj_weight" in state
    assert state["encoder.layers.0.self_attn.in_proj_weight"].shape == (3 * D_MODEL, D_MODEL)
    assert "decoder.layers.1.encoder_attn.in_proj_bias" in state
    assert "encoder.layers.1.layer_norms.1.weight" in state and "decoder.layers.0.layer_norms.2.bias" in state
    assert {"encoder.version", "decoder.version", "encoder.embed_positions._float_tensor"} <= set(state)
    assert not any("q_proj" in name or "self_attn_layer_norm" in name for name in state)
    assert "decoder.embed_out" not in state
    assert state["encoder.embed_tokens.weight"].data_ptr() == state["decoder.embed_tokens.weight"].data_ptr()
    assert (folder / "dict.en.txt").read_text().splitlines()[0] == f"{JOINED_TOKENS[0]} 7"
    assert (folder / "dict.fr.txt").read_text().splitlines()[0] == f"{JOINED_TOKENS[0]} 1"
    assert (folder / "bpecodes").read_text() == BPECODES_TEXT


def test_round_trip_untied_model_with_separate_vocabularies(tmp_path):
    model = tiny_fsmt_model(tie=False, src_vocab=4 + len(EN_TOKENS), tgt_vocab=4 + len(FR_TOKENS))
    bpecodes = tmp_path / "codes"
    bpecodes.write_text(BPECODES_TEXT)
    folder = fs.write_fairseq_checkpoint_dir(model, EN_TOKENS, FR_TOKENS, bpecodes, tmp_path / "ckpt",
                                             layer_norm_style="new")
    state = torch.load(folder / "model.pt", weights_only=False)["model"]
    assert "decoder.embed_out" in state and "encoder.layers.0.final_layer_norm.weight" in state
    loaded, _ = fs.load_fairseq_translation_model(folder)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name


def test_dict_tokens_survive_fsmt_vocab_round_trip(tmp_path):
    vocab = fs.fsmt_vocab_from_fairseq_dict(JOINED_TOKENS)
    assert vocab["<pad>"] == PAD and vocab["c"] == 4 + JOINED_TOKENS.index("c@@")
    assert vocab["c</w>"] == 4 + JOINED_TOKENS.index("c")
    assert fs.fairseq_dict_tokens_from_fsmt_vocab(vocab) == JOINED_TOKENS
    # ... also from a tokenizer's own vocabulary, as the demo does.
    folder = tmp_path / "m"
    folder.mkdir()
    fs.write_fairseq_dict(folder / "dict.en.txt", EN_TOKENS)
    fs.write_fairseq_dict(folder / "dict.fr.txt", FR_TOKENS)
    (folder / "bpecodes").write_text(BPECODES_TEXT)
    tokenizer = fs.build_fsmt_tokenizer(folder, tokenizer_dir=tmp_path / "hf")
    assert (tmp_path / "hf" / "merges.txt").read_text().splitlines()[0] == "t h"
    assert fs.fairseq_dict_tokens_from_fsmt_vocab(tokenizer.get_src_vocab()) == EN_TOKENS
    target_vocab = {token: index for index, token in tokenizer.decoder.items()}  # decoder is id -> token
    assert fs.fairseq_dict_tokens_from_fsmt_vocab(target_vocab) == FR_TOKENS


def test_writer_refuses_dictionary_of_wrong_size(tmp_path):
    bpecodes = tmp_path / "codes"
    bpecodes.write_text(BPECODES_TEXT)
    with pytest.raises(ValueError, match="dict.fr.txt"):
        fs.write_fairseq_checkpoint_dir(tiny_fsmt_model(), JOINED_TOKENS, JOINED_TOKENS[:-1], bpecodes, tmp_path / "c")


# ----------------------------------------------------------------------------------------------
# Refusing unsafe checkpoints


def malicious_payloads(marker):
    """Objects whose unpickling would create `marker` through three different globals."""

    class SystemCall:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    class Eval:
        def __reduce__(self):
            return (eval, (f"open({str(marker)!r}, 'w').close()",))

    class Subprocess:
        def __reduce__(self):
            return (subprocess.call, (["touch", str(marker)],))

    return {"system": SystemCall(), "eval": Eval(), "subprocess.call": Subprocess()}


@pytest.mark.parametrize("payload", ["system", "eval", "subprocess.call"])
@pytest.mark.parametrize("file_format", ["torch-zip", "torch-legacy", "pickle-protocol-2", "pickle-protocol-5"])
def test_malicious_checkpoint_is_refused_and_runs_nothing(tmp_path, payload, file_format):
    marker = tmp_path / "pwned"
    evil = malicious_payloads(marker)[payload]
    checkpoint = {"args": argparse.Namespace(arch="transformer", hidden=evil), "model": {"w": torch.ones(2)}}
    path = tmp_path / "model.pt"
    if file_format == "torch-zip":
        torch.save(checkpoint, path)
    elif file_format == "torch-legacy":
        torch.save(checkpoint, path, _use_new_zipfile_serialization=False)
    else:
        with open(path, "wb") as out:
            pickle.dump(checkpoint, out, protocol=int(file_format[-1]))

    with pytest.raises(fs.UnsafeCheckpointError) as caught:
        fs.safe_load_checkpoint(path)
    message = str(caught.value)
    assert str(path) in message
    assert payload in message
    assert not marker.exists()


def test_loader_refuses_malicious_model_folder(tmp_path, old_style_folder):
    marker = tmp_path / "pwned"
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("dict.en.txt", "dict.fr.txt", "bpecodes"):
        (folder / name).write_bytes((old_style_folder / name).read_bytes())
    torch.save({"args": fairseq_args(), "model": {}, "extra_state": malicious_payloads(marker)["system"]},
               folder / "model.pt")
    with pytest.raises(fs.UnsafeCheckpointError, match="system"):
        fs.load_fairseq_translation_model(folder)
    assert not marker.exists()


def test_safe_checkpoint_loads_with_namespace_and_numpy(old_style_folder):
    checkpoint = fs.safe_load_checkpoint(old_style_folder / "model.pt")
    assert isinstance(checkpoint["args"], argparse.Namespace)
    assert checkpoint["extra_state"]["val_loss"] == 3.25
    assert checkpoint["model"]["encoder.embed_tokens.weight"].dtype == torch.float16


# ----------------------------------------------------------------------------------------------
# Refusing unsafe archives


def make_tarball(path, members, mode="w:gz"):
    """members: (name, kind, payload) with kind file/dir/symlink/hardlink/chardev."""
    with tarfile.open(path, mode) as archive:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            data = None
            if kind == "file":
                data = payload.encode()
                info.size = len(data)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, payload
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, payload
            elif kind == "chardev":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    "bad_member, reason",
    [
        (("{outside}/evil.txt", "file", "x"), "absolute path"),
        (("../evil.txt", "file", "x"), ".."),
        (("model/../../evil.txt", "file", "x"), ".."),
        (("model/link", "symlink", "../../evil.txt"), "outside"),
        (("model/link", "symlink", "{outside}/evil.txt"), "absolute"),
        (("model/hard", "hardlink", "../evil.txt"), "outside"),
        (("model/hard", "hardlink", "{outside}/evil.txt"), "outside"),
        (("model/null", "chardev", None), "device"),
    ],
)
def test_malicious_tarball_is_refused_and_writes_nothing(tmp_path, bad_member, reason):
    outside = tmp_path / "outside"
    outside.mkdir()
    name, kind, payload = bad_member
    name = name.format(outside=outside)
    payload = payload.format(outside=outside) if payload else payload
    tar_path = make_tarball(tmp_path / "evil.tar.gz", [
        ("model", "dir", None), ("model/model.pt", "file", "weights"), (name, kind, payload),
        ("model/after.txt", "file", "later member"),
    ])
    dest = tmp_path / "dest"
    with pytest.raises(ValueError) as caught:
        fs.safe_extract(tar_path, dest)
    assert str(tar_path) in str(caught.value) and name in str(caught.value) and reason in str(caught.value)
    assert files_under(outside) == []
    assert not dest.exists() or files_under(dest) == []
    assert not (tmp_path / "evil.txt").exists()


def test_paths_through_archived_symlinks_are_refused(tmp_path):
    # "l1" -> "." looks harmless, and "l1/l2" -> ".." looks like it stays inside when resolved
    # by name, but on disk l2 would land in dest and point at dest's parent.
    tar_path = make_tarball(tmp_path / "trick.tar", [
        ("l1", "symlink", "."), ("l1/l2", "symlink", ".."), ("l1/l2/evil.txt", "file", "x"),
    ], mode="w")
    with pytest.raises(ValueError, match="through the symlink"):
        fs.safe_extract(tar_path, tmp_path / "dest")
    assert not (tmp_path / "evil.txt").exists()


def test_good_tarballs_extract(tmp_path):
    tar_path = make_tarball(tmp_path / "ok.tar.bz2", [
        ("folder", "dir", None), ("folder/model.pt", "file", "w"), ("folder/sub/dict.en.txt", "file", "a 1\n"),
        ("folder/alias", "symlink", "model.pt"),
    ], mode="w:bz2")
    folder = fs.safe_extract(tar_path, tmp_path / "dest")
    assert folder == tmp_path / "dest" / "folder"
    assert (folder / "sub" / "dict.en.txt").read_text() == "a 1\n"
    assert (folder / "alias").read_text() == "w"

    flat = make_tarball(tmp_path / "flat.tar", [("a.txt", "file", "a"), ("b.txt", "file", "b")], mode="w")
    assert fs.safe_extract(flat, tmp_path / "flat") == tmp_path / "flat"


# ----------------------------------------------------------------------------------------------
# Clear errors


def copy_folder(source, destination, skip=()):
    destination.mkdir()
    for path in source.iterdir():
        if path.is_file() and path.name not in skip:
            (destination / path.name).write_bytes(path.read_bytes())
    return destination


def test_missing_dictionary_file_is_named(tmp_path, old_style_folder):
    folder = copy_folder(old_style_folder, tmp_path / "m", skip={"dict.fr.txt"})
    with pytest.raises(FileNotFoundError, match=r"dict\.fr\.txt"):
        fs.load_fairseq_translation_model(folder)
    with pytest.raises(FileNotFoundError, match="not a fairseq model folder or tarball"):
        fs.load_fairseq_translation_model(tmp_path / "nothing-here")


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"encoder_normalize_before": True}, "encoder_normalize_before=True and decoder_normalize_before=False"),
        ({"decoder_normalize_before": True}, "mixes pre-norm and post-norm"),
        ({"encoder_learned_pos": True}, "encoder_learned_pos"),
        ({"decoder_embed_dim": 32}, "decoder_embed_dim"),
        ({"activation_fn": "swish"}, "swish"),
        ({"arch": "lstm_wiseman_iwslt_de_en"}, "lstm"),
    ],
)
def test_unsupported_architectures_are_refused(overrides, expected):
    with pytest.raises(ValueError, match=expected):
        fs.config_from_fairseq_options(fairseq_args(**overrides), 50, 50, ["en", "fr"])


def test_share_all_embeddings_needs_a_joined_dictionary():
    with pytest.raises(ValueError, match="share_all_embeddings"):
        fs.config_from_fairseq_options(fairseq_args(), 50, 60, ["en", "fr"])


def test_config_maps_the_architecture():
    config = fs.config_from_fairseq_options(
        fairseq_args(dropout=0.3, attention_dropout=0.1, relu_dropout=0.2, no_scale_embedding=True), 50, 50, ["en", "fr"]
    )
    assert (config.d_model, config.encoder_ffn_dim, config.decoder_layers, config.decoder_attention_heads) == (
        D_MODEL, FFN, LAYERS, HEADS)
    assert (config.dropout, config.attention_dropout, config.activation_dropout) == (0.3, 0.1, 0.2)
    assert config.scale_embedding is False and config.tie_word_embeddings is True
    assert config.activation_function == "relu" and config.langs == ["en", "fr"]


def test_unexpected_missing_and_misshapen_keys_are_named(tmp_path):
    vocab = 4 + len(JOINED_TOKENS)
    config = fs.config_from_fairseq_options(fairseq_args(), vocab, vocab, ["en", "fr"])
    state = random_fairseq_state(vocab, vocab, naming="old", share_all=True)

    with pytest.raises(ValueError, match=r"encoder\.layers\.0\.self_attn\.bias_k"):
        fs.fairseq_to_hf_state_dict({**state, "encoder.layers.0.self_attn.bias_k": torch.zeros(1, 1, D_MODEL)}, config)
    with pytest.raises(ValueError, match=r"decoder\.layers\.0\.layer_norms\.3"):
        fs.fairseq_to_hf_state_dict({**state, "decoder.layers.0.layer_norms.3.weight": torch.ones(D_MODEL)}, config)
    with pytest.raises(ValueError, match=r"model\.decoder\.layers\.1\.fc2\.bias"):
        fs.fairseq_to_hf_state_dict({k: v for k, v in state.items() if k != "decoder.layers.1.fc2.bias"}, config)
    with pytest.raises(ValueError, match=r"shape mismatch.*fc1\.weight"):
        fs.fairseq_to_hf_state_dict({**state, "encoder.layers.0.fc1.weight": torch.zeros(FFN + 1, D_MODEL)}, config)

    # Through the loader, the message also names the checkpoint file.
    untied = random_fairseq_state(vocab, vocab, naming="old", share_all=False)
    del untied["decoder.embed_out"]
    folder = write_fairseq_folder(tmp_path / "m", fairseq_args(share_all_embeddings=False,
                                                               share_decoder_input_output_embed=False),
                                  untied, JOINED_TOKENS, JOINED_TOKENS)
    with pytest.raises(ValueError, match=r"model\.pt.*decoder\.embed_out"):
        fs.load_fairseq_translation_model(folder)


def test_bpecodes_formats(tmp_path):
    codes = tmp_path / "codes"
    codes.write_text("e n</w> 1423551864\ne r 1300703664\n")  # fastBPE, with counts
    assert fs.fsmt_merges_from_bpecodes(codes) == ["e n</w>", "e r"]
    codes.write_text("#version: 0.2\nt h\nt h\nth e</w>\n")
    assert fs.fsmt_merges_from_bpecodes(codes) == ["t h", "th e</w>"]
    codes.write_text("t h\nh e\ns </w>\n")  # subword-nmt 0.1: "</w>" is its own symbol
    with pytest.raises(ValueError, match="0.1"):
        fs.fsmt_merges_from_bpecodes(codes)
    with pytest.raises(FileNotFoundError, match="nope"):
        fs.fsmt_merges_from_bpecodes(tmp_path / "nope")


def test_bad_dictionary_lines_are_named(tmp_path):
    path = tmp_path / "dict.en.txt"
    path.write_text("hello 3\nworld\n")
    with pytest.raises(ValueError, match=r"dict\.en\.txt:2"):
        fs.read_fairseq_dict(path)
    path.write_text("hello 3\nhello 2\n")
    with pytest.raises(ValueError, match="duplicate"):
        fs.read_fairseq_dict(path)
    path.write_text("hello 3\nworld 2 #fairseq:overwrite\n")
    assert fs.read_fairseq_dict(path) == ["hello", "world"]


def test_translation_batches_build_fairseq_targets(new_style_folder):
    """labels = target ids + </s> as fairseq builds them; decoder input = </s> + target ids."""
    from headprune.data.batching import translation_batches

    _, tokenizer = fs.load_fairseq_translation_model(new_style_folder)
    sources = ["the man is on the mat.", "hello"]
    targets = ["l'homme est sur le tapis.", "le tapis"]
    (batch,) = translation_batches(tokenizer, sources, targets, batch_size=8)
    for i, (source, target) in enumerate(zip(sources, targets)):
        expected = reference_ids(target, "fr", FR_TOKENS)
        n = len(expected)
        assert batch["labels"][i, :n].tolist() == expected
        assert batch["decoder_input_ids"][i, :n].tolist() == [fs.EOS_ID] + expected[:-1]
        assert (batch["labels"][i, n:] == PAD).all() and batch["decoder_attention_mask"][i].sum() == n
        assert batch["input_ids"][i][batch["attention_mask"][i].bool()].tolist() == reference_ids(source, "en", EN_TOKENS)
