"""The heads API's argument checks: each argument is checked where it enters, as ``nn`` does
(``minitransformer.checks``), and a mistake is the library's own error naming the function,
the argument, what was given and the fix.

- ``check_model``: an encoder-decoder ``nn.Transformer`` (a ``TransformerLM`` is refused:
  it has one kind of attention, and these tools read three).
- ``check_batch``: ids (src, tgt_in) or (src, tgt_in, tgt_out) of one batch, checked as the
  model checks them (``nn.inputs.check_ids``), their batch sizes and lengths agreeing;
  ``check_batches``: at least one such triple (or ``data.batching.Batch``).
- ``check_head``: one head ``(kind, layer, head)``. A list ``[kind, layer, head]`` is read as
  the same head (that is how JSON gives a triple back), and NumPy integers are integers;
  bools, floats, negative numbers and other kinds are refused. ``check_heads``: a list of
  them (one bare triple is refused, with the fix).
- ``check_scores``: ``head_importance``'s {(kind, layer): scores (H,)}, finite numbers.
- ``check_weights`` / ``check_valid``: ``head_stats``'s attention weights (B, H, T, S), each
  a probability, no axis empty, and its rows of real tokens (bools).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ... import backend, checks
from ...errors import ArgumentError, ShapeError
from ...nn.inputs import check_ids
from ...nn.transformer import Transformer

KINDS = ("encoder self", "decoder self", "cross")
"""The three kinds of attention of an encoder-decoder Transformer."""

EXAMPLE = "('encoder self', 0, 1)"
"""A head, as the messages show one."""


def given(value: Any) -> str:
    """``value`` for a message, on one line: an array by its shape and dtype, anything else
    by its repr, cut to 50 characters."""
    if isinstance(value, np.ndarray) or backend.is_array(value):
        return f"an array of shape {tuple(value.shape)} and dtype {value.dtype}"
    return " ".join(checks.short(value, 50).split())


def check_model(where: str, model: Any) -> Transformer:
    """``model`` if it is an encoder-decoder ``nn.Transformer``; else an ArgumentError that
    says what is supported."""
    if isinstance(model, Transformer):
        return model
    got = type(model).__name__
    if got == "TransformerLM":
        raise ArgumentError(
            f"{where}: model is a TransformerLM (a decoder-only language model), which the "
            "heads tools do not support: they read the three kinds of attention of an "
            f"encoder-decoder ({', '.join(KINDS)}). Pass an nn.Transformer, e.g. "
            "Translator.from_checkpoint(RUN).model of a translation run"
        )
    raise ArgumentError(
        f"{where}: model must be an encoder-decoder nn.Transformer, got {got} "
        f"({given(model)}); e.g. Translator.from_checkpoint(RUN).model, or "
        "nn.Transformer(TransformerConfig(...))"
    )


def check_batch(where: str, model: Transformer, ids: tuple[Any, ...]) -> list[Any]:
    """The id arrays ``ids`` ((src, tgt_in) or (src, tgt_in, tgt_out)) checked as the
    model checks them, on its device; the targets must be as many rows as the source, and
    tgt_out the shape of tgt_in."""
    cfg = model.cfg
    names = ("src", "tgt_in", "tgt_out")[: len(ids)]
    vocabs = (cfg.src_vocab, cfg.tgt_vocab, cfg.tgt_vocab)[: len(ids)]
    arrays = [check_ids(name, a, vocab, cfg.max_len, model.device)
              for name, a, vocab in zip(names, ids, vocabs, strict=True)]  # fmt: skip
    shapes = [tuple(a.shape) for a in arrays]
    if shapes[1][0] != shapes[0][0]:
        raise ShapeError(
            f"{where}: src has {shapes[0][0]} rows and tgt_in {shapes[1][0]}; give one target "
            "row per source row"
        )
    if len(shapes) == 3 and shapes[2] != shapes[1]:
        raise ShapeError(
            f"{where}: tgt_out has shape {shapes[2]}, tgt_in {shapes[1]}; they are the target "
            "shifted by one (tgt_in = tgt[:, :-1], tgt_out = tgt[:, 1:]): the same shape"
        )
    return arrays


def check_batches(where: str, model: Transformer, batches: Any) -> Iterator[list[Any]]:
    """Each batch of ``batches`` (an iterable of (src, tgt_in, tgt_out) triples, or of
    ``data.batching.Batch``) checked as it comes (``batches`` may be a stream); an
    ArgumentError when there is none. The kind of ``batches`` is checked at once."""
    if isinstance(batches, (str, bytes, dict)) or not isinstance(batches, Iterable):
        raise ArgumentError(
            f"{where}: batches must be an iterable of (src, tgt_in, tgt_out) id triples, got "
            f"{type(batches).__name__}; e.g. [(src, tgt_in, tgt_out)] or a BatchStream"
        )
    return _checked_batches(where, model, batches)


def _checked_batches(where: str, model: Transformer, batches: Iterable[Any]) -> Iterator[list[Any]]:
    """``check_batches``'s batches, one at a time."""
    count = 0
    for batch in batches:
        if all(hasattr(batch, name) for name in ("src", "tgt_in", "tgt_out")):
            batch = (batch.src, batch.tgt_in, batch.tgt_out)  # a data.batching.Batch
        if not isinstance(batch, (tuple, list)) or len(batch) != 3:
            raise ArgumentError(
                f"{where}: each batch must be a (src, tgt_in, tgt_out) triple of id arrays, "
                f"got {type(batch).__name__} ({given(batch)}); pass a list of "
                "batches, e.g. [(src, tgt_in, tgt_out)], even for one batch"
            )
        count += 1
        yield check_batch(where, model, tuple(batch))
    if count == 0:
        raise ArgumentError(
            f"{where}: batches is empty: the importance is summed over batches, so there "
            "is nothing to score. Fix: pass at least one (src, tgt_in, tgt_out) batch"
        )


