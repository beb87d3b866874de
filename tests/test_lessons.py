"""Every lesson notebook (lessons/*.ipynb) is committed clean, runs top to bottom at its
small settings, and shows each figure once: the one its cells draw.

- committed without outputs (each code cell: outputs [] and execution_count None), with the
  kernelspec "python3", so diffs stay readable and nothing stale is shown;
- executed with nbclient in a fresh "python3" kernel, cwd = lessons/, with
  MT_LESSON_FAST=1 (the notebooks shrink their size knobs) and WITHOUT MT_PLOTS_DIR, as a
  learner runs them: figures go to a temporary folder (lessons/figures/);
- a check cell on its shipped placeholder shows no ``Out[]`` (only its printed line);
- running a lesson changes nothing in the repository (``git status`` before = after: a lesson
  that rewrote a committed PNG fails) and leaves nothing in the temporary directory (the
  kernel gets a private TMPDIR, empty afterwards), within the fast-mode budget of 2 minutes;
- a lesson shows only the figures its cells draw: no markdown embed of a committed copy
  (``![...](../plots/lessons/NN_name.png)``) under the live one;
- no markdown cell states a measured number (a number with a unit) unless the notebook's
  metadata lists the phrase with its reason: measured figures come from cells.

New lessons are picked up automatically; each test is named after its notebook file.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from lesson_notebooks import IMAGE, references

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "lessons"
NOTEBOOKS = sorted(LESSONS.glob("*.ipynb"))
CELL_TIMEOUT_S = 300
# A lesson in fast mode runs within 2 minutes on a quiet 2-core machine (lessons/README.md
# gives each one's measured time, all far below); the test allows for a loaded CI machine.
FAST_BUDGET_S = 120

# ![caption](path) and <img src="path">, for local (relative) paths only


def _params():
    return pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def test_lessons_exist():
    assert NOTEBOOKS, f"no lesson notebooks found in {LESSONS}"


@_params()
def test_committed_without_outputs(path: Path):
    nb = _load(path)
    kernelspec = nb.get("metadata", {}).get("kernelspec", {})
    assert kernelspec.get("name") == "python3", (
        f"{path.name}: kernelspec name is {kernelspec.get('name')!r}, need 'python3'"
    )
    dirty = [
        i
        for i, cell in enumerate(nb["cells"])
        if cell["cell_type"] == "code"
        and (cell.get("outputs") != [] or cell.get("execution_count") is not None)
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} have outputs or an execution count; clear them "
        f"before committing (jupyter nbconvert --clear-output --inplace {path.name})"
    )


@_params()
def test_shows_each_figure_once(path: Path):
    """One figure per measurement: a lesson shows the figure its own cells draw, never a
    committed copy from another machine under it (plots/lessons/ is the README's gallery)."""
    refs = references(path, IMAGE)
    committed = [ref for ref in refs if "plots/" in ref]
    assert not committed, (
        f"{path.name}: markdown embeds committed figures {committed} under the live ones the "
        "cells draw; remove the embeds (the learner's own run is the figure)"
    )
    missing = [ref for ref in refs if not (LESSONS / ref).is_file()]
    assert not missing, f"{path.name}: markdown embeds images that do not exist: {missing}"


def _repo_state() -> str | None:
    """``git status`` of the repository (untracked and ignored files too, caches aside)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    caches = ("__pycache__", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints")
    return "\n".join(line for line in out.splitlines() if not any(c in line for c in caches))


def _execute(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the notebook in a fresh kernel; assert it changed nothing in the repository and left
    nothing in its (private) temporary directory."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    kernel_tmp = tmp_path / "kernel_tmp"
    kernel_tmp.mkdir()
    # The kernel inherits this process's environment when it starts.
    monkeypatch.setenv("MT_LESSON_FAST", "1")
    monkeypatch.setenv("TMPDIR", str(kernel_tmp))
    monkeypatch.delenv("MT_PLOTS_DIR", raising=False)
    before = _repo_state()
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(LESSONS)}},
    )
    started = time.perf_counter()
    client.execute()  # raises CellExecutionError naming the failing cell
    took = time.perf_counter() - started
    assert took < FAST_BUDGET_S, (
        f"{path.name} took {took:.0f} s in fast mode (MT_LESSON_FAST=1), over the "
        f"{FAST_BUDGET_S} s a learner is promised: shrink its fast-mode knobs (first code cell)"
    )
    # as shipped every exercise is a placeholder: its check cell shows the printed "not
    # attempted yet" line and no Out[] (the check returns None)
    shown = [
        _source(cell).strip().splitlines()[-1]
        for cell in nb.cells
        if cell.cell_type == "code"
        and re.search(r"\bcheck_\d\d_\d\(", _source(cell))
        and any(out.get("output_type") == "execute_result" for out in cell.outputs)
    ]
    assert not shown, f"{path.name}: check cells show an Out[] as shipped: {shown}"
    after = _repo_state()
    assert before == after, (
        f"{path.name} changed the repository: git status before\n{before}\nafter\n{after}"
    )
    left = sorted(p.name for p in kernel_tmp.iterdir())
    assert not left, (
        f"{path.name} left {left} in the temporary directory; clean up (lessons/figures/)"
    )


@_params()
def test_executes(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The lesson runs top to bottom as a learner runs it (no MT_PLOTS_DIR): its figures go
    to a temporary folder that is removed, never over the committed PNGs."""
    _execute(path, tmp_path, monkeypatch)


def test_figures_go_to_mt_plots_dir_when_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """make_figures.py sets MT_PLOTS_DIR to regenerate the committed PNGs; figures.plots_dir
    returns it (created), and without it a temporary folder outside the repository."""
    monkeypatch.syspath_prepend(str(LESSONS))
    figures = __import__("figures")
    monkeypatch.setenv("MT_PLOTS_DIR", str(tmp_path / "p"))
    assert figures.plots_dir("01") == tmp_path / "p" and (tmp_path / "p").is_dir()
    monkeypatch.delenv("MT_PLOTS_DIR")
    scratch = figures.plots_dir("01")
    assert scratch.is_dir() and ROOT not in scratch.resolve().parents


# A measured quantity in prose: a number with a unit of time, size, rate, share or ratio.
_MEASURED = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:%|ms\b|µs\b|s\b|MiB|GiB|KiB|MB\b|GB\b|tok/s|×)"
)


