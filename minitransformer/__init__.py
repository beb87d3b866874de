"""minitransformer: the Transformer of "Attention Is All You Need", from scratch on NumPy.

import minitransformer as mt
import minitransformer.functional as F
mt.nn.Transformer(...), mt.optim.Adam(...), mt.gradcheck(...)
"""

from . import (
    backend,
    errors,
    nn,
    ops,  # noqa: F401 - attaches Tensor's operators and methods (ops/__init__.py)
    optim,
)
from .backend import cuda_available, set_default_device
from .config import TransformerConfig
from .gradcheck import GradcheckError, gradcheck
from .tensor import Tensor, enable_grad, is_grad_enabled, no_grad, tensor
from .version import __version__

__all__ = [
    "GradcheckError",
    "Tensor",
    "__version__",
    "TransformerConfig",
    "backend",
    "cuda_available",
    "enable_grad",
    "errors",
    "gradcheck",
    "is_grad_enabled",
    "nn",
    "no_grad",
    "optim",
    "set_default_device",
    "tensor",
]
