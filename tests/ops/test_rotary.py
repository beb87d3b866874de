"""rotary_embedding (RoPE): the "halves" layout against transformers' own apply_rotary_pos_emb
(cos and sin built as transformers builds them, and its LlamaRotaryEmbedding in float32), the
"interleaved" layout against a complex-number reference (x[2i] + i x[2i+1]) e^(i angle) in
PyTorch (values and gradients), gradcheck, the relative-position property, offset = slicing
a longer sequence, a wrong backward caught, and every bad argument refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
from test_local_attention import refused

import minitransformer as mt
from minitransformer import backend
from minitransformer.errors import ArgumentError, DTypeError, ShapeError
from minitransformer.ops.rotary import Rotary, rotary_cos_sin, rotary_embedding, rotate

LAYOUTS = ["halves", "interleaved"]
CASES = [((2, 3, 5, 8), 0, 10000.0), ((1, 2, 4, 6), 7, 500.0), ((3, 16), 1000, 10000.0)]


def torch_halves(torch, x, offset, base):
    """transformers' Llama RoPE: inv_freq = 1 / base^(2i/d), freqs = positions x inv_freq,
    emb = cat(freqs, freqs), then its apply_rotary_pos_emb (q only), in x's dtype."""
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    T, d = x.shape[-2:]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    positions = torch.arange(offset, offset + T, dtype=torch.float64)
    emb = torch.cat((torch.outer(positions, inv_freq),) * 2, dim=-1)  # (T, d)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    q, _ = llama.apply_rotary_pos_emb(x, x, cos, sin, unsqueeze_dim=0)  # (1, ..., T, d)
    return q.reshape(x.shape)


def torch_interleaved(torch, x, offset, base):
    """(x[2i] + i x[2i+1]) e^(i angle[t, i]), as complex numbers (Meta's Llama and GPT-J)."""
    T, d = x.shape[-2:]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.outer(torch.arange(offset, offset + T, dtype=torch.float64), theta)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    turned = z * torch.polar(torch.ones_like(angle), angle).to(z.dtype)
    return torch.view_as_real(turned).reshape(x.shape)


