"""Lesson 11 (speed): the checks of its exercises.

- ``check_11_1``: Exercise 1 (count the parameters)
- ``check_11_2``: Exercise 2 (memory of the scores)
- ``check_11_3``: Exercise 3 (slope of a log-log plot)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from ._shared import _exercise, _rng


@_exercise("Exercise 1 (count the parameters)")
def check_11_1(count_parameters: Callable) -> None:
    for V, preset in [(600, "tiny"), (14, "tiny"), (1000, "small"), (37000, "base")]:
        c = mt.TransformerConfig.preset(preset, src_vocab=V, tgt_vocab=V)
        expected = mt.nn.Transformer(c).num_parameters() if preset != "base" else 63_082_496
        got = count_parameters(V, c.d_model, c.d_ff, c.N)
        assert got == expected, (
            f"{preset} with V={V}: you count {got:,}, the model has {expected:,}. Hint: go "
            "through one encoder layer and one decoder layer sub-layer by sub-layer, and "
            "remember which matrices the tied embedding shares."
        )


@_exercise("Exercise 2 (memory of the scores)")
def check_11_2(score_bytes: Callable) -> None:
    rng = _rng(20)
    for shape, dtype in [
        ((2, 4, 32, 32), np.float32),
        ((1, 8, 10, 7), np.float64),
        ((3, 2, 5, 50), np.float32),
    ]:
        Bq, Hq, Tq, Sq = shape
        q = mt.tensor(rng.normal(size=(Bq, Hq, Tq, 8)).astype(dtype))
        k = mt.tensor(rng.normal(size=(Bq, Hq, Sq, 8)).astype(dtype))
        _, P = F.scaled_dot_product_attention(q, k, k, need_weights=True)
        assert score_bytes(Bq, Hq, Tq, Sq, np.dtype(dtype).itemsize) == P.nbytes, (
            f"P has shape {P.shape} and {P.nbytes} bytes; hint: how many numbers does P hold?"
        )


@_exercise("Exercise 3 (slope of a log-log plot)")
def check_11_3(loglog_slope: Callable) -> None:
    rng = _rng(21)
    xs = np.array([64, 128, 256, 512, 1024], dtype=float)
    for a_true, c in [(1.0, 3.7), (2.0, 0.01), (3.0, 50.0), (0.5, 1.0)]:
        ys = c * xs**a_true * np.exp(rng.normal(0, 0.01, size=xs.shape))
        mine = float(loglog_slope(xs, ys))
        assert abs(mine - a_true) < 0.05, (
            f"for y = {c}·x^{a_true} you give slope {mine:.3f}. Hint: what does a power law "
            "become after taking logs of both axes?"
        )
