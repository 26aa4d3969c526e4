"""The head adapters: one generic adapter each for decoders, encoders and encoder-decoders, and a file per family
they cannot serve (FSMT's); such a family is a new file here and its line in ``FAMILIES``.

Every family answers one question, ``match(model)``: its adapter for ``model`` (a ``headprune.models.heads.HeadAdapter``
subclass: where the heads are, how a batch flows, how a site is physically pruned), or None: the generic adapters by
the layout transformers declares, a family of its own (FSMT) by its ``MODEL_TYPES`` (the ``config.model_type``
values it serves). ``FAMILIES`` registers each family's ``match`` by the family's name. ``adapter_for_model``
asks the family named after the model type first (``fsmt``: a job then imports no other family's transformers
code), then the generic adapter for what transformers declares the model to be: an encoder-decoder
(``config.is_encoder_decoder``), an encoder (``headprune_encoder.is_encoder``) or a decoder-only LM; then the
others. A refusal names the model type, its class and what it was read as.

Families (and the model types they serve):

- encoders for classification, encoder self-attention only: ``encoder``, ONE generic adapter for every encoder
  whose layout it finds (BERT, RoBERTa, XLM-R, ELECTRA, DistilBERT, DeBERTa-v2/v3, ModernBERT, CamemBERT, ALBERT,
  MPNet, ConvBERT's attention heads for gating, ...: docs/models.md);
- encoder-decoders for translation, all three attention types: ``seq2seq``, ONE generic adapter for every
  encoder-decoder whose layout it finds (M2M100 and NLLB-200's dense models, headprune's ``PreNormTransformer``
  (fairseq's pre-norm transformer, model type m2m_100), BART, mBART, Marian, T5, Pegasus, ...: docs/models.md);
  ``fsmt`` (fsmt: fairseq's post-norm transformer, the study's fairseq checkpoints, with its own time-major beam
  steps);
- decoder-only LMs: ``decoder``, ONE generic adapter for every family of transformers' causal-LM registry whose
  layout it finds, multimodal wrappers through their language model (llama, mistral, qwen2/3, gemma 2/3,
  gpt2, gpt_neox, gpt_oss, phi3, deepseek_v3, ...: docs/models.md), by layout, not by model type;
  ``causal_lm`` holds the causal-LM batch and loss, ``classifier`` the encoders'.
"""
from __future__ import annotations

import functools
import importlib

from headprune.io.registry import Registry

# Family name (its module here) -> its ``match(model)``: imported when first asked, so that a job that finds its
# family by the model type imports no other family's transformers code. ``causal_lm`` and ``classifier`` hold
# what families share and are no family.
FAMILIES = Registry("family", check=callable)
FAMILIES.add("decoder", "headprune.models.families.decoder:match")
FAMILIES.add("encoder", "headprune.models.families.encoder:match")
FAMILIES.add("fsmt", "headprune.models.families.fsmt:match")
FAMILIES.add("seq2seq", "headprune.models.families.seq2seq:match")


def family_names() -> tuple[str, ...]:
    """Every family's name, in the order they are asked (after the one named after the model type)."""
    return tuple(FAMILIES)


def _module(name: str):
    """The module of the family called ``name`` (its ``match`` imported through the registry)."""
    return importlib.import_module(FAMILIES[name].__module__)


@functools.cache
def families() -> dict[str, object]:
    """Family module name -> module."""
    return {name: _module(name) for name in FAMILIES}


def _named_after(model_type) -> object | None:
    """The family module named after the model type (``fsmt``), if there is one: a job that finds its family
    there does not import the other families' transformers code (0.3-0.5 s)."""
    name = str(model_type).replace("-", "_")
    return _module(name) if name in FAMILIES else None


def match(family, model):
    """``family``'s (a family module's) adapter for ``model``, or None."""
    return family.match(model)


def adapter_for_model(model):
    model_type = getattr(model.config, "model_type", None)
    named = _named_after(model_type)
    adapter = match(named, model) if named is not None else None
    if adapter is not None:
        return adapter
    # The generic adapter for what transformers declares the model to be, without importing the other families' code
    generic = _module(_generic_family(model))
    adapter = generic.match(model)
    if adapter is not None:
        return adapter
    # A family that names the type, then those that recognise a layout the generic adapter does not find
    others = [m for m in families().values() if m is not named and m is not generic]
    for module in sorted(others, key=lambda m: model_type not in getattr(m, "MODEL_TYPES", ())):
        adapter = match(module, model)
        if adapter is not None:
            return adapter
    raise ValueError(refusal(model))


def _generic_family(model) -> str:
    """The generic family module for what transformers declares ``model`` to be."""
    from headprune.models.portable.headprune_encoder import is_encoder

    if getattr(model.config, "is_encoder_decoder", False):
        return "seq2seq"
    return "encoder" if is_encoder(model) else "decoder"


def refusal(model) -> str:
    """Why no family serves ``model``, naming its model type, its class and what it was read as."""
    model_type = getattr(model.config, "model_type", None)
    family = _generic_family(model)
    read = {"seq2seq": "an encoder-decoder", "encoder": "an encoder", "decoder": "a decoder-only LM"}[family]
    problem = _module(family).layout_problem(model)
    return (f"no head adapter for model type {model_type!r} ({type(model).__name__}), read as {read}: "
            + (problem or "add a file to headprune/models/families/ and its line in FAMILIES"))
