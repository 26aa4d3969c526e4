"""Training models: the fairseq-architecture translation transformer, with its checkpoints on the way
(``train``: Figure 5's IWSLT model, the demo's tiny en->fr model), and fine-tuning a pretrained encoder
into a classifier, with the helpers both use (``finetune``: ``restores_torch_threads``, ``warmup_linear_decay``).

May import ``analyses``, ``evaluation``, ``scoring``, ``models``, ``data`` and ``io`` (a fine-tuned classifier is
scored with ``evaluation.evaluate``); only ``demo`` and the workflow modules import it.
"""
