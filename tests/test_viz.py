"""Tests for minitransformer.tools.viz: every function returns a Figure and writes a PNG
headless."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")
from matplotlib.figure import Figure  # noqa: E402

from minitransformer.tools import viz  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000


def _images(fig: Figure) -> list:
    return [image for ax in fig.axes for image in ax.get_images()]


def _attention(rng, shape):
    w = rng.random(shape)
    return w / w.sum(-1, keepdims=True)


# --- attention --------------------------------------------------------------------------------


def test_plot_attention_single_map_with_tokens(tmp_path):
    rng = np.random.default_rng(0)
    src, tgt = ["el", "gato", "</s>"], ["<s>", "the", "cat", "</s>"]
    path = tmp_path / "nested" / "attn.png"
    fig = viz.plot_attention(_attention(rng, (4, 3)), src, tgt, title="cross", path=path)
    assert isinstance(fig, Figure)
    _assert_png(path)
    assert len(_images(fig)) == 1
    ax = _images(fig)[0].axes
    assert [t.get_text() for t in ax.get_xticklabels()] == src
    assert [t.get_text() for t in ax.get_yticklabels()] == tgt
    assert "keys" in ax.get_xlabel() and "queries" in ax.get_ylabel()
    assert fig._suptitle.get_text() == "cross"


def test_plot_attention_marks_rows_and_names_them():
    fig = viz.plot_attention(np.full((4, 3), 1 / 3), ["a", "b", "c"], ["x", "y", "y", "z"],
                             ylabel="model output", marked_rows=[2])  # fmt: skip
    ax = fig.axes[0]
    assert ax.get_ylabel() == "model output"
    assert [(t.get_text(), t.get_color()) for t in ax.get_yticklabels()] == [
        ("x", "black"), ("y", "black"), ("y", "red"), ("z", "black")
    ]  # fmt: skip


def test_plot_attention_heads_grid(tmp_path):
    rng = np.random.default_rng(1)
    fig = viz.plot_attention(_attention(rng, (3, 5, 5)), cols=2, path=tmp_path / "heads.png")
    _assert_png(tmp_path / "heads.png")
    images = _images(fig)
    assert len(images) == 3  # a 2 x 2 grid with the fourth panel switched off
    assert [im.axes.get_title() for im in images] == ["head 0", "head 1", "head 2"]
    assert {im.get_clim() for im in images} == {images[0].get_clim()}  # one shared colour scale


def test_plot_attention_long_sequences_thin_the_tick_labels():
    rng = np.random.default_rng(2)
    tokens = [f"t{i}" for i in range(100)]
    fig = viz.plot_attention(_attention(rng, (100, 100)), tokens, tokens)
    assert len(_images(fig)[0].axes.get_xticks()) <= 40


@pytest.mark.parametrize("shape", [(5,), (1, 2, 3, 4), (0, 3)])
def test_plot_attention_bad_shape_names_the_shape(shape):
    with pytest.raises(ValueError, match=str(shape).replace("(", r"\(").replace(")", r"\)")):
        viz.plot_attention(np.zeros(shape))


def test_plot_attention_token_count_mismatch():
    with pytest.raises(ValueError, match=r"src_tokens has 2 entries but S of weights \(1, 4, 3\)"):
        viz.plot_attention(np.ones((4, 3)) / 3, ["a", "b"], None)


# --- positional encoding and schedule ---------------------------------------------------------


def _sinusoids(length: int, d_model: int) -> np.ndarray:
    pos = np.arange(length)[:, None]
    rates = 1.0 / 10000 ** (np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((length, d_model))
    pe[:, 0::2], pe[:, 1::2] = np.sin(pos * rates), np.cos(pos * rates)
    return pe


def test_plot_positional_encoding(tmp_path):
    fig = viz.plot_positional_encoding(_sinusoids(50, 16), path=tmp_path / "pe.png")
    assert isinstance(fig, Figure)
    _assert_png(tmp_path / "pe.png")
    image_ax, curve_ax = fig.axes[0], fig.axes[1]  # fig.axes[2] is the colorbar
    assert image_ax.get_images()[0].get_array().shape == (50, 16)
    assert len(curve_ax.get_lines()) == 4
    # A module buffer of shape (1, L, D) and explicit dims work too.
    fig = viz.plot_positional_encoding(_sinusoids(10, 8)[None], dims=[0, 7])
    assert len(fig.axes[1].get_lines()) == 2


def test_plot_positional_encoding_bad_input():
    with pytest.raises(ValueError, match=r"got shape \(2, 3, 4\)"):
        viz.plot_positional_encoding(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match=r"dims \[9\]"):
        viz.plot_positional_encoding(np.zeros((4, 8)), dims=[0, 9])


def test_plot_lr_schedule_one_and_several_curves(tmp_path):
    steps = np.arange(1, 2001)
    noam = 64**-0.5 * np.minimum(steps**-0.5, steps * 400**-1.5)
    fig = viz.plot_lr_schedule(steps, noam, path=tmp_path / "lr.png")
    _assert_png(tmp_path / "lr.png")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "learning rate"
    assert "at step 400" in ax.texts[0].get_text()  # the warm-up peak is marked

    curves = {"warmup 200": noam * 0.5, "warmup 400": noam, "constant": [1e-3] * 2000}
    fig = viz.plot_lr_schedule(list(steps), curves, logy=True)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == list(curves)
    assert fig.axes[0].get_yscale() == "log"


def test_plot_lr_schedule_length_mismatch():
    with pytest.raises(ValueError, match=r"lrs\['a'\] has shape \(3,\).*shape \(4,\)"):
        viz.plot_lr_schedule([1, 2, 3, 4], {"a": [1e-3, 2e-3, 3e-3]})


# --- training curves --------------------------------------------------------------------------


def _records() -> list[dict]:
    records = []
    for step in range(0, 1001, 100):
        records.append(
            {"step": step, "split": "train", "loss": 5.0 / (1 + step / 100), "lr": 1e-3,
             "tokens_per_s": 1234}
        )  # fmt: skip
        if step % 500 == 0:
            records.append(
                {"step": step, "split": "valid", "loss": 4.0 / (1 + step / 200),
                 "token_acc": step / 1000, "exact_match": step / 2000, "bleu": step / 50}
            )  # fmt: skip
    return records


def _panel_titles(fig: Figure) -> list[str]:
    return [ax.get_title() for ax in fig.axes if ax.axison]


def test_plot_training_curves_from_records(tmp_path):
    fig = viz.plot_training_curves(_records(), path=tmp_path / "curves.png")
    _assert_png(tmp_path / "curves.png")
    assert _panel_titles(fig) == ["loss", "token accuracy", "exact match", "BLEU", "learning rate"]
    loss_ax = fig.axes[0]
    labels = [line.get_label() for line in loss_ax.get_lines()]
    assert labels == ["train (last batch)", "train (mean of last 5 logged losses)", "valid"]
    assert list(loss_ax.get_lines()[2].get_xdata()) == [0, 500, 1000]


def test_the_loss_panel_says_it_is_label_smoothed_and_draws_the_floor(tmp_path):
    """The Trainer's evaluation records carry ε and the floor under label smoothing: the
    panel names them and draws the floor dashed; accuracies read as percentages, as the
    console prints them; a log's figure is titled with its run."""
    records = _records()
    for record in records:
        if record["split"] == "valid":
            record.update(label_smoothing=0.1, loss_floor=0.6163)
    log = tmp_path / "copy-run" / "metrics.jsonl"
    log.parent.mkdir()
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    fig = viz.plot_training_curves(log)
    assert fig._suptitle.get_text() == f"Training curves: {log.parent}"
    loss = fig.axes[0]
    assert loss.get_title() == "loss (label-smoothed, ε 0.1)"
    floor = [line for line in loss.get_lines() if line.get_linestyle() == "--"]
    assert [(line.get_label(), list(line.get_ydata())) for line in floor] == [
        ("floor 0.6163 (the least ε 0.1 allows)", [0.6163, 0.6163])
    ]
    fig.canvas.draw()
    for ax in fig.axes[1:3]:  # token accuracy, exact match
        ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert ticks and all(t.endswith("%") for t in ticks), (ax.get_title(), ticks)
    plain = viz.plot_training_curves(_records(), title="copy: training curves")
    assert plain.axes[0].get_title() == "loss" and plain._suptitle.get_text() == (
        "copy: training curves"
    )
    assert not [line for line in plain.axes[0].get_lines() if line.get_linestyle() == "--"]


