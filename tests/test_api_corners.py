"""The Python API's corners (issue 17): every public F function and nn layer answers a bad
argument with the library's own error naming it; ``mt.tensor`` takes real numbers only;
grad mode is per thread; LayerNorm, softmax and cross-entropy at the ends of float32."""

from __future__ import annotations

import re
import threading
import warnings

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import fast, nn
from minitransformer.errors import ArgumentError, DTypeError, MiniTransformerError, ShapeError


def f32(*shape: int, seed: int = 0, positive: bool = False) -> mt.Tensor:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return mt.tensor(np.abs(x) + 0.5 if positive else x)


def ints(*shape: int, high: int = 4) -> mt.Tensor:
    return mt.tensor(np.random.default_rng(1).integers(0, high, shape))


# ---------------------------------------------------------------------------- the F.* sweep
# name -> (function, good arguments by name, the tensor arguments that must be float).
# Every bad value below replaces ONE argument of a good call.
F_CALLS = {
    "exp": (F.exp, lambda: dict(x=f32(2, 3)), {"x"}),
    "log": (F.log, lambda: dict(x=f32(2, 3, positive=True)), {"x"}),
    "sqrt": (F.sqrt, lambda: dict(x=f32(2, 3, positive=True)), {"x"}),
    "relu": (F.relu, lambda: dict(x=f32(2, 3)), set()),
    "tanh": (F.tanh, lambda: dict(x=f32(2, 3)), {"x"}),
    "sigmoid": (F.sigmoid, lambda: dict(x=f32(2, 3)), {"x"}),
    "gelu": (F.gelu, lambda: dict(x=f32(2, 3)), {"x"}),
    "gelu_tanh": (F.gelu_tanh, lambda: dict(x=f32(2, 3)), {"x"}),
    "silu": (F.silu, lambda: dict(x=f32(2, 3)), {"x"}),
    "swish": (F.swish, lambda: dict(x=f32(2, 3)), {"x"}),
    "neg": (F.neg, lambda: dict(x=f32(2, 3)), set()),
    "add": (F.add, lambda: dict(a=f32(2, 3), b=f32(2, 3)), set()),
    "sub": (F.sub, lambda: dict(a=f32(2, 3), b=f32(2, 3)), set()),
    "mul": (F.mul, lambda: dict(a=f32(2, 3), b=f32(2, 3)), set()),
    "div": (F.div, lambda: dict(a=f32(2, 3), b=f32(2, 3, positive=True)), set()),
    "pow": (F.pow, lambda: dict(x=f32(2, 3, positive=True), exponent=0.5), {"x"}),
    "sum": (F.sum, lambda: dict(x=f32(2, 3), axis=-1), set()),
    "mean": (F.mean, lambda: dict(x=f32(2, 3), axis=-1), set()),
    "max": (F.max, lambda: dict(x=f32(2, 3), axis=-1), set()),
    "reshape": (F.reshape, lambda: dict(x=f32(2, 3), shape=(3, 2)), set()),
    "transpose": (F.transpose, lambda: dict(x=f32(2, 3)), set()),
    "permute": (F.permute, lambda: dict(x=f32(2, 3), axes=(1, 0)), set()),
    "getitem": (F.getitem, lambda: dict(x=f32(2, 3), index=0), set()),
    "concat": (F.concat, lambda: dict(xs=[f32(2, 3), f32(1, 3)], axis=0), set()),
    "split_heads": (F.split_heads, lambda: dict(x=f32(2, 3, 4), h=2), set()),
    "merge_heads": (F.merge_heads, lambda: dict(x=f32(2, 2, 3, 2)), set()),
    "repeat_heads": (F.repeat_heads, lambda: dict(x=f32(2, 2, 3, 2), groups=2), set()),
    "matmul": (F.matmul, lambda: dict(a=f32(2, 3), b=f32(3, 4)), set()),
    "linear": (F.linear, lambda: dict(x=f32(2, 3), weight=f32(3, 4), bias=f32(4)), {"x"}),
    "softmax": (F.softmax, lambda: dict(x=f32(2, 3)), {"x"}),
    "log_softmax": (F.log_softmax, lambda: dict(x=f32(2, 3)), {"x"}),
    "layer_norm": (
        F.layer_norm, lambda: dict(x=f32(2, 3), gamma=f32(3), beta=f32(3)), {"x"},
    ),
    "rms_norm": (F.rms_norm, lambda: dict(x=f32(2, 3), gamma=f32(3)), {"x", "gamma"}),
    "rotary_embedding": (F.rotary_embedding, lambda: dict(x=f32(2, 3, 4)), {"x"}),
    "scaled_dot_product_attention": (
        F.scaled_dot_product_attention,
        lambda: dict(q=f32(1, 2, 4), k=f32(1, 3, 4), v=f32(1, 3, 4)),
        {"q", "k", "v"},
    ),
    "local_attention": (
        F.local_attention,
        lambda: dict(q=f32(1, 2, 4), k=f32(1, 3, 4), v=f32(1, 3, 4), window=1),
        {"q", "k", "v"},
    ),
    "strided_attention": (
        F.strided_attention,
        lambda: dict(q=f32(1, 2, 4), k=f32(1, 3, 4), v=f32(1, 3, 4), stride=2),
        {"q", "k", "v"},
    ),
    "linear_attention": (
        F.linear_attention,
        lambda: dict(q=f32(1, 2, 4), k=f32(1, 3, 4), v=f32(1, 3, 4)),
        {"q", "k", "v"},
    ),
    "embedding": (F.embedding, lambda: dict(ids=ints(2, 3, high=5), weight=f32(5, 4)), {"weight"}),
    "cross_entropy": (
        F.cross_entropy, lambda: dict(logits=f32(2, 5), target=ints(2, high=5)), {"logits"},
    ),
    "dropout": (F.dropout, lambda: dict(x=f32(2, 3), p=0.5), set()),
    "dropout_add": (
        F.dropout_add, lambda: dict(x=f32(2, 3), residual=f32(2, 3), p=0.5), set(),
    ),
    "astype": (F.astype, lambda: dict(x=f32(2, 3), dtype="float64"), set()),
    "to_device": (F.to_device, lambda: dict(x=f32(2, 3), device="cpu"), set()),
}  # fmt: skip

