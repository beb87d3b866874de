"""What scaled dot-product attention accepts, checked where its inputs enter: q, k, v
(``check_qkv``), the sizes d_k and S (``check_sizes``) and the mask (``check_mask``). Used by
``ops/attention.py``, ``ops/blocked_attention.py`` and ``nn/attention.py``.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .checks import tensors


def check_qkv(q: Any, k: Any, v: Any, where: str = "scaled_dot_product_attention") -> None:
    """q (..., T, d_k), k (..., S, d_k), v (..., S, d_v): one rank >= 2, float dtypes, the
    same leading axes, d_k >= 1 and S >= 1; else ArgumentError / ShapeError / DTypeError
    saying which layout is expected, the message starting with ``where``."""
    if not (isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor)):
        tensors(where, q=q, k=k, v=v)
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if not (q.ndim == k.ndim == v.ndim) or q.ndim < 2:
        raise ShapeError(
            f"{where}: q, k, v need the same rank >= 2, got {shapes}; "
            "use q (B, H, T, d_k), k (B, H, S, d_k), v (B, H, S, d_v)"
        )
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not backend.dtype_name(x.dtype).startswith("float"):
            raise DTypeError(
                f"{where}: {name} has dtype {backend.dtype_name(x.dtype)}, "
                "need a float dtype; project embedded tokens, not raw ids"
            )
    lead = tuple(q.shape[:-2])
    if tuple(k.shape[:-2]) != lead or tuple(v.shape[:-2]) != lead:
        raise ShapeError(
            f"{where}: leading (batch, head) axes differ: {shapes}; "
            "q, k and v must share them, as in (B, H, ., .)"
        )
    if k.shape[-1] != q.shape[-1] or v.shape[-2] != k.shape[-2]:
        raise ShapeError(
            f"{where}: {shapes} do not fit: need q (..., T, d_k), "
            "k (..., S, d_k), v (..., S, d_v) (same d_k for q and k, same S for k and v)"
        )
    check_sizes(where, q.shape[-1], k.shape[-2])


def check_sizes(where: str, d_k: int, S: int) -> None:
    """d_k >= 1 (the scale is 1 / sqrt(d_k)) and S >= 1 (softmax over the keys needs one)."""
    if d_k == 0:
        raise ShapeError(
            f"{where}: q and k have d_k = 0 features; attention scores q k^T / sqrt(d_k) "
            "need d_k >= 1 (give each head at least one feature)"
        )
    if S == 0:
        raise ShapeError(
            f"{where}: there are no keys (S = 0 positions in k and v); every query needs at "
            "least one key to attend to (give the memory or the key sequence a position)"
        )


def check_mask(
    mask: Any, scores: tuple[int, ...], like: Tensor, where: str = "scaled_dot_product_attention"
) -> Any:
    """The attention mask as a raw bool array that broadcasts to the scores' shape
    ``scores`` = (..., T, S) (None stays None; a Tensor gives its array, a list of bools
    becomes an array on ``like``'s device); else DTypeError / ShapeError with the fix, the
    message starting with ``where``."""
    if mask is None:
        return None
    if isinstance(mask, Tensor):
        mask = mask.data
    elif not backend.is_array(mask):  # a Python list of bools
        mask = backend.numeric_data(f"{where}: mask", mask)
        mask = backend.asarray(mask, device=like.device)
    if backend.dtype_name(mask.dtype) != "bool":
        raise DTypeError(
            f"{where}: mask has dtype {backend.dtype_name(mask.dtype)}, "
            "need bool (True = may attend); build it with a comparison such as ids != pad_id"
        )
    ms = tuple(mask.shape)
    fits = len(ms) <= len(scores)
    for m, t in zip(ms[::-1], scores[::-1]):  # noqa: B905 - a loop: no generator frames
        fits = fits and m in (1, t)
    if not fits:
        raise ShapeError(
            f"{where}: mask of shape {ms} does not broadcast to the "
            f"scores' shape {scores} = (B, H, T, S); use e.g. (B, 1, 1, S) for padding, "
            "(1, 1, T, T) for causal, or (B, 1, T, S)"
        )
    return mask


def check_key_mask(
    where: str, mask: Any, q: Tensor, k: Tensor, causal_fix: str = "pass causal=True"
) -> Any:
    """The key padding mask of an attention that never forms the (T, S) scores (local,
    strided, linear): a raw bool array broadcastable to (..., 1, S), True = key may be read
    (None stays None). A mask with a query axis (a causal or (T, S) mask) is refused: the
    pattern is the op's own, and ``causal_fix`` says how to ask for the causal one (an op:
    ``causal=True``; a layer: ``nn.masks.Causal(keys)``)."""
    if mask is None:
        return None
    mask = check_mask(mask, (*q.shape[:-1], k.shape[-2]), q, where)
    if mask.ndim >= 2 and mask.shape[-2] != 1:
        raise ShapeError(
            f"{where}: mask of shape {tuple(mask.shape)} has a query axis of "
            f"{mask.shape[-2]}; this op takes only a key padding mask (B, 1, 1, S) "
            f"(True = key may be read); {causal_fix} for the causal pattern"
        )
    return mask


def check_queries_last(where: str, q: Tensor, k: Tensor) -> None:
    """T <= S: the queries are the last T positions of the keys' sequence (query i sits at
    position i + S - T, as in cached decoding), the rule of local, strided and causal linear
    attention; else ShapeError with the fix."""
    T, S = q.shape[-2], k.shape[-2]
    if T > S:
        raise ShapeError(
            f"{where}: T = {T} queries but S = {S} keys; the queries are the last T positions "
            "of the keys' sequence, so T <= S (pass the cached keys too)"
        )
