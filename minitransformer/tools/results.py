"""Re-measure the README's Results table at this commit, and write it.

    python -m minitransformer.tools.results --readme    # ~25 min on an idle 2-core CPU
    python -m minitransformer.tools.results --tasks copy --seeds 0,1 --out runs/try

Each row of the table is one default command, ``minitransformer train TASK --seed S``, run
as a user runs it (a fresh process: its wall time is the whole command) for every seed:
copy and translate at three seeds (``--seeds``, default 0,1,2), translate-en-es at the
first seed only (about 13 minutes a run). A run's numbers come from its result card
(``result.json``); the baselines (a word-by-word lookup and copying the source) are scored
on the same test split. A row shows the mean over seeds and, in brackets, the lowest and
highest: a seed makes one run reproducible, the spread says how much the recipe moves.

What it writes: the runs under ``--out`` (default ``runs/results/TASK-seedS/``, each with
its log), ``results.json`` there (every seed's numbers, the machine, the date, the
commit), and with ``--readme`` the same JSON as ``docs/results.json`` and the table in
README.md between the ``results:begin`` and ``results:end`` markers (nothing else in the
README changes). ``tests/test_results_table.py`` checks that the README quotes
``docs/results.json``: the table is what this command wrote, not a remembered number.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from ..backend import host
from ..runtime.runs import outputs
from ..runtime.runs.files import RunDirectoryError

ROOT = Path(__file__).resolve().parents[2]  # the clone (README.md, docs/) when editable
TASKS = ("copy", "translate", "translate-en-es")
ONE_SEED = {"translate-en-es"}  # ~13 min a run: measured at the first seed only
BEGIN = "<!-- results:begin (written by python -m minitransformer.tools.results --readme) -->"
END = "<!-- results:end -->"
WHAT = {  # the held-out split, as the README says it
    "copy": "unseen sequences",
    "translate": "test sentences",
    "translate-en-es": "held-out verses",
}


# ----------------------------------------------------------------------------- one run
def run_one(
    task: str, seed: int, out: Path, overwrite: bool, extra: Sequence[str] = ()
) -> dict[str, Any]:
    """Train ``task`` at ``seed`` with the command's defaults (and the flags ``extra``, for
    tests) into ``out``, in a fresh process; return its numbers (wall time measured around
    the whole command)."""
    command = [sys.executable, "-m", "minitransformer", "train", task, "--seed", str(seed),
               "--out", str(out), "--no-progress", *extra]  # fmt: skip
    command += ["--overwrite"] if overwrite else []
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.log"
    start = time.perf_counter()
    with open(log, "w" if overwrite else "x", encoding="utf-8") as stream:
        done = subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"train {task} --seed {seed} exited {done.returncode}; see {log}")
    card = json.loads((out / "result.json").read_text(encoding="utf-8"))
    metrics = card["metrics"]
    row = dict(
        seed=seed, wall_time_s=round(wall, 1), tokens_per_s=round(card["tokens_per_s"]),
        parameters=card["parameters"], preset=card["train_config"]["preset"],
        steps=card["steps"], exact_match=metrics.get("exact_match"), bleu=metrics.get("bleu"),
    )  # fmt: skip
    row.update(baselines(card["train_config"]))
    return row


def baselines(train_config: dict[str, Any]) -> dict[str, Any]:
    """The number of test sentences a run scored, and (translation tasks) the BLEU of a
    word-by-word lookup and of copying the source on the same sentences: the task is made
    again from the run's task, seed and knobs."""
    from ..data import bleu, copy_baseline, make_task, word_lookup_baseline

    made = make_task(train_config["task"], seed=train_config["seed"],
                     **train_config["task_knobs"])  # fmt: skip
    split = train_config["final_eval_split"]
    n = min(train_config["final_eval_samples"] or len(made.texts[split]), len(made.texts[split]))
    sources, references = made.sources(split)[:n], made.references(split)[:n]
    found: dict[str, Any] = {"test_size": n}
    if made.name.startswith("translate"):
        lookup = word_lookup_baseline(made.texts["train"], sources)
        found["lookup_bleu"] = round(bleu(lookup, references), 2)
        found["copy_bleu"] = round(bleu(copy_baseline(sources), references), 2)
    return found


