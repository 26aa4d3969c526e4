"""The data (rules/data.smk): test sets, GLUE tasks and corpora fetched, and a language model's corpus tokenized
once and cut into its windows."""
from __future__ import annotations


def tokenize_params(study):
    return {"window": study.entry["window"], "splits": study.lm_needed_splits}


def testset_params(pipeline, testset):
    """A test set's config entry (translation.testsets.<name>): where and how it is fetched."""
    return pipeline.config["translation"]["testsets"][testset]


def corpus_params(pipeline, corpus):
    """A corpus's config entry (corpora.<name>)."""
    return pipeline.config["corpora"][corpus]
