"""Encoder-decoders with BART's attention, attention heads removed, for plain transformers: BART, mBART,
Marian (opus-mt), M2M100/NLLB-200 (dense), and fairseq's pre-norm transformer as headprune converts it
(``PreNormTransformer``: M2M100 with fairseq's vocabularies, below).

Written beside a pruned model's weights by headprune (``headprune.models.export.save_pruned``), with
``headprune_common.py``, and named in its config.json's ``auto_map``, so that

    AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    AutoModel.from_pretrained(folder, trust_remote_code=True)  # the base model (not for PreNormTransformer)

load the pruned model without headprune. All three attention types are pruned, each layer on its own:
encoder self-attention ("enc_self"), decoder self-attention ("dec_self") and cross-attention ("enc_dec").
transformers copies BART's attention into the others; it reshapes by head size, so it runs with fewer
heads as it is, and with none it adds only the output projection's bias and keeps a one-head zero cache
entry as long as the other layers' (decoders read the generated length from the cache).
"""
from __future__ import annotations

from transformers.models.bart import modeling_bart
from transformers.models.m2m_100 import modeling_m2m_100
from transformers.models.marian import modeling_marian
from transformers.models.mbart import modeling_mbart

from .headprune_common import EncoderDecoderModel, HeadlessAttention


class BartLayout(EncoderDecoderModel):
    headless = HeadlessAttention


class PrunedBartModel(BartLayout, modeling_bart.BartModel):
    pass


class PrunedBartForConditionalGeneration(BartLayout, modeling_bart.BartForConditionalGeneration):
    pass


class PrunedMBartModel(BartLayout, modeling_mbart.MBartModel):
    pass


class PrunedMBartForConditionalGeneration(BartLayout, modeling_mbart.MBartForConditionalGeneration):
    pass


class PrunedMarianModel(BartLayout, modeling_marian.MarianModel):
    pass


class PrunedMarianMTModel(BartLayout, modeling_marian.MarianMTModel):
    pass


class PrunedM2M100Model(BartLayout, modeling_m2m_100.M2M100Model):
    pass


class PrunedM2M100ForConditionalGeneration(BartLayout, modeling_m2m_100.M2M100ForConditionalGeneration):
    pass


class PrunedPreNormTransformer(PrunedM2M100ForConditionalGeneration):
    """fairseq's pre-norm transformer (headprune.models.prenorm.PreNormTransformer): M2M100, with a source
    vocabulary of its own (the config's ``source_vocab_size``; ``vocab_size`` is the target one) and fairseq's
    three ways of sharing embeddings:

    - ``tie_word_embeddings`` (``--share-all-embeddings``): one matrix for source, target and output, M2M100
      as it is;
    - ``share_decoder_input_output_embed`` alone: the output projection is the target embedding matrix, the
      source has its own;
    - neither: three matrices.
    """

    def __init__(self, config):
        super().__init__(config)
        if config.tie_word_embeddings:
            return
        base = self.model
        source_vocab_size = getattr(config, "source_vocab_size", None) or config.vocab_size
        source_embeddings = modeling_m2m_100.M2M100ScaledWordEmbedding(
            source_vocab_size, config.d_model, config.pad_token_id, embed_scale=base.encoder.embed_tokens.embed_scale)
        # M2M100's "shared" table is only a tying anchor: here it is the source one, which the encoder reads.
        base.encoder.embed_tokens = base.shared = source_embeddings
        if getattr(config, "share_decoder_input_output_embed", False):
            self.lm_head.weight = base.decoder.embed_tokens.weight

    def get_expanded_tied_weights_keys(self, all_submodels=False):
        """What is one matrix under several names (save_pretrained writes it once; from_pretrained must not
        count the others missing): M2M100's own tying with ``tie_word_embeddings``, else the above."""
        if all_submodels or self.config.tie_word_embeddings:
            return super().get_expanded_tied_weights_keys(all_submodels)
        tied = {"model.encoder.embed_tokens.weight": "model.shared.weight"}
        if getattr(self.config, "share_decoder_input_output_embed", False):
            tied["lm_head.weight"] = "model.decoder.embed_tokens.weight"
        return tied
