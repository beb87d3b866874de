"""Optimizers, the warm-up schedule and gradient clipping: PyTorch as the oracle, exact
resume from a state dict, every backend (the strict stand-in keeps state on its device)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer.errors import ConfigError, DeviceError, ShapeError
from minitransformer.optim import SGD, Adam, NoamSchedule, clip_grad_norm, grads_finite
from minitransformer.runtime.checkpoint import load_checkpoint, save_checkpoint

SHAPES = [(3, 4), (5,), (2, 3, 2)]


def _params(device="cpu", dtype="float64", seed=0):
    rng = np.random.default_rng(seed)
    return [
        mt.tensor(rng.standard_normal(s), dtype=dtype, device=device, requires_grad=True)
        for s in SHAPES
    ]


def _grads(steps, seed=1):
    """A fixed sequence of gradients: grads[t][i] for step t, parameter i."""
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s) for s in SHAPES] for _ in range(steps)]


def _run(opt, params, grads, sched=None):
    """Apply the given gradients step by step; return the host parameters after each step."""
    trajectory = []
    for step_grads in grads:
        opt.zero_grad()
        for p, g in zip(params, step_grads, strict=True):
            p.grad = backend.asarray(g, dtype=backend.dtype_name(p.dtype), device=p.device)
        opt.step()
        if sched is not None:
            sched.step()
        trajectory.append([p.numpy().copy() for p in params])
    return trajectory


def _torch_run(torch, make_opt, grads, seed=0, lrs=None):
    """PyTorch's optimizer ``make_opt(params)`` over the same start and gradients; return
    the trajectory, the optimizer and its parameters. ``lrs[n]``: the rate of update n + 1."""
    params = [torch.tensor(p.numpy(), requires_grad=True) for p in _params(seed=seed)]
    opt = make_opt(params)
    trajectory = []
    for n, step_grads in enumerate(grads):
        if lrs is not None:
            for group in opt.param_groups:
                group["lr"] = lrs[n]
        opt.zero_grad()
        for p, g in zip(params, step_grads, strict=True):
            p.grad = torch.tensor(g)
        opt.step()
        trajectory.append([p.detach().numpy().copy() for p in params])
    return trajectory, opt, params


def _assert_close(a, b, atol=1e-12):
    for step_a, step_b in zip(a, b, strict=True):
        for x, y in zip(step_a, step_b, strict=True):
            np.testing.assert_allclose(x, y, rtol=0, atol=atol)


def _assert_adam_state_matches_torch(opt, topt, tparams):
    """Our Adam/AdamW moments and per-parameter step counts equal PyTorch's."""
    for i, tp in enumerate(tparams):
        st = topt.state[tp]
        np.testing.assert_allclose(opt.state["m"][i], st["exp_avg"].numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(opt.state["v"][i], st["exp_avg_sq"].numpy(), rtol=0, atol=1e-12)
        assert opt.param_steps[i] == int(st["step"])


# ----------------------------------------------------------------------------- PyTorch oracle


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_adam_matches_torch(weight_decay):
    torch = pytest.importorskip("torch")
    grads = _grads(20)
    kw = dict(lr=1e-2, betas=(0.9, 0.98), eps=1e-9, weight_decay=weight_decay)
    want, topt, tparams = _torch_run(torch, lambda ps: torch.optim.Adam(ps, **kw), grads)
    params = _params()
    opt = Adam(params, **kw)
    _assert_close(_run(opt, params, grads), want)
    _assert_adam_state_matches_torch(opt, topt, tparams)


def test_adam_defaults_are_the_papers():
    opt = Adam(_params())
    assert opt.betas == (0.9, 0.98) and opt.eps == 1e-9 and opt.weight_decay == 0.0


@pytest.mark.parametrize("momentum, weight_decay", [(0.0, 0.0), (0.9, 0.0), (0.9, 1e-3)])
def test_sgd_matches_torch(momentum, weight_decay):
    torch = pytest.importorskip("torch")
    grads = _grads(15)
    kw = dict(lr=0.05, momentum=momentum, weight_decay=weight_decay)
    want, *_ = _torch_run(torch, lambda ps: torch.optim.SGD(ps, **kw), grads)
    params = _params()
    _assert_close(_run(SGD(params, **kw), params, grads), want)


@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(max_norm):
    torch = pytest.importorskip("torch")
    grads = _grads(1)[0]
    tparams = [torch.zeros(s, dtype=torch.float64, requires_grad=True) for s in SHAPES]
    for p, g in zip(tparams, grads, strict=True):
        p.grad = torch.tensor(g)
    want = float(torch.nn.utils.clip_grad_norm_(tparams, max_norm))
    params = _params()
    for p, g in zip(params, grads, strict=True):
        p.grad = g.copy()
    got = clip_grad_norm(iter(params), max_norm)
    assert math.isclose(got, want, rel_tol=1e-14)
    for p, tp in zip(params, tparams, strict=True):
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=1e-14, atol=0)


