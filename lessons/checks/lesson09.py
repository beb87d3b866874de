"""Lesson 09 (training): the checks of its exercises.

- ``check_09_1``: Exercise 1 (reading the schedule backwards): the step s > warmup at which
  the warm-up schedule has decayed to ``frac`` × its peak, against ``NoamSchedule.rate``;
- ``check_09_2``: Exercise 2 (the floor for a large vocabulary): lim_{V→∞} [H(q) − ε log V],
  with ε = 0 and ε = 1 included (0·log 0 = 0);
- ``check_09_3``: Exercise 3 (a rare token's first gradient): Adam's update when the first
  non-zero gradient arrives at update t, against ``optim.Adam`` run for t updates.

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from ._shared import _exercise, _rng


def _call(fn: Callable, *args: Any, where: str) -> Any:
    """fn(*args); an exception of the learner's code becomes an AssertionError that says so
    (NotImplementedError passes through: the placeholder is 'not attempted')."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise
    except Exception as err:
        raise AssertionError(f"{where} raised {type(err).__name__}: {err}") from err


def _array(answer: Any, where: str) -> tuple[np.ndarray, float]:
    """(a float64 array, a relative tolerance) of a number, a list, a NumPy array or a library
    Tensor. The tolerance follows the answer's precision: float32 carries ~7 digits."""
    if isinstance(answer, mt.Tensor):
        answer = answer.numpy()
    try:
        raw = np.asarray(answer)
    except (TypeError, ValueError):
        raw = np.asarray(None)
    if raw.dtype.kind not in "biuf":  # None, a string, a ragged list, ...
        raise AssertionError(f"{where} returned {answer!r}: return numbers")
    array = raw.astype(np.float64)
    narrow = raw.dtype.kind == "f" and np.finfo(raw.dtype).eps > 1e-10
    return array, (50 * float(np.finfo(raw.dtype).eps) if narrow else 1e-7)


def _number(answer: Any, where: str) -> tuple[float, float]:
    array, rtol = _array(answer, where)
    assert array.size == 1, f"{where} returned {array.size} numbers (shape {array.shape}): one"
    return float(array.reshape(())), rtol


# ------------------------------------------------------------------ exercise 1
def _decay_step(frac: float, d_model: int, warmup: int) -> float:
    """The s ≥ warmup where NoamSchedule.rate(s) = frac · rate(warmup): bisection on log s
    (the rate decreases after the peak), so the check relies on the library, not a formula."""
    from minitransformer import optim

    peak = optim.NoamSchedule.rate(warmup, d_model, warmup)
    lo, hi = math.log(warmup), math.log(warmup) + 60.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if optim.NoamSchedule.rate(math.exp(mid), d_model, warmup) > frac * peak:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))


@_exercise("Exercise 1 (reading the schedule backwards)")
def check_09_1(decay_step: Callable) -> None:
    cases = [(512, 4000, 0.5), (64, 100, 0.3), (1024, 4000, 0.1), (512, 4000, 0.9)]
    cases += [(64, 100, 1.0), (2048, 8000, 0.5)]
    for d_model, warmup, frac in cases:
        where = f"decay_step({frac}, {d_model}, {warmup})"
        mine, _ = _number(_call(decay_step, frac, d_model, warmup, where=where), where)
        want = _decay_step(frac, d_model, warmup)
        if abs(mine - want) <= max(1.0, 1e-9 * want):  # exact, or rounded to a whole step
            continue
        msg = f"{where} = {mine:.6g}, but the rate falls to {frac} × its peak at step {want:.6g}."
        if not np.isfinite(mine) or mine <= 0:
            hint = "return a step: a positive number of updates."
        elif mine < 1e-2:
            hint = "return the step s, not a learning rate."
        elif mine < warmup - 1:
            hint = (
                "that step is before the peak, in the warm-up; the question asks for the "
                "step after it, where the rate decays."
            )
        elif np.isclose(mine, warmup / frac, rtol=1e-6):
            hint = (
                "after the peak the rate falls as s^-0.5, not as 1/s: halving it takes more "
                "than twice the steps."
            )
        elif np.isclose(mine, warmup / math.sqrt(frac), rtol=1e-6):
            hint = "rate ∝ s^-0.5: which power of the rate is s proportional to?"
        elif any(
            np.isclose(mine / want, r, rtol=1e-6) for r in (d_model, d_model**0.5, d_model**-0.5)
        ):
            hint = (
                "d_model^-0.5 multiplies the rate at every step, the peak included: does it "
                "survive in their ratio?"
            )
        else:
            hint = (
                "write the rate after the peak and the peak (section 2), set their ratio "
                "to frac and solve for s."
            )
        raise AssertionError(f"{msg} Hint: {hint}")


