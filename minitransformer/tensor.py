"""Tensor: an array plus what autograd needs (grad, requires_grad, the op that made it).

A Tensor made by an op remembers that op's context (``_ctx``: the Function, its saved
arrays and its parent Tensors). ``loss.backward()`` walks this graph once in reverse
topological order, calling each Function's ``backward`` and summing the gradients that
reach each Tensor (the multivariate chain rule). Leaves (tensors you created with
``requires_grad=True``, such as parameters) *accumulate* into ``.grad`` across calls until
you zero them; the graph is released afterwards so memory does not grow step by step.

``.grad`` is a raw array on the tensor's device (not a Tensor).

Operators (``+ - * / @ **``, indexing) call the ops in ``minitransformer/ops``; they are
imported inside each method because ops import this module (imports only run downward).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from . import backend
from .errors import DTypeError, ShapeError

_grad_enabled = True


def is_grad_enabled() -> bool:
    return _grad_enabled


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Inside this block ops record no graph (for evaluation and decoding)."""
    global _grad_enabled
    previous, _grad_enabled = _grad_enabled, False
    try:
        yield
    finally:
        _grad_enabled = previous


@contextlib.contextmanager
def enable_grad() -> Iterator[None]:
    global _grad_enabled
    previous, _grad_enabled = _grad_enabled, True
    try:
        yield
    finally:
        _grad_enabled = previous


