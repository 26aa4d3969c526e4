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
