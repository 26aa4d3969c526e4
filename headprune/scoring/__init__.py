"""Scoring heads: importance and the other criteria, all estimated in one pass (``importance``), learned
Hard Concrete gates (``concrete``), encoder head roles (``roles``), a decoder-only language model's head
roles: previous-token, induction, sink and Wu et al.'s retrieval heads (``lm_roles``), what a masked head is
replaced by under mean, optimal and resample ablation, computed from training data (``constants``).

May import ``models``, ``data`` and ``io``; criteria as pruning orders are ``experiments.criteria``.
"""
