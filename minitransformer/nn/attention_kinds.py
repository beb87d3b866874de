"""Self-attention below n²: how a ``MultiHeadAttention`` whose ``attention`` is "local",
"strided" or "linear" runs its heads (``config/attention.py`` names the kinds; full attention
stays in ``nn/attention.py``).

The heads are projected and split as for full attention, q, k, v (B, H, T|S, d_k); then one
of the ops that never form the (T, S) scores runs them:

    local    ops/local_attention.py     keys within ``window`` positions: O(T·window·d)
    strided  ops/strided_attention.py   the band of ``window`` and every window-th key
    linear   ops/linear_attention.py    φ(q)ᵀ Σ φ(k) vᵀ / φ(q)ᵀ Σ φ(k): O(T·d²)

The mask is a key padding mask (B, 1, 1, S) or the rule ``masks.Causal(keys)`` (a (T, S)
array is what these kinds exist to avoid). Cached decoding: local reads the window its
KVCache keeps; strided the whole cache; linear no keys at all, but the running sums of
the RNN form (``ops/linear_attention_state.py``), one (d_k, d_v) matrix and one d_k vector
a head, updated by each new position.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..errors import ArgumentError
from ..ops.attention_checks import check_key_mask
from ..ops.linear_attention import LinearAttention
from ..ops.linear_attention_state import LinearAttentionState, linear_attention_step
from ..ops.local_attention import LocalAttention
from ..ops.strided_attention import StridedAttention
from ..tensor import Tensor
from .masks import Causal


def attend_below_n2(
    layer: Any, q: Tensor, key: Tensor, value: Tensor, mask: Any, cache: Any
) -> Tensor:
    """Local, strided or linear layer-attention, which never form the (T, S) scores:
    (B, H, T, d_v). ``mask``: None, a key padding mask (B, 1, 1, S), or Causal(keys)."""
    if layer.store_weights:
        raise ArgumentError(
            f"MultiHeadAttention: attention={layer.attention!r} never forms the weights "
            "P, so it keeps none; attention weights (store_weights, attention_weights(), "
            "the explorer, the head tools) need a model with attention='full'"
        )
    causal = isinstance(mask, Causal)
    keys = mask.keys if causal else mask
    if layer.attention == "linear" and cache is not None:  # the RNN form: running sums
        k, v = layer._project_keys_values(key, value, cache.seen)  # (B, h_kv, T, d), new
        k, v = layer._grouped(k), layer._grouped(v)  # (B, H, T, d_k): GQA's heads shared
        keys = _key_mask(layer, keys, q, k, offset_keys=True)
        if cache.state is None:
            cache.state = LinearAttentionState()
        return linear_attention_step(q, k, v, cache.state, mask=keys)
    k, v = layer._keys_values(key, value, cache)  # (B, h_kv, S, d_k); local: a window
    k, v = layer._grouped(k), layer._grouped(v)  # (B, H, S, d_k): GQA's heads shared
    keys = _key_mask(layer, keys, q, k, offset_keys=cache is not None)
    if layer.attention == "local":
        return LocalAttention.apply(q, k, v, keys, window=layer.window, causal=causal)
    if layer.attention == "strided":
        return StridedAttention.apply(q, k, v, keys, stride=layer.window, causal=causal)
    return LinearAttention.apply(q, k, v, keys, causal=causal)


def _key_mask(layer: Any, keys: Any, q: Tensor, k: Tensor, offset_keys: bool) -> Any:
    """The key padding mask of the S keys k holds, checked (``check_key_mask``): None or an
    array broadcastable to (B, H, 1, S). A cache's mask may cover more positions than the
    keys held (local keeps a window, linear only the new positions): ``offset_keys`` keeps
    its last S entries."""
    S = k.shape[2]
    if offset_keys and backend.is_array(keys) and keys.shape[-1] > S:
        keys = keys[..., -S:]
    where = f"MultiHeadAttention (attention={layer.attention!r})"
    return check_key_mask(where, keys, q, k, causal_fix="pass nn.masks.Causal(keys)")
