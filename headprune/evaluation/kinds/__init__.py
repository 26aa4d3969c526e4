"""A kind of score: how a study's model is evaluated and scored, and what its jobs are told, one file each.

A study is one model scored one way. What differs between the ways lives in that way's file, in two classes
(``base``): its ``Kind``, the evaluation side (what an evaluation set holds, how gate variants are run over it, the
score and the scores beside it, the paired test and what it resamples), which the jobs' code calls
(``headprune.evaluation.runs``, ``analyses``, the command line); and its ``Plan``, the workflow side (which test
sets play which role, what the study's jobs read and are told, its config checks), which the study resolution
calls as ``study.plan`` (``headprune.studies``, ``headprune.stages``). Neither branches on a kind's name. A new
kind of score is one new file here (its ``Kind`` naming its ``Plan`` in ``study_side``; its config keys are the
plan's ``config_properties``, ``config_required``, which ``headprune.config_schema`` merges into a ``models``
entry's schema) and a line in ``KINDS``.

``load_model`` loads a model as a study of any kind loads it (``headprune.load_model``), and each kind reads the
command line's ``--data`` (``evalset_from_file``), so that the API and the command line reach every kind.

Torch-free to import: Snakemake imports the kinds to plan the run (the entries are lazy).
"""
from __future__ import annotations

import functools

from headprune.evaluation.kinds.base import Kind
from headprune.io.registry import Registry

# name (the config's ``kind:``) -> its class, imported when first asked for
KINDS: Registry[type[Kind]] = Registry("kind of study", base=Kind)
KINDS.add("translation", "headprune.evaluation.kinds.translation:Kind")
KINDS.add("classification", "headprune.evaluation.kinds.classification:Kind")
KINDS.add("language_modeling", "headprune.evaluation.kinds.language_modeling:Kind")
KINDS.add("retrieval", "headprune.evaluation.kinds.retrieval:Kind")
KINDS.add("lm_eval", "headprune.evaluation.kinds.lm_eval:Kind")


@functools.cache
def kind_of(name: str) -> Kind:
    """The kind of score called ``name`` (one instance per kind).

    >>> kind_of("language_modeling").attention_types
    ['dec_self']
    """
    if name not in KINDS:
        raise ValueError(KINDS.unknown(name))
    return KINDS[name]()


def load_model(source, kind: str | None = None, **options):
    """(model, tokenizer) of ``source`` (a hub id, a model folder, pruned or not, or a fairseq tarball) loaded as a
    study of ``kind`` loads its model: any kind of score (a retrieval or lm_eval study's model is a causal LM), by
    default the one ``headprune.models.loading.guess_kind`` reads from the folder. ``options``: ``device``,
    ``dtype``, ``src_lang``, ``tgt_lang``, ``revision``, ``towers`` (``headprune.models.loading.load_model``).

    >>> model, tokenizer = load_model("tiny", "lm_eval")  # the README's tiny Llama, as an lm_eval study loads it
    >>> type(model).__name__
    'LlamaForCausalLM'
    """
    from headprune.models import loading

    return loading.load_model(source, kind_of(kind).model_kind if kind is not None else None, **options)
