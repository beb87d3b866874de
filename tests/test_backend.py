"""Backend: devices, moves, mixing errors, RNG on the device, scatter-add."""

import json
import sys

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer.backend import host
from minitransformer.errors import DeviceError


def test_device_names():
    assert backend.normalize_device("cpu") == "cpu"
    assert backend.normalize_device("cuda") == "cuda:0"
    assert backend.normalize_device("strict") == "strict:CPU_DEVICE"
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        backend.normalize_device("tpu")


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("tpu", "unknown device 'tpu': use cpu, cuda (the first GPU) or cuda:N"),
        ("GPU", "unknown device 'GPU': did you mean cuda? Use cpu, cuda"),
        ("CPU", "unknown device 'CPU': did you mean cpu? Use"),
        ("gpu7", "unknown device 'gpu7': did you mean cuda:7? Use"),
        ("cuda:x", "unknown device 'cuda:x': use cpu, cuda"),
    ],
)
def test_an_unknown_device_is_worded_for_a_learner(typed, said):
    """Worded for users (cpu, cuda, cuda:N), with the likely name; the test backend that
    'strict:NAME' still selects is not offered to them."""
    with pytest.raises(DeviceError) as refused:
        backend.normalize_device(typed)
    assert str(refused.value).startswith(said) and "strict" not in str(refused.value)


