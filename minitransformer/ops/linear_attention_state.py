"""Causal linear attention as an RNN (Katharopoulos et al. 2020): the state of cached decoding.

Causal linear attention (``ops/linear_attention.py``) reads, at position p, only the sums
    kv_p = sum_{j<=p} K_j v_jᵀ (..., d_k, d_v),   z_p = sum_{j<=p} K_j (..., d_k)
(K_j = phi(k_j), 0 for a masked key). They obey a recurrence with a state of size d_k × d_v:
    kv_p = kv_{p-1} + K_p v_pᵀ,   z_p = z_{p-1} + K_p,   out_p = Q_pᵀ kv_p / (Q_p · z_p)
so decoding keeps (kv, z) instead of every past key and value: O(d²) memory per head and
O(d²) time per new token, whatever the length so far. ``linear_attention_step`` takes
T_new new positions (1: one decoding step; several: a prompt), reads them causally on top
of the state, and leaves in the state the sums over every position seen. Feeding a sequence
in any chunks gives the numbers of ``linear_attention(q, k, v, causal=True)`` on the whole.

Inference only: the step records no graph (its output has no gradient), and it refuses an
input that requires grad while grad mode is on (run it under ``mt.no_grad()``; train with
``linear_attention``). Beam search reorders the state itself: ``state.kv = xp.take(state.kv,
order, axis=0)``, likewise ``state.z``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import backend
from ..errors import ArgumentError, DTypeError, ShapeError
from ..grad_mode import is_grad_enabled
from ..tensor import Tensor
from .attention_checks import check_key_mask, check_qkv
from .feature_map import FEATURE_MAPS, check_feature_map
from .linear_attention import masked_keys
from .linear_attention_sums import causal_forward


@dataclass
class LinearAttentionState:
    """The running sums over the positions seen: kv (..., d_k, d_v) = sum_j phi(k_j) v_jᵀ and
    z (..., d_k) = sum_j phi(k_j); both None before the first step."""

    kv: Any = None
    z: Any = None


def _check_state(where: str, state: Any, q: Tensor, v: Tensor) -> None:
    """The state as a LinearAttentionState whose kv and z fit q's leading axes and dtype."""
    if not isinstance(state, LinearAttentionState):
        raise ArgumentError(
            f"{where}: state must be a LinearAttentionState, got {type(state).__name__}; "
            "start with state = LinearAttentionState() and pass the same one at every step"
        )
    if (state.kv is None) != (state.z is None):
        raise ArgumentError(
            f"{where}: state has kv but not z (or z but not kv); set both or neither "
            "(LinearAttentionState() before the first step)"
        )
    if state.kv is None:
        return
    lead, d_k, d_v = tuple(q.shape[:-2]), q.shape[-1], v.shape[-1]
    for name, x, shape in (("kv", state.kv, (*lead, d_k, d_v)), ("z", state.z, (*lead, d_k))):
        if not backend.is_array(x) or tuple(x.shape) != shape:
            got = tuple(x.shape) if backend.is_array(x) else type(x).__name__
            raise ShapeError(
                f"{where}: state.{name} is {got}, need {shape} for q {tuple(q.shape)} and v "
                f"{tuple(v.shape)}; reorder the state with the batch (xp.take along axis 0)"
            )
        if x.dtype != q.data.dtype or backend.device_of(x) != q.device:
            raise DTypeError(
                f"{where}: state.{name} is {backend.dtype_name(x.dtype)} on "
                f"{backend.device_of(x)}, q {backend.dtype_name(q.dtype)} on {q.device}; "
                "keep one dtype and device for a whole decode (a fresh state for a new one)"
            )


def linear_attention_step(
    q: Tensor, k: Tensor, v: Tensor, state: LinearAttentionState, mask: Any = None,
    feature_map: str = "elu1",
) -> Tensor:  # fmt: skip
    """Causal linear attention of T_new new positions on top of ``state``: q, k (..., T_new,
    d_k), v (..., T_new, d_v), mask a key padding mask (..., 1, T_new) for the new keys ->
    out (..., T_new, d_v), a Tensor without a graph; ``state`` then holds the sums over all
    positions seen. Inference only (see the module doc)."""
    where = "linear_attention_step"
    check_qkv(q, k, v, where=where)
    if q.shape[-2] != k.shape[-2]:
        raise ShapeError(
            f"{where}: q has {q.shape[-2]} new positions but k and v have {k.shape[-2]}; "
            "pass the same new positions for all three (the past lives in the state)"
        )
    if is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise ArgumentError(
            f"{where}: an input requires grad, but the step records no graph (inference "
            "only); run it under mt.no_grad(), or train with linear_attention(causal=True)"
        )
    feature_map = check_feature_map(where, feature_map)
    _check_state(where, state, q, v)
    mask = check_key_mask(where, mask, q, k)
    xp, (phi, _) = backend.namespace(q.data), FEATURE_MAPS[feature_map]
    Q, K = phi(xp, q.data), masked_keys(xp, phi(xp, k.data), mask)
    num, den, kv, z = causal_forward(xp, Q, K, v.data, state.kv, state.z)
    if state.kv is None:  # a copy: the chunk of sums it sits in is let go
        state.kv, state.z = xp.asarray(kv, copy=True), xp.asarray(z, copy=True)
    else:  # in place: the sums keep their addresses (a CUDA graph reads them there)
        state.kv[...], state.z[...] = kv, z
    return Tensor._wrap(num / xp.where(den == 0, 1.0, den))  # nothing read yet: num = 0, out 0
