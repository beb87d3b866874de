"""The NumPy twins of dropout and dropout_add (``ops/dropout.py``): the generator's own mask,
applied as a product. Registered with the other NumPy twins (``fast/numpy/__init__.py``'s
``TWINS``); tested against the reference in ``tests/fast/test_numpy_dropout.py``; its
measured worth: docs/measurements.md.

Dropout as a product with its mask: x * scale, then times the bool mask in place (two
passes at memory speed), where NumPy's ``where(keep, x * scale, 0)`` branches on every
element of a random mask (~190 µs against ~40 µs at (32, 32, 128)). The same mask (the
generator's draw) and the same numbers for every finite x (a dropped element is -0.0 where
x < 0, which equals 0.0); a dropped inf or NaN gives NaN here where the reference gives 0
(the loss is then NaN and the trainer does not take the step).
"""

from __future__ import annotations

from typing import Any

from ...ops.dropout import Dropout as _Dropout
from ...ops.dropout import DropoutAdd as _DropoutAdd


class Dropout(_Dropout):
    """Twin of ``ops.dropout.Dropout``: y = x * scale * keep, dx = g * scale * keep."""

    dtypes = None

    @staticmethod
    def forward(ctx, x, p: float, generator: Any):
        ctx.scale = 1.0 / (1.0 - p)
        keep = generator.keep_mask(tuple(x.shape), p)  # bool, P(True) = 1 - p
        ctx.save_for_backward(keep)
        y = x * ctx.scale
        y *= keep
        return y

    @staticmethod
    def backward(ctx, grad):
        dx = grad * ctx.scale
        dx *= ctx.saved[0]
        return dx


class DropoutAdd(_DropoutAdd):
    """Twin of ``ops.dropout.DropoutAdd``: y = r + x * scale * keep; dr = g, dx as Dropout's."""

    dtypes = None

    @staticmethod
    def forward(ctx, r, x, p: float, generator: Any):
        ctx.scale = 1.0 / (1.0 - p)
        keep = generator.keep_mask(tuple(x.shape), p)
        ctx.save_for_backward(keep)
        y = x * ctx.scale
        y *= keep
        y += r
        return y

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[1]:
            return grad, None
        dx = grad * ctx.scale
        dx *= ctx.saved[0]
        return grad, dx


# reference -> twin, for numpy.ndarray (``fast/numpy/__init__.py`` adds them to its table)
TWINS = {_Dropout: Dropout, _DropoutAdd: DropoutAdd}
