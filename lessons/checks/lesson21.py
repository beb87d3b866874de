"""Lesson 21 (the block since 2017): the checks of its exercises.

- ``check_21_1``: Exercise 1 (RMSNorm's backward in NumPy)
- ``check_21_2``: Exercise 2 (rotary position embedding by hand, the "halves" layout)
- ``check_21_3``: Exercise 3 (the KV-cache bytes of a grouped-query configuration)

Exercise 1's answer ``rms_norm_backward(x, gamma, grad, eps)`` returns ``(dx, dgamma)`` for
y = x / sqrt(mean(x²) + eps) * gamma over the last axis and the upstream gradient ``grad``
(dL/dy). Compared in float64 with the derivative written out, at a tolerance of 1e-12 of the
gradient's size: finite differences, whose error is at best about 1e-11, cannot pass; an answer
that uses them gets a hint saying so. Cases: one row, (rows, D), (B, T, D), D = 1, and an eps
as large as 0.5 (an eps left out shows there).

Exercise 2's answer ``rope_halves(x, offset, base)`` rotates x (..., T, d) by position: row t
is at position offset + t, pair i = (x[..., i], x[..., i + d/2]) turns by the angle
(offset + t) base^(-2i/d). Compared with that formula, in float64.

Both must be NumPy of the learner's own (a call into the library fails with a hint) and must
leave the caller's arrays as they were. Each usual slip gets its own hint.

Exercise 3's answer ``kv_cache_bytes(N, d_model, h, kv_heads, positions, itemsize)`` is the
bytes one sequence's KV cache holds after ``positions`` tokens: 2 (keys and values) x N layers
x kv_heads x d_model/h x positions x itemsize. A whole number (an int, a NumPy integer, an
integral float, a one-element array or Tensor).

Answers may come back as NumPy arrays, lists, numbers or minitransformer Tensors.
See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import _analytic
from ._shared import _array, _close, _exercise, _rng, _whole_number, _without_library


def _floats(x, what: str) -> np.ndarray:
    """x as a float64 NumPy array: NumPy, a list, or a Tensor (``_shared._array``)."""
    return _array(x, what, kinds="iuf").astype(np.float64)


def _unchanged(inputs: dict[str, np.ndarray], copies: dict[str, np.ndarray], where: str) -> None:
    for name, x in inputs.items():
        assert np.array_equal(x, copies[name]), (
            f"{where} changed its input {name} in place (an `out=` argument, `*=` or `-=` on "
            "an input, or a view of it written to): the caller's arrays must stay as they were"
        )


# ------------------------------------------------------------------ exercise 1
def _rms_backward(
    x, gamma, g, eps, *, mean=True, eps_in=True, constant_r=False, centred=False, gamma_in=True
) -> tuple[np.ndarray, np.ndarray]:
    """RMSNorm's backward, and (through the flags) the usual slips of it."""
    D = x.shape[-1]
    ms = (x * x).sum(-1, keepdims=True) / (D if mean else 1)
    r = 1.0 / np.sqrt(ms + (eps if eps_in else 0.0))
    x_hat = x * r
    g_hat = g * gamma if gamma_in else g
    if constant_r:
        dx = r * g_hat
    else:
        inner = (g_hat * x_hat).sum(-1, keepdims=True) / (D if mean else 1)
        dx = r * (g_hat - x_hat * inner)
        if centred:  # LayerNorm's backward: the mean of g_hat subtracted too
            dx = dx - r * g_hat.mean(-1, keepdims=True)
    dgamma = (g * x_hat).reshape(-1, D).sum(0)
    return dx, dgamma


_RMS_SLIPS = [
    ({"constant_r": True}, "dx", "r = 1/sqrt(mean(x²) + eps) depends on x too: differentiate "
     "it, not only the x in x·r (the second term of dx)"),
    ({"centred": True}, "dx", "that is LayerNorm's backward (lesson 04): RMSNorm subtracts no "
     "mean in its forward pass, so no mean of the gradient appears in its backward"),
    ({"gamma_in": False}, "dx", "y = x̂·γ: the gradient that reaches x̂ is grad·γ, not grad"),
    ({"mean": False}, "dx", "r divides by the root MEAN square: mean(x²) = sum(x²)/D, and "
     "the D shows up in the derivative too"),
    ({"eps_in": False}, "dx", "eps sits inside the square root, sqrt(mean(x²) + eps): keep it "
     "in r (the check uses eps up to 0.5)"),
]  # fmt: skip


