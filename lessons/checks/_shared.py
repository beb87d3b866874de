"""What every lesson's checks share: the ``_exercise`` wrapper and its two results, seeded inputs.

- ``_exercise(name)`` wraps a check: a placeholder answer (``None``, or code that raises
  ``NotImplementedError``) prints ``not attempted yet`` and returns ``NOT_ATTEMPTED``, which is
  ``None`` so that Jupyter shows no ``Out[]`` under the check cell; an answer that passes prints
  ``✓ ... correct`` and returns ``CORRECT``, the string ``"correct"`` that Jupyter does not echo
  either (lessons test it: ``if checks.check_NN_K(...) == checks.CORRECT:`` runs an experiment
  only on a right answer); a wrong one raises ``WrongAnswer``, an ``AssertionError`` whose
  message is the hint, ``✗ Exercise K (...): ...``. A check never crashes on an answer: anything
  else raised while checking it (the answer's own error, or a value of a kind the check cannot
  use: a string, a Tensor where an array was meant, a wrong shape) becomes a ``WrongAnswer``
  that names the error and what to return, chained to the original.
- ``WrongAnswer``: in Jupyter (IPython) a wrong answer's cell shows the hint first and alone,
  no frame of these checks; when the learner's own code raised, the traceback of that code
  follows, starting at the learner's first line (``_render_traceback_``, IPython's hook for
  an exception that renders itself). Elsewhere it is an ordinary ``AssertionError``.
- Inputs unchanged: ``_exercise`` hands the check each answer watched (``_inputs.py``): a
  call that writes into an array the check passed in (``x *= 2``) fails with a hint naming
  the argument, Function classes' forward and backward included; ``_exercise(name,
  writes=(0,))`` exempts an argument the exercise asks the answer to fill (lesson 14's
  buffers).
- ``_rng(seed)``: the seeded NumPy generator every check draws its inputs from.
- ``_softmax(s)``: a plain NumPy softmax over the last axis (lessons 05 and 06).
- ``_library_calls(fn, *args)`` and ``_without_library(fn, *args, where=, instead=)``: whether
  an answer calls into the library (``minitransformer``) where an exercise asks for the
  learner's own code, told by a profile hook (lessons 01, 02, 04-06, 08, 10, 11, 17, 18).
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

import minitransformer as mt

from ._inputs import guarded


class _Correct(str):
    """The string ``"correct"``, which Jupyter shows no ``Out[]`` for: the ``✓`` line the
    check printed says it already. IPython asks a value for its own display through
    ``_ipython_display_``; this one displays nothing."""

    def _ipython_display_(self) -> None:
        pass


CORRECT = _Correct("correct")
# None, not a string: a check cell that ends in a bare call on a placeholder shows only the
# printed line, no Out[] (Jupyter displays every other value); tests tell it from CORRECT
NOT_ATTEMPTED = None


class _NotAttempted(Exception):
    pass


class WrongAnswer(AssertionError):
    """A wrong answer. Its message is the hint: ``✗ Exercise K (what it asks): ...``.

    ``yours`` is the error the learner's own code raised, if it did, its traceback cut to
    start at the learner's code. In IPython (Jupyter) the cell shows the hint, then that
    traceback, and no frame of these checks: IPython calls ``_render_traceback_`` for the
    lines to show. Outside IPython it is an ordinary ``AssertionError``, chained to
    ``yours``."""

    def __init__(self, message: str, yours: BaseException | None = None) -> None:
        super().__init__(message)
        self.yours = yours

    def _render_traceback_(self) -> list[str]:
        """The lines IPython shows for this error: the hint, then the learner's own
        traceback when their code raised."""
        lines = str(self).splitlines()
        if self.yours is not None:
            lines += ["", "Where your code raised it:"]
            lines += _your_traceback(self.yours)
        return lines


def _your_traceback(error: BaseException) -> list[str]:
    """``error``'s traceback as IPython would show it, else as Python does."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is not None:
        try:  # tb_offset=0: IPython's own offset (1) would skip the first frame, the learner's
            return shell.InteractiveTB.structured_traceback(
                type(error), error, error.__traceback__, tb_offset=0
            )
        except Exception:  # another IPython's signature: Python's own form will do
            pass
    return "".join(traceback.format_exception(error)).splitlines()