TENSOR_ARGS = {
    name: [k for k, v in make().items() if isinstance(v, mt.Tensor) or k == "xs"]
    for name, (_, make, _) in F_CALLS.items()
}
BAD_VALUES = {"int": 3, "list": [[1.0, 2.0]], "str": "x", "None": None, "complex": 1j}
# (function, argument, bad value) that are valid calls, with what they mean
ALLOWED = {
    **{(op, arg, "int"): "a Python number as one operand" for op in ("add", "sub", "mul", "div")
       for arg in ("a", "b")},
    ("embedding", "ids", "int"): "one token id: a (D,) vector",
    ("linear", "bias", "None"): "no bias",
}  # fmt: skip


def _assert_names(err: BaseException, where: str, name: str) -> None:
    assert isinstance(err, MiniTransformerError), f"{type(err).__name__}: {err}"
    message = str(err)
    assert "\n" not in message
    assert message.startswith(where), message
    assert re.search(rf"\b{re.escape(name)}\b", message), f"{name!r} not named in: {message}"


def test_the_sweep_covers_every_public_function():
    assert set(F_CALLS) == set(F.__all__)


@pytest.mark.parametrize("name", sorted(F_CALLS))
def test_the_good_call_works(name):
    fn, make, _ = F_CALLS[name]
    assert isinstance(fn(**make()), mt.Tensor)


SWEEP = [
    (name, arg, bad) for name in sorted(F_CALLS) for arg in TENSOR_ARGS[name] for bad in BAD_VALUES
]


@pytest.mark.parametrize(("name", "arg", "bad"), SWEEP, ids=["-".join(c) for c in SWEEP])
def test_a_non_tensor_argument_gets_a_library_error_naming_it(name, arg, bad):
    fn, make, _ = F_CALLS[name]
    kwargs = make()
    kwargs[arg] = BAD_VALUES[bad]
    if (name, arg, bad) in ALLOWED:
        assert isinstance(fn(**kwargs), mt.Tensor)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning on the way to the refusal either
        with pytest.raises(MiniTransformerError) as info:
            fn(**kwargs)
    _assert_names(info.value, name if name != "embedding" else "embedding", arg)


FLOAT_ARGS = [(name, arg) for name in sorted(F_CALLS) for arg in sorted(F_CALLS[name][2])]


@pytest.mark.parametrize(("name", "arg"), FLOAT_ARGS, ids=["-".join(c) for c in FLOAT_ARGS])
def test_an_integer_tensor_where_a_float_belongs_is_a_dtype_error_naming_it(name, arg):
    fn, make, _ = F_CALLS[name]
    kwargs = make()
    kwargs[arg] = kwargs[arg].astype("int64")
    with pytest.raises(DTypeError) as info:
        fn(**kwargs)
    _assert_names(info.value, name, arg if name != "linear" else "input")


