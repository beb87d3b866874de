"""Checks for the exercises of every lesson (01-14), one function per exercise: ``check_NN_K``.

A notebook's check cell calls ``checks.check_NN_K(<your answer>)``. Each check

- prints ``not attempted yet`` and returns ``"not attempted"`` while the exercise still holds
  its placeholder (``raise NotImplementedError(...)`` in a function, or ``None``), so the
  notebook runs top to bottom before you have solved anything;
- raises ``AssertionError`` with a hint when the answer is wrong;
- prints ``✓ correct`` and returns ``"correct"`` when it is right.

Checks build their own inputs (seeded), so they depend on nothing a notebook defines except
what is passed in; tests/test_lesson_exercises.py runs them on the reference solutions in
lessons/solutions/ and on known wrong answers. Hints say where to look, not the formula.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

CORRECT = "correct"
NOT_ATTEMPTED = "not attempted"


class _NotAttempted(Exception):
    pass


def _exercise(name: str) -> Callable:
    """Wrap a check: placeholder -> 'not attempted yet', pass -> '✓ correct'."""

    def wrap(check: Callable) -> Callable:
        @functools.wraps(check)
        def run(*args: Any, **kwargs: Any) -> str:
            if any(a is None for a in args):
                print(f"{name}: not attempted yet (replace the placeholder, then run this cell)")
                return NOT_ATTEMPTED
            try:
                check(*args, **kwargs)
            except (NotImplementedError, _NotAttempted):
                print(f"{name}: not attempted yet (replace the placeholder, then run this cell)")
                return NOT_ATTEMPTED
            print(f"✓ {name}: correct")
            return CORRECT

        return run

    return wrap


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------- lesson 01: autograd


@_exercise("Exercise 1 (Value.tanh, -, -)")
def check_01_1(Value: type) -> None:
    """``Value`` must have the learner's tanh, __neg__ and __sub__ attached."""

    def f(p, q):
        return math.tanh(math.tanh(p - q) * p - 3 * q)

    for a0, b0 in [(0.3, -0.2), (1.5, 0.4), (-2.0, 1.0)]:
        a, b = Value(a0), Value(b0)
        out = ((a - b).tanh() * a - b * 3.0).tanh()
        out.backward()
        h = 1e-6
        da = (f(a0 + h, b0) - f(a0 - h, b0)) / (2 * h)
        db = (f(a0, b0 + h) - f(a0, b0 - h)) / (2 * h)
        assert math.isclose(out.data, f(a0, b0), rel_tol=1e-12), (
            "the forward value is wrong; hint: does a - b compute a minus b?"
        )
        assert abs(a.grad - da) < 1e-6 and abs(b.grad - db) < 1e-6, (
            f"gradients ({a.grad:.6f}, {b.grad:.6f}) != finite differences ({da:.6f}, {db:.6f}); "
            "hint: differentiate tanh by hand once, and ask what d(a - b)/db must be"
        )
    x = Value(0.7)
    y = -x
    y.backward()
    assert y.data == -0.7 and x.grad == -1.0, "hint: -x must have value -x and derivative -1"


@_exercise("Exercise 2 (Sigmoid)")
def check_01_2(Sigmoid: type) -> None:
    rng = _rng(1)
    xc = mt.tensor(rng.standard_normal((4, 3)) * 3, requires_grad=True, dtype="float64")
    ref = 1 / (1 + np.exp(-xc.numpy()))
    assert np.allclose(Sigmoid.apply(xc).numpy(), ref), "forward does not match 1/(1+e^-x)"
    try:
        mt.gradcheck(Sigmoid.apply, xc)
    except mt.GradcheckError as err:
        raise AssertionError(
            f"backward is wrong: {err}; hint: write the derivative in terms of the output"
        ) from None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning becomes an error
        try:
            big = Sigmoid.apply(mt.tensor(np.array([-1000.0, 0.0, 1000.0]))).numpy()
        except RuntimeWarning as w:
            raise AssertionError(
                f"NumPy warned: {w}; hint: which sign of the exponent can never overflow?"
            ) from None
    assert np.allclose(big, [0.0, 0.5, 1.0]), f"sigmoid(-1000, 0, 1000) gave {big}"


def _fd_error_f32(eps: float, x0: float) -> float:
    x, e = np.float32(x0), np.float32(eps)
    exact = 1 - np.tanh(np.float64(x)) ** 2
    d = (np.tanh(x + e) - np.tanh(x - e)) / (np.float32(2) * e)
    return max(abs(float(d) - exact), 1e-17)


@_exercise("Exercise 3 (best eps in float32)")
def check_01_3(best_eps_float32: Callable[[], float]) -> None:
    eps_mine = float(best_eps_float32())
    points = np.linspace(0.2, 1.5, 25)  # average over points: single points have lucky roundings

    def mean_error(e):
        return np.mean([_fd_error_f32(e, x0) for x0 in points])

    err_best = min(mean_error(e) for e in np.logspace(-6, -0.5, 60))
    err_mine = mean_error(eps_mine)
    print(f"your eps = {eps_mine:.2e}: mean error {err_mine:.2e}; best on a grid: {err_best:.2e}")
    assert 1e-5 < eps_mine < 1e-1 and err_mine < 3 * err_best, (
        "your eps is far from the bottom of the V; hint: add the two error terms, set the "
        "derivative in eps to zero, and use float32's unit roundoff"
    )


# ---------------------------------------------------------------- lesson 02: broadcasting, matmul


@_exercise("Exercise 1 (outer product backward)")
def check_02_1(outer_backward: Callable) -> None:
    rng = _rng(2)
    u0, v0, G = rng.standard_normal(3), rng.standard_normal(4), rng.standard_normal((3, 4))
    ut = mt.tensor(u0, requires_grad=True, dtype="float64")
    vt = mt.tensor(v0, requires_grad=True, dtype="float64")
    (ut.reshape(3, 1) * vt.reshape(1, 4)).backward(G)
    du, dv = outer_backward(u0, v0, G)
    assert np.shape(du) == (3,) and np.shape(dv) == (4,), "hint: a gradient has its input's shape"
    assert np.allclose(du, ut.grad) and np.allclose(dv, vt.grad), (
        "hint: u was copied along one axis; its gradient sums G (weighted by v) over that axis"
    )


