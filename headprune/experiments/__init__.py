"""Experiments: gate settings run and scored (``runs``, ``evaluate``, ``beam_search``, ``shared_layers``,
``perplexity``, ``retrieval``, ``metrics``), head criteria as pruning orders and their comparison (``criteria``),
significance (``stats``), speed (Table 4), the claims scorecard, and the tables and figures (``figures``).

May import ``scoring``, ``models``, ``data`` and ``io``: not ``training``, ``demo`` or the workflow modules.
"""
