"""Gradient clipping by the global norm, and the finiteness check of gradients.

    total = √(Σ_p ‖∇p‖²);   ∇p ← ∇p · min(1, max_norm / (total + 1e-6))

as ``torch.nn.utils.clip_grad_norm_``. A NaN or Inf total leaves the gradients as they are
(the caller skips the step). The pieces here serve both users: ``clip_grad_norm(params)``,
one parameter at a time with one host read of the norm, and ``Optimizer.clip_grad_norm``,
which applies ``total_norm`` and ``clip_coefficient`` to its flat gradient buffers on the
device (no host read).
Twins: ``fast/cupy/clip.py`` (``clip_flat``, ``step_ok``; ``fast/cuda/grad_norm.cu``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .. import backend
from ..tensor import Tensor
from .hyperparameters import check_number

Array = backend.Array


def total_norm(grads: list[Array]) -> Array:
    """√(Σ_i ‖g_i‖²) of arrays on ONE device, as a 0-d array there (no host read). Norms of
    different dtypes are combined in float64."""
    xp = backend.namespace(grads[0])
    norms = [xp.linalg.vector_norm(g) for g in grads]
    if len(norms) == 1:
        return norms[0]
    if len({n.dtype for n in norms}) > 1:
        norms = [xp.astype(n, xp.float64) for n in norms]
    return xp.linalg.vector_norm(xp.stack(norms))


def clip_coefficient(total: Array, max_norm: float) -> Array:
    """min(1, max_norm / (total + 1e-6)) as a 0-d array on ``total``'s device; 1 where
    ``total`` is NaN or Inf, so the gradients are left as they are."""
    xp = backend.namespace(total)
    coef = xp.clip(max_norm / (total + 1e-6), max=1.0)
    return xp.where(xp.isfinite(total), coef, xp.ones_like(coef))


def clip_flat(grads: list[Array], max_norm: float) -> Array:
    """The total norm of an optimizer's flat gradient buffers ``grads`` (one per dtype, on
    one device), as a 0-d array there, and, unless ``max_norm`` is inf, every buffer scaled
    in place by ``clip_coefficient``: what ``Optimizer.clip_grad_norm`` does."""
    total = total_norm(grads)
    if max_norm != math.inf:
        coef = clip_coefficient(total, max_norm)
        xp = backend.namespace(total)
        for grad in grads:
            grad *= xp.astype(coef, grad.dtype)
    return total


def step_ok(loss: Array, norm: Array, prev: Array | None = None) -> Array:
    """isfinite(loss) & isfinite(norm) (& prev): the 0-d bool, on the device, that lets a
    training step's update be applied (``Optimizer.step(apply_if=...)``): no host read."""
    xp = backend.namespace(norm)
    ok = xp.isfinite(loss) & xp.isfinite(norm)
    return ok if prev is None else ok & prev


def _with_grad_by_device(params: Iterable[Tensor]) -> tuple[list[Tensor], dict[str, list[Array]]]:
    with_grad = [p for p in params if p.grad is not None]
    by_device: dict[str, list[Array]] = {}
    for p in with_grad:
        by_device.setdefault(backend.device_of(p.grad), []).append(p.grad)
    return with_grad, by_device


def clip_grad_norm(params: Iterable[Tensor], max_norm: float) -> float:
    """Scale all gradients together so that their total L2 norm is at most ``max_norm``
    (the formula above). Returns ``total`` *before* clipping, as a Python float (one host
    read per device). A NaN or Inf total is returned as is and the gradients are left
    untouched, so the caller can stop (see :func:`grads_finite`). A gradient the tensor
    owns is scaled in place; one that autograd may share with another tensor (an unowned
    one) is replaced by a scaled copy, so nothing is scaled twice.

    ``max_norm`` must be a positive number (``math.inf``: measure only). A training loop
    uses ``Optimizer.clip_grad_norm`` instead (flat buffers, no host read).
    """
    max_norm = check_number("clip_grad_norm", "max_norm", max_norm, 0.0, low_open=True)
    with_grad, by_device = _with_grad_by_device(params)
    if not with_grad:
        return 0.0
    total = math.hypot(*(float(total_norm(grads)) for grads in by_device.values()))
    if not math.isfinite(total) or total <= max_norm:
        return total
    coef = max_norm / (total + 1e-6)
    owned = [p for p in with_grad if p.grad_owned]
    for p in with_grad:  # unowned first: they may alias an owned array not yet scaled
        if not p.grad_owned:
            p.set_grad(p.grad * coef, owned=True)
    done: set[int] = set()
    for p in owned:
        if id(p.grad) not in done:
            done.add(id(p.grad))
            p.grad *= coef
    return total


def grads_finite(params: Iterable[Tensor]) -> bool:
    """True when every gradient that exists is free of NaN and Inf (one host read per
    device)."""
    for grads in _with_grad_by_device(params)[1].values():
        xp = backend.namespace(grads[0])
        if not bool(xp.all(xp.stack([xp.all(xp.isfinite(g)) for g in grads]))):
            return False
    return True