@_exercise("Exercise 2 (x Wᵀ backward)")
def check_02_2(linear_t_backward: Callable) -> None:
    rng = _rng(3)
    x0, W0, G0 = (
        rng.standard_normal((2, 3, 4)),
        rng.standard_normal((5, 4)),
        rng.standard_normal((2, 3, 5)),
    )
    xt = mt.tensor(x0, requires_grad=True, dtype="float64")
    Wt = mt.tensor(W0, requires_grad=True, dtype="float64")
    (xt @ Wt.T).backward(G0)
    dx, dW = linear_t_backward(x0, W0, G0)
    assert np.shape(dx) == (2, 3, 4), f"dx has shape {np.shape(dx)}, x has (2, 3, 4)"
    assert np.shape(dW) == (5, 4), f"dW has shape {np.shape(dW)}, W has (5, 4)"
    assert np.allclose(dx, xt.grad), "dx is wrong; hint: let the shapes pick the product"
    assert np.allclose(dW, Wt.grad), "dW is wrong; hint: flatten the rows, then one 2-D product"


@_exercise("Exercise 3 (per-head scale gradient)")
def check_02_3(head_scale_grad: Callable) -> None:
    rng = _rng(4)
    x0, s0 = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((1, 3, 1, 1))
    G0 = rng.standard_normal((2, 3, 4, 5))
    st = mt.tensor(s0, requires_grad=True, dtype="float64")
    (mt.tensor(x0, dtype="float64") * st).backward(G0)
    ds = np.asarray(head_scale_grad(x0, s0, G0))
    assert ds.shape == (1, 3, 1, 1), f"ds has shape {ds.shape}; it must have s's shape (1, 3, 1, 1)"
    assert np.allclose(ds, st.grad), "hint: sum over every axis where s was broadcast"


# ---------------------------------------------------------------- lesson 03: softmax, cross-entropy


@_exercise("Exercise 1 (logsumexp)")
def check_03_1(logsumexp: Callable) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # overflow/invalid warnings become errors
        try:
            rows = np.array([[1000.0, 1000.0], [-1000.0, -1000.0], [0.0, -np.inf]])
            out = np.asarray(logsumexp(rows, axis=-1))
        except RuntimeWarning as w:
            raise AssertionError(f"NumPy warned: {w}; hint: make the largest exponent 0") from None
    assert np.allclose(out, [1000 + np.log(2), -1000 + np.log(2), 0.0]), (
        f"got {out}; hint: make the largest exponent 0, and add back what you took out"
    )
    xr = _rng(5).standard_normal((3, 4, 5))
    for ax in (0, 1, -1):
        got = np.asarray(logsumexp(xr, axis=ax))
        want = np.log(np.exp(xr).sum(axis=ax))
        assert got.shape == want.shape and np.allclose(got, want), (
            f"wrong on axis {ax} (shape {got.shape}, expected {want.shape})"
        )


def _row_losses(ms, eps, V):  # loss of rows [m, 0, ..., 0] with target 0, one per margin
    z = np.zeros((ms.size, V))
    z[:, 0] = ms
    t = np.zeros(ms.size, dtype=np.int64)
    return F.cross_entropy(mt.tensor(z), t, label_smoothing=eps, reduction="none").numpy()


@_exercise("Exercise 2 (best margin with label smoothing)")
def check_03_2(best_margin: Callable) -> None:
    for eps, V in [(0.1, 10), (0.1, 1000), (0.3, 5)]:
        ms = np.linspace(0, 20, 201)  # coarse search, then a fine one around the best
        ms = np.linspace(*ms[_row_losses(ms, eps, V).argmin()] + np.array([-0.1, 0.1]), 201)
        numeric = ms[_row_losses(ms, eps, V).argmin()]
        mine = float(best_margin(eps, V))
        assert abs(mine - numeric) < 0.01, (
            f"eps={eps}, V={V}: your margin {mine:.3f}, the loss is smallest at {numeric:.3f}; "
            "hint: when is cross-entropy against q smallest, and what ratio of probabilities "
            "does a margin m give?"
        )


@_exercise("Exercise 3 (cross-entropy gradient)")
def check_03_3(ce_grad: Callable) -> None:
    rng = _rng(6)
    for trial in range(3):
        N, V = 6, 8
        xc = rng.standard_normal((N, V)) * 2
        tc = rng.integers(0, V, N)
        tc[trial] = -100  # one padding row, marked -100 (PyTorch's default ignore id)
        tc[trial + 3] = -100 if trial == 2 else tc[trial + 3]
        xt = mt.tensor(xc, requires_grad=True, dtype="float64")
        F.cross_entropy(xt, tc, label_smoothing=0.2, ignore_index=-100).backward()
        mine = np.asarray(ce_grad(xc, tc, 0.2, -100))
        assert mine.shape == (N, V), f"the gradient has the logits' shape {(N, V)}"
        assert np.allclose(mine[trial], 0), "hint: what do ignored rows contribute to the loss?"
        assert np.allclose(mine, xt.grad), (
            "hint: the fused gradient is (prediction - target distribution), and a mean "
            "divides by the number of rows that count"
        )


# ---------------------------------------------------------------- lesson 04: LayerNorm, residual


