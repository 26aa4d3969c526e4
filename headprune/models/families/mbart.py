"""mBART (``MBartForConditionalGeneration``, mBART-50 included): a pre-norm BART, multilingual.

Its attention is BART's (copied), so ``M2M100Adapter`` serves it with mBART's own attention class for
pruning (transformers records attention maps by class). Its final layer norms, ``layernorm_embedding``
and language-code tokens do not reach the heads. EOS keys are ``</s>`` (``config.eos_token_id``); the
language codes around it are ordinary keys.
"""
from __future__ import annotations

from transformers.models.mbart.modeling_mbart import MBartAttention

from headprune.models.families.m2m100 import HeadlessAttention, M2M100Adapter

MODEL_TYPES = ("mbart",)


class PrunableMBartAttention(HeadlessAttention, MBartAttention):
    pass


class MBartAdapter(M2M100Adapter):
    family = "mbart"
    prunable = PrunableMBartAttention


ADAPTER = MBartAdapter
