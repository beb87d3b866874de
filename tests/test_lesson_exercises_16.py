"""Lesson 16's exercise checks (lessons/checks/lesson16.py) tell right from wrong with the right
hint and never crash on an answer; the notebook ships what the lesson promises.

- check_16_1 (Marian's halves table, in NumPy) and check_16_3 (Marian's feed-forward from its
  stored arrays): WRONG and VALID below list the answers, each wrong one with the hint it
  must get.
- check_16_2 (issue 46; it replaces a parameter count of a config.json, the course keeps
  06.1): the halves twin of a model's weights, what save_pretrained writes. Each group of
  arrays left as it was (embedding, output projection, LayerNorms, W_o and W_2, their
  biases), the head axis reordered, the wrong axis, the inverse order, a changed input and a
  library call get their own hints; loops, np.take, Tensors and lists pass; the solution's
  twin is the one save_pretrained writes.
- The notebook: placeholders only, each check called once, DOWNLOAD = False as shipped, the
  download only under ``if DOWNLOAD:``.
- lessons/checkpoints/marian-tiny (the lesson's offline fidelity check): this library
  reproduces the committed transformers logits, and (with transformers) they are what
  transformers computes from the committed weights.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, assert_ships_placeholders, code_before, code_cells

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.nn.positional import sinusoid_table

NOTEBOOK = LESSONS / "16_a_real_translator.ipynb"
checks = importlib.import_module("checks.lesson16")
s16 = importlib.import_module("solutions.lesson16")
CORRECT, NOT_ATTEMPTED = "correct", None  # checks._shared


def placeholder(*args, **kwargs):
    raise NotImplementedError("exercise: your code here")


# ------------------------------------------------------------------ 16.1: halves_table
def _angles(L, D, start=0, exponent=2, denominator=None):
    i = np.arange(D // 2)
    return np.arange(start, start + L)[:, None] / 10000.0 ** (exponent * i / (denominator or D))


def _halves(L, D, **kw):
    a = _angles(L, D, **kw)
    return np.concatenate([np.sin(a), np.cos(a)], axis=1)


def _interleaved(L, D):  # the paper's table, built by hand
    table = np.empty((L, D))
    table[:, 0::2], table[:, 1::2] = np.sin(_angles(L, D)), np.cos(_angles(L, D))
    return table


def _interleaved_reordered(L, D):  # the paper's table built by hand, columns taken in order P
    return _interleaved(L, D)[:, np.r_[0:D:2, 1:D:2]]


def _halves_by_the_library(L, D):
    return sinusoid_table(L, D, "halves")


def _halves_reversed(L, D):  # sines first, cosines second, each half from the last θ_i
    a = _angles(L, D)[:, ::-1]
    return np.concatenate([np.sin(a), np.cos(a)], axis=1)


def _halves_nan(L, D):
    table = _halves(L, D)
    table[-1, -1] = np.nan
    return table


_table_by_another_name = sinusoid_table  # the name check cannot see it: the call watch does


TABLE_WRONG = {  # name: (answer, what its hint must say)
    "interleaved (the paper's)": (_interleaved, "interleaved"),
    "cosines first": (lambda L, D: np.roll(_halves(L, D), D // 2, axis=1), "each other's place"),
    "each half reversed": (_halves_reversed, "each half runs the wrong way"),
    "positions from 1": (lambda L, D: _halves(L, D, start=1), "position 0 is wrong"),
    "exponent i / d_model": (lambda L, D: _halves(L, D, exponent=1), "look at the angles"),
    "divided by d_model / 2": (lambda L, D: _halves(L, D, denominator=D // 2), "the angles"),
    "transposed": (lambda L, D: _halves(L, D).T, "shape"),
    "sines only": (lambda L, D: np.sin(np.concatenate([_angles(L, D)] * 2, axis=1)), "hint"),
    "float16": (lambda L, D: _halves(L, D).astype(np.float16), "float16"),
    "calls sinusoid_table": (_halves_by_the_library, "calls sinusoid_table"),
    "calls it under another name": (
        lambda L, D: _table_by_another_name(L, D, "halves"),
        "calls the library.*sinusoid_table.*NumPy",
    ),
    "a NaN": (_halves_nan, "NaN"),
    "arguments swapped": (lambda D, L: _halves(L, D), "raised|shape"),
    "a list of tensors": (lambda L, D: [mt.tensor(r) for r in _halves(L, D)], "return"),
}
TABLE_VALID = {
    "reference": s16.halves_table,
    "float32": lambda L, D: s16.halves_table(L, D).astype(np.float32),
    "lists": lambda L, D: s16.halves_table(L, D).tolist(),
    "a library tensor": lambda L, D: mt.tensor(s16.halves_table(L, D), dtype="float64"),
    "the interleaved table reordered by hand": _interleaved_reordered,
    "a loop over positions": lambda L, D: np.array(
        [
            [
                np.sin(p / 10000 ** (2 * (j % (D // 2)) / D))
                if j < D // 2
                else np.cos(p / 10000 ** (2 * (j % (D // 2)) / D))
                for j in range(D)
            ]
            for p in range(L)
        ]
    ),  # fmt: skip
}


# ------------------------------------------------------------------ 16.2: halves_twin
def _twin(skip=(), inverse=False, heads=False, wrong_axis=(), take=False):
    """The halves twin with one mistake: ``skip`` (name endings left as they were),
    ``inverse`` (the inverse order), ``heads`` (the attentions' head axis reordered too),
    ``wrong_axis`` (name endings reordered along the other axis); ``take``: np.take."""

    def answer(state, order):
        order = np.argsort(order) if inverse else order
        out = {}
        for name, a in state.items():
            axes = checks._stream_axes(name)
            if name.endswith(tuple(skip)) if skip else False:
                axes = ()
            elif name.endswith(tuple(wrong_axis)) if wrong_axis else False:
                axes = (1 - axes[0],)
            for axis in axes:
                a = np.take(a, order, axis=axis) if take else np.moveaxis(
                    np.moveaxis(a, axis, 0)[order], 0, axis)  # fmt: skip
            if heads and any(p in name for p in ("w_q.", "w_k.", "w_v.")):
                a = a[..., order]
            if heads and name.endswith("w_o.weight"):
                a = a[order]
            out[name] = np.array(a)
        return out

    return answer


def _twin_in_place(state, order):
    for name, a in state.items():
        if name.endswith("norm.gamma"):
            a[:] = a[order]  # writes into the caller's array
    return _twin()(state, order)


def _twin_by_the_library(state, order):
    from minitransformer.nn.marian_weights import _feature_axes

    return {n: _twin()({n: a}, order)[n] if _feature_axes(n) is not None else a
            for n, a in state.items()}  # fmt: skip


def _twin_loop(state, order):  # plain loops over the elements of each 1-D and 2-D array
    twin = {}
    for name, a in state.items():
        axes, b = checks._stream_axes(name), np.empty_like(a)
        if a.ndim == 1:
            for j in range(len(a)):
                b[j] = a[order[j]] if axes else a[j]
        else:
            for i in range(a.shape[0]):
                for j in range(a.shape[1]):
                    r = order[i] if 0 in axes else i
                    c = order[j] if 1 in axes else j
                    b[i, j] = a[r, c]
        twin[name] = b
    return twin


TWIN_WRONG = {  # name: (answer, what its hint must say)
    "embedding left": (_twin(skip=("embed.weight",)), "the embedding writes the stream"),
    "output projection left": (_twin(skip=("out_proj.weight",)), "output projection reads"),
    "LayerNorms left": (_twin(skip=("norm.gamma", "norm.beta")), "γ and β"),
    "W_o and W_2 left": (_twin(skip=("w_o.weight", "w_2.weight")), "writes into the stream"),
    "their biases left": (_twin(skip=("w_o.bias", "w_2.bias")), "bias is added to the stream"),
    "the reading weights left": (_twin(skip=("w_q.weight", "w_k.weight")), "input axis, the rows"),
    "the head axis too": (_twin(heads=True), "head axis"),
    "the embedding's rows": (_twin(wrong_axis=("embed.weight",)), "runs over the residual stream"),
    "W_o's rows": (_twin(wrong_axis=("w_o.weight",)), "the wrong axis"),
    "W_1's columns": (_twin(wrong_axis=("w_1.weight",)), "raised|shape|wrong axis"),
    "the inverse order": (_twin(inverse=True), "the inverse order"),
    "q, k, v biases reordered": (
        lambda s, o: {
            n: (a[o] if n.endswith("w_q.bias") else a) for n, a in _twin()(s, o).items()
        },  # fmt: skip
        "head axis",
    ),
    "writes into its input": (_twin_in_place, "in place|changed the state"),
    "a name dropped": (lambda s, o: dict(list(_twin()(s, o).items())[1:]), "names missing"),
    "a list": (lambda s, o: list(_twin()(s, o).values()), "return a dict"),
    "calls the library": (_twin_by_the_library, "calls the library"),
    "strings": (lambda s, o: {n: "x" for n in s}, "expected an array"),
}
TWIN_VALID = {
    "reference": s16.halves_twin,
    "np.take": _twin(take=True),
    "moveaxis": _twin(),
    "loops": _twin_loop,
    "Tensors": lambda s, o: {n: mt.tensor(a, dtype="float64") for n, a in _twin()(s, o).items()},
    "lists": lambda s, o: {n: a.tolist() for n, a in _twin()(s, o).items()},
}


def test_16_2_the_solution_is_what_save_pretrained_writes(tmp_path):
    """The reference twin of a small model, loaded into a model with Marian's table, holds
    the arrays save_pretrained wrote and from_pretrained read back."""
    from minitransformer.nn.marian_weights import feature_order

    cfg = mt.TransformerConfig(**checks.TWIN_CONFIGS[1], dtype="float64", activation="swish")
    model = mt.nn.Transformer(cfg, seed=3)
    model.save_pretrained(tmp_path / "m")
    loaded = mt.nn.Transformer.from_pretrained(tmp_path / "m", dtype="float64").state_dict()
    state = {k: np.asarray(v) for k, v in model.state_dict().items()}
    mine = s16.halves_twin(state, feature_order(cfg.d_model))
    assert set(mine) == set(loaded)
    for name, a in mine.items():
        assert np.array_equal(a, loaded[name]), name


def test_16_2_nothing_above_writes_the_twin():
    """Above exercise 2, code reorders one array (w_1's rows) and the head axis (the wrong
    reading), and the text lists the axes in words; no code reorders the embedding, the
    LayerNorms or W_o and W_2 by P."""
    before = code_before(NOTEBOOK, "halves_twin")
    for giveaway in ("embed.weight", "norm.gamma", "w_2.weight", "_feature_axes"):
        assert giveaway not in before, giveaway


# ------------------------------------------------------------------ 16.3: marian_ffn
def _silu(x):
    return x / (1 + np.exp(-x))


def _gelu(x):
    from math import erf

    return x * 0.5 * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def _ffn(act=_silu, transpose=True, biases=True, act_last=False):
    def ffn(x, w1, b1, w2, b2):
        w1, w2 = (w1.T, w2.T) if transpose else (w1, w2)
        b1, b2 = (b1, b2) if biases else (0, 0)
        h = x @ w1 + b1
        out = (h if act_last else act(h)) @ w2 + b2
        return act(out) if act_last else out

    return ffn


def _ffn_layers(x, w1, b1, w2, b2):  # nn.Linear layers of this library, loaded by hand
    fc1, fc2 = mt.nn.Linear(*w1.shape[::-1]), mt.nn.Linear(*w2.shape[::-1])
    for layer, w, b in ((fc1, w1, b1), (fc2, w2, b2)):
        layer.weight.data = np.ascontiguousarray(w.T).astype(np.float32)
        layer.bias.data = b.astype(np.float32)
    return fc2(F.swish(fc1(mt.tensor(x, dtype="float32"))))


def _ffn_raises(x, w1, b1, w2, b2):  # this library's F.linear on NumPy arrays, untransposed
    return F.linear(F.swish(F.linear(mt.tensor(x), mt.tensor(w1), mt.tensor(b1))), w2, b2)


FFN_WRONG = {  # name: (answer, what its hint must say); the first inputs have d_ff = d_model
    "relu (the paper's)": (_ffn(act=lambda h: np.maximum(h, 0)), "the paper's activation"),
    "gelu": (_ffn(act=_gelu), "swish, not the paper's relu"),
    "sigmoid": (_ffn(act=lambda h: 1 / (1 + np.exp(-h))), "one step at a time"),
    "weights not transposed": (_ffn(transpose=False), "untransposed"),
    "no biases": (_ffn(biases=False), "biases are missing"),
    "the activation after fc2": (_ffn(act_last=True), "one step at a time"),
    "the hidden layer only": (lambda x, w1, b1, w2, b2: _silu(x @ w1.T + b1), "step"),
    "fc2 first": (lambda x, w1, b1, w2, b2: _silu(x @ w2.T + b2) @ w1.T + b1, "step"),
    "raises on the arrays": (_ffn_raises, "raised"),
    "NaN": (lambda x, *w: np.full(x.shape, np.nan), "NaN"),
    "a tuple": (lambda *a: (_ffn()(*a), None), "return"),
    "None": (lambda *a: None, "return numbers"),
}
FFN_VALID = {
    "reference (library ops)": s16.marian_ffn,
    "NumPy": _ffn(),
    "einsum": lambda x, w1, b1, w2, b2: (
        np.einsum("btf,df->btd", _silu(np.einsum("btd,fd->btf", x, w1) + b1), w2) + b2
    ),
    "a library tensor": lambda *a: mt.tensor(_ffn()(*a)),
    "nn.Linear layers": _ffn_layers,
}


# ------------------------------------------------------------------ every check
CHECKS = {
    "16_1": (checks.check_16_1, s16.halves_table),
    "16_2": (checks.check_16_2, s16.halves_twin),
    "16_3": (checks.check_16_3, s16.marian_ffn),
}


WRONG = {"16_1": TABLE_WRONG, "16_2": TWIN_WRONG, "16_3": FFN_WRONG}
VALID = {"16_1": TABLE_VALID, "16_2": TWIN_VALID, "16_3": FFN_VALID}


@pytest.mark.parametrize(("name", "case"), [(n, c) for n in WRONG for c in WRONG[n]])
def test_catches_with_the_right_hint(name, case):
    answer, hint = WRONG[name][case]
    with pytest.raises(AssertionError, match=hint):
        CHECKS[name][0](answer)


@pytest.mark.parametrize(("name", "case"), [(n, c) for n in VALID for c in VALID[n]])
def test_accepts(name, case, capsys):
    assert CHECKS[name][0](VALID[name][case]) == CORRECT
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("name", CHECKS)
def test_placeholder_is_not_attempted(name, capsys):
    check, _ = CHECKS[name]
    assert check(placeholder) is NOT_ATTEMPTED
    assert check(None) is NOT_ATTEMPTED
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("name", CHECKS)
def test_a_failing_check_gives_a_hint(name):
    wrong = {"16_1": TABLE_WRONG["cosines first"], "16_2": TWIN_WRONG["the inverse order"],
             "16_3": FFN_WRONG["weights not transposed"]}  # fmt: skip
    with pytest.raises(AssertionError, match="hint"):
        CHECKS[name][0](wrong[name][0])


def test_notebook_ships_placeholders_and_calls_every_check():
    assert_ships_placeholders(NOTEBOOK, 16, CHECKS, ("halves_table", "halves_twin", "marian_ffn"))


def test_notebook_never_downloads_as_shipped():
    """DOWNLOAD = False in the first code cell; the Hub is reached only under `if DOWNLOAD:`."""
    cells = code_cells(NOTEBOOK)
    assert "\nDOWNLOAD = False" in cells[0]
    lines = "\n".join(cells).splitlines()
    calls = [i for i, line in enumerate(lines) if "pretrained_folder(" in line]
    assert calls, "the lesson shows how to download opus-mt"
    for i in calls:
        guard = max(j for j in range(i) if lines[j] and not lines[j].startswith(" "))
        assert lines[guard] == "if DOWNLOAD:", (
            f"pretrained_folder called outside `if DOWNLOAD:`: {lines[i]}"
        )


# ------------------------------------------------------------------ the committed Marian reference
MARIAN_TINY = LESSONS / "checkpoints" / "marian-tiny"


def test_marian_tiny_fixture_matches_its_committed_logits():
    """What the lesson shows offline: this library's loader on a MarianMTModel that
    transformers saved gives the logits transformers computed (committed beside it)."""
    from safetensors.numpy import load_file

    hf = load_file(MARIAN_TINY / "hf_reference.safetensors")
    model = mt.nn.Transformer.from_pretrained(MARIAN_TINY)
    cfg = model.cfg
    assert (cfg.activation, cfg.position_layout, cfg.logits_bias, cfg.scale_embedding) == (
        "swish", "halves", True, True
    )  # fmt: skip
    assert cfg.bos_id == cfg.pad_id and cfg.eos_id == 0
    with mt.no_grad():
        got = model(hf["src"], hf["tgt_in"]).numpy()
    assert (hf["src"] == cfg.pad_id).any()  # the batch exercises the source mask
    assert np.abs(got - hf["logits"]).max() <= 1e-5 * np.abs(hf["logits"]).max()
    sizes = sum(p.stat().st_size for p in MARIAN_TINY.iterdir())
    assert sizes < 100_000  # small enough to commit


def test_marian_tiny_reference_is_what_transformers_computes():
    """The committed logits are transformers' own for the committed weights (rerun here)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from safetensors.numpy import load_file

    hf = load_file(MARIAN_TINY / "hf_reference.safetensors")
    model = transformers.MarianMTModel.from_pretrained(MARIAN_TINY).eval()
    pad = model.config.pad_token_id
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor(hf["src"]),
            attention_mask=torch.tensor(hf["src"] != pad),
            decoder_input_ids=torch.tensor(hf["tgt_in"]),
        ).logits.numpy()
    assert np.abs(logits - hf["logits"]).max() <= 1e-5 * np.abs(hf["logits"]).max()
