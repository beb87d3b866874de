"""Tensor: an array plus what autograd needs (grad, requires_grad, the op that made it).

A Tensor made by an op remembers that op's context (``_ctx``: the Function, its saved
arrays and its parent Tensors). ``loss.backward()`` walks this graph once in reverse
topological order, calling each Function's ``backward`` and summing the gradients that
reach each Tensor (the multivariate chain rule). Leaves (tensors you created with
``requires_grad=True``, such as parameters) *accumulate* into ``.grad`` across calls until
you zero them; the graph is released afterwards so memory does not grow step by step.

``.grad`` is a raw array on the tensor's device (not a Tensor). A leaf may be given a
*gradient buffer* (``set_grad_buffer``): its next fresh gradient is written into that array,
which then is ``.grad``. An optimizer with one flat buffer for all gradients hands each
parameter its view this way, so no gather copy is needed and no second copy of all
gradients is ever alive.

Operators (``+ - * / @ **``, indexing) and the methods ``exp``, ``sum``, ``reshape``, ``to``,
... are attached to Tensor by ``minitransformer/ops/__init__.py`` in one table: the ops
stand on this module, so this module cannot import them (imports only run downward).
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Any

from . import backend
from .grad_mode import enable_grad, is_grad_enabled, no_grad

__all__ = ["Tensor", "enable_grad", "is_grad_enabled", "no_grad", "tensor", "unbroadcast"]

_created = 0  # tensors made so far in this process: each Tensor's ``_seq``
TENSOR_TYPES: set[type] = set()  # Tensor and its subclasses: ``type(x) in ...`` costs no call


class Tensor:
    """An array (NumPy, CuPy or strict) with an optional gradient. See the module doc."""

    __slots__ = ("data", "grad", "requires_grad", "_ctx", "_retains_grad", "_grad_owned",
                 "_freed", "_grad_buffer", "_seq")  # fmt: skip
    __array_priority__ = 1000  # numpy_scalar * tensor -> Tensor.__rmul__, not NumPy

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        TENSOR_TYPES.add(cls)  # nn.Parameter, ...: known to the hot checks (TENSOR_TYPES)

    def __init__(self, data: Any, requires_grad: bool = False, dtype: Any = None, device=None):
        if isinstance(data, Tensor):
            data = data.data
        if dtype is not None:
            backend.check_dtype("Tensor", dtype)
        data = backend.numeric_data("Tensor", data)  # real numbers only: DTypeError else
        if dtype is not None or device is not None:
            data = backend.asarray(data, dtype=dtype, device=device)
        self.data = data
        self.grad = None
        self.requires_grad = bool(requires_grad)
        self._ctx = None
        self._retains_grad = False
        self._grad_owned = False  # True: .grad is an array we alone hold (add into it)
        self._freed = False
        self._grad_buffer = None  # where the next fresh gradient goes (set_grad_buffer)
        global _created
        _created += 1
        self._seq = _created  # made after every tensor it was computed from (backward's order)

    @classmethod
    def _wrap(cls, data: Any) -> Tensor:
        """A Tensor around an array an op just made (no checks, no copies)."""
        global _created
        t = cls.__new__(cls)
        t.data, t.grad, t.requires_grad, t._ctx, t._grad_buffer = data, None, False, None, None
        t._retains_grad = t._grad_owned = t._freed = False
        _created += 1
        t._seq = _created
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

    def detach(self) -> Tensor:
        """The same data, cut from the graph."""
        return Tensor._wrap(self.data)

    # ------------------------------------------------------------------ gradients
    def retain_grad(self) -> Tensor:
        """Keep ``.grad`` on this non-leaf tensor after backward (for inspection)."""
        self._retains_grad = True
        return self

    def zero_grad(self) -> None:
        self.grad = None

    @property
    def grad_owned(self) -> bool:
        """True when ``.grad`` is an array this tensor alone holds: it may be changed in
        place (autograd adds later gradients into it; clipping may scale it)."""
        return self._grad_owned

    def set_grad(self, grad: Any, owned: bool = False) -> None:
        """Make ``grad`` this tensor's ``.grad``. ``owned=True`` promises that nothing else
        holds the array, so a later backward adds into it in place (else it sums anew)."""
        self.grad, self._grad_owned = grad, owned

    def set_grad_buffer(self, buffer: Any) -> None:
        """Write this leaf's next fresh gradient (while ``.grad`` is None) into ``buffer``,
        an array of its shape, dtype and device, which then is ``.grad``; None: keep the
        array backward made. An optimizer's flat buffer hands over its views this way."""
        self._grad_buffer = buffer

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

        # Each tensor is made after the tensors it is computed from (``_seq`` counts them), so
        # taking the pending tensor made last, every time, reaches a tensor only after all the
        # tensors computed from it have passed their gradients on (a topological order).
        grads = {self: grad}  # keyed by the Tensor itself (identity hash); pending gradients
        owned: set[Tensor] = set()  # gradients we made ourselves, safe to add into in place
        pending, pushed = [(-self._seq, 0, self)], 0  # a heap: the last made comes out first
        while pending:
            node = heappop(pending)[2]
            g = grads.pop(node)
            if node._freed:
                raise RuntimeError(
                    "backward(): part of this graph was already used by an earlier backward() "
                    "and freed; pass retain_graph=True to the first backward() to reuse it"
                )
            ctx = node._ctx
            if ctx is None or node._retains_grad:  # a retained (non-leaf) grad is never
                node._accumulate(g, node in owned and ctx is None)  # added into in place
            if ctx is None:
                continue
            if ctx.fn.writes_grads:  # offer each leaf's buffer for its first gradient
                ctx.grad_out = tuple([
                    p._grad_buffer
                    if p is not None and p._ctx is None and p.grad is None and p not in grads
                    else None
                    for p in ctx.parents
                ])  # fmt: skip
            in_grads = ctx.fn.backward(ctx, g)
            if type(in_grads) is not tuple:
                in_grads = (in_grads,)
            fresh = ctx.fn.fresh_grads  # new arrays: later gradients may add into them
            for parent, pg in zip(ctx.parents, in_grads, strict=False):
                if parent is None or pg is None or not parent.requires_grad:
                    continue
                if pg.shape != parent.data.shape:
                    pg = unbroadcast(ctx.xp, pg, parent.shape)
                if parent not in grads:
                    grads[parent] = pg
                    pushed += 1
                    heappush(pending, (-parent._seq, pushed, parent))
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
            buf = self._grad_buffer
            if g is buf:  # written there by the op's backward (Function.writes_grads)
                self.grad, self._grad_owned = buf, True
                return
            if type(buf) is type(g) and (buf.dtype, buf.device) == (g.dtype, g.device):
                buf[...] = g  # straight into the gradient buffer; g is freed now
                self.grad, self._grad_owned = buf, True
                return
            self.grad, self._grad_owned = g, owned
        elif self._grad_owned:
            self.grad += g
        else:
            self.grad, self._grad_owned = self.grad + g, True
        if not backend.is_array(self.grad):  # NumPy math on 0-d arrays returns scalars
            self.grad, self._grad_owned = backend.namespace(self.data).asarray(self.grad), True


