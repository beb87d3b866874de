"""Reporting a cost measurement: the tables a learner reads, the log–log figure, and the files
(``cost.json``, ``cost.md``, ``plots/cost.png``) written into a folder.

The files go through runs/files.py, as the other tools' do: each is written whole to a temp
file and renamed over its name, never through a symbolic link; a folder that holds anything
is refused before the measurement starts, unless ``overwrite`` (``outputs.check_study_dir``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...runtime.runs.outputs import write_study_files
from ..viz.figure import SaveTo, decorate, finish, new_figure
from .fit import FIT_FROM, summarize

OUTPUTS = ("cost.json", "cost.md", "plots/cost.png")
REPLACED = "the measurement's files"  # what --overwrite replaces, in check_study_dir's refusal
MEMORY_NOTE = (
    "peak memory: the most that tracemalloc saw held during one step, minus what was held "
    "before it (the inputs); NumPy reports every array it allocates to tracemalloc, so this "
    "counts the step's arrays and Python objects, not BLAS's own buffers"
)


def seconds(value: float) -> str:
    """A time as a person reads it: ``850 µs``, ``12.3 ms``, ``4.56 s``."""
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3g} s"


def size(value: float) -> str:
    """A number of bytes: ``512 KiB``, ``12.5 MiB``, ``4.02 GiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def _spread(row: dict[str, Any]) -> str:
    """``12.3 ms (12.1–12.6)``: the median and the fastest and slowest step."""
    low, high = seconds(row["min_s"]), seconds(row["max_s"])
    if len(row["times_s"]) == 1:
        return seconds(row["median_s"])
    return f"{seconds(row['median_s'])} ({low.split()[0]}–{high})"


def _grid(rows: list[dict[str, Any]], cell: Any, kinds: list[str]) -> list[str]:
    """A Markdown table: one line per length, one column per kind, ``cell(row)`` in each."""
    by = {(r["kind"], r["length"]): r for r in rows}
    lines = ["| T | " + " | ".join(kinds) + " |", "|---:|" + "---:|" * len(kinds)]
    for length in sorted({r["length"] for r in rows}):
        cells = [cell(by[(k, length)]) if (k, length) in by else "—" for k in kinds]
        lines.append(f"| {length:,} | " + " | ".join(cells) + " |")
    return lines


def _exponent(fit: dict[str, Any] | None) -> str:
    return "—" if fit is None else f"{fit['exponent']:.2f}"


def _both(wall: str, cpu: str) -> str:
    """``wall (CPU cpu)``, or just ``wall`` when the CPU figure is missing."""
    return wall if cpu == "—" else f"{wall} (CPU {cpu})"


def _crossover(entry: dict[str, Any], cpu: bool) -> str:
    """Where the kind beats full: on the wall clock, and (``cpu``) on the CPU time."""
    if not entry["compared_with_full"]:
        return "—"

    def text(length: int | None) -> str:
        return "never in range" if length is None else f"T = {length:,}"

    if not cpu:
        return text(entry["crossover"])
    return f"{text(entry['crossover'])} (CPU {text(entry['cpu_crossover'])})"


def _growth(entry: dict[str, Any]) -> str:
    wall, cpu = entry["growth_4x"], entry.get("cpu_growth_4x")
    if wall is None:
        return "—"
    cpu_text = "—" if cpu is None else f"{cpu['ratio']:.2f}×"
    wall_text = f"{wall['ratio']:.2f}×"
    return f"{_both(wall_text, cpu_text)} ({wall['from']:,} → {wall['to']:,})"


def markdown(record: dict[str, Any]) -> str:
    """The measurement as Markdown: the settings and machine, the time and memory tables
    (one line per length, one column per kind), and each kind's exponents, growth and
    crossover."""
    s, rows, summary = record["settings"], record["rows"], record["summary"]
    kinds = [k for k in s["kinds"] if k in summary]
    longest = max(r["length"] for r in rows)
    stride = "round(√T)" if s["stride"] is None else str(s["stride"])
    fitted = sorted({n for e in summary.values() if e["time_exponent"]
                     for n in e["time_exponent"]["lengths"]})  # fmt: skip
    lines = [
        f"One attention layer, forward + backward: one head, d = {s['d']}, float32, T = S, "
        f"{'causal' if s['causal'] else 'not causal'}; local window {s['window']}, strided "
        f"stride {stride}, blocked in blocks of {s['block_size']}. {record['machine_line']}",
        "",
        f"Time of one step (median of {s['repeats']}, fastest–slowest in brackets):",
        "",
        *_grid(rows, _spread, kinds),
        "",
        "Peak memory of one step, above its inputs (tracemalloc):",
        "",
        *_grid(rows, lambda r: size(r["peak_bytes"]), kinds),
        "",
        f"Growth, and where each kind beats full attention (exponents: least squares of ln "
        f"cost on ln T over T = {', '.join(f'{n:,}' for n in fitted) or '—'}):",
        "",
        f"| kind | time exponent | memory exponent | time ×, T/4 → T | memory at T = "
        f"{longest:,} | faster than full from |",
        "|---|---:|---:|---:|---:|---|",
    ]
    by = {(r["kind"], r["length"]): r for r in rows}
    cpu = all("cpu_median_s" in r for r in rows)  # rows from measure() have CPU times
    for kind in kinds:
        entry = summary[kind]
        memory = size(by[(kind, longest)]["peak_bytes"]) if (kind, longest) in by else "—"
        time_exponent = _both(
            _exponent(entry["time_exponent"]), _exponent(entry.get("cpu_time_exponent"))
        )
        lines.append(
            f"| {kind} | {time_exponent} | "
            f"{_exponent(entry['memory_exponent'])} | {_growth(entry)} | {memory} | "
            f"{_crossover(entry, cpu)} |"
        )
    lines += [
        "",
        f"Exponents: 2 is quadratic (16× per 4× of T), 1 linear (4×), 1.5 strided with a √T "
        f"stride. The fit uses T >= {FIT_FROM:,} (else the longer half of the lengths), where "
        "the fixed costs no longer hide the growth; (CPU ...): the same from this process's "
        "CPU time, which waiting for a core does not lengthen. 'Faster than full from': the "
        "shortest length from which the kind's median time is below full attention's at "
        "every longer length measured. The "
        + MEMORY_NOTE
        + ". Other processes on the machine add noise "
        f"(load average {record['load_average'][0]:.2f} at the start, "
        f"{record['load_average'][1]:.2f} at the end); the measurement took "
        f"{record['wall_s']:.0f} s.",
    ]
    return "\n".join(lines) + "\n"


