"""FlatGroup: parameters, gradients and optimizer state as views into flat 1-D buffers.

Why: a model has many parameter arrays (tiny: 85, base: 253). An optimizer that loops over
them makes ~10 array calls per parameter per step; on a GPU each call costs ~12 µs of
launch overhead, so Adam alone would cost more than the arithmetic of the step. Laid end to
end in one buffer per device and dtype, the same update is a handful of calls whatever the
number of parameters (the "multi-tensor" or "flat" optimizer of large training systems):

    data  (n,)   every parameter of the group, end to end;  p.data = data[a:b].reshape(shape)
    grad  (n,)   every gradient; p.grad = grad[a:b].reshape(shape). Each view is the
                 parameter's gradient buffer (``Tensor.set_grad_buffer``): backward writes a
                 fresh gradient straight into it, so no second copy of the gradients is ever
                 alive; gradients made elsewhere are copied in by ONE concatenation
                 (``gather``)
    state (n,)   per optimizer state name (Adam's m and v, SGD's momentum), same layout

so ``data -= lr * update`` moves every parameter at once, ``vector_norm(grad)`` is the
global gradient norm, and an all-reduce of ``grad`` is one call (data parallelism).

The group *adopts* the parameters: their ``.data`` become views into ``data``. Code that
later replaces a parameter's array (``model.to(...)``, ``load_state_dict``) is noticed by
``intact()``: an array of the same device, dtype and shape is copied back into its slot
(``readopt()``); anything else makes the optimizer lay the groups out anew.
"""

from __future__ import annotations

import operator

from .. import backend
from ..tensor import Tensor

Array = backend.Array


def concat_into(out: Array, arrays: list[Array]) -> None:
    """out[...] = the arrays flattened and laid end to end. Shapes: out (n,), n = Σ sizes.

    One concatenation of 1-D reshapes, then one copy into ``out`` (rare in training:
    backward writes each gradient into its view of ``out`` already)."""
    xp = backend.namespace(out)
    out[...] = xp.concat([xp.reshape(a, (-1,)) for a in arrays])


class FlatGroup:
    """The parameters of one device and dtype, laid end to end (see the module doc)."""

    def __init__(self, params: list[Tensor]):
        first = params[0].data
        self.xp = xp = backend.namespace(first)
        self.device, self.dtype = backend.device_of(first), first.dtype
        self.params = params
        self.shapes = [tuple(p.shape) for p in params]
        self.bounds: list[tuple[int, int]] = []
        n = 0
        for p in params:
            self.bounds.append((n, n + p.size))
            n += p.size
        self.size = n
        self.data = xp.concat([xp.reshape(p.data, (-1,)) for p in params])  # (n,) a copy
        self.views = self.slices(self.data)
        for p, v in zip(params, self.views, strict=True):
            p.data = v
        self.grad = xp.zeros_like(self.data)  # (n,)
        self.grad_views = self.slices(self.grad)
        for p, gv in zip(params, self.grad_views, strict=True):
            p.set_grad_buffer(gv)  # backward writes a fresh gradient straight into its view
        self.state: dict[str, Array] = {}  # name -> (n,) array, made on first use
        self.state_views: dict[str, list[Array]] = {}  # name -> its per-parameter views

    def slices(self, flat: Array) -> list[Array]:
        """One view per parameter into the flat array ``flat`` (n,), in parameter shapes."""
        xp = self.xp
        return [
            xp.reshape(flat[a:b], shape)
            for (a, b), shape in zip(self.bounds, self.shapes, strict=True)
        ]

    # ------------------------------------------------------------------ adoption
    def intact(self) -> bool:
        """True while every parameter's ``.data`` is still its view into ``data``."""
        for p, v in zip(self.params, self.views, strict=True):
            if p.data is not v:
                return False
        return True

    def readopt(self) -> bool:
        """Copy replaced parameter arrays back into their slots and point ``.data`` at the
        views again. False (nothing changed) when one moved device, dtype or shape: then
        the caller must lay the groups out anew."""
        replaced = [(p, v) for p, v in zip(self.params, self.views, strict=True) if p.data is not v]
        for p, v in replaced:
            a = p.data
            if (
                backend.device_of(a) != self.device
                or a.dtype != self.dtype
                or tuple(a.shape) != tuple(v.shape)
            ):
                return False
        for p, v in replaced:
            v[...] = p.data
            p.data = v
        return True

    # ------------------------------------------------------------------ gradients
    def gather(self) -> list[bool]:
        """Copy every parameter's ``.grad`` into ``grad`` (zeros for a missing one) with one
        concatenation, then make each ``.grad`` its view. Returns which parameters had a
        gradient. Nothing is copied when every gradient already is its view."""
        grads = [p.grad for p in self.params]
        if all(map(operator.is_, grads, self.grad_views)):
            return [True] * len(grads)  # gathered already, nothing new since
        xp, has = self.xp, []
        parts, fresh = [], False
        for p, gv, (a, b) in zip(self.params, self.grad_views, self.bounds, strict=True):
            g = p.grad
            if g is None:  # its slot may hold an old gradient: write zeros there
                has.append(False)
                parts.append(xp.zeros((b - a,), dtype=self.dtype, device=self.data.device))
                fresh = True
                continue
            has.append(True)
            if g is not gv:
                fresh = True
            parts.append(g)
        if not fresh:
            return has
        concat_into(self.grad, parts)
        for p, gv, h in zip(self.params, self.grad_views, has, strict=True):
            if h:  # owned: a later backward (no zero_grad) adds into the buffer
                p.set_grad(gv, owned=True)
        return has
