"""A Marian (Hugging Face ``MarianMTModel``) folder read into a Transformer, and written back.

    folder/config.json          the sizes and switches (marian_config.py)
    folder/model.safetensors    the weights, read with the ``safetensors`` library (NumPy)

Names. Each weight of ours has one Marian name (``marian_names``); Marian's ``nn.Linear``
stores W as (d_out, d_in), ours as (d_in, d_out) ("x W + b"), so linear weights are
transposed on the way in and out:

    Marian (prefix model.)                   ours
    shared.weight (V, D)                     src_embed.weight (tied)
    <stack>.layers.i.self_attn.q_proj        <stack>.layers.i.self_attn.w_q (k, v; out: w_o)
    decoder.layers.i.encoder_attn.*          decoder.layers.i.cross_attn.*
    *.self_attn_layer_norm                   *.block1.norm
    *.encoder_attn_layer_norm                *.block2.norm (decoder)
    *.final_layer_norm                       the last block's norm (block2 or block3)
    *.fc1, *.fc2                             *.ffn.w_1, *.ffn.w_2
    final_logits_bias (1, V) (no prefix)     logits_bias (V,)
    lm_head.weight (V, D) (no prefix)        out_proj.weight (D, V) (untied)

Positions. Marian's table puts every sine first, then every cosine ("halves"). A model with
the paper's interleaved table is written as its exact twin: every residual-stream axis
reordered by P = (0, 2, 4, ..., 1, 3, 5, ...) (``_feature_axes``: the input axis of W_q, W_k,
W_v and W_1, the output axis of W_o and W_2 and their biases, the embeddings, the LayerNorms),
so each feature meets the same sinusoid as before (LayerNorm and the FFN do not care about
the features' order). The projections' output axis is d_model wide too, but it is split into
heads: reordering it would mix features across heads and change the function, so it is never
reordered.

The folder's files are read and written by safetensors_folder.py (shared with GPT-2 and
Llama): a ``pytorch_model.bin`` is a pickle, which can run code when loaded: it is never opened.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .. import backend
from ..config import TransformerConfig
from ..errors import CheckpointError
from .marian_config import config_from_marian, marian_config
from .positional import sinusoid_table
from .safetensors_folder import (
    check_headers,
    checked_dtype,
    model_folder,
    open_safetensors,
    read_config,
    read_finite,
    write_model_folder,
)


def marian_names(cfg: TransformerConfig) -> dict[str, tuple[str, bool, tuple[int, ...]]]:
    """{Marian name: (our name, transposed, Marian shape)} of every weight of ``cfg``'s model."""
    D, V, Vt = cfg.d_model, cfg.src_vocab, cfg.tgt_vocab
    out: dict[str, tuple[str, bool, tuple[int, ...]]] = {}
    if cfg.tie_embeddings:
        out["model.shared.weight"] = ("src_embed.weight", False, (V, D))
    else:
        out["model.encoder.embed_tokens.weight"] = ("src_embed.weight", False, (V, D))
        out["model.decoder.embed_tokens.weight"] = ("tgt_embed.weight", False, (Vt, D))
        out["lm_head.weight"] = ("out_proj.weight", True, (Vt, D))
    out["final_logits_bias"] = ("logits_bias", False, (1, Vt))
    projections = (("q_proj", "w_q"), ("k_proj", "w_k"), ("v_proj", "w_v"), ("out_proj", "w_o"))
    for stack in ("encoder", "decoder"):
        N, _, d_ff = cfg.sizes(stack)
        sublayers = [("self_attn", "self_attn", "block1")]
        if stack == "decoder":
            sublayers.append(("encoder_attn", "cross_attn", "block2"))
        for i in range(N):
            theirs, ours = f"model.{stack}.layers.{i}", f"{stack}.layers.{i}"
            for a, b, block in sublayers:
                for p, q in projections:
                    out[f"{theirs}.{a}.{p}.weight"] = (f"{ours}.{b}.{q}.weight", True, (D, D))
                    out[f"{theirs}.{a}.{p}.bias"] = (f"{ours}.{b}.{q}.bias", False, (D,))
                out[f"{theirs}.{a}_layer_norm.weight"] = (f"{ours}.{block}.norm.gamma", False, (D,))
                out[f"{theirs}.{a}_layer_norm.bias"] = (f"{ours}.{block}.norm.beta", False, (D,))
            for p, q, shape in (("fc1", "w_1", (d_ff, D)), ("fc2", "w_2", (D, d_ff))):
                out[f"{theirs}.{p}.weight"] = (f"{ours}.ffn.{q}.weight", True, shape)
                out[f"{theirs}.{p}.bias"] = (f"{ours}.ffn.{q}.bias", False, shape[:1])
            last = f"{ours}.block{len(sublayers) + 1}.norm"
            out[f"{theirs}.final_layer_norm.weight"] = (f"{last}.gamma", False, (D,))
            out[f"{theirs}.final_layer_norm.bias"] = (f"{last}.beta", False, (D,))
    return out


