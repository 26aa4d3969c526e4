"""Any encoder of transformers with attention heads removed, for plain transformers.

Written beside a pruned encoder's weights by headprune (``headprune.models.export.save_pruned``) for every encoder the
generic encoder adapter serves, with ``headprune_encoder.py``, ``headprune_decoder.py``, ``headprune_attention.py``
and ``headprune_common.py``, and named in its config.json's ``auto_map`` as ``modeling_headprune_encoder.Pruned<class>``
(``PrunedModernBertForSequenceClassification``, ...), so that

    AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)

loads the pruned model without headprune. ``Pruned<class>`` is made on demand (this module's ``__getattr__``):
transformers' own class with ``PrunedEncoder`` mixed in first, which builds the model as transformers does and then
gives each attention with heads removed the saved weights' shapes (``headprune_attention.keep_heads``), so that
from_pretrained loads them. The attention type is "enc_self".
"""
from __future__ import annotations

from .headprune_common import ADDED_BIAS_KEY, ENC_SELF, add_bias, classes_made_on_demand, kept_heads, task_classes
from .headprune_attention import run_through_headprune
from .headprune_decoder import DecoderLayout
from .headprune_encoder import encoder_layouts, keep_encoder_heads


class PrunedEncoder:
    """Mixed in before a transformers encoder class: after building, each attention keeps the heads the config keeps."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        for layout in encoder_layouts(self):
            self._keep_saved_heads(layout)
        if any(getattr(layout.attention, "headprune_kv_index", None) is not None for layout in encoder_layouts(self)):
            run_through_headprune(self)  # grouped key/value heads that the kept query heads read unevenly

    def _keep_saved_heads(self, layout: DecoderLayout):
        heads = kept_heads(self.config, ENC_SELF, layout.layer, layout.original_heads)
        if len(heads) < layout.original_heads:
            keep_encoder_heads(layout, heads, copy_weights=False)
        if layout.layer in (getattr(self.config, ADDED_BIAS_KEY, None) or {}).get(ENC_SELF, []):
            add_bias(layout.output)


_CLASSES = task_classes()  # every class of the Auto tables: the task's class and the base model
__getattr__ = classes_made_on_demand(__name__, PrunedEncoder, _CLASSES)
