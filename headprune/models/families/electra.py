"""ELECTRA's discriminator (``ElectraForSequenceClassification``).

Its self-attention is BERT's line for line (transformers copies it), so ``BertAdapter`` serves it; this
file only names its own attention class for pruning (see ``bert.py``: transformers records attention
maps by class). Its smaller embeddings (``embedding_size``, projected up before the encoder) do not
reach the heads.
"""
from __future__ import annotations

from transformers.models.electra.modeling_electra import ElectraSelfAttention

from headprune.models.families.bert import BertAdapter, HeadlessSelfAttention

MODEL_TYPES = ("electra",)


class PrunableElectraSelfAttention(HeadlessSelfAttention, ElectraSelfAttention):
    pass


class ElectraAdapter(BertAdapter):
    family = "electra"
    prunable = (PrunableElectraSelfAttention,)


ADAPTER = ElectraAdapter
