"""The fast tier for NumPy arrays on the CPU: twins of reference ops, each measured, each
tested against its reference (tests/fast/test_numpy*.py). Off unless ``fast.enable()``.

What is fast here is mostly *fewer Python calls and fewer temporaries*: at the model sizes
of the lessons a step's time on a CPU is interpreter time and memory traffic as much as
arithmetic. Each twin earns its place, measured on a training step with and without it
(docs/measurements.md); the twins that did not (softmax and log-softmax, 1.00) were
deleted, and the one-call ``reshape`` and ``sum`` (no math) moved to the backend's NumPy
namespace, where every op gets them.

One file per reference, named after it:

    layernorm.py   ops/layernorm.py   LayerNorm's row math (``vecdot`` means, fewer buffers)
    loss.py        ops/loss.py        CrossEntropy's row math (one reused (N, V) buffer)
    attention.py   ops/attention.py   ScaledDotProductAttention (no row max where safe)
    projections.py ops/projections.py q, k, v as one product; attention on its packed heads
    linear.py      ops/matmul.py      Linear's backward (dW, db into the gradient buffer)
    dropout.py     ops/dropout.py     Dropout, DropoutAdd (the mask as a product)
    adam.py        optim/adam.py      adam_update (one temporary, in cached chunks)
    embedding.py   ops/embedding.py   Embedding's backward (numba's one pass, when on)
    elementwise.py ops/elementwise.py ReLU's backward (numba's one pass, when on)

``compiled.py`` holds numba's kernels (an optional extra, off unless ``compiled.enable()``):
LayerNorm's rows, Adam, the embedding's scatter-add and ReLU's backward, one pass each.

``TWINS`` lists what this package registers for ``numpy.ndarray`` (``fast/__init__.py``
installs it).
"""

from __future__ import annotations

from ...ops.attention import ScaledDotProductAttention as _Attention
from ...ops.elementwise import ReLU as _ReLU
from ...ops.embedding import Embedding as _Embedding
from ...ops.layernorm import LayerNorm as _LayerNorm
from ...ops.loss import CrossEntropy as _CrossEntropy
from ...ops.matmul import Linear as _Linear
from ...ops.projections import PackedAttention as _PackedAttention
from ...ops.projections import Projections as _Projections
from ...optim.adam import adam_update as _adam_update
from .adam import adam_update
from .attention import ScaledDotProductAttention
from .dropout import TWINS as _DROPOUT_TWINS
from .elementwise import ReLU
from .embedding import Embedding
from .layernorm import LayerNorm
from .linear import Linear
from .loss import CrossEntropy
from .projections import PackedAttention, Projections

# reference -> twin: what ``fast.enable()`` registers for numpy.ndarray
TWINS = {
    **_DROPOUT_TWINS,  # dropout.py's: Dropout, DropoutAdd
    _Linear: Linear,
    _Attention: ScaledDotProductAttention,
    _Projections: Projections,
    _PackedAttention: PackedAttention,
    _LayerNorm: LayerNorm,
    _CrossEntropy: CrossEntropy,
    _adam_update: adam_update,
    _Embedding: Embedding,
    _ReLU: ReLU,
}

__all__ = ["TWINS"]
