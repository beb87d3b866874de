"""Lesson 13 (ablations): the checks of its exercises.

- ``check_13_1``: Exercise 1 (dropout's variance)
- ``check_13_2``: Exercise 2 (counting dropout layers)
- ``check_13_3``: Exercise 3 (your own ablation)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from ._shared import _exercise, _rng


@_exercise("Exercise 1 (dropout's variance)")
def check_13_1(dropout_variance: Callable) -> None:
    for x, p in [(1.0, 0.1), (2.0, 0.5), (-3.0, 0.3), (0.5, 0.0), (-1.5, 0.9)]:
        keep = 1 - p
        expected = x**2 / keep - x**2  # E[y^2] - E[y]^2
        got = float(dropout_variance(x, p))
        draws = F.dropout(mt.tensor(np.full(20_000, x), dtype="float64"), p).numpy()
        assert np.isclose(got, expected, rtol=1e-9, atol=1e-12), (
            f"dropout_variance({x}, {p}) = {got:.4f}, but 20,000 draws of the library's "
            f"dropout give {draws.var():.4f}. Hint: Var[y] = E[y²] − E[y]²; what values does "
            "y take, and how often?"
        )


def _dropout_calls(run: Callable) -> int:
    """How many times a Dropout layer with p > 0 acts while ``run()`` runs."""
    from minitransformer.nn import layers

    calls = []
    original = layers.Dropout.forward

    def counting(self, x, _orig=original):
        if self.p > 0:
            calls.append(1)
        return _orig(self, x)

    layers.Dropout.forward = counting
    try:
        run()
    finally:
        layers.Dropout.forward = original
    return len(calls)


@_exercise("Exercise 2 (counting dropout layers)")
def check_13_2(n_dropout_places: Callable) -> None:
    """Counts the library's dropout calls in encode() of an N_enc-layer model and in
    decode() of an N_dec-layer one."""
    rng = _rng(25)
    src, tgt = rng.integers(3, 20, (1, 4)), rng.integers(3, 20, (1, 3))
    for N_enc, N_dec in [(1, 1), (2, 3), (3, 1), (6, 6)]:
        counts = []
        for N, part in ((N_enc, "encode"), (N_dec, "decode")):
            cfg = mt.TransformerConfig(
                src_vocab=20, tgt_vocab=20, d_model=8, h=2, N=N, d_ff=16, dropout=0.1
            )
            m = mt.nn.Transformer(cfg, seed=0)
            if part == "encode":
                run = functools.partial(m.encode, src)
            else:
                run = functools.partial(m.decode, tgt, m.encode(src), src)
            counts.append(_dropout_calls(run))
        got = n_dropout_places(N_enc, N_dec)
        assert got == sum(counts), (
            f"n_dropout_places({N_enc}, {N_dec}) = {got}, but one forward pass applies dropout "
            f"{sum(counts)} times ({counts[0]} in the encoder, {counts[1]} in the decoder). "
            "Hint: dropout sits on every sub-layer's output before the residual add (how many "
            "sub-layers has each kind of layer?), and once more on each stack's input."
        )


_FIXED_BY_THE_DATA = ("src_vocab", "tgt_vocab", "max_len", "pad_id", "bos_id", "eos_id", "dtype")


@_exercise("Exercise 3 (your own ablation)")
def check_13_3(my_variant: Callable, settings: Any = None) -> None:
    """``my_variant()`` must return an ``ablate.Variant`` that changes exactly one thing of
    the base of ``settings`` (default: AblationSettings()) and builds; nothing is trained."""
    import dataclasses

    from minitransformer import ablate
    from minitransformer.errors import ConfigError

    s = settings if settings is not None else ablate.AblationSettings()
    v = my_variant()
    assert isinstance(v, ablate.Variant), (
        f"return an ablate.Variant(name, change, model=..., train=..., ...), not {type(v).__name__}"
    )
    fields = {f.name for f in dataclasses.fields(mt.TransformerConfig)}
    base_cfg = mt.TransformerConfig.preset("tiny", src_vocab=20, tgt_vocab=20, **s.model)
    changes = []
    for key, value in v.model.items():
        assert key in fields, (
            f"model={{{key!r}: ...}}: TransformerConfig has no field {key!r}; see its docstring"
        )
        assert key not in ("dropout", "label_smoothing"), (
            f"{key} is a training setting here: put it in train={{{key!r}: ...}}, not model="
        )
        assert key not in _FIXED_BY_THE_DATA, f"{key} is fixed by the data, not an ablation"
        if value != getattr(base_cfg, key):
            changes.append(f"model {key}={value!r}")
    base_train = {"dropout": s.dropout, "label_smoothing": s.label_smoothing}
    for key, value in v.train.items():
        assert key in base_train, f"train= takes dropout and label_smoothing, not {key!r}"
        if value != base_train[key]:
            changes.append(f"train {key}={value!r}")
    if not v.warmup:
        changes.append("no warm-up")
    if v.random_positions:
        assert v.model.get("learned_positions") is True, (
            "random_positions=True redraws a learned position table: it needs "
            "model={'learned_positions': True} (the two together are one change)"
        )
        changes = [c for c in changes if not c.startswith("model learned_positions")]
        changes.append("learned positions, random init")
    assert changes, (
        "your variant trains the same model as the base: change one size, switch or "
        "training setting to a value the base does not use"
    )
    assert len(changes) == 1, (
        f"your variant changes {len(changes)} things ({'; '.join(changes)}): an ablation row "
        "changes one, so that a difference in the results has one cause"
    )
    try:
        cfg = mt.TransformerConfig.preset("tiny", src_vocab=20, tgt_vocab=20,
                                          **{**s.model, **v.model})  # fmt: skip
        mt.nn.Transformer(cfg, seed=0)
        for key, value in v.train.items():
            assert 0 <= value < 1, f"train {key}={value!r}: must be in [0, 1)"
    except ConfigError as e:
        raise AssertionError(f"the variant does not build: {e}") from None
