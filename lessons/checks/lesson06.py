"""Lesson 06 (multi-head attention): the checks of its exercises.

- ``check_06_1``: Exercise 1 (parameters of multi-head attention)
- ``check_06_2``: Exercise 2 (one head by slicing)
- ``check_06_3``: Exercise 3 (attention entropy)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _rng, _softmax


@_exercise("Exercise 1 (parameters of multi-head attention)")
def check_06_1(mha_num_parameters: Callable) -> None:
    for D, h in [(8, 1), (8, 2), (16, 4), (64, 8), (48, 3)]:
        expected = mt.nn.MultiHeadAttention(D, h).num_parameters()
        mine = mha_num_parameters(D, h)
        assert mine == expected, (
            f"D={D}, h={h}: you say {mine}, the layer has {expected}; "
            "hint: list the layer's Linear layers, and count weights and biases"
        )


def _split_heads(x: np.ndarray, h: int) -> np.ndarray:
    B, L, D = x.shape
    return x.reshape(B, L, h, D // h).transpose(0, 2, 1, 3)  # (B, H, L, d_k)


@_exercise("Exercise 2 (one head by slicing)")
def check_06_2(head_output: Callable) -> None:
    # Biases are NONZERO here (a fresh layer's biases start at 0, which would hide a head
    # that forgets to slice them), and weights are random: every slice matters.
    rng = _rng(13)
    for D, h, B, T, S in [(16, 4, 2, 5, 7), (12, 3, 1, 4, 4), (8, 1, 2, 3, 5)]:
        W = {}
        for name in "qkvo":
            W[f"w{name}"] = rng.standard_normal((D, D)) / np.sqrt(D)
            W[f"b{name}"] = rng.standard_normal(D)
        x_q, x_kv = rng.standard_normal((B, T, D)), rng.standard_normal((B, S, D))
        q = _split_heads(x_q @ W["wq"] + W["bq"], h)
        k = _split_heads(x_kv @ W["wk"] + W["bk"], h)
        v = _split_heads(x_kv @ W["wv"] + W["bv"], h)
        P = _softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(D // h))
        heads = P @ v  # (B, H, T, d_k)
        for i in range(h):
            mine = np.asarray(head_output(x_q, x_kv, W, h, i))
            assert mine.shape == (B, T, D // h), (
                f"D={D}, h={h}, head {i}: expected shape {(B, T, D // h)}, got {mine.shape}"
            )
            assert np.allclose(mine, heads[:, i]), (
                f"D={D}, h={h}: head {i} differs; hint: which columns of W_q, W_k, W_v belong "
                "to head i -- and which entries of each bias?"
            )


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
