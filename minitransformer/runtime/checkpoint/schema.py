"""The checks of a training checkpoint, field by field: every field is untrusted input.

Each problem is one CheckpointError naming the field (``'optimizer.betas'``,
``'model.encoder.layers.0.ffn.w_1.weight'``, ``'losses[3]'``), what it holds and what was
expected. Nothing here knows an optimizer's or a schedule's field names: a field is compared
with what a freshly built object reports (:func:`check_like`, :func:`check_arrays_like`).

- ``check_training_metadata``: the top-level fields a Trainer saves (step, losses, configs ...).
- ``check_like`` / ``check_arrays_like`` / ``check_array``: state against a fresh object's.
- ``check_dataclass_fields``, ``check_model_config``, ``check_train_config``, ``check_tokenizer``.
- ``check_config``: every key where a stored config differs from the expected one.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ...checks import short
from ...config import TrainConfig, TransformerConfig
from ...config.train import SAVED_BEFORE_THE_FIELD
from ...errors import CheckpointError
from .format import _fail


def _field_fail(path: Path, field: str, problem: str) -> NoReturn:
    _fail(
        path,
        f"field {field!r} {problem}",
        "use an intact checkpoint written by `minitransformer train` (an edited, truncated or "
        "foreign file is refused)",
    )


def _kind(value: Any) -> str:
    """The JSON kind of a value: bool, int, number, str, null, list, object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _is_count(value: Any) -> bool:
    """A counter a fresh object starts from: int 0, or a non-empty list of int 0."""
    if _kind(value) == "int":
        return value == 0
    return _kind(value) == "list" and bool(value) and all(_is_count(v) for v in value)


def check_like(
    path: str | os.PathLike[str],
    field: str,
    value: Any,
    reference: Any,
    *,
    counters_of: Any = None,
) -> None:
    """Raise CheckpointError unless ``value`` has the structure of ``reference``.

    ``reference`` is what a freshly built object reports (its ``state_dict()``), so nothing
    here knows field names: objects need the same keys, lists the same length, every leaf
    the same JSON kind (an int where an int is, a number where a float is), numbers must be
    finite and ints not negative where the reference's are not.

    With ``counters_of`` (the same fresh state), every value that is not a counter there
    (an int 0 or a list of them, such as a step count) must also *equal* the fresh one, so
    hyperparameters that the run's config fixes cannot be edited; ``lr`` is free (the
    schedule sets it).
    """
    path = Path(path)
    kind, want = _kind(value), _kind(reference)
    if want == "number" and kind == "int":
        kind = "number"
    if kind != want:
        _field_fail(path, field, f"is a JSON {kind}, expected a {want} ({short(value)})")
    if kind == "object":
        missing = [k for k in reference if k not in value]
        if missing:
            _field_fail(path, field, f"lacks {', '.join(map(repr, missing))}")
        unknown = [k for k in value if k not in reference]
        if unknown:
            _field_fail(path, field, f"has unknown key(s) {', '.join(map(repr, unknown[:5]))}")
        for key in reference:
            fixed = None
            if isinstance(counters_of, Mapping) and key != "lr" and not _is_count(reference[key]):
                fixed = counters_of[key]
            sub = f"{field}.{key}"
            check_like(path, sub, value[key], reference[key])
            if fixed is not None and _plain(value[key]) != _plain(fixed):
                _field_fail(path, sub, f"is {short(value[key])}, but this run has {short(fixed)}")
    elif kind == "list":
        if len(value) != len(reference):
            _field_fail(path, field, f"has {len(value)} entries, expected {len(reference)}")
        for i, (v, r) in enumerate(zip(value, reference, strict=True)):
            check_like(path, f"{field}[{i}]", v, r)
    elif kind in ("int", "number"):
        if not math.isfinite(value):
            _field_fail(path, field, f"is {value}, not a finite number")
        if reference >= 0 and value < 0:
            _field_fail(path, field, f"is negative ({value})")


def check_array(
    path: str | os.PathLike[str],
    name: str,
    array: np.ndarray,
    *,
    dtype: str | None = None,
    shape: tuple[int, ...] | None = None,
) -> None:
    """A float array of the given dtype and shape with no NaN or Inf, else CheckpointError."""
    path = Path(path)
    if array.dtype.kind != "f" or (dtype is not None and array.dtype != np.dtype(dtype)):
        _field_fail(path, name, f"has dtype {array.dtype}, expected {dtype or 'a float dtype'}")
    if shape is not None and tuple(array.shape) != tuple(shape):
        _field_fail(path, name, f"has shape {tuple(array.shape)}, expected {tuple(shape)}")
    if not np.isfinite(array).all():
        _field_fail(path, name, "holds NaN or Inf")