@_params()
def test_markdown_states_no_measured_number(path: Path):
    """Every measured figure a lesson's text gives comes from a cell (a findings cell renders
    its Markdown from the computed values), so no text can go stale when the code changes.
    A markdown cell may state such a number only when the notebook's metadata
    ``minitransformer.stated_numbers`` lists it with the reason (arithmetic the text shows,
    a figure from the paper, a stated assumption)."""
    nb = _load(path)
    stated = nb.get("metadata", {}).get("minitransformer", {}).get("stated_numbers", {})
    found = [
        m.group(0)
        for cell in nb["cells"]
        if cell["cell_type"] == "markdown"
        for m in _MEASURED.finditer(_source(cell))
        if m.group(0) not in stated
    ]
    assert not found, (
        f"{path.name}: markdown states measured numbers {found}; compute them in a cell and "
        "render the text from the values (IPython.display.Markdown), or list the phrase in the "
        "notebook metadata minitransformer.stated_numbers with the reason it cannot go stale"
    )


def test_no_lesson_writes_into_the_repository_by_default():
    """Every lesson takes its figure folder from figures.plots_dir (MT_PLOTS_DIR, else a
    temporary folder), never a path into plots/ of its own."""
    offenders = []
    for path in NOTEBOOKS:
        text = "\n".join(_source(c) for c in _load(path)["cells"] if c["cell_type"] == "code")
        if "../plots" in text or "mkdtemp(" in text:
            offenders.append(path.name)
    assert not offenders, f"{offenders}: use figures.plots_dir() / figures.scratch_dir()"


def _seconds(text: str) -> float:
    """'2 min 10 s', '68 s', '2.6 s' -> seconds."""
    m = re.fullmatch(r"(?:(\d+) min)?\s*(?:(\d+(?:\.\d+)?) s)?", text.strip())
    assert m and any(m.groups()), f"not a runtime: {text!r}"
    return 60 * float(m.group(1) or 0) + float(m.group(2) or 0)


def test_lessons_readme_states_every_runtime():
    """lessons/README.md gives each lesson's default and fast runtime, within the promise:
    10 minutes by default and 2 in fast mode on a quiet 2-core machine."""
    rows = re.findall(
        r"^\| \[(\d\d_\w+)\]\(\1\.ipynb\) \| ([^|]+) \| ([^|]+) \|",
        (LESSONS / "README.md").read_text(encoding="utf-8"),
        re.M,
    )
    assert [name for name, _, _ in rows] == [p.stem for p in NOTEBOOKS]
    for name, default, fast in rows:
        assert _seconds(default) <= 600, f"{name}: default mode {default}, over 10 minutes"
        assert _seconds(fast) <= 120, f"{name}: fast mode {fast}, over 2 minutes"