def _is_yours(filename: str) -> bool:
    """Whether code from ``filename`` is the learner's: a notebook cell, a file of theirs;
    not these checks, the library, Python's own library or an installed package."""
    if filename.startswith("<frozen"):  # Python's own, built in
        return False
    return not os.path.realpath(filename).startswith(_NOT_YOURS)


def _starting_at_yours(tb: TracebackType | None) -> TracebackType | None:
    """The part of traceback ``tb`` from the learner's first frame on (None if no frame of
    it is the learner's: only these checks, the library and installed packages ran)."""
    while tb is not None and not _is_yours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _error_of_yours(error: BaseException) -> BaseException | None:
    """``error``, or the error it was raised from (its cause or context), whose traceback
    passes through the learner's code; that traceback is cut to start there."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yours = _starting_at_yours(current.__traceback__)
        if yours is not None:
            current.__traceback__ = yours
            return current
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return None


def _wrong_answer(name: str, error: Exception) -> WrongAnswer:
    """The ``WrongAnswer`` for ``error``, raised while checking exercise ``name``: the check's
    own hint (an ``AssertionError`` raised by the check), the learner's code's error, or an
    error of the check on a value it cannot use."""
    yours = _error_of_yours(error)
    if isinstance(error, AssertionError) and error is not yours:  # the check's hint
        message = str(error)
    elif error is yours:
        message = f"your code raised {type(error).__name__}: {error}"
    else:  # the check stumbled on the answer's value
        message = (
            f"checking your answer raised {type(error).__name__}: {error}; return what the "
            "exercise asks for (its type and shape are in its text)"
        )
    return WrongAnswer(f"✗ {name}: {message}", yours)


def _exercise(name: str, writes: tuple[int | str, ...] = ()) -> Callable:
    """Wrap a check: placeholder -> 'not attempted yet' (None), pass -> '✓ correct' (CORRECT),
    a wrong answer -> ``WrongAnswer`` (its hint).

    The check receives each answer watched (``_inputs.guarded``): every call it makes into
    the learner's code fails when the answer wrote into an array passed to it, and the
    check then fails with that hint whatever it did with the error. ``writes``: the
    arguments (positions from 0, keyword names) the exercise asks the answer to write into."""

    def wrap(check: Callable) -> Callable:
        @functools.wraps(check)
        def run(*args: Any, **kwargs: Any) -> str | None:
            if any(a is None for a in args):
                print(f"{name}: not attempted yet (replace the placeholder, then run this cell)")
                return NOT_ATTEMPTED
            changes: list[str] = []  # the hints of the answer's writes into its inputs
            args = tuple(guarded(a, changes, writes) for a in args)
            kwargs = {k: guarded(v, changes, writes) for k, v in kwargs.items()}
            try:
                check(*args, **kwargs)
            except (NotImplementedError, _NotAttempted):
                if not changes:
                    print(
                        f"{name}: not attempted yet (replace the placeholder, then run this cell)"
                    )
                    return NOT_ATTEMPTED
            except Exception as error:  # a hint, the answer's own error, or a value of a
                if not changes:  # kind the check cannot use
                    wrong = _wrong_answer(name, error)
                    cause = wrong.yours or (None if isinstance(error, AssertionError) else error)
                    raise wrong from cause
            if changes:  # the answer wrote into its input (even if the check caught that)
                raise WrongAnswer(f"✗ {name}: {changes[0]}") from None
            print(f"✓ {name}: correct")
            return CORRECT

        run.writes = writes  # the arguments it lets the answer write into (tests read it)
        return run

    return wrap


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _array(x, what: str, kinds: str = "biuf") -> np.ndarray:
    """x as a NumPy array of one of the dtype ``kinds`` (default: numbers or booleans): NumPy,
    a list, or a Tensor (its ``.numpy()``); anything else an AssertionError naming ``what``."""
    if hasattr(x, "numpy") and callable(x.numpy):  # a library Tensor (or a torch tensor)
        x = x.numpy()
    if isinstance(x, str | bytes | dict | set) or x is None:
        raise AssertionError(f"{what}: expected an array, got {type(x).__name__}")
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as err:  # a ragged list, an object that is not an array
        raise AssertionError(f"{what}: expected an array, got {type(x).__name__}") from err
    assert a.dtype.kind in kinds, (
        f"{what}: expected an array of numbers, got {type(x).__name__} of dtype {a.dtype}"
    )
    return a


def _whole_number(got: object, where: str, what: str) -> int:
    """An answer as an int: an int (of any size), a NumPy integer, an integral float, or one
    of these in a one-element array or Tensor (not a bool, not a string); else an
    AssertionError asking for a whole number of ``what``."""
    if hasattr(got, "numpy") and callable(got.numpy):
        got = got.numpy()
    if isinstance(got, int) and not isinstance(got, bool):
        return got  # a Python int, of any size
    ok = not isinstance(got, bool | str | bytes) and got is not None
    try:
        value = np.asarray(got) if ok else np.asarray([])
    except (TypeError, ValueError):
        value = np.asarray([])
    ok = ok and value.size == 1 and value.dtype.kind in "iuf"
    ok = ok and bool(np.isfinite(value).all()) and bool((value == np.round(value)).all())
    assert ok, f"{where}: you return {got!r:.60}; return a whole number of {what} (an int)"
    return int(value.reshape(()))


def _close(got: np.ndarray, want: np.ndarray, tol: float) -> bool:
    """Whether ``got`` has ``want``'s shape and is within ``tol`` of it, relative to the
    size of ``want`` (its largest entry, or 1). Derivatives: ``_analytic``."""
    return np.shape(got) == np.shape(want) and bool(
        np.all(np.abs(got - want) <= tol * (1.0 + np.abs(want).max(initial=0.0)))
    )


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


_LIBRARY = str(Path(mt.__file__).resolve().parent)  # the minitransformer package
_CHECKS = str(Path(__file__).resolve().parent)  # these checks: their own calls do not count

# the folders whose frames are not the learner's code: these checks, the library, Python's
# own library and the installed packages (NumPy, ...), links resolved, each with a trailing
# separator (checks/, not checks_old/)
_PYTHON = [sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")]
_NOT_YOURS = tuple(os.path.join(os.path.realpath(f), "") for f in (_CHECKS, _LIBRARY, *_PYTHON))
_CONTEXT = {"save_for_backward"}  # what a Function's forward may call on its ctx
# converting to and from a library Tensor computes nothing: an answer may return a Tensor
_CONVERSIONS = {
    "minitransformer.tensor.tensor",
    "minitransformer.tensor.Tensor.numpy",
    "minitransformer.tensor.Tensor.item",
}


def _library_calls(
    fn: Callable,
    *args: Any,
    record: set[str] | None = None,
    also: tuple[str, ...] = (),
    watch: Callable[[Any, str, Any], None] | None = None,
) -> tuple[Any, set[str]]:
    """``(fn(*args), the library functions it called)``: every function of the minitransformer
    package that code outside the package and outside these checks called directly while
    ``fn`` ran (a profile hook sees each Python call; the library's calls inside itself and a
    Function's ``ctx.save_for_backward`` and the conversions to and from a Tensor are left
    out). Names are ``module.qualname``. The names also go into ``record`` when given, so that
    they are known if ``fn`` raises. ``also``: folders of other packages watched the same way
    (lesson 10 watches sacreBLEU, the oracle of its checks). ``watch(frame, event, arg)``, when
    given, sees every event of the same hook first (lesson 18 looks for fitting routines in the
    same single run)."""
    called: set[str] = set() if record is None else record
    roots = (_LIBRARY, *also)

    def hook(frame: Any, event: str, arg: Any) -> None:
        if watch is not None:
            watch(frame, event, arg)
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
