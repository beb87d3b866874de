"""The public face of the ops: ``import minitransformer.functional as F``.

Every name here is a plain function over Tensors whose gradient is an explicit, hand-derived
``backward`` in ``minitransformer/ops/`` (one family per file). Each checks its inputs, with
messages that say how to fix them; the layers in ``nn/`` that have checked theirs already
may call an op's Function directly.
"""

from .ops.activations import sigmoid, tanh
from .ops.arithmetic import add, div, mul, neg, pow, sub
from .ops.blocked_attention import scaled_dot_product_attention  # block_size: blocked
from .ops.device import astype, to_device
from .ops.dropout import dropout, dropout_add
from .ops.elementwise import exp, log, relu, sqrt
from .ops.embedding import embedding
from .ops.grouped_heads import repeat_heads  # grouped-query attention
from .ops.heads import merge_heads, split_heads
from .ops.indexing import concat, getitem
from .ops.layernorm import layer_norm
from .ops.linear_attention import linear_attention  # below n²: a kernel, no softmax
from .ops.local_attention import local_attention  # below n²: a window of keys
from .ops.loss import cross_entropy
from .ops.matmul import linear, matmul
from .ops.reduce import max, mean, sum
from .ops.rms_norm import rms_norm
from .ops.rotary import rotary_embedding  # RoPE
from .ops.shape import permute, reshape, transpose
from .ops.smooth_relu import gelu, gelu_tanh, silu, swish
from .ops.softmax import log_softmax, softmax
from .ops.strided_attention import strided_attention  # below n²: Child et al.'s pattern

__all__ = [
    "add",
    "astype",
    "concat",
    "cross_entropy",
    "div",
    "dropout",
    "dropout_add",
    "embedding",
    "exp",
    "gelu",
    "gelu_tanh",
    "getitem",
    "layer_norm",
    "linear",
    "linear_attention",
    "local_attention",
    "log",
    "log_softmax",
    "matmul",
    "max",
    "mean",
    "mul",
    "neg",
    "merge_heads",
    "permute",
    "pow",
    "relu",
    "repeat_heads",
    "reshape",
    "rms_norm",
    "rotary_embedding",
    "scaled_dot_product_attention",
    "sigmoid",
    "silu",
    "softmax",
    "strided_attention",
    "split_heads",
    "sqrt",
    "sub",
    "sum",
    "swish",
    "tanh",
    "to_device",
    "transpose",
]
