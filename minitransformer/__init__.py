"""minitransformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017),
built from scratch on NumPy (CuPy on a GPU) with a hand-written forward and backward for
every op, to be read as much as run.

Where to start
    lessons/00_tokens_from_scratch.ipynb ... 21_block_since_2017.ipynb build it up step by
    step: tokens (byte-pair encoding), autograd, softmax and cross-entropy, LayerNorm,
    attention, the encoder-decoder, training, decoding, speed, recurrence, ablations, data
    parallelism, attention at length, a real translator, the decoder-only language model,
    its scaling and its heads, attention below n² (local, strided, linear), and the block
    since 2017 (GPT-2's and Llama's: pre-LN, RMSNorm, rotary positions, SwiGLU, GQA).
    docs/reading.md lists the files that make the model in reading order: tensor.py,
    function.py, gradcheck.py, ops/, nn/, optim/adam.py, train/step.py, decode.py (the rest
    of the package, fast/, tools/ and runtime/, is the house around them). On the command line::

        minitransformer train copy          # a model that copies sequences, in about a minute
        minitransformer train translate     # a toy language pair; then translate / evaluate
        minitransformer train lm            # a language model on the verses; then generate
        minitransformer --help              # every command: train, translate, generate,
                                            # evaluate, plot, bench, ablate, scale

    In the code, the top level is the learning core, in the order the lessons build it:
    tensor.py (and grad_mode.py), function.py, gradcheck.py, ops/ and functional.py, nn/,
    optim/, train/, decode.py; below them backend/, config/, data/. Two folders hold the
    rest: runtime/ (checkpoints, run directories, data parallelism, a trained model loaded
    back) and tools/ (benchmarks, call counts, the GPU check, studies and figures).

The main names (``import minitransformer as mt``)
    mt.tensor(data, requires_grad=True), mt.Tensor    arrays with autograd (``.backward()``)
    mt.no_grad(), mt.enable_grad(), mt.is_grad_enabled()
    minitransformer.functional (``F``)                softmax, layer_norm, attention, ...
    mt.nn                                             Module, Linear, LayerNorm,
                                                      MultiHeadAttention, Transformer,
                                                      TransformerLM (decoder-only)
    mt.optim                                          Adam, SGD, NoamSchedule, clipping
    mt.gradcheck(fn, *inputs)                         gradients against finite differences
    mt.fast.enable(), mt.fast.reference_only()        the fast tier (off on the CPU: what
                                                      you read in ops/ is what runs)
    mt.TransformerConfig.preset("tiny", ...)          model sizes: tiny, small, base, big
    mt.TrainConfig(task="copy", out="runs/copy")      a training run's settings, checked
    mt.Trainer(cfg).train(), mt.Trainer.resume(dir)   the training loop, checkpoints, resume
    mt.Translator.from_checkpoint(dir)                a trained run that translates text
    mt.TextSampler.from_checkpoint(dir)               a trained language model that writes
    mt.set_default_device("cuda"), mt.cuda_available()
    mt.errors                                         ShapeError, DTypeError, ConfigError, ...

A first model::

    import numpy as np
    import minitransformer as mt

    cfg = mt.TransformerConfig.preset("tiny", src_vocab=100, tgt_vocab=100)
    model = mt.nn.Transformer(cfg)
    src = np.array([[5, 6, 7, 2]])            # (batch, source length) token ids
    tgt_in = np.array([[1, 5, 6]])            # (batch, target length), BOS first
    logits = model(src, tgt_in)               # (1, 3, 100)

The layout, floor by floor, is docs/architecture.md. Importing the package changes nothing
process-wide (no signal handlers, no thread settings): only the command line tunes its own
process. ``Trainer``, ``Translator`` and ``TextSampler`` load on first use (they bring the
checkpoint, run and data machinery), so ``import minitransformer`` stays quick.
"""

from typing import Any

from . import (
    backend,
    errors,
    fast,  # registers the GPU's fused kernels for CuPy's first use (fast/__init__.py)
    nn,
    ops,  # noqa: F401 - attaches Tensor's operators and methods (ops/__init__.py)
    optim,
)
from .backend import cuda_available, set_default_device
from .config import TrainConfig, TransformerConfig
from .config.version import __version__
from .gradcheck import GradcheckError, gradcheck
from .tensor import Tensor, enable_grad, is_grad_enabled, no_grad, tensor

_LAZY = {
    "Trainer": "minitransformer.train",
    "Translator": "minitransformer.runtime.translator",
    "TextSampler": "minitransformer.runtime.sampler",
}

__all__ = [
    "GradcheckError",
    "Tensor",
    "TextSampler",
    "TrainConfig",
    "Trainer",
    "TransformerConfig",
    "Translator",
    "__version__",
    "backend",
    "cuda_available",
    "enable_grad",
    "errors",
    "fast",
    "gradcheck",
    "is_grad_enabled",
    "nn",
    "no_grad",
    "optim",
    "set_default_device",
    "tensor",
]


def __getattr__(name: str) -> Any:
    """``mt.Trainer`` and ``mt.Translator``, imported the first time they are asked for."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # the next lookup finds it directly
        return value
    raise AttributeError(f"module 'minitransformer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
