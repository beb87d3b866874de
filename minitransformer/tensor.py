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
gradients is ever alive. An op's backward may even write a parameter's gradient straight into
that buffer (``take_grad_buffer``), so that nothing is copied afterwards.

Operators (``+ - * / @ **``, indexing) and the methods ``exp``, ``sum``, ``reshape``, ``to``,
... are attached to Tensor by ``minitransformer/ops/__init__.py`` in one table: the ops
stand on this module, so this module cannot import them (imports only run downward).
"""

from __future__ import annotations

from typing import Any

from . import backend
from .grad_mode import enable_grad, is_grad_enabled, no_grad

__all__ = [
    "Tensor",
    "enable_grad",
    "is_grad_enabled",
    "no_grad",
    "tensor",
    "topological_order",
    "unbroadcast",
]

_passes = 0  # backward passes begun in this process (take_grad_buffer: one taker a pass)


class Tensor:
    """An array (NumPy, CuPy or strict) with an optional gradient. See the module doc."""

    __slots__ = ("data", "grad", "requires_grad", "_ctx", "_retains_grad", "_grad_owned",
                 "_freed", "_grad_buffer", "_buffer_taken")  # fmt: skip
    __array_priority__ = 1000  # numpy_scalar * tensor -> Tensor.__rmul__, not NumPy

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
        self._buffer_taken = 0  # the backward pass whose op took the buffer (take_grad_buffer)

    @classmethod
    def _wrap(cls, data: Any) -> Tensor:
        """A Tensor around an array an op just made (no checks, no copies)."""
        t = cls.__new__(cls)
        t.data, t.grad, t.requires_grad, t._ctx, t._grad_buffer = data, None, False, None, None
        t._retains_grad = t._grad_owned = t._freed = False
        t._buffer_taken = 0
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

    def take_grad_buffer(self) -> Any:
        """The gradient buffer of this leaf, for an op's backward to write the leaf's gradient
        into (and return it: ``backward`` then finds it in place and copies nothing). Handed
        out once per backward pass, and only while ``.grad`` is None; else None, and the op
        returns a new array as usual. Later gradients of the leaf add to it as always."""
        if self._grad_buffer is None or self.grad is not None or self._buffer_taken == _passes:
            return None
        self._buffer_taken = _passes
        return self._grad_buffer

    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Backpropagate from this tensor: fill ``.grad`` of every leaf that needs one.

        ``grad`` is dL/d(self); it defaults to 1 for a one-element tensor (a loss). The walk
        is lesson 01's: every tensor the loss was computed from, in reverse topological
        order (each after all the tensors computed from it), each op's ``backward`` applied
        to the gradient that reached its output, and the gradients that reach a tensor by
        several paths summed (the multivariate chain rule).
        """
        if not self.requires_grad:
            raise RuntimeError(
                "backward(): this tensor does not require grad; create the inputs with "
                "requires_grad=True (and not inside no_grad())"
            )
        grad = self._seed_grad(grad)
        global _passes
        _passes += 1
        grads = _Gradients(self, grad)  # the gradient reaching each tensor, summed over paths
        for node in reversed(topological_order(self)):
            g = grads.pop(node)
            if g is None:  # no gradient reached it (its consumers' backward returned None)
                continue
            if node._freed:
                raise RuntimeError(
                    "backward(): part of this graph was already used by an earlier backward() "
                    "and freed; pass retain_graph=True to the first backward() to reuse it"
                )
            ctx = node._ctx
            if ctx is None or node._retains_grad:  # a leaf (or a tensor asked to keep it)
                node._accumulate(g, grads.owns(node) and ctx is None)
            if ctx is None:
                continue
            in_grads = ctx.fn.backward(ctx, g)  # one dL/d(input) per input: the local rule
            if not isinstance(in_grads, tuple):
                in_grads = (in_grads,)
            for parent, pg in zip(ctx.parents, in_grads, strict=False):
                if parent is not None and pg is not None and parent.requires_grad:
                    pg = unbroadcast(ctx.xp, pg, parent.shape)  # forward broadcast: sum back
                    grads.add(parent, pg, fresh=ctx.fn.fresh_grads)
            if not retain_graph:  # release the graph: its saved arrays go with it
                node._ctx, node._freed = None, True

    def _seed_grad(self, grad: Any) -> Any:
        """dL/d(self) as an array of self's shape, dtype and device (1 for a scalar loss)."""
        if grad is None:
            if self.size != 1:
                raise RuntimeError(
                    f"backward(): the tensor has shape {self.shape}; pass grad= of that shape "
                    "or call it on a scalar loss"
                )
            return backend.namespace(self.data).ones_like(self.data)
        if isinstance(grad, Tensor):
            grad = grad.data
        elif not backend.is_array(grad) or backend.device_of(grad) != self.device:
            grad = backend.asarray(grad, dtype=self.data.dtype, device=self.device)
        if tuple(grad.shape) != self.shape:
            raise ValueError(f"backward(): grad has shape {tuple(grad.shape)}, need {self.shape}")
        return grad

    def _accumulate(self, g: Any, owned: bool) -> None:
        """Add ``g`` to ``.grad`` (a leaf's gradients add up across backward passes); the
        first gradient goes into the gradient buffer, if the leaf has one."""
        if self.grad is None:
            buf = self._grad_buffer
            if g is buf:  # an op's backward wrote it there already (take_grad_buffer)
                self.grad, self._grad_owned = buf, True
                return
            if type(buf) is type(g) and (buf.dtype, buf.device) == (g.dtype, g.device):
                buf[...] = g  # into the gradient buffer; g is freed now
                self.grad, self._grad_owned = buf, True
                return
            self.grad, self._grad_owned = g, owned
        elif self._grad_owned:
            self.grad += g
        else:
            self.grad, self._grad_owned = self.grad + g, True
        if not backend.is_array(self.grad):  # NumPy math on 0-d arrays returns scalars
            self.grad, self._grad_owned = backend.namespace(self.data).asarray(self.grad), True


