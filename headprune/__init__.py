"""headprune: gate, score and prune attention heads (Michel, Levy and Neubig, 2019).

The package's rooms import downward only (``tests/test_layering.py`` checks it), bottom to top:

- ``io``: downloads and checksums; imports nothing of headprune;
- ``models``: model access (heads, families, loading, pruning, fairseq checkpoints); imports ``io``;
- ``data``: test sets, GLUE tasks, corpora, batches, BPE, IWSLT, parses; imports ``io``;
- ``scoring``: head scores (importance, Hard Concrete gates, roles); imports ``models``, ``data``, ``io``;
- ``evaluation``: runs, the kinds of score and their engines, metrics, paired tests; imports ``scoring`` and
  below;
- ``analyses``: sweeps, criteria as pruning orders, layouts, screening, Table 4; imports ``evaluation`` and below;
- ``report``: figures and the scorecard; imports ``analyses`` and below;
- ``training``: training, fine-tuning and recovery; imports ``analyses`` and below;
- ``demo``: the offline demo's synthetic world; imports ``training`` and below;
- the workflow modules (``workflow``, ``warm``, ``studies``): the pipeline's glue; import anything but ``demo``.

The public API below is the package's own names, imported lazily on first use (PEP 562): ``import headprune``
imports nothing else (no torch), so the Snakemake rules that import ``headprune.studies`` start fast.
Examples in the names' docstrings use the README's tiny Llama (``model, tokenizer = load_model("tiny")``, ``text``,
``evalset = evalset_from_text(tokenizer, text, window=16)``); ``tests/test_api.py`` runs them.

- load a model: ``load_model`` (hub id, model folder, pruned folder, fairseq tarball), ``guess_kind``;
- mask heads: ``gated``, ``masked_as`` (how every gate of a model masks while a block is open), ``full_gates``,
  ``gates_without``, ``head_shape``, ``all_heads``;
- score heads: ``head_scores`` (I_h and every other criterion), ``criterion_order``, ``CRITERIA``;
- test sets: ``EvalSet``, ``EvalSettings``, ``evalset_from_text``, ``evalset_from_tsv``, ``evalset_batches``;
- evaluate: ``run``, ``score``, ``compare_to_full``, ``bleu_detokenized``, ``bleu_tokenized``,
  ``classification_score`` (accuracy, F1, MCC), ``perplexity``, ``retrieval_accuracy``;
- the single-head sweep with significance: ``single_head_sweep`` (a table like eval/ablation.csv);
- a screened sweep (issue #40): ``gradient_screens``, ``screen_scores``, ``screened_sweep`` (the top K and a seeded
  sample ablated exactly), ``unverified_bound`` (what the heads screened only may hide);
- pruning: ``pruning_curve`` (a table like pruning.csv), ``remove_heads`` (physical pruning), ``save_pruned``
  (a folder that ``load_model``, and plain transformers with ``trust_remote_code=True``, load back pruned),
  ``save_gguf`` (a GGUF file llama.cpp serves, each layer with its own heads);
- recovery after pruning (issue #59): ``recover`` (LoRA merged, full fine-tuning or distillation from the unpruned
  model, a few steps on training data that shares no item with the test set).
"""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what __getattr__ imports, spelled out for type checkers and tests/test_layering.py
    from headprune.analyses import criteria, screening, sweeps  # noqa: F401
    from headprune.evaluation import kinds, metrics, perplexity, retrieval, runs  # noqa: F401
    from headprune.models import export, gguf_export, heads, loading, masking  # noqa: F401
    from headprune.scoring import importance  # noqa: F401
    from headprune.training import recovery  # noqa: F401

_NAMES = {
    "evaluation.kinds": ("load_model",),  # any kind of study's model
    "models.loading": ("guess_kind",),
    "models.heads": ("full_gates", "head_shape"),
    "models.masking": ("gated", "masked_as"),
    "models.export": ("save_pruned",),
    "models.gguf_export": ("save_gguf",),
    "scoring.importance": ("head_scores",),
    "analyses.criteria": ("criterion_order", "CRITERIA"),
    "evaluation.runs": ("EvalSet", "EvalSettings", "all_heads", "gates_without", "run", "score", "compare_to_full"),
    "analyses.sweeps": ("evalset_from_text", "evalset_from_tsv", "evalset_batches", "single_head_sweep",
                           "pruning_curve", "remove_heads"),
    "evaluation.metrics": ("bleu_detokenized", "bleu_tokenized", "classification_score"),
    "evaluation.perplexity": ("perplexity",),
    "evaluation.retrieval": ("retrieval_accuracy",),
    "analyses.screening": ("gradient_screens", "screen_scores", "screened_sweep", "unverified_bound"),
    "training.recovery": ("recover",),
}
__all__ = [name for names in _NAMES.values() for name in names]


def __getattr__(name):
    """Import a public name's module on first use (``_NAMES``: one table, module -> names)."""
    where = next((module for module, names in _NAMES.items() if name in names), None)
    if where is None:
        raise AttributeError(f"module 'headprune' has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{where}"), name)
    globals()[name] = value  # later uses skip __getattr__
    return value


def __dir__():
    return sorted({*globals(), *__all__})

