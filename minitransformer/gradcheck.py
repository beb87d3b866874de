"""gradcheck: compare an op's backward with central finite differences, in float64.

For f(x) with output y and a random upstream gradient u, the scalar L = sum(u * y) has
dL/dx = J^T u, which is exactly what backward computes. Numerically, for each element x_j:

    dL/dx_j  ~  (L(x + eps e_j) - L(x - eps e_j)) / (2 eps)        error O(eps^2)

A random u (not all ones) catches backward passes that are wrong only in some directions.

An element passes when both values are finite and |analytic - numeric| <= atol + rtol *
|numeric|. A NaN or Inf on either side fails, whatever the other elements do (a NaN compares
False with everything, so a check written as "worst error > tolerance" would let it through).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np  # the finite differences are host arithmetic

from . import backend
from .checks import non_negative_int, real, short
from .errors import ArgumentError, DTypeError
from .tensor import Tensor, no_grad


class GradcheckError(AssertionError):
    """backward disagrees with finite differences; the message gives the worst element."""


def gradcheck(
    fn: Callable[..., Tensor],
    *inputs: Any,
    eps: float = 1e-6,
    atol: float = 1e-6,
    rtol: float = 1e-4,
    seed: int = 0,
) -> bool:
    """Check ``fn``'s gradients w.r.t. every input Tensor with ``requires_grad=True``.

    Inputs must be float64 (finite differences in float32 are too noisy to mean much).
    ``eps`` > 0 is the step, ``atol`` > 0 and ``rtol`` >= 0 the tolerance, all finite.
    Returns True, or raises GradcheckError naming the input index, the element position,
    the analytic and the numeric value of the worst element (a non-finite one first, else
    the one furthest beyond the tolerance) and how many elements fail.
    """
    if not callable(fn):
        raise ArgumentError(
            f"gradcheck: fn must be a function of the inputs that returns a Tensor, got "
            f"{type(fn).__name__} {short(fn, 40)}; call it as mt.gradcheck(F.tanh, x) or "
            "mt.gradcheck(lambda x: (x * x).sum(), x)"
        )
    eps = real("gradcheck", "eps", eps, 0.0, low_open=True, fix="the usual step is 1e-6")
    atol = real(
        "gradcheck", "atol", atol, 0.0, low_open=True,
        fix="finite differences carry rounding error, so use e.g. atol=1e-6",
    )  # fmt: skip
    rtol = real("gradcheck", "rtol", rtol, 0.0, fix="use e.g. rtol=1e-4 (0 = absolute only)")
    seed = non_negative_int("gradcheck", "seed", seed, "the seed of the random upstream gradient")
    checked = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ArgumentError(
            "gradcheck: no input has requires_grad=True, nothing to check; make the inputs "
            "with mt.tensor(..., requires_grad=True)"
        )
    for i in checked:
        if backend.dtype_name(inputs[i].dtype) != "float64":
            raise DTypeError(
                f"gradcheck: input {i} is {backend.dtype_name(inputs[i].dtype)}; finite "
                "differences need float64: make it with dtype='float64'"
            )
    for i in checked:
        inputs[i].grad = None

    out = fn(*inputs)
    if not isinstance(out, Tensor):
        raise ArgumentError(
            f"gradcheck: fn returned {type(out).__name__} {short(out, 40)}, need a Tensor (the "
            "output whose gradient is checked); return the op's result itself, not .numpy()"
        )
    rng = np.random.default_rng(seed)
    u_host = rng.standard_normal(out.shape)
    u = backend.asarray(u_host, dtype="float64", device=out.device)
    out.backward(u)

    def loss() -> float:
        with no_grad():
            y = fn(*inputs)
        with np.errstate(all="ignore"):  # a NaN here is reported below, not warned about
            return float(np.sum(backend.to_numpy(y.data) * u_host))

    failures = 0
    total = 0
    worst = None  # (rank, input index, position, analytic, numeric); higher rank = worse
    for i in checked:
        x = inputs[i]
        analytic = np.zeros(x.shape) if x.grad is None else backend.to_numpy(x.grad)
        analytic = np.asarray(analytic, dtype=np.float64).reshape(x.shape)
        numeric = np.empty(x.shape)
        for flat in range(x.size):
            pos = tuple(int(p) for p in np.unravel_index(flat, x.shape))
            original = float(x.data[pos])
            x.data[pos] = original + eps
            plus = loss()
            x.data[pos] = original - eps
            minus = loss()
            x.data[pos] = original
            numeric[pos] = (plus - minus) / (2 * eps)
        with np.errstate(all="ignore"):
            finite = np.isfinite(analytic) & np.isfinite(numeric)
            excess = np.abs(analytic - numeric) - (atol + rtol * np.abs(numeric))
        bad = ~finite | ~(excess <= 0)
        failures += int(bad.sum())
        total += x.size
        if not bad.any():
            continue
        if not np.isfinite(analytic).all():  # a NaN/Inf from backward is the worst
            flat = int(np.flatnonzero(~np.isfinite(analytic))[0])
            rank = np.inf
        elif not finite.all():  # then a NaN/Inf finite difference
            flat = int(np.flatnonzero(~finite)[0])
            rank = np.finfo(np.float64).max
        else:
            flat = int(np.argmax(excess))
            rank = float(excess.reshape(-1)[flat])  # < float max
        pos = tuple(int(p) for p in np.unravel_index(flat, x.shape))
        if worst is None or rank > worst[0]:
            worst = (rank, i, pos, float(analytic[pos]), float(numeric[pos]))
    if worst is not None:
        rank, i, pos, a, n = worst
        if not np.isfinite(a):
            why = "backward is not finite"
        elif not np.isfinite(n):
            why = "the finite difference is not finite: is fn smooth at this point?"
        else:
            why = f"|diff| {abs(a - n):.3g} > atol {atol:g} + rtol {rtol:g} * |numeric|"
        raise GradcheckError(
            f"gradcheck failed for input {i} at position {pos}: backward gives {a:.10g}, "
            f"finite differences give {n:.10g} ({why}); {failures} of {total} elements fail"
        )
    return True
