"""Which attention a model's self-attention layers run, and the rules for choosing it.

    attention="full"     the paper's softmax(q kᵀ/√d_k) v over every key: O(T²) per layer
                         (attention_block_size=b runs the same numbers in key blocks)
    attention="local"    each query reads the keys within attention_window positions of it
                         (the paper's restricted self-attention, Table 1): O(T·r)
    attention="strided"  Child et al. (2019): the keys within attention_window positions, and
                         every attention_window-th key before or after: O(T·(r + T/r))
    attention="linear"   Katharopoulos et al. (2020): softmax replaced by a kernel
                         φ(q)ᵀφ(k), φ = elu + 1, so the keys fold into a d×d sum: O(T·d²)

Only self-attention changes: a decoder's cross-attention reads the whole source (full),
whatever the kind. The ops are ``ops/local_attention.py``, ``ops/strided_attention.py`` and
``ops/linear_attention.py``; this module stands on the ground like ``config/model.py``.
"""

from __future__ import annotations

from typing import Any

ATTENTION_KINDS = ("full", "local", "strided", "linear")
WINDOWED = ("local", "strided")  # the kinds whose attention_window is their size


def attention_problems(kind: Any, window: Any, block_size: Any, scale_attention: Any) -> list[str]:
    """What is wrong with these TransformerConfig fields (an empty list when nothing is):
    the kind, its window (required by local and strided, meaningless for full and linear),
    the blocked op's block size (full attention only) and the softmax scale (linear
    attention has no softmax to scale)."""
    if not isinstance(kind, str) or kind not in ATTENTION_KINDS:
        return [f"attention must be one of {ATTENTION_KINDS}, got {kind!r}"]
    problems = []
    if window is not None and (type(window) is not int or window <= 0):
        problems.append(
            f"attention_window must be an int > 0 (positions, e.g. 32) or None, got {window!r}"
        )
    elif kind in WINDOWED and window is None:
        what = "window" if kind == "local" else "stride"
        problems.append(
            f"{kind} attention needs its {what}: set attention_window, e.g. attention_window=32"
        )
    elif kind not in WINDOWED and window is not None:
        problems.append(
            f"attention_window={window} sizes local and strided attention, not {kind} "
            "attention: leave attention_window unset"
        )
    if block_size is not None and (type(block_size) is not int or block_size <= 0):
        problems.append(
            f"attention_block_size must be an int > 0 (keys per block, e.g. 64) or None "
            f"(= the plain attention), got {block_size!r}"
        )
    elif block_size is not None and kind != "full":
        problems.append(
            f"attention_block_size runs full attention in key blocks, and {kind} attention "
            "never forms the full scores: leave attention_block_size unset"
        )
    if kind == "linear" and scale_attention is False:
        problems.append(
            "linear attention has no softmax whose 1/√d_k scale_attention could drop: leave "
            "scale_attention on"
        )
    return problems