def _index(where: str, name: str, value: Any, head: Any) -> int:
    """A layer or head index of ``head``: an int (Python or NumPy, not a bool) >= 0."""
    if not checks.is_int(value) or value < 0:
        raise ArgumentError(
            f"{where}: the {name} of head {given(head)} must be a whole number "
            f">= 0, got {given(value)}; a head is (kind, layer, head), e.g. {EXAMPLE}"
        )
    return int(value)


def check_head(where: str, head: Any) -> tuple[str, int, int]:
    """One head as (kind, layer, head): a tuple or a list of three (module doc)."""
    if not isinstance(head, (tuple, list)) or len(head) != 3:
        raise ArgumentError(
            f"{where}: a head is a (kind, layer, head) triple, got {given(head)}; "
            f"e.g. {EXAMPLE}. Pass a list of them, e.g. [{EXAMPLE}], even for one head"
        )
    kind, layer, index = head
    if not isinstance(kind, str) or kind not in KINDS:
        raise ArgumentError(
            f"{where}: the kind of head {given(head)} must be one of {KINDS}, "
            f"got {given(kind)}; e.g. {EXAMPLE}"
        )
    return kind, _index(where, "layer", layer, head), _index(where, "head index", index, head)


def check_heads(where: str, off: Any) -> set[tuple[str, int, int]]:
    """``off``: an iterable of heads (``check_head``), as a set of (kind, layer, head)."""
    if isinstance(off, (str, bytes, dict)) or not isinstance(off, Iterable):
        raise ArgumentError(
            f"{where}: off must be a list of (kind, layer, head) heads, got "
            f"{given(off)}; e.g. [{EXAMPLE}], or [] to switch every head on"
        )
    off = list(off)
    if len(off) == 3 and isinstance(off[0], str):  # one triple, not a list of them
        raise ArgumentError(
            f"{where}: off is one head {given(tuple(off))}, not a list of heads; pass "
            f"[{given(tuple(off))}]"
        )
    return {check_head(where, head) for head in off}


def check_scores(where: str, scores: Any) -> dict[tuple[str, int], np.ndarray]:
    """``head_importance``'s scores: a dict {(kind, layer): (H,) finite numbers}, as a dict
    of float64 arrays (a list of numbers is read as an array)."""
    if not isinstance(scores, dict):
        raise ArgumentError(
            f"{where}: scores must be the dict {{(kind, layer): scores (H,)}} that "
            f"head_importance returns, got {type(scores).__name__}"
        )
    out = {}
    for key, value in scores.items():
        if not isinstance(key, (tuple, list)) or len(key) != 2:
            raise ArgumentError(
                f"{where}: a key of scores must be (kind, layer), e.g. ('cross', 0), got "
                f"{given(key)}"
            )
        kind, layer = key
        if not isinstance(kind, str) or kind not in KINDS:
            raise ArgumentError(f"{where}: the kind of key {given(key)} must be one of {KINDS}")
        layer = _index(where, "layer", layer, key)
        try:
            v = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            v = None
        if v is None or v.ndim != 1 or v.size == 0 or not np.isfinite(v).all():
            raise ArgumentError(
                f"{where}: scores[{given(key)}] must be one finite number per head (H,), got "
                f"{given(value)}; pass head_importance's result"
            )
        out[(kind, layer)] = v
    return out


def check_weights(where: str, weights: Any) -> np.ndarray:
    """Attention weights (B, H, T, S), every size >= 1, each weight a probability in
    [0, 1], as float64."""
    try:
        p = np.asarray(backend.to_numpy(weights) if backend.is_array(weights) else weights,
                       dtype=np.float64)  # fmt: skip
    except (TypeError, ValueError):
        raise ArgumentError(
            f"{where}: weights must be an array of numbers (B, H, T, S), got "
            f"{given(weights)}; pass e.g. MultiHeadAttention.last_weights"
        ) from None
    if p.ndim != 4 or 0 in p.shape:
        raise ShapeError(
            f"{where}: weights have shape {p.shape}, need (B, H, T, S) with every size >= 1: "
            "one attention map per batch row and head (MultiHeadAttention.last_weights)"
        )
    finite = bool(np.isfinite(p).all())
    if not finite or p.min() < 0.0 or p.max() > 1.0 + 1e-6:
        what = "NaN or inf" if not finite else f"values from {p.min():g} to {p.max():g}"
        raise ArgumentError(
            f"{where}: weights must be probabilities in [0, 1] (each row a softmax), got "
            f"{what}; pass e.g. MultiHeadAttention.last_weights"
        )
    return p


def check_valid(where: str, valid: Any, shape: tuple[int, int]) -> np.ndarray:
    """The rows of real tokens (B, T): bools, or integers 0 and 1; None: every row."""
    if valid is None:
        return np.ones(shape, dtype=bool)
    try:
        v = np.asarray(backend.to_numpy(valid) if backend.is_array(valid) else valid)
    except (TypeError, ValueError):  # ragged lists
        v = np.asarray(None)
    ok = v.dtype == bool or (v.dtype.kind in "iu" and np.isin(v, (0, 1)).all())
    if not ok:
        raise ArgumentError(
            f"{where}: valid must be bools (B, T) (True: a real token's row), got "
            f"{given(valid)}; e.g. tgt_in != pad_id"
        )
    if v.shape != shape:
        raise ShapeError(f"{where}: valid has shape {v.shape}, need (B, T) = {shape}")
    return v.astype(bool)
