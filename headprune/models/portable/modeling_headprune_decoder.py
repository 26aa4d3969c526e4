"""Any decoder-only causal LM of transformers with attention heads removed, for plain transformers.

Written beside a pruned model's weights by headprune (``headprune.models.export.save_pruned``), with
``headprune_decoder.py``, ``headprune_attention.py`` and ``headprune_common.py``, and named in its config.json's ``auto_map`` as
``modeling_headprune_decoder.Pruned<class>`` (``PrunedQwen3ForCausalLM``, ``PrunedGemma3ForCausalLM``, ...), so that

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

loads the pruned model without headprune. ``Pruned<class>`` is made on demand (this module's ``__getattr__``):
transformers' own class with ``PrunedDecoder`` mixed in first, which builds the model as transformers does and
then gives each attention with heads removed the saved weights' shapes (``headprune_attention.keep_heads``), so that
from_pretrained loads them. The attention type is "dec_self".
"""
from __future__ import annotations

from .headprune_common import ADDED_BIAS_KEY, DEC_SELF, add_bias, classes_made_on_demand, kept_heads, task_classes
from .headprune_attention import keep_heads, needs_headprune_attention, run_through_headprune
from .headprune_decoder import layouts


class PrunedDecoder:
    """Mixed in before a transformers decoder class: after building, each attention keeps the heads the config
    keeps, and the model runs ``headprune_attention`` where key/value groups became uneven."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        added = getattr(self.config, ADDED_BIAS_KEY, None) or {}
        for layout in layouts(self):
            heads = kept_heads(self.config, DEC_SELF, layout.layer, layout.original_heads)
            if len(heads) < layout.original_heads:
                keep_heads(layout, heads, copy_weights=False)
            if layout.layer in added.get(DEC_SELF, []):
                add_bias(layout.output)
        if needs_headprune_attention(self):
            run_through_headprune(self)


_CLASSES = task_classes()  # every class of the Auto tables: the task's class and the base model
__getattr__ = classes_made_on_demand(__name__, PrunedDecoder, _CLASSES)
