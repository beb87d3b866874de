"""Lesson 16 (a real translator: opus-mt in this library): the checks of its exercises.

- ``check_16_1``: Exercise 1 (Marian's "halves" position table, from the angles)
- ``check_16_2``: Exercise 2 (the halves twin: a model's weights with every residual-stream
  axis reordered, what ``save_pretrained`` writes for a model with the paper's table)
- ``check_16_3``: Exercise 3 (Marian's feed-forward sublayer from its four stored arrays)

The oracles: ``sinusoid_table(..., "halves")`` of ``nn/positional.py``; the residual-stream
rule written here (``_stream_axes``, the rule of ``nn/marian_weights.py``), whose twin the
check also loads into a model with Marian's table and compares logits with the original's;
and a NumPy feed-forward in PyTorch's ``nn.Linear`` convention (y = x Wᵀ + b, W stored as
(d_out, d_in)). Answers may be float32 or float64 NumPy arrays, lists or library tensors. An
answer that raises, or returns something else, gets an AssertionError with a hint, never a
crash. Exercises 1 and 2 ask for NumPy: an answer that calls the library is refused
(``_without_library``; exercise 1 names ``sinusoid_table`` when the code uses it). Exercise
2's hints name the axis that went wrong: a group of arrays left as it was (embedding,
LayerNorms, the weights that write into the stream, their biases), an attention's head axis
reordered, the wrong axis of a matrix, the inverse order.

``checks/__init__.py`` re-exports the three; the notebook imports them as
``from checks.lesson16 import ...``. See the package docstring for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._shared import _array, _exercise, _rng, _without_library


# ------------------------------------------------------------------------ helpers
def _names_used(fn: Any, depth: int = 3) -> set[str]:
    """The global and attribute names ``fn``'s code uses: its nested functions' too, and those
    of the functions it calls by name from its own module (a helper cell), ``depth`` deep."""
    code, names = getattr(fn, "__code__", None), set()
    if code is None:
        return names
    stack = [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack += [k for k in c.co_consts if hasattr(k, "co_names")]
    for name in list(names) if depth else ():
        helper = getattr(fn, "__globals__", {}).get(name)
        if callable(helper) and getattr(helper, "__module__", None) == fn.__module__:
            names |= _names_used(helper, depth - 1)
    return names


def _call(fn: Callable, args: tuple, where: str, hint: str, options: dict | None = None) -> Any:
    """``fn(*args, **options)``; an exception other than NotImplementedError or a check's own
    AssertionError becomes an AssertionError with ``hint``."""
    try:
        return fn(*args, **(options or {}))
    except (NotImplementedError, AssertionError):
        raise
    except Exception as err:
        message = " ".join(str(err).split())[:200]
        raise AssertionError(
            f"{where} raised {type(err).__name__}: {message}; hint: {hint}"
        ) from None


# --------------------------------------------------------- exercise 1: the halves table
def _as_float_array(got: Any, where: str) -> np.ndarray:
    """A NumPy array of a NumPy array, a list or a library tensor (``.numpy()``)."""
    if hasattr(got, "numpy") and callable(got.numpy):
        got = got.numpy()
    try:
        arr = np.asarray(got)
    except (TypeError, ValueError) as err:
        raise AssertionError(f"{where}: return an array, got {type(got).__name__}") from err
    assert arr.dtype.kind in "fiu", f"{where}: return numbers, got an array of {arr.dtype}"
    return arr


def _tolerance(arr: np.ndarray) -> float:
    return 1e-9 if arr.dtype == np.float64 else 1e-4  # a float32 answer: float32's rounding


@_exercise("Exercise 1 (Marian's halves position table)")
def check_16_1(halves_table: Callable) -> None:
    from minitransformer.nn.positional import sinusoid_table

    assert "sinusoid_table" not in _names_used(halves_table), (
        "halves_table calls sinusoid_table, the library's answer: build the table yourself "
        "from the angles θ_i"
    )
    for max_len, d_model in ((50, 16), (3, 512), (1, 2), (9, 6), (12, 20)):
        where = f"halves_table({max_len}, {d_model})"
        got = _call(_without_library, (halves_table, max_len, d_model), where,
                    "it is called with two ints, max_len and d_model (even)",
                    {"where": where, "instead": "build the table in NumPy from the angles θ_i "
                     "(np.sin, np.cos of an array of angles)"})  # fmt: skip
        got = _as_float_array(got, where)
        assert got.shape == (max_len, d_model), (
            f"{where}: shape {got.shape}, expected (max_len, d_model) = {(max_len, d_model)}"
        )
        assert np.isfinite(got).all(), f"{where}: your table holds NaN or inf values"
        want = sinusoid_table(max_len, d_model, "halves")
        tol = _tolerance(got)
        if np.allclose(got, want, rtol=tol, atol=tol):
            continue
        inter = sinusoid_table(max_len, d_model, "interleaved")
        half = d_model // 2
        swapped = np.concatenate([want[:, half:], want[:, :half]], axis=1)
        reversed_halves = np.concatenate([want[:, half - 1 :: -1], want[:, : half - 1 : -1]], 1)
        if got.dtype == np.float16:
            hint = "float16 rounds sin and cos to about 3 digits: return float32 or float64"
        elif np.allclose(got, inter, atol=1e-4):
            hint = (
                "this is the paper's interleaved table; Marian's holds its values in another order"
            )
        elif np.allclose(got, swapped, atol=1e-4):
            hint = "sines and cosines are in each other's place"
        elif d_model > 2 and np.allclose(got, reversed_halves, atol=1e-4):
            hint = (
                "the sines come first and the cosines second, but each half runs the wrong "
                "way: which θ_i goes into the first column?"
            )
        elif np.allclose(got[0], want[0], atol=1e-4):
            hint = (
                "position 0 is right, the others not: look at the angles (which exponent "
                "each feature's frequency has, and what it is divided by)"
            )
        else:
            hint = "position 0 is wrong too: which positions does the table start from?"
        raise AssertionError(
            f"{where}: not Marian's table (largest difference {np.abs(got - want).max():.3g}); "
            f"hint: {hint}. The angles θ_i are in the cell above the exercise"
        )


# --------------------------------------------------------- exercise 2: the halves twin
def _stream_axes(name: str) -> tuple[int, ...]:
    """The axes of our weight ``name`` that run over the residual stream's d_model features
    (the oracle: the same rule as nn/marian_weights.py's ``_feature_axes``, written here)."""
    if name.endswith("embed.weight"):
        return (1,)
    if name.endswith(("norm.gamma", "norm.beta", "w_o.bias", "w_2.bias")):
        return (0,)
    if name.endswith(("w_q.weight", "w_k.weight", "w_v.weight", "w_1.weight", "out_proj.weight")):
        return (0,)
    return (1,) if name.endswith(("w_o.weight", "w_2.weight")) else ()


def _reordered(a: np.ndarray, order: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    for axis in axes:
        a = np.take(a, order, axis=axis)
    return a


_NOT_REORDERED = {  # what a name's group does with the stream, when it was left as it was
    "embed.weight": "the embedding writes the stream: its columns are the d_model features",
    "out_proj.weight": "the output projection reads the stream: its rows (x W) are the features",
    "norm.gamma": "a LayerNorm's γ and β scale and shift the stream feature by feature",
    "norm.beta": "a LayerNorm's γ and β scale and shift the stream feature by feature",
    "w_o.weight": "W_o writes into the stream: its output axis (the columns) is the features",
    "w_2.weight": "W_2 writes into the stream: its output axis (the columns) is the features",
    "w_o.bias": "W_o's bias is added to the stream: reorder it with W_o's columns",
    "w_2.bias": "W_2's bias is added to the stream: reorder it with W_2's columns",
}
_HEADS = (
    "an attention's head axis (the columns of W_q, W_k, W_v, their biases, the rows of W_o) "
    "is not the residual stream: reordering it moves features into other heads (the finding "
    "above)"
)


def _twin_hint(name: str, got: np.ndarray, a: np.ndarray, order: np.ndarray) -> str:
    """Where to look, for a twin's array ``got`` of ``name`` (ours: ``a``) that is wrong."""
    axes, inverse = _stream_axes(name), np.argsort(order)
    if axes and got.shape == a.shape and np.array_equal(got, _reordered(a, inverse, axes)):
        return (
            "the inverse order: the twin's feature j is our feature order[j] (a[..., order] "
            "along the axis), not the other way round"
        )
    if axes and got.shape == a.shape and np.array_equal(got, a):
        group = next(k for k in _NOT_REORDERED if name.endswith(k)) if any(
            name.endswith(k) for k in _NOT_REORDERED
        ) else None  # fmt: skip
        reads = "a weight that reads the stream (x W) has the features on its input axis, the rows"
        return _NOT_REORDERED[group] if group else reads
    head_names = ("w_q.", "w_k.", "w_v.", "w_o.weight")
    if any(part in name for part in head_names) and got.shape == a.shape:
        head_axis = 0 if name.endswith(("w_o.weight", ".bias")) else a.ndim - 1
        if np.array_equal(got, np.take(_reordered(a, order, axes), order, axis=head_axis)):
            return _HEADS
    if axes and a.ndim == 2 and got.shape == a.shape:
        other = 1 - axes[0]
        if np.array_equal(got, np.take(a, order, axis=other)):
            return (
                f"the wrong axis of {name}: it is {a.shape}, and only one axis of it runs over "
                "the residual stream (the list above the exercise)"
            )
    if not axes and got.shape == a.shape:
        return (
            f"{name} has no axis over the residual stream (the d_ff axis, a head axis or the "
            "vocabulary): return it as it is"
        )
    return f"which axes of {name} {a.shape} run over the residual stream (the list above)?"


TWIN_CONFIGS = (  # float64 models with the paper's table: tied; untied, with a logits bias
    {"src_vocab": 11, "tgt_vocab": 11, "d_model": 8, "h": 2, "N": 1, "d_ff": 12},
    {"src_vocab": 9, "tgt_vocab": 13, "d_model": 12, "h": 3, "N": 2, "d_ff": 20,
     "tie_embeddings": False, "logits_bias": True},
)  # fmt: skip


@_exercise("Exercise 2 (the halves twin of a model's weights)")
def check_16_2(halves_twin: Callable) -> None:
    """Each array of two small models' twins, against the residual-stream rule; then the
    twin, loaded into a model with Marian's table, computes the original's logits."""
    import minitransformer as mt
    from minitransformer.nn.marian_weights import feature_order

    for sizes in TWIN_CONFIGS:
        cfg = mt.TransformerConfig(**sizes, dtype="float64")
        model = mt.nn.Transformer(cfg, seed=5).eval()
        rng = _rng(162)  # every array random (a LayerNorm starts at γ = 1, β = 0: any order)
        model.load_state_dict({k: rng.standard_normal(np.shape(v)) / 2 for k, v in
                               model.state_dict().items()})  # fmt: skip
        state = {k: np.asarray(v) for k, v in model.state_dict().items()}
        before = {k: v.copy() for k, v in state.items()}  # to tell the learner, not to hide
        order = feature_order(cfg.d_model)
        where = f"halves_twin(state of a model with d_model={cfg.d_model}, order)"
        got = _call(_without_library, (halves_twin, state, order), where,
                    "state is a dict {name: NumPy array}, order a 1-D array of d_model ints",
                    {"where": where, "instead": "index each array with order (a[order], "
                     "a[:, order] or np.take) in NumPy"})  # fmt: skip
        changed = sorted(
            k for k in before if k not in state or not np.array_equal(state[k], before[k])
        )
        assert not changed and set(state) == set(before), (
            f"{where} changed the state it was given ({', '.join(changed[:2]) or 'its names'}): "
            "build a new dict of new arrays; hint: a[order] makes a new array, a[:] = ... and "
            "state[name] = ... write into the caller's"
        )
        assert isinstance(got, dict), (
            f"{where}: you return {type(got).__name__}; return a dict {{name: array}}, the "
            "same names as state"
        )
        missing, extra = sorted(set(state) - set(got)), sorted(set(got) - set(state))
        assert not missing and not extra, (
            f"{where}: names missing {missing[:3]}, names not in state {extra[:3]}; return every "
            "name of state, and no other"
        )
        arrays = {}  # the answer's arrays, as NumPy
        for name, a in state.items():
            mine = arrays[name] = _array(got[name], f"{where}[{name!r}]", kinds="f")
            want = _reordered(a, order, _stream_axes(name))
            assert mine.shape == want.shape, (
                f"{where}[{name!r}]: shape {mine.shape}, expected {want.shape}: reordering "
                f"keeps every shape; hint: which axis of {name} {a.shape} runs over the "
                "residual stream (the list above the exercise)?"
            )
            assert np.allclose(mine, want, rtol=1e-12, atol=0), (
                f"{where}[{name!r}] is not the twin's; hint: {_twin_hint(name, mine, a, order)}"
            )
        twin = mt.nn.Transformer(mt.TransformerConfig(
            **sizes, dtype="float64", position_layout="halves"), seed=6).eval()  # fmt: skip
        twin.load_state_dict({k: a.astype(np.float64) for k, a in arrays.items()})
        src = rng.integers(3, sizes["src_vocab"], size=(2, 5))
        tgt = rng.integers(3, sizes["tgt_vocab"], size=(2, 4))
        with mt.no_grad():
            gap = np.abs(twin(src, tgt).numpy() - model(src, tgt).numpy()).max()
        assert gap < 1e-9, f"{where}: the twin's logits differ by {gap:.2g} (a bug of the check)"


# ------------------------------------------------------ exercise 3: Marian's feed-forward
def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _ffn(x, w1, b1, w2, b2, act=_silu):
    """Marian's (PyTorch's) convention: nn.Linear stores W (d_out, d_in), y = x Wᵀ + b."""
    return act(x @ w1.T + b1) @ w2.T + b2


def _relu(x):
    return np.maximum(x, 0.0)


@_exercise("Exercise 3 (Marian's feed-forward sublayer)")
def check_16_3(marian_ffn: Callable) -> None:
    rng = _rng(163)
    for D, d_ff, dtype in ((8, 8, np.float64), (6, 10, np.float64), (6, 10, np.float32)):
        x = rng.standard_normal((2, 3, D)) * 2
        w1, b1 = rng.standard_normal((d_ff, D)) / np.sqrt(D), rng.standard_normal(d_ff)
        w2, b2 = rng.standard_normal((D, d_ff)) / np.sqrt(d_ff), rng.standard_normal(D)
        args = [a.astype(dtype) for a in (x, w1, b1, w2, b2)]
        where = f"marian_ffn with d_model={D}, d_ff={d_ff} ({np.dtype(dtype)})"
        try:
            got = marian_ffn(*args)
        except NotImplementedError:
            raise
        except Exception as err:  # a shape error from an untransposed weight, most often
            message = " ".join(str(err).split())
            hint = (
                "which shape does Marian store an nn.Linear weight in, and which does x W + b need?"
                if "shape" in message.lower() or "dimension" in message.lower()
                else "the check passes NumPy arrays, float32 and float64, shaped as in the "
                "exercise's text"
            )
            raise AssertionError(
                f"{where} raised {type(err).__name__}: {message[:200]}; hint: {hint}"
            ) from None
        got = _as_float_array(got, where)
        assert got.shape == x.shape, f"{where}: shape {got.shape}, expected x's {x.shape}"
        assert np.isfinite(got).all(), f"{where}: your output holds NaN or inf values"
        want = _ffn(x, w1, b1, w2, b2)
        tol = 1e-9 if dtype == np.float64 and got.dtype == np.float64 else 1e-4
        if np.allclose(got, want, rtol=tol, atol=tol):
            continue
        if np.allclose(got, _ffn(x, w1, b1, w2, b2, _relu), atol=1e-4):
            hint = "that is the paper's activation; opus-mt's config says activation_function swish"
        elif D == d_ff and np.allclose(got, _ffn(x, w1.T, b1, w2.T, b2), atol=1e-4):
            hint = "the weights are applied untransposed: Marian stores them as (d_out, d_in)"
        elif np.allclose(got, _ffn(x, w1, 0 * b1, w2, 0 * b2), atol=1e-4):
            hint = "the biases are missing"
        else:
            hint = (
                "compare one step at a time with x of one position: the first linear map, "
                "the activation (swish, not the paper's relu), the second linear map"
            )
        raise AssertionError(
            f"{where}: not Marian's feed-forward output (largest difference "
            f"{np.abs(got - want).max():.3g}); hint: {hint}"
        )
