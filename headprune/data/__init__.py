"""Data: test sets and GLUE tasks (``datasets``), WikiText (``wikitext``), batches (``batching``), BPE
(``bpe``), IWSLT (``iwslt``), parses and word counts (``parsing``), needle-in-a-haystack items
(``retrieval``).

May import ``io`` (downloads) only: no model code, no scoring, no experiments.
"""
