"""Fast paths for NumPy arrays on the CPU, each measured, each beside the reference it
replaces (named after it) and tested against it. See ``kernels/__init__.py``.

What is fast here is mostly *fewer Python calls and fewer temporaries*: at the model sizes
of the lessons a step's time on a CPU is interpreter time and memory traffic as much as
arithmetic.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from .. import host

Array = np.ndarray

# ----------------------------------------------------------------------------- the namespace


def _reshape(x: Array, /, shape: tuple[int, ...], *, copy: bool | None = None) -> Array:
    """``numpy.reshape`` in one Python call: the ndarray method directly, the full
    function (three Python calls: dispatcher, wrapper, method) only for the rare cases."""
    if copy is None and type(x) is np.ndarray:
        return x.reshape(shape)
    return np.reshape(x, shape, copy=copy)


def _sum(x: Array, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:
    """``numpy.sum`` in one Python call: ``add.reduce`` (what ``numpy.sum`` runs for an
    ndarray after three Python calls of dispatch)."""
    if type(x) is np.ndarray:
        return np.add.reduce(x, axis=axis, dtype=dtype, keepdims=keepdims)
    return np.sum(x, axis=axis, dtype=dtype, keepdims=keepdims)


def lean_namespace() -> types.ModuleType:
    """NumPy's namespace with two changes: ``reshape`` is ``_reshape`` and ``sum`` is
    ``_sum``. A training step reshapes ~240 times (2-D GEMMs, heads, LayerNorm rows) and sums
    ~60 times; through NumPy's Python wrappers that is ~900 Python calls. Every other name
    is NumPy's own object (the namespace is a copy of NumPy's module dict; names NumPy makes
    lazily are looked up on first use). NumPy itself is not modified."""
    ns = types.ModuleType("numpy", np.__doc__)
    ns.__dict__.update(
        {k: v for k, v in vars(np).items() if k not in ("__getattr__", "__dir__", "__spec__")}
    )
    ns.reshape, ns.sum = _reshape, _sum
    ns.__getattr__ = lambda name: getattr(np, name)  # lazy attributes (PEP 562)
    return ns


# ----------------------------------------------------------------------------- matmul


def matmul(a: Array, b: Array) -> Array:
    """``a @ b`` with a BLAS thread count chosen for this product (``host.gemm_threads``:
    one thread for small products, at most the free cores for large ones) once the CLI
    has called ``host.tune_host()``; plain ``np.matmul`` otherwise."""
    switch = host.gemm_thread_switch()
    if switch is None:
        return np.matmul(a, b)
    get, put = switch
    threads = get()
    use = host.gemm_threads(threads, a.shape[-2] * a.shape[-1] * b.shape[-1])
    if use == threads:
        return np.matmul(a, b)
    put(use)
    try:
        return np.matmul(a, b)
    finally:
        put(threads)


# ----------------------------------------------------------------------------- ops
# (LayerNorm, softmax, cross-entropy: the ops helper's section)


# ----------------------------------------------------------------------------- optimizer
# The optimizer's flat buffers: gathering gradients into one buffer, and Adam's update with
# one reused temporary (SGD's update is a few in-place operations already: no kernel).


def concat_into(out: Array, arrays: list[Array]) -> None:
    """``optim.flatbuffer.concat_into``: the arrays flattened end to end, written straight
    into ``out`` (n,) by one ``concatenate(..., out=)``: no temporary of size n."""
    np.concatenate([a.ravel() for a in arrays], out=out)


def adam_update(p: Array, g: Array, m: Array, v: Array, *, lr: float,
                betas: tuple[float, float], eps: float, weight_decay: float, t: int,
                ok: Any = None) -> None:  # fmt: skip
    """``optim.adam.adam_update`` fused with ``out=``: the same update (m, v, then p, in
    place) with ONE temporary of p's size, reused for (1-β1) g, (1-β2) g², the
    denominator and the step; the reference makes about eight. ``ok`` False (read on the
    host, free on NumPy) changes nothing."""
    if ok is not None and not ok:
        return
    b1, b2 = betas
    if weight_decay:
        g = g + weight_decay * p
    buf = np.multiply(g, 1 - b1)
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