@_exercise("Exercise 1 (RMSNorm)")
def check_04_1(RMSNorm: type) -> None:
    rng = _rng(7)
    xr = mt.tensor(rng.standard_normal((2, 3, 5)) * 2, requires_grad=True, dtype="float64")
    gr = mt.tensor(rng.uniform(0.5, 1.5, 5), requires_grad=True, dtype="float64")
    yr = RMSNorm.apply(xr, gr).numpy()
    x = xr.numpy()
    expected = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * gr.numpy()
    assert np.allclose(yr, expected), "forward is wrong: y = gamma * x / sqrt(mean(x^2) + eps)"
    try:
        mt.gradcheck(RMSNorm.apply, xr, gr)
    except mt.GradcheckError as err:
        raise AssertionError(
            f"backward is wrong ({err}); hint: follow LayerNorm's derivation and drop the "
            "terms that came from the mean"
        ) from None


@_exercise("Exercise 2 (LayerNorm's gain on a constant row)")
def check_04_2(max_gain: Callable) -> None:
    rng = _rng(8)
    for eps in [1e-5, 1e-3, 1e-1]:
        row = mt.tensor(
            (2.0 + 1e-7 * rng.standard_normal(16))[None], requires_grad=True, dtype="float64"
        )
        g = rng.standard_normal((1, 16))
        g -= g.mean()
        F.layer_norm(row, mt.tensor(np.ones(16)), mt.tensor(np.zeros(16)), eps=eps).backward(g)
        gain = np.linalg.norm(row.grad) / np.linalg.norm(g)
        mine = float(max_gain(eps))
        assert abs(mine / gain - 1) < 0.01, (
            f"eps={eps}: measured gain {gain:.4g}, your answer {mine:.4g}; "
            "hint: what is x_hat for a constant row, and what is left of dx then?"
        )


@_exercise("Exercise 3 (gamma and beta gradients)")
def check_04_3(ln_param_grads: Callable) -> None:
    rng = _rng(9)
    x0, g0 = rng.standard_normal((3, 4, 6)) * 2 + 0.5, rng.standard_normal((3, 4, 6))
    gt = mt.tensor(rng.uniform(0.5, 2, 6), requires_grad=True, dtype="float64")
    bt = mt.tensor(rng.standard_normal(6), requires_grad=True, dtype="float64")
    F.layer_norm(mt.tensor(x0, dtype="float64"), gt, bt).backward(g0)
    dgamma, dbeta = ln_param_grads(g0, x0)
    assert np.shape(dgamma) == (6,) and np.shape(dbeta) == (6,), (
        "hint: a parameter gradient has the parameter's shape (D,)"
    )
    assert np.allclose(dbeta, bt.grad), "dbeta is wrong; hint: beta is added to every row"
    assert np.allclose(dgamma, gt.grad), (
        "dgamma is wrong; hint: gamma multiplies the normalized x, not the output"
    )


# ---------------------------------------------------------------- lesson 05: attention


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@_exercise("Exercise 1 (softmax backward)")
def check_05_1(softmax_backward: Callable) -> None:
    rng = _rng(10)
    s, dP = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    numeric = np.zeros_like(s)
    for idx in np.ndindex(s.shape):
        e = np.zeros_like(s)
        e[idx] = 1e-6
        numeric[idx] = ((_softmax(s + e) * dP).sum() - (_softmax(s - e) * dP).sum()) / 2e-6
    mine = np.asarray(softmax_backward(_softmax(s), dP))
    assert mine.shape == s.shape, (
        f"dS must have the shape of the scores {s.shape}, got {mine.shape}"
    )
    assert np.allclose(mine, numeric, atol=1e-6), (
        "dS differs from finite differences; hint: every score moves every probability of its "
        "row; the row's probabilities sum to 1"
    )


@_exercise("Exercise 2 (padding mask from lengths)")
def check_05_2(padding_mask_from_lengths: Callable) -> None:
    rng = _rng(11)
    for lengths, S in [([3, 5, 1, 4], 6), ([6, 6], 6), ([0, 2], 3)]:
        ids = np.zeros((len(lengths), S), dtype=np.int64)
        for b, n in enumerate(lengths):
            ids[b, :n] = rng.integers(4, 20, size=n)
        expected = mt.nn.padding_mask(ids, pad_id=0)
        mine = np.asarray(padding_mask_from_lengths(lengths, S))
        want = (len(lengths), 1, 1, S)
        assert mine.shape == want, f"shape must be (B, 1, 1, S) = {want}, got {mine.shape}"
        assert mine.dtype == bool, f"the mask must be bool (True = may attend), got {mine.dtype}"
        assert np.array_equal(mine, expected), (
            f"lengths {lengths}: True must mark positions 0 .. length-1 of each sentence"
        )


def _future_leaks(mask: np.ndarray, T: int) -> list[tuple[int, int]]:
    """(query, key) pairs with key > query whose input changes the query's attention output."""
    rng = _rng(12)
    x = rng.standard_normal((1, 1, T, 4))

    def out(a):
        return F.scaled_dot_product_attention(mt.tensor(a), mt.tensor(a), mt.tensor(a), mask)

    base = out(x).numpy()
    leaks = []
    for j in range(T):
        x2 = x.copy()
        x2[0, 0, j] += 1.0
        changed = np.abs(out(x2).numpy() - base).max(axis=-1)[0, 0] > 1e-9  # (T,)
        leaks += [(i, j) for i in range(j) if changed[i]]
    return leaks


@_exercise("Exercise 3 (local causal mask)")
def check_05_3(local_causal_mask: Callable) -> None:
    for T, w in [(6, 1), (6, 2), (7, 3), (5, 5), (4, 9)]:
        expected = np.zeros((1, 1, T, T), dtype=bool)
        for i in range(T):
            for j in range(max(0, i - w + 1), i + 1):
                expected[0, 0, i, j] = True
        mine = np.asarray(local_causal_mask(T, w))
        assert mine.shape == (1, 1, T, T) and mine.dtype == bool, (
            "need a bool array of shape (1, 1, T, T)"
        )
        assert not _future_leaks(mine, T), f"T={T}, w={w}: the mask leaks the future"
        assert np.array_equal(mine, expected), (
            f"T={T}, w={w}: query t must see the w most recent keys, itself included"
        )


