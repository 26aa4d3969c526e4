"""RoBERTa and XLM-R (``RobertaForSequenceClassification``, ``XLMRobertaForSequenceClassification``).

Their self-attention is BERT's line for line (transformers copies it), so ``BertAdapter`` serves them;
this file only names their own attention classes for pruning (see ``bert.py``: transformers records
attention maps by class). What differs is outside the heads: one token type, positions counted from
``padding_idx + 1`` over non-pad tokens, and ``</s>`` as the separator (``config.sep_token_id``, which
``models.load_classifier`` takes from the tokenizer, is then ``</s>``'s id).
"""
from __future__ import annotations

from transformers.models.roberta.modeling_roberta import RobertaSelfAttention
from transformers.models.xlm_roberta.modeling_xlm_roberta import XLMRobertaSelfAttention

from headprune.models.families.bert import BertAdapter, HeadlessSelfAttention

MODEL_TYPES = ("roberta", "xlm-roberta")


class PrunableRobertaSelfAttention(HeadlessSelfAttention, RobertaSelfAttention):
    pass


class PrunableXLMRobertaSelfAttention(HeadlessSelfAttention, XLMRobertaSelfAttention):
    pass


class RobertaAdapter(BertAdapter):
    family = "roberta"
    prunable = (PrunableRobertaSelfAttention, PrunableXLMRobertaSelfAttention)


ADAPTER = RobertaAdapter
