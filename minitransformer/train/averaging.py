"""Checkpoint averaging: the final model is the mean of the weights at the run's last steps.

The paper's §6.1: "a single model obtained by averaging the last 5 checkpoints, which were
written at 10-minute intervals". Here the checkpoints are the weights every ``every`` steps
back from the run's last step ``S``:

    θ̄ = (1/N) Σ_k θ_{s_k},    s_k = S − k·every  for k = 0 .. last−1,  s_k ≥ 1

(N, the number of those steps, is ``last`` unless the run is shorter than ``last · every``
steps). Why: the last step alone is a lottery. The weights of a copy run (seed 0) at steps
2000, 2100, ..., 3000 scored between 98.0% (step 2900) and 100% (step 2800) test exact match,
one step to the next (a loss spike can land on any of them, the last included); the mean of
those at 2600, 2700, ..., 3000 scored 100.0%, with the lowest test loss of all (0.6167).
Averaging smooths the noise of the last updates away, as Polyak averaging does, for the
price of one sum.

    average = CheckpointAverage(cfg)              # cfg.steps, cfg.average_last, cfg.average_every
    for step in ...:                              # after each training step
        if average.due(step):
            average.add(step, model)              # a running sum on the model's device
    average.apply(model, step)                    # the model now holds the mean; the last
                                                  # step's weights are kept (``raw``)

What is kept is a running SUM of the weights (one extra copy of them, on the model's device,
added to in place: no copy to the host, no wait) and the steps added. A checkpoint stores
both (``state()``), so a run stopped inside the averaging window and resumed ends with the
same mean as a run that was never stopped. ``last`` = 1 (or a run of fewer than ``every + 1``
steps) means no averaging: the final model is the last step's weights, as without this file.

A run resumed or continued with another schedule (other --steps, --average-last or
--average-every) keeps the sum only when every step in it is one of the new schedule's (a
sum cannot give back one of its terms); the weights of the step it goes on from are added
when that step is one of them. The result card's ``averaged_steps`` lists the steps whose
mean the final model is.
"""

from __future__ import annotations

from typing import Any

from .. import backend


