"""Read and write fairseq translation checkpoints without the fairseq library.

fairseq no longer imports on Python 3.11 (see NOTES.md), so this package reads its checkpoint
format directly into transformers' FSMT, a port of fairseq's post-norm transformer, or, for
the pre-norm transformer, into ``headprune.models.prenorm.PreNormTransformer`` (M2M100):

    wmt14.en-fr.joined-dict.transformer/      (the tarball's single top-level folder)
        model.pt       torch pickle: {"args": argparse.Namespace (fairseq <= 0.10) or None with
                       "cfg": plain dicts (0.12), "model": state dict in fairseq names,
                       "optimizer_history", "extra_state" (training meters, iterator state),
                       "last_optimizer_state", ...}
        dict.en.txt    "token count" lines; fairseq puts <s> <pad> </s> <unk> (ids 0-3) first
        dict.fr.txt
        bpecodes       subword-nmt merge operations

and writes FSMT models back out in that same format (the offline demo and the tests need a
tarball that looks like the real one). One module per step, each importing only those above it:
``vocabulary`` (dictionaries, BPE codes, the tokenizer), ``unpickling`` (the allow-list unpickler),
``archives`` (safe extraction, the model folder of a tarball), ``options`` (the checkpoint's options
to a transformers config and back), ``weights`` (state dicts both ways), ``load`` and ``write``.
"""

from headprune.models.fairseq.archives import fairseq_model_folder, safe_extract
from headprune.models.fairseq.load import build_target_tokenizer, load_fairseq_translation_model
from headprune.models.fairseq.options import (config_from_fairseq_options, fairseq_args_from_config,
                                              fairseq_model_options, is_pre_norm, model_class_for, vocab_sizes)
from headprune.models.fairseq.unpickling import (ALLOWED_GLOBALS, TRAINING_STATE_GLOBALS, TrainingStatePlaceholder,
                                                 UnsafeCheckpointError, safe_load_checkpoint)
from headprune.models.fairseq.vocabulary import (BOS_ID, BPE_CONTINUATION, EOS_ID, FAIRSEQ_SPECIAL_TOKENS,
                                                 FSMT_END_OF_WORD, PAD_ID, UNK_ID, build_fsmt_tokenizer,
                                                 fairseq_dict_tokens_from_fsmt_vocab, fsmt_merges_from_bpecodes,
                                                 fsmt_vocab_from_fairseq_dict, read_fairseq_dict, write_fairseq_dict)
from headprune.models.fairseq.weights import checked_weights, fairseq_to_hf_state_dict, hf_to_fairseq_state_dict
from headprune.models.fairseq.write import write_fairseq_checkpoint_dir, write_fairseq_tarball

__all__ = [
    # vocabulary
    "FAIRSEQ_SPECIAL_TOKENS", "BOS_ID", "PAD_ID", "EOS_ID", "UNK_ID", "BPE_CONTINUATION", "FSMT_END_OF_WORD",
    "read_fairseq_dict", "write_fairseq_dict", "fsmt_vocab_from_fairseq_dict", "fairseq_dict_tokens_from_fsmt_vocab",
    "fsmt_merges_from_bpecodes", "build_fsmt_tokenizer",
    # unpickling
    "UnsafeCheckpointError", "ALLOWED_GLOBALS", "TRAINING_STATE_GLOBALS", "TrainingStatePlaceholder",
    "safe_load_checkpoint",
    # archives
    "safe_extract", "fairseq_model_folder",
    # options
    "fairseq_model_options", "config_from_fairseq_options", "is_pre_norm", "model_class_for", "vocab_sizes",
    "fairseq_args_from_config",
    # weights
    "checked_weights", "fairseq_to_hf_state_dict", "hf_to_fairseq_state_dict",
    # load, write
    "build_target_tokenizer", "load_fairseq_translation_model", "write_fairseq_checkpoint_dir", "write_fairseq_tarball",
]
