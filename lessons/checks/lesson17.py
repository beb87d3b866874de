"""Lesson 17 (the substrate: the decoder-only language model): the checks of its exercises.

- ``check_17_1``: Exercise 1 (the sampling distribution: temperature and top-k)
- ``check_17_2``: Exercise 2 (the parameters saved by dropping the encoder)
- ``check_17_3``: Exercise 3 (the causal mask of a cached step)

The oracles: NumPy float64 arithmetic written here (exercise 1: the softmax of the logits
divided by τ over the top-k logits; exercise 3: key j <= query position), and the library's
``TransformerConfig.num_parameters`` of an encoder-decoder and a decoder-only config of the
same sizes (exercise 2). An answer that calls into the library fails: each exercise is what
one of its functions computes. Answers may be lists, NumPy arrays of any float or int dtype, or
library tensors; a right answer in float32 passes. A wrong or malformed answer (a string, a
wrong shape, a function that raises) fails with an AssertionError and a hint, never with
another exception.

See the package docstring (``checks/__init__.py``, which re-exports these) for what a check
does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._shared import _exercise, _library_calls, _rng


def _callable(answer: Any, name: str) -> None:
    assert callable(answer), (
        f"pass your function {name} itself (got {type(answer).__name__}): write "
        f"`def {name}(...)` in the exercise cell and pass its name"
    )


def _call(fn: Callable, where: str, *args: Any) -> Any:
    """fn(*args); any exception but the placeholder's becomes an AssertionError naming it
    (its traceback stays attached), and so does a call into the library: each exercise asks
    for what one of the library's functions computes (_shared._library_calls)."""
    try:
        result, called = _library_calls(fn, *args)
    except NotImplementedError:
        raise
    except Exception as err:
        raise AssertionError(f"{where} raised {type(err).__name__}: {err}") from err
    assert not called, (
        f"{where} calls the library ({', '.join(sorted(called))}): this exercise asks you to "
        "write that computation yourself; hint: NumPy and the arithmetic of this lesson are "
        "all it needs"
    )
    return result


def _as_array(got: Any, where: str) -> np.ndarray:
    """A NumPy array of a list, a NumPy array or a library tensor (``.numpy()``)."""
    if hasattr(got, "numpy") and callable(got.numpy):
        try:
            got = got.numpy()
        except Exception as err:
            raise AssertionError(f"{where}: {type(got).__name__}.numpy() failed: {err}") from err
    if got is None or isinstance(got, str | bytes):
        raise AssertionError(f"{where} returned {got!r}: return an array")
    try:
        arr = np.asarray(got)
    except (TypeError, ValueError) as err:
        raise AssertionError(
            f"{where} returned {type(got).__name__}, which is not an array (rows of "
            f"unequal length?): {err}"
        ) from err
    assert arr.dtype.kind in "biuf", (
        f"{where} returned an array of {arr.dtype} ({type(got).__name__}): return numbers"
    )
    return arr


