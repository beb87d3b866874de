"""Count what one training step costs in calls: Python calls, and array-library calls.

On a GPU every array call is a kernel launch (~12 µs for CuPy), and on any device every
Python call is interpreter time, so at small sizes a step's speed is set by these counts,
not by its arithmetic. Two counts for one step of the Trainer (the copy task, ``tiny``):

- ``python_calls``: every call cProfile sees (Python functions and C builtins), on NumPy,
  with the fast tier on, as the CLI runs (``python_calls_reference``: the same step with
  the reference ops, what a notebook runs).
- ``array_calls``: calls from outside the array library into it, on the array-api-strict
  stand-in, where every array operation (functions and operators such as ``a * b``) is a
  visible Python call. Attribute reads (``.shape``, ``.dtype``, ``.device``) and the
  library's own internal calls are not counted: on CuPy they launch nothing.

    python -m minitransformer.tools.callcount                 # both counts for one tiny step
    python -m minitransformer.tools.callcount --device cuda:0  # the step's CuPy calls on a GPU

On a GPU (``count_cuda_step_calls``) three counts of the same step, each of what it can see:

- ``cupy_calls``: calls from outside CuPy into CuPy that ``sys.setprofile`` sees: CuPy's
  Python functions (``cupy.sum``, ``cupy.zeros``, ...) and C-level builtins and ndarray
  methods (``x.reshape``, ``x.astype``). Not seen: ufunc objects (``cupy.exp(x)``) and
  operators (``a * b``), which Python calls without a profile event.
- ``allocations``: arrays CuPy's memory pool hands out (a ``MemoryHook``): about one per
  launch that makes a new array, operators and ufuncs included; in-place ops and views
  are not counted.
- ``kernel_launches``: kernels the GPU ran, counted with CUPTI's activity API (one record per
  kernel: CuPy's, cuBLAS's and CUB's alike; ``cupti.LaunchCounter``) where ``libcupti`` is
  found, with ``copies`` (memcpy and memset records) beside it, and the launch calls each API saw
  (``driver_api_launches``: CuPy's kernels; ``runtime_api_launches``: cuBLAS and CUB) as a
  cross-check; None with the reason otherwise. The figure the launch target is about.
  ``probe_launches`` shows the counter counting 10 matmuls, 10 adds and 10 sums.

``tests/test_callcount.py`` pins a budget for both, so a regression fails CI. A tool on
the commands' floor, above the Trainer it measures.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from typing import Any

from .. import backend, fast
from ..backend import host
from ..backend.devices import cupy_module
from ..errors import DeviceError
from ..train import TrainConfig, Trainer
from .cupti import LaunchCounter

# Reads of array attributes and the strict library's Device objects: free on a GPU.
_NOT_CALLS = {
    "shape",
    "ndim",
    "dtype",
    "device",
    "size",
    "T",
    "mT",
    "__repr__",
    "__hash__",
    "__len__",
    "__init__",
    "_new",
}
_NOT_METHODS = ("Device.", "_DType.", "DType.")  # array-api-strict's, free on a GPU


def _trainer(device: str, tmp: str, dropout: float) -> Trainer:
    """A Trainer of the copy task on ``device``, writing (nothing it keeps) under ``tmp``."""
    cfg = TrainConfig(
        task="copy",
        device=device,
        out=tmp,
        progress=False,
        plots=False,
        dropout=dropout,
        task_knobs=dict(n_train=256, n_valid=8, n_test=8),
    )
    return Trainer(cfg)


def count_step_calls(dropout: float = 0.1, warmup_steps: int = 3) -> dict[str, Any]:
    """Python calls (NumPy; fast tier on, and the reference) and array calls (strict
    stand-in) of one tiny training step."""
    out: dict[str, Any] = {}
    tuned = host.gemm_tuning
    with tempfile.TemporaryDirectory() as tmp:
        # as the CLI runs (the fast tier on, products tuned: tune_host) and as a notebook
        # runs (the reference, untuned), whatever this process did before
        runs = (("python_calls", fast.switched_on, True),
                ("python_calls_reference", fast.reference_only, False))  # fmt: skip
        for key, tier, products in runs:
            host.tune_products(products)
            try:
                with tier():
                    trainer = _trainer("cpu", tmp, dropout)
                    batches = [next(trainer.stream) for _ in range(warmup_steps + 1)]
                    for b in batches[:-1]:
                        trainer.train_step(b)
                    profile = cProfile.Profile()
                    profile.enable()
                    trainer.train_step(batches[-1])
                    profile.disable()
            finally:
                host.tune_products(tuned)
            out[key] = pstats.Stats(profile).total_calls
        try:
            import array_api_strict  # noqa: F401
        except ImportError:
            return out
        trainer = _trainer("strict:device1", tmp, dropout)
        for b in batches[:-1]:
            trainer.train_step(b)
        counts = _calls_into(("array_api_strict",), lambda: trainer.train_step(batches[-1]))
        out["array_calls"] = sum(counts.values())
        out["array_calls_by_name"] = dict(counts.most_common())
    return out


def _calls_into(prefixes: tuple[str, ...], run: Callable[[], Any]) -> Counter[str]:
    """The calls, by name, that code outside the modules named ``prefixes...`` makes into
    them while ``run()`` runs: Python functions ("call" events) and C functions ("c_call":
    CuPy's ufuncs and Cython methods), not the library's calls to itself, attribute reads
    (``_NOT_CALLS``) or array-api-strict's Device and DType methods."""
    counts: Counter[str] = Counter()

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            if not frame.f_globals.get("__name__", "").startswith(prefixes):
                return
            back = frame.f_back
            if back is not None and back.f_globals.get("__name__", "").startswith(prefixes):
                return
            code = frame.f_code
            if code.co_name in _NOT_CALLS or code.co_qualname.startswith(_NOT_METHODS):
                return
            counts[code.co_name] += 1
        elif event == "c_call":  # frame: the caller
            if frame.f_globals.get("__name__", "").startswith(prefixes):
                return
            module = (
                getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__module__
            )
            if module and module.startswith(prefixes) and arg.__name__ not in _NOT_CALLS:
                counts[arg.__name__] += 1

    sys.setprofile(hook)
    try:
        run()
    finally:
        sys.setprofile(None)
    return counts


# ----------------------------------------------------------------------------- on a GPU

_CUPY = ("cupy", "cupyx", "cupy_backends")


def probe_launches(device: str = "cuda:0", repeat: int = 10) -> dict[str, Any]:
    """What the launch counter sees of ``repeat`` calls of each kind, alone: a cuBLAS
    matmul, a CuPy elementwise add, a CuPy (CUB) sum. Each should count >= ``repeat``
    kernels: fewer means that kind of launch is missed."""
    cp = cupy_module()
    out: dict[str, Any] = {}
    with backend.native_device(backend.normalize_device(device)):
        a = cp.ones((256, 256), dtype=cp.float32)
        probes = {"matmul": lambda: cp.matmul(a, a), "add": lambda: a + a, "sum": lambda: a.sum()}
        for name, fn in probes.items():
            fn()
            cp.cuda.Device().synchronize()
            with LaunchCounter() as d:
                for _ in range(repeat):
                    fn()
                cp.cuda.Device().synchronize()
            out[name] = {
                "kernels": d.launches,
                "driver_api": d.driver_launches,
                "runtime_api": d.runtime_launches,
                "why_not": d.why or d.activity_why or None,
            }
    return out


def call_costs(device: str = "cuda:0") -> dict[str, float]:
    """Host microseconds per CuPy call (the launch overhead a step pays per call): an
    elementwise add, a view, a cuBLAS matmul, an allocation, and one fused-kernel wrapper
    (a RawKernel launch; when the fused kernels are registered)."""
    import time

    cp = cupy_module()
    with backend.native_device(backend.normalize_device(device)):
        a = cp.ones((64, 64), dtype=cp.float32)
        calls: dict[str, Callable[[], Any]] = {
            "add": lambda: a + a,
            "reshape (a view)": lambda: a.reshape(4096),
            "matmul 64x64": lambda: cp.matmul(a, a),
            "empty": lambda: cp.empty((64, 64), cp.float32),
        }
        if fast.cuda_kernels_enabled():
            from ..fast.cupy import softmax as fused

            calls["fused softmax"] = lambda: fused.softmax(a, -1)
        out = {}
        for name, fn in calls.items():
            fn()
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            out[name] = round(1e6 * (time.perf_counter() - t0) / 2000, 2)
            cp.cuda.Device().synchronize()
    return out


def count_cuda_step_calls(
    device: str = "cuda:0", dropout: float = 0.1, warmup_steps: int = 3
) -> dict[str, Any]:
    """The CuPy calls, pool allocations and (with CUPTI) kernel launches of one tiny training
    step on ``device`` (see the module doc for what each sees). DeviceError without CuPy
    and a GPU. The kernels' switch (``MT_CUDA_KERNELS``) is as the environment sets it."""
    device = backend.normalize_device(device)
    if not device.startswith("cuda"):
        raise DeviceError(f"count_cuda_step_calls: {device!r} is not a GPU; use 'cuda:N'")
    cp = cupy_module()  # the clear DeviceError without CuPy or a GPU
    from cupy.cuda import memory_hook

    class Allocations(memory_hook.MemoryHook):
        name = "minitransformer.tools.callcount"
        n = 0

        def malloc_postprocess(self, **kwargs: Any) -> None:  # noqa: ARG002
            Allocations.n += 1

    with tempfile.TemporaryDirectory() as tmp:
        trainer = _trainer(device, tmp, dropout)
        batches = [next(trainer.stream) for _ in range(warmup_steps + 1)]
        for b in batches[:-1]:
            trainer.train_step(b)  # kernels compiled, memory pool warm
        backend.synchronize(device)
        with LaunchCounter() as driver, Allocations():
            counts = _calls_into(_CUPY, lambda: trainer.train_step(batches[-1]))
            backend.synchronize(device)
    return {
        "device": device,
        "cuda_kernels": fast.cuda_kernels_enabled(),
        "cupy_version": cp.__version__,
        "cupy_calls": sum(counts.values()),
        "cupy_calls_by_name": dict(counts.most_common()),
        "allocations": Allocations.n,
        "kernel_launches": driver.launches,
        "copies": driver.copies,
        "driver_api_launches": driver.driver_launches if driver.launches is not None else None,
        "runtime_api_launches": driver.runtime_launches if driver.launches is not None else None,
        "driver_calls": driver.driver_calls if driver.launches is not None else None,
        "kernel_launches_why_not": driver.why or driver.activity_why or None,
    }


def _main_cuda(device: str) -> int:
    try:
        counts = count_cuda_step_calls(device)
        counts["probe"] = probe_launches(device)
        counts["call_us"] = call_costs(device)
    except DeviceError as e:
        print(f"callcount --device {device}: no GPU to count on here ({e})")
        return 2
    launches = counts["kernel_launches"]
    print(
        f"one tiny training step on {counts['device']} (copy task, dropout 0.1, "
        f"MT_CUDA_KERNELS={'1' if counts['cuda_kernels'] else '0'}, CuPy "
        f"{counts['cupy_version']}): {counts['cupy_calls']} CuPy calls seen by the profiler, "
        f"{counts['allocations']} pool allocations, "
        + (
            f"{launches} kernel launches and {counts.get('copies')} copies run by the GPU (CUPTI; "
            f"launch calls: {counts.get('driver_api_launches')} driver API, "
            f"{counts.get('runtime_api_launches')} runtime API)"
            if launches is not None
            else f"kernel launches not counted: {counts['kernel_launches_why_not']}"
        )
    )
    top = list(counts["cupy_calls_by_name"].items())[:12]
    if top:
        print("most frequent CuPy calls: " + ", ".join(f"{k} {v}" for k, v in top))
    probe = counts.get("probe") or {}
    if probe:
        print(
            "the counter's probe, 10 calls each: "
            + ", ".join(f"{k} {v['kernels']} kernels" for k, v in probe.items())
        )
    print(
        "host microseconds per CuPy call: "
        + ", ".join(f"{k} {v}" for k, v in (counts.get("call_us") or {}).items())
    )
    # the same counts as one JSON line, for tools (gpucheck reads it)
    print(json.dumps({k: v for k, v in counts.items() if k != "cupy_calls_by_name"}))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m minitransformer.tools.callcount [--device cuda:0]``: print the counts of one tiny
    step: on the CPU (default) Python calls and array calls; on a GPU its CuPy calls."""
    parser = argparse.ArgumentParser(prog="python -m minitransformer.tools.callcount")
    parser.add_argument(
        "--device", default="cpu", help="cpu (default: Python and strict array calls) or cuda:N"
    )
    args = parser.parse_args(argv)
    try:
        device = backend.normalize_device(args.device)
    except DeviceError as e:
        parser.error(str(e))
    if device.startswith("cuda"):
        return _main_cuda(device)
    if device != "cpu":
        parser.error(f"--device {args.device}: use cpu or cuda:N")
    counts = count_step_calls()
    print(
        f"one tiny training step (copy task, dropout 0.1): {counts['python_calls']} Python "
        f"calls (NumPy, fast tier on, as the CLI runs; "
        f"{counts['python_calls_reference']} with the reference ops), "
        f"{counts.get('array_calls', 'n/a')} array calls (strict stand-in)"
    )
    top = list(counts.get("array_calls_by_name", {}).items())[:12]
    if top:
        print("most frequent array calls: " + ", ".join(f"{k} {v}" for k, v in top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
