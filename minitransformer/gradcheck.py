"""gradcheck: compare an op's backward with central finite differences, in float64.

For f(x) with output y and a random upstream gradient u, the scalar L = sum(u * y) has
dL/dx = J^T u, which is exactly what backward computes. Numerically, for each element x_j:

    dL/dx_j  ~  (L(x + eps e_j) - L(x - eps e_j)) / (2 eps)        error O(eps^2)

A random u (not all ones) catches backward passes that are wrong only in some directions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import backend
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
    Returns True, or raises GradcheckError naming the input index, the element position,
    the analytic and the numeric value of the worst mismatch.
    """
    checked = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input has requires_grad=True, nothing to check")
    for i in checked:
        if backend.dtype_name(inputs[i].dtype) != "float64":
            raise TypeError(
                f"gradcheck: input {i} is {backend.dtype_name(inputs[i].dtype)}; finite "
                "differences need float64: make it with dtype='float64'"
            )
    for i in checked:
        inputs[i].grad = None

    out = fn(*inputs)
    xp = backend.namespace(out.data)
    rng = backend.np.random.default_rng(seed)
    u_host = rng.standard_normal(out.shape)
    u = backend.asarray(u_host, dtype="float64", device=out.device)
    out.backward(u)

    def loss() -> float:
        with no_grad():
            y = fn(*inputs)
        return float(backend.np.sum(backend.to_numpy(y.data) * u_host))

    worst = None  # (excess error, input index, position, analytic, numeric)
    for i in checked:
        x = inputs[i]
        analytic = x.grad
        analytic = backend.np.zeros(x.shape) if analytic is None else backend.to_numpy(analytic)
        for flat in range(x.size):
            pos = tuple(int(p) for p in backend.np.unravel_index(flat, x.shape))
            original = float(x.data[pos])
            x.data[pos] = original + eps
            plus = loss()
            x.data[pos] = original - eps
            minus = loss()
            x.data[pos] = original
            numeric = (plus - minus) / (2 * eps)
            a = float(analytic[pos])
            excess = abs(a - numeric) - (atol + rtol * abs(numeric))
            if worst is None or excess > worst[0]:
                worst = (excess, i, pos, a, numeric)
    del xp
    if worst is not None and worst[0] > 0:
        _, i, pos, a, numeric = worst
        raise GradcheckError(
            f"gradcheck failed for input {i} at position {pos}: backward gives {a:.10g}, "
            f"finite differences give {numeric:.10g} (|diff| {abs(a - numeric):.3g} > "
            f"atol {atol} + rtol {rtol} * |numeric|)"
        )
    return True