@pytest.mark.parametrize("name", sorted(F_CALLS))
@pytest.mark.parametrize("rank", ["0-d", "0-size"])
def test_a_0d_or_empty_tensor_is_computed_or_refused_clearly(name, rank):
    """Every tensor argument made 0-d, or given a leading axis of length 0: either a correct
    (empty) result or a library error, never a NumPy traceback."""
    fn, make, _ = F_CALLS[name]
    kwargs = make()
    for arg in TENSOR_ARGS[name]:
        value = kwargs[arg]
        if isinstance(value, list):
            continue
        data = value.numpy()
        data = data.reshape(-1)[0] if rank == "0-d" else data[:0]
        kwargs[arg] = mt.tensor(np.asarray(data))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = fn(**kwargs)
    except MiniTransformerError as err:
        assert "\n" not in str(err) and str(err).startswith(name)
    else:
        assert isinstance(out, mt.Tensor)


REDUCED_EMPTY = {
    "softmax over no classes": lambda: F.softmax(f32(2, 0)),
    "log_softmax over no classes": lambda: F.log_softmax(f32(2, 0), axis=1),
    "max over an empty axis": lambda: F.max(f32(2, 0), axis=1),
    "max of an empty tensor": lambda: F.max(f32(0)),
    "mean over an empty axis": lambda: F.mean(f32(0, 3), axis=0),
    "Tensor.max": lambda: f32(3, 0).max(-1),
    "layer_norm over D = 0": lambda: F.layer_norm(f32(2, 0), f32(0), f32(0)),
    "attention with S = 0 keys": lambda: F.scaled_dot_product_attention(
        f32(1, 2, 4), f32(1, 0, 4), f32(1, 0, 4)
    ),
    "attention with d_k = 0": lambda: F.scaled_dot_product_attention(
        f32(1, 2, 0), f32(1, 3, 0), f32(1, 3, 4)
    ),
    "blocked attention with S = 0 keys": lambda: F.scaled_dot_product_attention(
        f32(1, 2, 4), f32(1, 0, 4), f32(1, 0, 4), block_size=2
    ),
    "cross_entropy over V = 0": lambda: F.cross_entropy(f32(2, 0), ints(2)),
    "MultiHeadAttention with S = 0": lambda: nn.MultiHeadAttention(4, 2)(
        f32(1, 2, 4), f32(1, 0, 4), f32(1, 0, 4)
    ),
}


@pytest.mark.parametrize("call", list(REDUCED_EMPTY.values()), ids=list(REDUCED_EMPTY))
def test_reducing_over_nothing_is_a_shape_error(call):
    with pytest.raises(ShapeError, match=r"length 0|= 0|no keys"):
        call()


EMPTY_BUT_FINE = {
    "sum over an empty axis is 0": (lambda: F.sum(f32(2, 0), axis=1), np.zeros(2)),
    "softmax of no rows": (lambda: F.softmax(f32(0, 3)), np.zeros((0, 3))),
    "layer_norm of no rows": (lambda: F.layer_norm(f32(0, 3), f32(3), f32(3)), np.zeros((0, 3))),
    "attention with T = 0 queries": (
        lambda: F.scaled_dot_product_attention(f32(1, 0, 4), f32(1, 3, 4), f32(1, 3, 4)),
        np.zeros((1, 0, 4)),
    ),
    "blocked attention with T = 0 queries": (
        lambda: F.scaled_dot_product_attention(
            f32(1, 0, 4), f32(1, 3, 4), f32(1, 3, 4), block_size=2
        ),
        np.zeros((1, 0, 4)),
    ),
}


@pytest.mark.parametrize("case", list(EMPTY_BUT_FINE.values()), ids=list(EMPTY_BUT_FINE))
def test_empty_tensors_along_other_axes_are_computed(case):
    call, expected = case
    np.testing.assert_array_equal(call().numpy(), expected)


