"""Statistics of attention heads, from their weights (Voita et al., 2019; Clark et al., 2019).

For one head and one query row t with weights p (S,) over the keys (sum 1):

    entropy     H = -sum_s p_s log p_s              (nats; 0 log 0 = 0; log S if uniform)
    prev / same / next = p_{t-1}, p_t, p_{t+1}      (0 where that key does not exist)
    distance    sum_s p_s |s - t|                   (how far the head looks, in positions)
    confidence  max_s p_s                           (Voita's "confidence")

each averaged over the rows of real tokens (``valid``: padding rows are left out). In
cross-attention the positions are the target's (t) and the source's (s): "same" is then
the source position with the target's index, which is only an alignment guess.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .args import check_valid, check_weights

STATS = ("entropy", "prev", "same", "next", "distance", "confidence")


def head_stats(weights: Any, valid: Any = None) -> dict[str, np.ndarray]:
    """weights (B, H, T, S) (rows summing to 1; a masked key has weight 0), valid (B, T)
    bool (None: every row) -> {stat: (H,) float64} for the names in ``STATS``. Weights
    outside [0, 1], NaN, or an empty axis are an error, as are ``valid`` values other than
    bools (or 0 and 1)."""
    p = check_weights("head_stats", weights)
    B, H, T, S = p.shape
    keep = check_valid("head_stats", valid, (B, T))
    rows = max(int(keep.sum()), 1)
    t = np.arange(T)[:, None]
    s = np.arange(S)[None, :]
    logs = np.log(np.where(p > 0, p, 1.0))  # 0 log 0 = 0
    per_row = {
        "entropy": -(p * logs).sum(-1),
        "prev": (p * (s == t - 1)).sum(-1),
        "same": (p * (s == t)).sum(-1),
        "next": (p * (s == t + 1)).sum(-1),
        "distance": (p * np.abs(s - t)).sum(-1),
        "confidence": p.max(-1),
    }  # each (B, H, T)
    w = keep[:, None, :]  # (B, 1, T)
    return {k: (v * w).sum(axis=(0, 2)) / rows for k, v in per_row.items()}
