"""Data: test sets and GLUE tasks (``datasets``), downloads, batches, BPE, IWSLT, parses and word
counts (``parsing``), and the offline demo's synthetic data and tiny models (``demo``)."""
