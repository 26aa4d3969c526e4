"""Loading a fairseq translation model folder or tarball: the model (FSMT or the pre-norm transformer) in
eval mode with its source-text tokenizer, and the mirror-image tokenizer for target text."""

import torch
from transformers import FSMTTokenizer

from headprune.models.fairseq.archives import fairseq_model_folder
from headprune.models.fairseq.options import (config_from_fairseq_options, fairseq_model_options, is_pre_norm,
                                              model_class_for)
from headprune.models.fairseq.unpickling import UnsafeCheckpointError, safe_load_checkpoint
from headprune.models.fairseq.vocabulary import FAIRSEQ_SPECIAL_TOKENS, build_fsmt_tokenizer, read_fairseq_dict
from headprune.models.fairseq.weights import fairseq_to_hf_state_dict


def build_target_tokenizer(path, src_lang="en", tgt_lang="fr", extract_dir=None) -> FSMTTokenizer:
    """A tokenizer for TARGET-language text (e.g. references scored with a loss).

    FSMTTokenizer always encodes with the source language's Moses rules and the source
    vocabulary; fairseq's training data was tokenized per language (Moses splits French
    "l'homme" as "l' homme", English rules as "l 'homme"). The mirror-image tokenizer gives
    fairseq's target ids: Moses {tgt} + BPE + dict.{tgt}.txt, with </s> appended.
    """
    return build_fsmt_tokenizer(fairseq_model_folder(path, extract_dir), src_lang=tgt_lang, tgt_lang=src_lang)


def load_fairseq_translation_model(path, src_lang="en", tgt_lang="fr", dtype=torch.float32,
                                   checkpoint_name="model.pt", extract_dir=None, tokenizer_dir=None):
    """(model in eval mode, FSMTTokenizer) for a fairseq translation model.

    The model is transformers' FSMT for fairseq's post-norm transformer and
    ``headprune.models.prenorm.PreNormTransformer`` (M2M100) for the pre-norm one. `path` is a fairseq
    tarball (extracted once, next to it or into `extract_dir`) or an extracted model folder with
    model.pt, dict.{src}.txt, dict.{tgt}.txt and bpecodes. The checkpoint may be fairseq 0.6-0.12's,
    training state included (see safe_load_checkpoint and fairseq_model_options).
    fp32 by default: FSMT's masking overflows in fp64 (NOTES.md). The tokenizer encodes
    source text; see build_target_tokenizer for target text.
    """
    folder = fairseq_model_folder(path, extract_dir)
    for required in (checkpoint_name, f"dict.{src_lang}.txt", f"dict.{tgt_lang}.txt", "bpecodes"):
        if not (folder / required).is_file():
            raise FileNotFoundError(f"{folder}: missing '{required}' (expected a fairseq model folder)")

    tokenizer = build_fsmt_tokenizer(folder, src_lang, tgt_lang, tokenizer_dir)
    src_vocab_size = len(FAIRSEQ_SPECIAL_TOKENS) + len(read_fairseq_dict(folder / f"dict.{src_lang}.txt"))
    tgt_vocab_size = len(FAIRSEQ_SPECIAL_TOKENS) + len(read_fairseq_dict(folder / f"dict.{tgt_lang}.txt"))

    checkpoint_path = folder / checkpoint_name
    checkpoint = safe_load_checkpoint(checkpoint_path)
    try:
        if "model" not in checkpoint:
            raise ValueError("no 'model' entry with the weights")
        options = fairseq_model_options(checkpoint)
        config = config_from_fairseq_options(options, src_vocab_size, tgt_vocab_size, [src_lang, tgt_lang])
        state = fairseq_to_hf_state_dict(checkpoint["model"], config, options)
    except (ValueError, UnsafeCheckpointError) as error:
        raise type(error)(f"{checkpoint_path}: {error}") from error

    from transformers.initialization import no_init_weights

    with no_init_weights():  # every weight is loaded next: random init would only cost time
        model = model_class_for(config)(config)
    model.tie_weights()  # skipped with the initialization
    model.load_state_dict(state, strict=True)
    model.to(dtype=dtype).eval()
    if not is_pre_norm(config):
        # FSMT only builds its causal decoder mask when use_cache is off: with the default (on), a
        # forward pass given decoder_input_ids would let each position see the future. Plain
        # forward passes therefore default to use_cache=False; generate() keeps its cache.
        model.config.use_cache = False
        model.generation_config.use_cache = True
    return model, tokenizer