# ------------------------------------------------------------------ exercise 2
def _xlogx(x: float) -> float:
    return 0.0 if x == 0 else x * math.log(x)


def _floor_minus_eps_log_v(eps: float, V: int) -> float:
    """H(q) − ε log V with the library's loss at p = q (logits log q), for a hint's numbers."""
    q = np.full(V, eps / V)
    q[0] += 1 - eps
    with np.errstate(divide="ignore"):
        logq = np.maximum(np.log(q), -1e4)[None]  # eps = 0: a very confident, finite row
    loss = F.cross_entropy(mt.tensor(logq, dtype="float64"), np.array([0]), label_smoothing=eps)
    return loss.item() - eps * math.log(V)


@_exercise("Exercise 2 (the floor for a large vocabulary)")
def check_09_2(floor_offset: Callable) -> None:
    for eps in (0.1, 0.3, 0.05, 0.5, 0.9, 0.0, 1.0):
        want = -_xlogx(1 - eps) - _xlogx(eps)
        where = f"floor_offset({eps})"
        try:
            with np.errstate(all="ignore"):
                answer = floor_offset(eps)
        except NotImplementedError:
            raise
        except (ValueError, ZeroDivisionError) as err:
            if eps in (0.0, 1.0):
                raise AssertionError(
                    f"{where} raised {type(err).__name__}: {err}. Hint: at ε = {eps:g} a "
                    "probability in your formula is 0: take 0·log 0 = 0 (the limit of x·log x "
                    "as x → 0), i.e. leave that term out."
                ) from err
            raise AssertionError(f"{where} raised {type(err).__name__}: {err}") from err
        except Exception as err:
            raise AssertionError(f"{where} raised {type(err).__name__}: {err}") from err
        mine, rtol = _number(answer, where)
        if np.isclose(mine, want, rtol=rtol, atol=1e-9):
            continue
        if not np.isfinite(mine):
            hint = (
                f"at ε = {eps:g} a probability in your formula is 0, and 0 · log 0 gives "
                "nan in floating point: take 0·log 0 = 0 (the limit of x·log x as x → 0)."
                if eps in (0.0, 1.0)
                else "your answer is not a finite number."
            )
        elif mine < 0:
            hint = "every term −x·log x with 0 ≤ x ≤ 1 is ≥ 0: check the signs."
        elif np.isclose(mine, -_xlogx(eps), rtol=1e-5, atol=1e-9):
            hint = (
                "the correct token's own term −q_t·log q_t is missing: what does q_t tend to "
                "as V → ∞?"
            )
        elif np.isclose(mine, -_xlogx(1 - eps), rtol=1e-5, atol=1e-9):
            hint = (
                "the V − 1 other tokens give more than ε·log V: expand their term with "
                "log(ε/V) = log ε − log V before letting V → ∞."
            )
        elif want > 0 and np.isclose(mine * math.log(2), want, rtol=1e-5):
            hint = "the loss is in nats: natural logarithms."
        else:
            near = ", ".join(
                f"{_floor_minus_eps_log_v(eps, V):.6f} at V = {V:,}" for V in (1000, 100_000)
            )
            hint = (
                f"the library's floor minus ε·log V is {near}. Write the floor as lesson 03 "
                "found it (the entropy of q), subtract ε·log V, and let V → ∞ term by term."
            )
        raise AssertionError(f"{where} = {mine:.6g}, expected {want:.6g}. Hint: {hint}")


