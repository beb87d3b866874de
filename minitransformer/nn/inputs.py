"""Checks of what users feed the Transformer, with messages that say how to fix it.

Token ids must be integers (DTypeError), shaped (B, L) with B, L >= 1 (ShapeError), at
most max_len long (TokenIdError), inside [0, vocab) (TokenIdError naming the bad ids), and
on the model's device (DeviceError).

Where ids live decides what the check costs: NumPy ids (host memory, where batches are made)
are checked for free and then uploaded to the model's device; ids already on a GPU cost one
device-to-host sync for the range check. The training loop hands the model host batches, so
its step never waits for the device.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..errors import DeviceError, DTypeError, ShapeError, TokenIdError
from ..tensor import Tensor


def check_ids(
    name: str, ids: Any, vocab: int, max_len: int, device: str | None, offset: int = 0
) -> backend.Array:
    """Validate token ids ``ids`` (B, L) and return them as a raw array on ``device``.

    Python lists and NumPy arrays (host memory) are checked on the host, then placed on
    ``device``; arrays and Tensors of another device must already be on ``device``.
    ``offset`` is the position of the first id (cached decoding): offset + L <= max_len.
    """
    a = ids.data if isinstance(ids, Tensor) else ids
    if not backend.is_array(a):
        try:
            a = backend.asarray(a, device=device)
        except ValueError as err:  # ragged nested lists
            raise ShapeError(
                f"{name} is not a rectangular (B, L) batch ({err}); pad the sequences to "
                "one length with the pad id (minitransformer.data.batching.pad)"
            ) from None
    here = backend.device_of(a)
    if device is not None and here != device and here != "cpu":
        raise DeviceError(
            f"{name} is on device {here!r} but the model is on {device!r}; move the ids with "
            f"{name}.to({device!r}) (or backend.asarray(..., device={device!r})), or move the "
            f"model with model.to({here!r})"
        )
    dtype = backend.dtype_name(a.dtype)
    if not dtype.startswith(("int", "uint")):
        raise DTypeError(
            f"{name} must hold integer token ids, got dtype {dtype}; convert with "
            f"{name}.astype('int64') (ids index the vocabulary, they are not features)"
        )
    if a.ndim != 2:
        hint = "add a batch axis with ids[None, :]" if a.ndim == 1 else "reshape it to (B, L)"
        raise ShapeError(f"{name} must have shape (B, L), got {tuple(a.shape)}; {hint}")
    B, L = a.shape
    if B == 0 or L == 0:
        raise ShapeError(
            f"{name} is empty, shape {tuple(a.shape)}; pass at least one sequence of at "
            "least one token (a BOS token for an empty target)"
        )
    if offset + L > max_len:
        where = f"length {L} at offset {offset}" if offset else f"length {L}"
        raise TokenIdError(
            f"{name} has {where}, more than max_len = {max_len} positions; raise max_len "
            "in the config (TransformerConfig(max_len=...)) or shorten the sequences"
        )
    xp = backend.namespace(a)
    bad = (a < 0) | (a >= vocab)
    if bool(xp.any(bad)):  # free on the host, one sync on a GPU; message built on failure
        host, mask = backend.to_numpy(a), backend.to_numpy(bad)
        values = sorted(set(host[mask].tolist()))
        rows, cols = mask.nonzero()
        first = (int(rows[0]), int(cols[0]))
        shown = values[:10] + (["..."] if len(values) > 10 else [])
        raise TokenIdError(
            f"{name} holds ids outside the vocabulary [0, {vocab}): {shown} (first at "
            f"(batch, position) {first}); check that the tokenizer and the config's "
            f"vocab size agree"
        )
    if device is not None and here != device:
        a = backend.asarray(a, device=device)  # checked host ids: upload
    return a


def check_memory(memory: Any, src: backend.Array, d_model: int) -> None:
    """memory must be the encoder output (B, S, d_model) for this src (B, S)."""
    if not isinstance(memory, Tensor):
        raise TypeError(f"memory must be a Tensor from model.encode(src), got {type(memory)}")
    want = (*tuple(src.shape), d_model)
    if memory.shape != want:
        raise ShapeError(
            f"memory has shape {memory.shape}, but src of shape {tuple(src.shape)} needs "
            f"(B, S, d_model) = {want}; pass the memory that model.encode(src) returned"
        )