BAD_OPTIONS = {
    "sum axis str": (lambda: F.sum(f32(2, 3), axis="a"), ArgumentError, "axis"),
    "sum axis float": (lambda: F.sum(f32(2, 3), axis=1.5), ArgumentError, "axis"),
    "sum axis twice": (lambda: F.sum(f32(2, 3), axis=(0, 0)), ShapeError, "axis"),
    "max keepdims str": (lambda: F.max(f32(2, 3), keepdims="yes"), ArgumentError, "keepdims"),
    "reshape shape int list": (lambda: F.reshape(f32(2, 3), "ab"), ArgumentError, "shape"),
    "reshape size": (lambda: F.reshape(f32(2, 3), (4, 2)), ShapeError, "reshape"),
    "permute axes str": (lambda: F.permute(f32(2, 3), "ab"), ArgumentError, "axes"),
    "permute out of range": (lambda: F.permute(f32(2, 3), (0, 5)), ShapeError, "axes"),
    "getitem out of range": (lambda: f32(2, 3)[5], ShapeError, "index"),
    "getitem float": (lambda: f32(2, 3)[1.5], ArgumentError, "ints"),
    "concat axis": (lambda: F.concat([f32(2, 3)], axis=7), ShapeError, "axis"),
    "concat empty": (lambda: F.concat([]), ArgumentError, "xs"),
    "split_heads h=0": (lambda: F.split_heads(f32(2, 3, 4), 0), ArgumentError, "h"),
    "pow complex": (lambda: F.pow(f32(2), 1j), ArgumentError, "exponent"),
    "pow int tensor negative": (lambda: F.pow(ints(2), -1), DTypeError, "x"),
    "sub bool": (lambda: mt.tensor([True]) - mt.tensor([False]), DTypeError, "bool"),
    "neg bool": (lambda: -mt.tensor([True]), DTypeError, "bool"),
    "mul complex": (lambda: f32(2) * 1j, ArgumentError, "b"),
    "add str": (lambda: f32(2) + "a", ArgumentError, "b"),
    "radd list": (lambda: [1.0, 2.0] + f32(2), ArgumentError, "a"),
    "mul complex array": (lambda: F.mul(f32(2), np.array([1j, 2j])), DTypeError, "complex"),
    "astype complex": (lambda: F.astype(f32(2), "complex64"), DTypeError, "complex64"),
    "dropout generator": (lambda: F.dropout(f32(2), 0.5, generator=3), ArgumentError, "generator"),
    "linear weight float64": (lambda: F.linear(f32(2, 3), f32(3, 4).astype("float64")),
                              DTypeError, "weight"),
    "layer_norm gamma float64": (lambda: F.layer_norm(f32(2, 3), f32(3).astype("float64"), f32(3)),
                                 DTypeError, "gamma"),
    "layer_norm 0-d": (lambda: F.layer_norm(mt.tensor(1.0), f32(1), f32(1)), ShapeError, "x"),
    "attention mask ragged": (lambda: F.scaled_dot_product_attention(
        f32(1, 2, 4), f32(1, 3, 4), f32(1, 3, 4), mask=[[True], [True, False]]),
        ShapeError, "mask"),
    "attention block_size 0": (lambda: F.scaled_dot_product_attention(
        f32(1, 2, 4), f32(1, 3, 4), f32(1, 3, 4), block_size=0), ArgumentError, "block_size"),
    "attention block_size str": (lambda: F.scaled_dot_product_attention(
        f32(1, 2, 4), f32(1, 3, 4), f32(1, 3, 4), block_size="2"), ArgumentError, "block_size"),
    "blocked attention mask ragged": (lambda: F.scaled_dot_product_attention(
        f32(1, 2, 4), f32(1, 3, 4), f32(1, 3, 4), mask=[[True], [True, False]], block_size=2),
        ShapeError, "mask"),
    "embedding ids str": (lambda: F.embedding(["a"], f32(5, 4)), DTypeError, "ids"),
    "cross_entropy target None": (lambda: F.cross_entropy(f32(2, 5), None), DTypeError, "target"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_OPTIONS.values()), ids=list(BAD_OPTIONS))
def test_bad_options_get_a_library_error_naming_them(case):
    call, kind, name = case
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(kind) as info:
            call()
    assert type(info.value) is kind
    assert name in str(info.value) and "\n" not in str(info.value), str(info.value)


