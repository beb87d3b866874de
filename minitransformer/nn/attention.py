"""MultiHeadAttention (paper section 3.2.2), which reads and fills a layer's key/value cache.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_O
    head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i),  Attention(q, k, v) = softmax(q kᵀ/√d_k) v

All h heads come from ONE (D, D) projection each: project, then split the last axis into
(H, d_k) and move the head axis forward, (B, T, D) -> (B, T, H, d_k) -> (B, H, T, d_k).
The heads then run as one batched attention; no Python loop over heads.

Grouped-query attention (cfg.kv_heads = h_kv < h; Ainslie et al. 2023): the keys and values
are projected to h_kv heads only, and each serves h / h_kv query heads (h_kv = 1 is
multi-query attention, Shazeer 2019); ``RepeatHeads`` copies them to h heads for the
attention itself, and its backward sums the copies' gradients. Rotary positions
(cfg.rotary, RoPE; Su et al. 2021): each self-attention rotates its queries and keys by
their positions (``ops/rotary.py``), so q·k depends on how far apart they are.

Cached decoding: a ``KVCache`` (``nn/kv_cache.py``) keeps the projected keys and values
(h_kv heads: what GQA saves) so a decoder step projects only its new token. Self-attention
caches write each step's positions in place into buffers allocated once; cross-attention
caches (``static=True``) hold the memory's keys and values, computed once.

The attention itself is one of four kinds (``config/attention.py``): the paper's full
softmax attention, or, for self-attention, local, strided or linear attention, which never
form the (T, S) scores. Their causal pattern is then a rule (``masks.Causal``), not an
array, and their caches differ: local keeps only the last ``window`` positions (a query
reads no further back), linear keeps no keys at all but the running sums of the RNN form.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend, checks
from .. import functional as F
from ..config.attention import attention_problems
from ..config.model import TransformerConfig, head_split_problem
from ..errors import ConfigError, DeviceError, DTypeError, ShapeError
from ..ops.attention import ScaledDotProductAttention
from ..ops.attention_checks import check_mask, check_sizes
from ..ops.blocked_attention import BlockedAttention, check_block_size
from ..ops.checks import not_a_tensor
from ..ops.grouped_heads import RepeatHeads
from ..ops.heads import MergeHeads, SplitHeads
from ..ops.projections import PackedAttention, Projections
from ..ops.rotary import Rotary, rotary_cos_sin
from ..tensor import Tensor
from .attention_kinds import attend_below_n2
from .kv_cache import KVCache
from .layers import Linear
from .masks import Causal, causal_mask
from .module import Module


class MultiHeadAttention(Module):
    """h heads of scaled dot-product attention with projections w_q, w_k, w_v, w_o.

    Shapes: query (B, T, D), key and value (B, S, D), mask bool broadcastable to
    (B, H, T, S) with True = may attend -> output (B, T, D). d_k = d_v = D / h.

    ``d_k`` (default d_model / h) sets the width of each head's queries and keys alone (the
    paper's Table 3 row B); values keep d_v = d_model / h. ``scale=False`` drops the 1/√d_k
    of the logits (an ablation): q is multiplied by √d_k before the fused op divides by it,
    so the scores are exactly q kᵀ and the gradient flows through that product.

    No dropout inside: the paper drops each sublayer's *output* (the layers in
    transformer.py do that); the fused attention op has no dropout on the weights P.

    ``block_size`` (None = the fused op) runs the memory-efficient ``BlockedAttention``
    instead: keys and values in blocks of that many positions with an online softmax, the
    same outputs and gradients without the (B, H, T, S) weights in memory (see
    ``ops/blocked_attention.py``); the model passes ``cfg.attention_block_size``. The
    attribute may be changed after construction.

    Set ``store_weights = True`` to keep the attention probabilities of the last call in
    ``last_weights`` (B, H, T, S) (a raw array, for plots); off by default, so training
    pays nothing for it. Storing weights needs them formed, so it runs the fused op even
    when ``block_size`` is set.

    ``attention`` ("full", the default, "local", "strided" or "linear") and ``window``
    (the window of local, the stride of strided) choose the kind (``config/attention.py``);
    the kinds other than full never form P, so they keep no weights, and a mask given to
    them is a key padding mask (B, 1, 1, S) or the rule ``masks.Causal(keys)``.

    ``MultiHeadAttention(cfg, h, generator=None, cross=False)``: a layer's attention, given
    its TransformerConfig (read as it is: cfg.d_model, cfg.key_dim, cfg.scale_attention,
    cfg.attention_block_size, cfg.attention, cfg.attention_window, cfg.kv_heads,
    cfg.rotary, cfg.rotary_base, cfg.linear_bias) and its stack's heads h (``cfg.sizes``);
    the layers build theirs so. ``cross=True`` (a decoder's cross-attention) runs full
    attention, unrotated, whatever cfg.attention and cfg.rotary say: the source is read
    whole. Otherwise each argument is checked here (``check_attention``), and the layer
    is the paper's (h key/value heads, no rotation, biases).

    ``head_mask`` (None: every head on) gates the heads: a (H,) float Tensor, or numbers,
    that multiplies each head's output before the heads are merged,
    ``MergeHeads(head_h * m_h)``, so m_h = 0 switches head h off (it then contributes
    nothing to the output, and nothing reaches its projections' gradients) and m_h = 1
    leaves it as it is. A Tensor with ``requires_grad=True`` gets dL/dm_h from backward:
    the importance score of Michel et al. (2019) (``minitransformer.tools.heads``). Checked when
    set; None again removes it (and its one multiplication).
    """

    def __init__(
        self,
        d_model: int | TransformerConfig,
        h: int,
        generator: backend.Generator | None = None,
        d_k: int | None = None,
        scale: bool = True,
        block_size: int | None = None,
        attention: str = "full",
        window: int | None = None,
        cross: bool = False,
    ):
        super().__init__()
        h_kv, rotary, base, bias = h, None, 10000.0, True  # the paper's attention
        if isinstance(d_model, TransformerConfig):  # validated when made, frozen since
            cfg = d_model
            d_model, d_k, scale = cfg.d_model, cfg.key_dim, cfg.scale_attention
            block_size = cfg.attention_block_size
            attention, window = cfg.attention, cfg.attention_window
            h_kv, rotary, base = cfg.kv_heads or h, cfg.rotary, cfg.rotary_base
            bias = cfg.linear_bias
            if cross is True:  # a decoder's cross-attention reads the whole source
                attention, window, rotary = "full", None, None
        else:
            d_model, h, d_k, scale, block_size = check_attention(
                "MultiHeadAttention", d_model, h, d_k, scale, block_size
            )
            if problems := attention_problems(attention, window, block_size, scale):
                raise ConfigError(f"MultiHeadAttention: {'; '.join(problems)}")
        self.d_model, self.h, self.d_v = d_model, h, d_model // h
        self.d_k = self.d_v if d_k is None else d_k
        self.scale, self.block_size = scale, block_size
        self.attention, self.window = attention, window
        self.h_kv, self.rotary, self.rotary_base = h_kv, rotary, base
        self.w_q = Linear(d_model, h * self.d_k, bias, generator, _checked=True)
        self.w_k = Linear(d_model, h_kv * self.d_k, bias, generator, _checked=True)
        self.w_v = Linear(d_model, h_kv * self.d_v, bias, generator, _checked=True)
        self.w_o = Linear(d_model, d_model, bias, generator, _checked=True)
        self.store_weights = False
        self.last_weights: Any = None
        self.head_mask = None

    @property
    def head_mask(self) -> Tensor | None:
        """The heads' gates (H,), or None: every head on (see the class doc)."""
        return self.__dict__["_head_mask"]

    @head_mask.setter
    def head_mask(self, mask: Any) -> None:
        self.__dict__["_head_mask"] = None if mask is None else self._checked_head_mask(mask)

    def _checked_head_mask(self, mask: Any) -> Tensor:
        """``mask`` as a (H,) float Tensor on the weights' device and dtype (numbers are
        made one), or a ShapeError / DTypeError / DeviceError that names the fix."""
        w = self.w_o.weight
        if not isinstance(mask, Tensor):  # numbers: checked by Tensor, made the weights' kind
            dtype = backend.dtype_name(w.data.dtype)
            mask = Tensor(mask, dtype=dtype, device=w.device)
        if tuple(mask.shape) != (self.h,):
            raise ShapeError(
                f"MultiHeadAttention.head_mask: shape {tuple(mask.shape)}, need ({self.h},): "
                f"one gate per head (1 = on, 0 = off), e.g. [1.0] * {self.h}"
            )
        if mask.dtype != w.data.dtype:
            raise DTypeError(
                f"MultiHeadAttention.head_mask: dtype {backend.dtype_name(mask.dtype)}, need "
                f"the weights' {backend.dtype_name(w.data.dtype)}; make it with that dtype"
            )
        if mask.device != w.device:
            raise DeviceError(
                f"MultiHeadAttention.head_mask lives on {mask.device} but the layer on "
                f"{w.device}; move it with mask.to({w.device!r})"
            )
        return mask

    def _rotated(self, x: Tensor, offset: int) -> Tensor:
        """x (B, H, L, d) rotated by the positions offset .. offset + L - 1 (RoPE), or x
        itself when the layer has no rotary positions."""
        if self.rotary is None:
            return x
        L, d = x.shape[2], x.shape[3]
        xp, data = backend.namespace(x.data), x.data
        cos, sin = rotary_cos_sin(xp, offset, L, d, self.rotary_base, data.dtype, data.device)
        return Rotary.apply(x, cos, sin, layout=self.rotary)

    def _grouped(self, x: Tensor) -> Tensor:
        """Keys or values (B, h_kv, S, d) -> (B, h, S, d): each of the h_kv heads copied to
        the h / h_kv query heads it serves (GQA); x itself when h_kv = h."""
        return x if self.h_kv == self.h else RepeatHeads.apply(x, groups=self.h // self.h_kv)

    def _project_keys_values(self, key: Tensor, value: Tensor, offset: int):
        """The new positions' keys and values, (B, h_kv, S_new, d_k) and (B, h_kv, S_new,
        d_v), the keys rotated to positions offset .. (when rotary)."""
        k = SplitHeads.apply(self.w_k(key), h=self.h_kv)  # (B, h_kv, S_new, d_k)
        v = SplitHeads.apply(self.w_v(value), h=self.h_kv)  # (B, h_kv, S_new, d_v)
        return self._rotated(k, offset), v

    def _keys_values(self, key: Tensor, value: Tensor, cache: KVCache | None):
        """Projected (B, h_kv, S, d_k) keys and values, through the cache when there is one."""
        if cache is not None and cache.static and cache.k is not None:
            return cache.k, cache.v
        k, v = self._project_keys_values(key, value, 0 if cache is None else cache.seen)
        if cache is None:
            return k, v
        if cache.static:
            cache.set_static(k, v)  # the memory's keys and values, once
            return cache.k, cache.v
        k, v = cache.append(k, v)  # written in place: (B, h_kv, S_old + S_new, d_k), views
        if self.attention == "local":  # the next query reads back `window` positions
            cache.keep_last(self.window)
        return k, v

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Any = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        for name, x in (("query", query), ("key", key), ("value", value)):
            if not isinstance(x, Tensor):
                raise not_a_tensor("MultiHeadAttention", name, x)
            if not backend.is_float_dtype(x.dtype):
                raise DTypeError(
                    f"MultiHeadAttention: {name} has dtype {backend.dtype_name(x.dtype)}, need "
                    "a float dtype; embed token ids first (nn.Embedding), or use x.astype(...)"
                )
            if x.ndim != 3:
                raise ShapeError(
                    f"MultiHeadAttention: {name} has shape {tuple(x.shape)}, expected 3 axes "
                    f"(B, L, d_model = {self.d_model}); add a batch axis with x[None]"
                )
            if x.shape[-1] != self.d_model:
                raise ShapeError(
                    f"MultiHeadAttention: {name} has width {x.shape[-1]}, expected d_model = "
                    f"{self.d_model} (shape {tuple(x.shape)}); project it to {self.d_model} "
                    "features or build the layer with that d_model"
                )
        qs, ks, vs = query.shape, key.shape, value.shape
        if ks[:2] != vs[:2] or ks[0] != qs[0]:
            raise ShapeError(
                f"MultiHeadAttention: query {tuple(query.shape)}, key {tuple(key.shape)} and "
                f"value {tuple(value.shape)} must share the batch size B, and key and value "
                "the length S"
            )
        # Checked once, here: the ops below trust these shapes (no second check of q, k, v).
        growing = cache is not None and not cache.static  # a self-attention cache
        if self._packs(query, key, value, cache):  # one product for q, k, v (or k, v)
            out = self._packed(query, key, mask)  # (B, H, T, d_v)
        else:
            q = SplitHeads.apply(self.w_q(query), h=self.h)  # (B, T, H d_k) -> (B, H, T, d_k)
            q = self._rotated(q, cache.seen if growing else 0)  # RoPE (when cfg.rotary)
            if not self.scale:  # the op divides by √d_k: pre-multiply: the logits are q kᵀ
                q = q * math.sqrt(self.d_k)
            if self.attention == "full":
                out = self._full(q, key, value, mask, cache)
            else:
                out = attend_below_n2(self, q, key, value, mask, cache)  # (B, H, T, d_v)
        if growing:
            cache.seen += query.shape[1]
        gates = self.head_mask
        if gates is not None:  # each head's output times its gate m_h (class doc)
            out = out * F.reshape(gates, (1, self.h, 1, 1))
        out = MergeHeads.apply(out)  # (B, H, T, d_v) -> (B, T, H, d_v) -> (B, T, D)
        return self.w_o(out)

    def _full(self, q: Tensor, key: Tensor, value: Tensor, mask: Any, cache: Any) -> Tensor:
        """The paper's attention over every key (plain, or blocked): (B, H, T, d_v)."""
        k, v = self._keys_values(key, value, cache)  # (B, h_kv, S, d_k) each
        k, v = self._grouped(k), self._grouped(v)  # (B, H, S, d_k): GQA's heads shared
        B, H, T, _ = q.shape
        S = k.shape[2]
        if S == 0:  # no keys: nothing to attend to (the op would reduce over none)
            check_sizes("MultiHeadAttention", self.d_k, 0)
        mask = self._scores_mask(mask, B, T, S, key)
        if self.block_size is not None and not self.store_weights:  # never forms (T, S)
            return BlockedAttention.apply(q, k, v, mask, block_size=self.block_size)
        out, ctx = ScaledDotProductAttention.run(q, k, v, mask)  # (B, H, T, d_v)
        if self.store_weights:
            self.last_weights = ctx.probs  # (B, H, T, S)
        return out

    def _scores_mask(self, mask: Any, B: int, T: int, S: int, key: Tensor) -> Any:
        """The mask as an array broadcastable to the scores (B, H, T, S), checked (a
        ``Causal`` rule made the array it stands for), or None."""
        if isinstance(mask, Causal):  # the rule as the array it stands for
            keys = mask.keys
            mask = causal_mask(T, key.device, S - T)  # (1, 1, T, S)
            mask = mask if keys is None else mask & check_mask(keys, (B, 1, 1, S), key)
        if mask is not None:  # the scores' shape
            mask = check_mask(mask, (B, self.h, T, S), key)
        return mask

    def _packs(self, query: Tensor, key: Tensor, value: Tensor, cache: Any) -> bool:
        """Whether the projections run as one op (``ops/projections.py``): q, k and v of a
        self-attention (query, key and value one Tensor), or k and v of a cross-attention
        (key and value one Tensor), for the paper's attention with no cache, rotation,
        ablated scale or blocks (those take the separate products below)."""
        plain = self.attention == "full" and self.rotary is None and self.scale
        blocked = self.block_size is not None and not self.store_weights
        return cache is None and plain and not blocked and key is value and key.shape[1] > 0

    def _packed(self, query: Tensor, key: Tensor, mask: Any) -> Tensor:
        """The paper's attention with its projections as one op: ``Projections`` of q, k, v
        (self-attention) or of k, v (cross), and ``PackedAttention`` reading the heads from
        the packed columns: (B, H, T, d_v), the same numbers as ``_full``."""
        layers = (self.w_k, self.w_v) if query is not key else (self.w_q, self.w_k, self.w_v)
        params = [m.weight for m in layers]
        params += [m.bias for m in layers if m.bias is not None]
        y = Projections.apply(key, *params, parts=len(layers))  # (B, S, parts' widths)
        q = None if query is key else SplitHeads.apply(self.w_q(query), h=self.h)
        B, T, S = query.shape[0], query.shape[1], key.shape[1]
        mask = self._scores_mask(mask, B, T, S, key)
        heads = dict(h=self.h, h_kv=self.h_kv, d_k=self.d_k)
        out, ctx = PackedAttention.run(y, q, mask, **heads)  # (B, H, T, d_v)
        if self.store_weights:
            self.last_weights = ctx.probs  # (B, H, T, S)
        return out

    def extra_repr(self) -> str:
        extra = "" if self.attention == "full" else f", attention={self.attention!r}"
        extra += "" if self.window is None else f", window={self.window}"
        extra += "" if self.scale else ", scale=False"
        extra += "" if self.block_size is None else f", block_size={self.block_size}"
        extra += "" if self.h_kv == self.h else f", kv_heads={self.h_kv}"
        extra += "" if self.rotary is None else f", rotary={self.rotary!r}"
        extra += "" if self.w_q.bias is not None else ", bias=False"
        return f"d_model={self.d_model}, h={self.h}, d_k={self.d_k}{extra}"


def check_attention(
    where: str, d_model: int, h: int, d_k: int | None, scale: bool, block_size: int | None
) -> tuple[int, int, int | None, bool, int | None]:
    """The arguments of a MultiHeadAttention (or of a layer ``where`` that builds one),
    checked: (d_model, h, d_k, scale, block_size), ints made ints. d_model must split into
    h heads (the rule of ``config.model.head_split_problem``, stated there once)."""
    d_model = checks.positive_int(where, "d_model", d_model, "the model width, e.g. 512")
    h = checks.positive_int(where, "h", h, "h is the number of heads, e.g. 8")
    if problem := head_split_problem(d_model, h):
        raise ShapeError(f"{where}: {problem}")
    if d_k is not None:
        d_k = checks.positive_int(where, "d_k", d_k, "query/key width, or None for d_model/h")
    scale = checks.flag(where, "scale", scale)
    block_size = None if block_size is None else check_block_size(where, block_size)
    return d_model, h, d_k, scale, block_size
