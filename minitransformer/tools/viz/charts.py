"""Generic charts for benchmarks and the lessons' experiments: bars, and labelled lines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .figure import LIMIT, SaveTo, as_floats, check_curves, check_len, decorate, finish, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_bars(
    labels: Sequence[str],
    values: Sequence[float],
    ylabel: str,
    title: str,
    *,
    errors: Sequence[float] | None = None,
    logy: bool = False,
    path: SaveTo | None = None,
) -> Figure:
    """Bar chart with each value written above its bar (for benchmarks).

    Args:
        labels: one name per bar.
        values: one height per bar.
        ylabel: the value axis label, with units (e.g. "ms per step").
        title: figure title.
        errors: optional error bar (e.g. standard deviation) per bar.
        logy: logarithmic value axis, for values spanning orders of magnitude.
        (A value beyond ±1e300 or infinite is drawn at the axis' end, NaN as no bar; the
        label above each bar gives the value itself.)
        path: where to save the figure (optional): a file name, or a binary file (PNG).

    Raises:
        ValueError: labels, values and errors differ in length, or there are none.
    """
    heights = as_floats("plot_bars", "values", values)
    if heights.ndim != 1 or len(heights) == 0 or len(heights) != len(labels):
        raise ValueError(
            f"plot_bars: need one value per label, got {len(labels)} labels and values of shape "
            f"{heights.shape}."
        )
    check_len("plot_bars", "errors", errors, len(heights), "the number of values")

    fig = new_figure((max(4.0, 0.9 * len(heights) + 2.0), 4.0))
    ax = fig.subplots()
    # a bar cannot reach 1e308 or inf (matplotlib's transforms overflow): drawn up to
    # ±LIMIT (NaN as no bar), while the label above it gives the value itself
    drawn = np.clip(np.nan_to_num(heights, nan=0.0), -LIMIT, LIMIT)
    bars = ax.bar([str(label) for label in labels], drawn, yerr=errors, capsize=3)
    ax.bar_label(bars, labels=[f"{v:.3g}" for v in heights], fontsize=8, padding=2)
    if len(heights) > 6 or max(len(str(label)) for label in labels) > 10:
        ax.tick_params(axis="x", labelrotation=30)
    decorate(ax, None, ylabel, title, logy=logy, legend=False)
    ax.grid(axis="x", visible=False)
    return finish(fig, path)


def plot_lines(
    x: Sequence[float] | None,
    ys: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str,
    *,
    logy: bool = False,
    logx: bool = False,
    path: SaveTo | None = None,
) -> Figure:
    """Several labelled curves over a shared x axis (for the lessons' experiments).

    Args:
        x: the shared x values, or None for 0, 1, 2, ...
        ys: label -> y values, each as long as ``x``.
        xlabel, ylabel, title: axis labels and figure title.
        logy, logx: logarithmic axes.
        path: where to save the figure (optional): a file name, or a binary file (PNG).

    Raises:
        ValueError: ``ys`` is empty or a curve's length differs from ``x``.
    """
    if not isinstance(ys, Mapping) or not ys:
        raise ValueError(
            "plot_lines: ys must be a non-empty dict of label -> values, got "
            f"{type(ys).__name__}. Fix: plot_lines(x, {{'train': losses}}, ...)."
        )
    xs, curves = check_curves("plot_lines", x, dict(ys), "ys")
    fig = new_figure((7.0, 4.0))
    ax = fig.subplots()
    for label, y in curves.items():
        ax.plot(xs, y, marker="o" if len(xs) <= 20 else None, markersize=3, label=label)
    if logx:
        ax.set_xscale("log")
    decorate(ax, xlabel, ylabel, title, logy=logy, legend=True)
    return finish(fig, path)