# ----------------------------------------------------------------------------- fused vs reference


def adam_runs(dtype: str, weight_decay: float, ok: bool | None) -> tuple[dict, np.ndarray]:
    """Six steps of the reference Adam update and of fast/numpy/adam.py's (whatever kernel
    it takes) from one start p0 of 40 values: ({"reference": (p, m, v), "fused": (p, m, v)},
    p0). ok: the gate (None: none); False also puts a NaN in the third gradient."""
    from minitransformer.fast.numpy import adam as numpy_twins
    from minitransformer.optim.adam import adam_update

    rng = np.random.default_rng(3)
    p0 = rng.standard_normal(40).astype(dtype)
    grads = [rng.standard_normal(40).astype(dtype) for _ in range(6)]
    if ok is False:
        grads[2][5] = np.nan  # a step the gate skips changes nothing
    flag = None if ok is None else np.asarray(ok)
    runs = {}
    for name, update in [("reference", adam_update), ("fused", numpy_twins.adam_update)]:
        p, m, v = p0.copy(), np.zeros_like(p0), np.zeros_like(p0)
        for t, g in enumerate(grads, start=1):
            update(p, g, m, v, lr=1e-2, betas=(0.9, 0.98), eps=1e-9,
                   weight_decay=weight_decay, t=t, ok=flag)  # fmt: skip
        runs[name] = (p, m, v)
    return runs, p0


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-6), ("float64", 1e-13)])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("ok", [None, True, False])
def test_fused_numpy_adam_matches_the_reference_update(dtype, tol, weight_decay, ok):
    """fast/numpy/adam.py's adam_update (one reused temporary, out=) gives the numbers of the
    four-line reference update over several steps, with and without weight decay, with the
    ok gate true or false (false: nothing changes, even for a NaN gradient)."""
    runs, p0 = adam_runs(dtype, weight_decay, ok)
    for ref, fused in zip(runs["reference"], runs["fused"], strict=True):
        assert ref.dtype == fused.dtype == np.dtype(dtype)
        np.testing.assert_allclose(fused, ref, rtol=tol, atol=tol)
    if ok is False:
        np.testing.assert_array_equal(runs["reference"][0], p0)
        np.testing.assert_array_equal(runs["fused"][0], p0)


