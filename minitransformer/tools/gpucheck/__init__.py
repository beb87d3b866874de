"""The GPU check: one command that measures the GPU path and writes one report.

    python -m minitransformer.tools.gpucheck --out gpucheck-h200   # about 8 minutes on an H200
    python -m minitransformer.tools.gpucheck --out /tmp/gc --quick --allow-no-gpu  # no GPU: smoke

One concept per file:

    check.py     ``run_check``: the folder, the steps in order, the report written
    steps.py     the steps (GPU tests, graph replay, launches, bench, decoding, train), each
                 a child process
    child.py     ``Budget`` (what is left of --budget-s), ``run_child`` (timeout, Ctrl-C, SIGTERM)
    parse.py     the figures read out of each child's output
    targets.py   issue 15's targets, judged pass / fail / not measured
    report.py    ``gpucheck.md``
    machine.py   the GPU, driver, CUDA, CuPy, PyTorch and CPU
    __main__.py  the flags

Every measurement runs in its own process (``python -m minitransformer bench ...``, ``train``,
``pytest``), so this package never imports CuPy's kernels or PyTorch itself; it reads the
results the tools write (the benchmark's JSON, the run's metrics log).
"""

from .check import STEPS, prepare_out, run_check
from .report import render
from .targets import judge

__all__ = ["STEPS", "judge", "prepare_out", "render", "run_check"]
