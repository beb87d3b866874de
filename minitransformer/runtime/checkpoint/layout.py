"""The arrays a model or training checkpoint must hold, known from its model config alone.

:func:`model_layout` gives the name, shape and dtype of every weight the
:class:`~minitransformer.nn.Transformer` of a ``TransformerConfig`` has, in its
``state_dict()`` order, in closed form: the config's one shape table
(``TransformerConfig.parameter_shapes()``, which ``num_parameters()`` also sums) with the
config's dtype. No model is built and nothing is allocated (``tests/test_checkpoint_bounds.py``
checks it against built models).

:func:`expect_model_arrays` is the ``expect`` a reader passes to ``load_checkpoint`` for a
checkpoint written by ``Trainer.save`` (or slimmed to its ``model.*`` arrays): before any
array is read, every ``model.*`` name must be one of the layout's, with its shape and dtype,
and so must every ``average.*`` and ``last.*`` (the running sum of the weights a run averages,
and the last step's weights beside an averaged model: train/averaging.py), every
``optim.<state>.<i>`` must have the shape of the i-th weight, and nothing else may be
there. So a file whose ``model_config`` claims gigabytes of weights it does not hold is
refused with the memory of its header, before a model of that size is built.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...config import TransformerConfig
from .format import Entries, _fail, nbytes
from .schema import check_model_config

Layout = dict[str, tuple[tuple[int, ...], str]]
"""name -> (shape, dtype name), as runs/resume.py's ``_layout`` of a state dict."""

_OPTIM = re.compile(r"optim\.([A-Za-z_]\w{0,31})\.(\d{1,9})")
_WEIGHT_SECTIONS = ("model.", "average.", "last.")  # each: arrays shaped as the weights
_MAX_OPTIM_STATES = 4  # Adam keeps m and v; SGD momentum one
_FAR_MORE = 10_000  # a config implying this many arrays more than the file holds is refused
# before its layout is listed (a base model has 253; a forged N could claim billions)
_FIX = (
    "use an intact checkpoint written by `minitransformer train` (an edited, truncated or "
    "foreign file is refused)"
)


def model_layout(cfg: TransformerConfig) -> Layout:
    """Every weight of ``Transformer(cfg)``: ``{name: (shape, dtype)}`` in state_dict order,
    the config's shape table (``cfg.parameter_shapes()``) with its dtype."""
    return {name: (shape, cfg.dtype) for name, shape in cfg.parameter_shapes().items()}


def expect_model_arrays(path: Path, meta: Mapping[str, Any], entries: Entries) -> None:
    """Refuse (CheckpointError) arrays that are not the ``model.*`` weights of the file's
    ``model_config`` and their ``optim.<state>.<i>`` state; see the module docstring."""
    path = Path(path)
    if "model_config" not in meta:
        problem = "this checkpoint has no model config or tokenizer ('model_config' is missing)"
        _fail(path, problem, _FIX)
    cfg = check_model_config(path, meta["model_config"])
    expected = cfg.num_weight_arrays()  # counted, not listed: N may claim millions of layers
    if expected > len(entries) + _FAR_MORE:
        _fail(
            path,
            f"its model_config implies {expected:,} weight arrays ({cfg.num_parameters():,} "
            f"weights) but the file holds {len(entries):,} arrays"
            + _config_of_weights(cfg, entries),
            _FIX,
        )
    layout = model_layout(cfg)
    shapes = list(layout.values())
    missing = [k for k in layout if f"model.{k}" not in entries]
    wrong, unexpected, states = [], [], set()
    for name, (shape, dtype) in entries.items():
        want = None
        if name.startswith(_WEIGHT_SECTIONS):
            want = layout.get(name.split(".", 1)[1])
        elif match := _OPTIM.fullmatch(name):
            index = int(match.group(2))
            states.add(match.group(1))
            want = shapes[index] if index < len(shapes) else None
        if want is None:
            unexpected.append(name[:80])
        elif tuple(shape) != tuple(want[0]):
            wrong.append(f"{name}: checkpoint {tuple(shape)} vs model {want[0]}")
        elif np.dtype(dtype) != np.dtype(want[1]):
            wrong.append(f"{name} has dtype {np.dtype(dtype).name}, expected {want[1]}")
    if len(states) > _MAX_OPTIM_STATES:
        unexpected += [f"optim.{s}.*" for s in sorted(states)[_MAX_OPTIM_STATES:]]
    if not (missing or wrong or unexpected):
        return
    parts = [f"mis-shaped: {'; '.join(wrong[:3])}"] if wrong else []
    parts += [f"missing keys: {missing[:3]}"] if missing else []
    parts += [f"unexpected keys: {unexpected[:3]}"] if unexpected else []
    implied = sum(nbytes(shape, np.dtype(dtype)) for shape, dtype in shapes)
    held = sum(nbytes(shape, dtype) for shape, dtype in entries.values())
    sizes = ""
    if implied > held:
        sizes = (
            f"; its model_config implies {cfg.num_parameters():,} weights ({implied:,} bytes of "
            f"{cfg.dtype}), the file holds {held:,} bytes of arrays"
        )
    _fail(
        path,
        "its weights and model config do not fit together ("
        + " | ".join(parts)
        + f"; {len(wrong)} mis-shaped, {len(missing)} missing, {len(unexpected)} unexpected"
        + sizes
        + _config_of_weights(cfg, entries)
        + ")",
        _FIX,
    )


def expect_training_arrays(path: Path, meta: Mapping[str, Any], entries: Entries) -> None:
    """:func:`expect_model_arrays` for a file to resume from: a training checkpoint
    (``kind`` "minitransformer-train") whose arrays fit its model config."""
    if meta.get("kind") != "minitransformer-train":
        _fail(
            Path(path),
            "it is not a training checkpoint of this library (no kind 'minitransformer-train')",
            "pass the run directory of `minitransformer train`",
        )
    expect_model_arrays(path, meta, entries)


def _config_of_weights(cfg: TransformerConfig, entries: Entries) -> str:
    """When the ``model.*`` arrays are those of ``cfg`` with other sizes, the differing
    fields ("; the weights are of a model with N (checkpoint 3, expected 1); ..."), else ""."""
    model = {k[len("model.") :]: tuple(v[0]) for k, v in entries.items() if k.startswith("model.")}
    try:
        vocab, d_model = model["src_embed.weight"]
        fields = dict(
            src_vocab=vocab,
            d_model=d_model,
            tgt_vocab=model.get("tgt_embed.weight", (vocab,))[0],
            N=len({k.split(".")[2] for k in model if k.startswith("encoder.layers.")}),
            d_ff=model["encoder.layers.0.ffn.w_1.weight"][1],
            tie_embeddings="out_proj.weight" not in model,
            pre_norm="encoder.norm.gamma" in model,
            learned_positions="positions.table" in model,
        )
        if fields["learned_positions"]:
            fields["max_len"] = model["positions.table"][0]
        other = TransformerConfig(**{**cfg.to_dict(), **fields})
    except (KeyError, ValueError, TypeError, IndexError):
        return ""
    if {k: v[0] for k, v in model_layout(other).items()} != model:
        return ""
    diff = [
        f"{k} (checkpoint {getattr(cfg, k)!r}, expected {v!r})"
        for k, v in sorted(fields.items())
        if getattr(cfg, k) != v
    ]
    return f"; the weights are of a model with {'; '.join(diff)}" if diff else ""
