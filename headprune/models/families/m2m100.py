"""transformers' M2M100: fairseq's pre-norm transformer (``headprune.models.prenorm``), batch-major.

It serves every model of type m2m_100: the study's converted fairseq models (``PreNormTransformer``),
M2M100 itself, and NLLB-200's dense checkpoints (facebook/nllb-200-*, which transformers loads as
``M2M100ForConditionalGeneration``; NLLB-MoE is another model type, not served). BART, mBART and
Marian have the same attention, copied from one source (``bart.py``, ``mbart.py``, ``marian.py``
subclass this adapter with their own attention class, ``prunable``).
"""
from __future__ import annotations

from transformers.models.m2m_100.modeling_m2m_100 import M2M100Attention

from headprune.models.families.fsmt import FSMTAdapter
from headprune.models.remote.headprune_common import HeadlessAttention  # one copy: the one exports carry
from headprune.models.slicing import slice_projections

MODEL_TYPES = ("m2m_100",)


class PrunableM2M100Attention(HeadlessAttention, M2M100Attention):
    pass


class M2M100Adapter(FSMTAdapter):
    """transformers' M2M100: fairseq's pre-norm transformer (``headprune.models.prenorm``)."""

    family = "m2m100"
    time_major = False
    # What a pruned attention module becomes: a subclass of the family's own, as transformers 5 records
    # attention maps (output_attentions) from modules of that class.
    prunable = PrunableM2M100Attention

    def prune_site(self, site, keep):
        slice_projections(site, keep)
        site.attention.__class__ = self.prunable
        site.attention.num_heads = len(keep)


ADAPTER = M2M100Adapter
