"""The fast tier on NumPy (``minitransformer/fast``): off by default, and what runs then is
the reference (no function of the tier is called, and a learner's edit of a reference op
changes the model's output); switched on, every twin computes its reference's numbers
(forward and backward, float32 and float64), the table lists them, ``reference_only()``
switches them off for a block; and the host's per-product BLAS-thread policy
(``host.matmul``, every NumPy product) gives NumPy's product and restores the thread count."""

import sys
from pathlib import Path

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import fast
from minitransformer.backend import host
from minitransformer.fast import numpy as numpy_twins
from minitransformer.fast.numpy import layernorm as layernorm_twin
from minitransformer.fast.numpy import loss as loss_twin
from minitransformer.function import TWINS


@pytest.mark.parametrize("shape", [((3, 4), (4, 5)), ((512, 512), (512, 300))])
def test_the_hosts_matmul_matches_and_restores_threads(shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape[0]).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    threads = host.blas_threads()
    np.testing.assert_allclose(host.matmul(a, b), a @ b, rtol=1e-5, atol=1e-4)
    assert host.blas_threads() == threads


@pytest.mark.parametrize("tuned", [False, True])
@pytest.mark.parametrize("a_shape", [(2, 3, 4), (5, 1, 2, 4), (0, 3, 4), (2, 3, 0), (512, 4, 512)])
def test_the_hosts_stacked_matmul_and_tensordot_match_numpy(a_shape, tuned):
    """A stack of rows @ one matrix is folded into one 2-D product, and a contraction of every
    leading axis (a weight's gradient) into one (k, rows) @ (rows, m): NumPy's numbers and
    shapes, empty stacks and k = 0 included, tuned or not; other contractions as NumPy does."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal((a_shape[-1], 3)).astype(np.float32)
    g = rng.standard_normal((*a_shape[:-1], 3)).astype(np.float32)
    rows = tuple(range(a.ndim - 1))
    before = host.gemm_tuning
    host.tune_products(tuned)
    try:
        threads = host.blas_threads()
        y, dw = host.matmul(a, b), host.tensordot(a, g, axes=(rows, rows))
        other = host.tensordot(a, a, axes=((0,), (0,)))  # not every leading axis
        vector = host.matmul(b[:, 0], b)  # a vector @ a matrix (no row axis)
        out = np.full(y.shape, np.nan, dtype=np.float32)
        assert host.matmul(a, b, out=out) is not None and not np.isnan(out).any()
        assert host.blas_threads() == threads
    finally:
        host.tune_products(before)
    assert y.shape == (*a_shape[:-1], 3) and dw.shape == (a_shape[-1], 3)
    np.testing.assert_allclose(y, np.matmul(a, b), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(dw, np.tensordot(a, g, axes=(rows, rows)), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(other, np.tensordot(a, a, axes=((0,), (0,))), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(vector, b[:, 0] @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, y, rtol=1e-6, atol=1e-6)
    if a.ndim == 3:  # a transposed stack (not contiguous) too
        at = np.ascontiguousarray(a.transpose(1, 0, 2)).transpose(1, 0, 2)
        np.testing.assert_allclose(host.matmul(at, b), np.matmul(a, b), rtol=1e-5, atol=1e-4)


# ----------------------------------------------------------------------------- fast vs reference

IGN = -100
_T = np.array([[1, 4, IGN], [0, 2, 3]])  # targets for logits (2, 3, 5), one ignored


def _masked_ce(x):
    """Cross-entropy logits with -inf entries away from the targets (a finite loss)."""
    x = x.copy()
    x[0, 0, 0] = x[0, 2, 4] = -np.inf
    return x


# name -> (the op, input shapes, the kernels its twin must use on NumPy, make inputs)
CASES = {
    "layer_norm": (lambda x, g, b: F.layer_norm(x, g, b), [(2, 3, 8), (8,), (8,)],
                   ["layer_norm_forward", "layer_norm_backward"], None),
    "cross_entropy": (lambda x: F.cross_entropy(x, _T, ignore_index=IGN), [(2, 3, 5)],
                      ["cross_entropy_forward", "cross_entropy_backward"], None),
    "cross_entropy_smoothed": (
        lambda x: F.cross_entropy(x, _T, label_smoothing=0.1, ignore_index=IGN, reduction="sum"),
        [(2, 3, 5)], ["cross_entropy_forward", "cross_entropy_backward"], None),
    "cross_entropy_none": (
        lambda x: F.cross_entropy(x, np.where(_T == IGN, 0, _T), reduction="none"),
        [(2, 3, 5)], ["cross_entropy_forward", "cross_entropy_backward"], None),
    "cross_entropy_masked": (lambda x: F.cross_entropy(x[0], _T[1]), [(2, 3, 5)],
                             ["cross_entropy_forward", "cross_entropy_backward"],
                             _masked_ce),
}  # fmt: skip


def _forward_backward(case, dtype, seed=0):
    fn, shapes, _, prepare = CASES[case]
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    if prepare is not None:
        arrays[0] = prepare(arrays[0])
    xs = [mt.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]
    y = fn(*xs)
    u = rng.standard_normal(y.shape).astype(dtype)
    (y * mt.tensor(u)).sum().backward()
    return y.numpy(), [x.grad.copy() for x in xs]


KERNEL_OF = {  # kernel -> (its module, the twin that calls it, the class attribute)
    "layer_norm_forward": (layernorm_twin, layernorm_twin.LayerNorm, "forward_kernel"),
    "layer_norm_backward": (layernorm_twin, layernorm_twin.LayerNorm, "backward_kernel"),
    "cross_entropy_forward": (loss_twin, loss_twin.CrossEntropy, "forward_kernel"),
    "cross_entropy_backward": (loss_twin, loss_twin.CrossEntropy, "backward_kernel"),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", list(CASES))
def test_each_numpy_twin_matches_its_reference(case, dtype, monkeypatch):
    used = []

    def counted(name, real):
        def kernel(*args):
            used.append(name)
            return real(*args)

        return kernel

    for name in CASES[case][2]:  # count the kernel's calls: the twin must be what runs
        module, twin, attribute = KERNEL_OF[name]
        kernel = counted(name, getattr(module, name))
        monkeypatch.setattr(twin, attribute, staticmethod(kernel))
    with fast.switched_on():
        y, grads = _forward_backward(case, dtype)
    assert set(used) == set(CASES[case][2]), used
    used.clear()
    y_ref, grads_ref = _forward_backward(case, dtype)  # the default: the reference
    assert not used  # the reference ran without a kernel
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    assert y.dtype == y_ref.dtype == np.dtype(dtype)
    np.testing.assert_allclose(y, y_ref, **tol)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        assert g.dtype == g_ref.dtype == np.dtype(dtype)
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, g_ref, **tol)


def test_the_tier_is_off_by_default_and_switches_on_off_and_for_a_block():
    key = (mt.ops.layernorm.LayerNorm, np.ndarray)
    assert not fast.enabled() and key not in TWINS  # what a notebook gets
    with fast.switched_on():
        assert fast.enabled() and TWINS[key] is layernorm_twin.LayerNorm
        with fast.reference_only():
            assert not fast.enabled() and key not in TWINS
        assert TWINS[key] is layernorm_twin.LayerNorm
    assert not fast.enabled() and key not in TWINS


def test_what_runs_on_the_cpu_names_the_compiled_kernels_only_when_they_are_on(monkeypatch):
    from minitransformer.fast.numpy import compiled

    assert fast.describe("cpu") == "reference ops"
    with fast.switched_on():
        assert fast.describe("cpu").startswith("fast tier: NumPy twins (")
        assert "numba" not in fast.describe("cpu")
        monkeypatch.setattr(compiled, "enabled", lambda: True)
        assert fast.describe("cpu").endswith("; numba's compiled kernels")
        assert fast.describe("strict:device1") == "reference ops"


def test_the_table_names_every_twin_and_what_it_replaces():
    rows = fast.table()
    numpy_rows = {r["reference"]: r for r in rows if r["library"] == "numpy"}
    assert set(numpy_rows) == {
        "ops.layernorm.LayerNorm", "ops.loss.CrossEntropy", "optim.adam.adam_update",
        "ops.attention.ScaledDotProductAttention", "ops.matmul.Linear", "ops.dropout.Dropout",
        "ops.dropout.DropoutAdd", "ops.projections.Projections", "ops.projections.PackedAttention",
        "ops.embedding.Embedding", "ops.elementwise.ReLU",
    }  # fmt: skip
    assert all(r["on"] == "no" for r in numpy_rows.values())
    cupy_refs = {r["reference"] for r in rows if r["library"] == "cupy"}
    assert "ops.attention.ScaledDotProductAttention" in cupy_refs
    keyed_by_ids = "ops.embedding.Embedding"  # its first input is the integer ids: any table
    assert all(
        r["dtypes"] == "float32, float64"
        for r in rows
        if r["library"] == "cupy" and r["reference"] != keyed_by_ids
    )
    for ref, twin in numpy_twins.TWINS.items():  # a Function twin subclasses its reference
        assert not isinstance(ref, type) or issubclass(twin, ref)
    with fast.switched_on():
        assert all(r["on"] == "yes" for r in fast.table() if r["library"] == "numpy")


@pytest.mark.parametrize(
    "case",
    ["layer_norm", "cross_entropy", "cross_entropy_smoothed"],
)  # fmt: skip
def test_each_numpy_twin_passes_gradcheck(case):
    fn, shapes, _, _ = CASES[case]
    rng = np.random.default_rng(1)
    xs = [mt.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    with fast.switched_on():
        assert mt.gradcheck(fn, *xs)


def test_kernels_leave_their_inputs_and_saved_arrays_intact():
    """No kernel writes into an array it was given (a saved array may be one)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 5))
    t = np.array([0, 4, 2, 1, 3, 0])
    gamma, beta = rng.standard_normal(5), rng.standard_normal(5)
    before = [a.copy() for a in (x, t, gamma, beta)]
    _, x_hat, rstd = layernorm_twin.layer_norm_forward(x, gamma, beta, 1e-5)
    saved = [x_hat.copy(), rstd.copy()]
    layernorm_twin.layer_norm_backward(x, x_hat, rstd, gamma, (True, True, True))
    _, e, s = loss_twin.cross_entropy_forward(x, t, 0.1)
    saved += [e.copy(), s.copy()]
    loss_twin.cross_entropy_backward(e, s, t, np.float64(0.5), 0.1)
    for a, b in zip((x, t, gamma, beta, x_hat, rstd, e, s), (*before, *saved), strict=True):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- what runs by default


