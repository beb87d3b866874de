"""Lesson 11 (speed): the checks of its exercises.

- ``check_11_1``: Exercise 1 (count the parameters)
- ``check_11_2``: Exercise 2 (memory of the scores: every attention of the model)
- ``check_11_3``: Exercise 3 (a log-log fit read forward: the x where it reaches a budget)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _rng, _without_library


@_exercise("Exercise 1 (count the parameters)")
def check_11_1(count_parameters: Callable) -> None:
    for V, preset in [(600, "tiny"), (14, "tiny"), (1000, "small"), (37000, "base")]:
        c = mt.TransformerConfig.preset(preset, src_vocab=V, tgt_vocab=V)
        expected = mt.nn.Transformer(c).num_parameters() if preset != "base" else 63_082_496
        got = _without_library(
            count_parameters, V, c.d_model, c.d_ff, c.N,
            where=f"count_parameters({V}, {c.d_model}, {c.d_ff}, {c.N})",
            instead="count the weights and biases of one encoder and one decoder layer on paper",
        )  # fmt: skip
        assert got == expected, (
            f"{preset} with V={V}: you count {got:,}, the model has {expected:,}. Hint: go "
            "through one encoder layer and one decoder layer sub-layer by sub-layer, and "
            "remember which matrices the tied embedding shares."
        )


def _kept_scores(B: int, H: int, S: int, T: int, N: int, dtype: type) -> int:
    """Bytes of every attention probability matrix one forward pass of a small encoder-decoder
    keeps, read off the model's own layers (attention_weights(True))."""
    cfg = mt.TransformerConfig(src_vocab=12, tgt_vocab=12, d_model=4 * H, h=H, N=N, d_ff=8)
    model = mt.nn.Transformer(cfg, seed=0).to(dtype=np.dtype(dtype).name)
    rng = _rng(20)
    src, tgt = rng.integers(4, 12, size=(B, S)), rng.integers(4, 12, size=(B, T))
    model.attention_weights(True)
    with mt.no_grad():
        model(src, tgt)
    kept = [m.last_weights for m in model.modules() if hasattr(m, "last_weights")]
    return sum(np.asarray(w).nbytes for w in kept)


def _scores_hint(mine: int, B: int, H: int, S: int, T: int, N: int, i: int) -> str:
    """Where to look, for a byte count off by a recognisable part."""
    for other, hint in [
        (N * B * H * (S * S + T * T + T * S), "bytes, not numbers: each one takes itemsize"),
        (B * H * (S * S + T * T + T * S) * i, "each of the N layers of each stack keeps its own"),
        (N * B * (S * S + T * T + T * S) * i, "every head has its own matrix of weights"),
        (N * B * H * (T * T + T * S) * i, "the encoder's self-attention keeps its weights too"),
        (N * B * H * (S * S + T * T) * i, "the decoder has a second attention: cross-attention"),
        (N * B * H * (S * S + 2 * T * T) * i, "cross-attention's queries come from the target, "
                                              "its keys from the source"),
        (N * B * H * (2 * S * S + T * T) * i, "cross-attention's queries come from the target, "
                                              "its keys from the source"),
        (B * H * T * S * i, "one attention's matrix is section 2's; the model has 3N of them"),
    ]:  # fmt: skip
        if mine == other:
            return hint
    return "list the attention layers of lesson 08's encoder and decoder, and each one's P shape"


@_exercise("Exercise 2 (memory of the scores)")
def check_11_2(score_bytes: Callable) -> None:
    """All attention weights of one forward pass of an encoder-decoder, in bytes, against the
    arrays a small model of these sizes stores."""
    for (B, H, S, T, N), dtype in [
        ((2, 3, 7, 5, 2), np.float32),
        ((1, 2, 3, 6, 3), np.float64),
        ((3, 1, 4, 4, 1), np.float32),
    ]:
        i = np.dtype(dtype).itemsize
        want = _kept_scores(B, H, S, T, N, dtype)
        where = f"score_bytes(B={B}, H={H}, S={S}, T={T}, N={N}, itemsize={i})"
        mine = _without_library(
            score_bytes, B, H, S, T, N, i, where=where,
            instead="multiply out the shapes of the weights (lessons 05 and 08)",
        )  # fmt: skip
        assert mine == want, (
            f"{where} = {mine}; the model's attention weights take {want} bytes; hint: "
            f"{_scores_hint(mine, B, H, S, T, N, i)}"
        )


def _budget_fit(x: np.ndarray, y: np.ndarray, budget: float) -> float:
    """The x at which the least-squares power law through (log x, log y) reaches budget."""
    a, log_c = np.polyfit(np.log(x), np.log(y), 1)
    return float(np.exp((np.log(budget) - log_c) / a))


def _budget_hint(mine: float, x: np.ndarray, y: np.ndarray, budget: float) -> str:
    """Where to look, for a wrong length."""
    a, log_c = np.polyfit(np.log(x), np.log(y), 1)
    m, b = np.polyfit(x, y, 1)
    for other, hint in [
        (np.log(_budget_fit(x, y, budget)), "you return log x: undo the logarithm"),
        (budget ** (1 / a), "the fitted line has an intercept too, log c"),
        ((budget - b) / m, "a power law is a straight line on log-log axes, not on linear ones"),
        (np.exp(log_c) * budget**a, "that is the fitted y at x = budget: solve for x instead"),
    ]:  # fmt: skip
        if np.isclose(mine, other, rtol=1e-4):
            return hint
    return "fit the line through every (log x, log y), then solve it for log x at log budget"


@_exercise("Exercise 3 (a log-log fit read forward)")
def check_11_3(length_for_budget: Callable) -> None:
    """The x where the least-squares power law through the points reaches the budget, on
    noisy power laws of four exponents; lists and arrays."""
    rng = _rng(21)
    xs = np.array([64, 128, 256, 512, 1024], dtype=float)
    cases = [(1.0, 3.7, 10.0), (2.0, 0.01, 100.0), (3.0, 50.0, 0.5), (0.5, 1.0, 4.0)]
    for a_true, c, factor in cases:
        ys = c * xs**a_true * np.exp(rng.normal(0, 0.05, size=xs.shape))
        budget = factor * ys.max()
        want = _budget_fit(xs, ys, budget)
        where = f"length_for_budget(x, y, {budget:.4g}) for y ≈ {c}·x^{a_true}"
        mine = float(np.asarray(length_for_budget(list(xs), list(ys), budget)).reshape(()))
        assert np.isclose(mine, want, rtol=1e-6), (
            f"{where}: the fit reaches the budget at x = {want:.6g}, you give {mine:.6g}; "
            f"hint: {_budget_hint(mine, xs, ys, budget)}"
        )
