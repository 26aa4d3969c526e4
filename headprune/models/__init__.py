"""Model access: where each family's attention heads live and how they are gated (``heads``, one file
per family in ``families/``), how a gated head is switched off (``masking``: one class per mode, zero,
uniform, streaming, mean, optimal, resample; each acts at one of the places where a head can be changed,
``places``: its output, its query, its attention) and the per-head data some modes carry (``head_constants``),
loading (``loading``), physical removal (``prune``, bias compensation included), saving a pruned model
that plain transformers loads (``export``, with the modeling files it copies beside the weights, kept in
``portable/`` as package data), fairseq checkpoints without fairseq (``fairseq``, ``prenorm``), attention
types and their labels without torch (``attention_types``), GPUs (``gpus``).

May import ``io`` (a checkpoint's download) only: no data, scoring, experiments or training code.
"""
