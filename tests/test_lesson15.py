"""Lesson 15's exercise checks tell right from wrong: the reference solutions pass, the
placeholders are "not attempted", the mistakes a learner makes fail (each with its hint: a
merge whose state of no keys keeps m = 0 fails on a masked prefix followed by scores near
-1000, pointing at the empty state), and other valid forms (another shift, float32, a
log-space merge, a (T,) shaped m and l, library Tensors) pass; an answer that is not numbers
fails with an AssertionError, never a crash. The notebook ships placeholders, calls each
check once, and shows no formula for exercise 2 before it."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks

import minitransformer as mt

solutions = importlib.import_module("solutions.lesson15")


def placeholder(*args, **kwargs):
    raise NotImplementedError("exercise: your code here")


# ----------------------------------------------------------------- exercise 1: merge
def _shift(m):
    return np.where(np.isneginf(m), 0.0, m)


def merge_no_acc_rescale(a, b):  # l rescaled, acc forgotten
    m = np.maximum(a[0], b[0])
    wa, wb = np.exp(a[0] - _shift(m)), np.exp(b[0] - _shift(m))
    return m, wa * a[1] + wb * b[1], a[2] + b[2]


def merge_keeps_first_max(a, b):  # shift to a's max: exp of a positive difference overflows
    wb = np.exp(b[0] - a[0])
    return a[0], a[1] + wb * b[1], a[2] + wb * b[2]


def merge_nan_on_empty(a, b):  # no care for m = -inf
    m = np.maximum(a[0], b[0])
    wa, wb = np.exp(a[0] - m), np.exp(b[0] - m)
    return m, wa * a[1] + wb * b[1], wa * a[2] + wb * b[2]


def merge_wrong_sign(a, b):
    m = np.maximum(a[0], b[0])
    wa, wb = np.exp(_shift(m) - a[0]), np.exp(_shift(m) - b[0])
    return m, wa * a[1] + wb * b[1], wa * a[2] + wb * b[2]


def merge_adds(a, b):  # states added as they are
    return np.maximum(a[0], b[0]), a[1] + b[1], a[2] + b[2]


def merge_normalised_average(a, b):  # averages the two outputs with equal weight
    m = np.maximum(a[0], b[0])
    wa, wb = np.exp(a[0] - _shift(m)), np.exp(b[0] - _shift(m))
    l = wa * a[1] + wb * b[1]
    with np.errstate(invalid="ignore"):
        out = 0.5 * (a[2] / a[1] + b[2] / b[2])
    return m, l, np.nan_to_num(out) * l


def merge_in_log_space(a, b):
    """Another valid form: shift = the union's log-sum-exp, so l = 1 (or 0 with no key)."""
    with np.errstate(divide="ignore"):
        la, lb = a[0] + np.log(a[1]), b[0] + np.log(b[1])
    lse = np.logaddexp(la, lb)
    shift = np.where(np.isneginf(lse), 0.0, lse)
    wa = np.where(a[1] > 0, np.exp(la - shift) / np.where(a[1] > 0, a[1], 1), 0.0)
    wb = np.where(b[1] > 0, np.exp(lb - shift) / np.where(b[1] > 0, b[1], 1), 0.0)
    return lse, wa * a[1] + wb * b[1], wa * a[2] + wb * b[2]


def merge_flat(a, b):
    """Valid, with m and l returned as (T,) vectors and as a list."""
    m, l, acc = solutions.merge(a, b)
    return [m.ravel(), l.ravel(), acc]


def merge_float32(a, b):
    return tuple(np.asarray(x, np.float32) for x in solutions.merge(a, b))


def merge_tensors(a, b):
    """Valid: the state as minitransformer Tensors."""
    return tuple(mt.tensor(x, dtype="float64") for x in solutions.merge(a, b))


def merge_empty_is_zero(a, b):  # NaN avoided by giving the state of no keys m = 0
    m = np.maximum(a[0], b[0])
    m = np.where(np.isneginf(m), 0.0, m)
    wa, wb = np.exp(a[0] - m), np.exp(b[0] - m)
    return m, wa * a[1] + wb * b[1], wa * a[2] + wb * b[2]


