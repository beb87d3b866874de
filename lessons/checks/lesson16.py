"""Lesson 16 (a real translator: opus-mt in this library): the checks of its exercises.

- ``check_16_1``: Exercise 1 (the parameters of a Marian config.json, counted)
- ``check_16_2``: Exercise 2 (Marian's "halves" position table, from the angles)
- ``check_16_3``: Exercise 3 (Marian's feed-forward sublayer from its four stored arrays)

The oracles are the library's own: ``TransformerConfig.num_parameters`` of the config that
``nn/marian_config.py`` reads from the same dict, ``sinusoid_table(..., "halves")`` of
``nn/positional.py``, and a NumPy feed-forward in PyTorch's ``nn.Linear`` convention
(y = x Wᵀ + b, W stored as (d_out, d_in)). Answers may be ints, NumPy integers or integral
floats (exercise 1), and float32 or float64 NumPy arrays or library tensors (2 and 3). An
answer that raises, or returns something else, gets an AssertionError with a hint, never a
crash. Exercises 1 and 2 ask for the answer written out: an answer whose code calls the
library's oracle (``num_parameters``, ``config_from_marian``, ``marian_names``;
``sinusoid_table``) is refused by name. Exercise 1's hints name the mistake by its exact
amount (``_mistakes``: a missing cross-attention, LayerNorm, bias or logits bias, untied
embeddings, learned positions, weights per head each miss or add a different number).

``checks/__init__.py`` re-exports the three; the notebook imports them as
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


def _call(fn: Callable, args: tuple, where: str, hint: str) -> Any:
    """``fn(*args)``; an exception other than NotImplementedError becomes an AssertionError."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise
    except Exception as err:
        message = " ".join(str(err).split())[:200]
        raise AssertionError(
            f"{where} raised {type(err).__name__}: {message}; hint: {hint}"
        ) from None


def _whole_number(got: object, where: str) -> int:
    """An int from an int, a NumPy integer, an integral float or a 0-d library tensor."""
    if hasattr(got, "numpy") and callable(got.numpy):
        got = got.numpy()
    value = np.asarray(got) if not isinstance(got, str | bytes | bool) else np.asarray(None)
    ok = value.ndim == 0 and value.dtype.kind in "iuf" and bool(np.isfinite(value))
    assert ok and value == np.round(value), (
        f"{where}: you return {got!r:.80}; return a whole number of parameters (an int)"
    )
    return int(value)


POST_LN = (
    "Marian is post-LN with no layernorm_embedding: there is no LayerNorm outside the layers "
    "(none after the last layer, none on the embeddings)"
)


