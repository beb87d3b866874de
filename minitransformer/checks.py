"""Argument checks shared by the public constructors and functions.

Each check returns the value (converted where that is lossless, e.g. a NumPy integer to an
int) or raises ArgumentError with one line naming where (``where``), the argument, what was
expected, what was given, and the fix. This module stands on the ground: it imports only
the error types.
"""

from __future__ import annotations

import math
import numbers
import os
import unicodedata
from pathlib import Path
from typing import Any

from .errors import ArgumentError, CheckpointError


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
    """``repr(value)`` cut to ``width`` characters (with "...") for an error message; an int
    of more than 40 digits by its size in bits, and a value Python cannot write out (one
    holding an int beyond its 4,300 digits of repr) by its type."""
    if is_int(value) and abs(value) > 10**40:  # its digits would be the whole message
        sign = "a negative" if value < 0 else "an"
        return f"{sign} int of {int(value).bit_length():,} bits"
    try:
        text = repr(value)
    except ValueError:
        return f"a {type(value).__name__} holding a number too long to show"
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
            f"{where}: {name} must be a positive int, got {short(value)}"
            + (f"; {fix}" if fix else f"; pass a whole number >= 1, e.g. {name}=8")
        )
    return int(value)


def non_negative_int(where: str, name: str, value: Any, fix: str = "") -> int:
    """``value`` as an int >= 0."""
    if not is_int(value) or value < 0:
        raise ArgumentError(
            f"{where}: {name} must be a non-negative int, got {short(value)}"
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
    try:
        ok = is_real(value) and math.isfinite(float(value))
    except OverflowError:  # an int beyond a float's range
        ok = False
    if ok:
        v = float(value)
        ok = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    if not ok:
        if high == math.inf:
            span = f"{'>' if low_open else '>='} {low:g}"
        else:
            span = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ArgumentError(
            f"{where}: {name} must be a finite number {span}, got {short(value)}"
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


def auto_or_flag(where: str, name: str, value: Any, auto: str) -> bool | str:
    """ "auto" or a real bool (``flag``); ``auto`` says what "auto" does, for the message."""
    if isinstance(value, bool) or (isinstance(value, str) and value == "auto"):
        return value
    raise ArgumentError(f"{where}: {name} must be 'auto', True or False, got {value!r}; {auto}")


LINE_BREAKING = ("Cc", "Zl", "Zp")  # control characters (newline, tab, NUL), line separators
PATH_MAX = 4096  # bytes of a path Linux looks up (PATH_MAX); a longer name is refused unread


def checked_path(where: str, path: Any, what: str = "a run directory or a checkpoint file") -> Path:
    """``path`` (a str or os.PathLike) as a Path, checked before the file system sees it:
    not another type (None, bytes, a number, a list), not blank, no control character or
    line separator (a newline would split the messages that name it), not longer than
    PATH_MAX bytes. ``where`` names the caller (``TextSampler.from_checkpoint``), ``what``
    the path it expects (``a Marian folder``)."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(text, str):
        raise ArgumentError(
            f"{where}: the path must be {what}, as a str or pathlib.Path, got "
            f"{type(path).__name__} ({short(path)})"
        )
    if not text.strip():
        raise ArgumentError(f"{where}: the path is blank ({text!r}); give {what}")
    shown = shown_name(text)
    if any(unicodedata.category(c) in LINE_BREAKING for c in text):
        raise ArgumentError(
            f"{where}: the path {shown} holds a control character (a newline or tab?); pass "
            "the path on its own"
        )
    if len(text.encode("utf-8", "surrogateescape")) > PATH_MAX:
        raise CheckpointError(
            f"{where}: {shown} cannot be a path here (File name too long); a path holds "
            f"at most {PATH_MAX:,} bytes: give {what}"
        )
    return Path(text)


def shown_name(name: str) -> str:
    """``name`` as a one-line message shows it: quoted when it holds a control character,
    cut to 100 characters (with the full length) when longer."""
    text = name if name.isprintable() else repr(name)
    return text if len(text) <= 100 else f"{text[:100]}... ({len(name)} characters)"