class Tensor:
    """An array (NumPy, CuPy or strict) with an optional gradient. See the module doc."""

    __slots__ = (
        "data", "grad", "requires_grad", "_ctx", "_retains_grad", "_grad_owned", "_freed",
        "_grad_slot",
    )  # fmt: skip
    __array_priority__ = 1000  # numpy_scalar * tensor -> Tensor.__rmul__, not NumPy

    def __init__(self, data: Any, requires_grad: bool = False, dtype: Any = None, device=None):
        if isinstance(data, Tensor):
            data = data.data
        if dtype is not None:
            _check_dtype("Tensor", dtype)
        if not backend.is_array(data):
            data = _host_numbers("Tensor", data)
        if not backend.is_array(data) or dtype is not None or device is not None:
            data = backend.asarray(data, dtype=dtype, device=device)
        self.data = data
        self.grad = None
        self.requires_grad = bool(requires_grad)
        self._ctx = None
        self._retains_grad = False
        self._grad_owned = False
        self._freed = False
        self._grad_slot = None  # an optimizer's flat-buffer view the gradient is written into

    @classmethod
    def _wrap(cls, data: Any) -> Tensor:
        """A Tensor around an array an op just made (no checks, no copies)."""
        t = cls.__new__(cls)
        t.data, t.grad, t.requires_grad, t._ctx = data, None, False, None
        t._retains_grad = t._grad_owned = t._freed = False
        t._grad_slot = None
        return t

    # ------------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return int(self.data.size)

    @property
    def dtype(self) -> Any:
        return self.data.dtype

    @property
    def device(self) -> str:
        return backend.device_of(self.data)

    @property
    def is_leaf(self) -> bool:
        return self._ctx is None and not self._freed

    @property
    def T(self) -> Tensor:
        """Swap the last two axes."""
        return self.transpose(-1, -2)

    def __len__(self) -> int:
        return self.data.shape[0]

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        dev = "" if self.device == "cpu" else f", device={self.device!r}"
        body = str(backend.to_numpy(self.data)).replace("\n", "\n       ")
        return f"tensor({body}{dev}{grad})"

    # ------------------------------------------------------------------ conversion
    def numpy(self) -> Any:
        """The data as a NumPy array on the host (a copy for GPU/strict arrays)."""
        return backend.to_numpy(self.data)

    def item(self) -> float:
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return backend.to_numpy(self.data).reshape(()).item()

    def to(self, device: str) -> Tensor:
        """This tensor on ``device`` ("cpu", "cuda", "strict:device1"); gradients flow back."""
        from .ops.device import to_device

        return to_device(self, device)

    def astype(self, dtype: Any) -> Tensor:
        from .ops.device import astype

        _check_dtype("astype", dtype)
        return astype(self, dtype)

    def detach(self) -> Tensor:
        """The same data, cut from the graph."""
        return Tensor._wrap(self.data)

    def retain_grad(self) -> Tensor:
        """Keep ``.grad`` on this non-leaf tensor after backward (for inspection)."""
        self._retains_grad = True
        return self

    def zero_grad(self) -> None:
        self.grad = None

    # ------------------------------------------------------------------ backward
    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Backpropagate from this tensor: fill ``.grad`` of every leaf that needs one.

        ``grad`` is dL/d(self); it defaults to 1 for a one-element tensor (a loss).
        """
        if not self.requires_grad:
            raise RuntimeError(
                "backward(): this tensor does not require grad; create the inputs with "
                "requires_grad=True (and not inside no_grad())"
            )
        xp = backend.namespace(self.data)
        if grad is None:
            if self.size != 1:
                raise RuntimeError(
                    f"backward(): the tensor has shape {self.shape}; pass grad= of that shape "
                    "or call it on a scalar loss"
                )
            grad = xp.ones_like(self.data)
        elif isinstance(grad, Tensor):
            grad = grad.data
        elif not backend.is_array(grad) or backend.device_of(grad) != self.device:
            grad = backend.asarray(grad, dtype=self.data.dtype, device=self.device)
        if tuple(grad.shape) != self.shape:
            raise ValueError(f"backward(): grad has shape {tuple(grad.shape)}, need {self.shape}")

        grads = {self: grad}  # keyed by the Tensor itself (identity hash)
        owned: set[Tensor] = set()  # gradients we made ourselves, safe to add into in place
        for node in reversed(_topological_order(self)):
            g = grads.pop(node, None)
            if g is None:
                continue
            ctx = node._ctx
            if ctx is None or node._retains_grad:  # a retained (non-leaf) grad is never
                node._accumulate(g, node in owned and ctx is None)  # added into in place
            if ctx is None:
                continue
            in_grads = ctx.fn.backward(ctx, g)
            if type(in_grads) is not tuple:
                in_grads = (in_grads,)
            fresh = ctx.fn.fresh_grads  # new arrays: later gradients may add into them
            for parent, pg in zip(ctx.parents, in_grads, strict=False):
                if parent is None or pg is None or not parent.requires_grad:
                    continue
                if pg.shape != parent.data.shape:
                    from .function import unbroadcast

                    pg = unbroadcast(ctx.xp, pg, parent.shape)
                if parent not in grads:
                    grads[parent] = pg
                    if fresh:
                        owned.add(parent)
                elif parent in owned:
                    grads[parent] += pg
                else:
                    grads[parent] = grads[parent] + pg
                    owned.add(parent)
            if not retain_graph:
                node._ctx, node._freed = None, True

    def _accumulate(self, g: Any, owned: bool) -> None:
        if self.grad is None:
            slot = self._grad_slot
            if slot is not None and slot.dtype == g.dtype and slot.device == g.device:
                slot[...] = g  # straight into the optimizer's flat buffer; g is freed now
                self.grad, self._grad_owned = slot, True
                return
            self.grad, self._grad_owned = g, owned
        elif self._grad_owned:
            self.grad += g
        else:
            self.grad, self._grad_owned = self.grad + g, True
        if not backend.is_array(self.grad):  # NumPy math on 0-d arrays returns scalars
            self.grad, self._grad_owned = backend.namespace(self.data).asarray(self.grad), True

    # ------------------------------------------------------------------ operators
    def __add__(self, other: Any) -> Tensor:
        from .ops.elementwise import add

        return add(self, other)

    def __radd__(self, other: Any) -> Tensor:
        from .ops.elementwise import add

        return add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        from .ops.elementwise import sub

        return sub(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        from .ops.elementwise import sub

        return sub(other, self)

    def __mul__(self, other: Any) -> Tensor:
        from .ops.elementwise import mul

        return mul(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        from .ops.elementwise import mul

        return mul(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        from .ops.elementwise import div

        return div(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        from .ops.elementwise import div

        return div(other, self)

    def __neg__(self) -> Tensor:
        from .ops.elementwise import neg

        return neg(self)

    def __pow__(self, exponent: float) -> Tensor:
        from .ops.elementwise import pow

        return pow(self, exponent)

    def __matmul__(self, other: Any) -> Tensor:
        from .ops.matmul import matmul

        return matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        from .ops.matmul import matmul

        return matmul(other, self)

    def __getitem__(self, index: Any) -> Tensor:
        from .ops.shape import getitem

        return getitem(self, index)

    # ------------------------------------------------------------------ methods
    def exp(self) -> Tensor:
        from .ops.elementwise import exp

        return exp(self)

    def log(self) -> Tensor:
        from .ops.elementwise import log

        return log(self)

    def sqrt(self) -> Tensor:
        from .ops.elementwise import sqrt

        return sqrt(self)

    def relu(self) -> Tensor:
        from .ops.elementwise import relu

        return relu(self)

    def tanh(self) -> Tensor:
        from .ops.activations import tanh

        return tanh(self)

    def sigmoid(self) -> Tensor:
        from .ops.activations import sigmoid

        return sigmoid(self)

    def sum(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        from .ops.reduce import sum

        return sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        from .ops.reduce import mean

        return mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        from .ops.reduce import max

        return max(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape: Any) -> Tensor:
        from .ops.shape import reshape

        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return reshape(self, shape)

    def transpose(self, axis1: int = -2, axis2: int = -1) -> Tensor:
        from .ops.shape import transpose

        return transpose(self, axis1, axis2)

    def permute(self, *axes: int) -> Tensor:
        from .ops.shape import permute

        if len(axes) == 1 and isinstance(axes[0], tuple | list):
            axes = tuple(axes[0])
        return permute(self, axes)

    def softmax(self, axis: int = -1) -> Tensor:
        from .ops.softmax import softmax

        return softmax(self, axis=axis)

    def log_softmax(self, axis: int = -1) -> Tensor:
        from .ops.softmax import log_softmax

        return log_softmax(self, axis=axis)


def _topological_order(root: Tensor) -> list[Tensor]:
    """Tensors reachable from ``root`` through ops, each after all of its inputs."""
    order: list[Tensor] = []
    visited: set[Tensor] = set()
    stack: list[tuple[Tensor, bool]] = [(root, False)]
    push, pop, see, done = stack.append, stack.pop, visited.add, order.append
    while stack:
        node, inputs_done = pop()
        if inputs_done:
            done(node)
            continue
        if node in visited:
            continue
        if node._freed:
            raise RuntimeError(
                "backward(): part of this graph was already used by an earlier backward() "
                "and freed; pass retain_graph=True to the first backward() to reuse it"
            )
        see(node)
        push((node, True))
        ctx = node._ctx
        if ctx is not None:
            for parent in ctx.parents:
                if parent is not None and parent.requires_grad and parent not in visited:
                    push((parent, False))
    return order


def tensor(data: Any, requires_grad: bool = False, dtype: Any = None, device: Any = None) -> Tensor:
    """Make a Tensor. Python numbers/lists become float32 (floats) or int64 (ints), as in
    PyTorch; arrays keep their dtype unless ``dtype`` is given."""
    if isinstance(data, Tensor):
        data = data.data
    if dtype is not None:
        _check_dtype("mt.tensor", dtype)
    if not backend.is_array(data):
        data = _host_numbers("mt.tensor", data)
        if dtype is None:  # Python data: PyTorch's defaults (float32, int64, bool)
            data, dtype = backend.host_array_with_default_dtype(data)
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, device=device)


_DTYPES = (
    "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool",
)  # fmt: skip


def _check_dtype(where: str, dtype: Any) -> None:
    """A dtype name or object this library can hold, else DTypeError naming the choices."""
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type):  # float, np.float32, ...
        try:
            name = backend.np.dtype(dtype).name
        except TypeError:
            name = None
    else:  # a dtype object of any backend
        name = backend.dtype_name(dtype)
    if name not in _DTYPES:
        raise DTypeError(
            f"{where}: dtype {dtype!r} is not a numeric dtype this library handles; use one of "
            f"{', '.join(_DTYPES)} (float32 to train, float64 for gradient checks)"
        )


def _host_numbers(where: str, data: Any) -> Any:
    """Python numbers / nested lists (or NumPy scalars) as a NumPy array of numbers, else
    DTypeError (strings, None, objects) or ShapeError (ragged lists)."""
    np = backend.np
    try:
        array = np.asarray(data)
    except ValueError:
        raise ShapeError(
            f"{where}: the nested lists are ragged (rows of different lengths); pad them to "
            "one length first (the padding id for token ids)"
        ) from None
    if array.dtype.kind not in "biuf":
        raise DTypeError(
            f"{where}: data must be numbers (a number, nested lists of numbers, or an "
            f"array), got {type(data).__name__} {_short(data)}; convert strings to ids with "
            "the task's vocabulary, e.g. vocab.tokenize(text)"
        )
    return array


def _short(data: Any) -> str:
    text = repr(data)
    return text if len(text) <= 40 else text[:37] + "..."
