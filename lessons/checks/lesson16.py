"""Lesson 16 (a real translator: opus-mt in this library): the checks of its exercises.

- ``check_16_1``: Exercise 1 (the parameters of a Marian config.json, counted)
- ``check_16_2``: Exercise 2 (Marian's "halves" position table, from the angles)
- ``check_16_3``: Exercise 3 (Marian's feed-forward sublayer from its four stored arrays)

The oracles are the library's own: ``TransformerConfig.num_parameters`` of the config that
``nn/marian_config.py`` reads from the same dict, ``sinusoid_table(..., "halves")`` of
``nn/positional.py``, and a NumPy feed-forward in PyTorch's ``nn.Linear`` convention
(y = x Wᵀ + b, W stored as (d_out, d_in)). Answers may be ints, NumPy integers or integral
floats (exercise 1), and float32 or float64 NumPy arrays or library tensors (2 and 3).

This module is not re-exported by ``checks/__init__.py``: the notebook imports it as
``from checks.lesson16 import ...``. See the package docstring for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._shared import _exercise, _rng

# --------------------------------------------------------------- exercise 1: the count
OPUS_MT_EN_ES = {  # the sizes of Helsinki-NLP/opus-mt-en-es's config.json
    "d_model": 512,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "encoder_attention_heads": 8,
    "decoder_attention_heads": 8,
    "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048,
    "vocab_size": 65001,
    "decoder_vocab_size": 65001,
    "max_position_embeddings": 512,
    "activation_function": "swish",
    "scale_embedding": True,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
    "pad_token_id": 65000,
    "decoder_start_token_id": 65000,
    "eos_token_id": 0,
}


def _config(**sizes: int) -> dict[str, Any]:
    """A config.json dict: opus-mt's with some sizes changed; a decoder size not given is the
    encoder's, and the special ids stay inside the vocabulary (pad = start = its last id)."""
    d = {**OPUS_MT_EN_ES, **sizes}
    for name in ("layers", "attention_heads", "ffn_dim"):
        if f"decoder_{name}" not in sizes:
            d[f"decoder_{name}"] = d[f"encoder_{name}"]
    d["decoder_vocab_size"] = d["vocab_size"]
    d["pad_token_id"] = d["decoder_start_token_id"] = d["vocab_size"] - 1
    return d


CONFIGS = (  # opus-mt-en-es; then smaller ones, the last two with a decoder of other sizes
    _config(),
    _config(d_model=16, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=32,
            vocab_size=101, max_position_embeddings=64),
    _config(d_model=24, encoder_layers=1, decoder_layers=3, encoder_attention_heads=4,
            decoder_attention_heads=2, encoder_ffn_dim=40, decoder_ffn_dim=56, vocab_size=37,
            max_position_embeddings=32),
    _config(d_model=32, encoder_layers=3, decoder_layers=2, encoder_ffn_dim=64,
            decoder_ffn_dim=48, encoder_attention_heads=8, decoder_attention_heads=8,
            vocab_size=500, max_position_embeddings=128),
)  # fmt: skip


def _expected_count(d: dict[str, Any]) -> int:
    from minitransformer.nn.marian_config import config_from_marian

    return config_from_marian(dict(d)).num_parameters()


def _whole_number(got: object, where: str) -> int:
    """An int from an int, a NumPy integer or an integral float (not a bool or a string)."""
    value = np.asarray(got) if not isinstance(got, str | bytes | bool) else np.asarray(None)
    ok = value.ndim == 0 and value.dtype.kind in "iuf" and bool(np.isfinite(value))
    assert ok and value == np.round(value), (
        f"{where}: you return {got!r}; return a whole number of parameters (an int)"
    )
    return int(value)


def _count_hint(d: dict[str, Any], got: int, want: int) -> str:
    D, V, L = d["d_model"], d["vocab_size"], d["max_position_embeddings"]
    diff = got - want
    if diff == -V:
        return "one row of V numbers is missing: what does Marian add to the logits?"
    if diff in (V * D, 2 * V * D, -V * D):
        return (
            "the embeddings: share_encoder_decoder_embeddings means one matrix for the source, "
            "the target and the output projection"
        )
    if diff in (L * D, 2 * L * D):
        return "the positions are sinusoids computed from a formula: are they learned?"
    if diff % (2 * D) == 0 and diff != 0:
        return "off by a multiple of 2 d_model: count the LayerNorms (γ and β) of each layer"
    if d["decoder_layers"] != d["encoder_layers"] or d["decoder_ffn_dim"] != d["encoder_ffn_dim"]:
        return (
            "this config's decoder has other sizes than its encoder (decoder_layers, "
            "decoder_ffn_dim): does your count read them?"
        )
    return (
        "count one encoder layer and one decoder layer on paper first: each attention's four "
        "projections with their biases (the heads only split d_model), the feed-forward's two "
        "linear maps, the LayerNorms, and what the decoder has that the encoder has not"
    )


@_exercise("Exercise 1 (the parameters of a Marian config.json)")
def check_16_1(count_parameters: Callable) -> None:
    for d in CONFIGS:
        where = (
            f"count_parameters(d_model={d['d_model']}, layers {d['encoder_layers']}+"
            f"{d['decoder_layers']}, vocab_size={d['vocab_size']})"
        )
        got = _whole_number(count_parameters(dict(d)), where)
        want = _expected_count(d)
        assert got == want, (
            f"{where} = {got:,}, expected {want:,}; hint: {_count_hint(d, got, want)}"
        )


# --------------------------------------------------------- exercise 2: the halves table
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


@_exercise("Exercise 2 (Marian's halves position table)")
def check_16_2(halves_table: Callable) -> None:
    from minitransformer.nn.positional import sinusoid_table

    for max_len, d_model in ((50, 16), (3, 512), (1, 2), (9, 6), (12, 20)):
        where = f"halves_table({max_len}, {d_model})"
        got = _as_float_array(halves_table(max_len, d_model), where)
        assert got.shape == (max_len, d_model), (
            f"{where}: shape {got.shape}, expected (max_len, d_model) = {(max_len, d_model)}"
        )
        want = sinusoid_table(max_len, d_model, "halves")
        tol = _tolerance(got)
        if np.allclose(got, want, rtol=tol, atol=tol):
            continue
        inter = sinusoid_table(max_len, d_model, "interleaved")
        half = d_model // 2
        swapped = np.concatenate([want[:, half:], want[:, :half]], axis=1)
        if np.allclose(got, inter, atol=1e-4):
            hint = (
                "this is the paper's interleaved table; Marian's holds its values in another order"
            )
        elif np.allclose(got, swapped, atol=1e-4):
            hint = "sines and cosines are in each other's place"
        elif np.allclose(got[0], want[0], atol=1e-4):
            hint = (
                "position 0 is right, the others not: look at the angles (which exponent "
                "each feature's frequency has, and what it is divided by)"
            )
        else:
            hint = "position 0 is wrong too: which positions does the table start from?"
        raise AssertionError(
            f"{where}: not Marian's table (largest difference {np.abs(got - want).max():.3g}); "
            f"hint: {hint}. Compare with the formula in this lesson's section 1"
        )


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
