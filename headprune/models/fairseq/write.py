"""Writing a transformers translation model out as fairseq would have saved it: a model folder (model.pt,
dict.{src}.txt, dict.{tgt}.txt, bpecodes) or a .tar.bz2 of one, as the offline demo and the tests need."""

import tempfile
from pathlib import Path

from headprune.io.atomic import copy_file, save_torch, tar_writer
from headprune.models.fairseq.options import fairseq_args_from_config, vocab_sizes
from headprune.models.fairseq.vocabulary import FAIRSEQ_SPECIAL_TOKENS, write_fairseq_dict
from headprune.models.fairseq.weights import hf_to_fairseq_state_dict


def write_fairseq_checkpoint_dir(model, src_dict_tokens, tgt_dict_tokens, bpecodes_path, out_dir,
                                 src_lang="en", tgt_lang="fr", layer_norm_style="old") -> Path:
    """Write `model` as a fairseq model folder: model.pt, dict.{src}.txt, dict.{tgt}.txt, bpecodes.

    *_dict_tokens are the dict.xx.txt tokens in fairseq id order WITHOUT the 4 specials, as
    strings (count 1 is written) or (token, count) pairs.
    """
    out_dir = Path(out_dir)
    config = model.config
    src_tokens = [entry if isinstance(entry, str) else entry[0] for entry in src_dict_tokens]
    tgt_tokens = [entry if isinstance(entry, str) else entry[0] for entry in tgt_dict_tokens]
    for side, tokens, size in zip((src_lang, tgt_lang), (src_tokens, tgt_tokens), vocab_sizes(config)):
        if len(tokens) + len(FAIRSEQ_SPECIAL_TOKENS) != size:
            raise ValueError(
                f"dict.{side}.txt would have {len(tokens)} tokens + 4 specials, but the model's vocabulary has {size}"
            )
    if not Path(bpecodes_path).is_file():
        raise FileNotFoundError(f"BPE codes file not found: {bpecodes_path}")

    state = hf_to_fairseq_state_dict(model, layer_norm_style)
    shares_decoder_output = "decoder.embed_out" not in state
    share_all = (
        shares_decoder_output
        and state["encoder.embed_tokens.weight"] is state["decoder.embed_tokens.weight"]
        and src_tokens == tgt_tokens  # fairseq requires a joined dictionary for this
    )
    if state["encoder.embed_tokens.weight"] is state["decoder.embed_tokens.weight"] and not share_all:
        # Equal but not shareable in fairseq's terms: store two copies.
        state["decoder.embed_tokens.weight"] = state["decoder.embed_tokens.weight"].clone()
    args = fairseq_args_from_config(config, src_lang, tgt_lang, share_all, shares_decoder_output)
    checkpoint = {
        "args": args,
        "model": state,
        "optimizer_history": [
            {"criterion_name": "LabelSmoothedCrossEntropyCriterion", "optimizer_name": "FairseqAdam",
             "lr_scheduler_state": {"best": None}, "num_updates": 0}
        ],
        "extra_state": {},
        "last_optimizer_state": None,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    # torch's pre-1.6 serialization, as in the 2018 checkpoints (torch.load reads both formats).
    save_torch(checkpoint, out_dir / "model.pt", _use_new_zipfile_serialization=False)
    write_fairseq_dict(out_dir / f"dict.{src_lang}.txt", src_dict_tokens)
    write_fairseq_dict(out_dir / f"dict.{tgt_lang}.txt", tgt_dict_tokens)
    copy_file(bpecodes_path, out_dir / "bpecodes")
    return out_dir


def write_fairseq_tarball(model, src_dict_tokens, tgt_dict_tokens, bpecodes_path, tar_path, folder_name,
                          src_lang="en", tgt_lang="fr", layer_norm_style="old") -> Path:
    """Write `model` as a fairseq .tar.bz2 whose single top-level folder is `folder_name/`."""
    tar_path = Path(tar_path)
    if not folder_name or "/" in folder_name or folder_name in (".", ".."):
        raise ValueError(f"folder_name must be a plain folder name, got {folder_name!r}")
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fairseq-tarball-") as staging:
        folder = write_fairseq_checkpoint_dir(
            model, src_dict_tokens, tgt_dict_tokens, bpecodes_path, Path(staging) / folder_name,
            src_lang, tgt_lang, layer_norm_style,
        )
        with tar_writer(tar_path, "w:bz2") as archive:
            archive.add(folder, arcname=folder_name)
    return tar_path