# ----------------------------------------------------------------------------- the table
def spread(values: list[float], form: str, scale: float = 1.0, unit: str = "") -> str:
    """``mean (lowest–highest)`` in ``form`` with ``unit`` after each (one value: just it),
    e.g. ``99.1% (99.0–99.2%)``."""
    mean, low, high = (form.format(v * scale) for v in (fmean(values), min(values), max(values)))
    if len(values) == 1:
        return f"{mean}{unit}"
    return f"{mean}{unit} (every seed)" if low == high else f"{mean}{unit} ({low}–{high}{unit})"


def size(parameters: int) -> str:
    """``235k`` or ``1.3M``: a parameter count as the README writes it."""
    return f"{parameters / 1e6:.1f}M" if parameters >= 1e6 else f"{parameters / 1000:.0f}k"


def render(record: dict[str, Any]) -> str:
    """The README's block (markers included) for a ``results.json`` record."""
    machine = record["machine"]
    lines = [
        BEGIN,
        f"Measured on {record['date']} at commit `{record['commit']}` by "
        "`python -m minitransformer.tools.results --readme` (about 25 minutes): "
        f"{machine['cpu']}, {machine['cpu_count']} CPUs, NumPy {machine['numpy']}, "
        f"Python {machine['python']}, no GPU; load average {record['load'][0]:.1f} at the "
        f"start, {record['load'][1]:.1f} at the end. Each figure is the mean over the "
        "seeds, with the lowest and highest in brackets.",
        "",
        "| command | model | steps | seeds | wall time | tokens/s | held-out result "
        "| baselines on the same split |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task in record["tasks"]:
        rows = record["runs"][task]
        first = rows[0]
        ems = [r["exact_match"] for r in rows]
        result = f"exact match **{spread(ems, '{:.1f}', 100, '%')}**"
        if first.get("bleu") is not None:
            result = f"**BLEU {spread([r['bleu'] for r in rows], '{:.2f}')}**, {result}"
        result += f" on {first['test_size']:,} {WHAT[task]}"
        base = "—"
        if "lookup_bleu" in first:
            lookup = spread([r["lookup_bleu"] for r in rows], "{:.1f}")
            copied = spread([r["copy_bleu"] for r in rows], "{:.2f}")
            base = f"word-by-word lookup BLEU {lookup}; copy source {copied}"
        wall = [r["wall_time_s"] for r in rows]
        wall_text = (spread([w / 60 for w in wall], "{:.1f}", unit=" min") if min(wall) >= 300
                     else spread(wall, "{:.0f}", unit=" s"))  # fmt: skip
        lines.append(
            f"| `minitransformer train {task}` | {first['preset']}, {size(first['parameters'])} "
            f"params | {first['steps']:,} | "
            f"{', '.join(str(r['seed']) for r in rows)} | {wall_text} | "
            f"{spread([r['tokens_per_s'] for r in rows], '{:,.0f}')} | {result} | {base} |"
        )
    lines.append(END)
    return "\n".join(lines)


def replace_block(readme: str, block: str) -> str:
    """``readme`` with the text between its markers (included) replaced by ``block``."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), flags=re.S)
    if len(pattern.findall(readme)) != 1:
        raise ValueError(f"README.md must hold the markers {BEGIN!r} ... {END!r} once")
    return pattern.sub(lambda _: block, readme)


def quoted_block(readme: str) -> str | None:
    """The README's block between the markers (included), or None."""
    match = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), readme, flags=re.S)
    return match.group(0) if match else None


