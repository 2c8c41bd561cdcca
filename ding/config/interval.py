"""Real intervals in mathematical notation (``'(0, inf)'``, ``'[0, 1]'``): the one parser for config bounds
and run-control tune limits."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache

_NOTATION = re.compile(r'\s*([\[(])\s*(-?[\w.+-]+)\s*,\s*(-?[\w.+-]+)\s*([\])])\s*')


def format_number(x: float) -> str:
    """``1`` for 1.0, ``inf`` / ``-inf``, the shortest exact form otherwise."""
    if math.isinf(x):
        return 'inf' if x > 0 else '-inf'
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


@dataclass(frozen=True)
class Interval:
    """A real interval; ``lo``/``hi`` may be infinite."""

    lo: float
    hi: float
    lo_closed: bool
    hi_closed: bool

    @classmethod
    @cache
    def parse(cls, text: str) -> Interval:
        m = _NOTATION.fullmatch(text)
        if not m:
            raise ValueError(f'malformed interval {text!r}')
        return cls(float(m.group(2)), float(m.group(3)), m.group(1) == '[', m.group(4) == ']')

    def intersect(self, other: Interval) -> Interval:
        if self.lo > other.lo or (self.lo == other.lo and not self.lo_closed):
            lo, lo_closed = self.lo, self.lo_closed
        else:
            lo, lo_closed = other.lo, other.lo_closed
        if self.hi < other.hi or (self.hi == other.hi and not self.hi_closed):
            hi, hi_closed = self.hi, self.hi_closed
        else:
            hi, hi_closed = other.hi, other.hi_closed
        return Interval(lo, hi, lo_closed, hi_closed)

    def __contains__(self, value: float) -> bool:
        above = value >= self.lo if self.lo_closed else value > self.lo
        below = value <= self.hi if self.hi_closed else value < self.hi
        return above and below

    def describe(self) -> str:
        """What a value must be, for an error message: ``>= 0`` when unbounded above, else ``in [0, 1]``."""
        if math.isinf(self.hi) and self.hi > 0:
            return f'{">=" if self.lo_closed else ">"} {format_number(self.lo)}'
        return f'in {self}'

    def __str__(self) -> str:
        return '{}{}, {}{}'.format(
            '[' if self.lo_closed else '(',
            format_number(self.lo),
            format_number(self.hi),
            ']' if self.hi_closed else ')',
        )
