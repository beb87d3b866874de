"""The sinusoidal positional encoding as an image, beside a few of its dimensions' curves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .figure import SaveTo, finish, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_positional_encoding(
    pe: Any,
    *,
    dims: Sequence[int] | None = None,
    title: str = "Sinusoidal positional encoding",
    path: SaveTo | None = None,
) -> Figure:
    """The encoding matrix as an image (position x dimension) beside a few dimensions' curves.

    Args:
        pe: shape (L, D), or (1, L, D) as stored in a module buffer.
        dims: dimensions to draw as curves (default: 0, 1, D//4 and D//2, showing that low
            dimensions oscillate fast and high ones slowly).
        title: figure title.
        path: where to save the figure (optional): a file name, or a binary file (PNG).

    Raises:
        ValueError: pe is not (L, D) / (1, L, D), or a requested dimension is out of range.
    """
    table = np.asarray(pe, dtype=np.float64)
    if table.ndim == 3 and table.shape[0] == 1:
        table = table[0]
    if table.ndim != 2 or 0 in table.shape:
        raise ValueError(
            "plot_positional_encoding: pe must have shape (L, D) (or (1, L, D)), got shape "
            f"{np.shape(pe)}. Fix: pass the encoding table, e.g. positions x d_model."
        )
    length, d_model = table.shape
    if dims is None:
        dims = sorted({d for d in (0, 1, d_model // 4, d_model // 2) if d < d_model})
    bad = [d for d in dims if not 0 <= d < d_model]
    if bad:
        raise ValueError(
            f"plot_positional_encoding: dims {bad} are outside 0..{d_model - 1} for pe of shape "
            f"{table.shape}."
        )

    fig = new_figure((11.0, 4.0))
    left, right = fig.subplots(1, 2, width_ratios=[1.1, 1.0])
    limit = float(np.nanmax(np.abs(table))) or 1.0
    image = left.imshow(table, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
    left.set_xlabel("dimension i")
    left.set_ylabel("position pos")
    left.set_title(f"PE matrix ({length} positions x {d_model} dims)")
    fig.colorbar(image, ax=left, label="value")

    positions = np.arange(length)
    for d in dims:
        kind = "sin" if d % 2 == 0 else "cos"
        right.plot(positions, table[:, d], label=f"dim {d} ({kind})")
    right.set_xlabel("position pos")
    right.set_ylabel("PE(pos, i)")
    right.set_title("a few dimensions along the positions")
    right.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=len(dims))
    right.grid(alpha=0.3)
    fig.suptitle(title)
    return finish(fig, path)