# ---------------------------------------------------------------- lesson 06: multi-head attention


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


# ---------------------------------------------------------------- lesson 07: positional encoding


@_exercise("Exercise 1 (wavelengths)")
def check_07_1(wavelengths: Callable) -> None:
    for D in (8, 64, 512):
        lam = np.asarray(wavelengths(D), dtype=float)
        assert lam.shape == (D // 2,), (
            f"one wavelength per pair: expected shape {(D // 2,)}, got {lam.shape}"
        )
        table = mt.nn.sinusoid_table(50, D)
        p = np.arange(50)[:, None]
        assert np.allclose(np.sin(2 * np.pi * p / lam), table[:, 0::2]) and np.allclose(
            np.cos(2 * np.pi * p / lam), table[:, 1::2]
        ), "sin(2 pi pos / lambda_i) should reproduce column 2i of the table; hint: omega vs lambda"


@_exercise("Exercise 2 (offset from two codes)")
def check_07_2(recover_offset: Callable, d_model: int = 64) -> None:
    table = mt.nn.sinusoid_table(1000, d_model)
    rng = _rng(15)
    for _ in range(50):
        p, q = (int(i) for i in rng.integers(0, 1000, size=2))
        got = recover_offset(table[p], table[q], d_model)
        assert got == q - p, f"PE({p}) -> PE({q}): expected k = {q - p}, got {got}"


@_exercise("Exercise 3 (permutation equivariance)")
def check_07_3(is_permutation_equivariant: Callable) -> None:
    D, h, T = 16, 4, 6
    mha = mt.nn.MultiHeadAttention(D, h)
    enc = mt.nn.EncoderLayer(D, h, d_ff=32)
    pos = mt.nn.PositionalEncoding(D, 32)
    for module in (mha, enc, pos):
        module.to(dtype="float64")

    def attn(a, mask=None):
        t = mt.tensor(a)
        return mha(t, t, t, mask).numpy()

    x = _rng(16).standard_normal((2, T, D))
    perm = np.array([3, 0, 5, 1, 4, 2])
    cases = [
        (attn, True, "self-attention without PE"),
        (lambda a: enc(mt.tensor(a)).numpy(), True, "an encoder layer without PE"),
        (lambda a: a * 2.0 + 1.0, True, "a position-wise function"),
        (lambda a: attn(pos(mt.tensor(a)).numpy()), False, "self-attention with PE"),
        (lambda a: attn(a, mt.nn.causal_mask(T)), False, "causal self-attention"),
        (lambda a: np.cumsum(a, axis=1), False, "a running sum over positions"),
        # these keep every row's values, only in another order: sums over positions (or
        # over everything) cannot tell them from equivariant functions; rows can
        (lambda a: a[:, ::-1], False, "reversing the positions"),
        (lambda a: np.roll(a, 1, axis=1), False, "shifting the positions by one"),
        (lambda a: np.sort(a, axis=1), False, "sorting each feature over the positions"),
        (lambda a: a + a.mean(axis=1, keepdims=True), True, "adding the mean over positions"),
    ]
    for f, expected, name in cases:
        got = is_permutation_equivariant(f, x, perm)
        assert got == expected, (
            f"{name}: expected {expected}, got {got}; hint: compare the outputs row by row, "
            "not a summary of them"
        )
    assert is_permutation_equivariant(lambda a: a[:, ::-1], x, np.arange(T)), (
        "the identity permutation changes nothing: any f passes"
    )


# ---------------------------------------------------------------- lesson 08: encoder-decoder


@_exercise("Exercise 1 (shift right)")
def check_08_1(make_decoder_io: Callable) -> None:
    from minitransformer.data.batching import make_batch

    cfg = mt.TransformerConfig.preset("tiny", src_vocab=20, tgt_vocab=20)
    for src, tgt in [([5, 6, 7], [8, 9]), ([4], [4, 5, 6, 7]), ([9, 9], [10])]:
        b = make_batch([(src, tgt)])
        tgt_in, tgt_out = make_decoder_io(tgt, cfg.bos_id, cfg.eos_id)
        assert list(tgt_in) == b.tgt_in[0].tolist(), (
            f"tgt_in for {tgt}: expected {b.tgt_in[0].tolist()}, got {list(tgt_in)}; hint: what "
            "does the decoder read at the very first step?"
        )
        assert list(tgt_out) == b.tgt_out[0].tolist(), (
            f"tgt_out for {tgt}: expected {b.tgt_out[0].tolist()}, got {list(tgt_out)}; hint: "
            "what must the decoder predict after the last word?"
        )


@_exercise("Exercise 2 (decoder self-attention mask)")
def check_08_2(decoder_self_mask: Callable) -> None:
    ids = np.array([[1, 5, 6, 7, 0, 0], [1, 8, 0, 0, 0, 0], [1, 4, 5, 6, 7, 8], [0, 0, 0, 0, 0, 0]])
    mine = np.asarray(decoder_self_mask(ids, 0))
    expected = mt.nn.target_mask(ids, 0)
    assert mine.shape == expected.shape, (
        f"expected shape {expected.shape} = (B, 1, T, T), got {mine.shape}"
    )
    assert mine.dtype == bool, f"the mask must be bool, got {mine.dtype}"
    bad = np.argwhere(mine != expected)
    assert bad.size == 0, (
        f"{len(bad)} entries differ, first at (b, 0, query, key) = {tuple(bad[0])}; "
        "hint: two conditions, one about positions and one about which token is padding"
    )


