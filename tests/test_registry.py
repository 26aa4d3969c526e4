"""headprune.io.registry: the one registry class (issue #47)."""
import doctest
import sys

import pytest

from headprune.io import registry
from headprune.io.registry import Registry


class Base:
    pass


def test_the_module_examples_hold():
    assert doctest.testmod(registry).failed == 0


def test_decorator_lazy_entry_and_order():
    things = Registry("thing", base=Base)

    @things.register("one", "uno")
    class One(Base):
        pass

    things.add("decimal", "decimal:Decimal")  # lazy: not imported until asked (and not a Base: refused then)
    assert things.names == ["one", "uno", "decimal"] and things["uno"] is One and "decimal" in things
    with pytest.raises(TypeError, match="thing 'decimal': decimal:Decimal is not a Base"):
        things.get("decimal")


def test_a_lazy_entry_is_imported_only_when_asked(tmp_path, monkeypatch):
    (tmp_path / "lazy_registry_probe.py").write_text("class Probe:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    probes = Registry("probe")
    probes.add("p", "lazy_registry_probe:Probe")
    assert "lazy_registry_probe" not in sys.modules
    assert probes.get("p").__name__ == "Probe" and "lazy_registry_probe" in sys.modules


def test_collisions_bad_entries_and_unknown_names_are_refused_naming_the_registry():
    modes = Registry("masking mode", base=Base)
    modes.add("zero", Base)
    with pytest.raises(ValueError, match="masking mode 'zero' is registered twice"):
        modes.add("zero", "somewhere:Else")
    with pytest.raises(TypeError, match="masking mode 'int'.*is not a Base"):
        modes.add("int", int)
    with pytest.raises(ValueError, match="'module:attr'"):
        modes.add("lazy", "no_colon")
    with pytest.raises(KeyError, match=r"unknown masking mode 'zeor'; did you mean 'zero'\? \(known: zero\)"):
        modes.get("zeor")
    with pytest.raises(KeyError, match=r"unknown masking mode 'xyz' \(known: zero\)"):
        modes["xyz"]
    assert modes.names == ["zero"]  # nothing refused was kept


def test_a_check_instead_of_a_base_class():
    functions = Registry("criterion", check=callable)
    functions.add("abs", abs)
    with pytest.raises(TypeError, match="criterion 'three'"):
        functions.add("three", 3)


def test_a_registry_stands_in_for_a_dict():
    """get with a default, [name] = entry and del: as a dict is read and monkeypatched (MODES, REMOTE_FILES, ...)."""
    modes = Registry("masking mode", base=Base)
    modes["zero"] = Base
    assert modes.get("zero") is Base and modes.get("mean", None) is None and dict(modes.items()) == {"zero": Base}
    with pytest.raises(ValueError, match="registered twice"):
        modes["zero"] = Base
    del modes["zero"]
    assert "zero" not in modes and len(modes) == 0
    with pytest.raises(KeyError, match="unknown masking mode 'zero'"):
        del modes["zero"]


def test_the_package_registries_are_registries_in_their_order():
    from headprune.analyses.criteria import CRITERIA
    from headprune.evaluation.kinds import KINDS
    from headprune.models.families import FAMILIES
    from headprune.models.loading import LOADERS
    from headprune.models.masking import DATA_FILES, MODES
    from headprune.scoring.constants import DATA_MAKERS

    assert list(MODES) == ["zero", "uniform", "streaming", "mean", "optimal", "resample"]
    assert list(DATA_MAKERS) == [word for word, mode in MODES.items() if mode.data_maker] == ["mean", "optimal",
                                                                                               "resample"]
    assert {mode.data for mode in MODES.values()} - {None} == set(DATA_FILES)
    assert list(KINDS) == ["translation", "classification", "language_modeling", "retrieval", "lm_eval"]
    assert set(LOADERS) <= set(KINDS) and list(FAMILIES) == ["decoder", "encoder", "fsmt", "seq2seq"]
    assert list(CRITERIA)[-4:] == ["iterative", "oracle", "random", "retrieval"]
    with pytest.raises(KeyError, match="did you mean 'optimal'"):
        MODES["optimum"]
