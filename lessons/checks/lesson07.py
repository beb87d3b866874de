"""Lesson 07 (positional encoding): the checks of its exercises.

- ``check_07_1``: Exercise 1 (wavelengths)
- ``check_07_2``: Exercise 2 (offset from two codes)
- ``check_07_3``: Exercise 3 (permutation equivariance)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _rng


def _wavelength_hint(lam: np.ndarray, D: int) -> str:
    """Where to look, for wavelengths that do not reproduce the table."""
    i = np.arange(D // 2)
    omega = 10000.0 ** (-2 * i / D)
    for other, hint in [
        (1 / omega, "one full turn of a pair is 2π radians, not 1"),
        (omega, "that is how fast pair i turns (radians per position); the wavelength is how "
                "many positions one turn takes"),
        (2 * np.pi * 10000.0 ** (i / D), "pair i holds columns 2i and 2i + 1: check the "
                                         "exponent of its frequency"),
        (2 * np.pi / omega[::-1], "pair 0 is the fastest one: the order is reversed"),
    ]:  # fmt: skip
        if np.allclose(lam, other):
            return hint
    return "sin(pos · ω_i) repeats when pos · ω_i has grown by a full turn"


@_exercise("Exercise 1 (wavelengths)")
def check_07_1(wavelengths: Callable) -> None:
    """sin(2π pos / λ_i) and cos(2π pos / λ_i) must reproduce columns 2i and 2i + 1 of the
    library's table, for three widths."""
    for D in (8, 64, 512):
        answer = wavelengths(D)
        lam = np.asarray(answer, dtype=float)
        assert lam.shape == (D // 2,), (
            f"one wavelength per pair: expected shape {(D // 2,)}, got {lam.shape}"
        )
        table = mt.nn.sinusoid_table(50, D)
        p = np.arange(50)[:, None]
        # the angle 2π·pos/λ (pos < 50) carries λ's relative rounding: wavelengths in float32
        # are right when sin and cos agree to about 2π·50·eps of float32
        float32 = np.asarray(answer).dtype == np.float32
        atol = 2 * np.pi * 50 * np.finfo(np.float32).eps if float32 else 1e-8
        ok = np.allclose(np.sin(2 * np.pi * p / lam), table[:, 0::2], atol=atol) and np.allclose(
            np.cos(2 * np.pi * p / lam), table[:, 1::2], atol=atol
        )
        assert ok, (
            f"D={D}: sin(2π pos / λ_i) does not reproduce column 2i of the table; hint: "
            f"{_wavelength_hint(lam, D)}"
        )


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
    gen = mt.backend.Generator(16)
    mha32 = mt.nn.MultiHeadAttention(D, h, generator=gen)  # float32, the library's default
    mha = mt.nn.MultiHeadAttention(D, h, generator=gen)
    enc = mt.nn.EncoderLayer(D, h, d_ff=32, generator=gen)
    pos = mt.nn.PositionalEncoding(D, 32)
    for module in (mha, enc, pos):
        module.to(dtype="float64")

    def attn(a, mask=None, layer=mha):
        t = mt.tensor(a)
        return layer(t, t, t, mask).numpy()

    x = _rng(16).standard_normal((2, T, D))
    x32 = x.astype(np.float32)
    perm = np.array([3, 0, 5, 1, 4, 2])
    weak = 1e-3 * mt.nn.sinusoid_table(T, D)  # a faint position signal: differences ~1e-3
    fainter = 1e-9 * mt.nn.sinusoid_table(T, D)  # far above float64's rounding, below float32's
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
        # a small but real dependence on position, far above rounding: a loose tolerance
        # (0.1, 0.01) calls these equivariant
        (lambda a: attn(a + weak), False, "self-attention with a faint PE (float64)"),
        (lambda a: a + weak, False, "adding a faint PE (float64)"),
        # 1e-9 is still millions of times float64's rounding: a fixed tolerance of 1e-6 (right
        # for float32) calls these equivariant
        (lambda a: attn(a + fainter), False, "self-attention with a PE of 1e-9 (float64)"),
        (lambda a: a + fainter, False, "adding a PE of 1e-9 (float64)"),
    ]
    for f, expected, name in cases:
        got = is_permutation_equivariant(f, x, perm)
        hint = (
            "a difference of 1e-9 is far above the rounding of float64 (np.finfo(np.float64)): "
            "a tolerance fixed for every dtype is too loose here"
            if "1e-9" in name
            else "compare the outputs row by row, not a summary of them, with a tolerance the "
            "size of the rounding of x's dtype"
        )
        assert got == expected, f"{name}: expected {expected}, got {got}; hint: {hint}"
    cases32 = [  # float32: rounding differences of ~1e-7 must not count, ~1e-3 must
        (lambda a: attn(a, layer=mha32), True, "self-attention without PE (float32)"),
        (
            lambda a: attn(a + weak.astype(np.float32), layer=mha32),
            False,
            "self-attention with a faint PE (float32)",
        ),
    ]
    for f, expected, name in cases32:
        got = is_permutation_equivariant(f, x32, perm)
        assert got == expected, (
            f"{name}: expected {expected}, got {got}; hint: float32 keeps about 7 digits "
            "(np.finfo(np.float32)); is your tolerance suited to the dtype of the outputs?"
        )
    assert is_permutation_equivariant(lambda a: a[:, ::-1], x, np.arange(T)), (
        "the identity permutation changes nothing: any f passes"
    )
