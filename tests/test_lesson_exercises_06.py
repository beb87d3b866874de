"""Lesson 06 (multi-head attention), issue 28: no exercise is answered above it.

- 06.1 counts the parameters of a layer whose heads have queries and keys of width d_k (the
  paper's Table 3, rows B), not only 4D² + 4D, which the text states ("4 matrices ... (plus
  biases)"); building the layer to count it fails; each miscount gets its own hint.
- 06.2 (one head by slicing): the "3h+1 matrices" cell above now slices only W^O's rows, so it
  no longer computes head i from column slices; an answer that computes the whole projection
  and keeps head i fails (the text asks for head i's slices), and so do a forgotten bias slice
  and the scale √D, each with its own hint.
- Issue 46: 06.2's slices ("head i owns columns i·d_k..(i+1)·d_k") are no longer stated above the
  exercise (cells "The math" and the summary): they follow the exercises. 06.3 hands the
  weights themselves to the answer: one that writes into them (zeros replaced by ones, in
  place) fails (the inputs guard of checks/_inputs.py), one that copies first passes. The
  training cell's printed loss spike is described by a findings cell from the run's own losses.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_cells, markdown_cells
from lesson_notebooks import hint_of as _fails
from test_lesson_exercises import _head_rows_not_columns as _rows_not_columns

import minitransformer as mt

NOTEBOOK = LESSONS / "06_multihead_attention.ipynb"
s6 = importlib.import_module("solutions.lesson06")


# ------------------------------------------------------------------ 06.1
def _count(D, h, d_k, qk=True, biases=True, v_and_o=True, heads=True):
    """A count with one mistake (the defaults: none)."""
    width = (h if heads else 1) * (d_k if qk else D // h)
    b = 1 if biases else 0
    return 2 * (D * width + b * width) + (2 * (D * D + b * D) if v_and_o else 0)


COUNT_WRONG = {
    "d_k taken as D/h": (lambda D, h, d_k: _count(D, h, d_k, qk=False), "which projections"),
    "values h·d_k wide too": (lambda D, h, d_k: 4 * (D + 1) * h * d_k, "d_v = D/h"),
    "no biases": (lambda D, h, d_k: _count(D, h, d_k, biases=False), "biases too"),
    "only W_q and W_k": (lambda D, h, d_k: _count(D, h, d_k, v_and_o=False), "four projections"),
    "one head": (lambda D, h, d_k: _count(D, h, d_k, heads=False), "h of them"),
    "other": (lambda D, h, d_k: 1, "Linear layers"),
    "the library's layer": (
        lambda D, h, d_k: mt.nn.MultiHeadAttention(D, h, d_k=d_k).num_parameters(),
        "calls the library",
    ),
}


@pytest.mark.parametrize("name", COUNT_WRONG)
def test_06_1_each_mistake_has_its_hint(name):
    answer, hint = COUNT_WRONG[name]
    assert hint in _fails(checks.check_06_1, answer)


def test_06_1_accepts_a_numpy_integer():
    assert checks.check_06_1(lambda D, h, d_k: np.int64(_count(D, h, d_k))) == checks.CORRECT


# ------------------------------------------------------------------ 06.2
def _split(x, h):
    B, L, D = x.shape
    return x.reshape(B, L, h, D // h).transpose(0, 2, 1, 3)


def _whole_projection(x_q, x_kv, W, h, i):  # right numbers, but every head's columns computed
    q = _split(x_q @ W["wq"] + W["bq"], h)
    k = _split(x_kv @ W["wk"] + W["bk"], h)
    v = _split(x_kv @ W["wv"] + W["bv"], h)
    return s6._attention(q, k, v)[:, i]


def _sliced(x_q, x_kv, W, h, i, bias=True, scale=None):
    d_k = W["wq"].shape[0] // h
    c = slice(i * d_k, (i + 1) * d_k)
    b = {n: (W[f"b{n}"][c] if bias else 0.0) for n in "qkv"}
    q = x_q @ W["wq"][:, c] + b["q"]
    k = x_kv @ W["wk"][:, c] + b["k"]
    v = x_kv @ W["wv"][:, c] + b["v"]
    s = q @ np.swapaxes(k, -1, -2) / (scale or np.sqrt(d_k))
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


HEAD_WRONG = {
    "the whole projection": (_whole_projection, "whole projection"),
    "no bias slice": (lambda *a: _sliced(*a, bias=False), "the biases"),
    "scaled by sqrt(D)": (lambda *a: _sliced(*a, scale=np.sqrt(a[2]["wq"].shape[0])), "own width"),
    "rows, not columns": (_rows_not_columns, "which columns"),
}


@pytest.mark.parametrize("name", HEAD_WRONG)
def test_06_2_each_mistake_has_its_hint(name):
    answer, hint = HEAD_WRONG[name]
    assert hint in _fails(checks.check_06_2, answer)


def _einsum_head(x_q, x_kv, W, h, i):
    d_k = W["wq"].shape[0] // h
    c = slice(i * d_k, (i + 1) * d_k)
    q = np.einsum("btd,dk->btk", x_q, np.asarray(W["wq"])[:, c]) + W["bq"][c]
    k = np.einsum("bsd,dk->bsk", x_kv, np.asarray(W["wk"])[:, c]) + W["bk"][c]
    v = np.einsum("bsd,dk->bsk", x_kv, np.asarray(W["wv"])[:, c]) + W["bv"][c]
    return s6._attention(q, k, v)


@pytest.mark.parametrize("answer", [s6.head_output, _sliced, _einsum_head])
def test_06_2_accepts_sliced_forms(answer):
    assert checks.check_06_2(answer) == checks.CORRECT


# ------------------------------------------------------------------ the notebook
def test_no_code_before_exercise_2_slices_the_input_projections():
    code = code_cells(NOTEBOOK)
    first = next(i for i, c in enumerate(code) if "def head_output(" in c)
    before = "\n".join(code[:first])
    for sliced in ('W["wq"][:,', 'W["wk"][:,', 'W["wv"][:,', 'W["bq"]['):
        assert sliced not in before, sliced


def test_the_3h_plus_1_cell_still_checks_the_output_side():
    cell = next(c for c in code_cells(NOTEBOOK) if "out_sum" in c)
    assert 'W["wo"][rows, :]' in cell and "assert np.allclose(out_sum, mine)" in cell


def test_nothing_above_exercise_2_states_the_slices():
    text = "\n".join(markdown_cells(NOTEBOOK))
    at = text.index("### Exercise 2")
    for giveaway in ("owns columns", r"columns $i\,d_k", "are head $i$'s"):
        assert giveaway not in text[:at], giveaway
    assert "owns columns" in text[at:]  # written down after the exercises


# ------------------------------------------------------------------ 06.3: inputs unchanged
def _zeros_to_ones_in_place(w):  # 0 log 0 handled by writing into the caller's weights
    w[w == 0] = 1.0
    return -(w * np.log(w)).sum(-1).mean(-1)


def _zeros_to_ones_on_a_copy(w):
    w = np.array(w, dtype=float)
    w[w == 0] = 1.0
    return -(w * np.log(w)).sum(-1).mean(-1)


def test_06_3_an_answer_that_writes_into_the_weights_fails():
    assert "in place" in _fails(checks.check_06_3, _zeros_to_ones_in_place)


def test_06_3_the_same_on_a_copy_passes():
    assert checks.check_06_3(_zeros_to_ones_on_a_copy) == checks.CORRECT


# ------------------------------------------------------------------ the loss spike
def test_the_loss_spike_is_described_from_the_run():
    code = code_cells(NOTEBOOK)
    train = next(i for i, c in enumerate(code) if "def train_reverse(" in c)
    findings = code[train + 1]
    assert "losses" in findings and "does not clip" in findings and "09_training.ipynb" in findings