ORACLES = {"halves": torch_halves, "interleaved": torch_interleaved}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape, offset, base", CASES)
@pytest.mark.parametrize("dtype, tol", [("float64", 1e-12), ("float32", 5e-6)])
def test_matches_the_pytorch_references(rng, layout, shape, offset, base, dtype, tol):
    torch = pytest.importorskip("torch")
    x, u = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    X = mt.tensor(x, requires_grad=True)
    y = rotary_embedding(X, offset=offset, base=base, layout=layout)
    y.backward(mt.tensor(u))
    tx = torch.tensor(x, requires_grad=True)
    ty = ORACLES[layout](torch, tx, offset, base)
    ty.backward(torch.tensor(u))
    assert backend.dtype_name(y.dtype) == backend.dtype_name(X.grad.dtype) == dtype
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(X.grad, tx.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("offset", [0, 3, 200])
def test_matches_transformers_llama_rotary_embedding_in_float32(rng, offset):
    """transformers' own cos and sin (LlamaRotaryEmbedding, float32 all through)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    config = transformers.LlamaConfig(hidden_size=32, num_attention_heads=2, rope_theta=500.0)
    x = rng.standard_normal((1, 2, 6, 16)).astype(np.float32)
    positions = torch.arange(offset, offset + 6)[None]
    cos, sin = llama.LlamaRotaryEmbedding(config)(torch.tensor(x), positions)
    theirs, _ = llama.apply_rotary_pos_emb(torch.tensor(x), torch.tensor(x), cos, sin)
    ours = rotary_embedding(mt.tensor(x), offset=offset, base=500.0).numpy()
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape, offset", [((4, 2), 0), ((2, 3, 6), 5), ((1, 2, 3, 4), 11)])
def test_gradcheck(make, rng, layout, shape, offset):
    x = make(rng.standard_normal(shape))
    assert mt.gradcheck(lambda x: rotary_embedding(x, offset, 100.0, layout), x)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_function_with_its_tables(make, rng, layout):
    """The model's path: rotary_cos_sin, then Rotary.apply; the same as the public function."""
    x = make(rng.standard_normal((2, 5, 8)))
    xp = backend.namespace(x.data)
    cos, sin = rotary_cos_sin(xp, 4, 5, 8, 10000.0, x.dtype, device=x.data.device)
    assert cos.shape == sin.shape == (5, 4) and cos.dtype == x.dtype
    y = Rotary.apply(x, cos, sin, layout=layout)
    np.testing.assert_array_equal(y.numpy(), rotary_embedding(x, 4, layout=layout).numpy())
    assert mt.gradcheck(lambda x: Rotary.apply(x, cos, sin, layout=layout), x)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("base", [10000.0, 37.5])
def test_scores_depend_only_on_the_distance(rng, layout, base):
    """<R(m) q, R(n) k> = <q, R(n - m) k>: every (m, n) with the same n - m gives one score."""
    q, k = mt.tensor(rng.standard_normal((1, 8))), mt.tensor(rng.standard_normal((1, 8)))

    def score(m, n):
        rq = rotary_embedding(q, offset=m, base=base, layout=layout).numpy()
        rk = rotary_embedding(k, offset=n, base=base, layout=layout).numpy()
        return float((rq @ rk.T)[0, 0])

    for distance in (0, 1, 5, 37):
        scores = [score(m, m + distance) for m in (0, 1, 9, 250)]
        np.testing.assert_allclose(scores, score(0, distance), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(score(m=distance, n=0), score(m=2 * distance, n=distance))
    assert abs(score(0, 1) - score(0, 0)) > 1e-3  # not constant: the distance matters


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("start, T", [(0, 3), (4, 5), (9, 1)])
def test_an_offset_is_a_slice_of_a_longer_sequence(make, rng, layout, start, T):
    long = rng.standard_normal((2, 10, 6))
    whole = rotary_embedding(make(long), layout=layout).numpy()
    part = rotary_embedding(make(long[:, start : start + T]), offset=start, layout=layout)
    np.testing.assert_array_equal(part.numpy(), whole[:, start : start + T])


def test_the_two_layouts_are_one_rotation_of_permuted_features(rng):
    """Interleaved on x equals halves on x with features reordered (0, 2, 4, .., 1, 3, ..)."""
    x = rng.standard_normal((2, 5, 8))
    order = np.r_[0:8:2, 1:8:2]
    halves = rotary_embedding(mt.tensor(x[..., order]), offset=3).numpy()
    interleaved = rotary_embedding(mt.tensor(x), offset=3, layout="interleaved").numpy()
    np.testing.assert_allclose(interleaved[..., order], halves, atol=1e-15)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_position_zero_is_unchanged_and_every_pair_keeps_its_length(rng, layout):
    x = rng.standard_normal((3, 4, 10))
    y = rotary_embedding(mt.tensor(x, dtype="float32"), layout=layout)
    assert backend.dtype_name(y.dtype) == "float32"
    np.testing.assert_allclose(y.numpy()[:, 0], x[:, 0], atol=1e-6)
    np.testing.assert_allclose(
        np.linalg.norm(y.numpy(), axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5
    )


class RotaryTurnsOn(Rotary):
    """The slip: backward rotates g forward (by +angle) instead of back."""

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved
        return rotate(ctx.xp, grad, cos, sin, ctx.layout), None, None


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradcheck_catches_a_wrong_backward(make, rng, layout):
    x = make(rng.standard_normal((2, 4, 6)))
    cos, sin = rotary_cos_sin(backend.namespace(x.data), 1, 4, 6, 10.0, x.dtype, x.data.device)
    with pytest.raises(mt.GradcheckError, match="input 0 at position"):
        mt.gradcheck(lambda x: RotaryTurnsOn.apply(x, cos, sin, layout=layout), x)


def f32(*shape):
    return mt.tensor(np.ones(shape, dtype=np.float32))


REFUSALS = {
    "x a list": (
        lambda: rotary_embedding([[1.0, 2.0]]),
        ArgumentError,
        r"rotary_embedding: x must be a Tensor",
    ),
    "x int": (
        lambda: rotary_embedding(f32(2, 4).astype("int64")),
        DTypeError,
        r"rotary_embedding: x has dtype int64",
    ),
    "x 1-d": (
        lambda: rotary_embedding(f32(4)),
        ShapeError,
        r"x has shape \(4,\); need \(\.\.\., T, d\) with d even",
    ),
    "x 0-d": (lambda: rotary_embedding(mt.tensor(1.0)), ShapeError, r"x has shape \(\)"),
    "d odd": (
        lambda: rotary_embedding(f32(2, 3, 5)),
        ShapeError,
        r"x has shape \(2, 3, 5\); .* d even",
    ),
    "d = 0": (lambda: rotary_embedding(f32(2, 0)), ShapeError, r"d even"),
    "offset -1": (
        lambda: rotary_embedding(f32(2, 4), offset=-1),
        ArgumentError,
        r"offset must be a non-negative int",
    ),
    "offset 1.5": (
        lambda: rotary_embedding(f32(2, 4), offset=1.5),
        ArgumentError,
        r"offset must be a non-negative int",
    ),
    "offset True": (
        lambda: rotary_embedding(f32(2, 4), offset=True),
        ArgumentError,
        r"offset must",
    ),
    "offset None": (
        lambda: rotary_embedding(f32(2, 4), offset=None),
        ArgumentError,
        r"offset must",
    ),
    "offset 2^53": (
        lambda: rotary_embedding(f32(2, 4), offset=2**53),
        ArgumentError,
        r"offset=.* past 2\^53",
    ),
    "offset 10^400": (
        lambda: rotary_embedding(f32(2, 4), offset=10**400),
        ArgumentError,
        r"offset=.* past 2\^53",
    ),
    "base 1": (
        lambda: rotary_embedding(f32(2, 4), base=1.0),
        ArgumentError,
        r"base must be a finite number > 1",
    ),
    "base 0.5": (lambda: rotary_embedding(f32(2, 4), base=0.5), ArgumentError, r"base must"),
    "base -10": (lambda: rotary_embedding(f32(2, 4), base=-10), ArgumentError, r"base must"),
    "base inf": (
        lambda: rotary_embedding(f32(2, 4), base=float("inf")),
        ArgumentError,
        r"base must",
    ),
    "base nan": (
        lambda: rotary_embedding(f32(2, 4), base=float("nan")),
        ArgumentError,
        r"base must",
    ),
    "base str": (lambda: rotary_embedding(f32(2, 4), base="1e4"), ArgumentError, r"base must"),
    "layout half": (
        lambda: rotary_embedding(f32(2, 4), layout="half"),
        ArgumentError,
        r"layout must be 'halves' .* 'interleaved' .*, got 'half'",
    ),
    "layout None": (
        lambda: rotary_embedding(f32(2, 4), layout=None),
        ArgumentError,
        r"layout must",
    ),
    "layout list": (
        lambda: rotary_embedding(f32(2, 4), layout=["halves"]),
        ArgumentError,
        r"layout must",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS.values()), ids=list(REFUSALS))
def test_bad_arguments_are_refused_in_one_line_naming_them(case):
    call, kind, pattern = case
    error = refused(kind, pattern, call)
    assert type(error) is kind
    assert str(error).startswith("rotary_embedding: ")


def test_good_odd_corners():
    """An int base, a NumPy offset, a large base, no rows and no batch are all fine."""
    assert rotary_embedding(f32(3, 4), offset=np.int64(2), base=10).shape == (3, 4)
    assert rotary_embedding(f32(3, 4), base=1e300).shape == (3, 4)
    assert rotary_embedding(f32(2, 0, 4)).shape == (2, 0, 4)
    assert rotary_embedding(f32(0, 3, 4), layout="interleaved").shape == (0, 3, 4)