@pytest.mark.parametrize("shape", [(2 * 16 + 5,), (16,), (6, 9)])
def test_fused_numpy_adam_in_chunks_matches_the_reference(shape, monkeypatch):
    """A flat buffer longer than ADAM_CHUNK is updated a chunk at a time (here chunks of 16:
    two whole ones and a rest); one chunk's length and a 2-D array go in one piece; every
    element gets the reference's numbers over several steps, weight decay included."""
    from minitransformer.fast.numpy import adam as numpy_twins
    from minitransformer.optim.adam import adam_update

    monkeypatch.setattr(numpy_twins, "ADAM_CHUNK", 16)
    passes = []
    one_pass = numpy_twins._adam_pass
    monkeypatch.setattr(
        numpy_twins, "_adam_pass", lambda p, *a: (passes.append(p.size), one_pass(p, *a))
    )
    rng = np.random.default_rng(4)
    p0 = rng.standard_normal(shape)
    runs = {}
    for name, update in [("reference", adam_update), ("fused", numpy_twins.adam_update)]:
        p, m, v = p0.copy(), np.zeros_like(p0), np.zeros_like(p0)
        for t in range(1, 4):
            g = np.random.default_rng(t).standard_normal(shape)
            update(p, g, m, v, lr=1e-2, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.01, t=t)
        runs[name] = (p, m, v)
    for ref, fused in zip(runs["reference"], runs["fused"], strict=True):
        np.testing.assert_allclose(fused, ref, rtol=1e-13, atol=1e-13)
    assert passes[:3] == ([16, 16, 5] if shape == (37,) else [p0.size] * 3)


def test_adam_with_and_without_its_fast_path_gives_the_same_steps():
    """With the fast tier on the optimizer's step takes the fused update on NumPy (and it
    is what runs); by default it runs the reference: the same trajectory."""
    from minitransformer import fast
    from minitransformer.fast.numpy import adam as numpy_twins

    grads = _grads(8)
    params = _params()
    calls = []
    fused = numpy_twins.adam_update

    def counted(*args, **kwargs):
        calls.append(1)
        return fused(*args, **kwargs)

    counted.dtypes = None
    with fast.switched_on():
        mt.function.TWINS[(mt.optim.adam.adam_update, np.ndarray)] = counted
        want = _run(Adam(params, lr=1e-2, weight_decay=0.01), params, grads)
    assert calls
    calls.clear()
    params = _params()
    got = _run(Adam(params, lr=1e-2, weight_decay=0.01), params, grads)
    assert not calls
    _assert_close(got, want, atol=1e-13)


# ----------------------------------------------------------------------------- clipping


def test_clip_grad_norm_shared_grad_array_scaled_once():
    a, b = _params()[:2]
    g = np.full(5, 3.0)
    a.grad = own = np.full((3, 4), 4.0)
    a._grad_owned = True  # autograd made this array for a alone: scaled in place
    b.grad = g
    c = mt.tensor(np.zeros(5), requires_grad=True)
    c.grad = g  # the same array as b.grad (autograd may hand one array to two inputs)
    total = clip_grad_norm([a, b, c], 1.0)
    assert math.isclose(total, math.sqrt(16 * 12 + 9 * 5 + 9 * 5))
    assert a.grad is own
    np.testing.assert_array_equal(g, 3.0)  # the shared array itself is left alone
    coef = 1.0 / (total + 1e-6)
    np.testing.assert_allclose(b.grad, 3.0 * coef, rtol=1e-15)
    np.testing.assert_allclose(c.grad, 3.0 * coef, rtol=1e-15)
    np.testing.assert_allclose(a.grad, 4.0 * coef, rtol=1e-15)


def test_clip_grad_norm_nonfinite_is_returned_and_grads_untouched():
    params = _params()
    for p in params:
        p.grad = np.ones(p.shape)
    params[1].grad[2] = np.nan
    assert math.isnan(clip_grad_norm(params, 1.0))
    assert not grads_finite(params)
    np.testing.assert_array_equal(params[0].grad, 1.0)
    params[1].grad[2] = np.inf
    assert clip_grad_norm(params, 1.0) == math.inf
    params[1].grad[2] = 1.0
    assert grads_finite(params)


def test_clip_and_finite_without_grads():
    params = _params()
    assert clip_grad_norm(params, 1.0) == 0.0
    assert grads_finite(params)


# ----------------------------------------------------------------------------- schedule


