"""The range checks of the optimizers' hyperparameters (lr, betas, eps, momentum, max_norm).

Unlike ``checks.real`` it admits ``math.inf`` where the range allows it (``max_norm=inf``:
measure the norm only) and raises ConfigError, what a wrong optimizer setting is.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import ConfigError


def check_number(owner: str, name: str, value: Any, low: float, high: float = math.inf,
                 low_open: bool = False, high_open: bool = False) -> float:  # fmt: skip
    """``value`` as a float inside the range, else ConfigError naming it and the range."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    x = float(value) if ok else math.nan
    inside = (x > low if low_open else x >= low) and (x < high if high_open else x <= high)
    if not (ok and inside):
        lo, hi = "(" if low_open else "[", ")" if high_open else "]"
        raise ConfigError(
            f"{owner}: {name} must be a number in {lo}{low}, {high}{hi}, got {value!r}"
        )
    return x


def check_betas(owner: str, betas: Any) -> tuple[float, float]:
    """Adam's and AdamW's ``betas``: a pair (β1, β2), each in [0, 1), else ConfigError."""
    if not isinstance(betas, tuple | list) or len(betas) != 2:
        raise ConfigError(f"{owner}: betas must be a pair (β1, β2), got {betas!r}")
    b1 = check_number(owner, "betas[0]", betas[0], 0.0, 1.0, high_open=True)
    b2 = check_number(owner, "betas[1]", betas[1], 0.0, 1.0, high_open=True)
    return b1, b2
