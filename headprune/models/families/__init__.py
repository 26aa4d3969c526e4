"""One head adapter per model family, one file each: a new family is a new file here and nothing else.

Every family answers one question, ``match(model)``: its adapter for ``model`` (a ``headprune.models.heads.HeadAdapter``
subclass: where the heads are, how a batch flows, how a site is physically pruned), or None. A family module
either defines ``match`` itself (the generic decoder adapter: by the layout transformers declares; BERT: by model
type or by BERT's layout) or declares ``ADAPTER`` and ``MODEL_TYPES`` (the ``config.model_type`` values it
serves), which ``match`` here reads. ``adapter_for_model`` asks the family named after the model type first (a
job then imports no other family's transformers code), then the generic encoder adapter for an encoder (as
transformers declares it: ``headprune_encoder.is_encoder``) or the generic decoder adapter for any other model,
then the others. A refusal names the model type, its class and what it was read as (an encoder, an
encoder-decoder, a decoder-only LM).

Families (and the model types they serve):

- encoders for classification, encoder self-attention only: ``encoder``, ONE generic adapter for every encoder
  whose layout it finds that no file below names (ModernBERT, CamemBERT, ALBERT, MPNet, ...: docs/models.md);
  ``bert`` (bert, and for gating BERT-layout types the generic one does not find: ConvBERT),
  ``roberta`` (roberta, xlm-roberta), ``electra`` (electra), ``distilbert`` (distilbert), ``deberta_v2``
  (deberta-v2, which DeBERTa-v3 checkpoints are: disentangled relative-position attention);
- encoder-decoders for translation, all three attention types: ``fsmt`` (fsmt: fairseq's post-norm
  transformer), ``m2m100`` (m2m_100: fairseq's pre-norm transformer, M2M100, and NLLB-200's dense
  models, which are m2m_100 too), ``bart`` (bart), ``mbart`` (mbart), ``marian`` (marian: opus-mt);
- decoder-only LMs: ``decoder``, ONE generic adapter for every family of transformers' causal-LM registry whose
  layout it finds, multimodal wrappers through their language model (llama, mistral, qwen2/3, gemma 2/3,
  gpt2, gpt_neox, gpt_oss, phi3, deepseek_v3, ...: docs/models.md), by layout, not by model type;
  ``causal_lm`` holds the causal-LM batch and loss.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil

SHARED = {"causal_lm", "classifier"}  # modules here that are not a family


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


def match(family, model):
    """``family``'s adapter for ``model``, or None: the family's own ``match``, else by its ``MODEL_TYPES``."""
    own = getattr(family, "match", None)
    if own is not None:
        return own(model)
    return family.ADAPTER() if getattr(model.config, "model_type", None) in family.MODEL_TYPES else None


def adapter_for_model(model):
    model_type = getattr(model.config, "model_type", None)
    named = _named_after(model_type)
    adapter = match(named, model) if named is not None else None
    if adapter is not None:
        return adapter
    # An encoder (as transformers declares it) through the generic encoder adapter, a decoder-only LM through the
    # generic decoder adapter, without importing the other families' code
    encoder = importlib.import_module(f"{__name__}.encoder")
    decoder = importlib.import_module(f"{__name__}.decoder")
    reads_as_encoder = encoder.layout_of.is_encoder(model)
    if reads_as_encoder:  # a hand-written encoder family keeps the types it names (xlm-roberta is roberta's)
        for module in families().values():
            if model_type in getattr(module, "MODEL_TYPES", ()) and module is not named:
                adapter = match(module, model)
                if adapter is not None:
                    return adapter
    adapter = (encoder if reads_as_encoder else decoder).match(model)
    if adapter is not None:
        return adapter
    # The family that names the type (m2m_100 is m2m100's), then those that recognise a layout (BERT's)
    others = [m for m in families().values() if m is not named and m not in (decoder, encoder)]
    for module in sorted(others, key=lambda m: model_type not in getattr(m, "MODEL_TYPES", ())):
        adapter = match(module, model)
        if adapter is not None:
            return adapter
    raise ValueError(refusal(model))


def refusal(model) -> str:
    """Why no family serves ``model``, naming its model type, its class and what it was read as."""
    from headprune.models.remote.headprune_encoder import is_encoder

    model_type = getattr(model.config, "model_type", None)
    if getattr(model.config, "is_encoder_decoder", False):
        read, problem = "an encoder-decoder", importlib.import_module(f"{__name__}.seq2seq").layout_problem(model)
    elif is_encoder(model):
        read, problem = "an encoder", importlib.import_module(f"{__name__}.encoder").layout_problem(model)
    else:
        read, problem = "a decoder-only LM", importlib.import_module(f"{__name__}.decoder").layout_problem(model)
    return (f"no head adapter for model type {model_type!r} ({type(model).__name__}), read as {read}: "
            + (problem or "add a file to headprune/models/families/"))
