"""AdamW and CosineSchedule: PyTorch's AdamW and transformers' cosine schedule as oracles,
the decay mask (matrices only, or all), resuming bit for bit, and the refusals."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from test_optim import (
    SHAPES,
    _assert_adam_state_matches_torch,
    _assert_close,
    _grads,
    _params,
    _run,
    _torch_run,
)

import minitransformer as mt
from minitransformer.errors import ConfigError
from minitransformer.optim import Adam, AdamW, CosineSchedule, NoamSchedule

# ----------------------------------------------------------------------------- AdamW


def _torch_adamw(torch, grads, kw, decay_only_matrices, sched_lrs=None):
    """PyTorch's AdamW over the same start and gradients; vectors in a group without decay
    when ``decay_only_matrices``. ``sched_lrs[n]``: the rate of update n + 1."""

    def make_opt(params):
        if decay_only_matrices:
            groups = [
                {"params": [p for p in params if p.ndim >= 2]},
                {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
            ]
        else:
            groups = [{"params": params}]
        return torch.optim.AdamW(groups, **kw)

    return _torch_run(torch, make_opt, grads, lrs=sched_lrs)


@pytest.mark.parametrize("decay_only_matrices", [True, False])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01, 0.3])
@pytest.mark.parametrize("betas, eps", [((0.9, 0.999), 1e-8), ((0.9, 0.98), 1e-9)])
def test_adamw_matches_torch(decay_only_matrices, weight_decay, betas, eps):
    torch = pytest.importorskip("torch")
    grads = _grads(25)
    kw = dict(lr=2e-2, betas=betas, eps=eps, weight_decay=weight_decay)
    want, topt, tparams = _torch_adamw(torch, grads, kw, decay_only_matrices)
    params = _params()
    opt = AdamW(params, decay_only_matrices=decay_only_matrices, **kw)
    _assert_close(_run(opt, params, grads), want)
    _assert_adam_state_matches_torch(opt, topt, tparams)


def test_adamw_with_a_cosine_schedule_matches_torch_step_by_step():
    torch = pytest.importorskip("torch")
    grads = _grads(30)
    params = _params()
    opt = AdamW(params, lr=1.0, weight_decay=0.1)
    sched = CosineSchedule(opt, peak_lr=3e-2, warmup=5, total_steps=25, min_lr=1e-3)
    lrs = [sched.lr_at(n) for n in range(1, 31)]
    kw = dict(lr=1.0, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    want, *_ = _torch_adamw(torch, grads, kw, True, sched_lrs=lrs)
    _assert_close(_run(opt, params, grads, sched), want)


def test_adamw_float32_matches_torch_float32():
    torch = pytest.importorskip("torch")
    grads = _grads(10)
    params = _params(dtype="float32")
    opt = AdamW(params, lr=1e-2, weight_decay=0.05)
    got = _run(opt, params, grads)
    tparams = [torch.tensor(p.numpy(), requires_grad=True) for p in _params(dtype="float32")]
    groups = [{"params": tparams[0::2]}, {"params": tparams[1:2], "weight_decay": 0.0}]
    topt = torch.optim.AdamW(groups, lr=1e-2, weight_decay=0.05)
    for step_grads in grads:
        for p, g in zip(tparams, step_grads, strict=True):
            p.grad = torch.tensor(g, dtype=torch.float32)
        topt.step()
    for p, tp in zip(got[-1], tparams, strict=True):
        assert p.dtype == np.float32
        np.testing.assert_allclose(p, tp.detach().numpy(), rtol=0, atol=1e-6)


def test_adamw_decays_matrices_only_by_default():
    opt = AdamW(_params())
    assert (
        [opt.decays(p) for p in opt.params]
        == [len(s) >= 2 for s in SHAPES]
        == [
            True,
            False,
            True,
        ]
    )
    assert all(AdamW(_params(), decay_only_matrices=False).decays(p) for p in _params())


@pytest.mark.parametrize("lr, weight_decay", [(0.1, 0.5), (1e-3, 0.01), (0.02, 2.0)])
def test_adamw_decay_is_decoupled_a_zero_gradient_shrinks_matrices_by_lr_lambda(lr, weight_decay):
    """With zero gradients the Adam step is 0 and only the decay acts: each matrix is
    multiplied by 1 − lr·λ per step, whatever its gradients' scale; the vector stays."""
    params = _params()
    start = [p.numpy().copy() for p in params]
    opt = AdamW(params, lr=lr, weight_decay=weight_decay)
    _run(opt, params, [[np.zeros(s) for s in SHAPES]] * 3)
    for p, p0 in zip(params, start, strict=True):
        factor = (1 - lr * weight_decay) ** 3 if p.ndim >= 2 else 1.0
        np.testing.assert_allclose(p.numpy(), p0 * factor, rtol=1e-14)