# ---------------------------------------------------------------------------- nn layers
LAYERS = {
    "Linear": (lambda: nn.Linear(3, 4), ("x",), lambda: (f32(2, 3),)),
    "Embedding": (lambda: nn.Embedding(5, 4), ("ids",), lambda: (ints(2, 3),)),
    "LayerNorm": (lambda: nn.LayerNorm(3), ("x",), lambda: (f32(2, 3),)),
    "Dropout": (lambda: nn.Dropout(0.5), ("x",), lambda: (f32(2, 3),)),
    "Dropout-eval": (lambda: nn.Dropout(0.5).eval(), ("x",), lambda: (f32(2, 3),)),
    "PositionwiseFeedForward": (
        lambda: nn.PositionwiseFeedForward(3, 8), ("x",), lambda: (f32(2, 3),),
    ),
    "MultiHeadAttention": (
        lambda: nn.MultiHeadAttention(4, 2),
        ("query", "key", "value"),
        lambda: (f32(1, 2, 4), f32(1, 3, 4), f32(1, 3, 4)),
    ),
}  # fmt: skip
LAYER_CASES = [
    (layer, i, bad)
    for layer, (_, names, _) in LAYERS.items()
    for i in range(len(names))
    for bad in ("int", "list", "str", "None")
    if not (layer == "Embedding" and bad == "int")  # one token id: valid
]


@pytest.mark.parametrize(
    ("layer", "i", "bad"), LAYER_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in LAYER_CASES]
)
def test_a_layer_called_with_a_non_tensor_names_the_argument(layer, i, bad):
    build, names, inputs = LAYERS[layer]
    args = list(inputs())
    args[i] = BAD_VALUES[bad]
    with pytest.raises(MiniTransformerError) as info:
        build()(*args)
    message = str(info.value)
    assert "\n" not in message
    expected = {"PositionwiseFeedForward": "linear", "Linear": "linear", "LayerNorm": "layer_norm"}
    expected = expected.get(layer, "")
    assert re.search(rf"\b{names[i]}\b", message), message
    assert message.lower().startswith((expected or layer.split("-")[0]).lower()), message


@pytest.mark.parametrize("layer", ["Linear", "LayerNorm", "PositionwiseFeedForward", "MHA"])
def test_a_layer_given_integers_where_floats_belong_is_a_dtype_error(layer):
    if layer == "MHA":
        call = lambda: nn.MultiHeadAttention(4, 2)(ints(1, 2, 4), ints(1, 2, 4), ints(1, 2, 4))  # noqa: E731
    else:
        call = lambda: LAYERS[layer][0]()(ints(2, 3))  # noqa: E731
    with pytest.raises(DTypeError, match=r"int64.*float|float.*int64"):
        call()


def test_multi_head_attention_refuses_the_wrong_rank_and_accepts_no_queries():
    mha = nn.MultiHeadAttention(4, 2)
    with pytest.raises(ShapeError, match="query has shape"):
        mha(f32(2, 4), f32(1, 3, 4), f32(1, 3, 4))
    out = mha(f32(1, 0, 4), f32(1, 3, 4), f32(1, 3, 4))
    assert out.shape == (1, 0, 4)


# ---------------------------------------------------------------------------- gradcheck
@pytest.mark.parametrize("fn", [3, "tanh", None, [F.tanh]])
def test_gradcheck_refuses_a_non_callable(fn):
    x = mt.tensor([0.5], dtype="float64", requires_grad=True)
    with pytest.raises(ArgumentError, match="gradcheck: fn must be a function"):
        mt.gradcheck(fn, x)


def test_gradcheck_refuses_a_function_that_returns_no_tensor():
    x = mt.tensor([0.5], dtype="float64", requires_grad=True)
    with pytest.raises(ArgumentError, match="gradcheck: fn returned ndarray"):
        mt.gradcheck(lambda t: t.numpy(), x)
    with pytest.raises(ArgumentError, match="seed"):
        mt.gradcheck(F.tanh, x, seed="a")


