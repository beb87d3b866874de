"""Shared fixtures: every op and layer test runs on each backend.

- ``cpu``: NumPy.
- ``strict:device1``: array-api-strict on a fake non-default device, the stand-in for a GPU
  (only the standard API, and arrays on different devices refuse to mix).
- ``cuda:0``: CuPy, skipped unless CuPy and a GPU are present.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt

DEVICES = ["cpu", "strict:device1", "cuda:0"]


def _skip_if_unavailable(device: str) -> None:
    if device.startswith("strict"):
        pytest.importorskip("array_api_strict")
    if device.startswith("cuda") and not mt.cuda_available():
        pytest.skip("CuPy with a GPU is not available here")


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    """Each backend in turn (the test is skipped where the backend is unavailable)."""
    _skip_if_unavailable(request.param)
    return request.param


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def make(device):
    """make(array_like, dtype='float64', requires_grad=True) -> Tensor on the test's device."""

    def _make(data, dtype: str = "float64", requires_grad: bool = True) -> mt.Tensor:
        return mt.tensor(np.asarray(data), dtype=dtype, device=device, requires_grad=requires_grad)

    return _make
