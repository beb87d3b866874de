"""The basic layers: Linear, Embedding, LayerNorm, RMSNorm, Dropout, PositionwiseFeedForward.

Weights are drawn on the host in float64 by a seeded ``backend.Generator`` (the model's,
or the default CPU generator that ``backend.manual_seed`` seeds), then stored as float32
on the default device; ``module.to(device, dtype)`` moves or casts them later. Drawing in
float64 first means a float32 and a float64 model built from one seed hold the same
weights up to rounding.

Every constructor checks its arguments where they enter (a library error naming the
argument and the fix). PositionwiseFeedForward may be given a layer's TransformerConfig
instead of d_model (the layers' way, see blocks.py): validated when it was made and frozen
since, the config is read, not checked again. Linear, Embedding, LayerNorm and Dropout take
plain numbers only; a layer that builds them from numbers it read from a config, or checked
where they entered, passes the private ``_checked=True`` so they are not checked twice.
"""

from __future__ import annotations

import math

from .. import backend, checks
from .. import functional as F
from ..config import TransformerConfig
from ..errors import ConfigError
from ..ops.checks import not_a_tensor
from ..tensor import Tensor
from .module import Module, Parameter


def _generator(generator: backend.Generator | None) -> backend.Generator:
    return generator if generator is not None else backend.default_generator("cpu")


def _host():
    """The array namespace of host (CPU) arrays, for initial values."""
    return backend.namespace_for_device("cpu")


class Linear(Module):
    """y = x W + b, with W (d_in, d_out) as in the paper's "xW + b" (PyTorch stores W^T).

    Shapes: x (..., d_in) -> y (..., d_out). Init: Xavier/Glorot uniform,
    W ~ U(-a, a) with a = sqrt(6 / (d_in + d_out)), which keeps the variance of
    activations and of gradients roughly equal across the layer; b = 0.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        bias: bool = True,
        generator: backend.Generator | None = None,
        *,
        _checked: bool = False,
    ):
        super().__init__()
        if not _checked:
            fix = "Linear(d_in, d_out) takes the input and output widths, e.g. Linear(512, 2048)"
            d_in = checks.positive_int("Linear", "d_in", d_in, fix)
            d_out = checks.positive_int("Linear", "d_out", d_out, fix)
            bias = checks.flag("Linear", "bias", bias)
        self.d_in, self.d_out = d_in, d_out
        a = math.sqrt(6.0 / (d_in + d_out))
        w = _generator(generator).uniform((d_in, d_out), -a, a, dtype="float64")
        self.weight = Parameter(w, dtype="float32")
        self.bias = Parameter(_host().zeros(d_out), dtype="float32") if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"d_in={self.d_in}, d_out={self.d_out}, bias={self.bias is not None}"


class Embedding(Module):
    """A lookup table: ids (...) int -> weight[ids] (..., D), weight (V, D).

    Init: normal with std D^-1/2, so that after the model's scaling by sqrt(D) the
    embedded tokens have unit variance per coordinate, the scale of the sinusoids.
    """

    def __init__(
        self, V: int, D: int, generator: backend.Generator | None = None, *, _checked: bool = False
    ):
        super().__init__()
        if not _checked:
            V = checks.positive_int("Embedding", "V", V, "V is the vocabulary size: len(vocab)")
            D = checks.positive_int("Embedding", "D", D, "D is the vector width, d_model")
        self.V, self.D = V, D
        w = _generator(generator).normal((V, D), std=D**-0.5, dtype="float64")
        self.weight = Parameter(w, dtype="float32")

    def forward(self, ids: Tensor, validate: bool = True) -> Tensor:
        return F.embedding(ids, self.weight, validate=validate)

    def extra_repr(self) -> str:
        return f"V={self.V}, D={self.D}"


class LayerNorm(Module):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta over the last axis (size D).

    Shapes: x (..., D) -> y (..., D); gamma = 1 and beta = 0 at init.
    """

    def __init__(self, D: int, eps: float = 1e-5, *, _checked: bool = False):
        super().__init__()
        self.D, self.eps = (D, eps) if _checked else check_norm("LayerNorm", D, eps)
        self.gamma = Parameter(_host().ones(D), dtype="float32")
        self.beta = Parameter(_host().zeros(D), dtype="float32")

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.gamma, self.beta, eps=self.eps)

    def extra_repr(self) -> str:
        return f"D={self.D}, eps={self.eps}"


class RMSNorm(Module):
    """y = gamma * x / sqrt(mean(x²) + eps) over the last axis (size D): LayerNorm without
    the mean's subtraction and without beta (Zhang & Sennrich 2019; Llama's norm).

    Shapes: x (..., D) -> y (..., D); gamma = 1 at init. The op: ops/rms_norm.py.
    """

    def __init__(self, D: int, eps: float = 1e-5, *, _checked: bool = False):
        super().__init__()
        self.D, self.eps = (D, eps) if _checked else check_norm("RMSNorm", D, eps)
        self.gamma = Parameter(_host().ones(D), dtype="float32")

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.gamma, eps=self.eps)

    def extra_repr(self) -> str:
        return f"D={self.D}, eps={self.eps}"


def check_norm(where: str, D: int, eps: float) -> tuple[int, float]:
    """A norm's arguments (LayerNorm's or RMSNorm's), checked: (D, eps), D a positive int,
    eps a real > 0."""
    D = checks.positive_int(where, "D", D, "D is the width of the last axis, d_model")
    eps = checks.real(where, "eps", eps, 0.0, low_open=True, fix="the usual is 1e-5")
    return D, eps