def test_adamw_is_not_adam_with_l2():
    """Adam's weight_decay (L2 through the gradient) and AdamW's differ after one step."""
    grads = _grads(3)
    p1, p2 = _params(), _params()
    a = _run(Adam(p1, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1), p1, grads)
    b = _run(AdamW(p2, lr=1e-2, weight_decay=0.1, decay_only_matrices=False), p2, grads)
    assert not np.allclose(a[-1][0], b[-1][0], rtol=0, atol=1e-6)


@pytest.mark.parametrize("decay_only_matrices", [True, False])
def test_adamw_state_dict_resume_is_exact(decay_only_matrices):
    grads = _grads(10)
    params = _params()
    opt = AdamW(params, lr=1e-2, weight_decay=0.1, decay_only_matrices=decay_only_matrices)
    sched = CosineSchedule(opt, peak_lr=1e-2, warmup=3, total_steps=10)
    _run(opt, params, grads[:4], sched)
    arrays, meta = opt.state_dict(host=True)
    sched_state = sched.state_dict()
    saved = [p.numpy().copy() for p in params]
    want = _run(opt, params, grads[4:], sched)

    params2 = [mt.tensor(a, requires_grad=True) for a in saved]
    opt2 = AdamW(params2, decay_only_matrices=not decay_only_matrices)  # restored from meta
    sched2 = CosineSchedule(opt2, peak_lr=1.0, warmup=0, total_steps=2)
    opt2.load_state_dict(arrays, meta)
    sched2.load_state_dict(sched_state)
    assert opt2.decay_only_matrices is decay_only_matrices
    got = _run(opt2, params2, grads[4:], sched2)
    for step_a, step_b in zip(got, want, strict=True):
        for x, y in zip(step_a, step_b, strict=True):
            np.testing.assert_array_equal(x, y)
    assert meta["type"] == "AdamW" and meta["weight_decay"] == 0.1


def test_adamw_a_skipped_parameter_is_neither_decayed_nor_moved():
    params = _params()
    opt = AdamW(params, lr=0.1, weight_decay=0.5)
    before = params[2].numpy().copy()
    opt.zero_grad()
    params[0].grad = mt.tensor(np.ones(SHAPES[0])).data
    params[1].grad = mt.tensor(np.ones(SHAPES[1])).data
    opt.step()
    np.testing.assert_array_equal(params[2].numpy(), before)
    assert opt.param_steps == [1, 1, 0]


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"lr": -1e-3}, "lr"),
        ({"lr": math.nan}, "lr"),
        ({"lr": "0.1"}, "lr"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"weight_decay": math.inf}, "weight_decay"),
        ({"weight_decay": None}, "weight_decay"),
        ({"betas": (0.9,)}, "betas"),
        ({"betas": (1.0, 0.999)}, "betas[0]"),
        ({"betas": (0.9, -0.1)}, "betas[1]"),
        ({"eps": -1e-8}, "eps"),
        ({"decay_only_matrices": 1}, "decay_only_matrices"),
        ({"decay_only_matrices": "yes"}, "decay_only_matrices"),
    ],
)
def test_adamw_refuses_bad_settings_naming_them(kwargs, name):
    with pytest.raises(ConfigError, match="AdamW: " + re.escape(name)):
        AdamW(_params(), **kwargs)


# ----------------------------------------------------------------------------- cosine


def _opt():
    return AdamW(_params())


@pytest.mark.parametrize(
    "peak, warmup, total, low",
    [(1e-3, 10, 100, 0.0), (5e-4, 1, 7, 1e-5), (2.0, 0, 50, 0.5), (3e-4, 40, 41, 3e-5)],
)
def test_cosine_schedule_is_the_formula(peak, warmup, total, low):
    sched = CosineSchedule(_opt(), peak_lr=peak, warmup=warmup, total_steps=total, min_lr=low)
    for step in range(1, total + 10):
        if step <= warmup:
            want = peak * step / warmup
        elif step <= total:
            progress = (step - warmup) / (total - warmup)
            want = low + 0.5 * (peak - low) * (1 + math.cos(math.pi * progress))
        else:
            want = low
        assert sched.lr_at(step) == pytest.approx(want, rel=1e-15, abs=1e-18)
    if warmup:  # the peak at step = warmup (with no warm-up, step 1 is already past it)
        assert sched.lr_at(warmup) == pytest.approx(peak)
    assert sched.lr_at(total) == pytest.approx(low)


