"""A kind of score: how a study's model is evaluated and scored, one class in one file each.

A study is one model scored one way. What differs between the ways (what an evaluation set holds,
how gate variants are run over it, the score and the scores beside it, the paired test and what it
resamples, which test sets play which role and what the study's jobs are told) lives in that way's
class; the experiments (``headprune.experiments.runs``, ``sweeps``) and the study resolution
(``headprune.studies``) call its methods and never branch on its name. A new kind of score is one new
file here, a line in ``MODULES``, and its entry in the config schema.

Torch-free to import: Snakemake imports the kinds to plan the run.
"""
from __future__ import annotations

import functools
import importlib

# name (the config's ``kind:``) -> module of this package holding its class ``Kind``
MODULES = {"translation": "translation", "classification": "classification",
           "language_modeling": "language_modeling", "retrieval": "retrieval", "lm_eval": "lm_eval"}
KINDS = tuple(MODULES)


@functools.cache
def kind_of(name: str):
    """The kind of score called ``name`` (one instance per kind).

    >>> kind_of("language_modeling").attention_types
    ['dec_self']
    """
    if name not in MODULES:
        raise ValueError(f"unknown kind of study {name!r}; expected one of {list(KINDS)}")
    return importlib.import_module(f"{__name__}.{MODULES[name]}").Kind()
