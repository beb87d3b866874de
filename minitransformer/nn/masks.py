"""Attention masks, built from token ids. Convention: True = may attend.

Attention scores have shape (B, H, T_query, S_key); every mask here broadcasts to that:

    padding_mask(ids, pad_id)     (B, 1, 1, S)  key s is a real token (not padding)
    causal_mask(T, device)        (1, 1, T, T)  query t sees keys 0..t (no peeking ahead)
    target_mask(tgt, pad_id)      (B, 1, T, T)  causal AND padding: the decoder's self-attention
    Causal(keys)                  the causal rule, no (T, S) array: for attention kinds that
                                  never form the scores (local, strided, linear)

The encoder's self-attention and the decoder's cross-attention use ``padding_mask(src)``.
Masks are raw bool arrays on the ids' device, made with the ids' array namespace; they
carry no gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import backend, checks
from ..tensor import Tensor


def _array(ids: Any) -> Any:
    return ids.data if isinstance(ids, Tensor) else ids


def padding_mask(ids: Any, pad_id: int) -> backend.Array:
    """ids (B, S) -> (B, 1, 1, S) bool, True where ids != pad_id."""
    a = _array(ids)
    xp = backend.namespace(a)
    B, S = a.shape
    return xp.reshape(a != pad_id, (B, 1, 1, S))  # (B, 1, 1, S)


def causal_mask(T: int, device: str = "cpu", offset: int = 0) -> backend.Array:
    """(1, 1, T, offset + T) bool: query i (at position offset + i) may attend to key j
    iff j <= offset + i. ``offset`` > 0 is for cached decoding, where T new queries meet
    offset earlier keys plus themselves."""
    T = checks.non_negative_int("causal_mask", "T", T, "T is the number of query positions")
    offset = checks.non_negative_int("causal_mask", "offset", offset, "positions decoded so far")
    S = offset + T
    device = backend.normalize_device(device)
    xp = backend.namespace_for_device(device)
    keys = xp.arange(S, dtype=xp.int64, device=backend.native_device(device))  # (S,), made there
    queries = keys[offset:]  # (T,) positions of the queries
    allowed = xp.reshape(keys, (1, S)) <= xp.reshape(queries, (T, 1))  # (T, S)
    return xp.reshape(allowed, (1, 1, T, S))  # (1, 1, T, S)


def target_mask(tgt: Any, pad_id: int) -> backend.Array:
    """tgt (B, T) -> (B, 1, T, T) bool: causal AND key is not padding."""
    a = _array(tgt)
    T = a.shape[1]
    return causal_mask(T, backend.device_of(a)) & padding_mask(a, pad_id)  # (B, 1, T, T)


@dataclass(frozen=True)
class Causal:
    """The causal pattern as a rule instead of a (1, 1, T, S) array: query i, at position
    S - T + i, may read key j iff j <= S - T + i; ``keys`` (B, 1, 1, S) bool or None is the
    key padding mask on top. A model whose self-attention never forms the (T, S) scores
    (``TransformerConfig.attention`` local, strided or linear) passes this as the mask, and
    the ops apply the rule inside their own pattern; MultiHeadAttention running full
    attention turns it into ``causal_mask(T, offset=S - T) & keys``."""

    keys: Any = None


def decoder_mask(kind: str, T: int, device: str, offset: int = 0, keys: Any = None) -> Any:
    """The self-attention mask of a causal stack for attention ``kind`` (a checked config's
    field): full attention gets the array ``causal_mask(T, device, offset)`` (& ``keys``,
    (B, 1, 1, offset + T), when given); the other kinds get ``Causal(keys)``."""
    if kind != "full":
        return Causal(keys)
    mask = causal_mask(T, device, offset)  # (1, 1, T, offset + T)
    return mask if keys is None else mask & keys  # (B, 1, T, offset + T)
