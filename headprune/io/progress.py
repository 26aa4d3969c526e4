"""Progress lines for a job's log: how far a long loop is, how fast it goes, when it will end.

A ``Progress`` counts what a loop has done and, through ``logging`` (INFO, so the line lands in the rule's
log with its timestamp), reports it at most every few seconds and once at the end::

    translate, 25 gate settings x 200 sentences: 2400/5000 rows (48%) = 12/25 settings, 432 rows/s, 6 s left
    translate, 25 gate settings x 200 sentences: done 5000/5000 rows = 25 settings in 14 s, 358 rows/s

The lines are time-throttled, not counted: an update only compares a clock reading with the time of the
next line (well under a microsecond), so a loop that ends within the first interval writes the final line
alone. The interval is ``DEFAULT_SECONDS`` unless the environment variable ``HEADPRUNE_PROGRESS_SECONDS``
(read when a Progress is made; 0 reports every update) or the caller says otherwise. The lines come from
updates, not from a clock of their own: a loop whose one step takes longer than the interval reports after
each step.

Imports nothing of headprune.
"""
from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

ENV = "HEADPRUNE_PROGRESS_SECONDS"
DEFAULT_SECONDS = 5.0

T = TypeVar("T")


def interval(default: float = DEFAULT_SECONDS) -> float:
    """The seconds between two progress lines: ``HEADPRUNE_PROGRESS_SECONDS`` if set (>= 0), else ``default``."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also NaN
        logging.getLogger(__name__).warning("%s=%r is not a number of seconds >= 0: reporting every %g s",
                                            ENV, value, default)
        return default
    return seconds


def duration(seconds: float) -> str:
    """A duration as a reader takes it in: '8 s', '1 min 27 s', '2 h 05 min'.

    >>> duration(7.6), duration(87), duration(7500)
    ('8 s', '1 min 27 s', '2 h 05 min')
    """
    if not math.isfinite(seconds):
        return "?"
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _count(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def _rate(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.1f}"
    return f"{value:.3f}"


class Progress:
    """Counts a loop's units (rows, batches, steps) and logs how far it is, at most every ``every`` seconds
    and once when it ends (``close``, or leaving its ``with`` block).

    ``what`` starts every line (what the loop does, e.g. "classify, 13 gate settings x 400 examples"), ``unit``
    names what is counted. ``per=(size, name)`` also gives the count in bigger units, ``size`` of the counted
    ones each: rows of a gate setting over all items, so a reader sees how many settings' worth are done.
    ``total`` None: the loop's length is not known (no percentage, no time left). ``enabled=False`` logs
    nothing (a function's ``progress=False``). ``note`` is appended to the lines (a string, or a function
    called only when a line is written). ``clock`` is for tests.

    >>> with Progress(4800, "ablate", "rows") as progress:
    ...     for batch in range(48):
    ...         progress.update(100)
    """

    def __init__(self, total: float | None = None, what: str = "progress", unit: str = "", *,
                 per: tuple[float, str] | None = None, log: logging.Logger | None = None,
                 every: float | None = None, enabled: bool = True,
                 clock: Callable[[], float] = time.monotonic):
        self.total = total
        self.what = what
        self.unit = f" {unit}" if unit else ""
        self.per = per if per and per[0] > 0 else None
        self.log = log or logging.getLogger(__name__)
        self.every = interval() if every is None else float(every)
        self.enabled = enabled
        self.done: float = 0
        self.closed = False
        # Appended to every line: a string, or a function called only when a line is written (e.g. a loss).
        self.note: str | Callable[[], str] = ""
        self._clock = clock
        self.started = clock() if enabled else 0.0
        self._next = self.started + self.every

    def update(self, n: float = 1) -> None:
        """``n`` more units done; a line if the last one is ``every`` seconds old (the final one waits for
        ``close``)."""
        self.done += n
        if self.enabled:
            now = self._clock()
            if now >= self._next:
                self._next = now + self.every
                if self.total is None or self.done < self.total:
                    self.log.info("%s", self.line(now))

    def line(self, now: float | None = None) -> str:
        """The progress line at ``now``: done/total (percent), the bigger units, rate, time left."""
        elapsed = (self._clock() if now is None else now) - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self.total is None:
            return f"{self.what}: {_count(self.done)}{self.unit}{self._per(False)}, {self._speed(rate)}{self._note()}"
        percent = int(100 * self.done / self.total) if self.total else 100
        left = duration((self.total - self.done) / rate) if rate > 0 else "?"
        return (f"{self.what}: {_count(self.done)}/{_count(self.total)}{self.unit} ({percent}%)"
                f"{self._per(True)}, {self._speed(rate)}, {left} left{self._note()}")

    def final(self, now: float | None = None) -> str:
        """The closing line: done (or where the loop stopped), in how long, at what rate."""
        elapsed = (self._clock() if now is None else now) - self.started
        rate = f", {self._speed(self.done / elapsed)}" if elapsed > 0 else ""
        if self.total is None or self.done >= self.total:
            of = "" if self.total is None else f"/{_count(self.total)}"
            return (f"{self.what}: done {_count(self.done)}{of}{self.unit}{self._per(False)} in {duration(elapsed)}"
                    f"{rate}{self._note()}")
        percent = int(100 * self.done / self.total) if self.total else 0
        return (f"{self.what}: stopped at {_count(self.done)}/{_count(self.total)}{self.unit} ({percent}%)"
                f"{self._per(True)} after {duration(elapsed)}{rate}{self._note()}")

    def close(self) -> None:
        """Log the final line (once; nothing when disabled)."""
        if self.enabled and not self.closed:
            self.log.info("%s", self.final())
        self.closed = True

    def _note(self) -> str:
        note = self.note() if callable(self.note) else self.note
        return f", {note}" if note else ""

    def _speed(self, rate: float) -> str:
        return f"{_rate(rate)}{self.unit}/s"

    def _per(self, with_total: bool) -> str:
        if self.per is None:
            return ""
        size, name = self.per
        of = f"/{_count(self.total / size)}" if with_total and self.total is not None else ""
        return f" = {_count(round(self.done / size, 1))}{of} {name}"

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def counted(iterable: Iterable[T], what: str = "progress", unit: str = "", *, total: float | None = None,
             **options) -> Iterator[T]:
    """Yield the items of ``iterable``, counting each one done when the next is asked for (``Progress``;
    ``total`` defaults to ``len(iterable)`` where it has one). The final line comes when the loop ends,
    breaks or fails.

    >>> for batch in counted(batches, "head importance", "batches", enabled=show):
    ...     ...
    """
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with Progress(total, what, unit, **options) as counter:
        for item in iterable:
            yield item
            counter.update()