def plot(record: dict[str, Any], path: SaveTo | None = None) -> Any:
    """Two log–log panels against T, one line per kind: the step's median time (with its
    min–max as a bar; its CPU time dashed) and its peak memory, with grey guides ∝ T and
    ∝ T². Saved at ``path`` when given; returns the Figure."""
    rows, s = record["rows"], record["settings"]
    fig = new_figure((12, 4.6))
    ax_time, ax_memory = fig.subplots(1, 2)
    kinds = [k for k in s["kinds"] if any(r["kind"] == k for r in rows)]
    for i, kind in enumerate(kinds):
        mine = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["length"])
        t = [r["length"] for r in mine]
        med = [r["median_s"] for r in mine]
        below = [r["median_s"] - r["min_s"] for r in mine]
        above = [r["max_s"] - r["median_s"] for r in mine]
        ax_time.errorbar(t, med, yerr=[below, above], marker="o", ms=4, color=f"C{i}", label=kind,
                         capsize=2)  # fmt: skip
        if all("cpu_median_s" in r for r in mine):
            ax_time.plot(t, [r["cpu_median_s"] for r in mine], "--", lw=1, color=f"C{i}",
                         alpha=0.7)  # fmt: skip
        ax_memory.plot(t, [max(r["peak_bytes"], 1) / 2**20 for r in mine], marker="o", ms=4,
                       color=f"C{i}", label=kind)  # fmt: skip
    lengths = sorted({r["length"] for r in rows})
    if len(lengths) > 1:
        first = min(rows, key=lambda r: (r["length"], r["kind"] != "full"))
        for power, style in ((1, ":"), (2, "-.")):
            guide = [first["median_s"] * (n / lengths[0]) ** power for n in lengths]
            label = "∝ T²" if power == 2 else "∝ T"
            ax_time.plot(lengths, guide, style, color="0.6", lw=1, label=label)
    from matplotlib.ticker import FuncFormatter

    for ax in (ax_time, ax_memory):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    mode = "causal" if s["causal"] else "not causal"
    decorate(ax_time, "sequence length T = S", "seconds per forward + backward",
             f"time, one head, d = {s['d']}, float32, {mode}\n(solid: wall clock, bars min–max; "
             "dashed: CPU time)", logy=True, legend=True)  # fmt: skip
    decorate(ax_memory, "sequence length T = S", "MiB above the inputs (tracemalloc)",
             "peak memory of the step", logy=True, legend=True)  # fmt: skip
    fig.suptitle("The cost of one attention layer against its length")
    return finish(fig, path)


def write(record: dict[str, Any], out: str | Path, overwrite: bool = False) -> list[Path]:
    """cost.json (the record), cost.md (``markdown``) and plots/cost.png (``plot``) into
    ``out`` (made when missing); refuses what ``outputs.check_study_dir`` refuses. Returns the
    paths."""
    return write_study_files(
        out, record, OUTPUTS, markdown, plot, overwrite=overwrite, replaced=REPLACED
    )


def make_record(rows: list[dict[str, Any]], settings: dict[str, Any], machine: dict[str, Any],
                machine_line: str, load_average: list[float], wall_s: float,
                date: str) -> dict[str, Any]:  # fmt: skip
    """The JSON record of a measurement: its settings, machine, rows and summary."""
    return dict(
        date=date, settings=settings, machine=machine, machine_line=machine_line,
        load_average=load_average, wall_s=wall_s, memory_note=MEMORY_NOTE, rows=rows,
        summary=summarize(rows), fit_from=FIT_FROM,
    )  # fmt: skip


__all__ = ["OUTPUTS", "REPLACED", "make_record", "markdown", "plot", "seconds", "size", "write"]
