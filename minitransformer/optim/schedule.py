"""The paper's learning-rate schedule (§5.3): linear warm-up, then inverse square root::

lrate(step) = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)

``Schedule`` is what every schedule here shares (``NoamSchedule`` below, ``CosineSchedule``
in cosine.py): the step count and setting ``optimizer.lr``; each schedule brings its
``lr_at``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from .optimizer import Optimizer


class Schedule:
    """The bookkeeping every learning-rate schedule shares; a schedule adds ``lr_at``.

    Steps count optimizer updates from 1. Construction sets ``optimizer.lr = lr_at(1)``; each
    ``step()``, called *after* ``optimizer.step()``, sets the rate of the next update, so the
    n-th update always runs with ``lr_at(n)``. ``step_num`` is the number of updates done.
    A subclass stores its settings first, then calls ``super().__init__(optimizer)``.
    """

    def __init__(self, optimizer: Optimizer):
        self.optimizer = optimizer
        self.step_num = 0
        optimizer.lr = self.lr_at(1)

    def lr_at(self, step: int) -> float:
        """The learning rate of update number ``step`` (counting from 1)."""
        raise NotImplementedError(f"{type(self).__name__} must define lr_at(step)")

    @property
    def lr(self) -> float:
        """The rate the next update will use (what ``optimizer.lr`` holds)."""
        return self.lr_at(self.step_num + 1)

    def step(self) -> float:
        """Count one finished update and set ``optimizer.lr`` for the next; return it."""
        self.step_num += 1
        self.optimizer.lr = self.lr
        return self.optimizer.lr

    def _resume_at(self, step_num: int) -> None:
        """After ``load_state_dict`` restored the settings: ``step_num`` updates are done;
        set ``optimizer.lr`` for the next."""
        self.step_num = step_num
        self.optimizer.lr = self.lr


class NoamSchedule(Schedule):
    """The paper's learning-rate schedule (§5.3): linear warm-up, then inverse square root.

        lrate(step) = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5),  step ≥ 1

    It rises linearly for ``warmup`` steps, peaks at step = warmup with
    ``factor · (d_model · warmup)^-0.5``, then decays as step^-0.5. (For the base model,
    d_model = 512, warmup = 4000: peak ≈ 7.0e-4.)

    Steps count optimizer updates from 1 (the conventions of ``Schedule``).
    """

    def __init__(self, optimizer: Optimizer, d_model: int, warmup: int = 4000, factor: float = 1.0):
        if d_model <= 0 or warmup <= 0 or not factor > 0:
            raise ConfigError(
                f"NoamSchedule: need d_model > 0, warmup > 0, factor > 0; got d_model={d_model}, "
                f"warmup={warmup}, factor={factor}"
            )
        self.d_model = int(d_model)
        self.warmup = int(warmup)
        self.factor = float(factor)
        super().__init__(optimizer)

    @staticmethod
    def rate(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
        """The formula above as a pure function; 0.0 at step 0."""
        if step < 0:
            raise ValueError(f"NoamSchedule: step must be >= 0, got {step}")
        if step == 0:
            return 0.0
        return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    def lr_at(self, step: int) -> float:
        """The learning rate of update number ``step`` (counting from 1) under this schedule."""
        return self.rate(step, self.d_model, self.warmup, self.factor)

    @staticmethod
    def factor_for_peak(peak_lr: float, d_model: int, warmup: int) -> float:
        """The ``factor`` whose schedule peaks (at step = warmup) at ``peak_lr``:
        factor = peak_lr · √d_model · √warmup."""
        return float(peak_lr) * math.sqrt(d_model) * math.sqrt(warmup)

    @property
    def peak_lr(self) -> float:
        return self.lr_at(self.warmup)

    def state_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"type", "step", "d_model", "warmup", "factor"}``."""
        return {
            "type": "NoamSchedule",
            "step": self.step_num,
            "d_model": self.d_model,
            "warmup": self.warmup,
            "factor": self.factor,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the step and settings, and set ``optimizer.lr`` for the next update."""
        if state.get("type", "NoamSchedule") != "NoamSchedule":
            raise ConfigError(f"NoamSchedule.load_state_dict: the state is from {state['type']!r}")
        self.d_model = int(state["d_model"])
        self.warmup = int(state["warmup"])
        self.factor = float(state["factor"])
        self._resume_at(int(state["step"]))

    def __repr__(self) -> str:
        return (
            f"NoamSchedule(d_model={self.d_model}, warmup={self.warmup}, factor={self.factor}, "
            f"step={self.step_num}, lr={self.lr:.3e})"
        )
