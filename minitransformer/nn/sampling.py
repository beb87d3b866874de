"""Choosing a language model's next token from its logits: greedy, temperature, top-k.

For one sequence's logits z (V,) and a temperature τ > 0:

    p_i = softmax(z / τ)_i = exp(z_i / τ) / Σ_j exp(z_j / τ)

τ = 1 samples the model's own distribution; τ < 1 sharpens it (τ → 0 puts all the mass on
the argmax: greedy, which ``temperature=0`` means exactly); τ > 1 flattens it. top-k keeps
the k largest logits (z_i = -∞ for every other i) before the softmax, so a rare token the
model gives a little mass is never drawn.

The softmax is computed as exp((z_i - max z) / τ) / Σ_j exp((z_j - max z) / τ): the same
numbers, but the shift comes before the division, so every exponent is at most 0 whatever
τ is. For a positive τ so small that (z_i - max z) / τ overflows (about 1e-308 and below for
logits a unit apart, the subnormal floats among them), that exponent is -∞, every token but
the largest gets 0 and the probabilities are greedy's: the limit τ → 0, never NaN, whatever
the logits' dtype (they are read in float64).

A draw is an inverse transform: u ~ U[0, 1), the token is the first i with
Σ_{j ≤ i} p_j > u. Host NumPy in float64, the logits of one position per row: (B, V) ->
(B,) ids, no loop over the rows but for each row's own u.

Seeds: generation gives each row (each prompt, each sample of it) its own generator,
``row_generator(seed, i)``, derived from the seed and the row's index alone, so the texts of
one seed do not depend on how the rows are batched.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import checks
from ..errors import ArgumentError


def temperature_softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    """logits (..., V) -> softmax(logits / τ) (..., V), stable for every τ > 0: the row
    maximum is subtracted before the division (exp of at most 0: no overflow), and an
    exponent that overflows to -∞ (a tiny τ) gives 0, the limit."""
    z = np.asarray(logits, dtype=np.float64)
    with np.errstate(over="ignore"):  # an exponent below -1.8e308 is -inf: exp gives 0
        z = z - z.max(axis=-1, keepdims=True)  # <= 0; -inf (top-k's) stays -inf
        z = z / temperature  # (z - max) / tiny τ -> -inf but for the argmax's 0
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def next_tokens(
    logits: np.ndarray,
    temperature: float,
    top_k: int | None,
    rng: np.random.Generator | Sequence[np.random.Generator],
) -> np.ndarray:
    """logits (B, V) -> the next token of each row (B,) int64: the argmax when
    ``temperature`` is 0, else a draw from softmax(logits / τ) over the ``top_k`` largest
    logits (all when None). ``rng``: one generator for all rows, or one per row (what
    generation passes, so that a row's draws do not depend on the other rows). Arguments
    checked by the caller (``check_sampling``)."""
    z = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return z.argmax(axis=-1).astype(np.int64)
    if top_k is not None and top_k < z.shape[-1]:
        kth = np.partition(z, -top_k, axis=-1)[:, -top_k, None]  # (B, 1) the k-th largest
        z = np.where(z >= kth, z, -np.inf)  # ties at the k-th value all stay
    p = temperature_softmax(z, temperature)
    if isinstance(rng, np.random.Generator):
        u = rng.random((z.shape[0], 1))  # (B, 1) in [0, 1)
    else:
        u = np.array([[row_rng.random()] for row_rng in rng])  # (B, 1): each row's own
    ids = (np.cumsum(p, axis=-1) <= u).sum(axis=-1)  # first i with cumsum > u
    return np.minimum(ids, z.shape[-1] - 1).astype(np.int64)  # u above a rounded total


def row_generator(seed: int, row: int) -> np.random.Generator:
    """The generator of row ``row`` of a generation seeded by ``seed``: NumPy's
    ``SeedSequence(seed, spawn_key=(row,))``, the same for that row in any batch."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(row,)))


def fresh_seed() -> int:
    """A seed from the operating system's entropy (128 bits): what ``seed=None`` means."""
    return int(np.random.SeedSequence().entropy)


def check_sampling(
    where: str, temperature: float, top_k: int | None, seed: int | None, vocab: int
) -> tuple[float, int | None, int]:
    """The sampling arguments checked where they enter: (temperature, top_k, seed), the
    seed drawn from the operating system when None (``fresh_seed``)."""
    temperature = checks.real(
        where, "temperature", temperature, 0.0, fix="0 is greedy, 1 the model's distribution"
    )
    if top_k is not None:
        top_k = checks.positive_int(where, "top_k", top_k, "None keeps every token")
        if top_k > vocab:
            raise ArgumentError(
                f"{where}: top_k = {top_k} is more than the vocabulary's {vocab} tokens; "
                f"give at most {vocab}, or None to keep every token"
            )
    if seed is None:
        return temperature, top_k, fresh_seed()
    seed = checks.non_negative_int(where, "seed", seed, "e.g. seed=0, or None")
    return temperature, top_k, seed
