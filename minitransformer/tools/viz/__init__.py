"""Figures for lessons, the README and training runs: attention maps, positions, schedules, curves.

Every function builds a fresh ``matplotlib.figure.Figure`` on the Agg canvas, never touching
pyplot's global state, so it works headless (CI, servers) and inside notebooks (a returned
Figure displays itself as the cell's result). Each returns the Figure and, given ``path``,
also saves it (dpi 120, tight bounding box): to a file name (its suffix picks the format,
parent directories are made; written whole, then renamed over the name, so a symbolic link
there is replaced, never written through) or to a binary file (a PNG). Huge values (a loss
of 1e308) are drawn with their axis cut back to ±1e300, never a NumPy overflow.

matplotlib is imported lazily, on the first call, so ``import minitransformer`` does not need
it. Inputs are host NumPy arrays or plain lists; convert device arrays first.

One file per kind of figure: attention.py (attention maps), positional.py (the positional
encoding), schedule.py (learning-rate schedules), curves.py (a run's training curves),
charts.py (bars and lines for benchmarks and experiments); figure.py holds what they share
(the pyplot-free Figure, saving, axis decoration, input checks).
"""

from .attention import plot_attention
from .charts import plot_bars, plot_lines
from .curves import TRAINING_METRICS, plot_training_curves
from .figure import DPI, PathLike, SaveTo
from .positional import plot_positional_encoding
from .schedule import plot_lr_schedule

__all__ = [
    "DPI", "TRAINING_METRICS", "PathLike", "plot_attention", "plot_bars", "plot_lines",
    "plot_lr_schedule", "plot_positional_encoding", "plot_training_curves", "SaveTo",
]  # fmt: skip