def _tiny_step(seed: int = 0) -> tuple[np.ndarray, float]:
    """A tiny Transformer's forward, backward and Adam step: (logits, loss)."""
    cfg = mt.TransformerConfig.preset("tiny", src_vocab=20, tgt_vocab=20, dropout=0.1)
    mt.backend.manual_seed(seed)
    model = mt.nn.Transformer(cfg)
    opt = mt.optim.Adam(model.parameters(), lr=1e-3)
    src = np.array([[5, 6, 7, 8, 2], [9, 4, 3, 2, 0]])
    tgt_in, tgt_out = np.array([[1, 5, 6, 7], [1, 9, 4, 3]]), np.array([[5, 6, 7, 2], [9, 4, 3, 2]])
    logits = model(src, tgt_in)
    loss = F.cross_entropy(logits, tgt_out, label_smoothing=0.1, ignore_index=0)
    loss.backward()
    opt.clip_grad_norm(1.0)
    opt.step()
    return logits.numpy(), float(loss.item())


def test_by_default_a_step_runs_the_reference_and_no_function_of_the_fast_tier():
    """A profiler hook over a tiny model's forward, backward and Adam step: no function
    defined under minitransformer/fast/ is called (twins, kernels), and
    the reference ops' own forward and backward are."""
    tier = str(Path(fast.__file__).parent)
    ops = str(Path(mt.ops.__file__).parent)
    in_tier, in_ops = set(), set()

    def hook(frame, event, arg):  # noqa: ARG001
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(tier):
                in_tier.add(f"{Path(code.co_filename).relative_to(tier).as_posix()}:{code.co_name}")
            elif code.co_filename.startswith(ops):
                in_ops.add(f"{Path(code.co_filename).name}:{code.co_name}")

    sys.setprofile(hook)
    try:
        _tiny_step()
    finally:
        sys.setprofile(None)
    assert not in_tier, sorted(in_tier)
    for op in ("layernorm.py", "loss.py", "attention.py", "softmax.py", "matmul.py"):
        if op != "softmax.py":  # softmax.py's helpers run inside cross-entropy
            assert f"{op}:forward" in in_ops and f"{op}:backward" in in_ops, (op, in_ops)
    assert "softmax.py:shifted" in in_ops
    with fast.switched_on():  # the same hook sees the tier once it is on
        sys.setprofile(hook)
        try:
            _tiny_step()
        finally:
            sys.setprofile(None)
    assert {
        "numpy/layernorm.py:layer_norm_forward",
        "numpy/adam.py:adam_update",
        "numpy/attention.py:_row_sums",
    } <= in_tier


def test_a_learners_edit_of_a_reference_op_changes_the_model(monkeypatch):
    """Patch LayerNorm's row math (as a learner editing ops/layernorm.py would): by default
    the model's output changes; with the fast tier on, its twin's row math runs instead."""
    before, _ = _tiny_step()
    reference = mt.ops.layernorm.LayerNorm.rows_forward

    def edited(xp, x2, gamma, beta, eps):
        y, x_hat, rstd = reference(xp, x2, gamma, beta, eps)
        return y * 2.0, x_hat, rstd  # the learner's change

    monkeypatch.setattr(mt.ops.layernorm.LayerNorm, "rows_forward", staticmethod(edited))
    after, _ = _tiny_step()
    assert not np.allclose(before, after)
    with fast.switched_on():
        fast_tier, _ = _tiny_step()
    np.testing.assert_allclose(fast_tier, before, rtol=1e-4, atol=1e-5)