class _ScriptedModel:
    """A stand-in for a Transformer whose next-token scores follow a script per sentence.

    ``script[b][t]`` is the best token for sentence b at step t. After its EOS a sentence's
    script goes on with ordinary tokens, so a loop that keeps appending after EOS shows it. At
    some steps <pad> or <bos> score even higher (a decoder must never emit them). ``fed``
    records the tokens fed in at each step.
    """

    def __init__(self, script: list[list[int]], V: int = 12):
        self.cfg = mt.TransformerConfig.preset("tiny", src_vocab=V, tgt_vocab=V)
        self.script, self.V, self.fed = script, V, []

    def encode(self, src):
        return mt.tensor(np.zeros((len(src), 1, 2)))

    def new_cache(self):
        return {"step": 0}

    def decode(self, tgt_in, memory, src, cache=None):
        t = cache["step"]
        cache["step"] += 1
        self.fed.append(np.asarray(tgt_in)[:, -1].tolist())
        logits = np.zeros((len(self.script), 1, self.V))
        for b, row in enumerate(self.script):
            logits[b, 0, row[min(t, len(row) - 1)]] = 5.0
            if (t + b) % 3 == 0:
                logits[b, 0, self.cfg.pad_id] = 9.0
            if (t + b) % 4 == 1:
                logits[b, 0, self.cfg.bos_id] = 8.0
        return mt.tensor(logits)

    def __call__(self, *a, **k):  # pragma: no cover - the exercise must not train or score
        raise AssertionError("greedy_batch should use encode / new_cache / decode")


@_exercise("Exercise 3 (batched greedy decoding)")
def check_08_3(greedy_batch: Callable, model: Any = None, src: Any = None) -> None:
    """A scripted model (stops, EOS handling, what is fed after EOS); then, given a trained
    ``model`` and a padded ``src``, the same outputs as ``greedy_decode``."""
    cfg = mt.TransformerConfig.preset("tiny", src_vocab=12, tgt_vocab=12)
    eos, pad = cfg.eos_id, cfg.pad_id
    script = [
        [5, 6, eos, 7, 8, 9, 10, 11, 7, 7],  # done after 3 steps, then keeps "talking"
        [7, 8, 9, 10, eos, 5, 5, 5, 5, 5],  # done after 5 steps
        [eos, 9, 9, 9, 9, 9, 9, 9, 9, 9],  # empty output
    ]
    stub = _ScriptedModel(script)
    src_stub = np.full((3, 4), 5)
    out = greedy_batch(stub, src_stub, 9)
    expected = [[5, 6], [7, 8, 9, 10], []]
    assert len(out) == 3, f"one output list per sentence: expected 3, got {len(out)}"
    got = [[int(i) for i in o] for o in out]
    for b in range(3):
        assert got[b] == expected[b], (
            f"scripted sentence {b}: expected {expected[b]}, got {got[b]}; hint: a sentence's "
            "output ends at its first <eos> (nothing after it, and no <pad>/<bos> anywhere)"
        )
    assert len(stub.fed) == 5, (
        f"decode ran {len(stub.fed)} steps; all sentences were done after 5: stop as soon as "
        "every sentence has produced <eos>"
    )
    for t, fed in enumerate(stub.fed[1:], start=1):
        for b, stop in enumerate([2, 4, 0]):
            # the step right after EOS may feed the EOS itself; from then on only <pad>
            if t > stop + 1 or (t == stop + 1 and fed[b] != eos):
                assert fed[b] == pad, (
                    f"step {t}: sentence {b} finished at step {stop} but was fed {fed[b]}, "
                    "not <pad>; hint: keep a 'done' flag per sentence"
                )
    if model is not None and src is not None:
        from minitransformer.decode import greedy_decode

        want = greedy_decode(model, src, max_len=10)
        mine = greedy_batch(model, src, 10)
        assert [[int(i) for i in m] for m in mine] == want, (
            "on the trained model your outputs differ from greedy_decode's"
        )


# ---------------------------------------------------------------- lesson 09: training


@_exercise("Exercise 1 (the warm-up schedule)")
def check_09_1(noam_lr: Callable) -> None:
    from minitransformer import optim

    for d_model, warmup in [(512, 4000), (64, 100), (1024, 4000)]:
        for step in [1, 2, 10, warmup - 1, warmup, warmup + 1, 5 * warmup, 100_000]:
            expected = optim.NoamSchedule.rate(step, d_model, warmup)
            mine = noam_lr(step, d_model, warmup)
            assert np.isclose(mine, expected, rtol=1e-9), (
                f"noam_lr({step}, {d_model}, {warmup}) = {mine}, expected {expected}. Hint: "
                "the formula of section 2; which branch is smaller before and after warm-up?"
            )


@_exercise("Exercise 2 (the label-smoothing floor)")
def check_09_2(smoothing_floor: Callable) -> None:
    rng = _rng(17)
    for V, eps in [(14, 0.1), (596, 0.1), (37000, 0.1), (10, 0.3), (7, 0.05), (9, 0.0)]:
        q = np.full(V, eps / V)
        q[5] += 1 - eps
        with np.errstate(divide="ignore"):
            logq = np.log(q)[None]
        logq = np.maximum(logq, -1e4)  # eps = 0: a very confident, finite row
        best = F.cross_entropy(
            mt.tensor(logq, dtype="float64"), np.array([5]), label_smoothing=eps
        ).item()
        worse = F.cross_entropy(
            mt.tensor(logq + rng.normal(0, 0.1, (1, V)), dtype="float64"),
            np.array([5]),
            label_smoothing=eps,
        ).item()
        mine = float(smoothing_floor(V, eps))
        assert np.isclose(mine, best, rtol=1e-6, atol=1e-9), (
            f"smoothing_floor({V}, {eps}) = {mine}, but the loss at p = q is {best:.6f}. "
            "Hint: the cross-entropy of q against itself has a name."
        )
        assert worse >= best - 1e-12


@_exercise("Exercise 3 (Adam's first step)")
def check_09_3(adam_first_update: Callable) -> None:
    from minitransformer import optim

    rng = _rng(18)
    for scale in (1e-7, 1e-3, 1.0, 1e4):
        g = scale * rng.normal(size=(5, 2))
        for betas in [(0.9, 0.98), (0.5, 0.9)]:
            p = mt.nn.Parameter(np.zeros((5, 2)), dtype="float64")
            o = optim.Adam([p], lr=0.02, betas=betas)
            p.grad = g.copy()
            o.step()
            assert np.allclose(adam_first_update(g, 0.02), p.numpy(), rtol=1e-7, atol=1e-12), (
                "not what Adam does on its first step. Hint: write out m, v and their bias "
                "corrections for t = 1; the betas cancel."
            )