def _mistakes(d: dict[str, Any]) -> list[tuple[int, str]]:
    """(count − the right count, hint) of each mistake a count of config ``d`` can make alone,
    in a fixed order (0: a mistake that config ``d`` does not show). Two mistakes may share
    an amount on one config (on opus-mt's, no LayerNorms = no feed-forward biases), never on
    all of ``CONFIGS``: the check names the one that fits every config."""
    D, V, L = d["d_model"], d["vocab_size"], d["max_position_embeddings"]
    Ne, Nd, fe, fd = (d[k] for k in ("encoder_layers", "decoder_layers", "encoder_ffn_dim",
                                     "decoder_ffn_dim"))  # fmt: skip
    he, hd = d["encoder_attention_heads"], d["decoder_attention_heads"]
    attention, attentions, norms = 4 * (D * D + D), Ne + 2 * Nd, 2 * Ne + 3 * Nd
    ffn_layer = Ne * (D * fe + D) + Nd * (D * fd + D)  # fc2 (or fc1 with d_model for d_ff)
    embed = "share_encoder_decoder_embeddings: one matrix embeds source and target and makes "
    positions = "the positions are sinusoids computed from a formula: are they learned?"
    mistakes = [
        (-V, "one vector of vocab_size numbers is missing: what does Marian add to the logits?"),
        (V * D, embed + "the logits; you count it twice"),
        (2 * V * D, embed + "the logits; you count it three times"),
        (-V * D, "the shared embedding itself (vocab_size × d_model) is missing"),
        (L * D, positions),
        (2 * L * D, positions),
        (-Nd * attention, "a decoder layer has two attentions: self-attention and the "
                          "cross-attention over the encoder's output; one is missing"),
        (Ne * attention, "only the decoder attends to the other side: an encoder layer has "
                         "self-attention alone"),
        (-attentions * (D * D + D), "each attention has four projections, with a bias each: "
                                    "queries, keys, values and the output W_o"),
        (-Nd * 2 * D, "a decoder layer has three sublayers, each followed by its own LayerNorm"),
        (Ne * 2 * D, "an encoder layer has two sublayers, so two LayerNorms"),
        (-norms * 2 * D, "the LayerNorms are missing: one after every sublayer"),
        (-norms * D, "a LayerNorm has two vectors of d_model numbers, γ and β"),
        (2 * D, POST_LN),
        (4 * D, POST_LN),
        (-(attentions * 4 * D + Ne * (fe + D) + Nd * (fd + D)),
         "the biases are missing: every linear map, the attentions' and the feed-forward's, "
         "adds one"),
        (-attentions * 4 * D, "the attention projections' biases are missing"),
        (-(Ne * (fe + D) + Nd * (fd + D)), "the feed-forward's biases are missing"),
        (-ffn_layer, "the feed-forward has two linear maps, d_model → d_ff → d_model"),
        (Ne * (he - 1) * attention + 2 * Nd * (hd - 1) * attention,
         "the heads split d_model: all of an attention's heads together use one d_model × "
         "d_model matrix per projection, not one each"),
    ]  # fmt: skip
    sizes = ("layers", "attention_heads", "ffn_dim")
    own = _expected_count({**d, **{f"decoder_{k}": d[f"encoder_{k}"] for k in sizes}})
    mistakes.append((own - _expected_count(d), "a config's decoder may have other sizes than "
                     "its encoder (decoder_layers, decoder_ffn_dim, ...): your count uses the "
                     "encoder's"))  # fmt: skip
    return mistakes


def _count_hint(diffs: list[int]) -> str:
    """The hint of the mistake (or the two) whose amounts are got − want on every config."""
    table = [_mistakes(d) for d in CONFIGS]  # table[config][mistake] = (amount, hint)
    amounts = [[row[k][0] for row in table] for k in range(len(table[0]))]
    hints = [hint for _, hint in table[0]]
    for k, amount in enumerate(amounts):
        if amount == diffs:
            return hints[k]
    for k, a in enumerate(amounts):
        for j in range(k + 1, len(amounts)):
            if [x + y for x, y in zip(a, amounts[j], strict=True)] == diffs:
                return f"two things, it seems: {hints[k]}; and {hints[j]}"
    return (
        "count one encoder layer and one decoder layer on paper first: each attention's four "
        "projections with their biases (the heads only split d_model), the feed-forward's two "
        "linear maps, the LayerNorms, and what the decoder has that the encoder has not"
    )


ORACLES = ("num_parameters", "config_from_marian", "marian_names")


@_exercise("Exercise 1 (the parameters of a Marian config.json)")
def check_16_1(count_parameters: Callable) -> None:
    used = sorted(_names_used(count_parameters) & set(ORACLES))
    assert not used, (
        f"count_parameters calls {', '.join(used)}: the library's own count. Write the sum "
        "yourself, layer by layer; compare with num_parameters() once the check passes"
    )
    keys, diffs, first = sorted(CONFIGS[0]), [], None
    for d in CONFIGS:
        where = (
            f"count_parameters(d_model={d['d_model']}, layers {d['encoder_layers']}+"
            f"{d['decoder_layers']}, vocab_size={d['vocab_size']})"
        )
        got = _call(count_parameters, (dict(d),), where, f"the config dict has the keys {keys}")
        got, want = _whole_number(got, where), _expected_count(d)
        diffs.append(got - want)
        if got != want and first is None:
            first = f"{where} = {got:,}, expected {want:,} (off by {got - want:+,})"
    assert first is None, f"{first}; hint: {_count_hint(diffs)}"


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

    assert "sinusoid_table" not in _names_used(halves_table), (
        "halves_table calls sinusoid_table, the library's answer: build the table yourself "
        "from the angles θ_i"
    )
    for max_len, d_model in ((50, 16), (3, 512), (1, 2), (9, 6), (12, 20)):
        where = f"halves_table({max_len}, {d_model})"
        got = _call(halves_table, (max_len, d_model), where,
                    "it is called with two ints, max_len and d_model (even)")  # fmt: skip
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
