"""Issue 18: the exercise checks of lessons 01, 03, 04 and 07 catch the wrong answers they let
through and still accept right answers in any valid form.

- 01.2: an overflowing sigmoid fails; the hint for the ``np.where`` form says np.where gets both
  branches already computed (the discarded one overflows), not that the formula is wrong.
- 03.3: a wrong gradient fails with a hint that says where to look, never the formula.
- 04.1: epsilon outside the square root (rows whose mean(x^2) is near eps) and a dgamma left
  unsummed over rows (backward's shapes are checked; the engine would sum it silently) fail.
- 07.3: a comparison with a loose tolerance (atol 0.1 or 0.01) fails on a faint position
  signal; float32 outputs need a tolerance suited to float32, and float64 outputs one suited to
  float64 (issue 28: a fixed 1e-6 calls a position signal of 1e-9 equivariant).

(04.3 became "Add & Norm backwards" in issue 28: tests/test_lesson_exercises_04.py.)
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import checks
from lesson_notebooks import function_class as _fn
from lesson_notebooks import hint_of as _fails

s1 = importlib.import_module("solutions.lesson01")
s3 = importlib.import_module("solutions.lesson03")
s4 = importlib.import_module("solutions.lesson04")
s7 = importlib.import_module("solutions.lesson07")


# ------------------------------------------------------------------ 01.2 (Sigmoid)
def _sig_backward(ctx, grad):
    (y,) = ctx.saved
    return grad * y * (1 - y)


def _sig_where(ctx, x):  # the common form: right values, but both branches are computed
    y = np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))
    ctx.save_for_backward(y)
    return y


def _sig_naive(ctx, x):
    y = 1 / (1 + np.exp(-x))
    ctx.save_for_backward(y)
    return y


def _sig_masked(ctx, x):  # computes each formula only where it is selected
    y = np.empty_like(x)
    pos = x >= 0
    y[pos] = 1 / (1 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    y[~pos] = e / (1 + e)
    ctx.save_for_backward(y)
    return y


def _sig_tanh(ctx, x):
    y = 0.5 * (1 + np.tanh(x / 2))
    ctx.save_for_backward(y)
    return y


def test_01_2_where_form_fails_with_the_right_reason():
    msg = _fails(checks.check_01_2, _fn(_sig_where, _sig_backward))
    assert "already computed" in msg and "discards still overflows" in msg


def test_01_2_naive_form_gets_the_sign_hint():
    msg = _fails(checks.check_01_2, _fn(_sig_naive, _sig_backward))
    assert "sign of the exponent" in msg


@pytest.mark.parametrize("forward", [_sig_masked, _sig_tanh], ids=["masked", "tanh"])
def test_01_2_accepts_other_stable_forms(forward):
    assert checks.check_01_2(_fn(forward, _sig_backward)) == checks.CORRECT
    assert checks.check_01_2(s1.Sigmoid) == checks.CORRECT


# ------------------------------------------------------------------ 03.3 (CE gradient)
def _ce_all_rows(x, t, eps, ig):  # divides by every row, ignored ones too
    return s3.ce_grad(x, t, eps, ig) * (t != ig).sum() / len(t)


def _ce_no_smoothing(x, t, eps, ig):
    return s3.ce_grad(x, t, 0.0, ig)


@pytest.mark.parametrize("wrong", [_ce_all_rows, _ce_no_smoothing], ids=["count", "smoothing"])
def test_03_3_hints_say_where_to_look_not_the_formula(wrong):
    msg = _fails(checks.check_03_3, wrong)
    assert "section" in msg
    for formula in ("prediction - target", "p - q", "divides by the number"):
        assert formula not in msg


def test_03_3_accepts_the_solution_and_refuses_float32_as_not_analytic():
    """03.3 asks for the analytic gradient, compared in float64 beyond what finite differences
    reach: float32 arithmetic lands as close as differences do, and gets the hint that says so."""
    assert checks.check_03_3(s3.ce_grad) == checks.CORRECT
    f32 = lambda x, t, eps, ig: s3.ce_grad(x.astype(np.float32), t, eps, ig)  # noqa: E731
    assert "float32" in _fails(checks.check_03_3, f32)


# ------------------------------------------------------------------ 04.1 (RMSNorm)
def _rms_eps_outside(ctx, x, gamma, eps=1e-6):  # x / (sqrt(mean x^2) + eps)
    rms = np.sqrt((x * x).mean(axis=-1, keepdims=True))
    r = 1 / (rms + eps)
    ctx.save_for_backward(x, rms, r, gamma)
    return x * r * gamma


def _rms_eps_outside_backward(ctx, grad):  # its own, consistent derivative
    x, rms, r, gamma = ctx.saved
    g_hat = grad * gamma
    D = x.shape[-1]
    dx = r * g_hat - x * (g_hat * x).sum(-1, keepdims=True) * r * r / (D * rms)
    return dx, (grad * x * r).reshape(-1, D).sum(axis=0)


def _rms_unsummed_backward(ctx, grad):  # dgamma of shape x.shape: the engine would sum it
    dx, _ = s4.RMSNorm.backward(ctx, grad)
    x_hat, _, _ = ctx.saved
    return dx, grad * x_hat


def _rms_pow_forward(ctx, x, gamma, eps=1e-6):
    r = (np.mean(np.square(x), axis=-1, keepdims=True) + eps) ** -0.5
    ctx.save_for_backward(x * r, r, gamma)
    return gamma * (x * r)


def _rms_einsum_backward(ctx, grad):
    dx, _ = s4.RMSNorm.backward(ctx, grad)
    x_hat = ctx.saved[0]
    return dx, np.einsum("btd,btd->d", grad, x_hat)


def test_04_1_catches_eps_outside_the_root():
    msg = _fails(checks.check_04_1, _fn(_rms_eps_outside, _rms_eps_outside_backward))
    assert "forward is wrong" in msg


def test_04_1_catches_dgamma_left_unsummed():
    msg = _fails(checks.check_04_1, _fn(s4.RMSNorm.forward, _rms_unsummed_backward))
    assert "shape" in msg


def test_04_1_accepts_other_forms():
    assert checks.check_04_1(s4.RMSNorm) == checks.CORRECT
    assert checks.check_04_1(_fn(_rms_pow_forward, _rms_einsum_backward)) == checks.CORRECT


# ------------------------------------------------------------------ 07.3 (equivariance)
def _allclose(**kw):
    return lambda f, x, p: bool(np.allclose(f(x[:, p]), f(x)[:, p], **kw))


def _dtype_aware(f, x, p):
    a, b = f(x[:, p]), f(x)[:, p]
    eps = np.finfo(np.asarray(a).dtype).eps
    return bool(np.max(np.abs(a - b)) <= 100 * eps * max(1.0, np.max(np.abs(b))))


def _assert_allclose(f, x, p):
    try:
        np.testing.assert_allclose(f(x[:, p]), f(x)[:, p], rtol=1e-5, atol=1e-6)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize(
    "wrong",
    [
        _allclose(atol=0.1),
        _allclose(atol=0.01),
        lambda f, x, p: bool(np.array_equal(f(x[:, p]), f(x)[:, p])),  # no rounding allowed
        _allclose(rtol=0, atol=1e-12),  # float64's tolerance on float32 outputs
        _allclose(atol=1e-6),  # float32's tolerance on float64 outputs
        _assert_allclose,  # the same, through np.testing
    ],
    ids=["atol0.1", "atol0.01", "exact", "float64-tolerance", "atol1e-6", "assert_allclose"],
)
def test_07_3_catches_tolerances_not_suited_to_the_dtype(wrong):
    _fails(checks.check_07_3, wrong)


@pytest.mark.parametrize(
    "right",
    [s7.is_permutation_equivariant, _dtype_aware],
    ids=["solution", "dtype-aware"],
)
def test_07_3_accepts_tolerances_suited_to_the_dtype(right):
    assert checks.check_07_3(right) == checks.CORRECT