def topological_order(root: Tensor) -> list[Tensor]:
    """Every tensor that needs a gradient and that ``root`` was computed from, ``root``
    included, each listed after the tensors it was computed from (lesson 01's depth-first
    walk, with a stack of its own instead of recursion, so a graph thousands of ops deep
    does not reach Python's recursion limit)."""
    order: list[Tensor] = []
    seen: set[Tensor] = set()
    stack: list[tuple[Tensor, bool]] = [(root, False)]
    while stack:
        node, parents_done = stack.pop()
        if parents_done:  # every tensor it was computed from is in ``order`` already
            order.append(node)
        elif node not in seen:
            seen.add(node)
            stack.append((node, True))  # comes back after its parents
            if node._ctx is not None:
                stack.extend([(p, False) for p in node._ctx.parents
                              if p is not None and p.requires_grad and p not in seen])  # fmt: skip
    return order


class _Gradients:
    """The gradients that have reached each tensor so far in one backward pass, summed
    over paths. A memory detail, apart from the walk: a sum this pass made itself, or an
    array that an op's backward promises is new (``Function.fresh_grads``), is *owned* and
    further gradients are added into it in place, instead of allocating a new sum."""

    def __init__(self, root: Tensor, grad: Any):
        self.grads: dict[Tensor, Any] = {root: grad}  # keyed by the Tensor (identity hash)
        self.owned: set[Tensor] = set()

    def add(self, t: Tensor, g: Any, fresh: bool) -> None:
        if t not in self.grads:
            self.grads[t] = g
            if fresh:
                self.owned.add(t)
        elif t in self.owned:
            self.grads[t] += g
        else:
            self.grads[t] = self.grads[t] + g
            self.owned.add(t)

    def pop(self, t: Tensor) -> Any:
        return self.grads.pop(t, None)

    def owns(self, t: Tensor) -> bool:
        return t in self.owned


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
