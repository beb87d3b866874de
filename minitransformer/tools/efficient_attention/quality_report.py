"""Reporting the quality study (quality.py): its record, the Markdown table, the figure, and
the files it writes into --out (refusing, before any training, a folder that cannot be
written or that holds anything unless --overwrite: ``outputs.check_study_dir``).

The files go through runs/files.py (``outputs.write_study_files``): each is written whole to a
temp file and renamed over its name; nothing is written through a symbolic link.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...runtime.runs.outputs import write_study_files
from ..viz.figure import SaveTo, decorate, finish, new_figure

OUTPUTS = ("quality.json", "quality.md", "plots/quality.png")
REPLACED = "the study's files"  # what --overwrite replaces, in check_study_dir's refusal
TIMING_NOTE = (
    "Wall times are of one process on a shared 2-core CPU: other work on the machine moves "
    "them by a factor of 2 or more; compare kinds within one study, not across studies."
)


def make_record(rows: list[dict[str, Any]], summary: dict[str, Any], settings: dict[str, Any],
                task: dict[str, Any], chance: float, machine: dict[str, Any],
                wall_s: float, load_average: list[float]) -> dict[str, Any]:  # fmt: skip
    """The JSON record of a study: its settings, the task's sizes, the chance level, the
    machine, the rows (one per run) and the per-kind summary."""
    return dict(settings=settings, task=task, chance=chance, machine=machine, wall_s=wall_s,
                load_average=load_average, timing_note=TIMING_NOTE, rows=rows,
                summary=summary)  # fmt: skip


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind: the mean accuracy, loss and seconds over its seeds, and each seed's."""
    out: dict[str, dict[str, Any]] = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        mine = [r for r in rows if r["kind"] == kind]
        out[kind] = dict(
            window=mine[0]["window"],
            seeds=[r["seed"] for r in mine],
            accuracy=float(np.mean([r["accuracy"] for r in mine])),
            accuracies=[r["accuracy"] for r in mine],
            loss=float(np.mean([r["loss"] for r in mine])),
            losses=[r["loss"] for r in mine],
            seconds=float(np.mean([r["seconds"] for r in mine])),
            all_seconds=[r["seconds"] for r in mine],
        )
    return out


def _values(values: list[float], fmt: str) -> str:
    return ", ".join(format(v, fmt) for v in values)


def markdown(record: dict[str, Any]) -> str:
    """The table: one row per kind, accuracy and loss at the answers (the mean over the
    seeds, then each seed's), the training time per run; then the chance level and what
    the numbers are."""
    s, t = record["settings"], record["task"]
    lines = [
        "| attention | window | accuracy (mean) | accuracy per seed | loss (mean) "
        "| loss per seed | seconds per run |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, k in record["summary"].items():
        window = "-" if k["window"] is None else str(k["window"])
        lines.append(
            f"| {kind} | {window} | {k['accuracy']:.3f} | {_values(k['accuracies'], '.3f')} | "
            f"{k['loss']:.3f} | {_values(k['losses'], '.3f')} | "
            f"{k['seconds']:.0f} ({_values(k['all_seconds'], '.0f')}) |"
        )
    chance = record["chance"]
    lines += [
        "",
        f"Chance: accuracy {chance:.3f}, loss {np.log(1 / chance):.3f} nats (the key alone: a "
        f"guess among its {t['values']} values). Accuracy and loss at the answers of "
        f"{s['test_sequences']} held-out sequences of T = {t['length']} tokens ({t['facts']} "
        f"facts, {t['questions']} questions; every fact at least {t['gap']} positions before "
        f"its answer); seeds {', '.join(map(str, s['seeds']))}; every run "
        f"{s['steps']} steps of {s['batch_size']} sequences (the same batches for every kind "
        f"of a seed); model d_model {s['model']['d_model']}, {s['model']['N']} layers, "
        f"{s['model']['h']} heads. Window: local attention's window, strided attention's "
        f"stride. Study: {record['wall_s']:.0f} s in all.",
        "",
        TIMING_NOTE,
    ]
    return "\n".join(lines) + "\n"


def plot(record: dict[str, Any], path: SaveTo | None = None) -> Any:
    """Two panels: each kind's held-out accuracy (one point per seed, a bar at the mean,
    the chance level dashed), and the training loss at the answers along the steps (a
    running mean of 10 steps, one line per run). Saved at ``path`` when given; returns the
    Figure."""
    fig = new_figure((12, 4.5))
    ax_acc, ax_loss = fig.subplots(1, 2)
    summary = record["summary"]
    for i, k in enumerate(summary.values()):
        ax_acc.bar(i, k["accuracy"], color=f"C{i}", alpha=0.35, width=0.6)
        ax_acc.plot([i] * len(k["accuracies"]), k["accuracies"], "o", color=f"C{i}")
    ax_acc.axhline(record["chance"], color="0.4", ls="--", lw=1, label="chance")
    ax_acc.set_xticks(range(len(summary)), list(summary))
    ax_acc.set_ylim(0, 1.02)
    decorate(ax_acc, None, "accuracy at the answers (held out)",
             "answers right, per kind (points: seeds)", logy=False, legend=True)  # fmt: skip
    kinds = list(summary)
    for row in record["rows"]:
        losses = np.asarray(row["train_losses"], dtype=float)
        width = min(10, len(losses))
        if width == 0:
            continue
        smooth = np.convolve(losses, np.ones(width) / width, mode="valid")
        steps = np.arange(width, len(losses) + 1)
        label = row["kind"] if row["seed"] == record["settings"]["seeds"][0] else None
        ax_loss.plot(steps, smooth, color=f"C{kinds.index(row['kind'])}", lw=1.2,
                     ls="-" if label else ":", label=label)  # fmt: skip
    ax_loss.axhline(np.log(1 / record["chance"]), color="0.4", ls="--", lw=1, label="chance")
    decorate(ax_loss, "step", "training loss at the answers (nats)",
             "training loss (running mean of 10 steps)", logy=False, legend=True)  # fmt: skip
    t = record["task"]
    fig.suptitle(f"Recall at T = {t['length']}: facts at least {t['gap']} positions back")
    return finish(fig, path)


def write(record: dict[str, Any], out: str | Path, overwrite: bool = False) -> list[Path]:
    """quality.json (the record), quality.md (``markdown``) and plots/quality.png (``plot``)
    into ``out`` (made when missing); refuses what ``outputs.check_study_dir`` refuses. Returns
    the paths."""
    return write_study_files(
        out, record, OUTPUTS, markdown, plot, overwrite=overwrite, replaced=REPLACED
    )


__all__ = ["OUTPUTS", "REPLACED", "TIMING_NOTE", "make_record", "markdown", "plot", "summarize",
           "write"]  # fmt: skip
