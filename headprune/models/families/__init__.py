"""One head adapter per model family, one file each: a new family is a new file here and nothing else.

An encoder or encoder-decoder family module defines ``ADAPTER`` (its ``headprune.models.heads.HeadAdapter`` subclass: where the
heads are, how a batch flows, how a site is physically pruned) and ``MODEL_TYPES`` (the
``config.model_type`` values it serves); it may define ``matches(model)`` for models of another
type laid out the same way. ``adapter_for_model`` imports the family modules the first time it
is asked (they import transformers' model code) and picks by model type, then by ``matches``.

Families (and the model types they serve):

- encoders for classification, encoder self-attention only: ``bert`` (bert), ``roberta`` (roberta,
  xlm-roberta), ``electra`` (electra), ``distilbert`` (distilbert), ``deberta_v2`` (deberta-v2, which
  DeBERTa-v3 checkpoints are: disentangled relative-position attention);
- encoder-decoders for translation, all three attention types: ``fsmt`` (fsmt: fairseq's post-norm
  transformer), ``m2m100`` (m2m_100: fairseq's pre-norm transformer, M2M100, and NLLB-200's dense
  models, which are m2m_100 too), ``bart`` (bart), ``mbart`` (mbart), ``marian`` (marian: opus-mt);
- decoder-only LMs: ``decoder``, ONE generic adapter for every family of transformers' causal-LM registry whose
  layout it finds (llama, mistral, qwen2/3, gemma 2/3, gpt2, gpt_neox, gpt_oss, phi3, ...: docs/models.md), by
  ``matches``, not by model type; ``causal_lm`` holds the causal-LM batch and loss.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil

SHARED = {"causal_lm"}  # modules here that are not a family


@functools.cache
def family_names() -> tuple[str, ...]:
    """Every module of this package but the shared ones (read from the folder once)."""
    return tuple(info.name for info in pkgutil.iter_modules(__path__) if info.name not in SHARED)


@functools.cache
def families() -> dict[str, object]:
    """Family module name -> module."""
    return {name: importlib.import_module(f"{__name__}.{name}") for name in family_names()}


def _named_after(model_type) -> object | None:
    """The family module named after the model type (``bert``, ``deberta_v2``), if there is one: a job that
    finds its family there does not import the other families' transformers code (0.3-0.5 s)."""
    name = str(model_type).replace("-", "_")
    return importlib.import_module(f"{__name__}.{name}") if name in family_names() else None


def adapter_for_model(model):
    model_type = getattr(model.config, "model_type", None)
    named = _named_after(model_type)
    if named is not None and model_type in named.MODEL_TYPES:
        return named.ADAPTER()
    # Every decoder-only LM whose layout the generic adapter finds, without importing the other families' code
    decoder = importlib.import_module(f"{__name__}.decoder")
    if decoder.matches(model):
        return decoder.adapter(model)
    for module in families().values():
        if model_type in module.MODEL_TYPES:
            return module.ADAPTER()
    for module in families().values():
        if module is not decoder and getattr(module, "matches", lambda m: False)(model):
            return module.ADAPTER()
    problem = decoder.layout_problem(model)
    raise ValueError(f"no head adapter for model type {model_type!r} ({type(model).__name__}): "
                     + (f"as a decoder-only LM: {problem}" if problem else "add a file to headprune/models/families/"))
