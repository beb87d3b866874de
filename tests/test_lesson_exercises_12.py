"""Lesson 12's exercises and its diagram module.

- Exercise 1 (the projections, counted: the first n at which self-attention with its four
  projections needs at least as many multiply-adds as a recurrent layer with g gates): the
  check rejects the mistakes a learner makes and accepts a right answer in any valid form
  (int, NumPy integer, integral float, one-element array or Tensor, a search).
- Exercises 2 and 3 (dilated layers; additive scores): odd answer types fail with a hint,
  never a crash in the check; each usual slip of the additive score gets its own hint; valid
  forms (a Tensor, a list, a loop over s, the bias added on the query side) pass.
- ``figures/unrolled_rnn.py`` draws both panels and counts what it drew: 2S + 3T boxes,
  2S + 3T - 1 arrows (S more with attention), and a path of 2t + 1 state-to-state arrows
  without attention, 1 with it.
- Section 7's fourth row of Table 1, restricted self-attention, taken from the notebook's own
  cells: its counted multiply-adds are 2·n·(2r + 1)·d, it equals band-masked attention and the
  library's F.local_attention, its graph depth does not grow with n, it forms no (n, n) array,
  and the path search finds ⌈(n − 1)/r⌉ layers.

The shared cases (the solution, the placeholder, wrong answers) are in
tests/test_lesson_exercises.py."""

from __future__ import annotations

import ast
import importlib
import math
from collections import deque

import matplotlib
import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_cells, hint_of

import minitransformer as mt
import minitransformer.functional as F

matplotlib.use("Agg")

s12 = importlib.import_module("solutions.lesson12")
unrolled = importlib.import_module("figures.unrolled_rnn")


def _search(d, g):
    """A right answer by counting, as section 7 does: the four projections and the core
    against the gates' input and recurrent products, n = 1, 2, ... until attention costs as
    much."""
    n = 1
    while 2 * n * n * d + 4 * n * d * d < 2 * g * n * d * d:
        n += 1
    return n


def _search_products(d, g):
    """Another right one: (m, p) @ (p, q) products listed and counted as m·p·q."""

    def macs(products):
        return sum(m * p * q for m, p, q in products)

    n = 1
    while True:
        attention = [(n, d, d)] * 4 + [(n, d, n), (n, n, d)]  # projections, x xᵀ, a V
        recurrent = [(1, d, d)] * (2 * g * n)  # per position and gate: input and recurrent
        if macs(attention) >= macs(recurrent):
            return n
        n += 1


VALID = {
    "the solution": s12.attention_stops_cheaper,
    "a search": _search,
    "products counted": _search_products,
    "float": lambda d, g: float(max(1, (g - 2) * d)),
    "np.int64": lambda d, g: np.int64(max(1, (g - 2) * d)),
    "np.float32": lambda d, g: np.float32(max(1.0, (g - 2.0) * d)),
    "np.maximum": lambda d, g: np.maximum(1, d * (g - 2)),
    "ceil of a ratio": lambda d, g: max(1, math.ceil(d * (2 * g - 4) / 2)),
    "one-element array": lambda d, g: np.array([max(1, (g - 2) * d)]),
    "a Tensor": lambda d, g: mt.tensor(float(max(1, (g - 2) * d))),
}

