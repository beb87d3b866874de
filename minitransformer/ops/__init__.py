"""The differentiable ops, one family per file. Use them through ``minitransformer.functional``.

This file also gives ``Tensor`` its operators and methods, all in ONE table (the idea of
early tinygrad's ``register``): ``a + b`` is ``add(a, b)``, ``x.sum(0)`` is ``sum(x, 0)``,
``x @ w`` is ``matmul(x, w)``. Tensor (in ``tensor.py``) cannot import the ops, which stand
on it; so the ops attach themselves here, once, when the package is imported (and
``minitransformer/__init__.py`` imports it before anything else can make a Tensor). Where
a method's arguments are the op's, the op function itself is attached (no extra call per
use); the few that differ (reflected operators, ``reshape(*shape)``, ...) get a small
adapter below.
"""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from .activations import sigmoid, tanh
from .device import astype, to_device
from .elementwise import add, div, exp, log, mul, neg, pow, relu, sqrt, sub
from .matmul import matmul
from .reduce import max, mean, sum
from .shape import getitem, permute, reshape, transpose
from .smooth_relu import gelu, silu
from .softmax import log_softmax, softmax


def _radd(self: Tensor, other: Any) -> Tensor:
    return add(other, self)


def _rsub(self: Tensor, other: Any) -> Tensor:
    return sub(other, self)


def _rmul(self: Tensor, other: Any) -> Tensor:
    return mul(other, self)


def _rtruediv(self: Tensor, other: Any) -> Tensor:
    return div(other, self)


def _rmatmul(self: Tensor, other: Any) -> Tensor:
    return matmul(other, self)


def _reshape(self: Tensor, *shape: Any) -> Tensor:
    """This tensor in a new shape: ``x.reshape(2, 3)`` or ``x.reshape((2, 3))``."""
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    return reshape(self, shape)


def _permute(self: Tensor, *axes: int) -> Tensor:
    """The axes in a new order: ``x.permute(0, 2, 1)`` or ``x.permute((0, 2, 1))``."""
    if len(axes) == 1 and isinstance(axes[0], tuple | list):
        axes = tuple(axes[0])
    return permute(self, axes)


def _T(self: Tensor) -> Tensor:
    """Swap the last two axes."""
    return transpose(self, -1, -2)


# Tensor's operators and methods: name -> the op it runs.
TENSOR_METHODS = {
    "__add__": add, "__radd__": _radd,
    "__sub__": sub, "__rsub__": _rsub,
    "__mul__": mul, "__rmul__": _rmul,
    "__truediv__": div, "__rtruediv__": _rtruediv,
    "__matmul__": matmul, "__rmatmul__": _rmatmul,
    "__neg__": neg, "__pow__": pow, "__getitem__": getitem,
    "exp": exp, "log": log, "sqrt": sqrt, "relu": relu, "tanh": tanh, "sigmoid": sigmoid,
    "gelu": gelu, "silu": silu,
    "sum": sum, "mean": mean, "max": max,
    "reshape": _reshape, "transpose": transpose, "permute": _permute,
    "softmax": softmax, "log_softmax": log_softmax,
    "to": to_device, "astype": astype,
    "T": property(_T),
}  # fmt: skip

for _name, _op in TENSOR_METHODS.items():
    setattr(Tensor, _name, _op)
del _name, _op
