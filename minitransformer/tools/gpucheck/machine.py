"""The machine a GPU check ran on: whether a GPU can be used (and if not, why), the GPU's
name, the driver's and the CUDA runtime's versions, CuPy's and PyTorch's versions, the CPU.

Versions of packages come from their installed metadata (PyTorch is not imported); the
GPU's facts from CuPy's runtime calls, asked only when CuPy sees a GPU.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
from typing import Any

from ...backend import host
from ...backend.devices import cupy_module
from ...errors import DeviceError

CUPY_DISTRIBUTIONS = ("cupy-cuda13x", "cupy-cuda12x", "cupy")


def gpu_status() -> tuple[bool, str]:
    """(True, "") when CuPy sees a GPU, else (False, why not)."""
    try:
        cupy_module()
    except DeviceError as err:
        return False, " ".join(str(err).split())
    return True, ""


def package_version(*names: str) -> str | None:
    """The installed version of the first of ``names`` that is installed, as "name version"."""
    for name in names:
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _cuda_version(number: int) -> str:
    """CUDA's version integer (13000) as text ("13.0")."""
    return f"{number // 1000}.{number % 1000 // 10}"


def gpu_facts() -> dict[str, Any]:
    """The GPU's name and memory, the driver's and the CUDA runtime's versions (cuda:0)."""
    cp = cupy_module()
    runtime = cp.cuda.runtime
    props = runtime.getDeviceProperties(0)
    name = props["name"]
    return {
        "gpu": name.decode() if isinstance(name, bytes) else str(name),
        "gpu_memory_gib": round(props["totalGlobalMem"] / 2**30, 1),
        "compute_capability": f"{props['major']}.{props['minor']}",
        "gpu_count": runtime.getDeviceCount(),
        "driver_cuda": _cuda_version(runtime.driverGetVersion()),
        "runtime_cuda": _cuda_version(runtime.runtimeGetVersion()),
        "cupy": cp.__version__,
        "driver": nvidia_driver(),
    }


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version as ``nvidia-smi`` gives it (e.g. "570.124.06"), or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def machine_facts(gpu: bool) -> dict[str, Any]:
    """Everything the report says about the machine; GPU facts only when ``gpu``."""
    facts: dict[str, Any] = {
        "cpu": host.cpu_name(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": package_version("numpy"),
        "torch": package_version("torch"),
        "cupy": package_version(*CUPY_DISTRIBUTIONS),
        "platform": platform.platform(),
    }
    if gpu:
        try:
            facts.update(gpu_facts())
        except Exception as err:  # noqa: BLE001 - a fact we cannot read is reported, not fatal
            facts["gpu_error"] = f"{type(err).__name__}: {err}"
    return facts
