"""Shared fixtures: every op and layer test runs on each backend.

- ``cpu``: NumPy.
- ``strict:device1``: array-api-strict on a fake non-default device, the stand-in for a GPU
  (only the standard API, and arrays on different devices refuse to mix).
- ``cuda:0``: CuPy, run only where CuPy and a GPU are present. Elsewhere those tests are
  deselected at collection and the summary says so in one line (not one SKIPPED line for
  each of some 300 tests, which would bury the skips that matter).

The ``gpu`` marker names every test that needs a GPU: collection adds it to each ``cuda:0``
variant, and a GPU-only test carries ``@pytest.mark.gpu`` (it is skipped without a GPU,
saying so). ``pytest -m gpu`` runs exactly the GPU tests; the GPU check runs them so, once
with ``MT_CUDA_KERNELS=0`` and once with ``=1``. A test that flips ``MT_CUDA_KERNELS`` takes
the ``kernels_switch`` fixture, which re-reads the switch on entry and on exit.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import minitransformer as mt

DEVICES = ["cpu", "strict:device1", "cuda:0"]


def _skip_if_unavailable(device: str) -> None:
    if device.startswith("strict"):
        pytest.importorskip("array_api_strict")
    if device.startswith("cuda") and not mt.cuda_available():
        pytest.skip(_GPU_REASON)  # a safety net: collection deselects these already


_GPU_REASON = "CuPy with a GPU is not available here"
_gpu_deselected: list[int] = [0]


def _runs_on_cuda(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and str(callspec.params.get("device", "")).startswith("cuda")


@pytest.hookimpl(tryfirst=True)  # before ``-m gpu`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every cuda:0 variant ``gpu``. Without CuPy and a GPU, skip the GPU-only tests
    (``@pytest.mark.gpu``) and drop the cuda:0 variants before they run (counted once)."""
    for item in items:
        if _runs_on_cuda(item):
            item.add_marker(pytest.mark.gpu)
    if mt.cuda_available():
        return
    for item in items:
        if not _runs_on_cuda(item) and item.get_closest_marker("gpu") is not None:
            item.add_marker(pytest.mark.skip(reason=_GPU_REASON))
    if not any(_runs_on_cuda(item) for item in items):
        return
    gpu = [item for item in items if _runs_on_cuda(item)]
    items[:] = [item for item in items if not _runs_on_cuda(item)]
    config.hook.pytest_deselected(items=gpu)
    _gpu_deselected[0] = len(gpu)


# An optional package's install line, for the summary of the tests skipped without it.
_EXTRA_OF = {"torch": "torch", "transformers": "dev", "sentencepiece": "hf", "mpi4py": "mpi"}
_MISSING = re.compile(r"could not import '([\w.]+)'")


def _fold_missing_package(report: pytest.BaseReport) -> None:
    """A skip for a missing optional package (``pytest.importorskip``) says the same thing in
    every file that asks for it, so the summary gets one line per package, with its install
    line, instead of one per file and line (30 lines of "could not import 'torch'")."""
    if not (report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3):
        return
    found = _MISSING.search(str(report.longrepr[2]))
    if found is None:
        return
    package = found.group(1)
    extra = _EXTRA_OF.get(package.split(".")[0])
    install = f' (pip install -e ".[{extra}]")' if extra else ""
    report.longrepr = (__file__, None, f"could not import {package!r}{install}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    _fold_missing_package(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport:
    report = yield
    _fold_missing_package(report)
    return report


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _gpu_deselected[0]:
        terminalreporter.write_line(
            f"{_gpu_deselected[0]} cuda:0 test variants deselected: {_GPU_REASON}"
        )


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    """Each backend in turn (the test is skipped where the backend is unavailable)."""
    _skip_if_unavailable(request.param)
    return request.param


@pytest.fixture
def kernels_switch(monkeypatch):
    """``kernels_switch("1")``: set MT_CUDA_KERNELS for this test and make the fast tier read
    it again (CuPy's namespace and twins are chosen at CuPy's first use in a process); on
    exit the variable is restored and read again, so no later test runs in this one's mode."""

    def switch(value: str) -> None:
        monkeypatch.setenv("MT_CUDA_KERNELS", value)
        mt.backend.reset_cupy_namespace()

    yield switch
    monkeypatch.undo()
    mt.backend.reset_cupy_namespace()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def make(device):
    """make(array_like, dtype='float64', requires_grad=True) -> Tensor on the test's device."""

    def _make(data, dtype: str = "float64", requires_grad: bool = True) -> mt.Tensor:
        return mt.tensor(np.asarray(data), dtype=dtype, device=device, requires_grad=requires_grad)

    return _make


@pytest.fixture(autouse=True)
def _reference_after_each_test():
    """The CLI switches the fast tier on for its process (``main`` in-process does so for
    the test's process): switch it off again, so the next test gets the library's default."""
    yield
    from minitransformer import fast
    from minitransformer.fast.numpy import compiled

    if fast.enabled():
        fast.disable()
    compiled.disable()