class CheckpointAverage:
    """The running sum of the model's weights at the steps of a run's averaging schedule.

    Attributes:
        last, every, steps: the schedule (``cfg.average_last``, ``cfg.average_every``,
            ``cfg.steps``); ``plan(cfg)`` sets them again when a run goes on with other ones.
        total: {weight name: the sum of its values at the steps added}, device arrays.
        added: the steps whose weights are in ``total``, ascending.
        raw: the last step's weights while the model holds the average (after ``apply``),
            else None: what training goes on from.
    """

    def __init__(self, cfg: Any):
        self.last, self.every, self.steps = cfg.average_last, cfg.average_every, cfg.steps
        self.total: dict[str, Any] = {}
        self.added: list[int] = []
        self.raw: dict[str, Any] | None = None

    # ------------------------------------------------------------------ the schedule
    def plan(self, cfg: Any, model: Any, step: int) -> None:
        """Take the schedule of ``cfg`` (its ``steps``, ``average_last`` and
        ``average_every``, checked by TrainConfig) for a run at ``step`` whose model holds
        that step's weights (a run resumed or continued, perhaps with other --steps)."""
        self.last, self.every, self.steps = cfg.average_last, cfg.average_every, cfg.steps
        self._fit(model, step)

    def _fit(self, model: Any, step: int) -> None:
        """Make the sum one of this schedule's at ``step``. A sum holding a step outside the
        schedule is emptied whole (a sum cannot give back one of its terms); then the
        model's weights are added when ``step`` is one of the schedule's and not in the sum
        yet: a finished run continued to a later --steps whose schedule has its last step,
        or a checkpoint written before averaging, keeps the weights at hand."""
        if not all(self.due(s) for s in self.added):
            self.total, self.added = {}, []
        if self.due(step) and step not in self.added:
            self.add(step, model)

    def count(self) -> int:
        """N: how many steps are averaged (s_k ≥ 1 leaves fewer than ``last`` in a short
        run); 1 (the last step alone) means no averaging."""
        return min(self.last, (self.steps - 1) // self.every + 1)

    def schedule(self) -> list[int]:
        """The steps whose weights are averaged, ascending (empty: no averaging)."""
        n = self.count()
        return [] if n < 2 else [self.steps - k * self.every for k in reversed(range(n))]

    def due(self, step: int) -> bool:
        """True when the weights after step ``step`` are one of the schedule's."""
        back = self.steps - step
        return self.count() >= 2 and back >= 0 and back % self.every == 0 and (
            back // self.every < self.count()
        )  # fmt: skip

    # ------------------------------------------------------------------ the sum
    def add(self, step: int, model: Any) -> None:
        """Add the model's weights after step ``step`` to the sum (on their device)."""
        for name, value in _weights(model).items():
            if name in self.total:
                self.total[name] += value
            else:
                self.total[name] = _copy(value)
        self.added.append(step)

    def average(self) -> dict[str, Any]:
        """{weight name: the mean of its values at the steps added}: θ̄ = total / N."""
        n = len(self.added)
        return {name: value / n for name, value in self.total.items()}

    def final_steps(self, step: int) -> list[int]:
        """The steps whose mean is the final model of a run at ``step``: those averaged,
        or ``[step]`` (the last step's weights) when there is no average."""
        return list(self.added) if self.raw is not None else [step]

    def apply(self, model: Any, step: int) -> bool:
        """Write the average into the model's weights (in place), keeping the last step's
        weights in ``raw``; True when it did. Nothing to do (False) when the model holds the
        average already, or the sum holds no step, or only ``step`` itself (its mean is the
        model's own weights)."""
        if self.raw is not None or not self.added or self.added == [step]:
            return False
        self.raw = model.state_dict()  # a copy of each weight, on its device
        _write(model, self.average())
        return True

    def begin(self, model: Any, cfg: Any, step: int) -> None:
        """Before training (again) from ``step``: the model goes back to the last step's
        weights if it holds the average, and the schedule is ``cfg``'s (see ``plan``)."""
        if self.raw is not None:
            _write(model, self.raw)
            self.raw = None
        self.plan(cfg, model, step)

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(arrays, metadata) for a checkpoint: ``average.<name>`` (the sum) and, after
        ``apply``, ``last.<name>`` (the last step's weights), as host NumPy arrays; and
        ``{"steps": [...]}``, the steps added."""
        arrays = {f"average.{k}": backend.to_numpy(v) for k, v in self.total.items()}
        if self.raw is not None:
            arrays.update({f"last.{k}": backend.to_numpy(v) for k, v in self.raw.items()})
        return arrays, {"steps": list(self.added)}

    def restore(self, total: dict[str, Any], steps: list[int], model: Any, step: int) -> None:
        """Load a checkpoint's sum (``total``, device arrays shaped as the model's weights)
        and its steps, both checked by the caller (runs/resume.py), into a run at ``step``
        whose model holds that step's weights; fitted to this run's schedule (``_fit``)."""
        self.total = {name: _copy(value) for name, value in total.items()}
        self.added, self.raw = [int(s) for s in steps], None
        self._fit(model, step)


def describe(steps: list[int]) -> str:
    """What the final line says after "final": `` (average of 5 checkpoints, steps
    2600–3000)``, or "" for the last step's weights alone."""
    if len(steps) < 2:
        return ""
    return f" (average of {len(steps)} checkpoints, steps {steps[0]}–{steps[-1]})"


def _weights(model: Any) -> dict[str, Any]:
    """{name: array} of the model's parameters and saved buffers, not copied: the names of
    ``state_dict()``."""
    named = [*model.named_parameters(), *model.named_buffers(persistent_only=True)]
    return {name: t.data for name, t in named}


def _copy(value: Any) -> Any:
    return backend.namespace(value).asarray(value, copy=True)


def _write(model: Any, values: dict[str, Any]) -> None:
    """Copy ``values`` into the model's weights in place: each parameter keeps its array (an
    optimizer's flat buffer and a captured CUDA graph still see it)."""
    for name, array in _weights(model).items():
        array[...] = values[name]