def _rms_hint(dx, dgamma, x, gamma, g, eps) -> str:
    """What a wrong (dx, dgamma) got wrong, from the usual slips."""
    want_dx, want_dgamma = _rms_backward(x, gamma, g, eps)
    if _close(dx, want_dgamma, 1e-9) and _close(dgamma, want_dx, 1e-9):
        return "you return (dgamma, dx); the order is (dx, dgamma)"
    if not _analytic.exact(dx, want_dx):
        for flags, _, hint in _RMS_SLIPS:
            if _close(dx, _rms_backward(x, gamma, g, eps, **flags)[0], 1e-9):
                return hint
        if _close(dx, -want_dx, 1e-9):
            return "dx has the wrong sign"
        if _analytic.near(dx, want_dx):
            return _analytic.numerical_hint("dx")
        return "dx is not the derivative; start from one row: dL/dx_j = Σ_k g_k γ_k ∂ŷ_k/∂x_j"
    if _analytic.near(dgamma, want_dgamma):
        return _analytic.numerical_hint("dgamma")
    if _close(dgamma, (g * x).reshape(-1, x.shape[-1]).sum(0), 1e-9):
        return "dgamma: y = x̂·γ with x̂ = x·r, so ∂y/∂γ is x̂, not x"
    return "dgamma is not Σ over every row of grad·x̂ (γ_j scales feature j of every row)"


_RMS_CASES = [((6,), 1e-5), ((3, 7), 1e-5), ((2, 4, 5), 1e-6), ((4, 1), 1e-5),
              ((5, 8), 0.5), ((2, 3, 16), 1e-5)]  # fmt: skip


@_exercise("Exercise 1 (RMSNorm's backward in NumPy)")
def check_21_1(rms_norm_backward: Callable) -> None:
    """``rms_norm_backward(x, gamma, grad, eps)`` -> (dx, dgamma), float64 arrays."""
    rng = _rng(21)
    for shape, eps in _RMS_CASES:
        D = shape[-1]
        x = rng.standard_normal(shape) * rng.uniform(0.3, 2.0)
        gamma = rng.uniform(0.5, 1.5, D) * rng.choice([-1.0, 1.0], D)
        g = rng.standard_normal(shape)
        inputs = {"x": x, "gamma": gamma, "grad": g}
        copies = {name: a.copy() for name, a in inputs.items()}
        where = f"rms_norm_backward(x of shape {shape}, gamma ({D},), grad, eps={eps:g})"
        got = _without_library(
            rms_norm_backward, x, gamma, g, eps, where=where,
            instead="write r, x̂ and the chain rule through r with NumPy operations",
        )  # fmt: skip
        _unchanged(inputs, copies, where)
        is_pair = isinstance(got, tuple | list) and len(got) == 2
        assert is_pair, f"{where}: return the pair (dx, dgamma), got {type(got).__name__}" + (
            f" of length {len(got)}" if isinstance(got, tuple | list) else ""
        )
        dx, dgamma = _floats(got[0], f"{where}, dx"), _floats(got[1], f"{where}, dgamma")
        if dx.shape == (D,) and dgamma.shape == shape and shape != (D,):
            raise AssertionError(f"{where}: you return (dgamma, dx); the order is (dx, dgamma)")
        assert dx.shape == shape, (
            f"{where}: dx must have x's shape {shape} (one gradient per input number); got "
            f"{dx.shape}"
        )
        assert dgamma.shape == (D,), (
            f"{where}: dgamma must have gamma's shape ({D},): each γ_j scales feature j of "
            f"EVERY row, so its gradient adds up over the rows; got {dgamma.shape}"
        )
        want_dx, want_dgamma = _rms_backward(x, gamma, g, eps)
        if not (_analytic.exact(dx, want_dx) and _analytic.exact(dgamma, want_dgamma)):
            raise AssertionError(f"{where}: {_rms_hint(dx, dgamma, x, gamma, g, eps)}")


