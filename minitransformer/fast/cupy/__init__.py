"""The fast tier for CuPy arrays: fused CUDA kernels, each a twin of the reference it
replaces and tested against it (tests/fast/test_cuda_rows.py, test_cuda_step.py on a GPU;
their wiring on the CPU in test_cupy_wiring.py); the CUDA C is in ``fast/cuda/*.cu``.

On a GPU every array call is a kernel launch (~12 µs of overhead), so the reference ops,
written as a dozen array calls each, are launch-bound at the model's sizes. Each twin does
a row reduction and its elementwise work in one launch, the same math in the same order as
the reference, returning what the reference returns in the same layout. One file per
reference, named after it:

    layernorm.py    ops/layernorm.py    LayerNorm: one launch each way (layer_norm.cu)
    softmax.py      ops/softmax.py      Softmax, LogSoftmax forward: one launch
    attention.py    ops/attention.py    ScaledDotProductAttention's masked softmax
    projections.py  ops/projections.py  q, k, v as one cuBLAS product; attention on its heads
    loss.py         ops/loss.py         CrossEntropy: rows and the mean (cross_entropy.cu)
    linear.py       ops/matmul.py       Linear: the bias in cuBLASLt's epilogues
    elementwise.py  ops/elementwise.py  ReLU's backward: one kernel
    embedding.py    ops/embedding.py    Embedding's backward: one-hot kernel and product
    dropout.py      ops/dropout.py      Dropout, DropoutAdd: the mask made in the kernel
    adam.py         optim/adam.py       adam_update: one launch (adam.cu)
    clip.py         optim/clip.py       clip_flat, step_ok: no host read (grad_norm.cu)

The kernels take float32 and float64 arrays (``DTYPES``: the twins say so in ``dtypes``, so
float16 runs the reference math), made C-contiguous first. On by default on a GPU;
``MT_CUDA_KERNELS=0`` switches it off (``fast/__init__.py``). Tested on a GPU by ``pytest -m
gpu`` with the switch off and on (``python -m minitransformer.tools.gpucheck``).

``TWINS``, below, is what ``fast`` registers for ``cupy.ndarray`` when CuPy is first used.
Importable without CuPy: its names are checked on the CPU.
"""

from __future__ import annotations

from ...ops.attention import ScaledDotProductAttention as _Attention
from ...ops.dropout import Dropout as _Dropout
from ...ops.dropout import DropoutAdd as _DropoutAdd
from ...ops.elementwise import ReLU as _ReLU
from ...ops.embedding import Embedding as _Embedding
from ...ops.layernorm import LayerNorm as _LayerNorm
from ...ops.loss import CrossEntropy as _CrossEntropy
from ...ops.matmul import Linear as _Linear
from ...ops.projections import PackedAttention as _PackedAttention
from ...ops.projections import Projections as _Projections
from ...ops.softmax import LogSoftmax as _LogSoftmax
from ...ops.softmax import Softmax as _Softmax
from ...optim.adam import adam_update as _adam_update
from ...optim.clip import clip_flat as _clip_flat
from ...optim.clip import step_ok as _step_ok
from ..gpu.cuda_source import DTYPES
from .adam import adam_update
from .attention import ScaledDotProductAttention
from .clip import clip_flat, step_ok
from .dropout import Dropout, DropoutAdd
from .elementwise import ReLU
from .embedding import Embedding
from .layernorm import LayerNorm
from .linear import Linear
from .loss import CrossEntropy
from .projections import PackedAttention, Projections
from .softmax import LogSoftmax, Softmax

# reference -> twin: what ``fast`` registers for cupy.ndarray when CuPy is first used
TWINS = {
    _Linear: Linear,
    _LayerNorm: LayerNorm,
    _Softmax: Softmax,
    _LogSoftmax: LogSoftmax,
    _CrossEntropy: CrossEntropy,
    _Attention: ScaledDotProductAttention,
    _Projections: Projections,
    _PackedAttention: PackedAttention,
    _Dropout: Dropout,
    _ReLU: ReLU,
    _Embedding: Embedding,
    _DropoutAdd: DropoutAdd,
    _adam_update: adam_update,
    _clip_flat: clip_flat,
    _step_ok: step_ok,
}

__all__ = ["DTYPES", "TWINS"]
