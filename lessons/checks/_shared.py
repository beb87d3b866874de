"""What every lesson's checks share: the ``_exercise`` wrapper and its two results, seeded inputs.

- ``_exercise(name)`` wraps a check: a placeholder answer (``None``, or code that raises
  ``NotImplementedError``) prints ``not attempted yet`` and returns ``NOT_ATTEMPTED``, which is
  ``None`` so that Jupyter shows no ``Out[]`` under the check cell; an answer that passes prints
  ``✓ ... correct`` and returns ``CORRECT`` (lessons test it: ``if checks.check_NN_K(...) ==
  checks.CORRECT:`` runs an experiment only on a right answer); a wrong one raises the check's
  ``AssertionError``. A check never crashes on an answer: anything else raised while checking it
  (the answer's own error, or a value of a kind the check cannot use: a string, a Tensor where
  an array was meant, a wrong shape) becomes an ``AssertionError`` that names the error and
  what to return, chained to the original so the traceback still shows the line.
- ``_rng(seed)``: the seeded NumPy generator every check draws its inputs from.
- ``_softmax(s)``: a plain NumPy softmax over the last axis (lessons 05 and 06).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

CORRECT = "correct"
# None, not a string: a check cell that ends in a bare call on a placeholder shows only the
# printed line, no Out[] (Jupyter displays every other value); tests tell it from CORRECT
NOT_ATTEMPTED = None


class _NotAttempted(Exception):
    pass


def _exercise(name: str) -> Callable:
    """Wrap a check: placeholder -> 'not attempted yet' (None), pass -> '✓ correct' (CORRECT)."""

    def wrap(check: Callable) -> Callable:
        @functools.wraps(check)
        def run(*args: Any, **kwargs: Any) -> str | None:
            if any(a is None for a in args):
                print(f"{name}: not attempted yet (replace the placeholder, then run this cell)")
                return NOT_ATTEMPTED
            try:
                check(*args, **kwargs)
            except (NotImplementedError, _NotAttempted):
                print(f"{name}: not attempted yet (replace the placeholder, then run this cell)")
                return NOT_ATTEMPTED
            except AssertionError:
                raise
            except Exception as error:  # the answer raised, or is of a kind the check can't use
                raise AssertionError(
                    f"{name}: checking your answer raised {type(error).__name__}: {error}. "
                    "If the traceback above ends in your code, that is where to look; else "
                    "return what the exercise asks for (its type and shape are in its text)"
                ) from error
            print(f"✓ {name}: correct")
            return CORRECT

        return run

    return wrap


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