def check_arrays_like(
    path: str | os.PathLike[str],
    section_name: str,
    arrays: Mapping[str, np.ndarray],
    layout: Mapping[str, tuple[tuple[int, ...], str]],
) -> None:
    """``arrays`` must have exactly the names of ``layout`` ({name: (shape, dtype)}, what a
    freshly built model or optimizer reports), each with that shape and dtype, all finite.

    Every missing, unexpected or mis-shaped name is listed in one CheckpointError.
    """
    missing = [k for k in layout if k not in arrays]
    unexpected = [k for k in arrays if k not in layout]
    misshaped = [
        f"{k}: checkpoint {tuple(arrays[k].shape)} vs model {tuple(layout[k][0])}"
        for k in layout
        if k in arrays and tuple(arrays[k].shape) != tuple(layout[k][0])
    ]
    if missing or unexpected or misshaped:
        parts = [f"mis-shaped: {'; '.join(misshaped[:5])}"] if misshaped else []
        parts += [f"missing keys: {missing[:5]}"] if missing else []
        parts += [f"unexpected keys: {unexpected[:5]}"] if unexpected else []
        _field_fail(
            Path(path),
            section_name,
            "does not fit the model ("
            + " | ".join(parts)
            + f"; {len(misshaped)} mis-shaped, {len(missing)} missing, "
            f"{len(unexpected)} unexpected)",
        )
    for name, (shape, dtype) in layout.items():
        check_array(path, f"{section_name}.{name}", arrays[name], dtype=dtype, shape=shape)


def _annotation_kinds(annotation: str) -> set[str]:
    """JSON kinds a dataclass field annotation allows ("int | None" -> {"int", "null"})."""
    kinds = set()
    for part in str(annotation).split("|"):
        part = part.strip().split("[")[0]
        kinds |= {
            "int": {"int"},
            "float": {"int", "number"},
            "str": {"str"},
            "bool": {"bool"},
            "None": {"null"},
            "dict": {"object"},
            "list": {"list"},
            "tuple": {"list"},
        }.get(part, {"any"})
    return kinds


def check_dataclass_fields(path: str | os.PathLike[str], field: str, value: Any, cls: type) -> None:
    """``value`` is a JSON object whose keys are fields of dataclass ``cls`` and whose values
    have the JSON kinds the fields' annotations allow (finite numbers; scalars inside dicts)."""
    path = Path(path)
    if _kind(value) != "object":
        _field_fail(path, field, f"is a JSON {_kind(value)}, expected an object")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        _field_fail(
            path,
            field,
            f"has options this version does not know ({', '.join(unknown)}); "
            "resume it with the version that wrote it",
        )
    for key, item in value.items():
        kinds = _annotation_kinds(fields[key].type)
        sub = f"{field}.{key}"
        if "any" not in kinds and _kind(item) not in kinds:
            _field_fail(
                path,
                sub,
                f"is a JSON {_kind(item)} ({short(item)}), expected {' or '.join(sorted(kinds))}",
            )
        leaves = item.values() if isinstance(item, Mapping) else [item]
        for leaf in leaves:
            if _kind(leaf) not in ("int", "number", "str", "bool", "null"):
                _field_fail(path, sub, f"holds a JSON {_kind(leaf)}, expected plain values")
            if _kind(leaf) == "number" and not math.isfinite(leaf):
                _field_fail(path, sub, f"is {leaf}, not a finite number")


def check_tokenizer(path: str | os.PathLike[str], value: Any, field: str = "tokenizer") -> None:
    """A tokenizer as Vocab / CharVocab / BPE.to_dict write it: strings where strings are."""
    path = Path(path)
    if _kind(value) != "object":
        _field_fail(path, field, f"is a JSON {_kind(value)}, expected an object")
    kind = value.get("type")
    allowed = {"bpe": {"type", "merges", "vocab", "split_punctuation"}, "vocab": {"type", "tokens"},
               "chars": {"type", "tokens"}}  # fmt: skip
    if kind not in allowed:
        _field_fail(
            path,
            f"{field}.type",
            f"names an unknown tokenizer type {short(kind)}; expected 'vocab', 'chars' or 'bpe'",
        )
    unknown = sorted(set(value) - allowed[kind])
    if unknown:
        _field_fail(path, field, f"has unknown key(s) {', '.join(map(repr, unknown[:5]))}")
    if kind == "bpe":
        merges = value.get("merges")
        if _kind(merges) != "list" or not all(
            _kind(m) == "list" and len(m) == 2 and all(_kind(x) == "str" for x in m) for m in merges
        ):
            _field_fail(path, f"{field}.merges", "must be a list of [str, str] pairs")
        if _kind(value.get("split_punctuation", False)) != "bool":
            _field_fail(path, f"{field}.split_punctuation", "must be true or false")
        check_tokenizer(path, value.get("vocab"), f"{field}.vocab")
    else:
        tokens = value.get("tokens")
        if _kind(tokens) != "list" or not all(_kind(t) == "str" and t for t in tokens):
            _field_fail(path, f"{field}.tokens", "must be a list of non-empty strings")


def check_model_config(path: str | os.PathLike[str], value: Any) -> Any:
    """The stored model config, type-checked and validated; returns the TransformerConfig."""
    path = Path(path)
    check_dataclass_fields(path, "model_config", value, TransformerConfig)
    try:
        return TransformerConfig.from_dict(value)
    except (ValueError, TypeError) as err:
        _field_fail(path, "model_config", f"is not a valid model ({' '.join(str(err).split())})")