def norm_layer(cfg: TransformerConfig) -> LayerNorm | RMSNorm:
    """The norm a TransformerConfig asks for (cfg.norm, cfg.norm_eps), d_model wide."""
    norm = RMSNorm if cfg.norm == "rms" else LayerNorm
    return norm(cfg.d_model, cfg.norm_eps, _checked=True)


class Dropout(Module):
    """In training, zero each element with probability p and scale the rest by 1/(1-p)
    (so the expectation is unchanged); in eval mode, the identity."""

    def __init__(
        self, p: float, generator: backend.Generator | None = None, *, _checked: bool = False
    ):
        super().__init__()
        self.p = float(p) if _checked else checks.probability("Dropout", "p", p)
        self.generator = generator  # None: the default generator of the input's device

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):  # checked here: eval mode passes x through
            raise not_a_tensor("Dropout", "x", x)
        if not self.training or self.p == 0.0:
            return x
        return F.dropout(x, self.p, training=True, generator=self.generator)

    def add(self, x: Tensor, residual: Tensor) -> Tensor:
        """residual + self(x), as one op (``F.dropout_add``: the same numbers and the same
        draw, one fused kernel on a GPU); residual + x in eval mode."""
        if not self.training or self.p == 0.0:
            if not isinstance(x, Tensor):
                raise not_a_tensor("Dropout.add", "x", x)
            return residual + x
        return F.dropout_add(x, residual, self.p, training=True, generator=self.generator)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class PositionwiseFeedForward(Module):
    """FFN(x) = act(x W1 + b1) W2 + b2, applied to each position alone (paper eq. 2).

    Shapes: x (B, T, d_model) -> (B, T, d_ff) -> (B, T, d_model).
    ``activation``: "relu" (the paper's max(0, x), default), "gelu" (x Φ(x)), "gelu_tanh"
    (GPT-2's tanh approximation of it) or "swish" (x σ(x), SiLU: Marian's opus-mt models);
    each an op with its own backward (ops/elementwise.py, ops/smooth_relu.py).

    Gated (cfg.gated_ffn, Shazeer 2020): a third matrix W3 (d_model, d_ff) gates the hidden
    units, FFN(x) = (act(x W1) ⊙ x W3) W2; with "swish" this is Llama's SwiGLU. Three
    matrices instead of two: a gated layer with d_ff = 2/3 of a plain one's has its
    parameter count. cfg.linear_bias False builds the linears without biases.
    ``dropout`` is an optional dropout on the hidden activations (PyTorch's
    nn.Transformer and the Annotated Transformer use one); the default 0.0 is the paper's
    formula, and the model uses that.

    ``PositionwiseFeedForward(cfg, d_ff, generator=None)``: a layer's feed-forward, given
    its TransformerConfig (read as it is: cfg.d_model, cfg.activation) and its stack's d_ff
    (``cfg.sizes``), with no hidden dropout; the layers build theirs so. Given numbers, it
    checks each where it enters.
    """

    FUNCTIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_tanh", "swish": "silu"}
    # name -> F.<function>

    def __init__(
        self,
        d_model: int | TransformerConfig,
        d_ff: int,
        dropout: float = 0.0,
        generator: backend.Generator | None = None,
        activation: str = "relu",
    ):
        super().__init__()
        gated, bias = False, True
        if isinstance(d_model, TransformerConfig):  # validated when made, frozen since
            cfg = d_model
            d_model, activation, gated, bias = cfg.d_model, cfg.activation, cfg.gated_ffn, \
                cfg.linear_bias  # fmt: skip
        else:
            d_model, d_ff, dropout, activation = check_feed_forward(
                "PositionwiseFeedForward", d_model, d_ff, dropout, activation
            )
        self.activation = activation
        self.act = getattr(F, self.FUNCTIONS[activation])
        self.w_1 = Linear(d_model, d_ff, bias, generator, _checked=True)
        self.w_2 = Linear(d_ff, d_model, bias, generator, _checked=True)
        self.w_3 = Linear(d_model, d_ff, bias, generator, _checked=True) if gated else None
        self.dropout = Dropout(dropout, _checked=True)

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.act(self.w_1(x))  # (B, T, d_ff)
        if self.w_3 is not None:  # gated: act(x W1) ⊙ x W3
            hidden = hidden * self.w_3(x)
        return self.w_2(self.dropout(hidden))

    def extra_repr(self) -> str:
        extra = "" if self.activation == "relu" else f"activation={self.activation}"
        return extra + (", gated" if self.w_3 is not None else "")


def check_feed_forward(
    where: str, d_model: int, d_ff: int, dropout: float, activation: str
) -> tuple[int, int, float, str]:
    """The arguments of a PositionwiseFeedForward (or of a layer ``where`` that builds one),
    checked: (d_model, d_ff, dropout, activation), ints made ints."""
    d_model = checks.positive_int(where, "d_model", d_model, "the model width, e.g. 512")
    d_ff = checks.positive_int(where, "d_ff", d_ff, "the inner width, e.g. 4 * d_model")
    dropout = checks.probability(where, "dropout", dropout)
    functions = PositionwiseFeedForward.FUNCTIONS
    if not isinstance(activation, str) or activation not in functions:
        raise ConfigError(
            f"{where}: activation must be one of {sorted(functions)}, got {activation!r}; "
            "the paper's is 'relu'"
        )
    return d_model, d_ff, dropout, activation
