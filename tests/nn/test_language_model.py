"""TransformerLM: gradchecks, no leak from the future, cached generation equal to
recomputation, sampling, the config and its checks, checkpoints and the optimizer."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import BOS, EOS, PAD, V, sampled_gradcheck, to_np
from test_nn_transformer import nudged

import minitransformer as mt
from minitransformer.errors import ArgumentError, ConfigError, ShapeError, TokenIdError
from minitransformer.nn import TransformerLM
from minitransformer.nn.sampling import next_tokens, temperature_softmax

SIZES = dict(d_model=8, h=2, N=2, d_ff=16, dropout=0.0, max_len=16, dtype="float64")


def tiny_lm(**overrides) -> TransformerLM:
    return TransformerLM(vocab=V, **{**SIZES, **overrides})


def lm_batch(device: str = "cpu"):
    """ids (2, 5) = BOS + text + padding, targets (2, 5) = text + EOS + padding."""
    ids = np.array([[BOS, 3, 4, 5, 6], [BOS, 7, 8, PAD, PAD]])
    targets = np.array([[3, 4, 5, 6, EOS], [7, 8, EOS, PAD, PAD]])
    return tuple(mt.backend.asarray(a, dtype="int64", device=device) for a in (ids, targets))


@pytest.mark.parametrize(
    "overrides",
    [{"N": 1}, {"pre_norm": True, "tie_embeddings": False, "learned_positions": True,
                "logits_bias": True}],
)  # fmt: skip
def test_loss_gradient_wrt_every_parameter(device, overrides):
    """Every element of every parameter (post-LN, N = 1, NumPy), else 3 per tensor."""
    lm = nudged(tiny_lm(**overrides), device)
    ids, targets = lm_batch(device)
    per_param = None if device == "cpu" and overrides == {"N": 1} else 3
    sampled_gradcheck(lambda: lm.loss(lm(ids), targets), lm.parameters(), per_param)


def test_label_smoothed_loss_gradcheck():
    lm = nudged(tiny_lm(label_smoothing=0.1), "cpu")
    ids, targets = lm_batch()
    sampled_gradcheck(lambda: lm.loss(lm(ids), targets), lm.parameters(), 3)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_the_future_does_not_leak(device, pre_norm):
    """Changing ids[:, t:] changes neither logits[:, :t] nor their gradients."""
    lm = nudged(tiny_lm(pre_norm=pre_norm), device)
    ids, _ = lm_batch(device)
    changed = to_np(ids).copy()
    changed[:, 2:] = [[9, 10, 3], [4, 5, 6]]
    changed = mt.backend.asarray(changed, device=device)
    grads, early = [], None
    for x in (ids, changed):
        lm.zero_grad()
        logits = lm(x)
        logits[:, :2].sum().backward()
        grads.append([to_np(p.grad) for p in lm.parameters()])
        if early is None:
            early = to_np(logits)[:, :2]
        else:
            np.testing.assert_allclose(to_np(logits)[:, :2], early, rtol=1e-13, atol=1e-13)
            assert np.abs(to_np(logits)[:, 2:] - to_np(lm(ids))[:, 2:]).max() > 1e-6
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_without_the_causal_mask_the_future_would_leak(monkeypatch):
    """The leak test can fail: with an all-True mask, early logits see later ids."""
    import minitransformer.nn.language_model as lm_module

    def no_mask(kind, T, device, offset=0, keys=None):
        return np.ones((1, 1, T, offset + T), bool)

    monkeypatch.setattr(lm_module, "decoder_mask", no_mask)
    lm = nudged(tiny_lm(), "cpu")
    ids, _ = lm_batch()
    changed = to_np(ids).copy()
    changed[:, 3:] = 9
    assert np.abs(to_np(lm(ids))[:, :2] - to_np(lm(changed))[:, :2]).max() > 1e-6


@pytest.mark.parametrize("pre_norm", [False, True])
def test_cached_steps_equal_the_full_pass(device, pre_norm):
    lm = nudged(tiny_lm(pre_norm=pre_norm), device)
    ids, _ = lm_batch(device)
    full = to_np(lm(ids))
    cache, steps = lm.new_cache(), []
    host = to_np(ids)
    steps.append(to_np(lm(host[:, :2], cache)))  # a prompt of two, then one at a time
    for t in range(2, host.shape[1]):
        steps.append(to_np(lm(host[:, t : t + 1], cache)))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-12, atol=1e-12)
    assert cache.offset == host.shape[1]


def test_generate_with_cache_equals_recomputing():
    lm = nudged(tiny_lm(), "cpu")
    prompts = [[BOS, 3, 4], [BOS, 5, 6], [BOS, 7]]  # two lengths: two batches
    for kwargs in ({"temperature": 0}, {"temperature": 1.3, "top_k": 4, "seed": 5}):
        cached = lm.generate(prompts, 8, **kwargs)
        plain = lm.generate(prompts, 8, use_cache=False, **kwargs)
        assert cached == plain
        assert [row[: len(p)] for row, p in zip(cached, prompts, strict=True)] == prompts
        assert all(len(row) <= len(p) + 8 for row, p in zip(cached, prompts, strict=True))


def test_greedy_generation_is_the_argmax_of_the_full_pass():
    lm = nudged(tiny_lm(), "cpu")
    out = lm.generate([BOS, 3], 6, temperature=0)[0]
    for t in range(2, len(out)):
        assert int(to_np(lm(np.array([out[:t]])))[0, -1].argmax()) == out[t]


def test_generation_stops_at_eos_and_restores_training_mode():
    lm = tiny_lm()
    with mt.no_grad():
        lm.logits_bias = None
        lm.embed.weight.data[...] = 0.0  # every logit 0 ...
    lm.out_proj = mt.nn.Linear(8, V, bias=True)
    with mt.no_grad():
        lm.out_proj.weight.data[...] = 0.0
        lm.out_proj.bias.data[...] = 0.0
        lm.out_proj.bias.data[EOS] = 5.0  # ... but EOS's: greedy stops at once
    lm.out_proj.to(dtype="float64")
    lm.train()
    assert lm.generate([[BOS, 3]], 5, temperature=0) == [[BOS, 3]]
    assert lm.training


def test_sampling_follows_temperature_and_top_k():
    rng = np.random.default_rng(0)
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    draws = np.concatenate([next_tokens(np.repeat(logits, 4000, 0), 1.0, None, rng)])
    freq = np.bincount(draws, minlength=4) / draws.size
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.15, 0.05], atol=0.03)
    top2 = next_tokens(np.repeat(logits, 4000, 0), 1.0, 2, rng)
    assert set(top2.tolist()) == {0, 1}
    assert abs((top2 == 0).mean() - 0.5 / 0.8) < 0.03
    assert next_tokens(logits, 0.0, None, rng).tolist() == [0]
    cold = temperature_softmax(logits, 0.1)[0]
    assert cold[0] > 0.99 and np.isclose(cold.sum(), 1.0)
    hot = temperature_softmax(logits, 100.0)[0]
    assert np.ptp(hot) < 0.01


def test_config_and_presets():
    lm = TransformerLM.preset("tiny", vocab=50)
    cfg = lm.cfg
    assert cfg.decoder_only and cfg.d_model == 64 and cfg.N == 2 and cfg.label_smoothing == 0.0
    assert list(lm.state_dict()) == list(cfg.parameter_shapes())
    assert lm.num_parameters() == cfg.num_parameters()
    untied = tiny_lm(tie_embeddings=False, pre_norm=True, learned_positions=True)
    assert list(untied.state_dict()) == list(untied.cfg.parameter_shapes())
    assert {k: tuple(v.shape) for k, v in untied.state_dict().items()} == dict(
        untied.cfg.parameter_shapes()
    )
    # the encoder and the cross-attention are what the LM saves
    pair = mt.nn.Transformer(mt.TransformerConfig.preset("tiny", src_vocab=50, tgt_vocab=50))
    D, F = 64, 256
    encoder_layer = 4 * (D * D + D) + 2 * D * F + F + D + 2 * 2 * D
    cross = 4 * (D * D + D) + 2 * D
    assert pair.num_parameters() - lm.num_parameters() == 2 * encoder_layer + 2 * cross


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: TransformerLM(), ArgumentError, "vocab is required"),
        (lambda: TransformerLM(vocab=10, src_vocab=10), ArgumentError, "vocab=V instead"),
        (lambda: TransformerLM(vocab=10, d_model=10, h=3), ConfigError, "divisible"),
        (lambda: TransformerLM(vocab=10, decoder_N=3), ConfigError, "one stack"),
        (
            lambda: mt.TransformerConfig(
                src_vocab=10, tgt_vocab=10, decoder_only=True, decoder_h=2
            ),
            ConfigError,
            "one stack",
        ),  # fmt: skip
        (
            lambda: mt.TransformerConfig(
                src_vocab=10, tgt_vocab=12, decoder_only=True, tie_embeddings=False
            ),
            ConfigError,
            "one vocabulary",
        ),  # fmt: skip
        (
            lambda: mt.TransformerConfig(src_vocab=10, tgt_vocab=10, decoder_only="yes"),
            ConfigError,
            "decoder_only must be True or False",
        ),  # fmt: skip
        (
            lambda: TransformerLM(config=mt.TransformerConfig(src_vocab=9, tgt_vocab=9)),
            ArgumentError,
            "decoder_only=True",
        ),  # fmt: skip
    ],
)
def test_bad_arguments_name_the_fix(call, error, words):
    with pytest.raises(error, match=words):
        call()


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(prompt_ids=[]), ShapeError, "list of prompts"),
        (dict(prompt_ids=[[BOS], []]), ShapeError, "prompt 1 must be a non-empty"),
        (dict(prompt_ids="hello"), ShapeError, "list of prompts"),
        (dict(prompt_ids=[[BOS, 99]]), TokenIdError, "99"),
        (dict(max_new_tokens=20), ArgumentError, "max_new_tokens <= 14"),
        (dict(max_new_tokens=-1), ArgumentError, "max_new_tokens"),
        (dict(temperature=-0.5), ArgumentError, "temperature"),
        (dict(temperature=float("nan")), ArgumentError, "temperature"),
        (dict(top_k=0), ArgumentError, "top_k"),
        (dict(top_k=V + 1), ArgumentError, "more than the vocabulary"),
        (dict(seed=-1), ArgumentError, "seed"),
        (dict(use_cache="no"), ArgumentError, "use_cache"),
    ],
)
def test_generate_checks_its_arguments(kwargs, error, words):
    args = {"prompt_ids": [[BOS, 3]], "max_new_tokens": 3, **kwargs}
    with pytest.raises(error, match=words):
        tiny_lm().generate(**args)


def test_a_user_loop_with_adam_and_a_checkpoint(tmp_path):
    """The public interface is enough for a training loop: it learns a fixed sequence,
    and the weights round-trip through a checkpoint file."""
    lm = TransformerLM(vocab=V, d_model=16, h=2, N=1, d_ff=32, max_len=16, dropout=0.0)
    opt = mt.optim.Adam(lm.parameters(), lr=1e-2)
    ids = np.array([[BOS, 3, 4, 5, 6, 7, 8]])
    targets = np.array([[3, 4, 5, 6, 7, 8, EOS]])
    first = None
    for _ in range(60):
        loss = lm.loss(lm(ids), targets)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * first
    assert lm.generate([[BOS]], 7, temperature=0) == [[BOS, 3, 4, 5, 6, 7, 8]]
    from minitransformer.runtime import checkpoint

    path = checkpoint.save_checkpoint(
        tmp_path / "lm.safetensors",
        {k: mt.backend.to_numpy(v) for k, v in lm.state_dict().items()},
        {"model_config": lm.cfg.to_dict()},
    )
    arrays, meta = checkpoint.load_checkpoint(path)
    again = TransformerLM(config=mt.TransformerConfig.from_dict(meta["model_config"]))
    again.load_state_dict(arrays)
    assert again.generate([[BOS]], 7, temperature=0) == [[BOS, 3, 4, 5, 6, 7, 8]]


@pytest.mark.parametrize("pre_norm", [False, True])
def test_matches_a_torch_decoder_only_stack(pre_norm):
    """PyTorch's nn.TransformerEncoder under a causal mask (its decoder-only recipe) with the
    same weights: logits and every gradient of the plain cross-entropy, in float64."""
    torch = pytest.importorskip("torch")
    from test_nn_torch_parity import T, copy_attention, copy_common, copy_norm, torch_positions

    lm = tiny_lm(pre_norm=pre_norm)
    rng = np.random.default_rng(5)
    for p in lm.parameters():
        p.data = p.data + 0.1 * rng.standard_normal(p.shape)
    cfg = lm.cfg
    kw = dict(dropout=0.0, activation="relu", batch_first=True, norm_first=pre_norm,
              dtype=torch.float64)  # fmt: skip
    stack = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(cfg.d_model, cfg.h, cfg.d_ff, **kw), cfg.N,
        norm=copy_norm(lm.decoder.norm) if pre_norm else None, enable_nested_tensor=False,
    )  # fmt: skip
    for ours, theirs in zip(lm.decoder.layers, stack.layers, strict=True):
        copy_attention(ours.self_attn, theirs.self_attn)
        copy_common(ours, theirs, (ours.block1, ours.block2))
    E = T(lm.embed.weight).requires_grad_(True)
    ids, targets = (torch.tensor(to_np(a)) for a in lm_batch())
    L = ids.shape[1]
    x = E[ids] * cfg.d_model**0.5 + torch_positions(cfg.max_len, cfg.d_model)[:L]
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)  # True = blocked
    logits_t = stack(x, mask=causal) @ E.T
    loss_t = torch.nn.functional.cross_entropy(
        logits_t.reshape(-1, V), targets.reshape(-1), ignore_index=PAD
    )
    loss_t.backward()

    ids, targets = lm_batch()
    logits = lm(ids)
    loss = lm.loss(logits, targets)
    loss.backward()
    assert np.abs(to_np(logits) - logits_t.detach().numpy()).max() < 1e-12
    assert abs(loss.item() - loss_t.item()) < 1e-12
    assert np.abs(to_np(lm.embed.weight.grad) - E.grad.numpy()).max() < 1e-12
    layer = lm.decoder.layers[0]
    theirs = stack.layers[0]
    w_q = theirs.self_attn.in_proj_weight.grad.numpy()[: cfg.d_model].T
    assert np.abs(to_np(layer.self_attn.w_q.weight.grad) - w_q).max() < 1e-12
    w_2 = theirs.linear2.weight.grad.numpy().T
    assert np.abs(to_np(layer.ffn.w_2.weight.grad) - w_2).max() < 1e-12
