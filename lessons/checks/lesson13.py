"""Lesson 13 (ablations): the checks of its exercises.

- ``check_13_1``: Exercise 1 (dropout's variance)
- ``check_13_2``: Exercise 2 (ablate model.eval(): perplexity in eval and training mode)
- ``check_13_3``: Exercise 3 (your own ablation)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from ._shared import _exercise, _rng


def _number(answer: Any, what: str) -> tuple[float, float]:
    """(value, relative tolerance) of a one-number answer: a Python or NumPy scalar, a 0-d
    or one-element array, or a one-element library Tensor. The tolerance follows the
    answer's precision: float32 (or narrower) carries ~7 significant digits, float64 ~16."""
    if isinstance(answer, mt.Tensor):
        answer = answer.numpy()
    try:
        array = np.asarray(answer)
        value = float(array.reshape(()))
    except (TypeError, ValueError):
        raise AssertionError(f"{what} returned {answer!r}: return one number") from None
    if array.dtype.kind == "f" and np.finfo(array.dtype).eps > 1e-10:
        return value, 50 * float(np.finfo(array.dtype).eps)
    return value, 1e-9


@_exercise("Exercise 1 (dropout's variance)")
def check_13_1(dropout_variance: Callable) -> None:
    assert callable(dropout_variance), (
        f"pass your function dropout_variance, not a {type(dropout_variance).__name__}"
    )
    for x, p in [(1.0, 0.1), (2.0, 0.5), (-3.0, 0.3), (0.5, 0.0), (-1.5, 0.9)]:
        keep = 1 - p
        expected = x**2 / keep - x**2  # E[y^2] - E[y]^2
        got, rtol = _number(dropout_variance(x, p), f"dropout_variance({x}, {p})")
        draws = F.dropout(mt.tensor(np.full(20_000, x), dtype="float64"), p).numpy()
        assert np.isclose(got, expected, rtol=rtol, atol=1e-12), (
            f"dropout_variance({x}, {p}) = {got:.4f}, but 20,000 draws of the library's "
            f"dropout give {draws.var():.4f}. Hint: {_variance_hint(got, x, p)}"
        )


def _variance_hint(got: float, x: float, p: float) -> str:
    """Where a wrong Var[y] most likely went wrong, from the mistakes learners make."""
    keep = 1 - p

    def near(value: float) -> bool:
        return bool(np.isclose(got, value, rtol=1e-4, atol=1e-12))

    if not np.isfinite(got):
        return "return a finite number (p < 1 in every case the check tries)"
    if got < 0 or near(abs(x) * p / keep):
        return "a variance is never negative, and scales as x squared: look at the power of x"
    if near(x**2 / keep):
        return "that is E[y²]; the variance subtracts E[y]²"
    if near(x**2 * p * keep) or near(x**2 * p):
        return (
            "m's own variance is p(1 − p), but y is m times x / (1 − p): how does a variance "
            "scale when its variable is multiplied by a constant?"
        )
    return "Var[y] = E[y²] − E[y]²; what values does y take, and how often?"


def _pairs(rng: np.random.Generator, n: int, vocab: int) -> list[tuple[list[int], list[int]]]:
    """n (source, target) pairs of 2..8 ids each (no BOS/EOS/PAD ids): lengths differ, so a
    batch of them is padded."""
    return [
        tuple(rng.integers(3, vocab, int(rng.integers(2, 9))).tolist() for _ in range(2))
        for _ in range(n)
    ]


def _call_in_mode(perplexity: Callable, model: Any, pairs: list, training: bool,
                  **kwargs: Any) -> float:  # fmt: skip
    """``perplexity(model, pairs, **kwargs)`` with the model found in ``training`` mode;
    asserts the answer leaves it in that mode and returns one finite number."""
    model.train(training)
    answer = perplexity(model, pairs, **kwargs)
    mode = "training" if training else "eval"
    assert model.training is training, (
        f"the model was in {mode} mode when perplexity() was called and is in "
        f"{'training' if model.training else 'eval'} mode after it: put back the mode you "
        "found (model.training), as Trainer.evaluate and ablate.score do"
    )
    got, _ = _number(answer, "perplexity()")
    assert np.isfinite(got), f"perplexity() returned {got}: expected a finite number"
    return got


