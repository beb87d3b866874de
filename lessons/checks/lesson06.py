"""Lesson 06 (multi-head attention): the checks of its exercises.

- ``check_06_1``: Exercise 1 (parameters of multi-head attention)
- ``check_06_2``: Exercise 2 (one head by slicing)
- ``check_06_3``: Exercise 3 (attention entropy)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _rng, _softmax, _without_library


def _mha_hint(mine: int, D: int, h: int, d_k: int) -> str:
    """Where to look, for a count that is off by a recognisable part."""
    full = 2 * (D + 1) * (h * d_k + D)
    for other, hint in [
        (4 * D * D + 4 * D, "d_k is not D/h here: which projections does d_k set the width of?"),
        (4 * (D + 1) * h * d_k, "the values keep d_v = D/h whatever d_k is: only the queries "
                                "and keys are h·d_k wide"),
        (full - 2 * h * d_k - 2 * D, "count the biases too: one per output of each Linear"),
        (full - 2 * D * D - 2 * D, "there are four projections: W_v and W_o count too"),
        (2 * (D + 1) * (d_k + D), "every head has its own queries and keys: h of them"),
    ]:  # fmt: skip
        if mine == other:
            return hint
    return "list the layer's Linear layers, their input and output widths, and their biases"


@_exercise("Exercise 1 (parameters of multi-head attention)")
def check_06_1(mha_num_parameters: Callable) -> None:
    """Against MultiHeadAttention(D, h, d_k=d_k).num_parameters(), d_k = D/h and not; the
    answer is counted, not built."""
    for D, h, d_k in [(8, 1, 8), (8, 2, 4), (16, 4, 8), (64, 8, 8), (48, 3, 5), (32, 4, 2)]:
        expected = mt.nn.MultiHeadAttention(D, h, d_k=d_k).num_parameters()
        mine = _without_library(
            mha_num_parameters, D, h, d_k, where=f"mha_num_parameters({D}, {h}, {d_k})",
            instead="count the weights and biases of the four projections on paper",
        )  # fmt: skip
        assert mine == expected, (
            f"D={D}, h={h}, d_k={d_k}: you say {mine}, the layer has {expected}; "
            f"hint: {_mha_hint(mine, D, h, d_k)}"
        )


def _split_heads(x: np.ndarray, h: int) -> np.ndarray:
    B, L, D = x.shape
    return x.reshape(B, L, h, D // h).transpose(0, 2, 1, 3)  # (B, H, L, d_k)


class _Watched(np.ndarray):
    """A weight that records the shape of every matrix product it takes part in: exercise 2
    asks for head i's slices, so a product as wide as the whole projection (D) shows that
    the whole projection was computed."""

    products: list[tuple[int, ...]] = []

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        plain = [a.view(np.ndarray) if isinstance(a, _Watched) else a for a in inputs]
        out = getattr(ufunc, method)(*plain, **kwargs)
        if ufunc is np.matmul:
            _Watched.products.append(np.shape(out))
        return out


def _heads(x_q: np.ndarray, x_kv: np.ndarray, W: dict, h: int, bias: bool = True,
           scale: float | None = None) -> np.ndarray:  # fmt: skip
    """Every head's output (B, H, T, d_k) by the reshape route; ``bias=False`` leaves the
    biases out and ``scale`` replaces √d_k (two mistakes the hints name)."""
    b = {n: (W[f"b{n}"] if bias else 0.0) for n in "qkv"}
    q = _split_heads(x_q @ W["wq"] + b["q"], h)
    k = _split_heads(x_kv @ W["wk"] + b["k"], h)
    v = _split_heads(x_kv @ W["wv"] + b["v"], h)
    d_k = q.shape[-1]
    P = _softmax(q @ np.swapaxes(k, -1, -2) / (scale or np.sqrt(d_k)))
    return P @ v


@_exercise("Exercise 2 (one head by slicing)")
def check_06_2(head_output: Callable) -> None:
    """Head i's output before W^O against the full projection split into heads, with random
    weights and NONZERO biases (a fresh layer's are all 0, which would hide a forgotten bias
    slice); the products must use head i's slices, never the whole (D, D) projection."""
    rng = _rng(13)
    for D, h, B, T, S in [(16, 4, 2, 5, 7), (12, 3, 1, 4, 4), (8, 1, 2, 3, 5)]:
        W = {}
        for name in "qkvo":
            W[f"w{name}"] = rng.standard_normal((D, D)) / np.sqrt(D)
            W[f"b{name}"] = rng.standard_normal(D)
        x_q, x_kv = rng.standard_normal((B, T, D)), rng.standard_normal((B, S, D))
        heads = _heads(x_q, x_kv, W, h)  # (B, H, T, d_k)
        watched = {name: w.view(_Watched) for name, w in W.items()}
        for i in range(h):
            _Watched.products = []
            mine = np.asarray(head_output(x_q, x_kv, watched, h, i))
            whole = [p for p in _Watched.products if h > 1 and p and p[-1] == D]
            assert not whole, (
                f"D={D}, h={h}, head {i}: your code multiplies by the whole projection "
                f"(a product of shape {whole[0]}); hint: head i needs only its own d_k "
                "columns of W_q, W_k and W_v: slice first, then multiply"
            )
            assert mine.shape == (B, T, D // h), (
                f"D={D}, h={h}, head {i}: expected shape {(B, T, D // h)}, got {mine.shape}"
            )
            if np.allclose(mine, heads[:, i]):
                continue
            if np.allclose(mine, _heads(x_q, x_kv, W, h, bias=False)[:, i]):
                hint = "the biases: which entries of b_q, b_k, b_v belong to head i?"
            elif np.allclose(mine, _heads(x_q, x_kv, W, h, scale=np.sqrt(D))[:, i]):
                hint = "a head's scores are divided by the square root of its own width"
            else:
                hint = "which columns of W_q, W_k, W_v belong to head i (section 'The math')?"
            raise AssertionError(f"D={D}, h={h}: head {i} differs; hint: {hint}")


@_exercise("Exercise 3 (attention entropy)")
def check_06_3(attention_entropy: Callable) -> None:
    w = _rng(14).random((3, 4, 5))
    w /= w.sum(-1, keepdims=True)
    expected = np.array([np.mean([-(row * np.log(row)).sum() for row in head]) for head in w])
    mine = np.asarray(attention_entropy(w))
    assert mine.shape == (3,), f"one number per head: expected shape (3,), got {mine.shape}"
    assert np.allclose(mine, expected), "hint: sum over the keys, then average over the queries"
    onehot = np.zeros((2, 3, 4))
    onehot[:, :, 0] = 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = np.asarray(attention_entropy(onehot))
    assert np.allclose(got, 0.0), "a one-hot row has entropy 0 (treat 0 log 0 as 0)"
    assert np.allclose(attention_entropy(np.full((1, 3, 4), 0.25)), np.log(4)), (
        "a uniform row over 4 keys has entropy log 4"
    )
