"""Parity with PyTorch's nn.TransformerEncoder/DecoderLayer (float64, post-LN, ReLU, no
dropout) given the same weights: logits, label-smoothed loss and every gradient.

PyTorch's nn.Transformer adds a final LayerNorm to each stack; the paper's post-LN model
has none, so the torch stacks are built with norm=None. Embedding (scaled by sqrt(d_model)),
sinusoidal positions and the tied output projection are written out in torch here, so the
comparison covers the whole model (a float32 position table would show as ~5e-8).
"""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import PAD, tiny_batch, tiny_config, to_np

import minitransformer as mt

torch = pytest.importorskip("torch")


def T(a):
    return torch.tensor(to_np(a), dtype=torch.float64)


def copy_attention(ours, theirs):
    """torch packs [W_q; W_k; W_v] as in_proj_weight (3D, D), each our weight transposed."""
    with torch.no_grad():
        theirs.in_proj_weight.copy_(
            torch.cat([T(ours.w_q.weight).T, T(ours.w_k.weight).T, T(ours.w_v.weight).T])
        )
        theirs.in_proj_bias.copy_(torch.cat([T(ours.w_q.bias), T(ours.w_k.bias), T(ours.w_v.bias)]))
        theirs.out_proj.weight.copy_(T(ours.w_o.weight).T)
        theirs.out_proj.bias.copy_(T(ours.w_o.bias))


def copy_common(ours, theirs, blocks):
    with torch.no_grad():
        theirs.linear1.weight.copy_(T(ours.ffn.w_1.weight).T)
        theirs.linear1.bias.copy_(T(ours.ffn.w_1.bias))
        theirs.linear2.weight.copy_(T(ours.ffn.w_2.weight).T)
        theirs.linear2.bias.copy_(T(ours.ffn.w_2.bias))
        for block, norm in zip(blocks, ("norm1", "norm2", "norm3"), strict=False):
            getattr(theirs, norm).weight.copy_(T(block.norm.gamma))
            getattr(theirs, norm).bias.copy_(T(block.norm.beta))


def copy_norm(ours):
    norm = torch.nn.LayerNorm(ours.D, eps=ours.eps, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(T(ours.gamma))
        norm.bias.copy_(T(ours.beta))
    return norm


def our_grads_in_torch_layout(model):
    """{torch parameter name: our gradient rearranged to torch's layout}."""
    g = {n: to_np(p.grad) for n, p in model.named_parameters()}
    out = {"E": g["src_embed.weight"]}
    for stack, attns in (("encoder", ("self_attn",)), ("decoder", ("self_attn", "cross_attn"))):
        for i in range(model.cfg.N):
            p = f"{stack}.layers.{i}."
            for attn, name in zip(attns, ("self_attn", "multihead_attn"), strict=False):
                a = p + attn
                out[f"{stack}.layers.{i}.{name}.in_proj_weight"] = np.concatenate(
                    [g[f"{a}.w_{x}.weight"].T for x in "qkv"]
                )
                out[f"{stack}.layers.{i}.{name}.in_proj_bias"] = np.concatenate(
                    [g[f"{a}.w_{x}.bias"] for x in "qkv"]
                )
                out[f"{stack}.layers.{i}.{name}.out_proj.weight"] = g[f"{a}.w_o.weight"].T
                out[f"{stack}.layers.{i}.{name}.out_proj.bias"] = g[f"{a}.w_o.bias"]
            for j in (1, 2):
                out[f"{stack}.layers.{i}.linear{j}.weight"] = g[f"{p}ffn.w_{j}.weight"].T
                out[f"{stack}.layers.{i}.linear{j}.bias"] = g[f"{p}ffn.w_{j}.bias"]
            for j in range(len(attns) + 1):
                out[f"{stack}.layers.{i}.norm{j + 1}.weight"] = g[f"{p}block{j + 1}.norm.gamma"]
                out[f"{stack}.layers.{i}.norm{j + 1}.bias"] = g[f"{p}block{j + 1}.norm.beta"]
        if model.cfg.pre_norm:
            out[f"{stack}.norm.weight"] = g[f"{stack}.norm.gamma"]
            out[f"{stack}.norm.bias"] = g[f"{stack}.norm.beta"]
    return out


def torch_positions(max_len, d_model):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), in torch float64."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    div = 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos / div)
    pe[:, 1::2] = torch.cos(pos / div)
    return pe


