"""The stand-in's bookkeeping: each CuPy call counted, run, or recorded while a CUDA graph is
captured (``_launch``), and what a real capture could not hold (``HAZARDS``).

Outside a capture a call runs on NumPy. Inside one (``Stream.begin_capture`` ..
``end_capture``, ``cuda.py``) nothing that writes into existing memory runs, as a GPU runs
no kernel while capturing: a call that makes a new array is run once for the result's shape
and dtype (its values count for nothing), a call that writes in place (``out=``,
``a[k] = v``, ``fill``, a kernel) is only recorded. The graph's ``launch`` runs every
recorded call again, in order, on the same arrays, with the same Python values (frozen, as
a graph freezes a kernel's arguments).
"""

from __future__ import annotations

import builtins
import collections
import types
import warnings

import numpy as _np

COUNT: collections.Counter = collections.Counter()
HAZARDS: list[str] = []
# capture: the calls recorded (None: not capturing); depth: > 0 inside a stand-in call;
# allocator: the function ``using_allocator`` set (None: the default pool)
_state = types.SimpleNamespace(capture=None, depth=0, allocator=None)


def _hazard(what: str) -> None:
    """Note ``what`` when it happens inside a capture (a real one would fail or freeze it)."""
    if _state.capture is not None:
        HAZARDS.append(what)
        COUNT[f"hazard:{what}"] += 1


STANDIN_ARRAY: type = _np.ndarray  # cupy.ndarray, set by cupy.py


def _unwrap(x):
    """NumPy views of the stand-in's arrays (in tuples, lists and dicts too)."""
    if isinstance(x, STANDIN_ARRAY):
        return x.view(_np.ndarray)
    if isinstance(x, tuple | list):
        return type(x)(_unwrap(v) for v in x)
    if isinstance(x, dict):
        return {k: _unwrap(v) for k, v in x.items()}
    return x


def _wrap(r):
    """The stand-in's arrays for NumPy results; a NumPy scalar becomes a 0-d array, as
    CuPy's reductions and indexing give 0-d arrays, not host numbers."""
    if isinstance(r, _np.ndarray):
        return r if isinstance(r, STANDIN_ARRAY) else r.view(STANDIN_ARRAY)
    if isinstance(r, _np.generic):
        return _np.asarray(r).view(STANDIN_ARRAY)
    if isinstance(r, tuple | list):
        return type(r)(_wrap(v) for v in r)
    return r


def _arrays(x) -> list:
    """Every NumPy array in ``x`` (nested in tuples, lists, dicts)."""
    if isinstance(x, _np.ndarray):
        return [x]
    if isinstance(x, tuple | list):
        return [a for v in x for a in _arrays(v)]
    if isinstance(x, dict):
        return [a for v in x.values() for a in _arrays(v)]
    return []


def _assign(target, value) -> None:
    """Write a replayed result into the array(s) the capture made for it."""
    if isinstance(target, _np.ndarray):
        target.view(_np.ndarray)[...] = value
    elif isinstance(target, tuple | list):
        for t, v in zip(target, value, strict=True):
            _assign(t, v)


def _launch(label: str, fn, args=(), kw=None, *, inplace=False, result=None):
    """Count and run ``fn(*args, **kw)`` (the stand-in's arrays unwrapped), or record it
    inside a capture (module doc). ``inplace``: fn writes into its arguments and returns
    nothing of its own; ``result`` is then what the call returns (its ``out``). A call whose
    result shares memory with an argument is a view: counted as ``view:``, never recorded."""
    kw = kw or {}
    if _state.depth:  # a call made by another stand-in call: counted there
        r = fn(*_unwrap(args), **_unwrap(kw))
        return result if inplace else _wrap(r)
    capture = _state.capture
    _state.depth += 1
    try:
        if inplace:
            COUNT[f"launch:{label}"] += 1
            if capture is None:
                fn(*_unwrap(args), **_unwrap(kw))
            else:  # a GPU runs no kernel while capturing: recorded only
                capture.append(lambda: fn(*_unwrap(args), **_unwrap(kw)))
            return result
        if capture is None:
            r = _wrap(fn(*_unwrap(args), **_unwrap(kw)))
        else:  # run for the result's shape and dtype; its values count for nothing
            with _np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = _wrap(fn(*_unwrap(args), **_unwrap(kw)))
        made, inputs = _arrays(r), _arrays((args, kw))
        if not made or builtins.any(_overlap(m, a) for m in made for a in inputs):
            COUNT[f"view:{label}"] += 1
            return r
        COUNT[f"launch:{label}"] += 1
        _hold(made)
        if capture is not None:  # each replay computes it again, into the same arrays
            capture.append(lambda: _assign(r, fn(*_unwrap(args), **_unwrap(kw))))
        return r
    finally:
        _state.depth -= 1


def _overlap(a, b) -> builtins.bool:
    """Whether two arrays may share memory (NumPy's answer on plain views)."""
    return _np.may_share_memory(a.view(_np.ndarray), b.view(_np.ndarray))


def _hold(arrays) -> None:
    """New arrays: inside ``using_allocator(malloc)``, ``malloc(nbytes)`` is asked for each
    (it may refuse by raising, as CuPy's allocator does)."""
    if _state.allocator is not None:
        for a in arrays:
            _state.allocator(a.nbytes)