# ---------------------------------------------------------------- lesson 10: decoding, BLEU


_SENTENCES = [
    ("the cat is on the mat", "the cat sat on the mat"),
    ("a small dog reads a book", "the small dog reads the book"),
    ("the the the the the the the", "the cat is on the mat"),
    ("we do not eat the red bread", "we do not eat red bread"),
    ("bread", "the teacher eats bread"),
    ("one two three four five", "one two three four five six"),
]


@_exercise("Exercise 1 (modified n-gram precision)")
def check_10_1(modified_precision: Callable, pairs: list[tuple[str, str]] = ()) -> None:
    import sacrebleu

    h, r = "the the the the the the the".split(), "the cat is on the mat".split()
    assert tuple(modified_precision(h, r, 1)) == (2, 7), (
        f"got {modified_precision(h, r, 1)} for the classic example; expected (2, 7). "
        "Hint: a hypothesis n-gram can be matched at most as often as it occurs in the reference."
    )
    for hyp, ref in [*_SENTENCES, *pairs]:
        sb = sacrebleu.corpus_bleu([hyp], [[ref]])
        for n in range(1, 5):
            mine = tuple(modified_precision(hyp.split(), ref.split(), n))
            assert mine == (sb.counts[n - 1], sb.totals[n - 1]), (
                f"n = {n}: you give {mine}, sacreBLEU counts "
                f"{(sb.counts[n - 1], sb.totals[n - 1])} for\n  hyp: {hyp}\n  ref: {ref}"
            )


@_exercise("Exercise 2 (brevity penalty)")
def check_10_2(brevity_penalty: Callable) -> None:
    import sacrebleu

    assert brevity_penalty(10, 10) == 1.0 and brevity_penalty(12, 10) == 1.0, (
        "a hypothesis at least as long as the reference is not penalised"
    )
    refs = [r for _, r in _SENTENCES]
    for cut in (1, 2, 3):
        short = [" ".join(x.split()[:-cut]) for x in refs]
        sb = sacrebleu.corpus_bleu(short, [refs])
        mine = brevity_penalty(sb.sys_len, sb.ref_len)
        assert np.isclose(mine, sb.bp), (
            f"BP({sb.sys_len}, {sb.ref_len}) should be {sb.bp:.4f}, you give {mine}; hint: "
            "an exponential of the length ratio, 1 at equal lengths"
        )


@_exercise("Exercise 3 (log-probability of an output)")
def check_10_3(sequence_logprob: Callable) -> None:
    rng = _rng(19)
    eos = 2
    for T, V, scale in [(4, 7, 1.0), (6, 11, 3.0), (1, 5, 1.0), (5, 9, 1000.0)]:
        logits = rng.normal(size=(T, V)) * scale
        out_ids = [int(i) for i in rng.integers(3, V, size=T - 1)]
        logp = F.log_softmax(mt.tensor(logits, dtype="float64"), axis=-1).numpy()
        expected = float(logp[np.arange(T), [*out_ids, eos]].sum())
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                mine = float(sequence_logprob(logits, out_ids, eos))
            except RuntimeWarning as w:
                raise AssertionError(f"NumPy warned: {w}; hint: stabilise the exponent") from None
        assert np.isclose(mine, expected, atol=1e-6), (
            f"T={T}, V={V}: you give {mine:.4f}, expected {expected:.4f}. Hint: one log-"
            "probability per row, at that row's target; and the output ends with EOS."
        )


# ---------------------------------------------------------------- lesson 11: speed


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


# ---------------------------------------------------------------- lesson 12: why attention


@_exercise("Exercise 1 (path length through a recurrent encoder-decoder)")
def check_12_1(rnn_path: Callable) -> None:
    for S in (1, 4, 9, 16):
        for t in range(S):
            j = S - 1 - t  # the reverse task: output t needs source token S - 1 - t
            got = rnn_path(S, j, t)
            assert got == 2 * t + 1, (
                f"rnn_path({S}, {j}, {t}) = {got}, but on the reverse task the distance plotted "
                f"in section 5 is {2 * t + 1}. Hint: count the encoder steps that still follow "
                "x_j, then the decoder steps up to and including the one that emits output t."
            )
        for j in range(S):
            got = rnn_path(S, j, j)
            assert got == S, (
                f"copy task: rnn_path({S}, {j}, {j}) = {got}; hint: on the copy task every "
                "token is equally far from the output that repeats it"
            )
    rng = _rng(22)
    for _ in range(20):
        S = int(rng.integers(2, 40))
        j, t = int(rng.integers(0, S)), int(rng.integers(0, 50))
        expected = (S - 1 - j) + (t + 1)
        got = rnn_path(S, j, t)
        assert got == expected, (
            f"rnn_path({S}, {j}, {t}) = {got}, expected {expected}; hint: the target may be "
            "longer than the source, and the two counts add up"
        )


@_exercise("Exercise 2 (layers of a dilated convolution stack)")
def check_12_2(dilated_layers: Callable, max_path_length: Callable | None = None) -> None:
    """Against exact integer counts (and, given the lesson's BFS, against it at k = 3)."""

    def fewest(n: int, k: int) -> int:
        L, reach = 0, 1
        while reach < n:
            L, reach = L + 1, reach * k
        return L

    cases = [(n, k) for k in (2, 3, 5, 10) for n in (2, 3, 4, 8, 9, 10, 26, 27, 28, 64, 100)]
    cases += [(125, 5), (126, 5), (243, 3), (1000, 10), (1001, 10), (2**20, 2), (2**20 + 1, 2)]
    for n, k in cases:
        got = dilated_layers(n, k)
        assert got == fewest(n, k), (
            f"dilated_layers({n}, {k}) = {got}, expected {fewest(n, k)}. Hint: how many "
            "positions can L layers of the stack see? Find the smallest L that covers n, in "
            "integers (a floating-point log of an exact power can land just above it)."
        )
    if max_path_length is not None:
        for n in (4, 8, 16, 32, 64):
            bfs = max_path_length(n, "convolution (dilated)", k=3)
            assert dilated_layers(n, 3) == bfs, f"n={n}: the BFS says {bfs}"


