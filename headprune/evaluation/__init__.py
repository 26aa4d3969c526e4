"""Evaluation: gate settings run and scored. A run (``runs``: ``EvalSettings``, ``run_variants``), the kinds of
score (``kinds/``, one file each: its ``Kind`` and its ``Plan``), the engines they run on (``evaluate``,
``beam_search``, ``shared_layers``, ``perplexity``, ``loglikelihoods``, ``lm_tasks``, ``lm_task_loss``, ``retrieval``),
metrics, the paired tests (``stats``) and stopwatches (``timing``).

May import ``scoring``, ``models``, ``data`` and ``io``.
"""