# ------------------------------------------------- exercise 1: the sampling distribution
def _reference_probs(logits: np.ndarray, temperature: float, top_k: int | None) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64) / temperature
    if top_k is not None:
        kth = np.sort(z, axis=-1)[..., -top_k, None]  # the k-th largest (no ties here)
        z = np.where(z >= kth, z, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _plain_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _sampling_cases() -> list[tuple[str, np.ndarray, float, int | None]]:
    """(what, logits, τ, top_k): ordinary rows first, then the extremes."""
    rng = _rng(171)
    with_removed = rng.normal(size=(3, 10))
    with_removed[:, [1, 4, 7]] = -np.inf  # tokens an earlier top-k removed
    return [
        ("ordinary logits", rng.normal(size=7), 1.0, None),
        ("ordinary logits", rng.normal(size=(4, 12)) * 3, 0.5, None),
        ("ordinary logits", rng.normal(size=(2, 3, 16)), 2.0, None),
        ("ordinary logits", rng.normal(size=(5, 9)) * 2, 0.7, 3),
        ("ordinary logits", rng.normal(size=(5, 9)), 1.3, 1),
        ("ordinary logits", rng.normal(size=(2, 6)), 0.9, 6),  # k = V: every token kept
        ("logits of about ±1000", rng.normal(size=(3, 50)) * 1000, 1.0, None),
        ("logits of about -5000", rng.normal(size=(2, 20)) - 5000, 1.0, None),
        ("rows at +1000 and -1000", rng.normal(size=(2, 15)) + [[1000], [-1000]], 1.0, None),
        ("a temperature of 0.01", rng.normal(size=(2, 20)), 0.01, None),
        ("a temperature of 100", rng.normal(size=(2, 20)) * 1e-3, 100.0, None),
        ("logits of about ±1000", rng.normal(size=(3, 30)) * 1000, 0.5, 5),
        ("some logits -inf", with_removed, 0.8, None),
    ]


def _probs_hint(got: np.ndarray, want: np.ndarray, logits: np.ndarray, tau: float,
                top_k: int | None, what: str) -> str:  # fmt: skip
    """What is wrong with ``got`` (finite, the right shape), in words."""
    if not np.all(np.isfinite(got)):
        return (
            f"your answer holds NaN or inf for {what}: exp overflows above about 709 (and "
            "exp(-inf - (-inf)) is NaN). The softmax of a row does not change when the same "
            "number is subtracted from every logit of that row (each row its own number): "
            "lesson 03 shows which number to pick"
        )
    if np.any(got < 0):
        return (
            "your answer has negative entries: return probabilities (not logits or "
            "log-probabilities)"
        )
    z = logits / tau
    if top_k is not None:
        kept = (got > 0).sum(axis=-1)
        if np.any(kept > top_k):
            return (
                f"with top_k = {top_k} your rows give probability to up to {kept.max()} "
                f"tokens: only the {top_k} with the largest logits may be drawn"
            )
        if np.any((got > 0) & (want == 0)):
            return f"you keep {top_k} tokens per row, but not the {top_k} largest logits"
    sums = got.sum(axis=-1)
    if not np.allclose(sums, 1.0, atol=1e-4):
        if top_k is not None and np.allclose(got, _plain_softmax(z) * (want > 0), atol=1e-6):
            return (
                f"your rows sum to {sums.min():.3f}..{sums.max():.3f}, not 1: the kept "
                "tokens' probabilities must be renormalised among themselves"
            )
        return (
            f"your rows sum to {sums.min():.4g}..{sums.max():.4g}, not 1: each row (the last "
            "axis, the vocabulary) must be one probability distribution"
        )
    if tau != 1.0 and top_k is None:
        z_times = np.asarray(logits, dtype=np.float64) * tau
        if np.allclose(got, _plain_softmax(z_times), atol=1e-6):
            return (
                f"at τ = {tau} your distribution is what τ = {1 / tau:g} should give: a "
                "temperature below 1 must sharpen the distribution (towards greedy), one "
                "above 1 flatten it"
            )
        if np.allclose(got, _plain_softmax(np.asarray(logits, dtype=np.float64)), atol=1e-6):
            return f"your answer does not change with the temperature (τ = {tau} here)"
    return (
        f"largest difference {np.abs(got - want).max():.3g} from the sampling distribution "
        f"for {what}, τ = {tau}, top_k = {top_k}"
    )


@_exercise("Exercise 1 (the sampling distribution)")
def check_17_1(sampling_probs: Callable) -> None:
    _callable(sampling_probs, "sampling_probs")
    for what, logits, tau, top_k in _sampling_cases():
        shape = tuple(logits.shape)
        where = f"sampling_probs(logits {shape}, {tau}, top_k={top_k})"
        args = (logits.copy(), tau) if top_k is None else (logits.copy(), tau, top_k)
        got = _as_array(_call(sampling_probs, where, *args), where)
        assert got.shape == shape, (
            f"{where}: shape {got.shape}, expected the logits' shape {shape} (one "
            "probability per token, for every row)"
        )
        want = _reference_probs(logits, tau, top_k)
        got64 = got.astype(np.float64)
        low = got.dtype.kind == "f" and np.finfo(got.dtype).eps > 1e-10  # float32 or less
        if low:  # float32 carries ~7 digits, and logits near -5000 lose ~4 when rounded to it
            rounded = _reference_probs(logits.astype(got.dtype), tau, top_k)
            oracles, rtol, atol = (want, rounded), 1e-3, 1e-7
        else:
            oracles, rtol, atol = (want,), 1e-8, 1e-12
        finite = bool(np.all(np.isfinite(got64)))
        if finite and any(np.allclose(got64, o, rtol=rtol, atol=atol) for o in oracles):
            continue
        hint = _probs_hint(got64, want, logits, tau, top_k, what)
        raise AssertionError(f"{where} is not the sampling distribution; hint: {hint}")


# ---------------------------------------------- exercise 2: what dropping the encoder saves
PARAM_SIZES = (  # (d_model, d_ff, N): the tiny and base presets, then sizes varied apart
    (64, 256, 2),
    (512, 2048, 6),
    (8, 16, 1),
    (16, 64, 3),
    (32, 32, 4),
    (24, 100, 5),
    (128, 512, 1),
    (40, 80, 2),
    (1024, 4096, 6),
    (12, 48, 7),
    (4, 4, 1),
    (96, 200, 3),
    (20, 8, 2),
    (36, 300, 9),
)
VOCAB = 1000  # any vocabulary: both models have one (tied) embedding matrix of it


def parameters_saved(d_model: int, d_ff: int, N: int) -> int:
    """The oracle: the difference of the two configs' num_parameters(), the paper's
    post-LN layout, one vocabulary, tied embeddings, sinusoidal positions."""
    from minitransformer.config import TransformerConfig

    h = 4 if d_model % 4 == 0 else 1
    sizes = dict(src_vocab=VOCAB, tgt_vocab=VOCAB, d_model=d_model, h=h, N=N, d_ff=d_ff)
    both = TransformerConfig(**sizes).num_parameters()
    lm = TransformerConfig(**sizes, decoder_only=True).num_parameters()
    return both - lm


def _whole_number(got: Any, where: str) -> int:
    """An int from an int, a NumPy integer, an integral float or a one-number array."""
    if hasattr(got, "numpy") and callable(got.numpy):
        raise AssertionError(
            f"{where} returned a {type(got).__name__}: return a whole number (a Python int)"
        )
    value = None
    if not isinstance(got, str | bytes | bool | type(None)):
        try:
            array = np.asarray(got)
        except (TypeError, ValueError):
            array = np.asarray(None)
        if array.ndim == 0 and array.dtype.kind in "iuf":
            value = array.item()
    whole = value is not None and np.isfinite(value) and value == round(value)
    assert whole, f"{where} returned {got!r}: return a whole number of parameters (an int)"
    return int(value)


_TERMS = (  # (the error's term, what in the model makes such a term)
    (
        "N·d_model²",
        "the (d_model × d_model) weight matrices: which attention layers go away with the "
        "encoder and the cross-attention, and how many projections does each have?",
    ),
    (
        "N·d_model·d_ff",
        "the feed-forward's two weight matrices (d_model → d_ff → d_model) in each encoder layer",
    ),
    ("N·d_ff", "a vector of d_ff numbers per layer: the feed-forward's first bias"),
    (
        "N·d_model",
        "the vectors of d_model numbers: the bias of each attention projection and of the "
        "feed-forward's second map, and each LayerNorm's γ and β (one LayerNorm per "
        "sublayer, post-LN)",
    ),
    ("N", "a constant per layer: no parameter is a single number per layer"),
)


def _basis(D: float, F: float, N: float) -> list[float]:
    per_layer = [N * D * D, N * D * F, N * F, N * D, N]
    once = [D * D, D * F, F, D, 1.0]  # terms that do not grow with N
    return per_layer + once


def _count_hint(errors: list[int]) -> str:
    """Which kinds of term the error (answer - expected, one per PARAM_SIZES) holds."""
    A = np.array([_basis(*map(float, s)) for s in PARAM_SIZES])
    e = np.asarray(errors, dtype=np.float64)
    coef, *_ = np.linalg.lstsq(A, e, rcond=None)
    fits = np.allclose(A @ np.round(coef * 2) / 2, e, rtol=0, atol=0.5)
    if not fits:
        return (
            "the error is not a sum of such terms (does your answer use each argument as "
            "given, and only these three?). Count one encoder layer and one cross-attention "
            "sublayer on paper first"
        )
    off = [i for i, c in enumerate(np.round(coef * 2) / 2) if c != 0]
    per_layer = [_TERMS[i] for i in off if i < len(_TERMS)]
    once = any(i >= len(_TERMS) for i in off)
    if len(per_layer) + once > 3:
        return (
            "nearly every term of your count is off: count one encoder layer and one "
            "cross-attention sublayer on paper first (weight matrices, biases, LayerNorms)"
        )
    parts = [f"in its {term} term: {why}" for term, why in per_layer]
    if once:
        parts.append(
            "in a part that does not grow with N: the one (tied) embedding matrix is in both "
            "models and the sinusoidal positions have no parameters, so all that goes away "
            "goes away once per layer"
        )
    return "your count is off " + "; and ".join(parts)


@_exercise("Exercise 2 (the parameters saved by dropping the encoder)")
def check_17_2(params_saved: Callable) -> None:
    _callable(params_saved, "params_saved")
    got, want = [], []
    for D, F, N in PARAM_SIZES:
        where = f"params_saved(d_model={D}, d_ff={F}, N={N})"
        got.append(_whole_number(_call(params_saved, where, D, F, N), where))
        want.append(parameters_saved(D, F, N))
    if got == want:
        return
    i = next(k for k in range(len(got)) if got[k] != want[k])
    D, F, N = PARAM_SIZES[i]
    hint = _count_hint([g - w for g, w in zip(got, want, strict=True)])
    raise AssertionError(
        f"params_saved(d_model={D}, d_ff={F}, N={N}) = {got[i]:,}, but the two models' "
        f"num_parameters() differ by {want[i]:,}; hint: {hint}"
    )


# --------------------------------------------------- exercise 3: a cached step's causal mask
MASK_CASES = ((4, 0), (3, 4), (1, 5), (6, 2), (2, 9), (5, 1), (1, 1), (1, 0))  # (T, offset)


def _reference_mask(T: int, offset: int) -> np.ndarray:
    keys = np.arange(offset + T)[None, :]  # (1, S)
    queries = offset + np.arange(T)[:, None]  # (T, 1): the new positions
    return keys <= queries  # (T, offset + T)


def _as_mask(got: Any, where: str, T: int, S: int) -> np.ndarray:
    """A (T, S) bool array of a bool or 0/1 answer, with leading axes of size 1 allowed."""
    arr = _as_array(got, where)
    while arr.ndim > 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.dtype.kind != "b":
        finite = arr[np.isfinite(arr)] if arr.dtype.kind == "f" else arr
        assert finite.size == arr.size and np.all((arr == 0) | (arr == 1)), (
            f"{where} returned {arr.dtype} values other than 0 and 1 (an additive mask of 0 "
            "and -inf?): return booleans, True where the query may attend to the key (the "
            "library's convention, nn/masks.py)"
        )
        arr = arr == 1
    if arr.shape == (T, S):
        return arr
    if arr.shape == (T, T):
        hint = (
            f"a cached step's {T} new queries attend to the {S - T} cached keys and to "
            f"themselves: {S} columns"
        )
    elif arr.shape == (S, S):
        hint = f"only the {T} new positions ask (rows); all {S} positions answer (columns)"
    elif arr.shape == (S, T):
        hint = "rows are the queries (the new positions), columns the keys"
    else:
        hint = "rows: the new positions (queries); columns: every position so far (keys)"
    raise AssertionError(
        f"{where}: shape {arr.shape}, expected (T, offset + T) = {(T, S)}; hint: {hint}"
    )


def _mask_hint(got: np.ndarray, T: int, offset: int) -> str:
    want = _reference_mask(T, offset)
    keys, queries = np.arange(offset + T)[None, :], offset + np.arange(T)[:, None]
    if np.array_equal(got, ~want):
        return "True must mean may attend (the library's convention, nn/masks.py), not hidden"
    if np.array_equal(got, keys < queries):
        return "a position may attend to itself (its own key)"
    if np.array_equal(got, keys <= np.arange(T)[:, None]):
        return (
            f"new query i is the token at position offset + i = {offset} + i: it sees every "
            "cached key"
        )
    if np.all(got):
        return "a query may not see keys after its own position"
    if np.array_equal(got, keys >= queries):
        return "the future is on the other side of the diagonal"
    row = int(np.argmax(np.any(got != want, axis=1)))
    return (
        f"row {row} (the token at position {offset + row}) allows keys "
        f"{np.flatnonzero(got[row]).tolist()}: which positions exist when it is written?"
    )


@_exercise("Exercise 3 (the causal mask of a cached step)")
def check_17_3(cached_causal_mask: Callable) -> None:
    _callable(cached_causal_mask, "cached_causal_mask")
    for T, offset in MASK_CASES:
        where = f"cached_causal_mask(T={T}, offset={offset})"
        got = _as_mask(_call(cached_causal_mask, where, T, offset), where, T, offset + T)
        if not np.array_equal(got, _reference_mask(T, offset)):
            raise AssertionError(f"{where} is wrong; hint: {_mask_hint(got, T, offset)}")