@pytest.mark.parametrize("pre_norm", [False, True])
def test_matches_torch_transformer_layers(pre_norm):
    """Post-LN (the paper); pre-LN = torch's norm_first=True with a final norm per stack."""
    torch.manual_seed(0)
    cfg = tiny_config(N=2, pre_norm=pre_norm)
    model = mt.nn.Transformer(cfg, seed=0)
    rng = np.random.default_rng(5)
    for p in model.parameters():  # off the init: non-trivial LayerNorm and biases
        p.data = p.data + 0.1 * rng.standard_normal(p.shape)
    D, h, d_ff, N = cfg.d_model, cfg.h, cfg.d_ff, cfg.N
    kw = dict(
        dropout=0.0, activation="relu", batch_first=True, norm_first=pre_norm, dtype=torch.float64
    )
    norms = [copy_norm(s.norm) if pre_norm else None for s in (model.encoder, model.decoder)]
    enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(D, h, d_ff, **kw),
        N,
        norm=norms[0],
        enable_nested_tensor=False,
    )
    dec = torch.nn.TransformerDecoder(
        torch.nn.TransformerDecoderLayer(D, h, d_ff, **kw), N, norm=norms[1]
    )
    for ours, theirs in zip(model.encoder.layers, enc.layers, strict=True):
        copy_attention(ours.self_attn, theirs.self_attn)
        copy_common(ours, theirs, (ours.block1, ours.block2))
    for ours, theirs in zip(model.decoder.layers, dec.layers, strict=True):
        copy_attention(ours.self_attn, theirs.self_attn)
        copy_attention(ours.cross_attn, theirs.multihead_attn)
        copy_common(ours, theirs, (ours.block1, ours.block2, ours.block3))
    E = T(model.src_embed.weight).requires_grad_(True)
    pe = torch_positions(cfg.max_len, D)  # the paper's formula in torch, not our table

    src, tgt_in, tgt_out = (torch.tensor(to_np(a)) for a in tiny_batch())
    S, Tt = src.shape[1], tgt_in.shape[1]
    x = E[src] * D**0.5 + pe[:S]
    memory = enc(x, src_key_padding_mask=src == PAD)
    y = E[tgt_in] * D**0.5 + pe[:Tt]
    causal = torch.triu(torch.ones(Tt, Tt, dtype=torch.bool), diagonal=1)  # True = blocked
    y = dec(
        y,
        memory,
        tgt_mask=causal,
        tgt_key_padding_mask=tgt_in == PAD,
        memory_key_padding_mask=src == PAD,
    )
    logits_t = y @ E.T  # tied output projection, no bias
    loss_t = torch.nn.functional.cross_entropy(
        logits_t.reshape(-1, cfg.tgt_vocab),
        tgt_out.reshape(-1),
        label_smoothing=0.1,
        ignore_index=PAD,
    )
    loss_t.backward()

    src, tgt_in, tgt_out = tiny_batch()
    logits = model(src, tgt_in)
    loss = model.loss(logits, tgt_out)
    loss.backward()

    errors = {"logits": np.abs(to_np(logits) - logits_t.detach().numpy()).max()}
    errors["loss"] = abs(loss.item() - loss_t.item())
    theirs = {"E": E.grad.numpy()}
    theirs.update({f"encoder.{n}": p.grad.numpy() for n, p in enc.named_parameters()})
    theirs.update({f"decoder.{n}": p.grad.numpy() for n, p in dec.named_parameters()})
    ours = our_grads_in_torch_layout(model)
    assert sorted(ours) == sorted(theirs), (set(ours) - set(theirs), set(theirs) - set(ours))
    errors["grad"] = max(np.abs(ours[k] - theirs[k]).max() for k in theirs)
    print("max abs errors vs torch:", errors)
    assert max(errors.values()) < 1e-12, errors  # float64 end to end, positions included