WRONG = {
    "projections left out (section 7's core)": lambda d, g: g * d,
    "the last cheaper n": lambda d, g: max(1, (g - 2) * d - 1),
    "no floor at n = 1": lambda d, g: (g - 2) * d,
    "strict: attention more expensive": lambda d, g: max(1, (g - 2) * d + 1),
    "three projections (W_o forgotten)": lambda d, g: max(1, math.ceil((g - 1.5) * d)),
    "one product per gate": lambda d, g: max(1, math.ceil((g / 2 - 2) * d)),
    "projections counted twice": lambda d, g: max(1, (g - 4) * d),
    "never cheaper, whatever g": lambda d, g: 1,
    "n = d, whatever g": lambda d, g: d,
    "not a whole number": lambda d, g: max(1, (g - 2) * d) + 0.5,
    "a bool": lambda d, g: True,
    "a string": lambda d, g: str(max(1, (g - 2) * d)),
    "None": lambda d, g: None,
    "the crossover in d units": lambda d, g: max(1, g - 2),
    "section 7's count, (2n - 1)·g·d²": lambda d, g: next(
        n for n in range(1, 10**5) if 2 * n * n * d + 4 * n * d * d >= (2 * n - 1) * g * d * d
    ),
}


@pytest.mark.parametrize("name", VALID)
def test_valid_forms_pass(name, capsys):
    assert checks.check_12_1(VALID[name]) == checks.CORRECT
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("name", WRONG)
def test_wrong_answers_fail(name):
    with pytest.raises(AssertionError):
        checks.check_12_1(WRONG[name])


def test_placeholder_is_not_attempted(capsys):
    def placeholder(d, g):
        raise NotImplementedError("exercise 1")

    assert checks.check_12_1(placeholder) is checks.NOT_ATTEMPTED
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (lambda d, g: g * d, "projections"),
        (lambda d, g: max(1, (g - 2) * d + 1), "equality"),
        (lambda d, g: (g - 2) * d, "at least 1"),
        (lambda d, g: max(1, math.ceil((g / 2 - 2) * d)), "still needs fewer"),
        (lambda d, g: 2.5, "whole number"),
    ],
)
def test_hints_point_where_to_look_without_the_formula(answer, says):
    message = hint_of(checks.check_12_1, answer)
    assert says in message
    assert "g - 2" not in message and "(g−2)" not in message and "n^2" not in message


# ------------------------------------------------ exercise 2: odd types fail with a hint
@pytest.mark.parametrize(
    "answer",
    [lambda n, k: "3", lambda n, k: None, lambda n, k: float("nan"), lambda n, k: True],
    ids=["string", "None", "nan", "bool"],
)
def test_dilated_layers_odd_types_get_a_hint(answer):
    with pytest.raises(AssertionError, match="whole number of layers"):
        checks.check_12_2(answer)


@pytest.mark.parametrize(
    "answer",
    [
        lambda n, k: float(s12.dilated_layers(n, k)),
        lambda n, k: np.int64(s12.dilated_layers(n, k)),
        lambda n, k: mt.tensor(float(s12.dilated_layers(n, k))),
        lambda n, k: next(L for L in range(64) if k**L >= n),
    ],
    ids=["float", "np.int64", "Tensor", "search"],
)
def test_dilated_layers_valid_forms_pass(answer):
    assert checks.check_12_2(answer) == checks.CORRECT


# ------------------------------------------------ exercise 3: a hint per slip, no crash
def _scores(q, m, W_q, W_k, b, v):
    return np.tanh(q @ W_q + m @ W_k + b) @ v


ADDITIVE_VALID = {
    "a Tensor": lambda *a: mt.tensor(_scores(*a)),
    "a list": lambda *a: list(_scores(*a)),
    "a loop over s": lambda q, m, W_q, W_k, b, v: np.array(
        [v @ np.tanh(q @ W_q + ms @ W_k + b) for ms in m]
    ),
    "bias on the query side": lambda q, m, W_q, W_k, b, v: np.tanh((q @ W_q + b) + m @ W_k) @ v,
    "float32": lambda *a: _scores(*a).astype(np.float32).astype(np.float64),
}

