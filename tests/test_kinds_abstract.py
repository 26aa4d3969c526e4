"""A kind of score says what it gives (issue #47 item 3): base.Kind is abstract, with no language model's or
encoder's answer to inherit, and every registered kind gives all of it."""
import pytest

from headprune.evaluation.kinds import KINDS, base, kind_of


def test_a_kind_that_leaves_out_an_answer_cannot_be_built():
    class Half(base.Kind):
        name, attention_types, timed_as, timed_outputs = "half", ["dec_self"], "half ({family})", "outputs"

    with pytest.raises(TypeError, match="abstract"):
        Half()
    assert {"load_model", "speed_settings", "parse_text", "roles_params", "head_roles_inputs"} <= \
        base.Kind.__abstractmethods__


def test_a_kind_says_its_name_and_table4_words():
    answers = {name: (lambda self, *args, **kwargs: None) for name in base.Kind.__abstractmethods__}
    wordless = type("Wordless", (base.Kind,), answers)
    with pytest.raises(TypeError, match="does not say its name, attention_types, timed_as, timed_outputs"):
        wordless()


@pytest.mark.parametrize("name", list(KINDS))
def test_every_kind_is_complete_and_named_by_its_word(name):
    kind = kind_of(name)
    assert kind.name == name and not type(kind).__abstractmethods__
    assert kind.timed_as.format(family="llama") and kind.timed_outputs


def test_table4_labels_come_from_the_kind():
    from headprune.analyses.table4 import _model_words

    assert _model_words("roberta", ["examples"], kind_of("classification")) == "encoder classifier (roberta)"
    assert _model_words("marian", ["sentences"], kind_of("translation")) == "translation model, beam search"
    assert _model_words("llama", ["prefill tokens", "decode tokens"], kind_of("retrieval")) == "causal LM (llama)"
    assert kind_of("classification").timed_outputs == "predictions"  # not "translations", whatever the family