@pytest.mark.parametrize("warmup, total", [(10, 100), (1, 7), (0, 30), (25, 26)])
def test_cosine_schedule_matches_transformers_lambda_lr(warmup, total):
    """transformers' get_cosine_schedule_with_warmup is a torch LambdaLR whose k-th
    ``scheduler.step()`` gives the rate of update k + 1 from lambda(k); ours gives update
    n the rate lr_at(n). Driven side by side, ours is theirs one step later, so both reach
    the peak at step = warmup (theirs starts at 0, an update that does nothing)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peak = 3e-3
    topt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    tsched = transformers.get_cosine_schedule_with_warmup(topt, warmup, total)
    opt = _opt()
    sched = CosineSchedule(opt, peak_lr=peak, warmup=warmup, total_steps=total)
    for _ in range(total):
        topt.step()  # (no gradient: nothing moves; keeps PyTorch's call order)
        tsched.step()  # after k calls theirs holds lambda(k), ours lr_at(k)
        assert opt.lr == pytest.approx(topt.param_groups[0]["lr"], rel=1e-12, abs=1e-18)
        sched.step()


def test_cosine_schedule_drives_the_optimizer_and_round_trips():
    opt = _opt()
    sched = CosineSchedule(opt, peak_lr=1e-3, warmup=4, total_steps=20, min_lr=1e-5)
    assert opt.lr == sched.lr_at(1) == pytest.approx(2.5e-4)
    for n in range(2, 8):
        assert sched.step() == opt.lr == sched.lr_at(n)
    state = sched.state_dict()
    other = CosineSchedule(_opt(), peak_lr=1.0, warmup=0, total_steps=2)
    other.load_state_dict(state)
    assert other.optimizer.lr == opt.lr and other.state_dict() == state
    assert "CosineSchedule(peak_lr=0.001" in repr(sched)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"peak_lr": 0.0}, "peak_lr"),
        ({"peak_lr": -1e-3}, "peak_lr"),
        ({"peak_lr": math.inf}, "peak_lr"),
        ({"peak_lr": math.nan}, "peak_lr"),
        ({"warmup": -1}, "warmup"),
        ({"warmup": 2.5}, "warmup"),
        ({"warmup": True}, "warmup"),
        ({"total_steps": 0}, "total_steps"),
        ({"total_steps": "100"}, "total_steps"),
        ({"total_steps": 10}, "total_steps"),  # not greater than warmup = 10
        ({"min_lr": -1e-6}, "min_lr"),
        ({"min_lr": 2e-3}, "min_lr"),  # above the peak
        ({"min_lr": math.nan}, "min_lr"),
    ],
)
def test_cosine_schedule_refuses_bad_settings_naming_them(kwargs, name):
    settings = {"peak_lr": 1e-3, "warmup": 10, "total_steps": 100, **kwargs}
    with pytest.raises(ConfigError, match=f"CosineSchedule: {name}"):
        CosineSchedule(_opt(), **settings)


@pytest.mark.parametrize(
    "state",
    [
        NoamSchedule(Adam(_params()), d_model=16, warmup=4).state_dict(),
        {"type": "CosineSchedule", "step": 3},
        {"type": "CosineSchedule", "step": -1, "peak_lr": 1e-3, "warmup": 1, "total_steps": 5,
         "min_lr": 0.0},
        {"type": "CosineSchedule", "step": 3, "peak_lr": 1e-3, "warmup": 9, "total_steps": 5,
         "min_lr": 0.0},
        [("type", "CosineSchedule")],
    ],
)  # fmt: skip
def test_cosine_load_state_dict_refuses_another_or_a_broken_state(state):
    sched = CosineSchedule(_opt(), peak_lr=1e-3, warmup=2, total_steps=10)
    with pytest.raises(ConfigError, match="CosineSchedule"):
        sched.load_state_dict(state)
    assert sched.step_num == 0 and sched.peak_lr == 1e-3


def test_cosine_refuses_something_that_is_not_an_optimizer():
    with pytest.raises(ConfigError, match="optimizer must be an Optimizer"):
        CosineSchedule(object(), peak_lr=1e-3, warmup=1, total_steps=5)


def test_adamw_on_every_device(device):
    """The same steps on every device (the strict one refuses host reads): the decay masks
    live on the parameters' device, beside the flat buffer."""
    grads = _grads(6)
    ref_params = _params()
    want = _run(AdamW(ref_params, lr=1e-2, weight_decay=0.1), ref_params, grads)
    params = _params(device=device)
    opt = AdamW(params, lr=1e-2, weight_decay=0.1)
    _assert_close(_run(opt, params, grads), want, atol=1e-12)
    assert all(mt.backend.device_of(a) == device for a in opt.state_dict()[0].values())