def test_plot_training_curves_tolerates_missing_keys():
    records = [
        {"step": 1, "loss": 3.0},  # no split: counts as train
        {"step": 2, "split": "train", "loss": None},  # not a number: skipped
        {"event": "checkpoint saved"},  # no step: skipped
        {"step": 2, "split": "valid", "bleu": 7.5},
        {"step": 3, "split": "train", "loss": 2.0, "lr": True},  # bool is not a metric value
    ]
    fig = viz.plot_training_curves(records)
    assert _panel_titles(fig) == ["loss", "BLEU"]
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == [3.0, 2.0]


def test_plot_training_curves_nothing_to_plot():
    with pytest.raises(ValueError, match="nothing to plot in 2 records"):
        viz.plot_training_curves([{"step": 1, "tokens_per_s": 10.0}, {"loss": 1.0}])


def test_plot_training_curves_from_jsonl_log(tmp_path):
    log = tmp_path / "metrics.jsonl"
    lines = [json.dumps(r) for r in _records()]
    log.write_text("\n".join(lines) + "\n\n")
    fig = viz.plot_training_curves(log)
    assert _panel_titles(fig) == _panel_titles(viz.plot_training_curves(_records()))

    # A run killed mid-write leaves a cut-off last line: skipped with a warning.
    log.write_text("\n".join(lines) + '\n{"step": 1100, "spl')
    with pytest.warns(UserWarning, match="skipped the last line"):
        viz.plot_training_curves(str(log))

    # A broken line in the middle is an error that names the file and line.
    log.write_text(lines[0] + "\nnot json\n" + lines[1] + "\n")
    with pytest.raises(ValueError, match="metrics.jsonl line 2 is not valid JSON"):
        viz.plot_training_curves(log)


