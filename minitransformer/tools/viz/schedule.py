"""Learning-rate schedules: one curve or several, each with its peak marked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .figure import SaveTo, check_curves, decorate, finish, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_lr_schedule(
    steps: Sequence[float] | None,
    lrs: Sequence[float] | Mapping[str, Sequence[float]],
    *,
    label: str = "learning rate",
    title: str = "Learning-rate schedule",
    logy: bool = False,
    path: SaveTo | None = None,
) -> Figure:
    """Learning rate against step, one curve or several, with each curve's peak marked.

    Args:
        steps: the x values shared by every curve, or None for 0, 1, 2, ...
        lrs: one sequence of learning rates, or a dict label -> sequence to compare schedules
            (for example several warm-up lengths).
        label: legend label when ``lrs`` is a single sequence.
        title: figure title.
        logy: logarithmic learning-rate axis.
        path: where to save the figure (optional): a file name, or a binary file (PNG).

    Raises:
        ValueError: a curve's length differs from ``steps``.
    """
    curves = dict(lrs) if isinstance(lrs, Mapping) else {label: lrs}
    x, ys = check_curves("plot_lr_schedule", steps, curves, "lrs")

    fig = new_figure((7.0, 4.0))
    ax = fig.subplots()
    for name, y in ys.items():
        (line,) = ax.plot(x, y, label=name)
        if len(y) and np.isfinite(y).any():
            peak = int(np.nanargmax(y))
            ax.plot(x[peak], y[peak], "o", color=line.get_color(), markersize=4)
            ax.annotate(
                f"peak {y[peak]:.2e}\nat step {x[peak]:g}",
                (x[peak], y[peak]),
                textcoords="offset points",
                xytext=(6, -4),
                fontsize=7,
                va="top",
            )
    decorate(ax, "step", "learning rate", title, logy=logy, legend=True)
    return finish(fig, path)
