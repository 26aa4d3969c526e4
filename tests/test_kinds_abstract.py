"""A kind of score says what it gives (issue #47 item 3, #60 item 4): its two sides, base.Kind (evaluation) and
base.Plan (workflow), are abstract, with no language model's or encoder's answer to inherit, and every registered
kind gives all of both; a study reaches the workflow side as ``study.plan``."""
import pytest

from headprune.evaluation.kinds import KINDS, base, kind_of

WORDS = {"name": "half", "attention_types": ["dec_self"], "timed_as": "half ({family})", "timed_outputs": "outputs",
         "model_kind": "language_modeling"}


def answering(cls, left_out=()):
    """Every abstract method of ``cls`` answered (None), but those ``left_out``."""
    return {name: (lambda self, *args, **kwargs: None) for name in cls.__abstractmethods__ if name not in left_out}


def test_a_kind_that_leaves_out_an_evaluation_answer_cannot_be_built():
    plan = type("Plan", (base.Plan,), answering(base.Plan))
    for left_out in sorted(base.Kind.__abstractmethods__):
        half = type("Half", (base.Kind,), {**WORDS, "study_side": plan, **answering(base.Kind, {left_out})})
        with pytest.raises(TypeError, match=f"abstract.*{left_out}"):
            half()
    assert {"load_evalset", "run_variants", "score", "significance", "importance_batches", "load_model"} == \
        base.Kind.__abstractmethods__


def test_a_kind_whose_plan_leaves_out_a_workflow_answer_cannot_be_built():
    for left_out in sorted(base.Plan.__abstractmethods__):
        plan = type("HalfPlan", (base.Plan,), answering(base.Plan, {left_out}))
        kind = type("Half", (base.Kind,), {**WORDS, "study_side": plan, **answering(base.Kind)})
        with pytest.raises(TypeError, match=f"abstract.*{left_out}"):
            kind()
    assert {"evalset_name", "evalset_spec", "eval_data", "importance_data", "importance_spec", "train_spec",
            "speed_settings", "parse_text", "roles_params", "head_roles_inputs"} == base.Plan.__abstractmethods__
    # Voita's roles read the training texts: a plan that opts in must say how
    voita = type("VoitaPlan", (base.VoitaRoles, base.Plan), answering(base.Plan))
    with pytest.raises(TypeError, match="abstract.*training_texts"):
        type("Half", (base.Kind,), {**WORDS, "study_side": voita, **answering(base.Kind)})()


def test_the_sides_do_not_answer_for_each_other():
    # what a study's jobs are told is never the evaluation side's, nor a job's model work the workflow side's
    evaluation, workflow = set(dir(base.Kind)), set(dir(base.Plan)) | set(dir(base.VoitaRoles))
    assert not (base.Plan.__abstractmethods__ | {"check", "train_data", "screen_evalset_spec", "config_properties",
                                                 "training_texts", "scores_another_study"}) & evaluation
    assert not (base.Kind.__abstractmethods__ | {"scoring_batches", "evalset_from_file", "scores_beside"}) & workflow


def test_a_kind_says_its_name_its_plan_and_table4_words():
    wordless = type("Wordless", (base.Kind,), answering(base.Kind))
    with pytest.raises(TypeError, match="does not say its name, study_side, attention_types, timed_as, timed_outputs"):
        wordless()


@pytest.mark.parametrize("name", list(KINDS))
def test_every_kind_is_complete_and_named_by_its_word(name):
    kind = kind_of(name)
    assert kind.name == name and not type(kind).__abstractmethods__
    assert isinstance(kind.plan, kind.study_side) and not type(kind.plan).__abstractmethods__
    assert kind.plan.kind is kind and kind.plan.name == name
    assert not (base.Plan.__abstractmethods__ | {"check", "training_texts", "config_properties"}) & set(dir(type(kind)))
    # its file holds both of its classes
    assert type(kind).__module__ == type(kind.plan).__module__ == f"headprune.evaluation.kinds.{name}"
    assert kind.timed_as.format(family="llama") and kind.timed_outputs


def test_table4_labels_come_from_the_kind():
    from headprune.analyses.table4 import _model_words

    assert _model_words("roberta", ["examples"], kind_of("classification")) == "encoder classifier (roberta)"
    assert _model_words("marian", ["sentences"], kind_of("translation")) == "translation model, beam search"
    assert _model_words("llama", ["prefill tokens", "decode tokens"], kind_of("retrieval")) == "causal LM (llama)"
    assert kind_of("classification").timed_outputs == "predictions"  # not "translations", whatever the family
