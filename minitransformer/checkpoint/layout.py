"""The arrays a model or training checkpoint must hold, known from its model config alone.

:func:`model_layout` gives the name, shape and dtype of every weight the
:class:`~minitransformer.nn.Transformer` of a ``TransformerConfig`` has, in its
``state_dict()`` order, in closed form: no model is built and nothing is allocated
(``tests/test_checkpoint_bounds.py`` checks it against built models).

:func:`expect_model_arrays` is the ``expect`` a reader passes to ``load_checkpoint`` for a
checkpoint written by ``Trainer.save`` (or slimmed to its ``model.*`` arrays): before any
array is read, every ``model.*`` name must be one of the layout's, with its shape and dtype,
every ``optim.<state>.<i>`` must have the shape of the i-th weight, and nothing else may be
there. So a file whose ``model_config`` claims gigabytes of weights it does not hold is
refused with the memory of its header, before a model of that size is built.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..config import TransformerConfig
from .format import nbytes
from .reading import Entries, _fail
from .schema import check_model_config

Layout = dict[str, tuple[tuple[int, ...], str]]
"""name -> (shape, dtype name), as runs/resume.py's ``_layout`` of a state dict."""

_OPTIM = re.compile(r"optim\.([A-Za-z_]\w{0,31})\.(\d{1,9})")
_MAX_OPTIM_STATES = 4  # Adam keeps m and v; SGD momentum one
_FIX = (
    "use an intact checkpoint written by `minitransformer train` (an edited, truncated or "
    "foreign file is refused)"
)


def model_layout(cfg: TransformerConfig) -> Layout:
    """Every weight of ``Transformer(cfg)``: ``{name: (shape, dtype)}`` in state_dict order."""
    D, F, h = cfg.d_model, cfg.d_ff, cfg.h
    qk = h * cfg.d_k  # the query/key width (key_dim may differ from d_model / h)
    out: dict[str, tuple[int, ...]] = {"src_embed.weight": (cfg.src_vocab, D)}
    if not cfg.tie_embeddings:
        out["tgt_embed.weight"] = (cfg.tgt_vocab, D)
    if cfg.learned_positions:
        out["positions.table"] = (cfg.max_len, D)

    def attention(prefix: str) -> None:
        for name, width in (("w_q", qk), ("w_k", qk), ("w_v", D), ("w_o", D)):
            fan_in = width if name == "w_o" else D
            out[f"{prefix}.{name}.weight"] = (fan_in, D if name == "w_o" else width)
            out[f"{prefix}.{name}.bias"] = (D if name == "w_o" else width,)

    def layer(prefix: str, attentions: tuple[str, ...]) -> None:
        for name in attentions:
            attention(f"{prefix}.{name}")
        out[f"{prefix}.ffn.w_1.weight"], out[f"{prefix}.ffn.w_1.bias"] = (D, F), (F,)
        out[f"{prefix}.ffn.w_2.weight"], out[f"{prefix}.ffn.w_2.bias"] = (F, D), (D,)
        for block in range(1, len(attentions) + 2):
            out[f"{prefix}.block{block}.norm.gamma"] = (D,)
            out[f"{prefix}.block{block}.norm.beta"] = (D,)

    for stack, attentions in (
        ("encoder", ("self_attn",)),
        ("decoder", ("self_attn", "cross_attn")),
    ):
        for i in range(cfg.N):
            layer(f"{stack}.layers.{i}", attentions)
        if cfg.pre_norm:
            out[f"{stack}.norm.gamma"], out[f"{stack}.norm.beta"] = (D,), (D,)
    if not cfg.tie_embeddings:
        out["out_proj.weight"] = (D, cfg.tgt_vocab)
    return {name: (shape, cfg.dtype) for name, shape in out.items()}


def expect_model_arrays(path: Path, meta: Mapping[str, Any], entries: Entries) -> None:
    """Refuse (CheckpointError) arrays that are not the ``model.*`` weights of the file's
    ``model_config`` and their ``optim.<state>.<i>`` state; see the module docstring."""
    path = Path(path)
    if "model_config" not in meta:
        _fail(path, "the checkpoint has no model_config (not written by `minitransformer "
              "train`)", _FIX)  # fmt: skip
    cfg = check_model_config(path, meta["model_config"])
    layout = model_layout(cfg)
    shapes = list(layout.values())
    implied = sum(nbytes(shape, np.dtype(dtype)) for shape, dtype in shapes)
    held = sum(nbytes(shape, dtype) for shape, dtype in entries.values())
    missing = [k for k in layout if f"model.{k}" not in entries]
    if missing and held < implied:
        _fail(
            path,
            f"its model_config implies {cfg.num_parameters():,} weights ({implied:,} bytes of "
            f"{cfg.dtype}) but its arrays hold {held:,} bytes ({len(missing)} of "
            f"{len(layout)} weights missing, e.g. {missing[0]!r})",
            _FIX,
        )
    wrong, unexpected, states = [], [], set()
    for name, (shape, dtype) in entries.items():
        want = None
        if name.startswith("model."):
            want = layout.get(name[len("model.") :])
        elif match := _OPTIM.fullmatch(name):
            index = int(match.group(2))
            states.add(match.group(1))
            want = shapes[index] if index < len(shapes) else None
        if want is None:
            unexpected.append(name)
        elif tuple(shape) != tuple(want[0]) or np.dtype(dtype) != np.dtype(want[1]):
            wrong.append(
                f"{name}: {tuple(shape)} {np.dtype(dtype).name}, expected {want[0]} {want[1]}"
            )
    if len(states) > _MAX_OPTIM_STATES:
        unexpected += [f"optim.{s}.*" for s in sorted(states)[_MAX_OPTIM_STATES:]]
    if missing or wrong or unexpected:
        parts = [f"mis-shaped: {'; '.join(wrong[:3])}"] if wrong else []
        parts += [f"missing: {missing[:3]}"] if missing else []
        parts += [f"unexpected: {[u[:80] for u in unexpected[:3]]}"] if unexpected else []
        _fail(
            path,
            "its arrays do not fit its model_config ("
            + " | ".join(parts)
            + f"; {len(wrong)} mis-shaped, {len(missing)} missing, {len(unexpected)} unexpected)",
            _FIX,
        )
