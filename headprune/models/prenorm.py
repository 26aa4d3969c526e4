"""fairseq's pre-norm transformer as a transformers model.

fairseq trains a pre-norm transformer with ``--encoder-normalize-before --decoder-normalize-before``
(the authors' IWSLT model, and most fairseq models since 2019): each sublayer normalizes its
input, and a final layer norm closes each stack. FSMT is post-norm only. transformers' M2M100
is fairseq's pre-norm transformer, detail for detail: embeddings scaled by sqrt(d_model) unless
``no_scale_embedding``; sinusoidal positions laid out [sin | cos], counted from pad + 1 over
non-pad tokens (fairseq's ``make_positions``), the pad row zero; no layer norm on the embeddings;
q/k/v/out projections with biases, scores scaled by head_dim ** -0.5; ``self_attn_layer_norm``,
``encoder_attn_layer_norm``, ``final_layer_norm`` before each sublayer; ``encoder.layer_norm``
and ``decoder.layer_norm`` at the end; a bias-free output projection.

Two things M2M100 lacks, and ``PreNormTransformer`` adds: a source vocabulary of its own size
(fairseq-preprocess without ``--joined-dictionary``), and fairseq's three ways of sharing
embeddings. The config's ``vocab_size`` is the target vocabulary; ``source_vocab_size`` the source
one.

- ``--share-all-embeddings``: one matrix for source, target and output (``tie_word_embeddings``,
  M2M100's own tying);
- ``--share-decoder-input-output-embed``: the output projection is the target embedding matrix,
  the source has its own;
- neither: three matrices.
"""
from __future__ import annotations

from transformers import M2M100Config, M2M100ForConditionalGeneration
from transformers.models.m2m_100.modeling_m2m_100 import M2M100ScaledWordEmbedding


def prenorm_config(*, source_vocab_size: int, target_vocab_size: int, share_all_embeddings: bool,
                   share_decoder_input_output_embed: bool, **m2m100_options) -> M2M100Config:
    """An M2M100Config for ``PreNormTransformer``; ``m2m100_options`` are M2M100Config's own."""
    if share_all_embeddings and source_vocab_size != target_vocab_size:
        raise ValueError(f"share_all_embeddings needs one joined dictionary, got vocab sizes "
                         f"{source_vocab_size} and {target_vocab_size}")
    # eager attention: the only backend that returns attention weights (entropy, confidence)
    m2m100_options.setdefault("attn_implementation", "eager")
    return M2M100Config(
        vocab_size=int(target_vocab_size),
        source_vocab_size=int(source_vocab_size),
        share_decoder_input_output_embed=bool(share_decoder_input_output_embed or share_all_embeddings),
        tie_word_embeddings=bool(share_all_embeddings),
        architectures=[PreNormTransformer.__name__],
        **m2m100_options,
    )


class PreNormTransformer(M2M100ForConditionalGeneration):
    """M2M100 with fairseq's vocabularies and embedding sharing (see the module docstring)."""

    # transformers' from_pretrained knows only M2M100's own tying, drops the shared matrices
    # save_pretrained leaves out, and reports them as newly initialized: headprune.models.prune's
    # load_pruned_weights loads this class itself.
    loads_without_from_pretrained = True

    def __init__(self, config: M2M100Config):
        super().__init__(config)
        if config.tie_word_embeddings:  # --share-all-embeddings: M2M100 as it is
            return
        base = self.model
        source_vocab_size = getattr(config, "source_vocab_size", None) or config.vocab_size
        source_embeddings = M2M100ScaledWordEmbedding(source_vocab_size, config.d_model, config.pad_token_id,
                                                      embed_scale=base.encoder.embed_tokens.embed_scale)
        self._init_weights(source_embeddings)
        base.encoder.embed_tokens = source_embeddings
        # M2M100's "shared" table is only a tying anchor; here it is the source one, so that
        # no unused matrix is kept and get_input_embeddings() is what the encoder reads.
        base.shared = source_embeddings
        self._tie_output_to_target_embeddings()

    def _tie_output_to_target_embeddings(self):
        if not self.config.tie_word_embeddings and getattr(self.config, "share_decoder_input_output_embed", False):
            self.lm_head.weight = self.model.decoder.embed_tokens.weight

    def tie_weights(self, *args, **kwargs):
        super().tie_weights(*args, **kwargs)
        self._tie_output_to_target_embeddings()
