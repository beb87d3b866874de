"""Reading the measured rows: how fast each kind's cost grows, and where it beats full.

A cost that grows as a power of the length, c(T) = a · T^p, is a straight line on log–log
axes, ln c = ln a + p · ln T, so its exponent p is the slope that least squares fits to the
points (ln T_i, ln c_i):

    p = Σ (u_i − ū)(v_i − v̄) / Σ (u_i − ū)²        u_i = ln T_i,  v_i = ln c_i

Full attention's time has p → 2 (the (T, T) scores), local and linear p → 1, strided with
stride √T p → 1.5. At short lengths the fixed costs (Python, each op's setup) hide the
growth, so ``fit_exponent`` fits only the lengths T >= 1,024 (``FIT_FROM``) when at least
two were measured, else the upper half of the lengths; it says which it used.

The CROSSOVER of a kind is the shortest measured length from which it is faster than full
attention at every longer measured length too (median times compared): below it, the
cheaper formula does not pay for its own overhead. None when it never is (in the range
measured).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ArgumentError

FIT_FROM = 1024  # the shortest length the exponents are fitted on (when two or more reach it)


def fit_lengths(lengths: Sequence[int]) -> list[int]:
    """The lengths an exponent is fitted on: those >= ``FIT_FROM`` when there are two or
    more, else the longer half of the sorted lengths (the middle one included; at least
    two); [] for fewer than two."""
    ordered = sorted(lengths)
    if len(ordered) < 2:
        return []
    long = [n for n in ordered if n >= FIT_FROM]
    if len(long) >= 2:
        return long
    start = min(len(ordered) // 2, len(ordered) - 2)  # at least two points
    return ordered[start:]  # 5 lengths: the last 3; 4: the last 2; 2: both


def fit_exponent(lengths: Sequence[float], values: Sequence[float]) -> dict[str, Any] | None:
    """The exponent p of values ≈ a · lengths^p, least squares in log–log space over
    ``fit_lengths(lengths)``: ``{"exponent": p, "lengths": [...], "rms": r}`` (``rms``: the
    residual in ln units, 0.05 = the line misses the points by about 5 %); None when fewer
    than two points with positive values remain."""
    if len(lengths) != len(values):
        raise ArgumentError(f"fit_exponent: {len(lengths)} lengths but {len(values)} values; "
                            "pass one value per length")  # fmt: skip
    by_length = {int(n): float(c) for n, c in zip(lengths, values, strict=True)}
    used = [n for n in fit_lengths(list(by_length)) if n > 0 and by_length[n] > 0
            and math.isfinite(by_length[n])]  # fmt: skip
    if len(used) < 2:
        return None
    u = np.log(np.asarray(used, dtype=np.float64))
    v = np.log(np.asarray([by_length[n] for n in used], dtype=np.float64))
    slope = float(((u - u.mean()) * (v - v.mean())).sum() / ((u - u.mean()) ** 2).sum())
    intercept = float(v.mean() - slope * u.mean())
    rms = float(np.sqrt(np.mean((v - (intercept + slope * u)) ** 2)))
    return {"exponent": slope, "lengths": used, "rms": rms}


def _medians(rows: Sequence[dict[str, Any]], kind: str, key: str = "median_s") -> dict[int, float]:
    return {int(r["length"]): float(r[key]) for r in rows if r["kind"] == kind and key in r}


def crossover(rows: Sequence[dict[str, Any]], kind: str, reference: str = "full",
              key: str = "median_s") -> int | None:  # fmt: skip
    """The shortest length at which ``kind``'s median time is below ``reference``'s and stays
    below at every longer length where both were measured; None when no such length (or
    no length where both were measured). ``key``: the rows' time (``cpu_median_s``: the CPU
    time)."""
    mine, theirs = _medians(rows, kind, key), _medians(rows, reference, key)
    found = None
    for length in sorted(set(mine) & set(theirs), reverse=True):  # from the longest down
        if mine[length] < theirs[length]:
            found = length
        else:
            break
    return found


def growth(rows: Sequence[dict[str, Any]], kind: str, factor: int = 4,
           key: str = "median_s") -> dict[str, Any] | None:  # fmt: skip
    """time(T) / time(T / factor) at the longest measured T whose T / factor was measured
    too: ``{"ratio": r, "from": T / factor, "to": T}``; None when no such pair. Linear in T
    gives ``factor``, quadratic ``factor``². ``key``: the rows' time (``cpu_median_s``: the
    CPU time)."""
    medians = _medians(rows, kind, key)
    for length in sorted(medians, reverse=True):
        if length % factor == 0 and length // factor in medians:
            short = length // factor
            return {"ratio": medians[length] / medians[short], "from": short, "to": length}
    return None


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind (in the rows' order): the time, CPU time and memory exponents
    (``fit_exponent`` or None), the crossover against full (``crossover``, on the median
    wall-clock and CPU times; None for full itself and when it never crosses) and the growth of the
    time and of the CPU time over the last 4× of length (``growth``)."""
    summary: dict[str, dict[str, Any]] = {}
    has_full = any(r["kind"] == "full" for r in rows)
    for kind in dict.fromkeys(r["kind"] for r in rows):
        mine = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["length"])
        lengths = [r["length"] for r in mine]
        summary[kind] = {
            "time_exponent": fit_exponent(lengths, [r["median_s"] for r in mine]),
            "cpu_time_exponent": fit_exponent(lengths, [r.get("cpu_median_s", 0) for r in mine]),
            "memory_exponent": fit_exponent(lengths, [r["peak_bytes"] for r in mine]),
            "crossover": crossover(rows, kind) if has_full and kind != "full" else None,
            "cpu_crossover": crossover(rows, kind, key="cpu_median_s")
            if has_full and kind != "full"
            else None,
            "compared_with_full": has_full and kind != "full",
            "growth_4x": growth(rows, kind),
            "cpu_growth_4x": growth(rows, kind, key="cpu_median_s"),
        }
    return summary


__all__ = ["FIT_FROM", "crossover", "fit_exponent", "fit_lengths", "growth", "summarize"]