def check_train_config(
    path: str | os.PathLike[str], value: Any, train_config_cls: type = TrainConfig
) -> Any:
    """The stored train config, type-checked and validated with TrainConfig's own ranges
    (task knobs included: an ``n_test`` of 10**12 would never finish); returns it resolved,
    a field the run was saved without taking the value it had (SAVED_BEFORE_THE_FIELD)."""
    check_dataclass_fields(path, "train_config", value, train_config_cls)
    try:
        return train_config_cls(**{**SAVED_BEFORE_THE_FIELD, **value}).resolved()
    except (ValueError, TypeError, RuntimeError) as err:
        problem = f"is not a valid training setup ({' '.join(str(err).split())})"
        _field_fail(Path(path), "train_config", problem)


def check_training_metadata(
    path: str | os.PathLike[str],
    meta: Mapping[str, Any],
    train_config_cls: type = TrainConfig,
) -> Any:
    """The top-level fields of a training checkpoint (``Trainer.save``); returns the stored
    TrainConfig, resolved. The sections the Trainer's parts restore themselves (optimizer,
    schedule, stream, rng) are only required to be objects here: the resuming code compares
    them with what its freshly built parts report (:func:`check_like`)."""
    path = Path(path)
    for key in (
        "step",
        "elapsed",
        "losses",
        "model_config",
        "train_config",
        "tokenizer",
        "optimizer",
        "schedule",
        "stream",
        "rng",
    ):
        if key not in meta:
            _fail(
                path,
                f"the checkpoint lacks {key!r} (an incomplete or foreign training checkpoint)",
                "resume from a file written by Trainer.save",
            )
    for key in ("optimizer", "schedule", "stream", "rng"):
        if _kind(meta[key]) != "object":
            _field_fail(path, key, f"is a JSON {_kind(meta[key])}, expected an object")
    cfg = check_train_config(path, meta["train_config"], train_config_cls)
    step = meta["step"]
    if _kind(step) != "int" or not 0 <= step <= cfg.steps:
        _field_fail(
            path, "step", f"is {short(step)}, expected an int in 0..{cfg.steps} (the run's steps)"
        )
    elapsed = meta["elapsed"]
    if _kind(elapsed) not in ("int", "number") or not (math.isfinite(elapsed) and elapsed >= 0):
        _field_fail(path, "elapsed", f"is {short(elapsed)}, expected seconds >= 0")
    losses = meta["losses"]
    if _kind(losses) != "list" or len(losses) != step:
        _field_fail(
            path,
            "losses",
            f"must list one loss per step ({step}), got "
            f"{len(losses) if _kind(losses) == 'list' else _kind(losses)}",
        )
    for i, loss in enumerate(losses):
        if _kind(loss) not in ("int", "number") or not math.isfinite(loss):
            _field_fail(path, f"losses[{i}]", f"is {short(loss)}, expected a finite number")
    check_model_config(path, meta["model_config"])
    check_tokenizer(path, meta["tokenizer"])
    return cfg


# --------------------------------------------------------------------------------------------
# A stored config against the expected one
# --------------------------------------------------------------------------------------------


def check_config(
    meta_config: Mapping[str, Any],
    expected: Mapping[str, Any],
    *,
    ignore: Iterable[str] = (),
    path: str | os.PathLike[str] | None = None,
) -> None:
    """Raise CheckpointError listing every key where a checkpoint's config differs.

    Nested dicts compare key by key (dotted keys such as ``optim.lr``); tuples equal lists;
    a field of ``ADDED`` absent from the checkpoint (older than it) counts as ADDED's value.

    Args:
        meta_config: the config stored in the checkpoint's metadata.
        expected: the config of the model/run about to use the checkpoint.
        ignore: dotted keys allowed to differ (for example ``"dropout"`` when fine-tuning).
        path: the checkpoint file, to name it in the message.
    """
    skipped = set(ignore)
    differences = [
        f"{key} (checkpoint {_show(a)}, expected {_show(b)})"
        for key, a, b in _diff(_plain(meta_config), _plain(expected), prefix="")
        if key not in skipped
    ]
    if differences:
        where = f"checkpoint {Path(path)}" if path is not None else "checkpoint"
        raise CheckpointError(
            f"{where} was saved with a different config: {'; '.join(differences)}. Fix: build "
            "the model from the checkpoint's config (metadata['config']), or start a new run "
            "directory."
        )


_MISSING = object()
ADDED = {k: getattr(TransformerConfig, k) for k in TransformerConfig.ADDED}  # absent: default


def _plain(value: Any) -> Any:
    """Normalise a config value the way a JSON round trip would (tuples -> lists)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _diff(a: Any, b: Any, prefix: str) -> list[tuple[str, Any, Any]]:
    """(dotted key, value in a, value in b) for every leaf where a and b differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            sub = f"{prefix}.{key}" if prefix else key
            out += _diff(a.get(key, ADDED.get(key, _MISSING)), b.get(key, _MISSING), sub)
        return out
    return [] if a == b else [(prefix or "<config>", a, b)]


def _show(value: Any) -> str:
    return "<missing>" if value is _MISSING else repr(value)