def test_noam_schedule_values_and_peak():
    d_model, warmup = 512, 4000
    sched = NoamSchedule(Adam(_params()), d_model, warmup)
    for step in [1, 2, 100, 3999, 4000, 4001, 10_000, 100_000]:
        want = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert math.isclose(sched.lr_at(step), want, rel_tol=1e-15)
    rates = [sched.lr_at(s) for s in range(1, 3 * warmup)]
    assert int(np.argmax(rates)) + 1 == warmup
    assert math.isclose(sched.peak_lr, (d_model * warmup) ** -0.5, rel_tol=1e-12)
    assert math.isclose(sched.peak_lr, 6.9877e-4, rel_tol=1e-4)  # the base model's peak
    assert sched.lr_at(0) == 0.0
    with pytest.raises(ValueError):
        sched.lr_at(-1)


def test_noam_schedule_drives_optimizer_lr():
    opt = Adam(_params(), lr=123.0)
    sched = NoamSchedule(opt, d_model=64, warmup=10, factor=2.0)
    assert opt.lr == sched.lr_at(1)  # primed for update 1
    for n in range(1, 30):
        assert opt.lr == sched.lr_at(n)  # update n runs with lr_at(n)
        assert sched.step() == sched.lr_at(n + 1)
    assert sched.step_num == 29


def test_noam_factor_for_peak():
    factor = NoamSchedule.factor_for_peak(1e-3, 128, 500)
    sched = NoamSchedule(SGD(_params(), lr=0.0), 128, 500, factor)
    assert math.isclose(sched.peak_lr, 1e-3, rel_tol=1e-12)
    assert max(sched.lr_at(s) for s in range(1, 2000)) == sched.peak_lr


def test_noam_state_dict_round_trip():
    opt = Adam(_params())
    sched = NoamSchedule(opt, 32, 7, 0.5)
    for _ in range(5):
        sched.step()
    opt2 = Adam(_params())
    sched2 = NoamSchedule(opt2, 999, 1)
    sched2.load_state_dict(sched.state_dict())
    assert (sched2.d_model, sched2.warmup, sched2.factor, sched2.step_num) == (32, 7, 0.5, 5)
    assert opt2.lr == opt.lr == sched.lr_at(6)


def test_noam_rejects_bad_settings():
    with pytest.raises(ConfigError):
        NoamSchedule(Adam(_params()), d_model=0)
    with pytest.raises(ConfigError):
        NoamSchedule(Adam(_params()), d_model=8, warmup=0)


# ----------------------------------------------------------------------------- resume


@pytest.mark.parametrize("make_opt", [Adam, lambda ps: SGD(ps, lr=0.1, momentum=0.9)])
def test_state_dict_resume_is_exact(make_opt, tmp_path):
    grads = _grads(12)
    params = _params()
    opt = make_opt(params)
    sched = NoamSchedule(opt, d_model=16, warmup=4) if isinstance(opt, Adam) else None
    _run(opt, params, grads[:6], sched)
    arrays, meta = opt.state_dict(host=True)
    saved_params = [p.numpy().copy() for p in params]
    sched_state = sched.state_dict() if sched else None
    want = _run(opt, params, grads[6:], sched)  # the uninterrupted run

    # through a real checkpoint file: arrays prefixed, metadata nested
    path = save_checkpoint(
        tmp_path / "ckpt.npz",
        {**{f"optim.{k}": v for k, v in arrays.items()}, "param.0": saved_params[0]},
        {"optim": meta, "schedule": sched_state},
    )
    loaded, lmeta = load_checkpoint(path)
    params2 = [mt.tensor(a, requires_grad=True) for a in saved_params]
    opt2 = make_opt(params2)
    opt2.load_state_dict(
        {k[len("optim.") :]: v for k, v in loaded.items() if k.startswith("optim.")},
        lmeta["optim"],
    )
    sched2 = None
    if sched:
        sched2 = NoamSchedule(opt2, d_model=16, warmup=4)
        sched2.load_state_dict(lmeta["schedule"])
    got = _run(opt2, params2, grads[6:], sched2)
    for step_a, step_b in zip(got, want, strict=True):
        for x, y in zip(step_a, step_b, strict=True):
            np.testing.assert_array_equal(x, y)  # bit for bit
    assert opt2.step_count == opt.step_count == 12


