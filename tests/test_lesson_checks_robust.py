"""No exercise check crashes on a learner's answer: whatever it is given, it either accepts it,
says "not attempted yet", or fails with an AssertionError that says what is wrong
(lessons/checks/_shared.py's ``_exercise`` wrapper turns any other error into one).

The odd answers are ones learners hand in: a function that returns a string, one that
raises, a library Tensor, a bare number where a function was asked for, a list."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lessons"))
import checks  # noqa: E402

import minitransformer as mt  # noqa: E402

CHECKS = sorted(n for n in dir(checks) if n.startswith("check_"))


def _raises(*args, **kwargs):
    raise ValueError("my own bug")


ODD = {
    "returns a string": lambda *a, **k: "nonsense",
    "raises": _raises,
    "returns a Tensor": lambda *a, **k: mt.tensor(np.ones((2, 3))),
    "a number": 3.0,
    "a string": "my answer",
    "a list": [1, 2, 3],
}


def _arity(name: str) -> int:
    check = getattr(checks, name)
    params = inspect.signature(inspect.unwrap(check)).parameters.values()
    return sum(p.default is p.empty and p.kind == p.POSITIONAL_OR_KEYWORD for p in params)


@pytest.mark.parametrize("answer", ODD, ids=list(ODD))
@pytest.mark.parametrize("name", CHECKS)
def test_a_check_never_crashes(name, answer, capsys):
    args = [ODD[answer]] * max(_arity(name), 1)
    try:
        result = getattr(checks, name)(*args)
    except AssertionError as error:
        assert str(error), f"{name} failed {answer!r} without a message"
        return
    # accepted or "not attempted": never silently on a wrong kind of answer
    assert result in (checks.CORRECT, checks.NOT_ATTEMPTED)
    assert result is checks.NOT_ATTEMPTED or answer == "returns a Tensor", (name, answer)


def test_the_wrapper_chains_the_original_error():
    with pytest.raises(AssertionError, match="ValueError: my own bug") as info:
        checks.check_03_2(_raises)
    assert isinstance(info.value.__cause__, ValueError)