TENSOR_TYPES.add(Tensor)


def unbroadcast(xp: Any, grad: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``grad`` down to ``shape``: the backward of NumPy-style broadcasting.

    Leading axes that broadcasting added are summed away; axes where ``shape`` has size 1
    (stretched by broadcasting) are summed with keepdims. Shapes: grad (..., *out) ->
    ``shape``. The engine applies it to every gradient a Function's backward returns.
    """
    if tuple(grad.shape) == tuple(shape):
        return grad
    extra = grad.ndim - len(shape)
    if extra > 0:
        grad = xp.sum(grad, axis=tuple(range(extra)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if stretched:
        grad = xp.sum(grad, axis=stretched, keepdims=True)
    return xp.reshape(grad, shape) if tuple(grad.shape) != tuple(shape) else grad


def tensor(data: Any, requires_grad: bool = False, dtype: Any = None, device: Any = None) -> Tensor:
    """Make a Tensor. Python numbers/lists become float32 (floats) or int64 (ints), as in
    PyTorch; arrays keep their dtype unless ``dtype`` is given."""
    if isinstance(data, Tensor):
        data = data.data
    if dtype is not None:
        backend.check_dtype("mt.tensor", dtype)
    python_data = not backend.is_array(data)
    data = backend.numeric_data("mt.tensor", data)  # real numbers only: DTypeError else
    if python_data and dtype is None:  # Python data: PyTorch's defaults (float32, int64, bool)
        data, dtype = backend.host_array_with_default_dtype(data)
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, device=device)