# ------------------------------------------------------------------ exercise 2
def _rope(x, offset, base, *, layout="halves", sign=1.0, two=2.0, start=0) -> np.ndarray:
    """RoPE of x (..., T, d), and (through the keywords) the usual slips of it."""
    T, d = x.shape[-2], x.shape[-1]
    i = np.arange(d // 2)
    theta = base ** (-two * i / d)  # (d/2,)
    angle = (offset + start + np.arange(T))[:, None] * theta[None, :]  # (T, d/2)
    cos, sin = np.cos(angle), sign * np.sin(angle)
    if layout == "halves":
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


_ROPE_SLIPS = [
    ({"layout": "interleaved"}, "you pair neighbours (x[2i], x[2i+1]): that is the interleaved "
     "layout (GPT-J, the RoFormer paper). This exercise uses Llama's halves: pair i is "
     "(x[..., i], x[..., i + d/2])"),
    ({"sign": -1.0}, "your rotation turns the wrong way: (a, b) -> (a cos − b sin, "
     "a sin + b cos) turns by +angle"),
    ({"two": 1.0}, "look at the frequencies: theta_i = base^(−2i/d), i = 0 .. d/2 − 1"),
    ({"offset_zero": True}, "row t sits at position offset + t: the offset is missing"),
    ({"start": 1}, "the first row sits at position offset itself (position 0 is not rotated), "
     "not offset + 1"),
]  # fmt: skip


def _rope_hint(got, x, offset, base) -> str:
    for flags, hint in _ROPE_SLIPS:
        flags = dict(flags)
        off = 0 if flags.pop("offset_zero", False) else offset
        if _close(got, _rope(x, off, base, **flags), 1e-9):
            return hint
    if offset == 0 and not np.allclose(got[..., 0, :], x[..., 0, :], atol=1e-9):
        return "the row at position 0 turns by angle 0: it must come out unchanged"
    return (
        "not the rotation: compare the row at position 1 of a small x (d = 4) with "
        "(a cos θ − b sin θ, a sin θ + b cos θ) for each pair, worked out by hand"
    )


_ROPE_CASES = [((5, 4), 0, 10000.0), ((2, 3, 6, 8), 0, 10000.0), ((1, 2), 3, 10000.0),
               ((4, 16), 7, 10000.0), ((3, 6), 2, 100.0), ((2, 7, 12), 1000, 10000.0)]  # fmt: skip


@_exercise("Exercise 2 (rotary position embedding by hand)")
def check_21_2(rope_halves: Callable) -> None:
    """``rope_halves(x, offset, base)``: x (..., T, d) -> the same shape, rotated."""
    rng = _rng(2117)
    for shape, offset, base in _ROPE_CASES:
        x = rng.standard_normal(shape)
        copy = x.copy()
        where = f"rope_halves(x of shape {shape}, offset={offset}, base={base:g})"
        got = _without_library(
            rope_halves, x, offset, base, where=where,
            instead="the angles (offset + t)·theta_i, then each pair's rotation, in NumPy",
        )  # fmt: skip
        _unchanged({"x": x}, {"x": copy}, where)
        got = _floats(got, where)
        assert got.shape == x.shape, f"{where}: a rotation keeps x's shape {shape}; got {got.shape}"
        if not _close(got, _rope(x, offset, base), 1e-10):
            raise AssertionError(f"{where}: {_rope_hint(got, x, offset, base)}")


# ------------------------------------------------------------------ exercise 3
def _kv_bytes(N, d_model, h, kv_heads, positions, itemsize) -> int:
    return 2 * N * kv_heads * (d_model // h) * positions * itemsize


_KV_SLIPS = [
    (lambda N, D, h, kv, L, b: N * kv * (D // h) * L * b, "every layer caches its keys AND its "
     "values"),
    (lambda N, D, h, kv, L, b: 2 * N * h * (D // h) * L * b, "the cache holds only the kv_heads "
     "key/value heads; the h query heads share them (they are repeated only inside the "
     "attention, never stored)"),
    (lambda N, D, h, kv, L, b: 2 * N * (h // kv) * (D // h) * L * b, "h / kv_heads is how many "
     "query heads share one key/value head (the group size), not how many are cached"),
    (lambda N, D, h, kv, L, b: 2 * N * kv * D * L * b, "each head is d_k = d_model / h wide, "
     "not d_model"),
    (lambda N, D, h, kv, L, b: 2 * N * kv * (D // h) * L, "that counts numbers; the exercise "
     "asks for bytes: each number takes itemsize bytes"),
    (lambda N, D, h, kv, L, b: 2 * kv * (D // h) * L * b, "each of the N layers keeps its own "
     "cache"),
    (lambda N, D, h, kv, L, b: 2 * N * kv * (D // h) * b, "that is one token's bytes; the cache "
     "holds `positions` tokens"),
]  # fmt: skip
# (N, d_model, h, kv_heads, positions, itemsize): GQA, MQA and MHA, small and Llama-sized
_KV_CASES = [(2, 64, 4, 2, 10, 4), (2, 64, 4, 1, 128, 4), (6, 512, 8, 8, 100, 4),
             (80, 8192, 64, 8, 4096, 2), (3, 96, 12, 3, 7, 8), (1, 8, 8, 1, 1, 4),
             (32, 4096, 32, 8, 2048, 2), (4, 48, 6, 2, 33, 2)]  # fmt: skip


@_exercise("Exercise 3 (the KV-cache bytes of a grouped-query configuration)")
def check_21_3(kv_cache_bytes: Callable) -> None:
    """Against 2·N·kv_heads·(d_model/h)·positions·itemsize; a wrong answer that one usual
    slip explains at every case it gets wrong gets that slip's hint."""
    answers, wrong = {}, []
    for case in _KV_CASES:
        N, D, h, kv, L, b = case
        where = (f"kv_cache_bytes(N={N}, d_model={D}, h={h}, kv_heads={kv}, positions={L}, "
                 f"itemsize={b})")  # fmt: skip
        got = _without_library(
            kv_cache_bytes, *case, where=where,
            instead="multiply the sizes the cache holds, in plain Python",
        )  # fmt: skip
        answers[case] = _whole_number(got, where, "bytes")
        if answers[case] != _kv_bytes(*case):
            wrong.append(case)
    if not wrong:
        return
    N, D, h, kv, L, b = case = wrong[0]
    where = (f"kv_cache_bytes(N={N}, d_model={D}, h={h}, kv_heads={kv}, positions={L}, "
             f"itemsize={b}) = {answers[case]:,}")  # fmt: skip
    for slip, hint in _KV_SLIPS:
        if all(answers[c] == slip(*c) for c in wrong):
            raise AssertionError(f"{where}, not the cache's bytes. Hint: {hint}")
    raise AssertionError(
        f"{where}, not the cache's bytes. Hint: list what one layer keeps for one token "
        "(which tensors, how many heads, how wide), then multiply by the layers, the tokens "
        "and the bytes of a number"
    )
