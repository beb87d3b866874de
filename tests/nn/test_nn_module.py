"""Module machinery: registration, names, state_dict round trips and errors, to(), modes."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import tiny_batch, tiny_config, to_np

import minitransformer as mt
from minitransformer.errors import DeviceError, ShapeError
from minitransformer.nn import Linear, Module, ModuleList, Parameter, StateDictKeyError


class Two(Module):
    def __init__(self):
        super().__init__()
        self.first = Linear(3, 4)
        self.scale = Parameter(np.ones(4), dtype="float32")
        self.stack = ModuleList([Linear(4, 4), Linear(4, 2, bias=False)])
        self.register_buffer("count", mt.tensor(np.zeros(2, dtype=np.int64)))
        self.register_buffer("scratch", mt.tensor(np.zeros(3)), persistent=False)

    def forward(self, x):
        h = self.first(x) * self.scale
        for layer in self.stack:
            h = layer(h)
        return h


def test_named_parameters_are_dotted_and_in_registration_order():
    m = Two()
    names = [n for n, _ in m.named_parameters()]
    assert names == [
        "scale",
        "first.weight",
        "first.bias",
        "stack.0.weight",
        "stack.0.bias",
        "stack.1.weight",
    ]
    assert all(p.requires_grad and p.is_leaf for p in m.parameters())
    assert m.num_parameters() == 4 + 12 + 4 + 16 + 4 + 8
    assert [n for n, _ in m.named_buffers()] == ["count", "scratch"]
    assert len(m.stack) == 2 and isinstance(m.stack[1], Linear)


def test_shared_parameters_are_listed_once():
    model = mt.nn.Transformer(tiny_config(N=1))
    names = [n for n, _ in model.named_parameters()]
    assert names.count("src_embed.weight") == 1 and not any("tgt_embed" in n for n in names)
    assert model.tgt_embed.weight is model.src_embed.weight
    untied = mt.nn.Transformer(tiny_config(N=1, tie_embeddings=False))
    untied_names = [n for n, _ in untied.named_parameters()]
    assert "tgt_embed.weight" in untied_names and "out_proj.weight" in untied_names
    extra = 2 * 11 * 8  # one more embedding and the output matrix
    assert untied.num_parameters() == model.num_parameters() + extra


def test_state_dict_holds_params_and_persistent_buffers_as_copies():
    m = Two()
    sd = m.state_dict()
    assert list(sd) == [n for n, _ in m.named_parameters()] + ["count"]
    assert not isinstance(sd["first.weight"], mt.Tensor)
    sd["first.weight"][0, 0] = 123.0
    assert float(to_np(m.first.weight)[0, 0]) != 123.0  # a copy, not a view


def test_state_dict_round_trip_restores_outputs(device):
    cfg = tiny_config(N=1)
    a, b = mt.nn.Transformer(cfg, seed=0).to(device), mt.nn.Transformer(cfg, seed=1).to(device)
    src, tgt_in, _ = tiny_batch(device)
    assert not np.allclose(to_np(a(src, tgt_in)), to_np(b(src, tgt_in)))
    saved = {k: mt.backend.to_numpy(v) for k, v in a.state_dict().items()}  # as a checkpoint
    result = b.load_state_dict(saved)
    assert result == {"missing": [], "unexpected": []}
    np.testing.assert_array_equal(to_np(a(src, tgt_in)), to_np(b(src, tgt_in)))
    assert b.device == device  # loading put the arrays on the model's device


def test_load_state_dict_lists_every_missing_and_unexpected_key():
    m = Two()
    sd = m.state_dict()
    del sd["first.bias"], sd["stack.0.weight"]
    sd["extra.weight"] = np.zeros(3)
    with pytest.raises(StateDictKeyError) as info:
        m.load_state_dict(sd)
    msg = str(info.value)
    assert "missing keys: ['first.bias', 'stack.0.weight']" in msg
    assert "unexpected keys: ['extra.weight']" in msg and "strict=False" in msg
    assert isinstance(info.value, KeyError)
    result = m.load_state_dict(sd, strict=False)
    assert result == {"missing": ["first.bias", "stack.0.weight"], "unexpected": ["extra.weight"]}


def test_load_state_dict_mis_shaped_is_a_shape_error_naming_both_shapes():
    m = Two()
    sd = m.state_dict()
    sd["first.weight"] = np.zeros((4, 3), dtype=np.float32)
    sd["stack.1.weight"] = np.zeros((4, 3), dtype=np.float32)
    for strict in (True, False):
        with pytest.raises(ShapeError) as info:
            m.load_state_dict(sd, strict=strict)
        msg = str(info.value)
        assert "first.weight: checkpoint (4, 3) vs model (3, 4)" in msg
        assert "stack.1.weight: checkpoint (4, 3) vs model (4, 2)" in msg


def test_load_state_dict_casts_dtype_and_keeps_parameter_identity():
    m = Two()
    w = m.first.weight
    sd = {k: np.asarray(v, dtype=np.float64) for k, v in m.state_dict().items()}
    sd["count"] = np.array([3, 4])
    m.load_state_dict(sd)
    assert m.first.weight is w and mt.backend.dtype_name(w.dtype) == "float32"
    assert to_np(m.count).tolist() == [3, 4]


def test_to_moves_params_grads_and_buffers_in_place(device):
    m = Two()
    x = mt.tensor(np.ones((2, 3)), dtype="float32")
    m(x).sum().backward()
    params = m.parameters()
    assert m.to(device) is m
    assert m.parameters() == params  # same objects: an optimizer built earlier still works
    for _, p in m.named_parameters():
        assert p.device == device and p.grad is not None
        assert mt.backend.device_of(p.grad) == device
    assert all(b.device == device for _, b in m.named_buffers())
    out = m(mt.tensor(np.ones((2, 3)), dtype="float32", device=device))
    assert out.device == device and out.shape == (2, 2)


def test_to_casts_floating_arrays_only():
    m = Two().to(dtype="float64")
    assert all(mt.backend.dtype_name(p.dtype) == "float64" for p in m.parameters())
    assert mt.backend.dtype_name(m.count.dtype) == "int64"
    assert mt.backend.dtype_name(m.scratch.dtype) == "float64"


def test_mixing_devices_raises_device_error():
    pytest.importorskip("array_api_strict")
    m = Two()
    m.first.to("cpu")
    m.stack.to("strict:device1")
    with pytest.raises(DeviceError, match="different devices"):
        m(mt.tensor(np.ones((2, 3)), dtype="float32"))


def test_train_eval_zero_grad_and_call():
    m = Two()
    assert m.training and m.stack[0].training
    m.eval()
    assert not m.training and not m.stack[0].training
    m.train()
    assert m.stack[1].training
    m(mt.tensor(np.ones((1, 3)), dtype="float32")).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_reassigning_an_attribute_replaces_the_registration():
    m = Two()
    m.first = None
    assert "first.weight" not in dict(m.named_parameters()) and m.first is None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = m.nope


def test_forgetting_super_init_is_a_clear_error():
    class Bad(Module):
        def __init__(self):
            self.w = Parameter(np.ones(2))

    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        Bad()


def test_repr_shows_the_tree():
    text = repr(mt.nn.Transformer(tiny_config(N=1)))
    assert "Transformer(d_model=8" in text and "(encoder): Encoder(" in text
    assert "(w_q): Linear(d_in=8, d_out=8, bias=True)" in text
