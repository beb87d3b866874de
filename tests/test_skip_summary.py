"""The summary a newcomer reads after ``pytest`` without the optional packages: the tests
skipped for a missing package fold into one line per package with its install line
(``conftest._fold_missing_package``), instead of one line per test file and line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_skips_for_a_missing_package_fold_into_one_line(tmp_path):
    # A plugin that makes torch unimportable, as on a machine without the [torch] extra.
    (tmp_path / "hide_torch.py").write_text('import sys\nsys.modules["torch"] = None\n')
    files = ["tests/ops/test_loss.py", "tests/ops/test_softmax.py", "tests/test_optim.py"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "hide_torch", "-q", "-p", "no:cacheprovider"]
        + ["-k", "torch", *files],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if "could not import 'torch'" in line]
    assert len(lines) == 1, done.stdout
    assert 'pip install -e ".[torch]"' in lines[0]
    count = int(lines[0].split("[", 1)[1].split("]", 1)[0])
    assert count > len(files), lines[0]  # several tests of several files in the one line
