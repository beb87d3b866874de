"""Helpers (not tests) for the lesson tests: a notebook's code or markdown cells, the images
its markdown embeds, the check that it ships each exercise as a placeholder and calls each
check once, and the helpers of the exercise tests (the hint a wrong answer gets, a Function
class made of two functions, a gradient by central differences). Importing it puts
``lessons/`` on ``sys.path`` (the lessons' own ``checks``, ``solutions`` and ``figures``
packages) and gives ``LESSONS`` and ``checks``."""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
sys.path.insert(0, str(LESSONS))  # the lessons' packages: checks, solutions, figures
checks = importlib.import_module("checks")

# ![caption](path "title"), ![caption](<path>) and <img src="path">
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?[^)]*\)|<img[^>]*\ssrc=[\"']([^\"']+)[\"']")
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.I)  # http:, https:, mailto:, data:


def _cells(notebook: Path, kind: str) -> list[str]:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def code_cells(notebook: Path) -> list[str]:
    """The source of every code cell of ``notebook``, in order."""
    return _cells(notebook, "code")


def code_before(notebook: Path, name: str) -> str:
    """The code cells of ``notebook`` above the one that defines ``def name(`` (an exercise),
    joined: what a learner has seen before writing it."""
    cells = code_cells(notebook)
    at = next(i for i, c in enumerate(cells) if f"def {name}(" in c)
    return "\n".join(cells[:at])


def markdown_cells(notebook: Path) -> list[str]:
    """The text of every markdown cell of ``notebook``, in order."""
    return _cells(notebook, "markdown")


def references(notebook: Path, pattern: re.Pattern) -> list[str]:
    """What ``pattern`` (IMAGE, or a link pattern: group 1 or 2 is the target) finds in the
    markdown of ``notebook``, external URLs (http:, data:, attachment:, ...) left out."""
    found = [
        m.group(1) or m.group(2)
        for text in markdown_cells(notebook)
        for m in pattern.finditer(text)
    ]
    return [ref for ref in found if not EXTERNAL.match(ref)]


def assert_ships_placeholders(
    notebook: Path, lesson: int, checks: Iterable[str], exercises: Iterable[str]
) -> None:
    """Each ``check_NN_K(`` is called once, and each exercise function is defined by exactly
    one cell that holds only its placeholder (raises NotImplementedError, returns nothing)."""
    cells = code_cells(notebook)
    text = "\n".join(cells)
    for name in checks:
        assert text.count(f"check_{name}(") == 1, f"lesson {lesson} must call check_{name} once"
    for name in exercises:
        defining = [c for c in cells if f"def {name}(" in c]
        assert len(defining) == 1, f"no single exercise cell defines {name}"
        assert "NotImplementedError(" in defining[0] and "return" not in defining[0], (
            f"the cell defining {name} ships more than a placeholder"
        )


def hint_of(check: Callable, answer: Any) -> str:
    """The message of the AssertionError ``check(answer)`` must fail with (its hint)."""
    with pytest.raises(AssertionError) as err:
        check(answer)
    return str(err.value)


def function_class(forward: Callable, backward: Callable) -> type:
    """A library ``Function`` subclass made of two plain functions (wrong or alternative
    answers to the exercises that ask for a Function)."""
    from minitransformer.function import Function

    return type(
        "Answer",
        (Function,),
        {"forward": staticmethod(forward), "backward": staticmethod(backward)},
    )


def central_difference(loss: Callable[[np.ndarray], float], a: Any, h: float) -> np.ndarray:
    """d loss / d a by central differences of step ``h`` in float64, one entry at a time
    (the numerical answer an analytic-derivative check must refuse)."""
    a = np.array(a, dtype=np.float64)
    grad = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[i] += h
        down[i] -= h
        grad[i] = (loss(up) - loss(down)) / (2 * h)
    return grad
