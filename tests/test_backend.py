"""Backend: devices, moves, mixing errors, RNG on the device, scatter-add."""

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer.errors import DeviceError


def test_device_names():
    assert backend.normalize_device("cpu") == "cpu"
    assert backend.normalize_device("cuda") == "cuda:0"
    assert backend.normalize_device("strict") == "strict:CPU_DEVICE"
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        backend.normalize_device("tpu")


def test_creation_on_each_device(device):
    x = mt.tensor([[1.0, 2.0]], device=device)
    assert x.device == backend.normalize_device(device)
    assert backend.dtype_name(x.dtype) == "float32"
    np.testing.assert_array_equal(x.numpy(), [[1.0, 2.0]])


def test_mixing_devices_is_an_error_naming_both():
    pytest.importorskip("array_api_strict")
    a = mt.tensor([1.0], device="cpu")
    b = mt.tensor([1.0], device="strict:device1")
    c = mt.tensor([1.0], device="strict:device2")
    with pytest.raises(
        DeviceError, match="Add: inputs are on different devices, cpu and strict:device1"
    ):
        a + b
    with pytest.raises(DeviceError, match="strict:device1 and strict:device2"):
        b * c


def test_cuda_without_gpu_says_what_to_install():
    if mt.cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(DeviceError, match="(pip install|no usable NVIDIA GPU)"):
        mt.tensor([1.0], device="cuda")


def test_strict_stand_in_refuses_silent_numpy_fallback():
    """An op handed a strict array must answer with a strict array on the same device."""
    pytest.importorskip("array_api_strict")
    x = mt.tensor(np.ones((2, 3)), device="strict:device1", requires_grad=True)
    y = (x.exp() @ x.T).sum()
    assert y.device == "strict:device1"
    y.backward()
    assert backend.device_of(x.grad) == "strict:device1"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scatter_add_accumulates_repeats(device, dtype):
    ids = backend.asarray(np.array([0, 2, 0, 0, 3]), device=device)
    values = backend.asarray(np.arange(10.0).reshape(5, 2), dtype=dtype, device=device)
    table = backend.asarray(np.zeros((4, 2)), dtype=dtype, device=device)
    out = backend.to_numpy(backend.scatter_add(table, ids, values))
    np.testing.assert_allclose(out, [[0 + 4 + 6, 1 + 5 + 7], [0, 0], [2, 3], [8, 9]])


def test_generator_is_seeded_and_lives_on_the_device(device):
    g1, g2 = backend.Generator(7, device), backend.Generator(7, device)
    a, b = g1.random((3, 4)), g2.random((3, 4))
    assert backend.device_of(a) == backend.normalize_device(device)
    np.testing.assert_array_equal(backend.to_numpy(a), backend.to_numpy(b))
    assert backend.dtype_name(a.dtype) == "float32"


def test_generator_state_round_trip():
    g = backend.Generator(3)
    g.random((5,))
    state = g.state()
    expected = g.normal((4,))
    g2 = backend.Generator(0)
    g2.set_state(state)
    np.testing.assert_array_equal(g2.normal((4,)), expected)


def test_manual_seed_resets_default_generators():
    backend.manual_seed(11)
    a = backend.default_generator("cpu").random((3,))
    backend.manual_seed(11)
    b = backend.default_generator("cpu").random((3,))
    np.testing.assert_array_equal(a, b)


def test_gemm_threads_scale_with_the_cores_others_leave_free(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    monkeypatch.setattr(backend._cpu_load, "sample", lambda: 0.6)
    big = backend.SMALL_GEMM + 1
    assert backend.gemm_threads(8, 10) == 1  # small products: one thread
    assert backend.gemm_threads(8, big) == 7  # 7.4 cores free
    assert backend.gemm_threads(4, big) == 4
    monkeypatch.setattr(backend._cpu_load, "sample", lambda: 7.9)
    assert backend.gemm_threads(8, big) == 1
    assert backend.gemm_threads(1, big) == 1