@_exercise("Exercise 3 (additive attention scores)")
def check_12_3(additive_scores: Callable) -> None:
    """Against the library's AdditiveAttention.scores (float64), one query at a time."""
    from minitransformer.nn.recurrent import AdditiveAttention

    rng = _rng(23)
    for Hq, Hk, A, S in [(3, 4, 5, 6), (8, 8, 16, 1), (2, 5, 3, 9)]:
        att = AdditiveAttention(Hq, Hk, A, generator=mt.backend.Generator(int(S), "cpu"))
        att = att.to(dtype="float64")
        att.w_k.bias.data[...] = rng.normal(size=A)  # non-zero, so forgetting it shows
        W_q, W_k = att.w_q.weight.numpy(), att.w_k.weight.numpy()
        b, v = att.w_k.bias.numpy(), att.v.weight.numpy()[:, 0]
        q = rng.normal(size=Hq) * 2
        m = rng.normal(size=(S, Hk)) * 2
        memory = mt.tensor(m[None], dtype="float64")
        expected = att.scores(mt.tensor(q[None], dtype="float64"), att.keys(memory)).numpy()[0]
        got = np.asarray(additive_scores(q, m, W_q, W_k, b, v), dtype=np.float64)
        assert got.shape == (S,), (
            f"one score per encoder state: expected shape ({S},), got {got.shape}"
        )
        assert np.allclose(got, expected, atol=1e-10), (
            f"Hq={Hq}, Hk={Hk}, A={A}, S={S}: you give {np.round(got, 4)}, the library "
            f"{np.round(expected, 4)}. Hint: go through the score of section 3 term by term: "
            "which projection carries the bias, where the squashing sits, and that these are "
            "scores, before any softmax."
        )


# ---------------------------------------------------------------- lesson 13: ablations


@_exercise("Exercise 1 (dropout's variance)")
def check_13_1(dropout_variance: Callable) -> None:
    for x, p in [(1.0, 0.1), (2.0, 0.5), (-3.0, 0.3), (0.5, 0.0), (-1.5, 0.9)]:
        keep = 1 - p
        expected = x**2 / keep - x**2  # E[y^2] - E[y]^2
        got = float(dropout_variance(x, p))
        draws = F.dropout(mt.tensor(np.full(20_000, x), dtype="float64"), p).numpy()
        assert np.isclose(got, expected, rtol=1e-9, atol=1e-12), (
            f"dropout_variance({x}, {p}) = {got:.4f}, but 20,000 draws of the library's "
            f"dropout give {draws.var():.4f}. Hint: Var[y] = E[y²] − E[y]²; what values does "
            "y take, and how often?"
        )


def _dropout_calls(run: Callable) -> int:
    """How many times a Dropout layer with p > 0 acts while ``run()`` runs."""
    from minitransformer.nn import layers

    calls = []
    original = layers.Dropout.forward

    def counting(self, x, _orig=original):
        if self.p > 0:
            calls.append(1)
        return _orig(self, x)

    layers.Dropout.forward = counting
    try:
        run()
    finally:
        layers.Dropout.forward = original
    return len(calls)


@_exercise("Exercise 2 (counting dropout layers)")
def check_13_2(n_dropout_places: Callable) -> None:
    """Counts the library's dropout calls in encode() of an N_enc-layer model and in
    decode() of an N_dec-layer one."""
    rng = _rng(25)
    src, tgt = rng.integers(3, 20, (1, 4)), rng.integers(3, 20, (1, 3))
    for N_enc, N_dec in [(1, 1), (2, 3), (3, 1), (6, 6)]:
        counts = []
        for N, part in ((N_enc, "encode"), (N_dec, "decode")):
            cfg = mt.TransformerConfig(
                src_vocab=20, tgt_vocab=20, d_model=8, h=2, N=N, d_ff=16, dropout=0.1
            )
            m = mt.nn.Transformer(cfg, seed=0)
            if part == "encode":
                run = functools.partial(m.encode, src)
            else:
                run = functools.partial(m.decode, tgt, m.encode(src), src)
            counts.append(_dropout_calls(run))
        got = n_dropout_places(N_enc, N_dec)
        assert got == sum(counts), (
            f"n_dropout_places({N_enc}, {N_dec}) = {got}, but one forward pass applies dropout "
            f"{sum(counts)} times ({counts[0]} in the encoder, {counts[1]} in the decoder). "
            "Hint: dropout sits on every sub-layer's output before the residual add (how many "
            "sub-layers has each kind of layer?), and once more on each stack's input."
        )


_FIXED_BY_THE_DATA = ("src_vocab", "tgt_vocab", "max_len", "pad_id", "bos_id", "eos_id", "dtype")


