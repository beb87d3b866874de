"""Lesson 21 (the block since 2017): its exercise checks accept other valid forms of a right
answer and fail wrong answers with a hint; the solutions agree with the library's ops and a
real KV cache; the notebook ships placeholders and gives no exercise away before its cell
(the solutions and placeholders: CASES_21 in test_lesson_exercises.py; garbage answers:
test_lesson_checks_robust.py).

- 21.1 (RMSNorm's backward): r taken as a constant, LayerNorm's backward, gamma left out, a
  sum for the mean, eps left out, finite differences (close, not exact), dgamma not summed
  over the rows, dgamma through x instead of x̂, the pair swapped, one array for a pair, an
  answer that writes into x, and a call into the library fail, each with its hint; a
  per-row Jacobian, lists, Tensors and a list for the pair pass;
- 21.2 (RoPE by hand, halves): the interleaved layout, the wrong turn, theta without its 2,
  the offset left out, positions from 1, an answer that rotates x in place, and the
  library's op fail; complex numbers, a loop, a list and a Tensor pass;
- 21.3 (the KV cache's bytes): keys or values forgotten, h for kv_heads, the group size,
  d_model for d_k, numbers for bytes, one layer, one token, and a config built through the
  library fail; a NumPy integer, an integral float, a Tensor and a loop pass.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, assert_ships_placeholders, checks, code_before, code_cells
from lesson_notebooks import hint_of as _fails

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.tensor import no_grad

NOTEBOOK = LESSONS / "21_block_since_2017.ipynb"
s21 = importlib.import_module("solutions.lesson21")
c21 = importlib.import_module("checks.lesson21")
_analytic = importlib.import_module("checks._analytic")


# ------------------------------------------------------------------ 21.1
def _jacobian_rows(x, gamma, g, eps):  # each row's full Jacobian, then J^T (g gamma)
    D = x.shape[-1]
    rows, grads = x.reshape(-1, D), (g * gamma).reshape(-1, D)
    dx = np.empty_like(rows)
    for i, (row, up) in enumerate(zip(rows, grads, strict=True)):
        r = 1 / np.sqrt(row @ row / D + eps)
        J = r * np.eye(D) - np.outer(row, row) * r**3 / D  # d(x r)/dx, symmetric
        dx[i] = J @ up
    dgamma = (g * x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)).reshape(-1, D).sum(0)
    return dx.reshape(x.shape), dgamma


VALID_21_1 = {
    "a per-row Jacobian": _jacobian_rows,
    "lists": lambda *a: tuple(v.tolist() for v in s21.rms_norm_backward(*a)),
    "Tensors": lambda *a: tuple(mt.tensor(v, dtype="float64") for v in s21.rms_norm_backward(*a)),
    "a list for the pair": lambda *a: list(s21.rms_norm_backward(*a)),
}


@pytest.mark.parametrize("name", VALID_21_1)
def test_21_1_accepts_every_valid_form(name):
    assert checks.check_21_1(VALID_21_1[name]) == checks.CORRECT


def _slip(**flags):
    return lambda x, gamma, g, eps: c21._rms_backward(x, gamma, g, eps, **flags)


def _finite_differences(x, gamma, g, eps, h=1e-5):
    def loss(x_, gamma_):
        r = 1 / np.sqrt((x_ * x_).mean(-1, keepdims=True) + eps)
        return float((x_ * r * gamma_ * g).sum())

    dx, dgamma = np.zeros_like(x), np.zeros_like(gamma)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        dx[i] = (loss(x + e, gamma) - loss(x - e, gamma)) / (2 * h)
    for j in range(len(gamma)):
        e = np.zeros_like(gamma)
        e[j] = h
        dgamma[j] = (loss(x, gamma + e) - loss(x, gamma - e)) / (2 * h)
    return dx, dgamma


def _in_place(x, gamma, g, eps):
    x *= 1 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)  # x̂ written over the caller's x
    r = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return r * g * gamma, (g * x).reshape(-1, x.shape[-1]).sum(0)


def _library(x, gamma, g, eps):
    xt = mt.tensor(x, dtype="float64", requires_grad=True)
    gt = mt.tensor(gamma, dtype="float64", requires_grad=True)
    (F.rms_norm(xt, gt, eps=eps) * mt.tensor(g, dtype="float64")).sum().backward()
    return mt.backend.to_numpy(xt.grad), mt.backend.to_numpy(gt.grad)


def _per_row_dgamma(x, gamma, g, eps):
    dx, _ = s21.rms_norm_backward(x, gamma, g, eps)
    return dx, g * x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


WRONG_21_1 = {
    "r constant": (_slip(constant_r=True), "depends on x too"),
    "LayerNorm's backward": (_slip(centred=True), "LayerNorm's backward"),
    "gamma left out": (_slip(gamma_in=False), "grad·γ"),
    "sum for mean": (_slip(mean=False), "MEAN"),
    "eps left out": (_slip(eps_in=False), "inside the square root"),
    "finite differences": (_finite_differences, "finite differences"),
    "dgamma per row": (_per_row_dgamma, "gamma's shape"),
    "dgamma through x": (
        lambda x, gamma, g, eps: (
            s21.rms_norm_backward(x, gamma, g, eps)[0],
            (g * x).reshape(-1, x.shape[-1]).sum(0),
        ),
        "not x",
    ),  # fmt: skip
    "swapped": (lambda *a: s21.rms_norm_backward(*a)[::-1], "(dx, dgamma)"),
    "one array": (lambda *a: s21.rms_norm_backward(*a)[0], "return the pair"),
    "writes into x": (_in_place, "changed its input x"),
    "the library": (_library, "calls the library"),
}


@pytest.mark.parametrize("name", WRONG_21_1)
def test_21_1_rejects_wrong_answers_with_their_hint(name):
    answer, words = WRONG_21_1[name]
    assert words in _fails(checks.check_21_1, answer)


def test_21_1_tolerance_is_beyond_finite_differences():
    """Every step size of central differences misses the check's tolerance (its best, near
    h = 1e-5, is far closer than the hint's NEAR but far above EXACT)."""
    rng = np.random.default_rng(0)
    x, gamma, g = rng.standard_normal((3, 6)), rng.uniform(0.5, 1.5, 6), rng.standard_normal((3, 6))
    want = s21.rms_norm_backward(x, gamma, g, 1e-5)
    for h in (1e-3, 1e-4, 1e-5, 5e-6, 1e-6, 1e-7):
        got = _finite_differences(x, gamma, g, 1e-5, h)
        assert not _analytic.exact(got[0], want[0]), h


