"""Lesson 18 (scaling laws): the checks of its exercises.

- ``check_18_1``: Exercise 1 (a power law by least squares in log–log space)
- ``check_18_2``: Exercise 2 (predict the largest size from the others)
- ``check_18_3``: Exercise 3 (training compute 6·N·D, N counted exactly)

See the package docstring (``checks/__init__.py``) for what a check does. Each check builds
its own inputs (noisy synthetic losses, seeded; models built from random sizes), so a wrong
answer cannot pass by matching the lesson's own study. An answer that calls into the library
(``scaling.fit_power_law``, a model built to count its parameters) fails: the exercises are
what those compute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _rng, _without_library


def _numbers(answer: Any, count: int, what: str) -> list[float]:
    """``count`` finite floats from a number (count 1) or a tuple/list/array of them."""
    if isinstance(answer, mt.Tensor):
        answer = answer.numpy()
    try:
        values = np.asarray(answer, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise AssertionError(
            f"{what} returned {answer!r}: return {count} number(s)"
            + (" as a tuple (a, alpha)" if count == 2 else "")
        ) from None
    assert values.size == count, (
        f"{what} returned {values.size} value(s) ({answer!r}); return {count}"
        + (": the tuple (a, alpha)" if count == 2 else ": one number")
    )
    assert np.all(np.isfinite(values)), f"{what} returned {answer!r}: expected finite numbers"
    return [float(v) for v in values]


def _synthetic(rng: np.random.Generator, n_points: int, noise: float) -> tuple[np.ndarray, ...]:
    """Sizes spread over about two decades, losses a·N^(−α)·e^(noise·ε) with a random a, α."""
    n = np.sort(np.geomspace(2e3, 4e5, n_points) * np.exp(rng.uniform(-0.2, 0.2, n_points)))
    a, alpha = rng.uniform(3.0, 12.0), rng.uniform(0.03, 0.4)
    loss = a * n**-alpha * np.exp(rng.normal(0.0, noise, n_points))
    return n, loss, a, alpha


def _least_squares(n: np.ndarray, loss: np.ndarray) -> tuple[float, float]:
    """The reference: (a, α) of the least-squares line through (ln n, ln loss)."""
    slope, intercept = np.polyfit(np.log(n), np.log(loss), 1)
    return float(np.exp(intercept)), float(-slope)


@_exercise("Exercise 1 (a power law by least squares in log space)")
def check_18_1(fit_power_law: Callable) -> None:
    """``fit_power_law(n, loss)`` returns (a, alpha) of L = a·n^(−alpha), the least-squares
    line in log–log space, for exact and noisy points (lists or arrays)."""
    rng = _rng(18)
    for n_points, noise in ((5, 0.0), (5, 0.02), (8, 0.05), (3, 0.01)):
        n, loss, a_true, alpha_true = _synthetic(rng, n_points, noise)
        want_a, want_alpha = _least_squares(n, loss)
        for given_n, given_loss in ((n.copy(), loss.copy()), (list(n), list(loss))):
            answer = _without_library(
                fit_power_law, given_n, given_loss, where="fit_power_law(n, loss)",
                instead="np.log and a least-squares line (np.polyfit, or the formula)",
            )  # fmt: skip
            got_a, got_alpha = _numbers(answer, 2, "fit_power_law(n, loss)")
            if noise == 0.0:
                assert np.isclose(got_alpha, alpha_true, rtol=1e-6), (
                    f"on exact points L = {a_true:.3f}·n^(−{alpha_true:.4f}) your alpha is "
                    f"{got_alpha:.4f}. Hint: a power law is a straight line in log–log space "
                    "(take the logarithms of both n and the loss); what is the slope of that "
                    "line, and with which sign does alpha enter?"
                )
            assert np.isclose(got_alpha, want_alpha, rtol=1e-6, atol=1e-9), (
                f"on {n_points} noisy points your alpha is {got_alpha:.5f}; the least-squares "
                f"line through (ln n, ln loss) gives {want_alpha:.5f}. Hint: fit the line to "
                "the logarithms of both n and the loss (not to the losses themselves), and "
                "let every point count the same"
            )
            assert np.isclose(got_a, want_a, rtol=1e-6), (
                f"alpha is right ({got_alpha:.5f}) but a = {got_a:.5g}; the fit gives "
                f"{want_a:.5g}. Hint: the line's intercept is ln a, not a (and use the same "
                "logarithm in both directions)"
            )


@_exercise("Exercise 2 (predict the largest size from the others)")
def check_18_2(predict_largest: Callable) -> None:
    """``predict_largest(n, loss)``: fit L = a·n^(−α) (least squares in log–log space) to
    every point but the one of the largest n, and return the fitted loss at that n. Points
    may come in any order."""
    rng = _rng(3)
    for n_points, noise in ((5, 0.02), (6, 0.05), (4, 0.0)):
        n, loss, _, _ = _synthetic(rng, n_points, noise)
        order = rng.permutation(n_points)
        n, loss = n[order], loss[order]
        answer = _without_library(
            predict_largest, list(n), list(loss), where="predict_largest(n, loss)",
            instead="your own fit_power_law of exercise 1, not the library's",
        )  # fmt: skip
        (got,) = _numbers(answer, 1, "predict_largest(n, loss)")
        keep = n < n.max()
        a, alpha = _least_squares(n[keep], loss[keep])
        want = a * n.max() ** -alpha
        if np.isclose(got, want, rtol=1e-6):
            continue
        a_all, alpha_all = _least_squares(n, loss)
        if np.isclose(got, a_all * n.max() ** -alpha_all, rtol=1e-6):
            hint = "the fit must leave the largest size out: it is what you predict"
        elif np.isclose(got, loss[np.argmax(n)], rtol=1e-9):
            hint = "that is the measured loss itself; predict it from the other points"
        else:
            hint = ("find the largest n (the points are not sorted), fit the others in "
                    "log–log space and evaluate a·n^(−alpha) at it")  # fmt: skip
        raise AssertionError(
            f"predict_largest(n, loss) = {got:.5f} on {n_points} points; the fit to the other "
            f"{n_points - 1} predicts {want:.5f} at n = {n.max():.0f}. Hint: {hint}"
        )


def _non_embedding(d_model: int, layers: int, d_ff: int) -> int:
    """The library's count: a TransformerLM's parameters minus its token embedding."""
    heads = 1 if d_model % 2 else 2
    lm = mt.nn.TransformerLM(vocab=11, d_model=d_model, h=heads, N=layers, d_ff=d_ff,
                             max_len=8)  # fmt: skip
    return lm.num_parameters() - lm.embed.weight.data.size


@_exercise("Exercise 3 (training compute 6·N·D)")
def check_18_3(training_compute: Callable) -> None:
    """``training_compute(d_model, layers, d_ff, tokens)`` = 6·N·D with N this library's
    exact non-embedding count (a post-LN decoder-only layer: attention, feed-forward and two
    LayerNorms, every bias included)."""
    rng = _rng(1818)
    cases = [(16, 1, 64, 1000), (48, 2, 192, 10**6)]
    cases += [(int(rng.integers(2, 40)) * 2, int(rng.integers(1, 5)), int(rng.integers(4, 200)),
               int(rng.integers(1, 10**7))) for _ in range(4)]  # fmt: skip
    for d, layers, d_ff, tokens in cases:
        where = f"training_compute({d}, {layers}, {d_ff}, {tokens})"
        answer = _without_library(
            training_compute, d, layers, d_ff, tokens, where=where,
            instead="count one layer's weights, biases and LayerNorms on paper",
        )  # fmt: skip
        (got,) = _numbers(answer, 1, where)
        n = _non_embedding(d, layers, d_ff)
        want = 6 * n * tokens
        if np.isclose(got, want, rtol=1e-9):
            continue
        approx = 12 * layers * d * d
        hint = "Hint: "
        if np.isclose(got, 6 * approx * tokens, rtol=1e-9) or np.isclose(
            got, 2 * layers * d * (2 * d + d_ff) * 6 * tokens, rtol=1e-9
        ):
            hint += "that is the weights' count alone (12·L·d² when d_ff = 4d): count the biases "
            hint += "and the LayerNorms too"
        elif np.isclose(got, 2 * n * tokens, rtol=1e-9):
            hint += "2·N per token is the forward pass; training adds the backward"
        else:
            hint += ("count one layer: four d×d projections (queries, keys, values, output) "
                     "and two feed-forward matrices, each with its bias, and two LayerNorms "
                     "(a gain and a shift each)")  # fmt: skip
        raise AssertionError(
            f"training_compute({d}, {layers}, {d_ff}, {tokens}) = {got:.6g}; the library's "
            f"model of these sizes gives 6·N·D = {want:.6g}. {hint}"
        )