def read_marian(path: str | os.PathLike[str], dtype: str = "float32"):
    """(TransformerConfig, {our name: array}) of a Marian folder, every file and array checked
    (names, shapes and dtypes before any array is read); see the module docstring."""
    folder = model_folder(path, "a Marian model folder", _HUB)
    dtype = checked_dtype(dtype)
    config = read_config(folder, "a Marian folder needs config.json as transformers writes it")
    cfg = config_from_marian(config, f"{folder}/config.json", dtype)
    with open_safetensors(folder, "MarianMTModel") as (f, weights):
        state = _read_weights(f, cfg, weights)
    return cfg, state


def _read_weights(f: Any, cfg: TransformerConfig, weights: Path) -> dict[str, Any]:
    """Our state dict from an open safetensors file ``f``: names, shapes, dtypes checked first."""
    D, names, expected = cfg.d_model, set(f.keys()), marian_names(cfg)
    also = {f"model.{s}.embed_positions.weight": (cfg.max_len, D) for s in ("encoder", "decoder")}
    if cfg.tie_embeddings:  # the one matrix may be stored under any of its names
        copies = [n for n in _TIED if n in names]
        if "model.shared.weight" not in names and copies:
            expected[copies[0]] = expected.pop("model.shared.weight")
        also.update({n: (cfg.src_vocab, D) for n in copies if n not in expected})
    shapes = {name: shape for name, (_, _, shape) in expected.items()}
    check_headers(f, weights, shapes, also, optional=["final_logits_bias"])
    arrays = read_finite(f, weights, names & set(expected), cfg.dtype)
    state = {}
    for name, a in arrays.items():
        ours, transposed, _ = expected[name]
        state[ours] = a.T if transposed else a.reshape(-1) if ours == "logits_bias" else a
    state.setdefault("logits_bias", np.zeros(cfg.tgt_vocab, dtype=cfg.dtype))  # older files
    table = sinusoid_table(cfg.max_len, D, "halves")
    for name in sorted(names & set(also)):  # stored copies must be what they copy
        want = table if "positions" in name else state["src_embed.weight"]
        if not np.allclose(f.get_tensor(name), want, rtol=1e-5, atol=1e-6):
            what = "the sinusoid table" if want is table else "the shared embedding"
            raise CheckpointError(
                f"{weights}: {name} is not {what} that config.json implies; this is not a "
                "standard Marian model"
            )
    return state


def feature_order(d_model: int) -> np.ndarray:
    """P = (0, 2, 4, ..., 1, 3, 5, ...): the interleaved table's columns in halves order."""
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def _feature_axes(name: str) -> tuple[int, ...]:
    """The axes of our weight ``name`` that run over the d_model features (the residual
    stream), which the twin with Marian's position layout reorders."""
    if name.endswith(("embed.weight", "norm.gamma", "norm.beta", "w_o.bias", "w_2.bias")):
        return (1,) if name.endswith("embed.weight") else (0,)
    if name.endswith(("w_q.weight", "w_k.weight", "w_v.weight", "w_1.weight", "out_proj.weight")):
        return (0,)
    return (1,) if name.endswith(("w_o.weight", "w_2.weight")) else ()


def write_marian(model: Any, path: str | os.PathLike[str], overwrite: bool = False) -> Path:
    """Write ``model`` as a Marian folder (config.json, generation_config.json,
    model.safetensors); an existing file there is an error unless ``overwrite``."""
    cfg = model.cfg
    config = marian_config(cfg)  # refuses what Marian cannot compute
    ours = {k: backend.to_numpy(v) for k, v in model.state_dict().items()}
    order = None if cfg.position_layout == "halves" else feature_order(cfg.d_model)
    tensors = {}
    for name, (mine, transposed, shape) in marian_names(cfg).items():
        a = ours.get(mine, np.zeros(shape[-1], dtype=cfg.dtype))  # no logits bias: zeros
        for axis in _feature_axes(mine) if order is not None else ():
            a = np.take(a, order, axis=axis)
        tensors[name] = np.ascontiguousarray((a.T if transposed else a).reshape(shape))
    generation = {
        "decoder_start_token_id": cfg.bos_id,
        "eos_token_id": cfg.eos_id,
        "forced_eos_token_id": cfg.eos_id,
        "pad_token_id": cfg.pad_id,
        "bad_words_ids": [[cfg.pad_id]],
        "max_length": cfg.max_len,
    }
    return write_model_folder(path, tensors, config, generation, overwrite)


_HUB = (
    "run `minitransformer translate --pretrained {shown} TEXT` once (it needs huggingface_hub "
    "and the network), or huggingface_hub.snapshot_download and pass the folder it returns"
)
_TIED = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")
