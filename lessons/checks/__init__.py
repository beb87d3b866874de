"""Checks for the exercises of every lesson (00-21), one function per exercise: ``check_NN_K``.

A notebook's check cell calls ``checks.check_NN_K(<your answer>)``. Each check

- prints ``not attempted yet`` and returns ``None`` (``NOT_ATTEMPTED``: the cell shows no
  ``Out[]``) while the exercise still holds its placeholder (``raise NotImplementedError(...)``
  in a function, or ``None``), so the notebook runs top to bottom before you have solved
  anything;
- raises ``WrongAnswer`` (an ``AssertionError``) when the answer is wrong: its message is the
  hint, ``✗ Exercise K (...): ...``, and in Jupyter the cell shows that hint first and alone,
  with no frame of these checks (and, when your own code raised, its traceback);
- prints ``✓ correct`` and returns ``"correct"`` (``CORRECT``, which Jupyter does not echo as
  an ``Out[]``) when it is right.

Checks build their own inputs (seeded), so they depend on nothing a notebook defines except
what is passed in; tests/test_lesson_exercises.py runs them on the reference solutions in
lessons/solutions/ and on known wrong answers. Hints say where to look, not the formula.

Lesson NN's checks live in ``lessonNN.py``; what they share (the ``_exercise`` wrapper that
turns a placeholder into "not attempted yet", the seeded ``_rng``) in ``_shared.py``. This
package re-exports every ``check_NN_K``, so a notebook only needs ``import checks``.
"""

from ._shared import CORRECT, NOT_ATTEMPTED, WrongAnswer
from .lesson00 import check_00_1, check_00_2
from .lesson01 import check_01_1, check_01_2, check_01_3
from .lesson02 import check_02_1, check_02_2, check_02_3
from .lesson03 import check_03_1, check_03_2, check_03_3
from .lesson04 import check_04_1, check_04_2, check_04_3
from .lesson05 import check_05_1, check_05_2, check_05_3
from .lesson06 import check_06_1, check_06_2, check_06_3
from .lesson07 import check_07_1, check_07_2, check_07_3
from .lesson08 import check_08_1, check_08_2, check_08_3
from .lesson09 import check_09_1, check_09_2, check_09_3
from .lesson10 import check_10_1, check_10_2, check_10_3
from .lesson11 import check_11_1, check_11_2, check_11_3
from .lesson12 import check_12_1, check_12_2, check_12_3
from .lesson13 import check_13_1, check_13_2, check_13_3
from .lesson14 import check_14_1, check_14_2, check_14_3
from .lesson15 import check_15_1, check_15_2
from .lesson16 import check_16_1, check_16_2, check_16_3
from .lesson17 import check_17_1, check_17_2, check_17_3
from .lesson18 import check_18_1, check_18_2, check_18_3
from .lesson19 import check_19_1, check_19_2
from .lesson20 import check_20_1, check_20_2, check_20_3
from .lesson21 import check_21_1, check_21_2, check_21_3

__all__ = [
    "CORRECT",
    "NOT_ATTEMPTED",
    "WrongAnswer",
    "check_00_1",
    "check_00_2",
    "check_01_1",
    "check_01_2",
    "check_01_3",
    "check_02_1",
    "check_02_2",
    "check_02_3",
    "check_03_1",
    "check_03_2",
    "check_03_3",
    "check_04_1",
    "check_04_2",
    "check_04_3",
    "check_05_1",
    "check_05_2",
    "check_05_3",
    "check_06_1",
    "check_06_2",
    "check_06_3",
    "check_07_1",
    "check_07_2",
    "check_07_3",
    "check_08_1",
    "check_08_2",
    "check_08_3",
    "check_09_1",
    "check_09_2",
    "check_09_3",
    "check_10_1",
    "check_10_2",
    "check_10_3",
    "check_11_1",
    "check_11_2",
    "check_11_3",
    "check_12_1",
    "check_12_2",
    "check_12_3",
    "check_13_1",
    "check_13_2",
    "check_13_3",
    "check_14_1",
    "check_14_2",
    "check_14_3",
    "check_15_1",
    "check_15_2",
    "check_16_1",
    "check_16_2",
    "check_16_3",
    "check_17_1",
    "check_17_2",
    "check_17_3",
    "check_18_1",
    "check_18_2",
    "check_18_3",
    "check_19_1",
    "check_19_2",
    "check_20_1",
    "check_20_2",
    "check_20_3",
    "check_21_1",
    "check_21_2",
    "check_21_3",
]