def test_gpu_is_cuda_and_an_error_names_it_as_written(monkeypatch, capsys):
    """'gpu' stays an alias of cuda; without CuPy the error names what was typed and gives
    the install line that works from a clone (no minitransformer on PyPI)."""
    from minitransformer.backend import devices
    from minitransformer.cli import main
    from minitransformer.errors import install_hint

    assert backend.normalize_device("gpu") == "cuda:0"
    monkeypatch.setitem(sys.modules, "cupy", None)  # CuPy not importable
    with pytest.raises(DeviceError, match=r"^device 'gpu' \(CUDA\) needs CuPy"):
        devices.check_device("gpu")
    assert main(["train", "copy", "--device", "gpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "minitransformer train: error: --device gpu (CUDA) needs CuPy, which is not installed: "
        'pip install -e ".[gpu]" (CUDA 13; pip install -e ".[gpu-cuda12]" for CUDA 12)'
    ), err
    assert install_hint("torch") == 'pip install -e ".[torch]"'


def test_every_install_hint_names_a_clone_install():
    """``pip install 'minitransformer[gpu]'`` works only beside an editable install: every
    hint in the package is errors.install_hint's ``pip install -e ".[gpu]"``."""
    from pathlib import Path

    package = Path(mt.__file__).parent
    wrong = [
        f"{path.relative_to(package)}:{number}"
        for path in package.rglob("*.py")
        if path.name != "errors.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "minitransformer[" in line
    ]
    assert wrong == []


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


@pytest.mark.parametrize("kind", ["memmap", "subclass"])
def test_numpy_subclasses_mix_with_plain_arrays(tmp_path, kind):
    """An ndarray subclass (np.memmap, a user's own) is NumPy on the CPU: it combines with
    plain arrays in either order (was a StopIteration out of the device check)."""

    class Tagged(np.ndarray):
        pass

    if kind == "memmap":
        odd = np.memmap(tmp_path / "x.bin", dtype="float64", mode="w+", shape=(3,))
        odd[:] = [1.0, 2.0, 3.0]
    else:
        odd = np.array([1.0, 2.0, 3.0]).view(Tagged)
    for a, b in ((odd, np.ones(3)), (np.ones(3), odd)):
        x, y = mt.tensor(a, requires_grad=True), mt.tensor(b, requires_grad=True)
        (x * y).sum().backward()
        np.testing.assert_array_equal((x + y).numpy(), np.asarray(a) + np.asarray(b))
        np.testing.assert_array_equal(x.grad, np.asarray(b))


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
    monkeypatch.setattr(host, "_CPUS", 8)  # os.cpu_count(), read once
    monkeypatch.setattr(host._cpu_load, "sample", lambda: 0.6)
    big = host.SMALL_GEMM + 1
    assert host.gemm_threads(8, 10) == 1  # small products: one thread
    assert host.gemm_threads(8, big) == 7  # 7.4 cores free
    assert host.gemm_threads(4, big) == 4
    monkeypatch.setattr(host._cpu_load, "sample", lambda: 7.9)
    assert host.gemm_threads(8, big) == 1
    assert host.gemm_threads(1, big) == 1


# ----------------------------------------------------------------------------- counter-based draws


@pytest.mark.parametrize("device", ["cpu", "strict:device1"])
def test_dropout_draws_are_counter_based_and_resume_exactly(device):
    if device.startswith("strict"):
        pytest.importorskip("array_api_strict")
    g = backend.Generator(7, device)
    first = [backend.to_numpy(g.random((4, 5))) for _ in range(3)]
    assert g.counter == 3
    again = backend.Generator(7, device)
    again.set_state(json.loads(json.dumps(g.state())))  # JSON round trip, as in a checkpoint
    np.testing.assert_array_equal(backend.to_numpy(again.random((4, 5))),
                                  backend.to_numpy(g.random((4, 5))))  # fmt: skip
    fresh = backend.Generator(7, device)
    np.testing.assert_array_equal(backend.to_numpy(fresh.random((4, 5))), first[0])
    assert not np.array_equal(first[0], first[1])  # each draw is new
    other_seed = backend.to_numpy(backend.Generator(8, device).random((4, 5)))
    assert not np.array_equal(other_seed, first[0])


def test_counter_uniform_is_uniform_and_uncorrelated():
    xs = pytest.importorskip("array_api_strict")
    u = backend.to_numpy(backend.counter_uniform(xs, "strict:device1", (400, 500), 1, 2))
    assert u.dtype == np.float32 and 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.std() - (1 / 12) ** 0.5) < 0.005
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    assert counts.min() > 0.95 * u.size / 20  # flat
    neighbours = np.corrcoef(u.ravel()[:-1], u.ravel()[1:])[0, 1]
    nxt = backend.to_numpy(backend.counter_uniform(xs, "strict:device1", (400, 500), 1, 3))
    across = np.corrcoef(u.ravel(), nxt.ravel())[0, 1]
    assert abs(neighbours) < 0.01 and abs(across) < 0.01


@pytest.mark.parametrize("device", ["cpu", "strict:device1"])
def test_keep_mask_keeps_one_minus_p_and_repeats_from_its_counter(device):
    if device != "cpu":
        pytest.importorskip("array_api_strict")
    g = backend.Generator(3, device)
    masks = [backend.to_numpy(g.keep_mask((300, 400), p)) for p in (0.1, 0.5, 0.0)]
    assert all(m.dtype == np.bool_ for m in masks)
    assert abs(masks[0].mean() - 0.9) < 0.005 and abs(masks[1].mean() - 0.5) < 0.005
    assert masks[2].all()  # p = 0 keeps everything
    assert g.counter == 3
    again = backend.Generator(3, device)
    np.testing.assert_array_equal(backend.to_numpy(again.keep_mask((300, 400), 0.1)), masks[0])


@pytest.mark.parametrize("shape", [(3, 5), (4,), (0, 2)])
def test_the_cpu_keep_mask_is_pcg64s_raw_halves_against_the_threshold(shape):
    """On the CPU, draw c of seed s keeps element i where the i-th 32-bit half (low half of
    each 64-bit word first) of PCG64([s, c])'s raw output >= round(p 2^32): written here
    with integer arithmetic, not a byte view, so the bits cannot depend on the machine."""
    g = backend.Generator(11, "cpu")
    g.counter = 4
    mask = g.keep_mask(shape, 0.3)
    n = int(np.prod(shape))
    words = [int(w) for w in np.random.PCG64([11, 4]).random_raw((n + 1) // 2)]
    halves = [h for w in words for h in (w & 0xFFFFFFFF, w >> 32)][:n]
    expected = np.array([h >= backend.random.keep_threshold(0.3) for h in halves], dtype=bool)
    np.testing.assert_array_equal(mask, expected.reshape(shape))
    assert g.counter == 5


def test_a_generator_state_of_an_older_version_still_loads():
    g = backend.Generator(5)
    old = {"device": "cpu", "seed": 5, "bit_generator": None}  # before the counter existed
    g.set_state(old)
    assert g.counter == 0 and g.seed == 5


def test_importing_the_library_changes_nothing_process_wide():
    """No allocator or BLAS-thread tuning at import or in plain use: only tune_host() (the
    CLI's call) does that."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from threadpoolctl import threadpool_info\n"
        "before = [p['num_threads'] for p in threadpool_info()]\n"
        "import minitransformer as mt\n"
        "from minitransformer.backend import host\n"
        "a = np.ones((64, 64), np.float32)\n"
        "host.matmul(a, a)\n"
        "mt.backend.namespace(a).matmul(a, a)\n"
        "assert not mt.fast.enabled()\n"
        "after = [p['num_threads'] for p in threadpool_info()]\n"
        "assert before == after, (before, after)\n"
        "assert host.malloc_tuned is False and host.gemm_tuning is False\n"
        "print('ok')\n"
    )
    pytest.importorskip("threadpoolctl")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


def test_a_model_placed_on_a_gpu_makes_that_gpu_current(monkeypatch):
    """CuPy allocates and the fused kernels launch on the current GPU: Module.to("cuda:N")
    makes GPU N current (a fake CuPy here), so a model on cuda:1 does not launch on GPU 0."""
    import types

    from minitransformer.backend import devices

    used = []
    gpu = types.SimpleNamespace(
        Device=lambda i: types.SimpleNamespace(use=lambda: used.append(i))
    )  # fmt: skip
    monkeypatch.setattr(devices, "cupy_module", lambda: types.SimpleNamespace(cuda=gpu))
    backend.make_current("cuda:1")
    backend.make_current("cpu")  # nothing to make current
    backend.make_current("strict:device1")
    assert used == [1]
    monkeypatch.setattr(backend, "move", lambda a, device: a)  # no GPU memory here
    mt.nn.Linear(2, 2).to("cuda:3")
    assert used == [1, 3]


def test_a_device_is_normalized_where_it_enters_not_once_per_array(tmp_path):
    """Building a tiny Trainer (model, optimizer, data) normalizes its device a handful of
    times, where the device enters (TrainConfig, Module.to, ...), not once per parameter and
    again in every helper below (it was 319 calls)."""
    import sys

    from minitransformer.backend import devices
    from minitransformer.train import TrainConfig, Trainer

    code, calls = devices.normalize_device.__code__, []

    def hook(frame, event, arg):  # noqa: ARG001
        if event == "call" and frame.f_code is code:
            calls.append(1)

    cfg = TrainConfig(task="copy", steps=1, out=str(tmp_path / "r"), progress=False, plots=False)
    sys.setprofile(hook)
    try:
        Trainer(cfg)
    finally:
        sys.setprofile(None)
    assert 1 <= len(calls) <= 8, len(calls)


def test_the_library_of_an_array_is_told_one_way():
    from minitransformer.backend import library_of

    assert library_of(np.zeros(2)) == library_of(np.float32(1.0)) == "numpy"
    assert library_of([1.0]) is None and library_of(None) is None
    strict = pytest.importorskip("array_api_strict")
    assert library_of(strict.asarray([1.0])) == "strict"
    assert backend.namespace(strict.asarray([1.0])) is strict
