"""A run's training curves: loss, accuracy, exact match, BLEU and learning rate against step,
one line per split, from a list of records or the run's metrics log (runs.read_metrics). A
language model's evaluations also log the n-gram baselines' loss (data/ngram.py): dashed
lines on the loss panel. Under label smoothing the Trainer's evaluation records carry
``label_smoothing`` (ε) and ``loss_floor`` (the least loss ε allows at the vocabulary): the
loss panel says it is label-smoothed and draws the floor, dashed. Accuracies are percentages.

The training loss is drawn twice: each logged batch's loss (``loss``) faint, and its running
mean solid (``loss_mean`` over ``loss_window`` steps, as the bar shows it; a log written
before those fields: the mean of the last :data:`LOGGED_WINDOW` logged losses). Batches are
bucketed by length, so one batch's loss zig-zags.
"""

from __future__ import annotations

import errno
import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...checks import is_real
from ...runtime.runs import read_metrics
from .figure import PathLike, SaveTo, decorate, finish, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Metrics plot_training_curves knows, in panel order: (record key, axis label).
TRAINING_METRICS = (
    ("loss", "loss"),
    ("token_acc", "token accuracy"),
    ("exact_match", "exact match"),
    ("bleu", "BLEU"),
    ("lr", "learning rate"),
)

_SPLIT_ORDER = ("train", "valid", "test")
LOGGED_WINDOW = 5  # a log without loss_mean: the training loss's mean of this many records
BASELINES = (("unigram_loss", "unigram"), ("bigram_loss", "bigram"))  # (record key, name)