def test_state_dict_arrays_are_copies_and_named_by_index():
    params = _params()
    opt = Adam(params)
    _run(opt, params, _grads(2))
    arrays, meta = opt.state_dict()
    assert sorted(arrays) == sorted(f"{s}.{i}" for s in "mv" for i in range(3))
    assert meta == {
        "type": "Adam",
        "step": 2,
        "num_params": 3,
        "lr": 1e-3,
        "betas": [0.9, 0.98],
        "eps": 1e-9,
        "weight_decay": 0.0,
        "param_steps": [2, 2, 2],
    }
    before = arrays["m.0"].copy()
    _run(opt, params, _grads(1, seed=5))
    np.testing.assert_array_equal(arrays["m.0"], before)
    # loading copies too: the caller's arrays are not updated by later steps
    opt.load_state_dict(arrays, meta)
    _run(opt, params, _grads(1, seed=6))
    np.testing.assert_array_equal(arrays["m.0"], before)


def test_load_state_dict_rejects_mismatches():
    params = _params()
    opt = Adam(params)
    _run(opt, params, _grads(1))
    arrays, meta = opt.state_dict()
    with pytest.raises(ConfigError):
        SGD(_params(), lr=0.1).load_state_dict(arrays, meta)
    with pytest.raises(ConfigError):
        Adam(_params()[:2]).load_state_dict(arrays, meta)
    with pytest.raises(ConfigError):
        Adam(_params()).load_state_dict({"optim.m.0": arrays["m.0"]}, meta)
    with pytest.raises(ShapeError):
        Adam(_params()).load_state_dict({"m.0": arrays["m.1"]}, meta)


def test_rejects_bad_hyperparameters_and_params():
    with pytest.raises(ConfigError):
        Adam([])
    with pytest.raises(ConfigError):
        Adam(_params(), betas=(0.9, 1.0))
    with pytest.raises(ConfigError):
        SGD(_params(), lr=-1.0)
    with pytest.raises(TypeError):
        Adam([np.zeros(3)])
    p = _params()[0]
    with pytest.raises(ConfigError):
        Adam([p, p])


def test_zero_grad_and_params_from_a_generator():
    params = _params()
    opt = SGD((p for p in params), lr=0.1)
    assert opt.params == params
    for p in params:
        p.grad = np.ones(p.shape)
    opt.zero_grad()
    assert all(p.grad is None for p in params)
    opt.step()  # no gradients: nothing moves
    assert opt.step_count == 1


def test_params_without_grad_are_skipped():
    params = _params()
    opt = Adam(params, lr=0.1)
    before = params[1].numpy().copy()
    params[0].grad = np.ones(SHAPES[0])
    opt.step()
    np.testing.assert_array_equal(params[1].numpy(), before)
    assert opt.state["m"][1] is None and opt.param_steps == [1, 0, 0]


def test_advance_counts_a_step_as_step_does_and_uncounted_puts_the_counts_back():
    """``advance`` is ``step``'s counting (what a CUDA graph's replay calls): the step count,
    and each parameter's where it has a gradient (all: None), each group's t returned;
    inside ``uncounted`` (a capture) steps leave the counts as they were, updates done."""
    params = _params()
    stepped, advanced = Adam(params, lr=0.1), Adam(_params(), lr=0.1)
    params[0].grad = np.ones(SHAPES[0])
    stepped.step()
    assert advanced.advance([[True, False, False]]) == [1]
    assert (stepped.step_count, stepped.param_steps) == (advanced.step_count, [1, 0, 0])
    assert advanced.param_steps == [1, 0, 0] and advanced.advance() == [2]
    assert advanced.step_count == 2 and advanced.param_steps == [2, 1, 1]
    before = params[0].numpy().copy()
    with stepped.uncounted():
        stepped.step()
        assert stepped.step_count == 2
    assert stepped.step_count == 1 and stepped.param_steps == [1, 0, 0]
    assert not np.array_equal(params[0].numpy(), before)  # the update itself was made


