"""Where a lesson writes files: never into the repository unless asked to.

- ``plots_dir()``: the folder a lesson saves its figures in. ``MT_PLOTS_DIR`` if set --
  ``python lessons/make_figures.py`` sets it to ``plots/lessons`` to regenerate the PNGs the
  lessons' markdown shows; tests set it to a temporary folder -- else a fresh temporary
  folder, removed when the kernel exits. A learner running a notebook sees every figure
  inline and never rewrites a committed file.
- ``scratch_dir(name)``: a temporary folder for anything else a lesson writes (a training
  run's directory), removed when the kernel exits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path


def scratch_dir(name: str) -> Path:
    """A new temporary folder ``mt_<name>_*``, deleted at interpreter exit."""
    path = Path(tempfile.mkdtemp(prefix=f"mt_{name}_"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def plots_dir(lesson: str) -> Path:
    """``$MT_PLOTS_DIR`` (created if missing), else ``scratch_dir(f"lesson{lesson}_plots")``."""
    env = os.environ.get("MT_PLOTS_DIR")
    if env:
        path = Path(env)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return scratch_dir(f"lesson{lesson}_plots")
