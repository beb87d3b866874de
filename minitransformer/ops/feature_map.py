"""The feature maps of linear attention (``ops/linear_attention.py``): phi(x) > 0 elementwise,
so phi(q_i) · phi(k_j) >= 0 plays the part of softmax's unnormalised weight exp(q_i · k_j).

    "elu1":  phi(x) = elu(x) + 1 = x + 1 (x > 0),  e^x (x <= 0)     (Katharopoulos et al. 2020)
             phi'(x) = 1 (x > 0),  e^x (x <= 0)  = where(x > 0, 1, phi(x))

phi is computed as e^min(x, 0) on the negative side, so a large positive x never overflows
e^x in the branch that ``where`` throws away. ``FEATURE_MAPS`` maps each name to its pair
(phi, phi'): ``phi(xp, x)`` and ``phi'(xp, x, y)`` from y = phi(x) (which forward keeps),
each an array of x's shape and dtype.
"""

from __future__ import annotations

from typing import Any

from ..checks import short
from ..errors import ArgumentError


def elu1(xp: Any, x: Any) -> Any:
    """phi(x) = elu(x) + 1: x + 1 for x > 0, e^x otherwise (always > 0)."""
    return xp.where(x > 0, x + 1.0, xp.exp(xp.minimum(x, 0.0)))


def elu1_derivative(xp: Any, x: Any, y: Any) -> Any:
    """phi'(x) = 1 for x > 0, e^x otherwise, from x and y = phi(x) (e^x is y there)."""
    return xp.where(x > 0, 1.0, y)


FEATURE_MAPS = {"elu1": (elu1, elu1_derivative)}


def check_feature_map(where: str, feature_map: Any) -> str:
    """``feature_map`` as one of the names in FEATURE_MAPS; else ArgumentError listing them."""
    known = ", ".join(repr(name) for name in FEATURE_MAPS)
    if not isinstance(feature_map, str):
        raise ArgumentError(
            f"{where}: feature_map must be a str naming the feature map, got "
            f"{short(feature_map)}; pass one of {known}, e.g. feature_map='elu1'"
        )
    if feature_map not in FEATURE_MAPS:
        raise ArgumentError(
            f"{where}: feature_map {short(feature_map)} is unknown; the known ones are "
            f"{known} ('elu1': phi(x) = elu(x) + 1)"
        )
    return feature_map
