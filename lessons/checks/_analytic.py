"""Telling an analytic derivative from a numerical one (lessons 02, 03 and 05).

An exercise that asks for a derivative written out is compared in float64 at ``EXACT``
(1e-12) of the size of what each entry sums, ``scale``: the sum of the magnitudes of its
terms, so an entry near 0 because its terms cancel is still held to its terms' rounding.
An analytic answer lands within a few units of float64's rounding (about 1e-16). Central
differences cannot: their error is the rounding of the loss (eps · |L| / h, with |L| the size
of the whole loss, far above a small entry's) plus the truncation (h² · f''' / 6); at their best
step it stays above 1e-11 on the checks' inputs, whose entries span many orders of magnitude.
An answer within ``NEAR`` (1e-4, of the largest scale) but not ``EXACT`` gets the hint that
says so (``numerical_hint``): finite differences, or float32 arithmetic.

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

import numpy as np

from ._shared import _array

EXACT = 1e-12  # of each entry's scale: beyond what finite differences reach
NEAR = 1e-4  # of the largest scale: close, so the answer is numerical (or float32)


def floats(x, what: str) -> np.ndarray:
    """``x`` as a float64 NumPy array: NumPy, a list, or a Tensor (``_shared._array``)."""
    return _array(x, what, kinds="iuf").astype(np.float64)


def gap(got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> float:
    """The largest ``|got - want|`` in units of each entry's ``scale`` (inf on a shape
    mismatch or a non-finite entry). An entry whose scale is 0 must be exactly 0."""
    if got.shape != want.shape or not np.isfinite(got).all():
        return np.inf
    scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), want.shape)
    error = np.abs(got - want)
    if (error[scale == 0] > 0).any():
        return np.inf
    kept = scale > 0
    return float((error[kept] / scale[kept]).max(initial=0.0))


def exact(got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> bool:
    """Whether ``got`` is ``want`` to within ``EXACT`` of each entry's scale."""
    return gap(got, want, scale) <= EXACT


def near(got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> bool:
    """Whether ``got`` is ``want`` to within ``NEAR`` of the largest scale (what finite
    differences and float32 give)."""
    if got.shape != want.shape or not np.isfinite(got).all():
        return False
    largest = float(np.max(np.abs(scale), initial=0.0))
    return float(np.abs(got - want).max(initial=0.0)) <= NEAR * max(largest, 1e-300)


def numerical_hint(what: str) -> str:
    """The hint for an answer that is ``near`` but not ``exact``."""
    return (
        f"{what} is close to the derivative (within {NEAR:g}) but not equal to it at "
        f"{EXACT:g} of each entry's size: finite differences, or float32 arithmetic? This "
        "exercise asks for the analytic derivative: write it out with the chain rule, in float64"
    )