# ----------------------------------------------------------------------------- devices and dtypes


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_optimizer_on_every_device(device, kind):
    grads = _grads(8)
    make = {"adam": lambda ps: Adam(ps, lr=1e-2), "sgd": lambda ps: SGD(ps, 0.1, momentum=0.9)}
    ref_params = _params()
    want = _run(make[kind](ref_params), ref_params, grads)
    params = _params(device=device)
    opt = make[kind](params)
    arrays_before = [p.data for p in params]  # views into the optimizer's flat buffer
    got = _run(opt, params, grads)
    _assert_close(got, want, atol=1e-12)
    for p, a in zip(params, arrays_before, strict=True):
        assert p.device == device and p.data is a  # updated in place, stayed put
    for per_param in opt.state.values():
        for a in per_param:
            if a is not None:
                assert backend.device_of(a) == device
    arrays, _ = opt.state_dict()
    assert all(backend.device_of(a) == device for a in arrays.values())
    host, _ = opt.state_dict(host=True)
    assert all(isinstance(a, np.ndarray) for a in host.values())


def test_clip_and_finite_on_every_device(device):
    grads = _grads(1)[0]
    ref = _params()
    params = _params(device=device)
    for p, q, g in zip(params, ref, grads, strict=True):
        p.grad = backend.asarray(g, device=device)
        q.grad = g.copy()
    assert math.isclose(clip_grad_norm(params, 0.5), clip_grad_norm(ref, 0.5), rel_tol=1e-14)
    for p, q in zip(params, ref, strict=True):
        assert backend.device_of(p.grad) == device
        np.testing.assert_allclose(backend.to_numpy(p.grad), q.grad, rtol=1e-14)
    assert grads_finite(params)


def test_load_host_state_onto_strict_device_and_to():
    pytest.importorskip("array_api_strict")
    dev = "strict:device1"
    grads = _grads(8)
    cpu_params = _params()
    opt = Adam(cpu_params, lr=1e-2)
    _run(opt, cpu_params, grads[:4])
    arrays, meta = opt.state_dict(host=True)
    start = [p.numpy().copy() for p in cpu_params]
    want = _run(opt, cpu_params, grads[4:])

    # a checkpoint's host arrays loaded by an optimizer whose params sit on the device
    params = [mt.tensor(a.copy(), device=dev, requires_grad=True) for a in start]
    opt2 = Adam(params)
    opt2.load_state_dict(arrays, meta)
    assert all(backend.device_of(a) == dev for a in opt2.state["m"])
    _assert_close(_run(opt2, params, grads[4:]), want)

    # moving model and optimizer mid-run with .to(device)
    params3 = [mt.tensor(a.copy(), requires_grad=True) for a in start]
    opt3 = Adam(params3)
    opt3.load_state_dict(arrays, meta)
    for p in params3:
        p.data = backend.to_device(p.data, dev)
    with pytest.raises(DeviceError, match=r"optimizer\.to"):
        _run(opt3, params3, grads[4:5])
    opt3.load_state_dict(arrays, meta)  # undo the refused step's counter
    assert opt3.to(dev) is opt3
    _assert_close(_run(opt3, params3, grads[4:]), want)


@pytest.mark.parametrize("make_opt", [Adam, lambda ps: SGD(ps, lr=0.1, momentum=0.9)])
def test_float32_params_keep_float32_state(device, make_opt):
    params = _params(device=device, dtype="float32")
    opt = make_opt(params)
    _run(opt, params, _grads(3))
    assert all(backend.dtype_name(p.dtype) == "float32" for p in params)
    for per_param in opt.state.values():
        assert all(backend.dtype_name(a.dtype) == "float32" for a in per_param)
    arrays, meta = opt.state_dict(host=True)
    assert all(a.dtype == np.float32 for a in arrays.values())
    opt.load_state_dict({k: v.astype(np.float64) for k, v in arrays.items()}, meta)
    for per_param in opt.state.values():
        assert all(backend.dtype_name(a.dtype) == "float32" for a in per_param)


