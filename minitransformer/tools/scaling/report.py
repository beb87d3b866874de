"""Reporting the scaling study: the Markdown table, the log–log figure with the fitted lines,
and the files a study writes into its folder (refusing, before any training, a folder that
cannot be written, or that holds anything unless asked to overwrite).

The files go through runs/files.py, as a training run's do: each is written whole to a temp
file and renamed over its name, and none is written through a symbolic link.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ...runtime.runs.outputs import check_study_dir, write_study_files
from ..viz.figure import SaveTo, decorate, finish, new_figure
from .fit import PowerLaw, fit_study, fits_to_json

OUTPUTS = ("scaling.json", "scaling.md", "plots/scaling.png")
REPLACED = "the study's files"  # what --overwrite replaces, in check_study_dir's refusal


def _mean_range(values: list[float], fmt: str) -> str:
    """'mean (min to max)' of the finite values, and how many runs diverged (NaN)."""
    v = [x for x in values if x == x]
    lost = f" ({len(values) - len(v)} diverged)" if len(v) < len(values) else ""
    if not v:
        return "diverged"
    if len(v) == 1:
        return format(v[0], fmt) + lost
    return f"{sum(v) / len(v):{fmt}} ({min(v):{fmt}} to {max(v):{fmt}}){lost}"


def _alpha_line(name: str, s: dict[str, Any]) -> str:
    if not s["values"]:
        return f"- {name}: no fit (fewer than 3 points)"
    seeds = ", ".join(f"{a:.4f}" for a in s["values"])
    return f"- {name}: α = {s['mean']:.4f} ± {s['half_range']:.4f} (per seed: {seeds})"


def markdown_table(study: dict[str, Any], fits: dict[str, Any] | None = None) -> str:
    """The study as Markdown: one row per size (losses as mean (min to max) over the seeds),
    then the fitted exponents and their spread, and the n-gram baselines."""
    fits = fits if fits is not None else fit_study(study)
    s = study["settings"]
    lines = [
        "| size | d_model | layers | heads | non-embedding params | params | tokens "
        "| compute 6·N·D (FLOP) | validation loss | training loss | gap |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    names = list(dict.fromkeys(r["size"] for r in study["results"]))
    for name in names:
        rs = [r for r in study["results"] if r["size"] == name]
        r0 = rs[0]
        gaps = [r["valid_loss"] - r["train_loss"] for r in rs]
        lines.append(
            f"| {name} | {r0['d_model']} | {r0['N']} | {r0['h']} | {r0['non_embedding']:,} | "
            f"{r0['parameters']:,} | {_mean_range([r['tokens'] for r in rs], ',.0f')} | "
            f"{_mean_range([r['compute'] for r in rs], '.3g')} | "
            f"{_mean_range([r['valid_loss'] for r in rs], '.4f')} | "
            f"{_mean_range([r['train_loss'] for r in rs], '.4f')} | "
            f"{_mean_range(gaps, '+.4f')} |"
        )
    b = study["baselines"]
    floor = f", floor {fits['floor']:g}" if fits["floor"] else ""
    lines += [
        "",
        f"Losses in nats per character on {s['eval_verses']} validation verses, mean (min to "
        f"max) over seeds {', '.join(map(str, s['seeds']))}; every size of a seed trained on "
        f"the same {s['tokens']:,}-token budget (the same batches). {study['task']}.",
        "",
        f"Power laws L = a·x^(−α), least squares in log–log space{floor}:",
        _alpha_line("against non-embedding parameters N", fits["alpha"]["params"]),
        _alpha_line("against all parameters", fits["alpha"]["total"]),
        _alpha_line(
            "against compute C (the frontier of the loss curves)", fits["alpha"]["compute"]
        ),  # fmt: skip
        "",
        f"Baselines on the same verses: unigram {b['unigram']:.4f}, bigram {b['bigram']:.4f} "
        "nats per character.",
    ]
    return "\n".join(lines) + "\n"


def _line(ax: Any, law: PowerLaw | None, xs: list[float], color: str, label: str) -> None:
    if law is None or not xs:
        return
    grid = np.geomspace(min(xs), max(xs), 50)
    ax.plot(grid, law(grid), color=color, lw=1.2, ls="--", label=label)


def plot(study: dict[str, Any], fits: dict[str, Any] | None = None,
         path: SaveTo | None = None) -> Any:  # fmt: skip
    """Two log–log panels: the final validation loss against non-embedding parameters (one
    marker per run, one fitted line per seed), and every run's loss against compute C with
    the frontier and its fit; saved at ``path`` when given. Returns the Figure (Jupyter
    shows it)."""
    fits = fits if fits is not None else fit_study(study)
    fig = new_figure((13, 4.8))
    ax_n, ax_c = fig.subplots(1, 2)
    bigram = study["baselines"]["bigram"]
    for i, f in enumerate(fits["seeds"]):
        seed, color = f["seed"], f"C{i}"
        runs_ = [r for r in study["results"] if r["seed"] == seed and not r["diverged"]]
        xs = [r["non_embedding"] for r in runs_]
        ax_n.plot(xs, [r["valid_loss"] for r in runs_], "o", color=color, label=f"seed {seed}")
        law = f["params"]
        _line(ax_n, law, xs, color, f"seed {seed}: α = {law.alpha:.3f}" if law else "")
        for j, r in enumerate(runs_):
            cs = [6.0 * r["non_embedding"] * c["tokens"] for c in r["curve"]]
            ax_c.plot(cs, [c["valid_loss"] for c in r["curve"]], "-", color=f"C{j + 2}",
                      alpha=0.7, lw=1, marker=".", label=r["size"] if i == 0 else None)  # fmt: skip
        edge = f["frontier"]
        ax_c.plot([c for c, _ in edge], [v for _, v in edge], "o", mfc="none", color=color,
                  ms=8, label=f"frontier, seed {seed}")  # fmt: skip
        law = f["compute"]
        _line(ax_c, law, [c for c, _ in edge], color,
              f"seed {seed}: α_C = {law.alpha:.3f}" if law else "")  # fmt: skip
    for ax in (ax_n, ax_c):
        ax.axhline(bigram, color="0.5", lw=0.8, ls=":", label="bigram baseline")
        ax.set_xscale("log")
        ax.set_yscale("log")
    s = study["settings"]
    decorate(ax_n, "non-embedding parameters N", "validation loss (nats/char)",
             f"loss against size, {s['tokens']:,} tokens each", logy=True, legend=True)  # fmt: skip
    decorate(ax_c, "training compute C = 6·N·tokens (FLOP)", "validation loss (nats/char)",
             "loss along training, and the compute frontier", logy=True, legend=False)  # fmt: skip
    ax_c.legend(fontsize=7, ncol=2)
    for ax in (ax_n, ax_c):  # a log axis over a narrow range: plain numbers on the ticks
        ax.yaxis.set_major_formatter(_plain())
        ax.yaxis.set_minor_formatter(_plain())
    fig.suptitle(f"Scaling at toy scale: {len(fits['seeds'])} seed(s); dashed: fitted power laws")
    return finish(fig, path)


def _plain() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:.2f}" if v > 0 and math.isfinite(v) else "")


def write_study(study: dict[str, Any], out: str | Path, overwrite: bool = False,
                fits: dict[str, Any] | None = None) -> list[Path]:  # fmt: skip
    """scaling.json (the study and its fits), scaling.md and plots/scaling.png into ``out``
    (made when missing); refuses (RunDirectoryError) what ``check_out`` refuses. Each file
    is written whole, then renamed over its name; nothing is written through a link."""
    fits = fits if fits is not None else fit_study(study)
    record = {**study, "fits": fits_to_json(fits)}
    return write_study_files(
        out, record, OUTPUTS, lambda _: markdown_table(study, fits),
        lambda _, file: plot(study, fits, file), overwrite=overwrite,
        replaced=REPLACED,
    )  # fmt: skip


def check_out(out: str | Path, overwrite: bool = False) -> None:
    """Refuse an ``out`` that cannot be written (a file, a path through one, a link to
    nothing, a read-only place), or a folder that holds anything (unless ``overwrite``:
    then the study's own files are replaced and nothing else is touched):
    ``outputs.check_study_dir``. Called before any training, so a refusal comes at the
    start, not after minutes; nothing is left behind."""
    check_study_dir(out, overwrite, REPLACED)


__all__ = ["OUTPUTS", "check_out", "markdown_table", "plot", "write_study"]