ADDITIVE_WRONG = {  # answer, what its hint says
    "no bias": (lambda q, m, W_q, W_k, b, v: np.tanh(q @ W_q + m @ W_k) @ v, "never reaches"),
    "bias outside tanh": (
        lambda q, m, W_q, W_k, b, v: (np.tanh(q @ W_q + m @ W_k) + b) @ v,
        "outside the squashing",
    ),
    "no tanh": (lambda q, m, W_q, W_k, b, v: (q @ W_q + m @ W_k + b) @ v, "not squashed"),
    "tanh after v": (
        lambda q, m, W_q, W_k, b, v: np.tanh((q @ W_q + m @ W_k + b) @ v),
        "after the product with v",
    ),
    "softmaxed": (
        lambda *a: np.exp(_scores(*a)) / np.exp(_scores(*a)).sum(),
        "attention weights",
    ),
    "W_q and W_k swapped": (
        lambda q, m, W_q, W_k, b, v: np.tanh(q @ W_k + m @ W_q + b) @ v,
        "which weight matrix",
    ),
    "shape (S, 1)": (lambda *a: _scores(*a)[:, None], "expected shape"),
    "a string": (lambda *a: "scores", "return a NumPy array"),
    "None": (lambda *a: None, "return a NumPy array"),
    "a dict": (lambda *a: {}, "return a NumPy array"),
    "NaN": (lambda *a: _scores(*a) * np.nan, "NaN"),
    "v forgotten (sum over A)": (
        lambda q, m, W_q, W_k, b, v: np.tanh(q @ W_q + m @ W_k + b).sum(-1),
        "term by term",
    ),
}


@pytest.mark.parametrize("name", ADDITIVE_VALID)
def test_additive_valid_forms_pass(name):
    assert checks.check_12_3(ADDITIVE_VALID[name]) == checks.CORRECT


@pytest.mark.parametrize("name", ADDITIVE_WRONG)
def test_additive_slips_fail_with_their_own_hint(name):
    answer, says = ADDITIVE_WRONG[name]
    message = hint_of(checks.check_12_3, answer)
    assert says in message
    assert "tanh(q" not in message  # a hint says where to look, not the formula


def test_additive_placeholder_is_not_attempted(capsys):
    def placeholder(q, m, W_q, W_k, b, v):
        raise NotImplementedError("exercise 3")

    assert checks.check_12_3(placeholder) is checks.NOT_ATTEMPTED
    assert "not attempted yet" in capsys.readouterr().out


# ------------------------------------------------ the diagram (figures/unrolled_rnn.py)
@pytest.mark.parametrize(("S", "T", "t"), [(4, 4, 2), (5, 5, 3), (3, 6, 0), (1, 1, 0)])
@pytest.mark.parametrize("attention", [False, True])
def test_diagram_draws_its_boxes_and_arrows(S, T, t, attention):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    try:
        p = unrolled.draw_unrolled(ax, S, T, t, attention)
        assert p.boxes == 2 * S + 3 * T  # x and m per source token; input, h, y per output
        assert p.arrows == 2 * S + 3 * T - 1 + (S if attention else 0)
        assert len(ax.patches) == p.boxes + p.arrows
        # the path x_j -> y_t (j = S - 1 - t): without attention the encoder steps after j,
        # the hand-over and t decoder steps; with attention one read
        j = S - 1 - t
        assert p.path_state_arrows == (1 if attention else (S - 1 - j) + 1 + t)
        assert p.path_arrows == p.path_state_arrows + 2  # x_j -> m_j and h_t -> y_t
    finally:
        plt.close(fig)


def test_diagram_figure_two_panels_and_bad_arguments():
    import matplotlib.pyplot as plt

    fig, panels = unrolled.unrolled_figure(S=5, t=3)
    try:
        assert set(panels) == {"without attention", "with attention"}
        assert panels["without attention"].path_state_arrows == 2 * 3 + 1
        assert panels["with attention"].path_state_arrows == 1
        assert len(fig.axes) == 2
        fig.canvas.draw()  # renders without error
    finally:
        plt.close(fig)
    fig, ax = plt.subplots()
    try:
        with pytest.raises(ValueError, match="0 <= t"):
            unrolled.draw_unrolled(ax, S=3, T=3, t=3)
    finally:
        plt.close(fig)


