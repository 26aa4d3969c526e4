"""The report: tables and figures (``figures/``) and the claims scorecard (``scorecard``).

May import ``analyses``, ``evaluation``, ``scoring``, ``models``, ``data`` and ``io``.
"""
