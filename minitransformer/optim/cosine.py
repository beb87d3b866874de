"""A cosine learning-rate schedule with linear warm-up (Loshchilov & Hutter's SGDR without
restarts, 2017; the usual companion of AdamW)::

    lr(step) = peak · step / warmup                                 step ≤ warmup
    lr(step) = min + ½ (peak − min) (1 + cos(π · progress))         warmup < step ≤ total
               progress = (step − warmup) / (total − warmup)
    lr(step) = min                                                  step > total

It rises linearly to ``peak_lr`` at step = warmup, then follows half a cosine down to
``min_lr`` at step = total. Unlike the paper's schedule (``NoamSchedule``, decaying as
step^-0.5 forever), it must be told how long the run is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from .hyperparameters import check_number
from .optimizer import Optimizer
from .schedule import Schedule


def _whole(name: str, value: Any, low: int) -> int:
    """``value`` as an int ≥ ``low``, else ConfigError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"CosineSchedule: {name} must be a whole number >= {low}, got {value!r}")
    return value


class CosineSchedule(Schedule):
    """Linear warm-up to ``peak_lr``, then a cosine decay to ``min_lr`` at ``total_steps``.

    Steps count optimizer updates from 1 (the conventions of ``Schedule``, as for
    ``NoamSchedule``): the n-th update runs with ``lr_at(n)``.

    Arguments: ``peak_lr`` > 0; ``warmup`` ≥ 0 steps (0: start at the peak);
    ``total_steps`` > ``warmup``; 0 ≤ ``min_lr`` ≤ ``peak_lr``.
    """

    def __init__(self, optimizer: Optimizer, peak_lr: float, warmup: int, total_steps: int,
                 min_lr: float = 0.0):  # fmt: skip
        if not isinstance(optimizer, Optimizer):
            raise ConfigError(
                f"CosineSchedule: optimizer must be an Optimizer (Adam, AdamW, SGD), got "
                f"{type(optimizer).__name__}"
            )
        self.peak_lr, self.warmup, self.total_steps, self.min_lr = self.check(
            peak_lr, warmup, total_steps, min_lr
        )
        super().__init__(optimizer)

    @staticmethod
    def check(peak_lr: Any, warmup: Any, total_steps: Any, min_lr: Any) -> tuple:
        """The four settings checked (ConfigError naming the one that is wrong)."""
        peak = check_number("CosineSchedule", "peak_lr", peak_lr, 0.0, low_open=True,
                            high_open=True)  # fmt: skip
        warm = _whole("warmup", warmup, 0)
        total = _whole("total_steps", total_steps, 1)
        if total <= warm:
            raise ConfigError(
                f"CosineSchedule: total_steps ({total}) must be greater than warmup ({warm})"
            )
        low = check_number("CosineSchedule", "min_lr", min_lr, 0.0, peak)
        return peak, warm, total, low

    @staticmethod
    def rate(
        step: int, peak_lr: float, warmup: int, total_steps: int, min_lr: float = 0.0
    ) -> float:
        """The formula of the module doc as a pure function; 0.0 at step 0."""
        if step < 0:
            raise ConfigError(f"CosineSchedule: step must be >= 0, got {step}")
        if step == 0:
            return 0.0
        if step <= warmup:
            return peak_lr * step / warmup
        if step >= total_steps:
            return min_lr
        progress = (step - warmup) / (total_steps - warmup)
        return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(math.pi * progress))

    def lr_at(self, step: int) -> float:
        """The learning rate of update number ``step`` (counting from 1)."""
        return self.rate(step, self.peak_lr, self.warmup, self.total_steps, self.min_lr)

    def state_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"type", "step", "peak_lr", "warmup", "total_steps", "min_lr"}``."""
        return {
            "type": "CosineSchedule",
            "step": self.step_num,
            "peak_lr": self.peak_lr,
            "warmup": self.warmup,
            "total_steps": self.total_steps,
            "min_lr": self.min_lr,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the step and settings (checked as at construction), and set
        ``optimizer.lr`` for the next update."""
        if not isinstance(state, Mapping) or state.get("type") != "CosineSchedule":
            kind = state.get("type") if isinstance(state, Mapping) else type(state).__name__
            raise ConfigError(f"CosineSchedule.load_state_dict: the state is from {kind!r}")
        keys = ("peak_lr", "warmup", "total_steps", "min_lr")
        missing = [k for k in ("step", *keys) if k not in state]
        if missing:
            raise ConfigError(f"CosineSchedule.load_state_dict: the state lacks {missing}")
        settings = self.check(*(state[k] for k in keys))
        step = _whole("step", state["step"], 0)
        self.peak_lr, self.warmup, self.total_steps, self.min_lr = settings
        self._resume_at(step)

    def __repr__(self) -> str:
        return (
            f"CosineSchedule(peak_lr={self.peak_lr}, warmup={self.warmup}, "
            f"total_steps={self.total_steps}, min_lr={self.min_lr}, step={self.step_num}, "
            f"lr={self.lr:.3e})"
        )
