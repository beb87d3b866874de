"""Function: one differentiable primitive with an explicit forward and backward.

Every op in ``ops/`` is a subclass::

    class Exp(Function):
        @staticmethod
        def forward(ctx, x):            # raw arrays in, raw array out
            y = ctx.xp.exp(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):        # dL/dy in, one dL/d(input) per input out
            (y,) = ctx.saved
            return grad * y

``Exp.apply(t)`` unwraps Tensors to arrays, checks they live on one device, sets
``ctx.xp`` (the array namespace: numpy, cupy or array_api_strict) and
``ctx.needs_input_grad``, runs ``forward`` and wraps the result in a Tensor that
remembers ``ctx`` (only when some input needs a gradient and grad mode is on).

What runs is the op as written, unless the fast tier (``minitransformer/fast``) registered a
*twin* in ``TWINS`` (keyed by reference and array type; empty by default on the CPU): then
``run`` runs the twin, a subclass of the op, and ``ctx.fn`` remembers it for backward.
``implementation(f, x)`` is the same lookup for plain functions (optimizer updates).

During ``Tensor.backward()``, each gradient that ``backward`` returns is *unbroadcast*
to its input's shape: where forward broadcast an input (added axes, or size-1 axes
stretched), the chain rule sums the gradient over those axes (``unbroadcast``, defined
beside the engine in ``tensor.py`` and importable from here).
"""

from __future__ import annotations

from typing import Any

from . import backend
from .grad_mode import is_grad_enabled
from .tensor import Tensor, unbroadcast

__all__ = ["TWINS", "Context", "Function", "implementation", "unbroadcast"]

TWINS: dict[tuple[Any, type], Any] = {}  # (reference, array type) -> twin; see fast/__init__.py


def implementation(reference: Any, x: Any) -> Any:
    """The registered twin of ``reference`` for ``x``'s array type and dtype, else itself."""
    twin = TWINS.get((reference, type(x)))
    if twin is None or (twin.dtypes is not None and x.dtype not in twin.dtypes):
        return reference
    return twin


class Context:
    """What forward leaves for backward: saved arrays, flags, and any attribute you set."""

    def __init__(self, fn: type, xp: Any, needs_input_grad: tuple[bool, ...]):
        self.fn = fn
        self.xp = xp
        self.needs_input_grad = needs_input_grad
        self.saved: tuple = ()
        self.parents: tuple = ()  # the input Tensors (None for an input that was no Tensor)

    def save_for_backward(self, *arrays: Any) -> None:
        self.saved = arrays


class Function:
    """Base class of every differentiable op; see the module docstring.

    ``fresh_grads = True`` promises that ``backward`` returns newly made arrays that
    nothing else holds (not ``grad`` itself, not a view of it, not a saved array), so the
    engine may add further gradients into them in place instead of allocating a sum.
    """

    fresh_grads = False

    @staticmethod
    def forward(ctx: Context, *args: Any, **params: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, grad: Any) -> Any:
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs: Any, **params: Any) -> Tensor:
        """Run forward on the inputs' arrays and return the result as a Tensor."""
        return cls.run(*inputs, **params)[0]

    @classmethod
    def run(cls, *inputs: Any, **params: Any) -> tuple[Tensor, Context]:
        """Like ``apply`` but also return the context (for by-products such as attention
        weights that an op computes anyway)."""
        tensors = [x if isinstance(x, Tensor) else None for x in inputs]
        arrays = [x if t is None else t.data for x, t in zip(inputs, tensors, strict=True)]
        xp = backend.common_namespace(cls.__name__, arrays)
        if arrays:  # the fast tier's twin for the first input's array type, if one is on
            cls = implementation(cls, arrays[0])
        if is_grad_enabled():
            needs = tuple([t is not None and t.requires_grad for t in tensors])
        else:
            needs = (False,) * len(inputs)
        ctx = Context(cls, xp, needs)
        data = cls.forward(ctx, *arrays, **params)
        if not backend.is_array(data):  # NumPy's math on 0-d arrays returns scalars
            data = backend.asarray(data, device=backend.device_of(data))
        out = Tensor._wrap(data)
        if any(needs):
            out.requires_grad = True
            out._ctx = ctx
            ctx.parents = tuple(tensors)
        return out, ctx