def merge_shift_at_least_zero(a, b):  # shifts by max(m, 0): very negative rows underflow
    shift = np.maximum(np.maximum(a[0], b[0]), 0.0)
    wa, wb = np.exp(a[0] - shift), np.exp(b[0] - shift)
    return shift, wa * a[1] + wb * b[1], wa * a[2] + wb * b[2]


# --------------------------------------------------------- exercise 2: block_probs
def probs_block_softmax(q, k, lse):  # normalised within the block
    s = q @ k.T / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def probs_unscaled(q, k, lse):
    return np.exp(q @ k.T - lse)


def probs_ratio(q, k, lse):  # exp(s) / exp(L): overflows for large scores
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(q @ k.T / np.sqrt(q.shape[-1])) / np.exp(lse)


def probs_plus(q, k, lse):
    return np.exp(q @ k.T / np.sqrt(q.shape[-1]) + lse)


def probs_float32(q, k, lse):
    return solutions.block_probs(q, k, lse).astype(np.float32)


def probs_tensor(q, k, lse):
    return mt.tensor(solutions.block_probs(q, k, lse))


def probs_on_tensors(q, k, lse):  # the library's ops on Tensors: a Tensor back
    q, k, lse = (mt.tensor(x) for x in (q, k, lse))
    return (q @ k.T / float(np.sqrt(q.shape[-1])) - lse).exp()


def probs_exp_clipped(q, k, lse):  # exp(s) / exp(L) with the overflow clipped away
    s = np.minimum(q @ k.T / np.sqrt(q.shape[-1]), 700.0)
    with np.errstate(all="ignore"):
        return np.exp(s) / np.exp(np.minimum(lse, 700.0))


def probs_einsum(q, k, lse):
    s = np.einsum("td,bd->tb", q, k) * q.shape[-1] ** -0.5
    return np.exp(s - np.reshape(lse, (-1, 1)))


def test_solutions_pass():
    assert checks.check_15_1(solutions.merge) == checks.CORRECT
    assert checks.check_15_2(solutions.block_probs) == checks.CORRECT


def test_placeholders_are_not_attempted(capsys):
    assert checks.check_15_1(placeholder) is checks.NOT_ATTEMPTED
    assert checks.check_15_2(placeholder) is checks.NOT_ATTEMPTED
    assert capsys.readouterr().out.count("not attempted yet") == 2


@pytest.mark.parametrize(
    "wrong",
    [
        merge_no_acc_rescale,
        merge_keeps_first_max,
        merge_nan_on_empty,
        merge_wrong_sign,
        merge_adds,
        merge_normalised_average,
    ],
)
def test_wrong_merges_fail(wrong):
    with np.errstate(all="ignore"), pytest.raises(AssertionError):
        checks.check_15_1(wrong)


def test_empty_state_with_m_zero_fails_pointing_at_the_empty_state():
    """m = 0 for the state of no keys: right until a masked prefix meets scores below -745."""
    with np.errstate(all="ignore"), pytest.raises(AssertionError) as info:
        checks.check_15_1(merge_empty_is_zero)
    message = str(info.value)
    assert "scores near -1000" in message and "no key" in message and "m = -inf" in message


def test_underflow_elsewhere_gets_another_hint():
    with np.errstate(all="ignore"), pytest.raises(AssertionError) as info:
        checks.check_15_1(merge_shift_at_least_zero)
    message = str(info.value)
    assert "underflows" in message and "two states with no key" not in message


@pytest.mark.parametrize("answer", [lambda a, b: ("m", "l", "acc"), lambda a, b: [[1, 2], [3], 4]])
def test_merge_that_returns_no_numbers_fails_cleanly(answer):
    with pytest.raises(AssertionError):
        checks.check_15_1(answer)


@pytest.mark.parametrize("answer", [lambda q, k, lse: "P", lambda q, k, lse: [[1], [2, 3]]])
def test_block_probs_that_returns_no_numbers_fails_cleanly(answer):
    with pytest.raises(AssertionError):
        checks.check_15_2(answer)


