"""Fitting power laws to the study: least squares in log–log space, the compute frontier, the
exponents of each seed and their spread.

A power law with an irreducible floor E (0 unless given),

    L(x) = E + a · x^(−α)     ⇔     ln(L − E) = ln a − α · ln x,

is a straight line in log–log space, so α and ln a come from ordinary least squares on the
points (u_i, v_i) = (ln x_i, ln(L_i − E)):

    α = − Σ (u_i − ū)(v_i − v̄) / Σ (u_i − ū)²        ln a = v̄ + α · ū

Every point weighs the same in log space (a relative error, not an absolute one). E is not
fitted: with a handful of points almost any E below the smallest loss fits about as well,
and the exponent moves with it — so E is an assumption the caller states, and the lesson
shows how α depends on it. ``rms`` is the root-mean-square residual in ln units: 0.01 means
the line misses the points by about 1 % of (L − E).

Against compute: at one token budget D, C = 6·N·D is proportional to N, so a fit of the
final losses against C has the same α as against N. Kaplan et al.'s L(C) is a different
curve: the lower envelope (the *frontier*) of every run's loss-against-compute curve, the
least loss any size reached with at most C FLOPs. ``frontier`` picks those points from the
curves each run measured on its way (fewer tokens = less compute), and ``fit_study`` fits
the frontier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ... import checks
from ...errors import ArgumentError

MIN_POINTS = 3  # two points always lie on a line: a fit needs at least one more to be tested


@dataclass(frozen=True)
class PowerLaw:
    """L(x) = floor + a · x^(−alpha), fitted to ``points`` points with ``rms`` residual
    (ln units)."""

    a: float
    alpha: float
    floor: float
    points: int
    rms: float

    def __call__(self, x: Any) -> Any:
        """The fitted loss at ``x`` (a number or an array)."""
        return self.floor + self.a * np.asarray(x, dtype=np.float64) ** (-self.alpha)

    def __str__(self) -> str:
        floor = f"{self.floor:g} + " if self.floor else ""
        return f"L = {floor}{self.a:.4g}·x^(−{self.alpha:.4f})  ({self.points} points)"

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _positive_1d(where: str, name: str, values: Any) -> np.ndarray:
    """``values`` as a 1-D float64 array of finite numbers, or ArgumentError."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ArgumentError(
            f"{where}: {name} must be a list of numbers, got {checks.short(values)}"
        ) from None
    if array.ndim != 1:
        raise ArgumentError(f"{where}: {name} must be 1-D (one value per point), got shape "
                            f"{array.shape}")  # fmt: skip
    if not np.all(np.isfinite(array)):
        raise ArgumentError(f"{where}: {name} holds NaN or infinite values "
                            f"({checks.short(values)}); leave out diverged runs")  # fmt: skip
    return array


def fit_power_law(x: Sequence[float], y: Sequence[float], floor: float = 0.0) -> PowerLaw:
    """Fit L = floor + a·x^(−α) to the points (x_i, y_i) by least squares on ln x and
    ln(y − floor); see the module doc. Needs at least 3 points, every x > 0 (two of them
    different) and every y > floor >= 0; raises ArgumentError naming what is wrong."""
    where = "fit_power_law"
    xs, ys = _positive_1d(where, "x", x), _positive_1d(where, "y", y)
    if len(xs) != len(ys):
        raise ArgumentError(f"{where}: x has {len(xs)} values and y {len(ys)}; give one y per x")
    if len(xs) < MIN_POINTS:
        raise ArgumentError(
            f"{where}: got {len(xs)} point(s); a power law needs at least {MIN_POINTS} (two "
            "points always lie on a line, so they test nothing): add sizes"
        )
    floor = checks.real(where, "floor", floor, 0.0, fix="the irreducible loss, e.g. floor=0.0")
    if np.any(xs <= 0):
        raise ArgumentError(f"{where}: every x must be > 0 (log x), got {checks.short(list(xs))}")
    if np.any(ys <= floor):
        raise ArgumentError(
            f"{where}: every y must be above floor = {floor:g} (log(y - floor)), got "
            f"min(y) = {ys.min():g}; lower the floor"
        )
    u, v = np.log(xs), np.log(ys - floor)
    du = u - u.mean()
    if not np.any(du):
        raise ArgumentError(f"{where}: every x is {xs[0]:g}; a slope needs two different x")
    alpha = -float(du @ (v - v.mean()) / (du @ du))
    log_a = float(v.mean() + alpha * u.mean())
    rms = float(np.sqrt(np.mean((v - (log_a - alpha * u)) ** 2)))
    return PowerLaw(a=math.exp(log_a), alpha=alpha, floor=floor, points=len(xs), rms=rms)


