"""What ``cross_entropy`` (loss.py) accepts, checked where the values enter, with messages
that say how to fix a mistake: float logits (..., V), integer target ids (...) in [0, V)
(or ignore_index), a known reduction, label smoothing in [0, 1].
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..checks import is_int, is_real
from ..errors import ArgumentError, DTypeError, ShapeError, TokenIdError
from ..tensor import Tensor


def check_inputs(
    logits: Any, target: Any, label_smoothing: Any, ignore_index: Any, reduction: Any
) -> Any:
    """Raise on bad logits, options or target shape/dtype; return the target as a raw
    integer array (host ids stay on the host, for a free range check)."""
    if not isinstance(logits, Tensor) or logits.ndim == 0:
        raise ShapeError("cross_entropy: logits must be a Tensor of shape (..., V)")
    if not backend.dtype_name(logits.dtype).startswith("float"):
        raise DTypeError(
            f"cross_entropy: logits must be float, got {backend.dtype_name(logits.dtype)}; "
            "convert them with logits.astype('float32')"
        )
    if logits.shape[-1] == 0:
        raise ShapeError(
            f"cross_entropy: logits of shape {logits.shape} have V = 0 classes; the last axis "
            "holds one logit per class and needs V >= 1"
        )
    if reduction not in ("mean", "sum", "none"):
        raise ArgumentError(f"cross_entropy: reduction={reduction!r}; use 'mean', 'sum' or 'none'")
    ls = label_smoothing
    if not (is_real(ls) and 0.0 <= ls <= 1.0):
        raise ArgumentError(
            f"cross_entropy: label_smoothing={ls!r} must be a number in [0, 1]; the paper "
            "uses 0.1, and 0 turns smoothing off"
        )
    if ignore_index is not None and not is_int(ignore_index):
        raise ArgumentError(
            f"cross_entropy: ignore_index must be an int id (the padding id) or None, got "
            f"{ignore_index!r}"
        )
    t = target.data if isinstance(target, Tensor) else target
    if not backend.is_array(t):  # host ids: numbers only (strings, None: DTypeError)
        t = backend.asarray(backend.numeric_data("cross_entropy: target", t), device="cpu")
    name = backend.dtype_name(t.dtype)
    if not name.startswith(("int", "uint")):
        raise DTypeError(
            f"cross_entropy: target must hold integer class ids, got dtype {name}; "
            "convert it with target.astype('int64') (ids, not one-hot or probabilities)"
        )
    if tuple(t.shape) != logits.shape[:-1]:
        raise ShapeError(
            f"cross_entropy: target has shape {tuple(t.shape)}, but logits of shape "
            f"{logits.shape} need target shape {logits.shape[:-1]} (one id per row of V "
            "logits); reshape both the same way, e.g. logits (B*T, V) with target (B*T,)"
        )
    return t


def check_ids(t: Any, V: int, ignore_index: int | None) -> None:
    """Every id in [0, V) or equal to ``ignore_index``; else a TokenIdError naming the
    first bad one and its position."""
    xp = backend.namespace(t)
    bad = (t < 0) | (t >= V)
    if ignore_index is not None:
        bad = bad & (t != ignore_index)
    if bool(xp.any(bad)):  # one host sync; the message is built only on failure
        flat = backend.to_numpy(bad).reshape(-1)
        i = int(flat.argmax())
        value = int(backend.to_numpy(t).reshape(-1)[i])
        where = []
        for n in reversed(t.shape):  # flat index -> position in target
            i, r = divmod(i, n)
            where.insert(0, r)
        ignore = "" if ignore_index is None else f" and is not ignore_index={ignore_index}"
        raise TokenIdError(
            f"cross_entropy: target id {value} is outside [0, {V}) for logits with "
            f"V = {V} classes{ignore} (first at position {tuple(where)}); check the vocabulary "
            "size of the output layer, or pass ignore_index= for padding ids"
        )