@pytest.mark.parametrize("valid", [merge_in_log_space, merge_flat, merge_float32, merge_tensors])
def test_other_valid_merges_pass(valid):
    assert checks.check_15_1(valid) == checks.CORRECT


@pytest.mark.parametrize(
    "wrong", [probs_block_softmax, probs_unscaled, probs_ratio, probs_plus, probs_exp_clipped]
)
def test_wrong_block_probs_fail(wrong):
    with np.errstate(all="ignore"), pytest.raises(AssertionError):
        checks.check_15_2(wrong)


@pytest.mark.parametrize("valid", [probs_float32, probs_einsum, probs_tensor, probs_on_tensors])
def test_other_valid_block_probs_pass(valid):
    assert checks.check_15_2(valid) == checks.CORRECT


def test_failure_messages_do_not_state_the_formula():
    for fn, wrong in ((checks.check_15_1, merge_no_acc_rescale), (checks.check_15_2, probs_ratio)):
        with np.errstate(all="ignore"), pytest.raises(AssertionError) as info:
            fn(wrong)
        assert "exp(m" not in str(info.value) and "exp(s" not in str(info.value)


def test_notebook_ships_placeholders_and_calls_every_check():
    nb = json.loads(next(LESSONS.glob("15_*.ipynb")).read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    text = "\n".join(cells)
    for name in ("check_15_1", "check_15_2"):
        assert text.count(f"checks.{name}(") == 1, name
    for name in ("merge", "block_probs"):
        defining = [c for c in cells if f"def {name}(" in c]
        assert len(defining) == 1 and "NotImplementedError(" in defining[0], name


def test_exercise_2_is_not_written_before_it():
    """No cell before exercise 2 states P_j from L: neither the formula nor the code."""
    nb = json.loads(next(LESSONS.glob("15_*.ipynb")).read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"]]
    exercise = next(i for i, c in enumerate(cells) if "def block_probs(" in c)
    before = "\n".join(cells[:exercise]).replace(" ", "")
    for formula in ("e^{S_j-L}", "e^{s-L}", "-lse)", "e^{S-L}", "-L}"):
        assert formula not in before, formula
    after = "\n".join(cells[exercise:]).replace(" ", "")
    assert "P_j=e^{S_j-L}" in after  # stated once the exercise is behind


def test_online_softmax_figure_draws_every_block():
    """lessons/figures/online_softmax.py: one panel per key block plus the whole row (and
    the colour bar); the running state after the last block is the whole row's (m, l)."""
    from figures.online_softmax import online_softmax_figure, running_states

    for n_keys, block in ((12, 4), (10, 2), (6, 6)):
        fig = online_softmax_figure(n_keys=n_keys, block=block)
        panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        assert len(panels) == n_keys // block + 1
        assert sum(p.get_gid() == "score" for ax in panels for p in ax.patches) == 5 * n_keys * (
            n_keys // block + 1
        )
        fig.canvas.draw()
    s = np.random.default_rng(1).normal(0, 300, (4, 9))
    m, l = running_states(s, 4)[-1]
    assert np.allclose(m, s.max(1)) and np.allclose(l, np.exp(s - s.max(1, keepdims=True)).sum(1))
    with pytest.raises(ValueError):
        online_softmax_figure(n_keys=10, block=4)


def test_the_variants_below_n_squared_are_cited_and_linked():
    """Review row 36 (issue 46): the summary's "sparse, local and linear attention" names the
    papers and points to lesson 20, which builds them; the sentence lesson 20 quotes stays."""
    nb = json.loads((LESSONS / "15_attention_at_length.ipynb").read_text(encoding="utf-8"))
    text = " ".join(
        " ".join("".join(c["source"]).split()) for c in nb["cells"] if c["cell_type"] == "markdown"
    )
    for needed in (
        "Sparse, local and linear attention change the formula itself to go below n²",
        "(20_below_n_squared.ipynb)",
        "Child et al., 2019",
        "Katharopoulos et al., 2020",
    ):
        assert needed in text, needed
