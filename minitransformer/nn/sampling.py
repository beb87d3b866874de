"""Choosing a language model's next token from its logits: greedy, temperature, top-k.

For one sequence's logits z (V,) and a temperature τ > 0:

    p_i = softmax(z / τ)_i = exp(z_i / τ) / Σ_j exp(z_j / τ)

τ = 1 samples the model's own distribution; τ < 1 sharpens it (τ → 0 puts all the mass on
the argmax: greedy, which ``temperature=0`` means exactly); τ > 1 flattens it. top-k keeps
the k largest logits (z_i = -∞ for every other i) before the softmax, so a rare token the
model gives a little mass is never drawn.

A draw is an inverse transform: u ~ U[0, 1), the token is the first i with
Σ_{j ≤ i} p_j > u. Host NumPy in float64, the logits of one position per row: (B, V) ->
(B,) ids, no loop over the rows.
"""

from __future__ import annotations

import numpy as np

from .. import checks
from ..errors import ArgumentError


def temperature_softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    """logits (..., V) -> softmax(logits / τ) (..., V), stable (the row maximum subtracted
    first); τ > 0."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=-1, keepdims=True)  # exp of at most 0: no overflow; -inf gives 0
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def next_tokens(
    logits: np.ndarray, temperature: float, top_k: int | None, rng: np.random.Generator
) -> np.ndarray:
    """logits (B, V) -> the next token of each row (B,) int64: the argmax when
    ``temperature`` is 0, else a draw from softmax(logits / τ) over the ``top_k`` largest
    logits (all when None). Arguments checked by the caller (``check_sampling``)."""
    z = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return z.argmax(axis=-1).astype(np.int64)
    if top_k is not None and top_k < z.shape[-1]:
        kth = np.partition(z, -top_k, axis=-1)[:, -top_k, None]  # (B, 1) the k-th largest
        z = np.where(z >= kth, z, -np.inf)  # ties at the k-th value all stay
    p = temperature_softmax(z, temperature)
    u = rng.random((z.shape[0], 1))  # (B, 1) in [0, 1)
    ids = (np.cumsum(p, axis=-1) <= u).sum(axis=-1)  # first i with cumsum > u
    return np.minimum(ids, z.shape[-1] - 1).astype(np.int64)  # u above a rounded total


def check_sampling(
    where: str, temperature: float, top_k: int | None, seed: int | None, vocab: int
) -> tuple[float, int | None, np.random.Generator]:
    """The sampling arguments checked where they enter: (temperature, top_k, a generator
    seeded by ``seed``, or by the operating system when None)."""
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
    if seed is not None:
        seed = checks.non_negative_int(where, "seed", seed, "e.g. seed=0, or None")
    return temperature, top_k, np.random.default_rng(seed)
