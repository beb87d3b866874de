"""The progress a run shows tells the truth and never falls silent (train/progress.py,
tools/viz/curves.py; issue 48, items 2 and 3).

- The bar and the plain lines show the training loss's running mean over a stated window
  (one batch's loss zig-zags: batches are bucketed by length); ``metrics.jsonl`` keeps the
  last batch's ``loss`` and adds ``loss_mean`` and ``loss_window``; the curves draw the raw
  loss faintly under the mean, from the log (an older log's mean is computed).
- A terminal of any reported size, 0×0 included (``script -c``, some CI pseudo-terminals),
  gets the bar or the plain lines: tested on real pseudo-terminals (``os.openpty``).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from test_cli import run_main
from test_runs import tiny  # copy, 6 steps of a tiny model, no plots
from tiny_runs import TINY

from minitransformer.train import Trainer, progress

ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------ the running mean


@pytest.mark.parametrize(("log_every", "least"), [(1, 3), (2, 3), (4, 3), (2, 50)])
def test_the_plain_lines_show_the_mean_of_the_stated_window(
    tmp_path, capsys, monkeypatch, log_every, least
):
    """Each line's loss is the mean of the last max(log_every, LOSS_WINDOW) steps' losses
    (fewer at the start), and says over how many steps."""
    monkeypatch.setattr(progress, "LOSS_WINDOW", least)
    trainer = Trainer(tiny(tmp_path / "run", steps=8, log_every=log_every))
    trainer.train()
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("step ")]
    window = max(log_every, least)
    logged = sorted({*range(log_every, 9, log_every), 8})
    assert len(lines) == len(logged)
    for line, step in zip(lines, logged, strict=True):
        recent = trainer.losses[max(0, step - window) : step]
        words = "last step" if len(recent) == 1 else f"mean of last {len(recent)} steps"
        mean = sum(recent) / len(recent)
        assert line.startswith(f"step {step}/8  loss ({words}) {mean:.4f}  lr "), line


def test_the_log_keeps_the_last_batch_and_adds_the_mean(tmp_path):
    trainer = Trainer(tiny(tmp_path / "run", steps=6, log_every=2))
    trainer.train()
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    train = [r for r in map(json.loads, lines) if r["split"] == "train"]
    assert [r["step"] for r in train] == [2, 4, 6]
    for record in train:
        step = record["step"]
        assert record["loss"] == trainer.losses[step - 1]  # one batch's, as before
        assert record["loss_window"] == step  # fewer steps than the window (50) so far
        assert record["loss_mean"] == pytest.approx(sum(trainer.losses[:step]) / step)


def test_the_bar_shows_the_mean_and_a_note_says_what_it_is(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tqdm")
    monkeypatch.setattr(progress, "_isatty", lambda stream: True)  # no size: 80 columns
    trainer = Trainer(tiny(tmp_path / "run", steps=6, log_every=3, progress=True))
    trainer.train()
    err = capsys.readouterr().err
    mean = sum(trainer.losses) / 6
    assert f"loss_6={mean:.3f}" in err and "loss=" not in err
    assert "note: the bar's loss_N is the mean training loss of the last N steps (N up to 50" in err
    assert "step 6/6" not in err  # the bar, not the plain lines


# ------------------------------------------------------------------ the curves


def _loss_lines(records):
    pytest.importorskip("matplotlib")
    from minitransformer.tools import viz

    figure = viz.plot_training_curves(records)
    return {line.get_label(): line for line in figure.axes[0].get_lines()}


def _records(losses, every, with_mean):
    records = []
    for k in range(every, len(losses) + 1, every):
        record = dict(step=k, split="train", loss=losses[k - 1], lr=1e-3)
        if with_mean:
            recent = losses[max(0, k - 50) : k]
            record.update(loss_mean=sum(recent) / len(recent), loss_window=len(recent))
        records.append(record)
    return records


@pytest.mark.parametrize("every", [10, 25, 50])
def test_the_curves_draw_the_raw_loss_faintly_under_the_logged_mean(every):
    losses = [3.0 - 0.01 * i + (0.8 if i % 2 else -0.8) for i in range(200)]  # a zig-zag
    records = _records(losses, every, with_mean=True)
    lines = _loss_lines([*records, dict(step=200, split="valid", loss=1.5)])
    raw, mean = lines["train (last batch)"], lines["train (mean of last 50 steps)"]
    assert list(raw.get_ydata()) == [r["loss"] for r in records]
    assert list(mean.get_ydata()) == [r["loss_mean"] for r in records]
    assert raw.get_alpha() == pytest.approx(0.3) and raw.get_linewidth() < mean.get_linewidth()
    assert mean.get_alpha() is None and "valid" in lines


@pytest.mark.parametrize("every", [1, 50, 100])
def test_an_older_log_without_the_mean_gets_it_computed(every):
    losses = [2.0 + (0.5 if i % 3 else -0.5) for i in range(400)]
    records = _records(losses, every, with_mean=False)
    lines = _loss_lines(records)
    from minitransformer.tools.viz.curves import LOGGED_WINDOW as n

    mean = lines[f"train (mean of last {n} logged losses)"]
    raw = [r["loss"] for r in records]
    expected = [sum(raw[max(0, i + 1 - n) : i + 1]) / len(raw[max(0, i + 1 - n) : i + 1])
                for i in range(len(raw))]  # fmt: skip
    assert list(mean.get_ydata()) == pytest.approx(expected)


def test_plot_redraws_the_mean_from_an_older_runs_log(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    Trainer(tiny(tmp_path / "run", steps=6, log_every=1)).train()
    log = tmp_path / "run" / "metrics.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    for record in records:  # as a run before issue 48 wrote it
        record.pop("loss_mean", None), record.pop("loss_window", None)
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, out, err = run_main(["plot", "--run", str(tmp_path / "run")], capsys)
    assert code == 0, err
    assert (tmp_path / "run" / "plots" / "curves.png").stat().st_size > 0


# ------------------------------------------------------------------ never silent


def _pty(rows: int, columns: int) -> tuple[int, int]:
    """A pseudo-terminal (master, slave) that reports ``rows`` × ``columns``."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    return master, slave


