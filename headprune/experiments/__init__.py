"""Experiments: gate settings run and scored (``runs``, ``evaluate``, ``metrics``), significance
(``stats``), speed (Table 4), the claims scorecard, and the tables and figures (``figures``)."""
