"""Resuming a run: a training checkpoint read, checked field by field, and restored into the
parts of a freshly built Trainer.

    point = read_resume_point("runs/copy", steps=6000)   # the file, checked; the run's config
    trainer = Trainer(point.config)                      # the Trainer builds itself ...
    restore(point, trainer)                              # ... then its parts load the state

Every field of the file is untrusted (see :mod:`minitransformer.runtime.checkpoint.schema`): any
problem is one CheckpointError naming the field. Options outside RESUMABLE may not change:
that would be a different run. Nothing here knows how an optimizer, a schedule or a batch
stream names its state: each part's state is compared with what the freshly built part
reports, then loaded by the part's own ``load_state_dict``.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ... import backend
from ...checks import is_int, short
from ...config import RESUMABLE, TrainConfig
from ...config.train import SAVED_BEFORE_THE_FIELD
from ...errors import (
    CheckpointError,
    ConfigError,
    DeviceError,
    MiniTransformerError,
    UnfinishedRunWarning,
)
from ...tensor import Tensor
from .. import checkpoint
from .lock import resume_command


@dataclass
class ResumePoint:
    """A training checkpoint that passed every check, and the config of the run it continues.

    Attributes:
        path: the checkpoint file.
        arrays: its arrays (``model.*``, ``optim.*``, and the checkpoint averaging's
            ``average.*`` and ``last.*``), host NumPy.
        meta: its metadata (step, losses, elapsed, the parts' states ...).
        config: the stored TrainConfig with the given changes applied (``out`` defaults to
            the checkpoint's directory).
        changes: the options the caller gave.
    """

    path: Path
    arrays: dict[str, np.ndarray]
    meta: dict[str, Any]
    config: TrainConfig
    changes: dict[str, Any]


def read_resume_point(run: str | os.PathLike[str], **changes: Any) -> ResumePoint:
    """Load and check the checkpoint of ``run`` (a run directory or a checkpoint file); see
    ``Trainer.resume`` for ``changes``."""
    path = checkpoint.checkpoint_file(run)
    arrays, meta = checkpoint.load_checkpoint(path, expect=checkpoint.expect_training_arrays)
    if meta.get("kind") != "minitransformer-train":
        raise CheckpointError(
            f"cannot resume from {path}: it is not a training checkpoint of this library "
            "(no kind 'minitransformer-train'); pass the run directory of "
            "`minitransformer train`"
        )
    checkpoint.check_training_metadata(path, meta, TrainConfig)
    stored = {**SAVED_BEFORE_THE_FIELD, **meta["train_config"]}  # an older run: what it had
    try:
        backend.normalize_device(stored["device"])
    except DeviceError as err:
        _bad(path, "train_config.device", f"is not a device ({err})")
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    bad = sorted(set(changes) - known)
    if bad:
        raise ConfigError(f"resume: unknown option(s) {bad}; valid: {sorted(known)}")
    changes = {k: v for k, v in changes.items() if k in RESUMABLE or v is not None}
    differ = [
        f"{k} (checkpoint {stored.get(k)!r}, given {v!r})"
        for k, v in changes.items()
        if k not in RESUMABLE and stored.get(k) != v
    ]  # task, model, data, seed, optimisation: what makes the run this run
    if differ:
        raise CheckpointError(
            f"cannot resume {path} with other settings: {'; '.join(differ)}. Fix: leave these "
            "options out to continue the run as it was, or start a new run in another "
            "directory (--out)"
        )
    _check_steps(path, meta["step"], stored.get("steps"), changes.get("steps"))
    config = TrainConfig(**{**stored, "out": str(path.parent), **changes})
    _warn_if_mode_changes(path, meta["step"], stored["cuda_graph"], config)
    return ResumePoint(path, arrays, meta, config, changes)


def _warn_if_mode_changes(path: Path, step: int, stored: Any, config: TrainConfig) -> None:
    """One warning when a run saved with CUDA graphs on (or off) goes on with them off (or
    on) on a GPU: allowed, as a change of device is (a GPU short of memory for the graphs
    must be able to finish its run eagerly), but said, because dropout draws its masks over
    the padded shape in a graph and over the batch's own eagerly, so the run goes on unlike
    one trained in a single mode. Silent on the CPU, which never replays a graph."""
    on_gpu = backend.normalize_device(config.device).startswith("cuda")
    if stored == config.cuda_graph or not on_gpu:
        return
    now, before = ("on", "off") if config.cuda_graph else ("off", "on")
    warnings.warn(
        f"{path.parent} goes on at step {step} with CUDA graphs {now}; it was saved with them "
        f"{before}. Dropout draws other masks in the two modes, so from here the run differs "
        "from one trained in a single mode (each batch's loss is computed the same way)",
        stacklevel=4,
    )


def _check_steps(path: Path, step: int, total: Any, steps: Any) -> None:
    """Refuse a ``steps`` below the step the run is at, before anything is written: the run
    would save a checkpoint at ``step`` with a total below it, which no resume accepts."""
    if not is_int(steps) or steps >= step:
        return  # not given, or not a number (TrainConfig names that), or far enough
    raise ConfigError(
        f"cannot resume {path.parent} with --steps {steps}: the run is already at step "
        f"{step}, and --steps is the total number of steps, not the number still to train. "
        f"Fix: pass --steps above {step} (--steps {step + steps} trains {steps} more)"
        + (f", or leave it out to finish the run's own {total}" if total > step else "")
        + f"; from Python: Trainer.resume(run, steps={step + steps})"
    )


def warn_if_unfinished(run: str | os.PathLike[str], meta: dict[str, Any]) -> None:
    """Warn (UnfinishedRunWarning, once, at the caller's caller) when the checkpoint of
    ``run``, whose metadata is ``meta``, stopped before the steps its run planned (Ctrl-C,
    a crash, a kill): a model loaded from it translates or writes as an unfinished one, and
    nothing else would say so. Silent for a finished run, and for a file that records no
    plan (no train config: an exported model)."""
    plan = meta.get("train_config")
    step, steps = meta.get("step"), plan.get("steps") if isinstance(plan, dict) else None
    if not (is_int(step) and is_int(steps)) or step >= steps:
        return
    path = Path(run)
    if path.name in (checkpoint.CHECKPOINT_NAME, checkpoint.LEGACY_CHECKPOINT_NAME):
        path = path.parent  # the run's own file: name the run
    warnings.warn(
        UnfinishedRunWarning(
            f"{path} stopped at step {step} of {steps}; its outputs are those of an unfinished "
            f"model. Resume it: {resume_command(path)}"
        ),
        stacklevel=3,
    )


def restore(point: ResumePoint, trainer: Any) -> None:
    """Check each part's state in ``point`` against ``trainer``'s freshly built part, then
    load it: the model's weights (the last step's, ``last.*``, when the model saved is an
    average), the optimizer's state, the averaging's sum, the schedule, the batch stream's
    position and the dropout generator. ``trainer`` has ``model``, ``model_cfg``,
    ``optimizer``, ``schedule``, ``stream`` and ``cfg`` (a Trainer built from
    ``point.config``)."""
    path, arrays, meta = point.path, point.arrays, point.meta
    checkpoint.check_config(meta["model_config"], trainer.model_cfg.to_dict(), path=path)
    dev = trainer.cfg.device
    layout = _layout(trainer.model.state_dict())
    model_state = checkpoint.section(arrays, "model")
    checkpoint.check_arrays_like(path, "model", model_state, layout)
    total, steps, last = _average_state(path, arrays, meta, layout)
    model_state = last or model_state  # an averaged model: training goes on from the last step
    _load(
        path,
        "model",
        lambda: trainer.model.load_state_dict(
            {k: backend.asarray(v, device=dev) for k, v in model_state.items()}
        ),
    )

    opt_state = checkpoint.section(arrays, "optim")
    _check_optimizer(path, trainer.optimizer, opt_state, meta["optimizer"], meta["step"])
    _load(
        path,
        "optim",
        lambda: trainer.optimizer.load_state_dict(
            {k: backend.asarray(v, device=dev) for k, v in opt_state.items()}, meta["optimizer"]
        ),
    )
    _load(path, "average", lambda: trainer.averaging.restore(
        {k: backend.asarray(v, device=dev) for k, v in total.items()}, steps, trainer.model,
        meta["step"]))  # fmt: skip
    fresh_rng = trainer.generator.state()  # the trainer's own dropout generator
    for field, fresh, load in [
        ("schedule", trainer.schedule.state_dict(), trainer.schedule.load_state_dict),
        ("stream", trainer.stream.state_dict(), trainer.stream.load_state_dict),
        ("rng", fresh_rng, trainer.generator.set_state),
    ]:
        if (
            field == "rng"
            and isinstance(meta[field], dict)
            and not meta[field].get("bit_generator")
            and "bit_generator" in fresh
        ):
            fresh = {**fresh, "bit_generator": None}  # a GPU generator keeps its seed only
        # what the run's config fixes (schedule sizes, batch size ...) must be what it builds
        counters = fresh if field != "rng" else None
        checkpoint.check_like(path, field, meta[field], fresh, counters_of=counters)
        _load(path, field, lambda load=load, field=field: load(meta[field]))
    stream = meta["stream"]
    if not 0 <= stream["position"] <= stream["n_pairs"]:
        _bad(path, "stream.position", f"is {stream['position']}, outside 0..{stream['n_pairs']}")


def _average_state(
    path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any], layout: dict[str, Any]
) -> tuple[dict[str, np.ndarray], list[int], dict[str, np.ndarray]]:
    """The checkpoint averaging's part of a checkpoint (train/averaging.py), checked: (the
    running sum ``average.*``, the steps in it ``average.steps``, the last step's weights
    ``last.*`` beside an averaged model, else {}). A checkpoint older than averaging has none
    of them: an empty sum."""
    record = meta.get("average", {"steps": []})
    if not isinstance(record, dict) or set(record) != {"steps"}:
        _bad(path, "average", f"is {short(record)}, expected an object {{'steps': [...]}}")
    steps, step = record["steps"], meta["step"]
    if not isinstance(steps, list) or not all(is_int(s) and 1 <= s <= step for s in steps):
        _bad(path, "average.steps", f"is {short(steps)}, expected a list of steps in 1..{step}")
    if steps != sorted(set(steps)):
        _bad(path, "average.steps", f"is {short(steps)}, expected ascending steps, each once")
    total, last = checkpoint.section(arrays, "average"), checkpoint.section(arrays, "last")
    if steps or total:  # the sum of the weights at these steps: shaped as the weights
        checkpoint.check_arrays_like(path, "average", total, layout)
        if not steps:
            _bad(path, "average", "holds a sum of weights, but 'average.steps' is empty")
    if last:  # beside the average, written only once the run ended on it
        checkpoint.check_arrays_like(path, "last", last, layout)
        if len(steps) < 2 or steps[-1] != step:
            _bad(path, "last", f"is there, but no average ends at step {step}")
    return total, steps, last


def _layout(state: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """{name: (shape, dtype name)} of a state dict: what a checkpoint's arrays must match."""
    return {k: (tuple(v.shape), backend.dtype_name(v.dtype)) for k, v in state.items()}


def _check_optimizer(path: Path, optimizer: Any, arrays: dict, meta: Any, step: int) -> None:
    """The optimizer's section, against the state of the optimizer about to load it.

    Nothing here knows how an optimizer names its state: the expected arrays are the ones a
    fresh optimizer of the same kind declares (its ``state_dict()``); one that makes its
    state lazily, on its first step, declares none, so a twin over one-element stand-ins
    takes one step to say which names it uses (shapes are then checked by its own
    ``load_state_dict``). A run that has taken steps must bring its state: resuming Adam
    with fresh moments would quietly train a different run.
    """
    fresh_arrays, fresh_meta = optimizer.state_dict()
    checkpoint.check_like(path, "optimizer", meta, fresh_meta, counters_of=fresh_meta)
    if fresh_arrays:
        checkpoint.check_arrays_like(path, "optim", arrays, _layout(fresh_arrays))
        return
    dtypes = {k: backend.dtype_name(p.dtype) for k, p in _twin_state(optimizer).items()}
    expected = set(dtypes)
    if step == 0 and not arrays:
        return
    missing, unexpected = sorted(expected - set(arrays)), sorted(set(arrays) - expected)
    if missing or unexpected:
        parts = [f"missing keys: {missing[:5]}"] if missing else []
        parts += [f"unexpected keys: {unexpected[:5]}"] if unexpected else []
        _bad(
            path,
            "optim",
            "does not fit the model's optimizer ("
            + "; ".join(parts)
            + f"; {len(missing)} missing, {len(unexpected)} unexpected)",
        )
    for name, array in arrays.items():
        checkpoint.check_array(path, f"optim.{name}", array, dtype=dtypes[name])


def _twin_state(optimizer: Any) -> dict[str, Any]:
    """The state arrays an optimizer of this kind holds after one step, per name (stand-ins
    of one element per parameter, same dtype and device)."""
    twins = []
    for p in optimizer.params:
        xp = backend.namespace(p.data)
        t = Tensor(xp.zeros((1,) * max(p.data.ndim, 1), dtype=p.data.dtype), requires_grad=True)
        t.data = backend.to_device(t.data, backend.device_of(p.data))
        t.grad = xp.zeros_like(t.data)
        twins.append(t)
    twin = type(optimizer)(twins, lr=0.0)
    twin.step()
    arrays, _ = twin.state_dict()
    return arrays


def _load(path: Path, field: str, load: Any) -> None:
    """Run a component's own loader; any complaint becomes a CheckpointError naming ``field``."""
    try:
        load()
    except CheckpointError:
        raise
    except (
        MiniTransformerError,
        KeyError,
        TypeError,
        ValueError,
        IndexError,
        OverflowError,
        AttributeError,
    ) as err:
        _bad(path, field, f"does not load ({' '.join(str(err).split())})")


def _bad(path: Path, field: str, problem: str) -> None:
    raise CheckpointError(
        f"cannot resume from {path}: field {field!r} {problem}. Fix: resume from an intact "
        "checkpoint written by `minitransformer train` (an edited or foreign file is refused)"
    )
