"""Where a twin's backward may write a parameter's gradient: the optimizer's buffer.

An optimizer with one flat buffer for all gradients gives each parameter a view of it
(``Tensor.set_grad_buffer``); the engine copies a parameter's first gradient there. A twin
that computes that gradient with ``out=`` (a GEMM, a column sum) can write it there itself
and return the buffer: the engine finds it in place and copies nothing.
"""

from __future__ import annotations

from typing import Any


def offered(ctx: Any) -> tuple[Any, ...]:
    """For each input of the op, the gradient buffer of a leaf that has none of this
    backward pass's gradients yet (``Tensor.take_grad_buffer``), else None. Call it once in
    ``backward``; a buffer handed out and not written costs only the usual copy."""
    return tuple([None if p is None else p.take_grad_buffer() for p in ctx.parents])