# ---------------------------------------------------------------------------- mt.tensor data
NOT_REAL_NUMBERS = {
    "complex array": (np.array([1 + 2j]), "complex128", "np.real"),
    "complex64 array": (np.array([1 + 2j], dtype=np.complex64), "complex64", "np.abs"),
    "complex list": ([1.0, 2j], "complex128", "np.real"),
    "complex scalar": (np.complex128(1j), "complex128", "np.real"),
    "object array": (np.array([1, None], dtype=object), "object", "float32"),
    "object of numbers": (np.array([1.0, 2.0], dtype=object), "object", "float32"),
    "string array": (np.array(["a", "b"]), "str", "vocab.tokenize"),
    "bytes array": (np.array([b"a"]), "bytes", "vocab.tokenize"),
    "datetime array": (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64", "int64"),
    "timedelta array": (np.array([1], dtype="timedelta64[s]"), "timedelta64", "int64"),
    "record array": (np.zeros(2, dtype=[("a", "f4")]), "void", "field"),
    "longdouble array": (np.zeros(2, dtype=np.longdouble), "float128", "float64"),
    "string": ("abc", "str", "vocab.tokenize"),
    "None": (None, "object", "NoneType"),
    "list with None": ([1.0, None], "object", "list"),
    "huge int": ([2**70], "object", "list"),
}  # fmt: skip


@pytest.mark.parametrize("make", [mt.tensor, mt.Tensor], ids=["mt.tensor", "Tensor"])
@pytest.mark.parametrize("case", list(NOT_REAL_NUMBERS.values()), ids=list(NOT_REAL_NUMBERS))
def test_tensor_refuses_data_that_is_not_real_numbers_naming_the_dtype_and_the_fix(make, case):
    data, dtype, fix = case
    if dtype == "float128" and np.dtype(np.longdouble).itemsize == 8:
        pytest.skip("longdouble is float64 on this platform")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning: refused before any cast
        with pytest.raises(DTypeError) as info:
            make(data, dtype="float32") if make is mt.Tensor else make(data)
    message = str(info.value)
    where = "mt.tensor" if make is mt.tensor else "Tensor"
    assert message.startswith(f"{where}: data must be numbers"), message
    assert dtype in message and fix in message and "\n" not in message, message


def test_tensor_refuses_complex_arrays_of_other_backends():
    xs = pytest.importorskip("array_api_strict")
    z = xs.asarray([1 + 2j], dtype=xs.complex64)
    with pytest.raises(DTypeError, match="complex64.*np.real"):
        mt.tensor(z)


def test_tensor_refuses_ragged_lists_with_a_shape_error():
    with pytest.raises(ShapeError, match="ragged"):
        mt.tensor([[1.0], [1.0, 2.0]])


@pytest.mark.parametrize(
    "data", [np.float16(1), np.array([1, 2], np.uint8), [True, False], 3, 2.5, [[1, 2]]]
)
def test_tensor_keeps_taking_real_numbers(data):
    assert mt.tensor(data).shape == np.asarray(data).shape


# ---------------------------------------------------------------------------- grad mode
def _in_threads(a, b) -> None:
    ta, tb = threading.Thread(target=a), threading.Thread(target=b)
    ta.start(), tb.start()
    ta.join(10), tb.join(10)
    assert not ta.is_alive() and not tb.is_alive()


def test_no_grad_in_one_thread_leaves_autograd_on_in_another():
    inside, checked = threading.Event(), threading.Event()
    seen = {}

    def evaluating():
        with mt.no_grad():
            inside.set()
            checked.wait(10)  # stay inside no_grad while the other thread works
            seen["eval"] = mt.is_grad_enabled(), (f32(2) * 2.0).requires_grad

    def training():
        inside.wait(10)  # the other thread is inside no_grad now
        w = mt.tensor([1.0, 2.0], requires_grad=True)
        loss = (w * w).sum()
        seen["train"] = mt.is_grad_enabled(), loss.requires_grad
        loss.backward()
        seen["grad"] = w.grad.tolist()
        checked.set()

    _in_threads(evaluating, training)
    assert seen == {"eval": (False, False), "train": (True, True), "grad": [2.0, 4.0]}
    assert mt.is_grad_enabled()


def test_no_grad_as_a_decorator_and_enable_grad_are_per_thread_too():
    inside, checked = threading.Event(), threading.Event()
    seen = {}

    @mt.no_grad()
    def decode():
        inside.set()
        checked.wait(10)
        seen["decorated"] = mt.is_grad_enabled()
        with mt.enable_grad():
            seen["enabled inside"] = mt.is_grad_enabled()
        seen["after"] = mt.is_grad_enabled()

    def other():
        inside.wait(10)
        seen["other"] = mt.is_grad_enabled()
        with mt.no_grad():
            pass
        checked.set()

    _in_threads(decode, other)
    assert seen == {"decorated": False, "enabled inside": True, "after": False, "other": True}
    assert mt.is_grad_enabled()


def test_a_new_thread_starts_with_grad_on_even_inside_no_grad():
    seen = []
    with mt.no_grad():
        t = threading.Thread(target=lambda: seen.append(mt.is_grad_enabled()))
        t.start()
        t.join(10)
        assert not mt.is_grad_enabled()
    assert seen == [True]


# ---------------------------------------------------------------------------- the strict backend
def test_layer_norm_on_two_libraries_is_a_device_error_without_a_user_warning():
    pytest.importorskip("array_api_strict")
    x = mt.tensor(np.ones((2, 3), np.float32), device="strict:device1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # array-api-strict warns on a NumPy dtype comparison
        with pytest.raises(mt.errors.DeviceError, match="strict:device1"):
            F.layer_norm(x, f32(3), f32(3))
        with pytest.raises(mt.errors.DeviceError):
            F.linear(x, f32(3, 4))


# ---------------------------------------------------------------------------- float32 extremes
MAGNITUDES = [1e-30, 1e-20, 1e-5, 1.0, 1e5, 1e19, 1e20, 1e30, 1e37, 3e38]


def _layer_norm_64(x: np.ndarray, g: np.ndarray, eps: float):
    """LayerNorm's output and dL/dx in float64, where no square of these rows overflows."""
    x = x.astype(np.float64)
    xc = x - x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
    x_hat = xc * rstd
    dx = rstd * (g - g.mean(-1, keepdims=True) - x_hat * (g * x_hat).mean(-1, keepdims=True))
    return x_hat, dx


@pytest.mark.parametrize("path", ["fast", "reference"])
@pytest.mark.parametrize("eps", [1e-5, 0.0])
@pytest.mark.parametrize("magnitude", MAGNITUDES)
def test_layer_norm_is_right_from_1e_minus_30_to_3e38_in_float32(device, path, eps, magnitude):
    """Rows of float32 values of every magnitude (one row also with a huge mean, one spread
    over the whole range) against float64: the output to float32 precision, the gradient
    to float32 precision relative to its largest element."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.0, 1.0, (4, 16)) * magnitude
    x[1] = (0.9 + 0.05 * x[1] / magnitude) * magnitude  # a mean 20 spreads away from 0
    x[2, :2] = [-3.4e38, 3.4e38]  # the whole float32 range in one row
    x = x.astype(np.float32)
    g = rng.standard_normal((4, 16))
    y64, dx64 = _layer_norm_64(x, g, eps)
    xt = mt.tensor(x, device=device, requires_grad=True)
    ones, zeros = (mt.tensor(np.full(16, v, np.float32), device=device) for v in (1.0, 0.0))
    ctx = fast.reference_only() if path == "reference" else fast.switched_on()
    with ctx, warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warnings either
        y = F.layer_norm(xt, ones, zeros, eps=eps)
        y.backward(mt.tensor(g.astype(np.float32), device=device))
    np.testing.assert_allclose(y.numpy(), y64, rtol=1e-5, atol=2e-6)
    dx = xt.grad if isinstance(xt.grad, np.ndarray) else mt.backend.to_numpy(xt.grad)
    # On a GPU float32 subnormals are flushed to zero (CuPy's ufuncs and our kernels alike
    # are compiled with -ftz=true: fast/gpu/cuda_source.CUPY_APPENDS): a gradient element
    # below the smallest normal float32 comes out 0 there. Row 2 spans the whole float32
    # range, and at 3e38 every row does: their 1/std (< 1.2e-38) is itself subnormal,
    # flushed, and their whole gradient (every element O(1/std)) comes out 0. Measured on an
    # H200 (gpucheck's tests-k0/k1 logs); exact for normal numbers only.
    tiny = np.finfo(np.float32).tiny if device.startswith("cuda") else 0.0
    rstd = 1.0 / np.sqrt(x.astype(np.float64).var(-1) + eps)
    for row in range(4):
        scale = np.abs(dx64[row]).max()
        atol = scale if rstd[row] < tiny else max(1e-4 * scale, tiny)
        np.testing.assert_allclose(dx[row], dx64[row], rtol=0, atol=atol, err_msg=f"row {row}")


def test_layer_norm_float16_keeps_its_answer_past_256():
    """float16 squares overflow at 256: the same scaling keeps its rows right too."""
    x = np.array([[300.0, -300.0, 1000.0, 0.0]], np.float16)
    y = F.layer_norm(
        mt.tensor(x), mt.tensor(np.ones(4, np.float16)), mt.tensor(np.zeros(4, np.float16))
    )
    np.testing.assert_allclose(y.numpy(), _layer_norm_64(x, x, 1e-5)[0], atol=2e-3)


def test_layer_norm_of_nan_or_inf_rows_is_nan_and_other_rows_are_untouched():
    x = np.array([[1.0, 2.0, 3.0], [np.nan, 1.0, 2.0], [np.inf, 1.0, 2.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = F.layer_norm(mt.tensor(x), f32(3) * 0 + 1, f32(3) * 0).numpy()
    np.testing.assert_allclose(y[0], [-1.2247, 0.0, 1.2247], atol=1e-4)
    assert np.isnan(y[1]).all() and np.isnan(y[2]).any()


@pytest.mark.parametrize("path", ["fast", "reference"])
def test_softmax_and_log_softmax_at_the_ends_of_float32(device, path):
    """Logits up to +-3.4e38 and fully masked (-inf) rows: softmax and log-softmax as float64
    gives them (a probability that underflows is 0, a log-probability below -3.4e38 is
    -inf), NaN-free, gradients included."""
    x = np.array(
        [[3.4e38, 0.0, -3.4e38], [1e30, 1e30, -1e30], [-np.inf, 5.0, -np.inf],
         [-np.inf, -np.inf, -np.inf], [1e-30, 0.0, -1e-30]], np.float32,
    )  # fmt: skip
    with np.errstate(over="ignore", invalid="ignore"):
        z = x.astype(np.float64) - x.max(-1, keepdims=True)
        z[3] = -np.inf  # masked row: softmax 0, log-softmax -inf
        p64 = np.exp(z) / np.where(
            np.exp(z).sum(-1, keepdims=True) > 0, np.exp(z).sum(-1, keepdims=True), 1
        )
        logp64 = np.maximum(
            z - np.log(np.maximum(np.exp(z).sum(-1, keepdims=True), 1e-300)), -np.inf
        )
    ctx = fast.reference_only() if path == "reference" else fast.switched_on()
    with ctx, np.errstate(over="ignore"):  # x - max overflows to -inf (e^-inf = 0: right)
        xt = mt.tensor(x, device=device, requires_grad=True)
        p = F.softmax(xt)
        p.backward(mt.tensor(np.ones_like(x), device=device))
        logp = F.log_softmax(mt.tensor(x, device=device))
    np.testing.assert_allclose(p.numpy(), p64, atol=1e-7)
    out = logp.numpy()
    finite = np.isfinite(logp64) & (logp64 > -3.4e38)
    np.testing.assert_allclose(out[finite], logp64[finite], rtol=1e-6)
    assert (out[~finite] == -np.inf).all()
    grad = mt.backend.to_numpy(xt.grad)
    assert np.isfinite(grad).all() and np.abs(grad).max() < 1e-6  # softmax rows sum to 1


@pytest.mark.parametrize("path", ["fast", "reference"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_at_the_ends_of_float32(device, path, smoothing):
    """Huge logits: the loss as float64 gives it while it fits float32 (label smoothing's
    mean of the logits never overflows first), inf when it does not; the gradient p - q is
    finite; a fully masked (-inf) row gives inf with smoothing or a right target, never NaN."""
    x = np.array(
        [[3e38, 0.0, 0.0, 0.0], [1e37, -1e37, 0.0, 5.0], [1e5, 0.0, -1e5, 0.0]], np.float32
    )
    t = np.array([1, 0, 2])
    x64 = x.astype(np.float64)
    lse = x64.max(-1) + np.log(np.exp(x64 - x64.max(-1, keepdims=True)).sum(-1))
    loss64 = (1 - smoothing) * (lse - x64[np.arange(3), t]) + smoothing * (lse - x64.mean(-1))
    ctx = fast.reference_only() if path == "reference" else fast.switched_on()
    with ctx, warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow on the way to a finite loss
        xt = mt.tensor(x, device=device, requires_grad=True)
        loss = F.cross_entropy(xt, t, label_smoothing=smoothing, reduction="none")
        loss.backward(mt.tensor(np.ones(3, np.float32), device=device))
    np.testing.assert_allclose(loss.numpy(), loss64, rtol=1e-5)
    assert np.isfinite(mt.backend.to_numpy(xt.grad)).all()


def test_softmax_of_plus_inf_or_nan_logits_says_so_with_nan():
    """+inf or NaN logits have no softmax: the row holds NaN (the trainer's finite check
    stops on it), it is not silently finite."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = F.softmax(mt.tensor(np.array([[np.inf, 0.0], [np.nan, 0.0], [1.0, 0.0]], np.float32)))
    out = p.numpy()
    assert np.isnan(out[0]).any() and np.isnan(out[1]).any() and np.isfinite(out[2]).all()
