"""BART (``BartForConditionalGeneration``): a post-norm encoder-decoder with M2M100's attention.

transformers copies BART's attention into M2M100, mBART and Marian, so ``M2M100Adapter`` serves it
(all three attention types, batch-major); only the attention class a pruned module becomes is BART's
own (transformers records attention maps by class). What else differs does not reach the heads:
learned positions offset by 2, ``layernorm_embedding``, post-norm layers.
"""
from __future__ import annotations

from transformers.models.bart.modeling_bart import BartAttention

from headprune.models.families.m2m100 import HeadlessAttention, M2M100Adapter

MODEL_TYPES = ("bart",)


class PrunableBartAttention(HeadlessAttention, BartAttention):
    pass


class BartAdapter(M2M100Adapter):
    family = "bart"
    prunable = PrunableBartAttention


ADAPTER = BartAdapter
