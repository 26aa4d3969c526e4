"""Marian (``MarianMTModel``: the opus-mt models): a post-norm encoder-decoder with BART's attention.

Its attention is BART's (copied), so ``M2M100Adapter`` serves it with Marian's own attention class for
pruning (transformers records attention maps by class). Its sinusoidal positions, scaled embeddings
and ``final_logits_bias`` do not reach the heads. Marian starts decoding from the pad token
(``config.decoder_start_token_id``), not ``</s>``: a batch's ``decoder_input_ids`` should too.
"""
from __future__ import annotations

from transformers.models.marian.modeling_marian import MarianAttention

from headprune.models.families.m2m100 import HeadlessAttention, M2M100Adapter

MODEL_TYPES = ("marian",)


class PrunableMarianAttention(HeadlessAttention, MarianAttention):
    pass


class MarianAdapter(M2M100Adapter):
    family = "marian"
    prunable = PrunableMarianAttention


ADAPTER = MarianAdapter
