"""Grad mode: whether ops record the graph for backward, per thread (as in PyTorch).

    with mt.no_grad():          # or @mt.no_grad(): evaluation, decoding, the optimizer
        logits = model(src, tgt_in)          # no graph is kept: less memory, less time

``enable_grad()`` switches recording back on inside a ``no_grad`` block. One thread's
``no_grad()`` never switches autograd off in another. ``Function.run`` asks
``is_grad_enabled()`` once per op.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class _GradMode(threading.local):
    """Whether ops record the graph, per thread (as in PyTorch): one thread's ``no_grad()``
    never switches autograd off in another. Every thread starts with it on."""

    enabled = True  # the class default: what a new thread reads


_grad_mode = _GradMode()


def is_grad_enabled() -> bool:
    """True unless inside ``no_grad()`` in this thread: ops record the graph for backward."""
    return _grad_mode.enabled


@contextlib.contextmanager
def _set_grad_enabled(enabled: bool) -> Iterator[None]:
    previous, _grad_mode.enabled = _grad_mode.enabled, enabled
    try:
        yield
    finally:
        _grad_mode.enabled = previous


def no_grad() -> contextlib.AbstractContextManager[None]:
    """``with no_grad():`` (or ``@no_grad()``): ops in this thread record no graph."""
    return _set_grad_enabled(False)


def enable_grad() -> contextlib.AbstractContextManager[None]:
    """``with enable_grad():`` inside a no_grad block: this thread records the graph again."""
    return _set_grad_enabled(True)
