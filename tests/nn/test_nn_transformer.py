"""The whole model: gradchecks, no leaks through masks, cached decoding, input checks, devices."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import BOS, EOS, PAD, sampled_gradcheck, tiny_batch, tiny_config, to_np

import minitransformer as mt
from minitransformer.errors import DeviceError, DTypeError, ShapeError, TokenIdError
from minitransformer.nn import DecoderLayer, EncoderLayer, Transformer, padding_mask, target_mask


def nudged(module, device, seed=1):
    """The module in float64 on ``device``, every parameter moved off its init."""
    module.to(device, "float64")
    rng = np.random.default_rng(seed)
    for p in module.parameters():
        p.data = mt.backend.asarray(to_np(p) + 0.2 * rng.standard_normal(p.shape), device=device)
    return module


def check_layer(fn, inputs, layer, device):
    """Full gradcheck of fn w.r.t. inputs and every parameter on NumPy; on the other
    backends (slower per op) a sampled check, 3 random elements per tensor."""
    params = layer.parameters()
    if device == "cpu":
        return mt.gradcheck(lambda *args: fn(*args[: len(inputs)]), *inputs, *params)
    u = mt.backend.asarray(
        np.random.default_rng(0).standard_normal(fn(*inputs).shape), device=device
    )
    sampled_gradcheck(lambda: (fn(*inputs) * u).sum(), [*inputs, *params], per_param=3)
    return True


@pytest.mark.parametrize("pre_norm", [False, True])
def test_encoder_layer_gradcheck(device, make, rng, pre_norm):
    layer = nudged(EncoderLayer(8, 2, 16, pre_norm=pre_norm), device)
    x = make(rng.standard_normal((2, 5, 8)))
    src, _, _ = tiny_batch(device)
    mask = padding_mask(src, PAD)
    assert check_layer(lambda x: layer(x, mask), [x], layer, device)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_decoder_layer_gradcheck(device, make, rng, pre_norm):
    layer = nudged(DecoderLayer(8, 2, 16, pre_norm=pre_norm), device)
    x = make(rng.standard_normal((2, 4, 8)))
    memory = make(rng.standard_normal((2, 5, 8)))
    src, tgt_in, _ = tiny_batch(device)
    src_mask, tgt_mask = padding_mask(src, PAD), target_mask(tgt_in, PAD)

    def fn(x, memory):
        return layer(x, memory, src_mask, tgt_mask)

    assert check_layer(fn, [x, memory], layer, device)


@pytest.mark.parametrize(
    "overrides",
    [{"N": 1}, {"pre_norm": True, "tie_embeddings": False, "learned_positions": True}],
)
def test_model_loss_gradient_wrt_every_parameter(device, overrides):
    """Label-smoothed, pad-ignoring loss of the tiny model. Post-LN with N=1 on NumPy:
    every element of every parameter (~1,600). Otherwise (N=2, or the slower backends):
    3 random elements of each parameter tensor, which keeps the folder under a minute."""
    model = nudged(Transformer(tiny_config(**overrides)), device)
    src, tgt_in, tgt_out = tiny_batch(device)
    per_param = None if device == "cpu" and overrides == {"N": 1} else 3
    sampled_gradcheck(
        lambda: model.loss(model(src, tgt_in), tgt_out), model.parameters(), per_param
    )


def test_future_target_tokens_do_not_leak(device):
    model = nudged(Transformer(tiny_config()), device)
    src, tgt_in, _ = tiny_batch(device)
    changed = to_np(tgt_in).copy()
    changed[:, 2:] = [[7, 8], [9, 10]]
    changed = mt.backend.asarray(changed, device=device)
    grads = []
    for tgt in (tgt_in, changed):
        model.zero_grad()
        logits = model(src, tgt)
        logits[:, :2].sum().backward()  # depends only on positions 0 and 1
        grads.append([to_np(p.grad) for p in model.parameters()])
        if tgt is tgt_in:
            early = to_np(logits)[:, :2]
    np.testing.assert_allclose(to_np(logits)[:, :2], early, rtol=1e-13, atol=1e-13)
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_padding_in_the_source_does_not_leak(device, make, rng):
    model = nudged(Transformer(tiny_config()), device)
    src, tgt_in, _ = tiny_batch(device)
    # 1) more padding columns change nothing
    wider = np.concatenate([to_np(src), np.zeros((2, 3), np.int64)], axis=1)
    wider = mt.backend.asarray(wider, device=device)
    np.testing.assert_allclose(to_np(model(wider, tgt_in)), to_np(model(src, tgt_in)), atol=1e-13)
    memory = model.encode(src)
    np.testing.assert_allclose(to_np(model.encode(wider))[:, :5], to_np(memory), atol=1e-13)
    # 2) whatever the memory holds at padded positions, the decoder never reads it
    noisy = to_np(memory).copy()
    noisy[1, 3:] = 1e3 * rng.standard_normal((2, 8))
    noisy = make(noisy, requires_grad=False)
    base = to_np(model.decode(tgt_in, memory, src))
    np.testing.assert_allclose(to_np(model.decode(tgt_in, noisy, src)), base, atol=1e-12)
    # 3) and the encoder's non-pad outputs ignore what sits in padded input positions
    x = rng.standard_normal((2, 5, 8))
    y = x.copy()
    y[1, 3:] = 50.0
    mask = padding_mask(src, PAD)
    a = to_np(model.encoder(make(x, requires_grad=False), mask))
    b = to_np(model.encoder(make(y, requires_grad=False), mask))
    np.testing.assert_allclose(a[0], b[0], atol=1e-12)
    np.testing.assert_allclose(a[1, :3], b[1, :3], atol=1e-12)


def test_fully_padded_rows_stay_finite(device):
    model = nudged(Transformer(tiny_config()), device)
    src = mt.backend.asarray(np.array([[3, 4, EOS], [PAD, PAD, PAD]]), device=device)
    tgt_in = mt.backend.asarray(np.array([[BOS, 5], [PAD, PAD]]), device=device)
    tgt_out = mt.backend.asarray(np.array([[5, EOS], [PAD, PAD]]), device=device)
    logits = model(src, tgt_in)
    loss = model.loss(logits, tgt_out)
    loss.backward()
    assert np.isfinite(to_np(logits)).all() and np.isfinite(loss.item())
    assert all(np.isfinite(to_np(p.grad)).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize(
    "overrides", [{}, {"pre_norm": True, "tie_embeddings": False, "learned_positions": True}]
)
def test_cached_decoding_equals_full_recomputation(device, overrides):
    model = nudged(Transformer(tiny_config(**overrides)), device)
    src, _, _ = tiny_batch(device)
    tgt = np.array([[BOS, 9, 10, 3, 4, 5], [BOS, 4, EOS, PAD, PAD, PAD]])  # pad mid-stream
    tgt = mt.backend.asarray(tgt, device=device)
    with mt.no_grad():
        full = to_np(model(src, tgt))
        memory = model.encode(src)
        cache = model.new_cache()
        steps = [to_np(model.decode(tgt[:, :2], memory, src, cache))]  # a 2-token prefix
        for t in range(2, 6):
            steps.append(to_np(model.decode(tgt[:, t : t + 1], memory, src, cache)))
    assert cache.offset == 6 and cache.self_attn[0].k.shape == (2, 2, 6, 4)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-11, atol=1e-12)


def test_cached_decoding_respects_max_len():
    model = Transformer(tiny_config(max_len=3))
    src = np.array([[3, 4]])
    memory, cache = model.encode(src), model.new_cache()
    model.decode(np.array([[BOS, 5, 6]]), memory, src, cache)
    with pytest.raises(TokenIdError, match="length 1 at offset 3, more than max_len = 3"):
        model.decode(np.array([[7]]), memory, src, cache)


def test_attention_weights_can_be_kept_for_plots():
    model = Transformer(tiny_config())
    model.attention_weights(True)
    src, tgt_in, _ = tiny_batch()
    model(src, tgt_in)
    w = to_np(model.decoder.layers[1].cross_attn.last_weights)
    assert w.shape == (2, 2, 4, 5)
    assert np.all(w[1, :, :, 3:] == 0)  # padded source positions get no attention
    model.attention_weights(False)
    assert model.decoder.layers[1].cross_attn.last_weights is None


def test_dropout_only_in_training():
    model = Transformer(tiny_config(dropout=0.3))
    src, tgt_in, _ = tiny_batch()
    a, b = to_np(model(src, tgt_in)), to_np(model(src, tgt_in))
    assert not np.allclose(a, b)
    model.eval()
    np.testing.assert_array_equal(to_np(model(src, tgt_in)), to_np(model(src, tgt_in)))


def test_model_on_another_device_stays_there():
    pytest.importorskip("array_api_strict")
    model = Transformer(tiny_config(dtype="float32")).to("strict:device1")
    src, tgt_in, tgt_out = tiny_batch("strict:device1")
    logits = model(src, tgt_in)
    assert logits.device == "strict:device1" and logits.shape == (2, 4, 11)
    model.loss(logits, tgt_out).backward()
    assert all(mt.backend.device_of(p.grad) == "strict:device1" for p in model.parameters())
    # host ids (NumPy) are checked on the host and uploaded: the same logits
    host = model(to_np(src), to_np(tgt_in))
    assert host.device == "strict:device1"
    np.testing.assert_array_equal(host.numpy(), model(src, tgt_in).numpy())
    elsewhere = mt.backend.asarray(to_np(src), device="strict:device2")
    with pytest.raises(
        DeviceError,
        match=r"src is on device 'strict:device2' but the model is on 'strict:device1'.*model.to",
    ):
        model(elsewhere, tgt_in)
    cpu_memory = Transformer(tiny_config(dtype="float32")).encode(to_np(src))
    with pytest.raises(DeviceError, match="different devices"):
        model.decode(tgt_in, cpu_memory, src)


INT = np.array([[3, 4, 5]])


@pytest.mark.parametrize(
    "src, error, message",
    [
        (INT.astype(np.float32), DTypeError, "src must hold integer token ids, got dtype "
         "float32; convert"),
        (np.array([3, 4, 5]), ShapeError, r"src must have shape \(B, L\), got \(3,\); add a "
         "batch axis"),
        (np.zeros((1, 2, 3), np.int64), ShapeError, r"got \(1, 2, 3\); reshape it to \(B, L\)"),
        (np.zeros((0, 3), np.int64), ShapeError, r"src is empty, shape \(0, 3\)"),
        (np.array([[3, 11, -1, 4, 12]]), TokenIdError, r"outside the vocabulary \[0, 11\): "
         r"\[-1, 11, 12\] \(first at \(batch, position\) \(0, 1\)\)"),
        (np.ones((1, 17), np.int64), TokenIdError, "src has length 17, more than max_len = 16"
         ".*raise max_len"),
    ],
)  # fmt: skip
def test_bad_source_ids(src, error, message):
    model = Transformer(tiny_config())
    with pytest.raises(error, match=message):
        model(src, np.array([[BOS, 4]]))


def test_bad_target_ids_and_memory():
    model = Transformer(tiny_config())
    with pytest.raises(
        TokenIdError, match=r"tgt_in holds ids outside the vocabulary \[0, 11\): \[20\]"
    ):
        model(INT, np.array([[BOS, 20]]))
    memory = model.encode(INT)
    with pytest.raises(
        ShapeError, match=r"memory has shape \(1, 3, 8\), but src of shape \(1, 2\)"
    ):
        model.decode(np.array([[BOS]]), memory, np.array([[3, 4]]))


def test_float32_default_and_lists_accepted():
    model = Transformer(mt.TransformerConfig.preset("tiny", src_vocab=11, tgt_vocab=11))
    logits = model([[3, 4, 5]], [[BOS, 4]])
    assert mt.backend.dtype_name(logits.dtype) == "float32" and logits.shape == (1, 2, 11)