# ------------------------------------------------ section 7: Table 1's fourth row, counted
NOTEBOOK = LESSONS / "12_why_attention.ipynb"
SECTION_7 = {"graph_depth", "mm", "restricted_attention", "max_path_length"}


def _section_7(r: int) -> dict:
    """The lesson's own functions of section 7 (and experiment 1's graph_depth), taken from
    its cells and defined with the reach R = r, so the test counts what the lesson counts."""
    names = {"np": np, "mt": mt, "F": F, "deque": deque, "K": 3, "R": r, "macs": {"n": 0}}
    for cell in code_cells(NOTEBOOK):
        for node in ast.parse(cell).body:
            if isinstance(node, ast.FunctionDef) and node.name in SECTION_7:
                exec(compile(ast.Module([node], []), NOTEBOOK.name, "exec"), names)
    assert SECTION_7 <= names.keys(), "section 7 no longer defines " + str(SECTION_7 - names.keys())
    return names


def _band_attention(x: np.ndarray, r: int) -> np.ndarray:
    """softmax(x xᵀ/√d) x with the keys |i - j| > r masked out: the dense (n, n) reference."""
    n, d = x.shape
    scores = x @ x.T / np.sqrt(d)
    i, j = np.indices((n, n))
    scores[abs(i - j) > r] = -np.inf
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True) @ x


@pytest.mark.parametrize("r", [1, 3, 8])
@pytest.mark.parametrize("n", [1, 5, 16, 40])
def test_restricted_row_counts_2n_2r_plus_1_d_and_computes_band_attention(n, r):
    """The multiply-adds the lesson prints for restricted attention are 2·n·(2r + 1)·d at
    every n and r (the window's padded slots counted, as the convolution's are), and the
    layer it counts computes full attention under the band mask, as the library's op does."""
    lesson, d = _section_7(r), 8
    x_np = np.random.default_rng(n + 10 * r).standard_normal((n, d))
    x = mt.tensor(x_np)
    out = lesson["restricted_attention"](x, None)
    assert lesson["macs"]["n"] == 2 * n * (2 * r + 1) * d
    assert np.abs(out.numpy() - _band_attention(x_np, r)).max() <= 1e-12
    assert np.allclose(F.local_attention(x, x, x, window=r).numpy(), out.numpy(), atol=1e-12)


@pytest.mark.parametrize("r", [1, 4, 8])
def test_restricted_row_has_constant_depth_and_no_n_by_n_array(r):
    """O(1) sequential operations: the autograd graph's depth is the same at every n; and
    the layer never forms an (n, n) array (no tensor of its graph has two axes of size n)."""
    lesson = _section_7(r)
    depths = []
    for n in (3 * r + 5, 6 * r + 11, 64):
        y = lesson["restricted_attention"](mt.tensor(np.ones((n, 4)), requires_grad=True), None)
        depths.append(lesson["graph_depth"](y)[0])
        stack, shapes = [y], []
        while stack:
            node = stack.pop()
            shapes.append(tuple(node.shape))
            if node._ctx is not None:
                stack.extend(p for p in node._ctx.parents if p is not None)
        assert not [s for s in shapes if list(s).count(n) >= 2], (n, set(shapes))
    assert len(set(depths)) == 1, depths


@pytest.mark.parametrize("r", [1, 2, 5, 8])
@pytest.mark.parametrize("n", [2, 5, 17, 33, 64])
def test_restricted_path_is_ceil_n_minus_1_over_r(n, r):
    """The breadth-first search of section 7 finds ⌈(n − 1)/r⌉ layers for restricted
    attention: a window of r carries a signal r positions a layer (the paper's O(n/r))."""
    lesson = _section_7(r)
    assert lesson["max_path_length"](n, "restricted attention", r=r) == math.ceil((n - 1) / r)
