"""Lesson 18 (scaling laws): the checks of its exercises.

- ``check_18_1``: Exercise 1 (a power law by the normal equations, no fitting routine)
- ``check_18_2``: Exercise 2 (the compute-optimal size: the vertex of a parabola in ln N)
- ``check_18_3``: Exercise 3 (attention's training FLOPs for a causal, padded batch)

See the package docstring (``checks/__init__.py``) for what a check does. Each check builds
its own inputs (noisy synthetic losses, seeded; random batches of lengths), so a wrong answer
cannot pass by matching the lesson's own study. An answer that calls into the library fails,
and so does one that hands exercise 1 or 2 to a fitting routine (``np.polyfit``,
``np.linalg.lstsq``, ``np.linalg.pinv``, NumPy's polynomial classes, SciPy, statsmodels):
a profile hook watches every call the answer makes (``_fitting_calls``). Exercise 1 is the
normal equations written out; exercise 2 the vertex of the parabola through three points.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _library_calls, _rng, _without_library

# one call that fits a line or a polynomial: what exercises 1 and 2 ask you to write
_FITTING_NAMES = {"polyfit", "lstsq", "pinv", "fit", "_fit", "linregress", "curve_fit"}
_FITTING_PACKAGES = ("scipy", "sklearn", "statsmodels")


def _fitting_calls(fn: Callable, *args: Any) -> tuple[Any, set[str], set[str]]:
    """``(fn(*args), the fitting routines it called, the library functions it called)``, from
    one run under one profile hook (``_shared._library_calls``, which counts the library
    calls). Fitting routines: NumPy's ``polyfit``, ``lstsq``, ``pinv`` and the polynomial
    classes' ``fit``, anything in SciPy, scikit-learn or statsmodels, and a compiled
    ``lstsq`` (torch's)."""
    fitting: set[str] = set()

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            name = getattr(arg, "__name__", "")
            if name in _FITTING_NAMES:
                fitting.add(f"{getattr(arg, '__module__', None) or '?'}.{name}")
            return
        if event != "call":
            return
        module = str(frame.f_globals.get("__name__", ""))
        name = frame.f_code.co_name
        if module.split(".")[0] in _FITTING_PACKAGES:
            fitting.add(module.split(".")[0])
        elif module.startswith("numpy") and name in _FITTING_NAMES:
            fitting.add(f"np.{name.lstrip('_')}")

    result, library = _library_calls(fn, *args, watch=watch)
    return result, fitting, library


def _by_hand(fn: Callable, *args: Any, where: str, instead: str) -> Any:
    """``fn(*args)``, run once, failing with a hint when it called the library or a fitting
    routine."""
    result, fitting, library = _fitting_calls(fn, *args)
    assert not library, (
        f"{where} calls the library ({', '.join(sorted(library))}): this exercise asks you "
        f"to write that computation yourself; hint: {instead}"
    )
    assert not fitting, (
        f"{where} calls {', '.join(sorted(fitting))}: a fitting routine does in one call what "
        f"this exercise asks you to write. Hint: {instead}"
    )
    return result


def _numbers(answer: Any, count: int, what: str) -> list[float]:
    """``count`` finite floats from a number (count 1) or a tuple/list/array of them."""
    if isinstance(answer, mt.Tensor):
        answer = answer.numpy()
    try:
        values = np.asarray(answer, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise AssertionError(
            f"{what} returned {answer!r:.80}: return {count} number(s)"
            + (" as a tuple (a, alpha)" if count == 2 else "")
        ) from None
    assert values.size == count, (
        f"{what} returned {values.size} value(s) ({answer!r:.80}); return {count}"
        + (": the tuple (a, alpha)" if count == 2 else ": one number")
    )
    assert np.all(np.isfinite(values)), f"{what} returned {answer!r:.80}: expected finite numbers"
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


def _alpha_hint(got: float, u: np.ndarray, v: np.ndarray, want: float) -> str:
    """The hint for a wrong alpha on the points (u, v) = (ln n, ln loss)."""
    k = len(u)
    if np.isclose(got, want * k / (k - 1), rtol=1e-6) or np.isclose(
        got, want * (k - 1) / k, rtol=1e-6
    ):
        return (
            "the covariance and the variance were divided by different counts (np.cov "
            "divides by k − 1, np.var and .mean() by k): divide both by the same one"
        )
    cov = float(np.mean((u - u.mean()) * (v - v.mean())))
    if np.isclose(abs(got), abs(cov / np.var(v)), rtol=1e-6):
        return (
            "the slope of ln L against ln n divides the covariance by the variance of ln n "
            "(the x of the line), not of ln L"
        )
    if np.isclose(got, -want, rtol=1e-6):
        return "check the sign: the line's slope is −alpha"
    return (
        "fit the line to the logarithms of both n and the loss (not to the losses "
        "themselves): slope = cov(ln n, ln L) / var(ln n), and alpha = −slope"
    )


@_exercise("Exercise 1 (a power law by the normal equations)")
def check_18_1(fit_power_law: Callable) -> None:
    """``fit_power_law(n, loss)`` returns (a, alpha) of L = a·n^(−alpha), the least-squares
    line in log–log space written out (slope = cov/var, the line through the means), for
    exact and noisy points (lists or arrays); no fitting routine, no library."""
    rng = _rng(18)
    for n_points, noise in ((5, 0.0), (5, 0.02), (8, 0.05), (3, 0.01)):
        n, loss, a_true, alpha_true = _synthetic(rng, n_points, noise)
        want_a, want_alpha = _least_squares(n, loss)
        for given_n, given_loss in ((n.copy(), loss.copy()), (list(n), list(loss))):
            answer = _by_hand(
                fit_power_law, given_n, given_loss, where="fit_power_law(n, loss)",
                instead="the normal equations: with u = ln n and v = ln L, the least-squares "
                "slope is cov(u, v) / var(u) and the line passes through (mean u, mean v)",
            )  # fmt: skip
            got_a, got_alpha = _numbers(answer, 2, "fit_power_law(n, loss)")
            u, v = np.log(n), np.log(loss)
            exact = f"exact points L = {a_true:.3f}·n^(−{alpha_true:.4f})" if noise == 0 else ""
            assert np.isclose(got_alpha, want_alpha, rtol=1e-6, atol=1e-9), (
                f"on {exact or f'{n_points} noisy points'} your alpha is {got_alpha:.5f}; the "
                f"least-squares line through (ln n, ln loss) gives {want_alpha:.5f}. Hint: "
                + _alpha_hint(got_alpha, u, v, want_alpha)
            )
            assert np.isclose(got_a, want_a, rtol=1e-6), (
                f"alpha is right ({got_alpha:.5f}) but a = {got_a:.5g}; the fit gives "
                f"{want_a:.5g}. Hint: the line passes through the means, so its intercept "
                "ln a = mean(ln L) + alpha·mean(ln n); a is its exponential (and use the same "
                "logarithm in both directions)"
            )


def _isoflop(rng: np.random.Generator, k: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """``k`` sizes, unevenly spaced over about two decades, and their losses at one compute
    budget, Chinchilla's form E + A/N^α + B/D^β with D = C/(6N): the lowest loss not at
    either end."""
    for _ in range(100):
        n = np.sort(np.geomspace(1e3, 1.5e5, k) * np.exp(rng.uniform(-0.25, 0.25, k)))
        E, A, B = rng.uniform(1.0, 2.0), rng.uniform(5.0, 30.0), rng.uniform(5.0, 30.0)
        alpha, beta = rng.uniform(0.25, 0.45), rng.uniform(0.25, 0.45)
        # the budget that puts the optimum near the middle size
        n_mid = float(np.sqrt(n[0] * n[-1])) * np.exp(rng.uniform(-0.5, 0.5))
        d_mid = (B * beta / (A * alpha) * n_mid**alpha) ** (1 / beta)
        C = 6 * n_mid * d_mid
        loss = E + A / n**alpha + B / (C / (6 * n)) ** beta
        loss = loss * np.exp(rng.normal(0.0, noise, k))
        if 0 < int(np.argmin(loss)) < k - 1:
            return n, loss
    raise RuntimeError("no interior minimum drawn")  # not reached with these ranges


def _vertex(x: np.ndarray, y: np.ndarray) -> float:
    """The x of the vertex of the parabola through three points (x_i, y_i)."""
    (x1, x2, x3), (y1, y2, y3) = x, y
    num = (x2 - x1) ** 2 * (y2 - y3) - (x2 - x3) ** 2 * (y2 - y1)
    den = (x2 - x1) * (y2 - y3) - (x2 - x3) * (y2 - y1)
    return float(x2 - num / (2 * den))


def _around_lowest(n: np.ndarray, loss: np.ndarray) -> slice:
    i = int(np.argmin(loss))
    return slice(i - 1, i + 2)


def _optimum_hint(got: float, n: np.ndarray, loss: np.ndarray) -> str:
    """The hint for a wrong optimal size on the IsoFLOP points (n, loss)."""
    pick = _around_lowest(n, loss)
    x, y = np.log(n[pick]), loss[pick]
    want = _vertex(x, y)
    near = lambda value: np.isclose(got, value, rtol=1e-6)  # noqa: E731
    if near(n[np.argmin(loss)]):
        return (
            "that is the measured size with the lowest loss; the optimum lies between the "
            "sizes: at the vertex of the parabola through the lowest point and its two "
            "neighbours"
        )
    if near(want) or near(want / np.log(10)):
        return "that is ln N (or log10 N) of the vertex: return the size N itself"
    if near(_vertex(n[pick], y)):
        return (
            "that parabola is in N itself; an IsoFLOP curve is a parabola in ln N: take the "
            "logarithms of the sizes first"
        )
    x1, x2, x3 = x
    y1, y2, y3 = y
    for h in (x3 - x2, x2 - x1, (x3 - x1) / 2):  # the evenly spaced formula
        if near(np.exp(x2 + h / 2 * (y1 - y3) / (y1 - 2 * y2 + y3))):
            return (
                "the sizes are not evenly spaced in ln N: the formula for evenly spaced "
                "points does not hold; solve for the parabola through the three points"
            )
    if len(n) > 3:
        u = np.log(n)
        c2, c1, _ = np.polyfit(u, loss, 2)
        if near(np.exp(-c1 / (2 * c2))):
            return (
                "that is a least-squares parabola through all the points; the exercise asks "
                "for the one through the lowest point and its two neighbours"
            )
    return (
        "in x = ln N, put the parabola through the lowest point and its two neighbours "
        "(L = c0 + c1·x + c2·x²) and take its vertex x = −c1/(2·c2); return N = e^x"
    )


@_exercise("Exercise 2 (the compute-optimal size: a parabola's vertex in ln N)")
def check_18_2(optimal_size: Callable) -> None:
    """``optimal_size(sizes, losses)``: sizes in increasing order, their losses at one compute
    budget (the lowest not at either end); return the N at the vertex of the parabola, in
    x = ln N, through the lowest point and its two neighbours. By hand: no fitting routine."""
    rng = _rng(6)
    for k, noise in ((3, 0.0), (5, 0.0), (5, 0.01), (6, 0.02), (4, 0.005)):
        n, loss = _isoflop(rng, k, noise)
        for given_n, given_loss in ((n.copy(), loss.copy()), ([float(x) for x in n], list(loss))):
            where = f"optimal_size(sizes, losses) on {k} sizes"
            answer = _by_hand(
                optimal_size, given_n, given_loss, where=where,
                instead="three equations c0 + c1·x_i + c2·x_i² = L_i (x_i = ln N_i) for the "
                "lowest point and its neighbours: solve them (by elimination, or "
                "np.linalg.solve), then the vertex is at x = −c1/(2·c2)",
            )  # fmt: skip
            (got,) = _numbers(answer, 1, where)
            pick = _around_lowest(n, loss)
            want = float(np.exp(_vertex(np.log(n[pick]), loss[pick])))
            if np.isclose(got, want, rtol=1e-6):
                continue
            raise AssertionError(
                f"{where} = {got:.6g}; the vertex of the parabola in ln N through the lowest "
                f"point and its neighbours is at N = {want:.6g}. Hint: "
                + _optimum_hint(got, n, loss)
            )


def _attention_hint(got: float, lengths: list[int], layers: int, d: int) -> str:
    """The hint for a wrong attention count on a batch of ``lengths``."""
    L = np.asarray(lengths, dtype=np.float64)
    unit = layers * d  # per key read and per FLOP of one product: 2·layers·d forward
    candidates = [  # (value, hint)
        (
            12 * unit * L.size * L.max() ** 2,
            "a padded batch's queries do not read the padding: each reads the keys of its own "
            "sequence only, and (causal) only those at or before it",
        ),
        (
            6 * unit * L.size * L.max() * (L.max() + 1),
            "the padding is read by no query, and a padding position is no query: count each "
            "sequence's own tokens only",
        ),
        (
            12 * unit * (L**2).sum(),
            "causal: the query at position t (t = 1, 2, …) reads t keys, not its whole sequence",
        ),
        (
            6 * unit * (L * (L - 1)).sum(),
            "a query reads its own position too: t keys at position t, not t − 1",
        ),
        (
            2 * unit * (L * (L + 1)).sum(),
            "that is the forward pass; training adds the backward, twice the forward",
        ),
        (
            6 * unit * (L * (L + 1)).sum() / 2,
            "attention has two products per key read: the score q·k and the weighted sum of "
            "the values",
        ),
        (
            6 * unit * L.sum() * L.mean(),
            "n_ctx is not the mean length of a sequence: sum what each query reads (t keys at "
            "position t), so long sequences count more",
        ),
        (
            6 * unit * L.sum() * L.max(),
            "n_ctx is not the batch's longest sequence: a causal query reads only the keys at or "
            "before it in its own sequence",
        ),
    ]
    for value, hint in candidates:
        if np.isclose(got, value, rtol=1e-9):
            return hint
    if np.isclose(got, 6 * unit * (L * (L + 1)).sum() / layers, rtol=1e-9):
        return "every layer has its own attention: multiply by the layers"
    return (
        "per layer, a query that reads t keys costs 2·t·d_model FLOPs for its scores and "
        "2·t·d_model for the weighted sum of the values, forward; training triples it; add "
        "up every real token of every sequence"
    )


@_exercise("Exercise 3 (attention's training FLOPs in a causal, padded batch)")
def check_18_3(attention_flops: Callable) -> None:
    """``attention_flops(lengths, layers, d_model)``: the training FLOPs of attention's two
    products (scores q·k and the weighted sum of the values) for one batch of sequences of
    these lengths: a query at position t (1-based) reads t keys of its own sequence, 2 FLOPs
    per multiply-add, the backward twice the forward: 6·layers·d_model·Σ L(L+1)."""
    rng = _rng(1818)
    cases = [([5, 12, 3], 4, 8), ([3], 1, 4), ([5, 5], 2, 8), ([1, 7, 2], 3, 16)]
    cases += [([80, 12, 140, 33], 2, 48)]
    cases += [(list(rng.integers(1, 200, int(rng.integers(2, 12)))), int(rng.integers(1, 7)),
               int(rng.integers(1, 20)) * 8) for _ in range(3)]  # fmt: skip
    for lengths, layers, d in cases:
        where = f"attention_flops({[int(x) for x in lengths]}, {layers}, {d})"
        for given in (list(lengths), np.asarray(lengths)):
            answer = _without_library(
                attention_flops, given, layers, d, where=where,
                instead="count the multiply-adds of the scores and the weighted sum yourself",
            )  # fmt: skip
            (got,) = _numbers(answer, 1, where)
            want = 6 * layers * d * sum(int(x) * (int(x) + 1) for x in lengths)
            if np.isclose(got, want, rtol=1e-12):
                continue
            raise AssertionError(
                f"{where} = {got:.6g}; counted, it is {want:,} FLOPs. Hint: "
                + _attention_hint(got, [int(x) for x in lengths], layers, d)
            )