@_exercise("Exercise 3 (your own ablation)")
def check_13_3(my_variant: Callable, settings: Any = None) -> None:
    """``my_variant()`` must return an ``ablate.Variant`` that changes exactly one thing of
    the base of ``settings`` (default: AblationSettings()) and builds; nothing is trained."""
    import dataclasses

    from minitransformer import ablate
    from minitransformer.errors import ConfigError

    s = settings if settings is not None else ablate.AblationSettings()
    v = my_variant()
    assert isinstance(v, ablate.Variant), (
        f"return an ablate.Variant(name, change, model=..., train=..., ...), not {type(v).__name__}"
    )
    fields = {f.name for f in dataclasses.fields(mt.TransformerConfig)}
    base_cfg = mt.TransformerConfig.preset("tiny", src_vocab=20, tgt_vocab=20, **s.model)
    changes = []
    for key, value in v.model.items():
        assert key in fields, (
            f"model={{{key!r}: ...}}: TransformerConfig has no field {key!r}; see its docstring"
        )
        assert key not in ("dropout", "label_smoothing"), (
            f"{key} is a training setting here: put it in train={{{key!r}: ...}}, not model="
        )
        assert key not in _FIXED_BY_THE_DATA, f"{key} is fixed by the data, not an ablation"
        if value != getattr(base_cfg, key):
            changes.append(f"model {key}={value!r}")
    base_train = {"dropout": s.dropout, "label_smoothing": s.label_smoothing}
    for key, value in v.train.items():
        assert key in base_train, f"train= takes dropout and label_smoothing, not {key!r}"
        if value != base_train[key]:
            changes.append(f"train {key}={value!r}")
    if not v.warmup:
        changes.append("no warm-up")
    if v.random_positions:
        assert v.model.get("learned_positions") is True, (
            "random_positions=True redraws a learned position table: it needs "
            "model={'learned_positions': True} (the two together are one change)"
        )
        changes = [c for c in changes if not c.startswith("model learned_positions")]
        changes.append("learned positions, random init")
    assert changes, (
        "your variant trains the same model as the base: change one size, switch or "
        "training setting to a value the base does not use"
    )
    assert len(changes) == 1, (
        f"your variant changes {len(changes)} things ({'; '.join(changes)}): an ablation row "
        "changes one, so that a difference in the results has one cause"
    )
    try:
        cfg = mt.TransformerConfig.preset("tiny", src_vocab=20, tgt_vocab=20,
                                          **{**s.model, **v.model})  # fmt: skip
        mt.nn.Transformer(cfg, seed=0)
        for key, value in v.train.items():
            assert 0 <= value < 1, f"train {key}={value!r}: must be in [0, 1)"
    except ConfigError as e:
        raise AssertionError(f"the variant does not build: {e}") from None


# ---------------------------------------------------------------- lesson 14: data parallelism


@_exercise("Exercise 1 (combining the ranks' gradients)")
def check_14_1(combine_shard_grads: Callable) -> None:
    """Shards of a padded batch, down to one row per rank: the combination of the shards'
    mean-loss gradients must equal the whole batch's gradient (library cross_entropy)."""
    rng = _rng(26)
    V, D = 7, 5
    lengths = np.array([5, 1, 3, 4, 2, 6, 1])  # very uneven shards
    B, T = len(lengths), int(lengths.max())
    feats = rng.normal(size=(B, T, D))
    target = rng.integers(1, V, (B, T))
    target[np.arange(T)[None, :] >= lengths[:, None]] = 0  # padding
    W0 = rng.normal(size=(D, V))

    def grad(rows: np.ndarray) -> np.ndarray:
        W = mt.tensor(W0, dtype="float64", requires_grad=True)
        logits = F.matmul(mt.tensor(feats[rows], dtype="float64"), W)
        F.cross_entropy(logits, target[rows], ignore_index=0).backward()
        return W.grad

    whole = grad(np.arange(B))
    for N in (1, 2, 3, B):
        shards = np.array_split(np.arange(B), N)
        grads = [grad(rows) for rows in shards]
        tokens = [int((target[rows] != 0).sum()) for rows in shards]
        got = np.asarray(combine_shard_grads(grads, tokens), dtype=np.float64)
        assert got.shape == whole.shape, f"expected one gradient of shape {whole.shape}"
        assert np.allclose(got, whole, atol=1e-12), (
            f"N={N} ranks with {tokens} tokens: max error {np.abs(got - whole).max():.2e}. "
            "Hint: each shard's gradient is of its own *mean*; the whole batch's loss is the "
            "mean over all its tokens. How much of that mean does each shard hold?"
        )


@_exercise("Exercise 2 (messages of the ring all-reduce)")
def check_14_2(ring_allreduce_counted: Callable) -> None:
    """Runs the learner's simulated ring: every buffer must end as the sum, and each rank
    must report 2(N-1) messages; an uneven buffer size and N = 1 included."""
    rng = _rng(27)
    for N, size in [(1, 10), (2, 8), (3, 10), (5, 17), (8, 1000)]:
        bufs = [rng.normal(size=size) for _ in range(N)]
        expected = np.sum(bufs, axis=0)
        got = ring_allreduce_counted(bufs)
        assert all(np.allclose(b, expected) for b in bufs), (
            f"N={N}: after the all-reduce every rank's buffer must hold the sum (in place)"
        )
        got = [int(c) for c in np.atleast_1d(got)]
        assert len(got) == N, f"N={N}: return one message count per rank, got {len(got)}"
        assert got == [2 * (N - 1)] * N, (
            f"N={N}: you count {got} messages per rank. Hint: count one per chunk a rank sends, "
            "in both phases; the bytes are not the messages."
        )


@_exercise("Exercise 3 (where latency and bandwidth cost the same)")
def check_14_3(equal_terms_size: Callable) -> None:
    for N, alpha, BW in [(8, 5e-6, 12.5e9), (2, 2e-6, 5e9), (64, 1e-5, 25e9), (3, 1.0, 1.0)]:
        B = float(equal_terms_size(N, alpha, BW))
        latency, bandwidth = 2 * (N - 1) * alpha, 2 * (N - 1) / N * B / BW  # the terms of t_ring
        assert np.isclose(latency, bandwidth, rtol=1e-9), (
            f"N={N}, α={alpha}, BW={BW}: at B = {B:.4g} bytes the latency term is "
            f"{latency:.3g} s and the bandwidth term {bandwidth:.3g} s. Hint: write both terms "
            "of t_ring, set them equal and solve for B; the factor 2(N−1) is on both sides."
        )