# ------------------------------------------------------------------ exercise 3
def _adam_after_zeros(g: np.ndarray, t: int, lr: float, betas: tuple, eps: float) -> np.ndarray:
    """θ_t − θ_{t−1} of optim.Adam given t − 1 zero gradients, then g."""
    from minitransformer import optim

    p = mt.nn.Parameter(np.zeros(g.shape), dtype="float64")
    opt = optim.Adam([p], lr=lr, betas=betas, eps=eps)
    for _ in range(t - 1):
        p.grad = np.zeros(g.shape)
        opt.step()
    before = p.numpy().copy()
    p.grad = g.copy()
    opt.step()
    return p.numpy() - before


def _update(g, t, lr, betas, eps, *, corrected=True, eps_in_sqrt=False):  # for the hints
    b1, b2 = betas
    m, v = (1 - b1) * g, (1 - b2) * g * g
    if corrected:
        m, v = m / (1 - b1**t), v / (1 - b2**t)
    return -lr * m / (np.sqrt(v + eps) if eps_in_sqrt else np.sqrt(v) + eps)


def _hint_09_3(mine, g, t, lr, betas, eps, want) -> str:
    """Which mistake gives ``mine``: a hint per mistake (the candidates are the answers with
    that one mistake)."""

    def close(x: np.ndarray) -> bool:
        return np.allclose(mine, x, rtol=1e-6, atol=1e-15)

    if close(-want):
        return "the sign: Adam moves θ against the gradient, as gradient descent."
    if close(_update(g, t, lr, betas, 0.0)):
        return (
            f"right but for ε: at this |g|, ε = {eps:g} is not negligible. Where does ε enter "
            "the update (section 1)?"
        )
    if close(_update(g, t, lr, betas, eps, eps_in_sqrt=True)):
        return "ε is added to √v̂ (after the square root), not to v̂."
    if close(_update(g, 1, lr, betas, eps)):
        return (
            "that is the step of update 1. At update t the bias corrections are 1 − β₁ᵗ and "
            "1 − β₂ᵗ, while m and v hold only this one gradient: the two no longer cancel."
        )
    if close(_update(g, t, lr, betas, eps, corrected=False)):
        return "m and v started at 0: divide by their bias corrections (section 1)."
    return (
        "after t − 1 zero gradients m and v are still 0; write m_t, v_t and their bias "
        "corrections at this t (section 1), then the update."
    )


@_exercise("Exercise 3 (a rare token's first gradient)")
def check_09_3(first_gradient_update: Callable) -> None:
    rng, lr, eps = _rng(18), 0.02, 1e-9
    for t in (1, 2, 10, 300):
        for scale in (1.0, 1e4, 1e-3, 1e-7):
            g = scale * rng.normal(size=(5, 2))
            for betas in [(0.9, 0.98), (0.5, 0.9)]:
                want = _adam_after_zeros(g, t, lr, betas, eps)
                where = f"first_gradient_update(g, t={t}, lr={lr}, betas={betas})"
                got = _call(first_gradient_update, g, t, lr, betas, where=where)
                mine, rtol = _array(got, where)
                assert mine.shape == g.shape, (
                    f"{where} has shape {mine.shape}: one change per weight, the shape of g "
                    f"{g.shape}"
                )
                if np.allclose(mine, want, rtol=rtol, atol=1e-15):
                    continue
                msg = f"{where}, |g| ~ {scale:g}: not what optim.Adam does."
                hint = _hint_09_3(mine, g, t, lr, betas, eps, want)
                raise AssertionError(f"{msg} Hint: {hint}")
