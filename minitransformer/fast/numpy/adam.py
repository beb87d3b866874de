"""Adam's update for NumPy arrays: ``optim/adam.py``'s ``adam_update`` with one reused
temporary, in chunks that stay in cache (off unless ``fast.enable()``; tested against the
reference in tests/test_optim.py; its measured worth: docs/measurements.md). SGD's update
is a few in-place operations already: no twin.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import compiled

Array = np.ndarray

ADAM_CHUNK = 1 << 17  # elements a pass: p, g, m, v and the temporary, 512 KiB each (float32),
# stay in cache through the update's 13 passes (the chunk sizes measured: docs/measurements.md)


def adam_update(p: Array, g: Array, m: Array, v: Array, *, lr: float,
                betas: tuple[float, float], eps: float, weight_decay: float, t: int,
                ok: Any = None) -> None:  # fmt: skip
    """``optim.adam.adam_update`` fused with ``out=``: the same update (m, v, then p, in
    place) with ONE temporary, reused for (1-β1) g, (1-β2) g², the denominator and the step;
    the reference makes about eight. Flat (1-D) arrays longer than ``ADAM_CHUNK`` are
    updated a chunk at a time (each element's arithmetic is the same). ``ok`` False (read on
    the host, free on NumPy) changes nothing."""
    if ok is not None and not ok:
        return
    n = p.shape[0] if p.ndim == g.ndim == m.ndim == v.ndim == 1 else 0
    hyper = (betas, eps, weight_decay, lr, t)
    if n and compiled.fits(p, g, m, v):  # numba's one pass, if on (compiled.py)
        compiled.adam_update(p, g, m, v, hyper)
        return
    if n <= ADAM_CHUNK:  # small, or not flat: one piece
        _adam_pass(p, g, m, v, np.empty_like(p), *hyper)
        return
    buf = np.empty(ADAM_CHUNK, dtype=p.dtype)
    for i in range(0, n, ADAM_CHUNK):
        j = i + ADAM_CHUNK
        _adam_pass(p[i:j], g[i:j], m[i:j], v[i:j], buf[: min(j, n) - i], *hyper)


def _adam_pass(p: Array, g: Array, m: Array, v: Array, buf: Array, betas: tuple[float, float],
               eps: float, weight_decay: float, lr: float, t: int) -> None:  # fmt: skip
    """Adam's update of p, m, v in place, ``buf`` (p's shape) the one temporary."""
    b1, b2 = betas
    if weight_decay:
        g = g + weight_decay * p
    np.multiply(g, 1 - b1, out=buf)
    m *= b1
    m += buf  # m = β1 m + (1-β1) g
    np.multiply(g, g, out=buf)
    buf *= 1 - b2
    v *= b2
    v += buf  # v = β2 v + (1-β2) g²
    np.sqrt(v, out=buf)
    buf /= (1 - b2**t) ** 0.5
    buf += eps  # √v/√(1-β2^t) + ε
    np.divide(m, buf, out=buf)
    buf *= -(lr / (1 - b1**t))
    p += buf


adam_update.dtypes = None  # every dtype