def _takes_eval_mode(perplexity: Callable) -> None:
    """The answer must accept ``perplexity(model, pairs)`` and ``eval_mode=False``."""
    assert callable(perplexity), f"pass your function perplexity, not {type(perplexity).__name__}"
    try:
        signature = inspect.signature(perplexity)
    except (TypeError, ValueError):  # a builtin or C function: nothing to inspect
        return
    for args in ({}, {"eval_mode": False}):
        try:
            signature.bind(None, [], **args)
        except TypeError:
            raise AssertionError(
                "perplexity must be callable as perplexity(model, pairs) and as "
                f"perplexity(model, pairs, eval_mode=False); yours is perplexity{signature}"
            ) from None


@_exercise("Exercise 2 (ablate model.eval())")
def check_13_2(perplexity: Callable) -> None:
    """``perplexity(model, pairs)`` equals ablate.score's held-out perplexity (per target
    token, teacher forcing, no label smoothing, eval mode), from either mode, and leaves the
    mode as found; ``eval_mode=False`` measures in training mode (a different number)."""
    from minitransformer.tools import ablate

    _takes_eval_mode(perplexity)
    rng = _rng(26)
    cfg = mt.TransformerConfig(src_vocab=20, tgt_vocab=20, d_model=16, h=2, N=1, d_ff=32,
                               dropout=0.3, max_len=16)  # fmt: skip
    model = mt.nn.Transformer(cfg, seed=3)
    pairs = _pairs(rng, 130, 20)  # more than 100: a chunked answer has unequal chunks
    expected = ablate.score(model, pairs, None, None)["ppl"]
    for training in (True, False):
        got = _call_in_mode(perplexity, model, pairs, training)
        assert np.isclose(got, expected, rtol=2e-5), (  # the model computes in float32
            f"perplexity(model, pairs) = {got:.5f} with the model found in "
            f"{'training' if training else 'eval'} mode; the held-out perplexity is "
            f"{expected:.5f}. Hint: look at the mode the model measures in, at which target "
            "positions count, at how the tokens of different sentences are averaged, and at "
            "whether your loss is the training loss or section 5's metric"
        )
    for training in (True, False):
        noisy = _call_in_mode(perplexity, model, pairs, training, eval_mode=False)
        assert not np.isclose(noisy, expected, rtol=1e-4), (
            f"perplexity(model, pairs, eval_mode=False) = {noisy:.5f}, the eval-mode value: "
            "with eval_mode=False, measure with dropout on (training mode), then put back "
            "the mode you found"
        )


def _same(value: Any, base: Any) -> bool:
    """``value == base`` for a config field, False where the comparison is not one bool
    (an array, say: the model build then says what is wrong with it)."""
    try:
        return bool(value == base)
    except (TypeError, ValueError):
        return False


_FIXED_BY_THE_DATA = ("src_vocab", "tgt_vocab", "max_len", "pad_id", "bos_id", "eos_id", "dtype")


@_exercise("Exercise 3 (your own ablation)")
def check_13_3(my_variant: Callable, settings: Any = None) -> None:
    """``my_variant()`` must return an ``ablate.Variant`` that changes exactly one thing of
    the base of ``settings`` (default: AblationSettings()) and builds; nothing is trained."""
    import dataclasses

    from minitransformer.errors import ConfigError
    from minitransformer.tools import ablate

    s = settings if settings is not None else ablate.AblationSettings()
    assert callable(my_variant), f"pass your function my_variant, not {type(my_variant).__name__}"
    v = my_variant()
    assert isinstance(v, ablate.Variant), (
        f"return an ablate.Variant(name, change, model=..., train=..., ...), not {type(v).__name__}"
    )
    for part in ("model", "train"):
        assert isinstance(getattr(v, part), dict), (
            f"{part}= takes a dict, e.g. {part}={{'N': 3}}"
            if part == "model"
            else f"{part}= takes a dict, e.g. {part}={{'dropout': 0.2}}"
        ) + f", not {type(getattr(v, part)).__name__}"
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
        if not _same(value, getattr(base_cfg, key)):
            changes.append(f"model {key}={value!r}")
    base_train = {"dropout": s.dropout, "label_smoothing": s.label_smoothing}
    for key, value in v.train.items():
        assert key in base_train, f"train= takes dropout and label_smoothing, not {key!r}"
        assert isinstance(value, int | float) and not isinstance(value, bool), (
            f"train {key}={value!r}: a rate is a number in [0, 1)"
        )
        assert 0 <= value < 1, f"train {key}={value!r}: must be in [0, 1)"
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
    except (ConfigError, TypeError, ValueError) as e:
        raise AssertionError(f"the variant does not build: {e}") from None
