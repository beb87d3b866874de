"""Regenerate the committed lesson figures in plots/lessons/.

    python lessons/make_figures.py            # every lesson, at full size
    python lessons/make_figures.py 05 09      # only lessons 05 and 09

Runs each notebook top to bottom in a fresh kernel (cwd lessons/) with
MT_PLOTS_DIR=plots/lessons, so the figures the markdown cells embed are rewritten; the
notebook files themselves are not modified (their outputs stay cleared). Running a lesson
by hand (without MT_PLOTS_DIR) writes its figures to a temporary folder instead.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

LESSONS = Path(__file__).resolve().parent
ROOT = LESSONS.parent
PLOTS = ROOT / "plots" / "lessons"


def main(argv: list[str]) -> int:
    try:
        import nbclient
        import nbformat
    except ImportError:
        print(
            "make_figures.py needs nbclient, nbformat and ipykernel: pip install nbclient ipykernel"
        )
        return 2
    notebooks = sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))
    if argv:
        unknown = [a for a in argv if not any(nb.name.startswith(a) for nb in notebooks)]
        if unknown:
            names = ", ".join(nb.name[:2] for nb in notebooks)
            print(f"no lesson numbered {', '.join(unknown)}; choose from {names}")
            return 2
        notebooks = [nb for nb in notebooks if any(nb.name.startswith(a) for a in argv)]
    os.environ["MT_PLOTS_DIR"] = str(PLOTS)  # the kernel inherits the environment
    os.environ.pop("MT_LESSON_FAST", None)
    for path in notebooks:
        t0 = time.perf_counter()
        nb = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(
            nb, kernel_name="python3", timeout=1800, resources={"metadata": {"path": str(LESSONS)}}
        )
        client.execute()  # the executed copy is discarded: the .ipynb stays clean
        print(f"{path.name}: {time.perf_counter() - t0:.0f} s")
    print(f"figures written to {PLOTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
