"""Reporting the ablation study: the Markdown table beside the paper's Table 3, the figure,
and the files a study writes (refusing to replace one unless asked).

The files go through runs/files.py, as a training run's do: each is written whole to a temp
file and renamed over its name, and none is written through a symbolic link (an
``ablations.json`` that links to ``~/.bashrc``, a ``plots/`` that links to another project).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any

from ...runtime import runs
from ...runtime.runs import files
from ...runtime.runs.outputs import check_output_dir
from ..viz.figure import new_figure

# The paper's Table 3 (newstest2013 dev set): (perplexity, BLEU) of the closest row.
PAPER: dict[str, tuple[float, float, str]] = {
    "base": (4.92, 25.8, "base (h 8, d_k 64)"),
    "heads-1": (5.29, 24.9, "h 1 (d_k 512)"),
    "heads-2": (5.00, 25.5, "h 4 = half the base's heads"),
    "heads-8": (4.91, 25.8, "h 16 = twice the base's heads"),
    "heads-16": (5.01, 25.4, "h 32 = four times the base's heads"),
    "d_k-4": (5.16, 25.1, "d_k 16 = a quarter of the base's"),
    "d_k-8": (5.01, 25.4, "d_k 32 = half the base's"),
    "no-dropout": (5.77, 24.6, "P_drop 0.0"),
    "dropout-0.2": (4.95, 25.5, "P_drop 0.2"),
    "no-label-smoothing": (4.67, 25.3, "ε_ls 0.0"),
    "label-smoothing-0.2": (5.47, 25.7, "ε_ls 0.2"),
    "learned-positions": (4.92, 25.7, "learned positional embedding"),
}


def _num(x: float, fmt: str) -> str:
    return "diverged" if x != x else format(x, fmt)  # NaN -> diverged


def markdown_table(study: dict[str, Any]) -> str:
    """The study as a Markdown table, ours next to the paper's closest row."""
    lines = [
        "| variant | what changes | params | train PPL | test PPL | test BLEU | long PPL "
        "| long BLEU | paper PPL / BLEU † |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in study["results"]:
        paper = PAPER.get(r["name"])
        ref = f"{paper[0]:.2f} / {paper[1]:.1f}" if paper else "—"
        lines.append(
            f"| {r['name']} | {r['change']} | {r['parameters']:,} | "
            f"{_num(r['train_ppl'], '.2f')} | {_num(r['test_ppl'], '.2f')} | "
            f"{_num(r['test_bleu'], '.1f')} | {_num(r['long_ppl'], '.2f')} | "
            f"{_num(r['long_bleu'], '.1f')} | {ref} |"
        )
    s = study["settings"]
    lines.append("")
    lines.append(
        f"{s['steps']} steps of batch {s['batch_size']} per variant, seed {s['seed']}; "
        f"{study['task']}. PPL: per target token, no label smoothing, teacher forcing; BLEU: "
        "sacreBLEU of greedy output. Paper: Table 3, newstest2013 (base h 8, d_k 64)."
    )
    lines.append("")
    lines.append(
        f"† Not comparable with ours: the paper's model has 65M parameters and trained 100,000 "
        f"steps on WMT 2014 English-German; these are {s['steps']:,}-step runs of a tiny model "
        "on a toy language. Compare the variants with each other (and with base), not with "
        "the paper's column; what carries over is the direction of a change, if anything."
    )
    return "\n".join(lines) + "\n"


def plot(study: dict[str, Any], path: str | Path) -> Path:
    """Four panels: test BLEU, test perplexity, long-sentence BLEU, training-loss curves,
    saved as a PNG at ``path`` (its directory made when missing; a link at ``path`` itself
    is replaced, never written through)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with files.replacing(path.parent, path.name) as file:
        _save_figure(study, file)
    return path


def _save_figure(study: dict[str, Any], file: IO[bytes]) -> None:
    """Draw the study's figure (see ``plot``) into the binary ``file`` as a PNG."""
    figure(study).savefig(file, format="png", dpi=100)


def figure(study: dict[str, Any]) -> Any:
    """The study's figure (see ``plot``), a matplotlib Figure on its own canvas."""
    results = study["results"]
    names = [r["name"] for r in results]
    fig = new_figure((14, 8.5))  # pyplot-free, headless, laid out as viz's figures
    axes = fig.subplots(2, 2)
    base = next((r for r in results if r["name"] == "base"), None)
    panels = (
        ("test_bleu", "test BLEU (higher is better)", axes[0, 0]),
        ("test_ppl", "test perplexity (lower is better)", axes[0, 1]),
        ("long_bleu", "BLEU on sentences longer than any in training", axes[1, 0]),
    )
    for key, title, ax in panels:
        values = [r[key] for r in results]
        colors = ["C0" if n == "base" else "C1" for n in names]
        ax.barh(range(len(names)), [0 if v != v else v for v in values], color=colors)
        ax.set_yticks(range(len(names)), names)
        ax.invert_yaxis()
        for i, v in enumerate(values):
            ax.text(0 if v != v else v, i, " " + _num(v, ".2f" if "ppl" in key else ".1f"),
                    va="center", fontsize=8)  # fmt: skip
        top = max((v for v in values if v == v), default=0.0)
        ax.set_xlim(0, top * 1.2 if top > 0 else 1.0)  # room for the longest bar's label
        if base is not None and base[key] == base[key]:
            ax.axvline(base[key], color="C0", ls=":", lw=1)
        ax.set_title(title)
    _loss_panel(axes[1, 1], results)
    s = study["settings"]
    fig.suptitle(f"Ablations at toy scale: {s['steps']} steps each, seed {s['seed']}")
    return fig


def _loss_panel(ax: Any, results: list[dict[str, Any]], shown: int = 3) -> None:
    """The training-loss curves (smoothed): base in black and the ``shown`` variants that
    end farthest from it in colour, each named in the legend; the rest thin and grey, so a
    dozen lines that end close together stay readable."""
    curves = {}
    for r in results:
        losses = r["train_loss"]
        k = max(1, len(losses) // 40)
        starts = range(0, len(losses) - k + 1, k)
        curves[r["name"]] = ([j + k for j in starts], [sum(losses[j : j + k]) / k for j in starts])
    base_end = (curves.get("base", ([], [math.nan]))[1] or [math.nan])[-1]

    def gap(name: str) -> float:  # how far a variant ends from base (unknown: last)
        d = abs((curves[name][1] or [math.nan])[-1] - base_end)
        return d if math.isfinite(d) else -1.0

    others = sorted((n for n in curves if n != "base"), key=gap, reverse=True)
    picked, rest = others[:shown], others[shown:]
    for i, name in enumerate(rest):
        label = f"the other {len(rest)} variants" if i == 0 else None
        ax.plot(*curves[name], color="0.72", lw=0.8, label=label)
    for i, name in enumerate(picked):
        ax.plot(*curves[name], color=f"C{i + 1}", lw=1.6, label=name)
    if "base" in curves:
        ax.plot(*curves["base"], color="black", lw=2.4, label="base")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (label-smoothed where ε_ls > 0)")
    ax.legend(fontsize=8)
    farthest = f": base and the {len(picked)} ending farthest from it" if rest else ""
    ax.set_title("training loss" + farthest)


OUTPUTS = ("ablations.json", "ablations.md", "plots/ablations.png")


def write_study(study: dict[str, Any], out: str | Path, overwrite: bool = False) -> list[Path]:
    """ablations.json, ablations.md and plots/ablations.png into ``out``; refuses (a
    RunDirectoryError) when ``out`` already holds a study or one of these names is a
    symbolic link, unless ``overwrite`` (which removes the link, not what it points to).

    Each file is written whole, then renamed over its name (runs.files): nothing is written
    through a link, even one made after the check, and a crash leaves no half file.
    """
    out = Path(out)
    check_out(out, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    for link in files.linked_entries(out, OUTPUTS):  # only with --overwrite (check_out)
        files.remove(out, link)
    files.write_text(out, "ablations.json", json.dumps(study, indent=1, allow_nan=True) + "\n")
    files.write_text(out, "ablations.md", markdown_table(study))
    with files.replacing(out, "plots/ablations.png") as file:
        _save_figure(study, file)
    return [out / name for name in OUTPUTS]


def check_out(out: str | Path, overwrite: bool = False) -> None:
    """Refuse an ``out`` that cannot be written (a file, a path through one, a link to
    nothing, a read-only place: ``outputs.check_output_dir``), whose study files (or
    ``plots/``) are symbolic links, or that holds a study (the last two unless
    ``overwrite``): called before any training, so the refusal comes at the start, not
    after the study has run."""
    out = Path(out)
    check_output_dir(out)
    links = files.linked_entries(out, OUTPUTS)
    if links and not overwrite:
        raise runs.RunDirectoryError(files.link_message(out, links))
    held = [name for name in OUTPUTS if (out / name).exists()]
    if held and not overwrite:
        raise runs.RunDirectoryError(
            f"--out {str(out)!r} already holds an ablation study ({', '.join(held)}); pass "
            "another --out, or --overwrite to replace it"
        )
