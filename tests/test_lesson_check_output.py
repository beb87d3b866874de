"""What a learner sees under a check cell (lessons/checks/_shared.py's ``_exercise`` and
``WrongAnswer``), in a real Jupyter kernel and in plain Python.

- A wrong answer fails the cell (so Run All stops there) and shows the hint first and alone:
  ``✗ Exercise K (...): ...``, with no frame of the checks (``_shared.py``, ``wrap.<locals>``,
  ``checks/lessonNN.py``).
- When the learner's own code raised, the hint is followed by that code's traceback (the
  learner's cell and line), still without the checks' frames.
- A right answer prints ``✓ ... correct`` and shows no ``Out[]`` line, though the check still
  returns ``CORRECT`` (the lessons run an experiment ``if check(...) == checks.CORRECT``).
- Outside IPython a wrong answer is an ordinary ``AssertionError`` whose message is the hint.

The notebook is built here (a few cells a learner could write) and run once, with nbclient,
in a fresh ``python3`` kernel whose working directory is ``lessons/``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks

ANSI = re.compile(r"\x1b\[[0-9;]*m")
INTERNALS = ("_shared.py", "wrap.<locals>", "checks/lesson", "lesson05.py", "lesson09.py")

# case -> (the learner's answer cell, the check cell, what the hint must say, the learner's
# line that the traceback must show, or None when their code raised nothing)
WRONG = {
    "a shape the check refuses": (
        "def padding_mask_from_lengths(lengths, S):\n"
        "    return np.arange(S)[None, :] < np.asarray(lengths)[:, None]",
        "checks.check_05_2(padding_mask_from_lengths)",
        "✗ Exercise 2 (padding mask from lengths): shape must be (B, 1, 1, S)",
        None,
    ),
    "values the check refuses": (
        "def local_causal_mask(T, w):\n    return np.tril(np.ones((T, T), dtype=bool))[None, None]",
        "checks.check_05_3(local_causal_mask)",
        "✗ Exercise 3 (local causal mask): T=6, w=1: query t must see the w most recent keys",
        None,
    ),
    "a value of a kind the check cannot use": (
        "answer = 'my answer'",
        "checks.check_05_2(answer)",
        "✗ Exercise 2 (padding mask from lengths): checking your answer raised TypeError",
        None,
    ),
    "the learner's own error": (
        "def local_causal_mask(T, w):\n    i = np.arange(T)\n    return mask_of(i, w)",
        "checks.check_05_3(local_causal_mask)",
        "✗ Exercise 3 (local causal mask): your code raised NameError: name 'mask_of' is not",
        "return mask_of(i, w)",
    ),
    "a hint about the learner's own error": (
        "import math\n\n"
        "def floor_offset(eps):\n"
        "    return -(1 - eps) * math.log(1 - eps) - eps * math.log(eps)",
        "checks.check_09_2(floor_offset)",
        "✗ Exercise 2 (the floor for a large vocabulary): floor_offset(0.0) raised ValueError",
        "return -(1 - eps) * math.log(1 - eps) - eps * math.log(eps)",
    ),
}

RIGHT = {
    "a bare check call": (
        "def padding_mask_from_lengths(lengths, S):\n"
        "    mask = np.arange(S)[None, :] < np.asarray(lengths)[:, None]\n"
        "    return mask[:, None, None, :]",
        "checks.check_05_2(padding_mask_from_lengths)",
        "✓ Exercise 2 (padding mask from lengths): correct",
    ),
    "a check whose result a lesson tests": (
        "def local_causal_mask(T, w):\n"
        "    i, j = np.arange(T)[:, None], np.arange(T)[None, :]\n"
        "    return ((j <= i) & (j > i - w))[None, None]",
        "if checks.check_05_3(local_causal_mask) == checks.CORRECT:\n    print('experiment ran')",
        "✓ Exercise 3 (local causal mask): correct\nexperiment ran",
    ),
}


@pytest.fixture(scope="module")
def shown() -> dict[str, list[dict]]:
    """The outputs of each case's check cell, from one run of the notebook in a kernel."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("import numpy as np\nimport checks"))
    where = {}
    for case, (answer, check, *_) in {**WRONG, **RIGHT}.items():
        nb.cells.append(nbformat.v4.new_code_cell(answer))
        nb.cells.append(nbformat.v4.new_code_cell(check))
        where[case] = len(nb.cells) - 1
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,
        allow_errors=True,  # to see every case; each wrong one must fail its cell
        resources={"metadata": {"path": str(LESSONS)}},
    )
    client.execute()
    return {case: nb.cells[i].outputs for case, i in where.items()}


def _traceback(outputs: list[dict]) -> list[str]:
    """The lines a wrong answer's cell shows (its one output, an error), ANSI codes removed."""
    assert [out["output_type"] for out in outputs] == ["error"], outputs
    assert outputs[0]["ename"] == "WrongAnswer"
    return ANSI.sub("", "\n".join(outputs[0]["traceback"])).splitlines()


@pytest.mark.parametrize("case", WRONG)
def test_a_wrong_answer_shows_the_hint_first_and_no_internals(shown, case):
    lines = _traceback(shown[case])
    _, _, hint, line = WRONG[case]
    assert lines[0].startswith(hint), lines[0]
    text = "\n".join(lines)
    assert not [name for name in INTERNALS if name in text], text
    if line is None:
        assert lines == lines[:1], f"the hint must come alone:\n{text}"


@pytest.mark.parametrize("case", [c for c in WRONG if WRONG[c][3] is not None])
def test_the_learners_own_error_keeps_its_traceback(shown, case):
    text = "\n".join(_traceback(shown[case]))
    assert "Cell In[" in text and WRONG[case][3] in text, text
    assert text.index("Cell In[") > text.index("✗ Exercise"), text


@pytest.mark.parametrize("case", RIGHT)
def test_a_right_answer_prints_correct_and_no_out_line(shown, case):
    outputs = shown[case]
    assert [out["output_type"] for out in outputs] == ["stream"], outputs
    assert outputs[0]["text"].strip() == RIGHT[case][2]


def _own_bug(lengths, S):
    return np.asarray(lengths).reshape(7, 7)


@pytest.mark.parametrize(
    "answer, hint",
    [
        (lambda lengths, S: np.ones((len(lengths), S), bool), "shape must be (B, 1, 1, S)"),
        (lambda lengths, S: np.ones((len(lengths), 1, 1, S)), "the mask must be bool"),
        (_own_bug, "your code raised ValueError: cannot reshape"),
        (42, "checking your answer raised TypeError"),
    ],
)
def test_outside_ipython_a_wrong_answer_is_an_assertion_error_with_the_hint(answer, hint):
    with pytest.raises(AssertionError) as err:
        checks.check_05_2(answer)
    assert isinstance(err.value, checks.WrongAnswer)
    assert str(err.value).startswith(f"✗ Exercise 2 (padding mask from lengths): {hint}")
    # what IPython would show, here without IPython: the hint, then only the learner's frames
    lines = err.value._render_traceback_()
    assert lines[0] == str(err.value)
    assert not [name for name in INTERNALS if name in "\n".join(lines)]
    if answer is _own_bug:
        assert err.value.__cause__ is err.value.yours
        assert err.value.yours.__traceback__.tb_frame.f_code.co_name == "_own_bug"
        assert "in _own_bug" in "\n".join(lines)
    else:
        assert lines == lines[:1] and err.value.yours is None


def test_correct_is_still_the_string_correct():
    """Jupyter does not echo it, but a lesson or a test still compares with it."""
    assert checks.CORRECT == "correct" and isinstance(checks.CORRECT, str)
