"""The NumPy twins of dropout and dropout_add (``ops/dropout.py``): the generator's own mask,
applied as a product. Registered with the other NumPy twins (``fast/numpy/__init__.py``'s
``TWINS``); tested against the reference in ``tests/fast/test_numpy_dropout.py``; its
measured worth: docs/measurements.md.

Dropout as a product with its mask: x * scale, then times the bool mask in place (two
passes at memory speed), where NumPy's ``where(keep, x * scale, 0)`` branches on every
element of a random mask (~190 µs against ~40 µs at (32, 32, 128)). The same mask (the
generator's draw) and the same numbers for every finite x (a dropped element is -0.0 where
x < 0, which equals 0.0); a dropped inf or NaN gives NaN here where the reference gives 0
(the loss is then NaN and the trainer does not take the step). With numba installed and
``compiled.enable()`` called, the product is one compiled pass (``compiled_rows.py``, the same
numbers bit for bit; the mask is still the generator's draw).
"""

from __future__ import annotations

from typing import Any

from ...ops.dropout import Dropout as _Dropout
from ...ops.dropout import DropoutAdd as _DropoutAdd
from . import compiled


def _apply(x: Any, keep: Any, scale: float, r: Any = None) -> Any:
    """x * scale * keep (+ r): numba's one pass where the compiled kernels are on and the
    arrays fit (``compiled_rows.py``), else NumPy's two (three) in place."""
    fit = compiled.fits(x) if r is None else compiled.fits(x, r) and r.shape == x.shape
    if fit and keep.shape == x.shape and keep.flags.c_contiguous:
        return compiled.dropout_apply(x, keep, scale, r)
    y = x * scale
    y *= keep
    if r is not None:
        y += r
    return y


class Dropout(_Dropout):
    """Twin of ``ops.dropout.Dropout``: y = x * scale * keep, dx = g * scale * keep."""

    dtypes = None

    @staticmethod
    def forward(ctx, x, p: float, generator: Any):
        ctx.scale = 1.0 / (1.0 - p)
        keep = generator.keep_mask(tuple(x.shape), p)  # bool, P(True) = 1 - p
        ctx.save_for_backward(keep)
        return _apply(x, keep, ctx.scale)

    @staticmethod
    def backward(ctx, grad):
        return _apply(grad, ctx.saved[0], ctx.scale)


class DropoutAdd(_DropoutAdd):
    """Twin of ``ops.dropout.DropoutAdd``: y = r + x * scale * keep; dr = g, dx as Dropout's."""

    dtypes = None

    @staticmethod
    def forward(ctx, r, x, p: float, generator: Any):
        ctx.scale = 1.0 / (1.0 - p)
        keep = generator.keep_mask(tuple(x.shape), p)
        ctx.save_for_backward(keep)
        return _apply(x, keep, ctx.scale, r)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[1]:
            return grad, None
        return grad, _apply(grad, ctx.saved[0], ctx.scale)


# reference -> twin, for numpy.ndarray (``fast/numpy/__init__.py`` adds them to its table)
TWINS = {_Dropout: Dropout, _DropoutAdd: DropoutAdd}
