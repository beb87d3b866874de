"""TrainConfig: everything a training run needs, with the per-task defaults, checked when
it is made.

    cfg = TrainConfig(task="copy", out="runs/copy")      # None fields: the task's default
    cfg.resolved()                                       # a copy with the defaults filled in

A TrainConfig is stored in every training checkpoint, so ``--resume`` needs nothing else;
RESUMABLE names the fields a resumed run may change (the others make the run what it is).

This module stands on the ground: the device name is checked by the backend, where a
Trainer puts the model on it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from ..checks import is_int, is_real
from ..data.tasks import SPLITS
from ..errors import ConfigError
from .model import PRESETS, TransformerConfig

# Defaults per task, chosen (and measured, see the README) so each reaches its target on a
# 2-core CPU: steps, batch size, warm-up, peak learning rate, and task knobs.
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "copy": dict(preset="tiny", steps=3000, batch_size=64, warmup=400, peak_lr=2e-3),
    "reverse": dict(preset="tiny", steps=3000, batch_size=64, warmup=400, peak_lr=2e-3),
    "sort": dict(preset="tiny", steps=3000, batch_size=64, warmup=400, peak_lr=2e-3),
    "translate": dict(preset="tiny", steps=4000, batch_size=64, warmup=800, peak_lr=3e-3),
    "translate-en-es": dict(preset="small", steps=4500, batch_size=64, warmup=1000, peak_lr=2e-3),
}

# Options a resumed run may change; every other one is part of what the checkpoint is.
RESUMABLE = frozenset(
    {"steps", "progress", "plots", "device", "out", "log_every", "eval_every", "eval_samples",
     "checkpoint_every", "final_eval_split", "final_eval_samples"}
)  # fmt: skip


@dataclass
class TrainConfig:
    """Everything a run needs; stored in its checkpoint so ``--resume`` needs nothing else.

    ``None`` means "the task's default" (TASK_DEFAULTS).
    """

    task: str = "copy"
    preset: str | None = None
    steps: int | None = None
    batch_size: int | None = None
    warmup: int | None = None
    peak_lr: float | None = None
    label_smoothing: float = 0.1
    dropout: float | None = None  # None: the preset's
    clip_norm: float | None = 1.0
    seed: int = 0
    device: str = "cpu"
    out: str = "runs/copy"
    log_every: int = 50
    eval_every: int = 500
    eval_samples: int = 200  # sentences decoded at each periodic evaluation
    checkpoint_every: int = 500
    final_eval_split: str = "test"
    final_eval_samples: int | None = 1000  # None: the whole split
    task_knobs: dict[str, Any] = field(default_factory=dict)
    model_overrides: dict[str, Any] = field(default_factory=dict)
    progress: bool = True  # a tqdm bar; without it, one plain line per log step on stderr
    plots: bool = True  # draw plots/*.png at the end (matplotlib; a few seconds)

    def __post_init__(self) -> None:
        """Every field given is checked here, at construction (not after training)."""
        _check_fields(self)

    def resolved(self) -> TrainConfig:
        """A copy with every ``None`` replaced by the task's default (checked again, as every
        TrainConfig is when it is made: a field set after construction is caught here)."""
        defaults = TASK_DEFAULTS.get(self.task, {})
        return dataclasses.replace(
            self, **{k: v for k, v in defaults.items() if getattr(self, k) is None}
        )


def _check_fields(cfg: TrainConfig) -> None:
    """ConfigError naming the first bad field of ``cfg`` (``None``s are the task's defaults)."""

    def bad(name: str, expected: str) -> ConfigError:
        value = getattr(cfg, name)
        return ConfigError(f"TrainConfig: {name} must be {expected}, got {value!r}")

    if not isinstance(cfg.task, str) or cfg.task not in TASK_DEFAULTS:
        raise ConfigError(
            f"TrainConfig: unknown task {cfg.task!r}; choose one of {', '.join(TASK_DEFAULTS)}"
        )
    positive = ("steps", "batch_size", "warmup", "log_every", "eval_every",
                "eval_samples", "checkpoint_every", "final_eval_samples")  # fmt: skip
    for key in positive:
        value = getattr(cfg, key)
        if value is not None and (not is_int(value) or value <= 0):
            raise bad(key, "a positive integer" + (" or None" if key.startswith("final") else ""))
    if cfg.peak_lr is not None and not (is_real(cfg.peak_lr) and 0 < cfg.peak_lr < 1):
        raise bad("peak_lr", "in (0, 1) (a number, e.g. 1e-3)")
    if not (is_real(cfg.label_smoothing) and 0 <= cfg.label_smoothing < 1):
        raise bad("label_smoothing", "a number in [0, 1) (the paper: 0.1)")
    if cfg.dropout is not None and not (is_real(cfg.dropout) and 0 <= cfg.dropout < 1):
        raise bad("dropout", "a number in [0, 1) or None (the preset's)")
    if cfg.clip_norm is not None and not (is_real(cfg.clip_norm) and 0 < cfg.clip_norm < math.inf):
        raise bad("clip_norm", "positive and finite (or None: no clipping)")
    if not is_int(cfg.seed) or cfg.seed < 0:
        raise bad("seed", "a non-negative integer")
    if cfg.preset is not None and cfg.preset not in PRESETS:
        raise bad("preset", f"None or one of {', '.join(PRESETS)}")
    if cfg.final_eval_split not in SPLITS:
        raise bad("final_eval_split", f"one of {', '.join(SPLITS)}")
    for key in ("task_knobs", "model_overrides"):
        if not isinstance(getattr(cfg, key), dict):
            raise bad(key, "a dict {name: value}")
    unknown = sorted(
        set(cfg.model_overrides) - {f.name for f in dataclasses.fields(TransformerConfig)}
    )
    if unknown:
        raise bad("model_overrides", f"a dict of TransformerConfig fields; unknown: {unknown}")
    for key in ("progress", "plots"):
        if not isinstance(getattr(cfg, key), bool):
            raise bad(key, "True or False")
    if not isinstance(cfg.device, str) or not isinstance(cfg.out, str):
        raise bad("device" if not isinstance(cfg.device, str) else "out", "a string")
