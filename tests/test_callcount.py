"""What a training step costs in calls, pinned so that a regression fails CI.

On a GPU every array call is a kernel launch (~12 µs), and on any device each Python call is
interpreter time, so at small sizes these counts, not the arithmetic, set a step's speed.
Measured for one tiny copy-task step (``python -m minitransformer.tools.callcount``).

Two kinds of budget (issue 43, "the learner's house"):

- **The step as the CLI runs it** (the fast tier on) is pinned tight, about 5% above what it
  measures, so that a change that costs calls is seen and argued.
- **The reference** (what a notebook runs, and what the strict stand-in counts array calls
  of) gets a loose ceiling, about 1.5x: it must not regress badly, but it is written to be
  read, not tuned. The engine and the ops once carried idioms whose only reason was this
  count (a heap over creation numbers instead of lesson 01's topological sort, ``type(x) in
  TENSOR_TYPES`` instead of ``isinstance``, arrays' shapes read past the Tensor's, a
  14-line in-place Adam, attention's query checked only when it is not the key); they are
  gone. That raised the Python calls of a tiny step from 4,468 to 8,205 (tier on; cProfile
  counts ``isinstance``, ``list.append`` and property reads too) at no cost the bench could
  tell from its noise (docs/speed.md), and the array calls stayed at about 1,260.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.optim import SGD, Adam
from minitransformer.tools.callcount import count_step_calls

PYTHON_CALLS_BUDGET = 8_700  # the fast tier on, as the CLI runs: measured 8,205
PYTHON_CALLS_REFERENCE_BUDGET = 12_000  # the reference ops, as a notebook runs: 8,275
ARRAY_CALLS_BUDGET = 1_900  # the reference on the strict stand-in: 1,258


def test_one_training_step_stays_within_its_call_budget():
    pytest.importorskip("array_api_strict")
    counts = count_step_calls()
    assert counts["python_calls"] <= PYTHON_CALLS_BUDGET, counts["python_calls"]
    reference = counts["python_calls_reference"]
    assert reference <= PYTHON_CALLS_REFERENCE_BUDGET, reference
    assert counts["array_calls"] <= ARRAY_CALLS_BUDGET, (
        counts["array_calls"],
        list(counts["array_calls_by_name"].items())[:10],
    )


def _strict_calls(fn) -> int:
    """Array calls made by ``fn()`` into array-api-strict (attribute reads excluded)."""
    from minitransformer.tools.callcount import _NOT_CALLS

    n = 0

    def hook(frame, event, arg):  # noqa: ARG001
        nonlocal n
        if event != "call" or not frame.f_globals.get("__name__", "").startswith(
            "array_api_strict"
        ):
            return
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if not caller.startswith("array_api_strict") and frame.f_code.co_name not in _NOT_CALLS:
            n += 1

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n


@pytest.mark.parametrize("make", [Adam, lambda ps: SGD(ps, lr=0.1, momentum=0.9)])
def test_an_optimizer_step_costs_the_same_calls_for_3_or_60_parameters(make):
    """The multi-tensor design: clip + step are a handful of array calls, whatever the
    number of parameters (only the one concatenation that gathers gradients grows)."""
    pytest.importorskip("array_api_strict")
    rng = np.random.default_rng(0)
    costs = {}
    for n in (3, 60):
        params = [mt.tensor(rng.standard_normal((4, 3)), device="strict:device1",
                            requires_grad=True) for _ in range(n)]  # fmt: skip
        opt = make(params)
        for p in params:
            p.grad = mt.backend.asarray(rng.standard_normal((4, 3)), device="strict:device1")
        opt.gather_grads()  # one concat; what follows is per group, not per parameter

        def clip_and_step(opt=opt):
            norm = opt.clip_grad_norm(1.0)
            opt.step(apply_if=norm < 1e9)

        clip_and_step()  # the first step makes the state
        for p in params:
            p.grad = mt.backend.asarray(rng.standard_normal((4, 3)), device="strict:device1")
        opt.gather_grads()
        costs[n] = _strict_calls(clip_and_step)
    assert costs[3] == costs[60] and costs[3] <= 40, costs


# ----------------------------------------------------------------------------- --device cuda


def test_callcount_on_a_gpu_without_one_says_so_in_one_line(capsys):
    from minitransformer.tools.callcount import main

    if mt.cuda_available():
        pytest.skip("a GPU is present")
    assert main(["--device", "cuda:0"]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("callcount --device cuda:0: no GPU"), out


@pytest.mark.parametrize("device", ["tpu", "strict:device1"])
def test_callcount_refuses_a_device_it_cannot_count_on(device, capsys):
    from minitransformer.tools.callcount import main

    with pytest.raises(SystemExit) as e:
        main(["--device", device])
    assert e.value.code == 2 and "device" in capsys.readouterr().err


def test_the_gpu_count_refuses_a_cpu_device():
    from minitransformer.tools.callcount import count_cuda_step_calls

    with pytest.raises(mt.errors.DeviceError, match="not a GPU"):
        count_cuda_step_calls("cpu")


def test_the_launch_counter_says_why_it_cannot_count(monkeypatch):
    """Without libcupti (or a driver) the launch count is None with a reason, never an error."""
    from minitransformer.tools import cupti

    monkeypatch.setattr(cupti, "libcupti", lambda: "libcupti not found")
    with cupti.LaunchCounter() as d:
        pass
    assert d.launches is None and d.copies is None and d.why == "libcupti not found"


@pytest.mark.gpu
@pytest.mark.parametrize("switch", ["0", "1"])
def test_a_gpu_step_is_counted(kernels_switch, switch):
    from minitransformer.tools.callcount import count_cuda_step_calls

    kernels_switch(switch)  # and back to the session's mode after the test
    counts = count_cuda_step_calls("cuda:0")
    assert counts["cuda_kernels"] is (switch == "1")
    assert counts["cupy_calls"] > 0 and counts["allocations"] > 0, counts
    if counts["kernel_launches"] is not None:
        assert counts["kernel_launches"] > 0, counts


@pytest.mark.gpu
def test_the_launch_counter_counts_cublas_and_cub_launches_too():
    """10 matmuls (cuBLAS, launched through the CUDA runtime), 10 adds (CuPy's own kernels,
    through the driver) and 10 sums (CUB): each counted at least 10 times."""
    from minitransformer.tools.callcount import probe_launches

    probe = probe_launches("cuda:0")
    if probe["matmul"]["kernels"] is None:
        pytest.skip(f"CUPTI cannot count here: {probe['matmul']['why_not']}")
    assert all(probe[k]["kernels"] >= 10 for k in ("matmul", "add", "sum")), probe
