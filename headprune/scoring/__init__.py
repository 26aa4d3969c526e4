"""Scoring heads: importance and the other criteria, all estimated in one pass (``importance``), learned
Hard Concrete gates (``concrete``), head roles (``roles``).

May import ``models``, ``data`` and ``io``; criteria as pruning orders are ``experiments.criteria``.
"""
