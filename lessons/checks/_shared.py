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
- ``_library_calls(fn, *args)`` and ``_without_library(fn, *args, where=, instead=)``: whether
  an answer calls into the library (``minitransformer``) where an exercise asks for the
  learner's own code, told by a profile hook (lessons 01, 02, 04-06, 08, 10, 11, 17, 18).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import minitransformer as mt

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


_LIBRARY = str(Path(mt.__file__).resolve().parent)  # the minitransformer package
_CHECKS = str(Path(__file__).resolve().parent)  # these checks: their own calls do not count
_CONTEXT = {"save_for_backward"}  # what a Function's forward may call on its ctx
# converting to and from a library Tensor computes nothing: an answer may return a Tensor
_CONVERSIONS = {
    "minitransformer.tensor.tensor",
    "minitransformer.tensor.Tensor.numpy",
    "minitransformer.tensor.Tensor.item",
}


def _library_calls(
    fn: Callable, *args: Any, record: set[str] | None = None, also: tuple[str, ...] = ()
) -> tuple[Any, set[str]]:
    """``(fn(*args), the library functions it called)``: every function of the minitransformer
    package that code outside the package and outside these checks called directly while
    ``fn`` ran (a profile hook sees each Python call; the library's calls inside itself and a
    Function's ``ctx.save_for_backward`` and the conversions to and from a Tensor are left
    out). Names are ``module.qualname``. The names also go into ``record`` when given, so that
    they are known if ``fn`` raises. ``also``: folders of other packages watched the same way
    (lesson 10 watches sacreBLEU, the oracle of its checks)."""
    called: set[str] = set() if record is None else record
    roots = (_LIBRARY, *also)

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or frame.f_back is None:
            return
        callee, caller = frame.f_code.co_filename, frame.f_back.f_code.co_filename
        inside = callee.startswith(roots) and not caller.startswith((*roots, _CHECKS))
        if inside and frame.f_code.co_name not in _CONTEXT:
            name = f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_qualname}"
            if name not in _CONVERSIONS:
                called.add(name)

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(previous)
    return result, called


def _without_library(
    fn: Callable, *args: Any, where: str, instead: str, also: tuple[str, ...] = ()
) -> Any:
    """``fn(*args)``, failing with a hint when it called into the library (or a package in
    ``also``): the exercise asks for the computation the library would do (``instead`` says
    what to write)."""
    result, called = _library_calls(fn, *args, also=also)
    assert not called, (
        f"{where} calls the library ({', '.join(sorted(called))}): this exercise asks you "
        f"to write that computation yourself; hint: {instead}"
    )
    return result
