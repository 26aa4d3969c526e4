"""headprune: gate, score and prune attention heads (Michel, Levy and Neubig, 2019).

The package's rooms import downward only (``tests/test_layering.py`` checks it), bottom to top:

- ``io``: downloads and checksums; imports nothing of headprune;
- ``models``: model access (heads, families, loading, pruning, fairseq checkpoints); imports ``io``;
- ``data``: test sets, GLUE tasks, corpora, batches, BPE, IWSLT, parses; imports ``io``;
- ``scoring``: head scores (importance, Hard Concrete gates, roles); imports ``models``, ``data``, ``io``;
- ``experiments``: runs, evaluation, criteria as pruning orders, statistics, figures; imports ``scoring``
  and below;
- ``training``: training and fine-tuning models; imports ``experiments`` and below;
- ``demo``: the offline demo's synthetic world; imports ``training`` and below;
- the workflow modules (``workflow``, ``warm``, ``studies``): the pipeline's glue; import anything but ``demo``.
"""
