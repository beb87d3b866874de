"""Telling an analytic derivative from a numerical one: the one rule of every check that
asks for a derivative (lessons 01, 02, 03, 04, 05 and 21).

An exercise that asks for a derivative written out is compared in float64 at ``EXACT``
(1e-12) of each entry's ``scale``. Where a check knows what each entry sums (lessons 02, 03,
05), the scale is the sum of the magnitudes of its terms, so an entry near 0 because its
terms cancel is still held to its terms' rounding; otherwise (``scale=None``) it is the
gradient's size, 1 + its largest magnitude, for every entry. An analytic answer lands within
a few units of float64's rounding (about 1e-16). Central differences cannot: their error is
the rounding of the loss (eps · |L| / h, with |L| the size of the whole loss, far above a
small entry's) plus the truncation (h² · f''' / 6); at their best step it stays above 1e-11
on the checks' inputs. An answer within ``NEAR`` (1e-4, of the largest scale) but not
``EXACT`` gets the hint that says so (``numerical_hint``): finite differences, or float32
arithmetic.

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._shared import _array

EXACT = 1e-12  # of each entry's scale: beyond what finite differences reach
NEAR = 1e-4  # of the largest scale: close, so the answer is numerical (or float32)


def floats(x, what: str) -> np.ndarray:
    """``x`` as a float64 NumPy array: NumPy, a list, or a Tensor (``_shared._array``)."""
    return _array(x, what, kinds="iuf").astype(np.float64)


def whole_size(want: np.ndarray) -> float:
    """The scale of every entry when a check gives none: the gradient's size,
    1 + its largest magnitude."""
    return 1.0 + float(np.abs(want).max(initial=0.0))


def gap(got: np.ndarray, want: np.ndarray, scale: np.ndarray | None = None) -> float:
    """The largest ``|got - want|`` in units of each entry's ``scale`` (None: ``whole_size``;
    inf on a shape mismatch or a non-finite entry). An entry whose scale is 0 must be
    exactly 0."""
    if got.shape != want.shape or not np.isfinite(got).all():
        return np.inf
    scale = whole_size(want) if scale is None else scale
    scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), want.shape)
    error = np.abs(got - want)
    if (error[scale == 0] > 0).any():
        return np.inf
    kept = scale > 0
    return float((error[kept] / scale[kept]).max(initial=0.0))


def exact(got: np.ndarray, want: np.ndarray, scale: np.ndarray | None = None) -> bool:
    """Whether ``got`` is ``want`` to within ``EXACT`` of each entry's scale."""
    return gap(got, want, scale) <= EXACT


def near(got: np.ndarray, want: np.ndarray, scale: np.ndarray | None = None) -> bool:
    """Whether ``got`` is ``want`` to within ``NEAR`` of the largest scale (what finite
    differences and float32 give)."""
    if got.shape != want.shape or not np.isfinite(got).all():
        return False
    scale = whole_size(want) if scale is None else scale
    largest = float(np.max(np.abs(scale), initial=0.0))
    return float(np.abs(got - want).max(initial=0.0)) <= NEAR * max(largest, 1e-300)


def numerical_hint(what: str) -> str:
    """The hint for an answer that is ``near`` but not ``exact``."""
    return (
        f"{what} is close to the derivative (within {NEAR:g}) but not equal to it at "
        f"{EXACT:g} of its size: finite differences, or float32 arithmetic? This "
        "exercise asks for the analytic derivative: write it out with the chain rule, in float64"
    )


def assert_derivative(got: Any, want: np.ndarray, where: str) -> None:
    """Assert that ``got`` is the derivative ``want`` (float64) to ``EXACT`` of the
    gradient's size; one only ``near`` it gets ``numerical_hint``, anything else the hint
    that it is not the derivative."""
    got = np.asarray(got, dtype=np.float64)
    if not exact(got, want):
        assert not near(got, want), numerical_hint(where)
        raise AssertionError(f"{where} is not the derivative")
