"""The block since 2017: the switches that turn the paper's layer into GPT-2's or Llama's,
the rules for them, and the three blocks as named sets of TransformerConfig fields.

    field          paper (2017)        GPT-2 (2019)          Llama (2023)
    pre_norm       False: post-LN      True (+ final norm)   True (+ final norm)
    norm           "layer"             "layer"               "rms"   (RMSNorm, no β)
    positions      sinusoids, added    learned, added        rotary "halves" (q, k rotated)
    activation     "relu"              "gelu_tanh"           "swish" with gated_ffn (SwiGLU)
    kv_heads       None (= h)          None (= h)            None, or fewer (GQA; 1 = MQA)
    linear_bias    True                True                  False
    scale_embedding True (×√d_model)   False                 False

Each switch alone (``TransformerConfig(norm="rms")``, ``rotary="interleaved"``,
``gated_ffn=True``, ``kv_heads=2``, ``linear_bias=False``) is a field of its own, so any
combination can be built and measured; a block is only a name for one such set:
``TransformerConfig.preset("tiny", src_vocab=V, tgt_vocab=V, block="llama")``,
``TransformerLM(vocab=V, block="gpt2")``, ``--model block=llama``. Fields given beside a
block override the block's.

This module stands on the ground like ``config/model.py``.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import ConfigError

NORMS = ("layer", "rms")  # LayerNorm (the paper's) | RMSNorm (Zhang & Sennrich 2019)
ROTARY_LAYOUTS = ("halves", "interleaved")  # which features form RoPE's pairs (ops/rotary.py)

_PAPER = {
    "pre_norm": False, "norm": "layer", "learned_positions": False, "rotary": None,
    "activation": "relu", "gated_ffn": False, "kv_heads": None, "linear_bias": True,
    "scale_embedding": True,
}  # fmt: skip
BLOCKS: dict[str, dict[str, Any]] = {
    "paper": _PAPER,
    "gpt2": {
        **_PAPER, "pre_norm": True, "learned_positions": True, "activation": "gelu_tanh",
        "scale_embedding": False, "tie_embeddings": True,
    },
    "llama": {
        **_PAPER, "pre_norm": True, "norm": "rms", "norm_eps": 1e-6, "rotary": "halves",
        "activation": "swish", "gated_ffn": True, "linear_bias": False,
        "scale_embedding": False, "tie_embeddings": False,
    },
}  # fmt: skip


def block_fields(where: str, block: Any) -> dict[str, Any]:
    """The TransformerConfig fields of the block named ``block`` (a copy), or a ConfigError
    that lists the names."""
    if not isinstance(block, str) or block not in BLOCKS:
        raise ConfigError(
            f"{where}: unknown block {block!r}; choose one of {sorted(BLOCKS)} (the paper's "
            "layer, GPT-2's or Llama's), or set the fields one by one"
        )
    return dict(BLOCKS[block])


def block_problems(cfg: Any) -> list[str]:
    """What is wrong with a TransformerConfig's block switches (an empty list when nothing
    is): each field's type and range, and the pairs that cannot go together."""
    problems = []
    if not isinstance(cfg.norm, str) or cfg.norm not in NORMS:
        problems.append(f"norm must be one of {NORMS}, got {cfg.norm!r}")
    eps = cfg.norm_eps
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        problems.append(f"norm_eps must be a number in (0, 1), e.g. 1e-5, got {eps!r}")
    if cfg.rotary is not None and cfg.rotary not in ROTARY_LAYOUTS:
        problems.append(f"rotary must be None or one of {ROTARY_LAYOUTS}, got {cfg.rotary!r}")
    elif cfg.rotary is not None and cfg.learned_positions is True:
        problems.append(
            "rotary positions rotate q and k instead of adding a table, and learned_positions "
            "adds one: choose one (set learned_positions to False, or rotary to None)"
        )
    base = cfg.rotary_base
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not 1 < base < math.inf:
        problems.append(f"rotary_base must be a finite number > 1, e.g. 10000.0, got {base!r}")
    for name in ("gated_ffn", "linear_bias"):
        if not isinstance(getattr(cfg, name), bool):
            problems.append(f"{name} must be True or False, got {getattr(cfg, name)!r}")
    kv = cfg.kv_heads
    if kv is not None and (type(kv) is not int or kv <= 0):
        problems.append(f"kv_heads must be an int > 0 or None (= h), got {kv!r}")
    elif kv is not None and isinstance(cfg.h, int) and cfg.h > 0:
        for heads in dict.fromkeys((cfg.h, cfg.decoder_h or cfg.h)):
            if isinstance(heads, int) and heads % kv:
                problems.append(
                    f"kv_heads ({kv}) must divide the query heads h ({heads}): each key/value "
                    f"head serves h / kv_heads query heads; pick one of "
                    f"{[d for d in range(1, heads + 1) if heads % d == 0]}"
                )
    return problems


def rotary_problem(cfg: Any) -> str | None:
    """RoPE rotates pairs of features: each head's query/key width must be even."""
    if cfg.rotary is not None and cfg.d_k % 2:
        return (
            f"rotary positions rotate pairs of features, but each head's query/key width d_k "
            f"is {cfg.d_k} (odd); pick d_model and h (or key_dim) with an even d_k"
        )
    return None
