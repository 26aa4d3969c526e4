"""One registry class for everything the package looks up by a name: masking modes, kinds of score, model
loaders, families, criteria, data makers, export files (lm-evaluation-harness's idea, api/registry.py; our code).

A registry maps a name (the word a config or a command line gives) to an entry: the object itself, registered by
decorator or ``add``, or a lazy ``"module:attr"`` string imported the first time it is asked for, so that a
registry of torch-using entries stays free to import. What it refuses, in one line naming the registry: a name
registered twice, an entry that is not of the registry's base class, and an unknown name (with the closest names
as a suggestion).

>>> shapes = Registry("shape", base=object)
>>> @shapes.register("square")
... class Square:
...     sides = 4
>>> shapes.add("tuple", "builtins:tuple")
>>> shapes.get("square").sides, shapes.get("tuple") is tuple, list(shapes)
(4, True, ['square', 'tuple'])
>>> shapes.get("squar")
Traceback (most recent call last):
...
KeyError: "unknown shape 'squar'; did you mean 'square'? (known: square, tuple)"
"""
from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable, Generic, Iterator, TypeVar

T = TypeVar("T")
_REFUSE = object()  # get's default: an unknown name is an error, not None


class Registry(Generic[T]):
    """Names to entries of one kind (``what``: how an error calls it), in the order they were registered."""

    def __init__(self, what: str, base: type | None = None, check: Callable[[Any], bool] | None = None):
        self.what, self.base, self.check = what, base, check
        self._entries: dict[str, Any] = {}  # name -> the entry, or a "module:attr" string not yet imported

    # --- registering ----------------------------------------------------------------------

    def add(self, name: str, entry: T | str) -> None:
        """Register ``entry`` (an object, or a lazy "module:attr") as ``name``; a name registered twice is refused."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.what} needs a non-empty name, not {name!r}")
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is registered twice "
                             f"({self._describe(self._entries[name])} and {self._describe(entry)})")
        if isinstance(entry, str):
            if entry.count(":") != 1 or not all(entry.split(":")):
                raise ValueError(f"{self.what} {name!r}: a lazy entry is 'module:attr', not {entry!r}")
        else:
            self._validate(name, entry)
        self._entries[name] = entry

    __setitem__ = add  # registry[name] = entry: the same refusals

    def __delitem__(self, name: str) -> None:
        """Unregister ``name`` (a test undoing what it registered; monkeypatch.setitem's undo)."""
        if name not in self._entries:
            raise KeyError(self.unknown(name))
        del self._entries[name]

    def register(self, *names: str) -> Callable[[T], T]:
        """A decorator registering the decorated object under each of ``names`` (its ``__name__`` if none)."""
        def decorate(entry: T) -> T:
            for name in names or (entry.__name__,):
                self.add(name, entry)
            return entry
        return decorate

    # --- asking -----------------------------------------------------------------------------

    def get(self, name: str, default: Any = _REFUSE) -> T:
        """The entry called ``name`` (a lazy one imported now, once); an unknown name is a KeyError that suggests,
        or ``default`` where one is given (as a dict's ``get``, so that a registry replaces a dict in place)."""
        if name not in self._entries:
            if default is not _REFUSE:
                return default
            raise KeyError(self.unknown(name))
        entry = self._entries[name]
        if isinstance(entry, str):
            module, attr = entry.split(":")
            entry = getattr(importlib.import_module(module), attr)
            self._validate(name, entry)
            self._entries[name] = entry
        return entry

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def unknown(self, name) -> str:
        """The message for a name nothing is registered as: the closest names, and every name."""
        close = difflib.get_close_matches(str(name), self.names, n=3)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        return f"unknown {self.what} {name!r}{hint} (known: {', '.join(self.names)})"

    @property
    def names(self) -> list[str]:
        return list(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        """(name, entry) of every entry, each lazy one imported."""
        return ((name, self.get(name)) for name in self.names)

    def values(self) -> Iterator[T]:
        return (entry for _, entry in self.items())

    def __contains__(self, name) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(self.names)})"

    # --- checks -------------------------------------------------------------------------------

    def _validate(self, name, entry):
        if self.base is not None:
            ok = isinstance(entry, type) and issubclass(entry, self.base) or isinstance(entry, self.base)
            if not ok:
                raise TypeError(f"{self.what} {name!r}: {self._describe(entry)} is not a {self.base.__name__}")
        if self.check is not None and not self.check(entry):
            raise TypeError(f"{self.what} {name!r}: {self._describe(entry)} is not a {self.what}")

    @staticmethod
    def _describe(entry) -> str:
        if isinstance(entry, str):
            return entry
        return f"{getattr(entry, '__module__', '?')}:{getattr(entry, '__qualname__', type(entry).__name__)}"
