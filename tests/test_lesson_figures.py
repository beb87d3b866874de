"""The mechanism diagrams of lessons 05, 06 and 08 (lessons/figures/): each draws headless on
its own Agg canvas (no pyplot figure left behind), saves a non-blank PNG, and shows what it
should: the masked score grids and their softmax weights, the h heads of the split with their
shapes, the encoder-decoder's sublayers, residual paths and memory arrow."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from lesson_notebooks import LESSONS

pytest.importorskip("matplotlib")
import matplotlib.image  # noqa: E402
from matplotlib.text import Text  # noqa: E402

sys.path.insert(0, str(LESSONS))  # the notebooks' `from figures.multihead import ...`
from figures.encoder_decoder import encoder_decoder_figure  # noqa: E402
from figures.multihead import multihead_figure  # noqa: E402
from figures.weighted_average import causal_average_figure  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _saved(fig, tmp_path: Path, name: str) -> np.ndarray:
    """Save as PNG (as the lessons do) and return the image; it must not be blank."""
    path = tmp_path / f"{name}.png"
    fig.savefig(path, dpi=50, bbox_inches="tight")
    assert path.read_bytes().startswith(PNG_MAGIC)
    image = matplotlib.image.imread(path)[..., :3]
    drawn = (image < 0.95).any(axis=-1).mean()  # share of pixels that are not (near) white
    assert drawn > 0.03, f"{name}: the PNG is (almost) blank: {drawn:.1%} of pixels drawn"
    return image


def _gid(fig, gid: str) -> list:
    return fig.findobj(lambda artist: artist.get_gid() == gid)


def _texts(fig) -> str:
    return "\n".join(t.get_text() for t in fig.findobj(Text))


def test_each_diagram_saves_a_png_headless(tmp_path):
    import matplotlib.pyplot as plt

    open_before = plt.get_fignums()
    for name, fig in [
        ("causal_average", causal_average_figure()),
        ("multihead", multihead_figure()),
        ("encoder_decoder", encoder_decoder_figure()),
    ]:
        assert type(fig.canvas).__name__ == "FigureCanvasAgg", name
        _saved(fig, tmp_path, name)
    assert plt.get_fignums() == open_before, "a diagram must not open a figure in pyplot"


def test_a_blank_png_is_caught(tmp_path):
    from matplotlib.figure import Figure

    with pytest.raises(AssertionError, match="blank"):
        _saved(Figure(figsize=(4, 3)), tmp_path, "blank")


@pytest.mark.parametrize("T", [2, 6])
def test_causal_average_draws_both_pipelines(T):
    fig = causal_average_figure(T)
    # two rows (fixed, learned) of a T x T score grid, a T x T weight grid and T outputs
    assert len(_gid(fig, "score")) == len(_gid(fig, "weight")) == 2 * T * T
    assert len(_gid(fig, "output")) == 2 * T
    texts = _texts(fig)
    future = T * (T - 1) // 2  # entries above the diagonal in one grid
    assert texts.count(r"$-\infty$") == 2 * future + 1  # both score grids, and the footnote
    assert f"1/{T}" in texts and "softmax of\neach row" in texts
    assert rf"$w_{{{T - 1}0}}$" in texts and rf"$s_{{{T - 1}{T - 1}}}$" in texts
    assert f"(T = {T})" in fig._suptitle.get_text()


def test_causal_average_refuses_unreadable_sizes():
    with pytest.raises(ValueError, match="between 2 and 6"):
        causal_average_figure(9)


@pytest.mark.parametrize("h, d_model", [(4, 16), (8, 64), (1, 8)])
def test_multihead_draws_h_heads_with_shapes(h, d_model):
    fig = multihead_figure(h=h, d_model=d_model)
    d_k = d_model // h
    for gid in ("q_columns", "group", "head", "attention", "head_output", "merged"):
        assert len(_gid(fig, gid)) == h, gid
    assert len(_gid(fig, "output")) == 1  # W_o's output: one matrix, no head's colour
    texts = _texts(fig)
    for shape in (
        f"(B, T, d_model) = (B, T, {d_model})",
        f"(B, T, h, d_k) = (B, T, {h}, {d_k})",
        f"(B, h, T, d_k) = (B, {h}, T, {d_k})",
    ):
        assert shape in texts, shape
    assert ".reshape(B, T, h, d_k)" in texts and ".transpose(0, 2, 1, 3)" in texts
    assert "Concat" in texts and "@ W_o" in texts
    assert [f"head {i}" in texts for i in range(h)] == [True] * h
    # a head keeps its colour from the projection's columns to its merged output
    for step in ("group", "head", "head_output", "merged"):
        colours = [patch.get_facecolor() for patch in _gid(fig, step)]
        assert colours == [patch.get_facecolor() for patch in _gid(fig, "q_columns")], step
    assert len(set(c for c in (p.get_facecolor() for p in _gid(fig, "head")))) == h


def test_multihead_refuses_a_split_that_does_not_divide():
    with pytest.raises(ValueError, match="h must divide d_model"):
        multihead_figure(h=3, d_model=16)


@pytest.mark.parametrize("n_layers, label", [("N", "N ×"), (6, "6 ×")])
def test_encoder_decoder_draws_the_data_flow(n_layers, label):
    fig = encoder_decoder_figure(n_layers=n_layers)
    # encoder: self-attention, FFN; decoder: masked self-attention, cross-attention, FFN
    assert len(_gid(fig, "sublayer")) == len(_gid(fig, "add_norm")) == 5
    assert len(_gid(fig, "residual")) == 5  # one residual path into each add & LayerNorm
    assert len(_gid(fig, "memory")) == 1  # the one arrow from the encoder to the decoder
    texts = _texts(fig)
    for needed in (
        "src ids  (B, S)",
        "memory  (B, S, D)",
        "mask: padding (B, 1, 1, S)",
        "mask: causal ∧ padding (B, 1, T, T)",
        "K, V from memory  (B, S, D)",
        "weights (B, H, T, S)",
        "logits = y Eᵀ  (B, T, V)",
        "tgt_out = target + <eos>",
        "shifted right",
    ):
        assert needed in texts, needed
    assert texts.count(label) == 2  # both stacks
    assert "e.g. the black cat sleeps" in texts
