"""Helpers (not tests) for the lesson-exercise tests: a notebook's code cells, and the check
that it ships each exercise as a placeholder and calls each check once."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path


def code_cells(notebook: Path) -> list[str]:
    """The source of every code cell of ``notebook``, in order."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


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