# --- generic charts ---------------------------------------------------------------------------


def test_plot_bars(tmp_path):
    fig = viz.plot_bars(
        ["numpy", "torch"], [12.5, 3.25], "ms per step", "Step time", errors=[0.5, 0.1],
        path=tmp_path / "bars.png",
    )  # fmt: skip
    _assert_png(tmp_path / "bars.png")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "ms per step" and ax.get_title() == "Step time"
    assert [t.get_text() for t in ax.texts] == ["12.5", "3.25"]
    with pytest.raises(ValueError, match="2 labels and values of shape \\(3,\\)"):
        viz.plot_bars(["a", "b"], [1, 2, 3], "y", "t")
    with pytest.raises(ValueError, match="errors has 1 entries"):
        viz.plot_bars(["a", "b"], [1, 2], "y", "t", errors=[0.1])


def test_plot_lines(tmp_path):
    x = [1, 2, 4, 8]
    ys = {"d_k=4": [1.0, 2.0, 3.0, 4.0], "d_k=64": [2.0, 4.0, 8.0, 16.0]}
    fig = viz.plot_lines(x, ys, "length", "std", "Scores", logy=True, logx=True,
                         path=tmp_path / "lines.png")  # fmt: skip
    _assert_png(tmp_path / "lines.png")
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert [line.get_label() for line in ax.get_lines()] == list(ys)
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("length", "std", "Scores")
    fig = viz.plot_lines(None, {"a": [3, 2, 1]}, "i", "v", "t")  # x defaults to 0, 1, 2
    assert list(fig.axes[0].get_lines()[0].get_xdata()) == [0, 1, 2]
    with pytest.raises(ValueError, match=r"ys\['b'\] has shape \(2,\)"):
        viz.plot_lines([1, 2, 3], {"a": [1, 2, 3], "b": [1, 2]}, "x", "y", "t")
    with pytest.raises(ValueError, match="non-empty dict"):
        viz.plot_lines([1], {}, "x", "y", "t")


def test_viz_is_headless_and_leaves_pyplot_alone(tmp_path):
    """Importing viz and drawing must not import pyplot (no global figure state, no GUI)."""
    code = (
        "import sys; from minitransformer.tools import viz; import numpy as np; "
        "viz.plot_attention(np.eye(3), path=sys.argv[1]); "
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'"
    )
    out = tmp_path / "headless.png"
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "DISPLAY")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    result = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    _assert_png(out)
