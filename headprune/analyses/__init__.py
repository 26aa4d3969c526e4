"""Analyses: what a study asks of its evaluations. Sweeps and pruning curves (``sweeps``), criteria as pruning
orders (``criteria``), pruning layouts (``layouts``), a screened Table 1 (``screening``), Table 4 (``speed``,
``engines``, ``table4``), the masking modes compared (``masking_modes``) and head maps across studies
(``head_maps``).

May import ``evaluation``, ``scoring``, ``models``, ``data`` and ``io``.
"""
