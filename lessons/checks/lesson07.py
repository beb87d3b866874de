"""Lesson 07 (positional encoding): the checks of its exercises.

- ``check_07_1``: Exercise 1 (the fastest pair that does not wrap)
- ``check_07_2``: Exercise 2 (offset from two codes)
- ``check_07_3``: Exercise 3 (permutation equivariance)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _rng, _whole_number

# (d_model, length): every case has one pair that is the answer or none (None); each
# usual mistake below gives another answer on at least one of them
SAFE_PAIR_CASES = [
    (8, 4),
    (8, 5),
    (16, 12),
    (8, 32),
    (8, 5000),
    (64, 1000),
    (512, 2048),
    (16, 1),
    (16, 2),
]


def _omega(d_model: int, exponent: float = 2.0) -> np.ndarray:
    """Every pair's angular frequency, 10000^(-exponent·i/d_model) (the paper: exponent 2)."""
    return 10000.0 ** (-exponent * np.arange(d_model // 2) / d_model)


def _first_pair(omega: np.ndarray, largest_offset: float, turn: float = np.pi) -> int | None:
    """The first pair whose angle turns by less than ``turn`` over ``largest_offset``."""
    safe = np.nonzero(largest_offset * omega < turn)[0]
    return int(safe[0]) if safe.size else None


def _safe_pair_hint(mine: int | None, d_model: int, length: int) -> str:
    """Where to look, for a pair index that is not the fastest safe one."""
    omega, slowest = _omega(d_model), d_model // 2 - 1
    right = _first_pair(omega, length - 1)
    mistakes = [
        (_first_pair(omega, length - 1, turn=2 * np.pi),
         "a turn of more than half a circle reads as a smaller turn the other way: offsets may "
         "be negative, so which turns can be told apart?"),
        (_first_pair(omega, length),
         f"positions 0 .. {length - 1} are at most {length - 1} apart"),
        (_first_pair(_omega(d_model, exponent=1.0), length - 1),
         "pair i turns at ω_i = 10000^(-2i/d_model): check the exponent"),
        (None if right is None else 2 * right,
         "return the pair's index i (it holds columns 2i and 2i + 1), not a column"),
        (None if right is None else right - 1, "that pair wraps: its largest turn is too big"),
    ]  # fmt: skip
    if right is None:
        return "no pair of this width turns slowly enough for this length: return None"
    if mine is None:
        return f"pair {slowest}, the slowest, turns slowly enough here: a pair exists"
    if mine == slowest:
        return (
            "the slowest pair never wraps, but the exercise asks for the fastest pair that "
            "does not: it reads an offset most precisely"
        )
    for other, hint in mistakes:
        if other is not None and mine == other:
            return hint
    return (
        "over an offset k pair i turns by k·ω_i: find the first pair whose turn over the "
        "largest offset can still be read back"
    )


def _pair_or_none(got: object, where: str) -> int | None:
    """The answer as a pair index (an int) or None."""
    if got is None:
        return None
    return _whole_number(got, where, "a pair index (or None)")


@_exercise("Exercise 1 (the fastest pair that does not wrap)")
def check_07_1(fastest_safe_pair: Callable) -> None:
    """Against the first pair i with (length - 1)·ω_i < π, or None, for several widths and
    lengths."""
    for d_model, length in SAFE_PAIR_CASES:
        where = f"fastest_safe_pair({d_model}, {length})"
        mine = _pair_or_none(fastest_safe_pair(d_model, length), where)
        right = _first_pair(_omega(d_model), length - 1)
        assert mine == right, (
            f"{where}: expected {right}, got {mine}; hint: {_safe_pair_hint(mine, d_model, length)}"
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