def test_21_1_solution_is_the_library_backward():
    rng = np.random.default_rng(3)
    x, gamma, g = (
        rng.standard_normal((2, 4, 8)),
        rng.uniform(-2, 2, 8),
        rng.standard_normal((2, 4, 8)),
    )
    for eps in (1e-6, 0.3):
        ours, library = s21.rms_norm_backward(x, gamma, g, eps), _library(x, gamma, g, eps)
        for a, b in zip(ours, library, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ 21.2
def _complex(x, offset, base):  # pair i as the complex number a + ib, times e^(i phi)
    T, d = x.shape[-2], x.shape[-1]
    phi = (offset + np.arange(T))[:, None] * base ** (-2.0 * np.arange(d // 2) / d)
    z = (x[..., : d // 2] + 1j * x[..., d // 2 :]) * np.exp(1j * phi)
    return np.concatenate([z.real, z.imag], axis=-1)


def _loop(x, offset, base):  # one row and one pair at a time
    out = np.array(x, dtype=float, copy=True)
    T, d = x.shape[-2], x.shape[-1]
    for t in range(T):
        for i in range(d // 2):
            phi = (offset + t) * base ** (-2 * i / d)
            a, b = x[..., t, i], x[..., t, i + d // 2]
            out[..., t, i] = a * np.cos(phi) - b * np.sin(phi)
            out[..., t, i + d // 2] = a * np.sin(phi) + b * np.cos(phi)
    return out


VALID_21_2 = {
    "complex numbers": _complex,
    "a loop": _loop,
    "a list": lambda x, o, b: s21.rope_halves(x, o, b).tolist(),
    "a Tensor": lambda x, o, b: mt.tensor(s21.rope_halves(x, o, b), dtype="float64"),
}


@pytest.mark.parametrize("name", VALID_21_2)
def test_21_2_accepts_every_valid_form(name):
    assert checks.check_21_2(VALID_21_2[name]) == checks.CORRECT


def _rotate_in_place(x, offset, base):
    x[...] = s21.rope_halves(x, offset, base)
    return x


WRONG_21_2 = {
    "interleaved": (lambda x, o, b: c21._rope(x, o, b, layout="interleaved"), "interleaved"),
    "the wrong turn": (lambda x, o, b: c21._rope(x, o, b, sign=-1.0), "wrong way"),
    "theta without its 2": (lambda x, o, b: c21._rope(x, o, b, two=1.0), "−2i/d"),
    "offset left out": (lambda x, o, b: s21.rope_halves(x, 0, b), "offset is missing"),
    "positions from 1": (lambda x, o, b: s21.rope_halves(x, o + 1, b), "not offset + 1"),
    "in place": (_rotate_in_place, "changed its input x"),
    "the library": (
        lambda x, o, b: F.rotary_embedding(mt.tensor(x, dtype="float64"), o, b).numpy(),
        "calls the library",
    ),
    "a shape lost": (lambda x, o, b: s21.rope_halves(x, o, b).reshape(-1), "keeps x's shape"),
}


@pytest.mark.parametrize("name", WRONG_21_2)
def test_21_2_rejects_wrong_answers_with_their_hint(name):
    answer, words = WRONG_21_2[name]
    assert words in _fails(checks.check_21_2, answer)


@pytest.mark.parametrize("offset, base", [(0, 10000.0), (5, 10000.0), (300, 500000.0), (2, 7.0)])
def test_21_2_solution_is_the_library_op(offset, base):
    x = np.random.default_rng(offset).standard_normal((2, 3, 9, 12))
    library = F.rotary_embedding(mt.tensor(x, dtype="float64"), offset, base, layout="halves")
    np.testing.assert_allclose(s21.rope_halves(x, offset, base), library.numpy(), atol=1e-12)


# ------------------------------------------------------------------ 21.3
def _per_layer(N, d_model, h, kv_heads, positions, itemsize):
    total = 0
    for _ in range(N):
        for _tensor in ("k", "v"):
            total += kv_heads * positions * (d_model // h) * itemsize
    return total


VALID_21_3 = {
    "a NumPy integer": lambda *a: np.int64(s21.kv_cache_bytes(*a)),
    "an integral float": lambda *a: float(s21.kv_cache_bytes(*a)),
    "a Tensor": lambda *a: mt.tensor(np.array([s21.kv_cache_bytes(*a)], dtype=np.float64)),
    "a loop over the layers": _per_layer,
}


@pytest.mark.parametrize("name", VALID_21_3)
def test_21_3_accepts_every_valid_form(name):
    assert checks.check_21_3(VALID_21_3[name]) == checks.CORRECT


def _through_a_config(N, d_model, h, kv_heads, positions, itemsize):
    cfg = mt.TransformerConfig(src_vocab=5, tgt_vocab=5, decoder_only=True, N=N,
                               d_model=d_model, h=h, d_ff=4, kv_heads=kv_heads)  # fmt: skip
    return 2 * cfg.N * cfg.kv_heads * cfg.d_k * positions * itemsize


WRONG_21_3 = {
    "keys only": (lambda N, D, h, kv, L, b: N * kv * (D // h) * L * b, "AND its values"),
    "h for kv_heads": (lambda N, D, h, kv, L, b: 2 * N * h * (D // h) * L * b, "share them"),
    "the group size": (lambda N, D, h, kv, L, b: 2 * N * (h // kv) * (D // h) * L * b, "group"),
    "d_model for d_k": (lambda N, D, h, kv, L, b: 2 * N * kv * D * L * b, "d_model / h wide"),
    "numbers": (lambda N, D, h, kv, L, b: 2 * N * kv * (D // h) * L, "bytes"),
    "one layer": (lambda N, D, h, kv, L, b: 2 * kv * (D // h) * L * b, "N layers"),
    "one token": (lambda N, D, h, kv, L, b: 2 * N * kv * (D // h) * b, "one token's bytes"),
    "half": (lambda *a: s21.kv_cache_bytes(*a) // 2 + 1, "list what one layer keeps"),
    "a fraction": (lambda *a: s21.kv_cache_bytes(*a) + 0.5, "whole number of bytes"),
    "through the library": (_through_a_config, "calls the library"),
}


@pytest.mark.parametrize("name", WRONG_21_3)
def test_21_3_rejects_wrong_answers_with_their_hint(name):
    answer, words = WRONG_21_3[name]
    assert words in _fails(checks.check_21_3, answer)


@pytest.mark.parametrize("kv_heads", [None, 2, 1])
def test_21_3_solution_counts_a_real_cache(kv_heads):
    """The exercise's count is what the library's cache holds: a prompt, then one step."""
    lm = mt.nn.TransformerLM(vocab=11, d_model=32, h=4, N=3, d_ff=16, kv_heads=kv_heads)
    cache, B, L = lm.new_cache(), 2, 9
    ids = np.random.default_rng(0).integers(3, 11, size=(B, L))
    with no_grad():
        lm(ids[:, :-1], cache)
        lm(ids[:, -1:], cache)
    held = sum(a.numpy().nbytes for kv in cache.self_attn for a in (kv.k, kv.v))
    assert held == B * s21.kv_cache_bytes(3, 32, 4, kv_heads or 4, L, 4)


# ------------------------------------------------------------------ the notebook
def test_ships_placeholders_and_calls_each_check_once():
    assert_ships_placeholders(
        NOTEBOOK, 21, ["21_1", "21_2", "21_3"],
        ["rms_norm_backward", "rope_halves", "kv_cache_bytes"],
    )  # fmt: skip


def test_no_cell_gives_an_exercise_away_before_it():
    """No RMSNorm gradient before exercise 1, no rotation before exercise 2, no count of the
    cache before exercise 3."""
    before_1 = code_before(NOTEBOOK, "rms_norm_backward")
    assert "x_hat" not in before_1 and "rms_norm(" not in before_1 and ".grad" not in before_1
    before_2 = code_before(NOTEBOOK, "rope_halves")
    assert "np.cos(" not in before_2 and "np.sin(" not in before_2
    assert "rotary_embedding(" not in before_2
    before_3 = code_before(NOTEBOOK, "kv_cache_bytes")
    assert "nbytes" not in before_3 and "itemsize" not in before_3 and "kv_heads or" not in before_3


@pytest.mark.parametrize("n, name", [(1, "rms_norm_backward"), (2, "rope_halves"),
                                     (3, "kv_cache_bytes")])  # fmt: skip
def test_the_check_cells_run_on_the_solutions(n, name, capsys):
    """What a check cell does once the answer is right (compare with the library, test the
    relative-position property) runs: the cell, executed with the solution in its place."""
    cell = next(c for c in code_cells(NOTEBOOK) if f"checks.check_21_{n}(" in c)
    namespace = {"np": np, "mt": mt, "F": F, "checks": checks, name: getattr(s21, name)}
    exec(compile(cell, f"check cell 21.{n}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "✓" in out
    if n == 1:  # the library's backward, to rounding
        assert float(out.split("dgamma ")[-1]) < 1e-12
    if n == 2:  # moved together, the scores are equal; yours is the library's op
        for line in out.splitlines()[1:-1]:
            scores = [float(v) for v in line.split("scores ")[1].split(", ")]
            assert max(scores) - min(scores) < 1e-9, line
        assert float(out.splitlines()[-1].split()[-1]) < 1e-12
