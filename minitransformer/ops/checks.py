"""What every op checks where its inputs enter: Tensors (not lists or numbers), float dtypes
where a gradient is taken, axes that exist, a reduced axis that is not empty. Each raises
the library's own error with one line naming the op, the argument, what it got and the fix
(never a NumPy traceback from deep inside an op).
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..checks import is_int, is_real, short
from ..errors import ArgumentError, DTypeError, ShapeError
from ..tensor import Tensor


def not_a_tensor(where: str, name: str, value: Any) -> ArgumentError:
    """The error for ``value`` given where ``where`` needs a Tensor ``name``."""
    fix = "a list" if isinstance(value, list | tuple) else "data"
    return ArgumentError(
        f"{where}: {name} must be a Tensor, got {type(value).__name__} {short(value, 40)}; "
        f"make one from {fix} with mt.tensor(...)"
    )


def tensors(where: str, **named: Any) -> None:
    """Every value in ``named`` is a Tensor, else ArgumentError naming the first that is not."""
    for name, value in named.items():
        if not isinstance(value, Tensor):  # a subclass (Parameter) is a Tensor too
            raise not_a_tensor(where, name, value)


def floats(where: str, **named: Any) -> None:
    """Every value in ``named`` is a Tensor of a float dtype (a gradient needs one)."""
    for name, value in named.items():
        if not isinstance(value, Tensor):
            raise not_a_tensor(where, name, value)
        dtype = backend.dtype_name(value.dtype)
        if not dtype.startswith("float"):
            raise DTypeError(
                f"{where}: {name} has dtype {dtype}, need a float dtype; convert it first with "
                f"{name}.astype('float32')"
            )


def operand(where: str, name: str, value: Any) -> None:
    """An operand of arithmetic: a Tensor, a raw array or a real number (bools count)."""
    if isinstance(value, Tensor) or is_real(value) or isinstance(value, bool):
        return
    if backend.is_array(value):
        backend.numeric_data(where, value)  # complex arrays and the like: DTypeError
        return
    raise ArgumentError(
        f"{where}: {name} must be a Tensor or a real number, got {type(value).__name__} "
        f"{short(value, 40)}; make a Tensor from data with mt.tensor(...)"
    )


def axes(where: str, axis: Any, shape: tuple[int, ...], nonempty: bool = False) -> tuple:
    """``axis`` (an int, a sequence of ints, or None for all) as a tuple of distinct
    non-negative axes of ``shape``; ``nonempty``: none of them may have length 0 (a max,
    a mean or a softmax over no elements is undefined). ShapeError or ArgumentError else."""
    ndim = len(shape)
    if axis is None:
        picked: tuple = tuple(range(ndim))
    elif is_int(axis):
        picked = (axis,)
    elif isinstance(axis, tuple | list) and all(is_int(a) for a in axis):
        picked = tuple(axis)
    else:
        raise ArgumentError(
            f"{where}: axis must be an int, a tuple of ints or None, got {short(axis, 40)}"
        )
    for a in picked:
        if not -ndim <= a < ndim:
            choices = f"[-{ndim}, {ndim - 1}] or None for all" if ndim else "None (no axes)"
            raise ShapeError(
                f"{where}: axis {a} is out of range for a tensor of rank {ndim} (shape "
                f"{tuple(shape)}); use an axis in {choices}"
            )
    picked = tuple(int(a) % ndim for a in picked) if ndim else ()
    if len(set(picked)) != len(picked):
        raise ShapeError(f"{where}: axis {tuple(axis)} names an axis twice; name each once")
    if nonempty:
        empty(where, shape, picked)
    return picked


def empty(where: str, shape: tuple[int, ...], reduced: tuple[int, ...]) -> None:
    """ShapeError when one of the ``reduced`` axes of ``shape`` has length 0."""
    for a in reduced:
        if shape[a] == 0:
            raise ShapeError(
                f"{where}: axis {a} of the input of shape {tuple(shape)} has length 0, and a "
                f"{where} over no elements is undefined; drop the empty tensor or use another axis"
            )


def same_dtype(where: str, name: str, p: Tensor, x: Tensor) -> None:
    """``p`` has ``x``'s dtype (called when the cheap test, one library and ==, fails)."""
    pd, xd = backend.dtype_name(p.dtype), backend.dtype_name(x.dtype)
    if pd != xd:
        raise DTypeError(
            f"{where}: {name} is {pd} but x is {xd}; give the parameters x's dtype "
            "(model.to(dtype=...) or p.astype(...))"
        )


def exponent(where: str, x: Any, value: Any) -> float:
    """The exponent of ``x ** value``: x a Tensor, ``value`` a real number, and x a float
    tensor unless ``value`` is a whole number >= 0 (integers have no x ** -1 or x ** 0.5)."""
    if not isinstance(x, Tensor):
        raise not_a_tensor(where, "x", x)
    if not is_real(value):
        raise ArgumentError(
            f"{where}: the exponent must be a real number, got {type(value).__name__} "
            f"{short(value, 40)}; write x ** 2.0 or F.pow(x, 0.5) (x ** tensor is not supported)"
        )
    dtype = backend.dtype_name(x.dtype)
    if not dtype.startswith("float") and not (is_int(value) and value >= 0):
        raise DTypeError(
            f"{where}: x has dtype {dtype}, which has no power {value!r} (only whole exponents "
            ">= 0); cast it first with x.astype('float32')"
        )
    return value


def operands(op: str, a: Any, b: Any) -> None:
    """One operand is a Tensor, the other a Tensor, a raw array or a real number; the two
    shapes broadcast (equal shapes: nothing to do); no bool subtraction (NumPy refuses it)."""
    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    if not (ta and tb):
        if not ta and not tb:
            raise ArgumentError(
                f"{op}: at least one operand must be a Tensor, got {type(a).__name__} and "
                f"{type(b).__name__}; make one with mt.tensor(...)"
            )
        if type(a) is not float and type(b) is not float:  # x * 0.5: nothing to check
            operand(op, "a", a)
            operand(op, "b", b)
    sa, sb = tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ()))
    if sa != sb and not all(
        m == n or 1 in (m, n) for m, n in zip(sa[::-1], sb[::-1], strict=False)
    ):
        raise ShapeError(
            f"{op}: shapes {sa} and {sb} do not broadcast: aligned from the right, each pair "
            "of axes must be equal or one of them 1; reshape one operand (e.g. x[:, None])"
        )


def no_bool(op: str, name: str, x: Any) -> None:
    """NumPy has no bool subtraction or negation: say so, with the fix."""
    if isinstance(x, Tensor) and backend.dtype_name(x.dtype) == "bool":
        raise DTypeError(
            f"{op}: {name} is a bool tensor, which has no {op}; cast it first with "
            f"{name}.astype('float32') (or use ~mask for a logical not)"
        )