# ----------------------------------------------------------------------------- the command
def commit() -> str:
    """The short commit of the clone, with ``+changes`` when the tree has edits."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def seeds(text: str) -> tuple[int, ...]:
    """--seeds: comma-separated distinct whole numbers 0..2^32-1, 1 to 10 of them."""
    try:
        values = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seeds like 0,1,2, got {text!r}") from None
    if len(set(values)) != len(values) or not 1 <= len(values) <= 10 or min(values) < 0 \
            or max(values) >= 2**32:  # fmt: skip
        raise argparse.ArgumentTypeError(f"expected 1 to 10 different seeds >= 0, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m minitransformer.tools.results", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS),
                        help="the rows to measure (default: all three)")  # fmt: skip
    parser.add_argument("--seeds", type=seeds, default=(0, 1, 2),
                        help="seeds of copy and translate (default 0,1,2; translate-en-es "
                        "runs at the first only)")  # fmt: skip
    parser.add_argument("--out", default="runs/results", help="where the runs go")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace runs this command made before under --out")  # fmt: skip
    parser.add_argument("--readme", action="store_true",
                        help="also write docs/results.json and README.md's table (needs "
                        "all three tasks and at least 3 seeds, in a clone)")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    readme = ROOT / "README.md"
    if args.readme and (set(args.tasks) != set(TASKS) or len(args.seeds) < 3):
        parser.error("--readme writes the whole table: leave --tasks out, give 3+ --seeds")
    if args.readme and not readme.is_file():
        parser.error(f"--readme needs a clone (no {readme}): pip install -e . from one")
    out = Path(args.out)
    runs = [(t, s) for t in TASKS if t in args.tasks
            for s in (args.seeds[:1] if t in ONE_SEED else args.seeds)]  # fmt: skip
    taken = [f"{t}-seed{s}" for t, s in runs
             if (out / f"{t}-seed{s}").exists() or (out / f"{t}-seed{s}.log").exists()]  # fmt: skip
    if taken and not args.overwrite:
        parser.error(f"--out {out} already holds {', '.join(taken)}; pass --overwrite to "
                     "measure them again, or another --out")  # fmt: skip
    try:
        outputs.check_output_dir(out)
    except RunDirectoryError as bad:
        parser.error(str(bad))
    hardware = host.hardware("cpu")  # what a result card records of the machine
    record: dict[str, Any] = dict(
        date=datetime.date.today().isoformat(), commit=commit(), tasks=[],
        machine=dict(cpu=hardware["processor"], cpu_count=hardware["cpu_count"],
                     numpy=hardware["numpy"], python=hardware["python"]),
        load=[os.getloadavg()[0]], runs={},
    )  # fmt: skip
    try:
        for i, (task, seed) in enumerate(runs, 1):
            print(f"[{i}/{len(runs)}] minitransformer train {task} --seed {seed} ...",
                  end=" ", flush=True)  # fmt: skip
            row = run_one(task, seed, out / f"{task}-seed{seed}", args.overwrite)
            if task not in record["tasks"]:
                record["tasks"].append(task)
            record["runs"].setdefault(task, []).append(row)
            score = f"BLEU {row['bleu']:.2f}, " if row["bleu"] is not None else ""
            print(f"{row['wall_time_s']:.0f} s: {score}exact match {row['exact_match']:.1%}")
    except KeyboardInterrupt:
        print(f"\nstopped: the table was not written; the finished runs are in {out}",
              file=sys.stderr)  # fmt: skip
        return 130
    except RuntimeError as failed:
        print(f"\nerror: {failed}", file=sys.stderr)
        return 1
    record["load"].append(os.getloadavg()[0])
    text = json.dumps(record, indent=1) + "\n"
    (out / "results.json").write_text(text, encoding="utf-8")
    block = render(record)
    print(block)
    if args.readme:
        (ROOT / "docs" / "results.json").write_text(text, encoding="utf-8")
        readme.write_text(replace_block(readme.read_text(encoding="utf-8"), block),
                          encoding="utf-8")  # fmt: skip
        print(f"wrote {ROOT / 'docs' / 'results.json'} and the table in {readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