def plot_training_curves(
    metrics: Sequence[Mapping[str, Any]] | PathLike,
    *,
    title: str | None = None,
    path: SaveTo | None = None,
) -> Figure:
    """Loss, and token accuracy / exact match / BLEU / learning rate where logged, against step.

    Args:
        metrics: a list of records, or the path of a JSONL metrics log (one record per line),
            such as ``{"step": 100, "split": "train", "loss": 2.3, "lr": 1e-3}`` and
            ``{"step": 100, "split": "valid", "loss": 2.1, "token_acc": 0.5, "bleu": 12.3}``.
            Each split becomes one line per panel ("split" defaults to "train"); records
            without a numeric "step" and keys that are missing or not numbers are skipped,
            and so (with a warning) are points that are not finite floats (NaN, ±inf, an
            int beyond the float range). Huge values are drawn, up to ±1e300 on the axis.
            Records may carry ``label_smoothing`` (ε > 0) and ``loss_floor``: the loss
            panel is then titled label-smoothed and draws the floor as a dashed line.
        title: figure title (default "Training curves", and the log's folder: the run).
        path: where to save the figure (optional): a file name, or a binary file (PNG).

    Raises:
        ValueError: no record holds a step and one of the known metrics, or a line of the
            log (other than a cut-off last line, which is skipped with a warning) is not JSON.
        FileNotFoundError: the log does not exist.
    """
    if isinstance(metrics, (str, os.PathLike)):
        records: list[Any] = _read_log(Path(metrics))
        title = title or f"Training curves: {Path(metrics).parent}"
    else:
        records = list(metrics)
    series: dict[str, dict[str, list[tuple[float, float]]]] = {}
    baselines: dict[str, tuple[str, float]] = {}  # name -> (split, loss), the last logged
    smoothing: tuple[float, float] | None = None  # (ε, the loss floor), the last logged
    means: list[tuple[Any, Any, Any]] = []  # (step, loss_mean, loss_window) per train loss
    left_out = 0
    for record in records:
        step = record.get("step") if isinstance(record, Mapping) else None
        if not is_real(step):
            continue
        split = str(record.get("split", "train"))
        for key, _ in TRAINING_METRICS:
            if is_real(record.get(key)):
                point = _finite_point(step, record[key])
                if point is None:
                    left_out += 1
                    continue
                series.setdefault(key, {}).setdefault(split, []).append(point)
                if key == "loss" and split == "train":
                    means.append((step, record.get("loss_mean"), record.get("loss_window")))
        eps, floor = record.get("label_smoothing"), record.get("loss_floor")
        if is_real(eps) and is_real(floor) and eps > 0 and math.isfinite(floor):
            smoothing = float(eps), float(floor)
        for key, name in BASELINES:  # the validation split's, where logged
            if is_real(record.get(key)) and math.isfinite(record[key]):
                if split == "valid" or baselines.get(name, ("",))[0] != "valid":
                    baselines[name] = (split, float(record[key]))
    if left_out:
        warnings.warn(
            f"plot_training_curves: left out {left_out} point(s) whose step or value is not "
            "a finite number (NaN, inf, or beyond the float range)",
            stacklevel=2,
        )
    panels = [(key, label) for key, label in TRAINING_METRICS if key in series]
    if not panels:
        known = ", ".join(key for key, _ in TRAINING_METRICS)
        dropped = f" ({left_out} point(s) were NaN, inf or beyond the float range)"
        raise ValueError(
            f"plot_training_curves: nothing to plot in {len(records)} records"
            f"{dropped if left_out else ''}; each needs a numeric 'step' and at least one "
            f"finite number of: {known}."
        )

    cols = min(len(panels), 3)
    rows = math.ceil(len(panels) / cols)
    fig = new_figure((4.6 * cols, 3.4 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    splits = sorted({split for key, _ in panels for split in series[key]}, key=_split_rank)
    color = {split: f"C{i}" for i, split in enumerate(splits)}  # one colour per split
    for ax, (key, label) in zip(axes, panels, strict=False):  # spare axes are hidden below
        by_split = series[key]
        for split in sorted(by_split, key=_split_rank):
            points, name = sorted(by_split[split]), split
            if key == "loss" and split == "train":  # one batch's loss faint, its mean solid
                ax.plot(*zip(*points, strict=True), color=color[split], alpha=0.3,
                        linewidth=0.8, label="train (last batch)")  # fmt: skip
                points, words = _running_mean(points, means)
                name = f"train ({words})"
            ax.plot(
                [step for step, _ in points],
                [value for _, value in points],
                marker="o" if len(points) <= 30 else None,
                markersize=3,
                label=name,
                color=color[split],
            )
        lines = baselines.items() if key == "loss" else ()  # on the loss panel only
        for style, (name, (split, value)) in zip((":", "--"), lines, strict=False):
            ax.axhline(value, linestyle=style, color="gray", label=f"{name} ({split})")
        if key == "loss" and smoothing is not None:  # 100% accuracy is not loss 0 here
            eps, floor = smoothing
            label = f"loss (label-smoothed, ε {eps:g})"
            ax.axhline(floor, linestyle="--", color="black", linewidth=1,
                       label=f"floor {floor:.4f} (the least ε {eps:g} allows)")  # fmt: skip
        decorate(ax, "step", label, label, logy=False, legend=True)
        if key in ("token_acc", "exact_match"):  # as the console prints them
            from matplotlib.ticker import PercentFormatter

            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    fig.suptitle(title or "Training curves")
    return finish(fig, path)


def _running_mean(
    points: list[tuple[float, float]], means: list[tuple[Any, Any, Any]]
) -> tuple[list[tuple[float, float]], str]:
    """The training loss's running mean against step, and what it is in words for the legend.

    ``points``: the (step, loss) of each logged batch, in step order; ``means``: (step,
    loss_mean, loss_window) of the same records. When each record has a finite loss_mean and
    a loss_window (the Trainer's log), those; else (an older log) the mean of the last
    LOGGED_WINDOW logged losses at each point."""
    stored, windows = [], []
    for step, mean, window in means:
        if is_real(mean) and is_real(window):
            point = _finite_point(step, mean)
            if point is not None:
                stored.append(point)
                windows.append(int(window))
    if stored and len(stored) == len(means):  # every record has its mean: the Trainer's log
        return sorted(stored), f"mean of last {max(windows)} steps"
    values = [value for _, value in points]
    averaged = []
    for i, (step, _) in enumerate(points):
        recent = values[max(0, i + 1 - LOGGED_WINDOW) : i + 1]
        averaged.append((step, sum(recent) / len(recent)))
    return averaged, f"mean of last {LOGGED_WINDOW} logged losses"


def _read_log(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics log, read by ``runs.read_metrics`` (the one reader). Lines it
    leaves out that are JSON but not records (an event, a NaN) are skipped; a line that is not
    JSON at all is an error, except the last one: a run killed mid-write leaves it cut short,
    so it is skipped with a warning."""
    if not path.exists():  # a FIFO or device there: read_metrics refuses it by its kind
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    records, skipped = read_metrics(path)
    if not skipped:
        return records
    with open(path, encoding="utf-8", errors="replace") as file:
        lines = dict(enumerate(file, 1))
    last = max((n for n, line in lines.items() if line.strip()), default=0)
    for number in skipped:
        try:
            json.loads(lines[number])
        except (ValueError, RecursionError) as exc:
            if number == last:
                warnings.warn(
                    f"{path}: skipped the last line, which is not complete JSON ({exc}).",
                    stacklevel=3,
                )
                continue
            raise ValueError(
                f"plot_training_curves: {path} line {number} is not valid JSON ({exc}). "
                "Fix: each line of a metrics log must be one JSON object."
            ) from exc
    return records


def _finite_point(step: Any, value: Any) -> tuple[float, float] | None:
    """(step, value) as finite floats, or None (NaN, ±inf, an int too big for a float)."""
    try:
        point = float(step), float(value)
    except OverflowError:
        return None
    return point if all(map(math.isfinite, point)) else None


def _split_rank(split: str) -> tuple[int, str]:
    return (_SPLIT_ORDER.index(split) if split in _SPLIT_ORDER else len(_SPLIT_ORDER), split)