def _read_until_closed(master: int, proc: subprocess.Popen, seconds: float = 120) -> str:
    """All the pty's output until the process ends (and its output is drained)."""
    chunks, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the slave side closed: all read
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif proc.poll() is not None:
            break
    else:
        proc.kill()
        pytest.fail(f"no end within {seconds} s; output so far: {b''.join(chunks)!r}")
    proc.wait(timeout=10)
    return b"".join(chunks).decode("utf-8", "replace")


def _train_on_pty(tmp_path: Path, rows: int, columns: int) -> str:
    flags = [f for f in TINY if f != "--no-progress"]
    argv = ["train", "copy", *flags, "--steps", "6", "--log-every", "2", "--out", "run"]
    master, slave = _pty(rows, columns)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("COLUMNS", None), env.pop("LINES", None)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "minitransformer", *argv], cwd=tmp_path, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave,
        )  # fmt: skip
        os.close(slave)
        text = _read_until_closed(master, proc)
    finally:
        os.close(master)
    assert proc.returncode == 0, text
    return text


@pytest.mark.parametrize(("rows", "columns"), [(0, 0), (0, 120), (30, 0), (1, 100), (24, 80)])
def test_a_terminal_of_any_size_gets_the_bar(tmp_path, rows, columns):
    """0×0 is what ``script -c`` and some CI pseudo-terminals report; tqdm read it as -1
    columns and -1 rows and hid its bar, and the plain lines wait for no bar: silence."""
    pytest.importorskip("tqdm")
    text = _train_on_pty(tmp_path, rows, columns)
    assert "copy: 100%" in text and "6/6 [" in text, text
    assert "loss_6=" in text, text
    assert "test at step 6, final:" in text


@pytest.mark.parametrize("columns", [1, 20, 59])
def test_a_narrow_terminal_gets_the_plain_lines_and_a_note(tmp_path, columns):
    text = _train_on_pty(tmp_path, 24, columns)
    flat = " ".join(text.replace("\r", "").split())
    assert f"the terminal is {columns} columns wide; the bar needs 60" in flat, flat
    assert "step 6/6 loss (mean of last 6 steps) " in flat, flat


# ------------------------------------------------------------------ a study's progress


def _study_on_pty(monkeypatch, rows, columns, resize_to=None):
    """StudyProgress (ablate, scale) with stderr on a pty of rows × columns; what it wrote."""
    pytest.importorskip("tqdm")
    master, slave = _pty(rows, columns)
    stream = os.fdopen(slave, "w", buffering=1, encoding="utf-8")
    monkeypatch.setattr(sys, "stderr", stream)
    try:
        shown = progress.StudyProgress(10)
        if shown.update is not None:
            shown.update(4)
        if resize_to is not None:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *resize_to, 0, 0))
        if shown.update is not None:
            shown.update(6)
        shown.finished("run 1 of 1 finished")
        shown.close()
        stream.flush()
        chunks = []
        while select.select([master], [], [], 0.2)[0]:
            chunks.append(os.read(master, 65536))
    finally:
        monkeypatch.undo()
        stream.close()
        os.close(master)
    return b"".join(chunks).decode("utf-8", "replace"), shown


@pytest.mark.parametrize(("rows", "columns"), [(0, 0), (2, 0), (24, 80), (50, 200)])
def test_a_study_shows_its_bar_on_a_terminal_of_any_size(monkeypatch, rows, columns):
    text, shown = _study_on_pty(monkeypatch, rows, columns)
    assert shown.bar is not None
    assert "10/10" in text and "run 1 of 1 finished" in text, repr(text)


def test_a_bar_survives_its_terminal_shrinking_to_no_size(monkeypatch):
    text, _ = _study_on_pty(monkeypatch, 24, 80, resize_to=(0, 0))
    assert "10/10" in text, repr(text)


def test_a_study_on_a_narrow_terminal_prints_its_lines(monkeypatch):
    text, shown = _study_on_pty(monkeypatch, 24, 30)
    assert shown.bar is None and "run 1 of 1 finished" in text and "10/10" not in text


@pytest.mark.parametrize("rows", [0, 1, 2, 3, 40])
@pytest.mark.parametrize("columns", [0, 60, 61, 300])
def test_tqdm_is_never_given_a_size_that_hides_the_bar(rows, columns):
    """tqdm hides its only bar when told fewer than 2 rows, and cuts it to nothing at 0 or
    fewer columns (its own reading of a 0×0 terminal gives -1 and -1)."""
    master, slave = _pty(rows, columns)
    try:
        with os.fdopen(os.dup(slave), "w") as stream:
            shape = progress.bar_shape(stream)
    finally:
        os.close(slave), os.close(master)
    assert shape is not None
    ncols, nrows = shape
    assert ncols == (columns or 80) - 1 and nrows >= 2