def local_exponents(x: Sequence[float], y: Sequence[float]) -> list[float]:
    """The slope between neighbouring points, −Δ ln y / Δ ln x (sorted by x): constant for
    a power law, changing where the curve bends."""
    where = "local_exponents"
    xs, ys = _positive_1d(where, "x", x), _positive_1d(where, "y", y)
    if len(xs) != len(ys) or np.any(xs <= 0) or np.any(ys <= 0):
        raise ArgumentError(f"{where}: give as many y as x, all > 0")
    order = np.argsort(xs)
    u, v = np.log(xs[order]), np.log(ys[order])
    return [float(-(v[i + 1] - v[i]) / (u[i + 1] - u[i])) for i in range(len(u) - 1)]


def frontier(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points (C, L) on the lower envelope: those with a lower L than every point of
    smaller or equal C — the least loss reached with at most C FLOPs. Sorted by C."""
    best, out = math.inf, []
    for c, loss in sorted(points, key=lambda p: (p[0], p[1])):
        if loss < best and math.isfinite(loss):
            out.append((c, loss))
            best = loss
    return out


def _seed_runs(study: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    return [r for r in study["results"] if r["seed"] == seed and not r["diverged"]]


def fit_seed(study: dict[str, Any], seed: int, floor: float = 0.0) -> dict[str, Any]:
    """One seed's fits: "params" (final validation loss against non-embedding parameters),
    "total" (against all parameters), "compute" (the frontier against C = 6·N·tokens), each
    a PowerLaw or None (fewer than 3 points: a run diverged, or too few sizes), and the
    frontier's points."""
    runs = _seed_runs(study, seed)
    out: dict[str, Any] = {"seed": seed}
    for key, x in (("params", "non_embedding"), ("total", "parameters")):
        xs, ys = [r[x] for r in runs], [r["valid_loss"] for r in runs]
        out[key] = fit_power_law(xs, ys, floor) if len(runs) >= MIN_POINTS else None
    points = [(6.0 * r["non_embedding"] * c["tokens"], c["valid_loss"])
              for r in runs for c in r["curve"]]  # fmt: skip
    edge = frontier(points)
    out["frontier"] = edge
    out["compute"] = (
        fit_power_law([c for c, _ in edge], [v for _, v in edge], floor)
        if len(edge) >= MIN_POINTS else None
    )  # fmt: skip
    return out


def spread(values: Sequence[float]) -> dict[str, Any]:
    """{"values", "mean", "min", "max", "half_range"} of per-seed numbers (NaN-free)."""
    v = [float(x) for x in values]
    if not v:
        return {"values": [], "mean": math.nan, "min": math.nan, "max": math.nan,
                "half_range": math.nan}  # fmt: skip
    return {"values": v, "mean": sum(v) / len(v), "min": min(v), "max": max(v),
            "half_range": (max(v) - min(v)) / 2}  # fmt: skip


def fit_study(study: dict[str, Any], floor: float = 0.0) -> dict[str, Any]:
    """Every seed's fits (``fit_seed``) and, per kind, the exponents' spread over the seeds:
    {"floor", "seeds": [...], "alpha": {"params": spread, "total": ..., "compute": ...}}."""
    seeds = list(dict.fromkeys(r["seed"] for r in study["results"]))
    per_seed = [fit_seed(study, s, floor) for s in seeds]
    alpha = {
        kind: spread([f[kind].alpha for f in per_seed if f[kind] is not None])
        for kind in ("params", "total", "compute")
    }
    return {"floor": floor, "seeds": per_seed, "alpha": alpha}


def fits_to_json(fits: dict[str, Any]) -> dict[str, Any]:
    """``fit_study``'s result with every PowerLaw as a dict (for json.dumps)."""
    seeds = [{k: (v.to_dict() if isinstance(v, PowerLaw) else v) for k, v in f.items()}
             for f in fits["seeds"]]  # fmt: skip
    return {**fits, "seeds": seeds}


__all__ = [
    "MIN_POINTS", "PowerLaw", "fit_power_law", "fit_seed", "fit_study", "fits_to_json",
    "frontier", "local_exponents", "spread",
]  # fmt: skip
