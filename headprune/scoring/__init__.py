"""Scoring heads: importance and the other criteria from one pass (``importance``), criteria as pruning
orders (``criteria``), learned Hard Concrete gates (``concrete``), head roles (``roles``)."""
