"""Argument checks shared by the public constructors and functions.

Each check returns the value (converted where that is lossless, e.g. a NumPy integer to an
int) or raises ArgumentError with one line naming where (``where``), the argument, what was
expected, what was given, and the fix. This module stands on the ground: it imports only
the error types.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from .errors import ArgumentError


def is_int(value: Any) -> bool:
    """An integer (Python or NumPy), not a bool."""
    t = type(value)
    if t is int:  # the common case, without the ABC machinery (ops check on every call)
        return True
    return t is not bool and isinstance(value, numbers.Integral)


def is_real(value: Any) -> bool:
    """A real number (Python or NumPy int/float), not a bool."""
    t = type(value)
    if t is float or t is int:
        return True
    return t is not bool and isinstance(value, numbers.Real)


def short(value: Any, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters (with "...") for an error message."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def listed(names: list[str], most: int = 3) -> str:
    """``a, b, c and 77 more``: at most ``most`` names, then how many are left, so a message
    about many parameters stays one readable line."""
    text = ", ".join(names[:most])
    return text + (f" and {len(names) - most} more" if len(names) > most else "")


def positive_int(where: str, name: str, value: Any, fix: str = "") -> int:
    """``value`` as an int >= 1 (a size: widths, heads, vocabulary, lengths)."""
    if not is_int(value) or value < 1:
        raise ArgumentError(
            f"{where}: {name} must be a positive int, got {value!r}"
            + (f"; {fix}" if fix else f"; pass a whole number >= 1, e.g. {name}=8")
        )
    return int(value)


def non_negative_int(where: str, name: str, value: Any, fix: str = "") -> int:
    """``value`` as an int >= 0."""
    if not is_int(value) or value < 0:
        raise ArgumentError(
            f"{where}: {name} must be a non-negative int, got {value!r}"
            + (f"; {fix}" if fix else f"; pass a whole number >= 0, e.g. {name}=0")
        )
    return int(value)


def real(
    where: str,
    name: str,
    value: Any,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
    fix: str = "",
) -> float:
    """``value`` as a finite float inside [low, high] (each end open when asked)."""
    ok = is_real(value) and math.isfinite(float(value))
    if ok:
        v = float(value)
        ok = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    if not ok:
        if high == math.inf:
            span = f"{'>' if low_open else '>='} {low:g}"
        else:
            span = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ArgumentError(
            f"{where}: {name} must be a finite number {span}, got {value!r}"
            + (f"; {fix}" if fix else "")
        )
    return float(value)


def probability(where: str, name: str, value: Any) -> float:
    """A dropout-like probability in [0, 1)."""
    return real(
        where, name, value, 0.0, 1.0, high_open=True,
        fix=f"pass e.g. {name}=0.1 (0 turns it off; 1 would drop everything)",
    )  # fmt: skip


def flag(where: str, name: str, value: Any) -> bool:
    """A real bool (not 0/1, not a string such as "false", which Python reads as True)."""
    if not isinstance(value, bool):
        raise ArgumentError(f"{where}: {name} must be True or False, got {value!r}")
    return value