def test_backward_writes_gradients_straight_into_the_flat_buffer():
    """After the optimizer adopts the parameters, a fresh gradient goes into its slot of the
    flat gradient buffer (no second copy of all gradients is alive at once)."""
    a = mt.tensor(np.ones((2, 3)), requires_grad=True)
    b = mt.tensor(np.ones(4), requires_grad=True)
    opt = Adam([a, b], lr=0.1)
    opt.gather_grads()  # lays out the buffers
    opt.zero_grad()
    ((a * 2.0).sum() + (b * 3.0).sum()).backward()
    (flat,) = opt.gather_grads()
    assert np.shares_memory(a.grad, flat) and np.shares_memory(b.grad, flat)
    np.testing.assert_array_equal(flat, [2.0] * 6 + [3.0] * 4)


def test_a_parameter_left_out_of_a_step_reads_as_zeros_not_its_old_gradient():
    a = mt.tensor(np.ones(3), requires_grad=True)
    b = mt.tensor(np.ones(2), requires_grad=True)
    opt = Adam([a, b], lr=0.1)
    ((a * 2.0).sum() + (b * 5.0).sum()).backward()
    opt.step()
    opt.zero_grad()
    (a * 2.0).sum().backward()  # b is not in this graph
    (flat,) = opt.gather_grads()
    np.testing.assert_array_equal(flat, [2.0, 2.0, 2.0, 0.0, 0.0])
    assert float(opt.grad_norm()) == pytest.approx(np.sqrt(12.0))
    before = b.data.copy()
    opt.step()
    np.testing.assert_array_equal(b.data, before)  # skipped, as PyTorch skips grad None


def test_clip_coefficient_leaves_gradients_alone_for_a_nan_or_inf_total():
    """min(1, max_norm / (total + 1e-6)), and 1 (not 0) where the total is not finite: the
    caller skips such a step, and the gradients stay as they were for it to inspect."""
    from minitransformer.optim.clip import clip_coefficient

    for total, want in ((np.inf, 1.0), (np.nan, 1.0), (10.0, 1.0 / (10.0 + 1e-6)), (0.5, 1.0)):
        coef = clip_coefficient(np.asarray(total, dtype=np.float64), 1.0)
        assert coef.shape == () and float(coef) == pytest.approx(want, rel=1e-12), (total, coef)


def test_step_ok_is_the_finite_check_of_loss_and_norm_and_every_step_before():
    from minitransformer.optim import step_ok

    f = np.float32
    assert bool(step_ok(np.asarray(f(1.0)), np.asarray(f(2.0))))
    assert not bool(step_ok(np.asarray(f(np.nan)), np.asarray(f(2.0))))
    assert not bool(step_ok(np.asarray(f(1.0)), np.asarray(f(np.inf))))
    bad_before = np.asarray(False)
    assert not bool(step_ok(np.asarray(f(1.0)), np.asarray(f(2.0)), bad_before))
    assert step_ok(np.asarray(f(1.0)), np.asarray(f(2.0)), np.asarray(True)).shape == ()


def test_clip_grad_norm_over_parameters_of_two_dtypes():
    """Two flat groups (float64 and float32): one total norm over both, both scaled."""
    a = mt.tensor(np.ones(3), dtype="float64", requires_grad=True)
    b = mt.tensor(np.ones(2), dtype="float32", requires_grad=True)
    opt = Adam([a, b])
    a.grad, b.grad = np.full(3, 3.0), np.full(2, 4.0, np.float32)
    norm = opt.clip_grad_norm(1.0)
    assert len(opt.groups) == 2 and float(norm) == pytest.approx(math.sqrt(27 + 32))
    coef = 1.0 / (math.sqrt(59) + 1e-6)
    np.testing.assert_allclose(a.grad, 3.0 * coef, rtol=1e-6)  # the float32 norm is in it
    np.testing.assert_allclose(b.grad, 4.0 * coef, rtol=1e-6)
    assert b.grad.dtype == np.float32
