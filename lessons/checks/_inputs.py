"""Inputs unchanged: every call a check makes into a learner's answer is watched for writes
into the arrays the check passed in.

``_exercise`` (``_shared.py``) hands a check ``guarded(answer, ...)`` instead of the answer:

- a function (or a lambda, a method, a ``functools.partial``) becomes a ``_Guard``, a callable
  that snapshots its arguments' arrays (NumPy arrays, library Tensors' data, the arrays and
  numbers inside lists, tuples and dicts, keyword arguments too), calls the answer, and
  compares: a change records a hint naming the argument and fails the call (``ChangedInput``,
  an ``AssertionError``). Its ``__wrapped__``, ``__name__``, ``__code__``, ``__globals__``
  ... are the answer's, so a check that reads the answer's signature, source or code sees
  the learner's function, and it binds like a function when a check makes it a method;
- a ``Function`` subclass (``class Sigmoid(Function)``) becomes a generated subclass of the
  same name whose ``forward`` and ``backward`` are guarded (``ctx`` is skipped; ``grad`` and,
  in backward, the arrays forward saved in ``ctx.saved`` are watched too);
- anything else (a class such as lesson 01's ``Value``, a model, a number) is passed as is.

The hint is recorded as well as raised, so a check that catches the error (to try another
form of the answer) still ends in it. ``writes`` names the arguments (positions from 0, or
keyword names) an exercise asks the answer to write into (a buffer to fill): those are not
watched. Snapshots look at most ``_MAX_ITEMS`` items per call, so memory stays bounded.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import numpy as np

import minitransformer as mt
from minitransformer.function import Function

_MAX_ITEMS = 200_000  # arrays, containers and numbers looked at per call
_MAX_DEPTH = 8  # containers inside containers
_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)
FIX = (
    "work on a copy (y = x.copy()) or build a new array: `x *= 2` writes into the caller's "
    "array, `x = x * 2` does not"
)


class ChangedInput(AssertionError):
    """An answer wrote into an array the check passed in; the message is the hint."""


def _frozen(a: np.ndarray) -> tuple:
    return ("array", a.dtype.str, a.shape, a.tobytes())


def _leaves(value: Any, path: str, out: list, depth: int = 0) -> None:
    """Append ``(path, frozen value)`` for ``value`` and everything inside it that can change:
    arrays, Tensors' data, lists' lengths and items, dicts' keys and values."""
    if len(out) >= _MAX_ITEMS:
        return
    if isinstance(value, np.ndarray):
        out.append((path, _frozen(value)))
    elif isinstance(value, mt.Tensor):
        data = value.data
        out.append((path, _frozen(data if isinstance(data, np.ndarray) else value.numpy())))
    elif isinstance(value, _SCALARS):
        out.append((path, ("value", type(value).__name__, repr(value))))
    elif isinstance(value, list | tuple | dict) and depth < _MAX_DEPTH:
        items = value.items() if isinstance(value, dict) else enumerate(value)
        out.append((path, (type(value).__name__, len(value))))
        for key, item in list(items):
            _leaves(item, f"{path}[{key!r}]", out, depth + 1)


def _snapshot(named: list[tuple[str, str, Any]]) -> list | None:
    """The frozen leaves of the arguments ``(name, note, value)``, each path followed by its
    note (which argument it is); None when they cannot be read (then they are unwatched)."""
    out: list = []
    try:
        for name, note, value in named:
            start = len(out)
            _leaves(value, name, out)
            out[start:] = [(f"{path}{note}", frozen) for path, frozen in out[start:]]
    except Exception:  # an object whose data cannot be read: leave it unwatched
        return None
    return out


def _first_change(before: list | None, after: list | None) -> str | None:
    """The path of the first leaf that differs, None when none does (or nothing was seen). A
    leaf differs in its value or in its path: a dict whose keys were replaced, its values
    kept, has changed too."""
    if before is None or after is None:
        return None
    for (path, old), (new_path, new) in zip(before, after, strict=False):
        if old != new or path != new_path:
            return path
    if len(before) != len(after):
        return (before if len(before) > len(after) else after)[min(len(before), len(after))][0]
    return None


class _Guard:
    """A learner's function, watched: see the module docstring."""

    def __init__(self, fn: Callable, where: str, changes: list[str], writes: tuple = (),
                 skip_ctx: bool = False) -> None:  # fmt: skip
        functools.update_wrapper(self, fn)
        self._fn, self._where, self._changes = fn, where, changes
        self._writes, self._skip_ctx = set(writes), skip_ctx
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):  # a builtin without a signature
            params = []
        star = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        self._names = [None if p.kind in star else p.name for p in params]

    def __getattr__(self, name: str) -> Any:  # __code__, __globals__, __defaults__, ...
        if name in ("_fn", "_names"):  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self._fn, name)

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        """Bound like a function when a check makes the answer a method of a class."""
        return self if obj is None else types.MethodType(self, obj)

    def _watched(self, args: tuple, kwargs: dict) -> list[tuple[str, str, Any]]:
        """(name, note, value) of every argument to watch: its name, and a note that says
        which argument it is."""
        named = []
        for i, a in enumerate(args):
            if i in self._writes or (self._skip_ctx and i == 0):
                continue
            name = self._names[i] if i < len(self._names) else None
            named.append((name or f"argument {i + 1}", f" (argument {i + 1})" if name else "", a))
        named += [
            (k, " (a keyword argument)", v) for k, v in kwargs.items() if k not in self._writes
        ]
        if self._skip_ctx and args and self._where.endswith(".backward"):
            named.append(
                ("ctx.saved", " (the arrays forward saved)", getattr(args[0], "saved", ()))
            )
        return named

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        named = self._watched(args, kwargs)
        before = _snapshot(named)
        result = self._fn(*args, **kwargs)
        changed = _first_change(before, _snapshot(named))
        if changed is not None:
            hint = (
                f"{self._where} changed its input {changed} in place: the caller's arrays "
                f"must come back as they went in; hint: {FIX}"
            )
            self._changes.append(hint)
            raise ChangedInput(hint)
        return result


def _guarded_class(cls: type, changes: list[str]) -> type:
    """A subclass of the Function ``cls``, of the same name, whose forward and backward are
    watched; ``cls`` itself when one cannot be made."""
    body: dict[str, Any] = {
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    for method in ("forward", "backward"):
        fn = getattr(cls, method, None)
        if callable(fn):
            where = f"your {cls.__name__}.{method}"
            body[method] = staticmethod(_Guard(fn, where, changes, skip_ctx=True))
    try:
        return type(cls.__name__, (cls,), body)
    except Exception:  # a class that cannot be subclassed: unwatched
        return cls


def guarded(answer: Any, changes: list[str], writes: tuple = ()) -> Any:
    """``answer`` watched for writes into its inputs (see the module docstring); hints go
    into ``changes``."""
    if isinstance(answer, type):
        if issubclass(answer, Function):
            return _guarded_class(answer, changes)
        return answer  # another class (lesson 01's Value): its methods are the learner's own
    if isinstance(answer, _Guard):
        return answer
    plain = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)
    if isinstance(answer, plain):
        name = getattr(answer, "__name__", None)
        where = f"your {name}" if name and name != "<lambda>" else "your function"
        return _Guard(answer, where, changes, writes)
    return answer
