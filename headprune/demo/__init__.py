"""The embedded offline demo: synthetic data and tiny models in the real distribution formats.

The whole study must run on 2 CPU cores in minutes, without internet. This room makes stand-ins
for everything the real pipeline downloads, written in the formats the real things come in, so the
same pipeline rules consume them:

- ``grammar``: the made-up language pair every stand-in is written in (its words, the grammar of its
  sentences, their translations), built so that attention matters and different heads get
  different jobs;
- ``corpora``: a translation corpus "en" -> "fr" (plain text, one sentence per line,
  Moses-tokenizable), subword-nmt BPE codes learned on it and fairseq dictionaries; WikiText-2's
  raw archive;
- ``classification``: GLUE-like classification tasks, MNLI, SST-2, CoLA and MRPC stand-ins
  (normalized TSVs, and GLUE's archives or, for MRPC, SentEval's files);
- ``models``: a tiny fairseq-style transformer trained on the corpus, written as a fairseq model
  tarball (``headprune.models.fairseq.write_fairseq_tarball``), standing in for
  ``wmt14.en-fr.joined-dict``; tiny "pretrained" BERT and RoBERTa folders in the Hugging Face
  format, standing in for ``bert-base-uncased`` and ``roberta-base`` (``headprune.training.finetune``
  fine-tunes them, as it does the real ones); a tiny Llama trained on the WikiText stand-in;
- ``passkey``: the tiny Llama's passkey documents (a needle with a 5-digit number in a haystack of the
  training text, the question, the answer), so that it learns long-context retrieval;
- ``parses``: gold dependency parses (CoNLL-U) of the demo's English, for head roles.

A top room: it may import ``training``, ``experiments``, ``scoring``, ``models``, ``data`` and ``io``;
nothing in the package imports it (the demo's Snakemake scripts do).
"""
