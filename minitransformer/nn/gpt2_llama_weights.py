"""A GPT-2 (``GPT2LMHeadModel``) or Llama (``LlamaForCausalLM``) folder read into a
TransformerLM, and written back; the files themselves through safetensors_folder.py.

    folder/config.json          the sizes and switches (gpt2_llama_config.py)
    folder/model.safetensors    the weights (safetensors, read as NumPy; never a pickle)

Names (``hf_names``), with i the layer. GPT-2's Conv1D stores W as (d_in, d_out), as ours do
("x W + b"), and fuses the three input projections: c_attn = [W_q | W_k | W_v] (D, 3D), split
into three on the way in and joined on the way out. Llama's ``nn.Linear`` stores W as
(d_out, d_in): transposed both ways.

    GPT-2 (prefix transformer., or none)    Llama (prefix model.)         ours (decoder.)
    wte.weight (V, D)                       embed_tokens.weight (V, D)    embed.weight
    wpe.weight (n_positions, D)             (rotary: no table)            positions.table
    h.i.ln_1                                layers.i.input_layernorm      layers.i.block1.norm
    h.i.attn.c_attn (D, 3D) = [q|k|v]       layers.i.self_attn.q/k/v_proj   ...self_attn.w_q/k/v
    h.i.attn.c_proj                         layers.i.self_attn.o_proj     ...self_attn.w_o
    h.i.ln_2                                layers.i.post_attention_layernorm   ...block2.norm
    h.i.mlp.c_fc, h.i.mlp.c_proj            layers.i.mlp.gate_proj, down_proj   ...ffn.w_1, w_2
                                            layers.i.mlp.up_proj          ...ffn.w_3
    ln_f                                    norm                          decoder.norm
    lm_head.weight (V, D) (no prefix)       lm_head.weight (V, D)         out_proj.weight (D, V)

A norm's weight is our gamma, its bias (GPT-2's LayerNorm) our beta. Llama has biases only
when attention_bias (q, k, v, o) and mlp_bias (gate, up, down) are set, which this library
requires to be equal. A tied model (GPT-2's; Llama's when tie_word_embeddings) stores one
matrix; a stored lm_head.weight must then equal it. Stored buffers that older files hold are
checked against what config.json implies, not loaded: GPT-2's h.i.attn.bias (the causal mask)
and h.i.attn.masked_bias, Llama's rotary_emb.inv_freq.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .. import backend
from ..config import TransformerConfig
from ..errors import CheckpointError
from .gpt2_llama_config import ARCHITECTURES, config_from_hf, hf_config
from .safetensors_folder import (
    check_headers,
    checked_dtype,
    model_folder,
    open_safetensors,
    read_config,
    read_finite,
    write_model_folder,
)

Piece = tuple[tuple[str, ...], bool, tuple[int, ...]]
"""(our names, transposed, their shape): one array of theirs is one of ours, or GPT-2's
c_attn, three of ours side by side on the last axis."""


def hf_names(cfg: TransformerConfig, prefix: str | None = None) -> dict[str, Piece]:
    """{their name: (our names, transposed, their shape)} of every weight of ``cfg``'s
    model in GPT-2's layout (a LayerNorm model) or Llama's (an RMSNorm one); ``prefix``:
    the GPT-2 names' prefix ("transformer." unless given: GPT2Model files have none)."""
    return _gpt2_names(cfg, prefix) if cfg.norm == "layer" else _llama_names(cfg)


def _gpt2_names(cfg: TransformerConfig, prefix: str | None) -> dict[str, Piece]:
    """GPT-2's names (see the module docstring)."""
    D, V, d_ff, p = (
        cfg.d_model,
        cfg.tgt_vocab,
        cfg.d_ff,
        "transformer." if prefix is None else prefix,
    )
    out: dict[str, Piece] = {
        f"{p}wte.weight": (("embed.weight",), False, (V, D)),
        f"{p}wpe.weight": (("positions.table",), False, (cfg.max_len, D)),
    }
    for i in range(cfg.N):
        theirs, ours = f"{p}h.{i}", f"decoder.layers.{i}"
        qkv = tuple(f"{ours}.self_attn.{w}" for w in ("w_q", "w_k", "w_v"))
        linears = [
            ("attn.c_attn", qkv, D, 3 * D),
            ("attn.c_proj", (f"{ours}.self_attn.w_o",), D, D),
            ("mlp.c_fc", (f"{ours}.ffn.w_1",), D, d_ff),
            ("mlp.c_proj", (f"{ours}.ffn.w_2",), d_ff, D),
        ]
        for name, mine, d_in, d_out in linears:
            out[f"{theirs}.{name}.weight"] = (
                tuple(f"{m}.weight" for m in mine),
                False,
                (d_in, d_out),
            )
            out[f"{theirs}.{name}.bias"] = (tuple(f"{m}.bias" for m in mine), False, (d_out,))
        for name, block in (("ln_1", "block1"), ("ln_2", "block2")):
            out.update(_norm(f"{theirs}.{name}", f"{ours}.{block}.norm", D, beta=True))
    out.update(_norm(f"{p}ln_f", "decoder.norm", D, beta=True))
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = (("out_proj.weight",), True, (V, D))
    return out


def _llama_names(cfg: TransformerConfig) -> dict[str, Piece]:
    """Llama's names (see the module docstring)."""
    D, V, d_ff = cfg.d_model, cfg.tgt_vocab, cfg.d_ff
    d_k, kv = D // cfg.h, cfg.kv_heads or cfg.h
    out: dict[str, Piece] = {"model.embed_tokens.weight": (("embed.weight",), False, (V, D))}
    for i in range(cfg.N):
        theirs, ours = f"model.layers.{i}", f"decoder.layers.{i}"
        linears = [
            ("self_attn.q_proj", "self_attn.w_q", D, D),
            ("self_attn.k_proj", "self_attn.w_k", D, kv * d_k),
            ("self_attn.v_proj", "self_attn.w_v", D, kv * d_k),
            ("self_attn.o_proj", "self_attn.w_o", D, D),
            ("mlp.gate_proj", "ffn.w_1", D, d_ff),
            ("mlp.down_proj", "ffn.w_2", d_ff, D),
            ("mlp.up_proj", "ffn.w_3", D, d_ff),
        ]
        for name, mine, d_in, d_out in linears:
            out[f"{theirs}.{name}.weight"] = ((f"{ours}.{mine}.weight",), True, (d_out, d_in))
            if cfg.linear_bias:
                out[f"{theirs}.{name}.bias"] = ((f"{ours}.{mine}.bias",), False, (d_out,))
        out.update(_norm(f"{theirs}.input_layernorm", f"{ours}.block1.norm", D, beta=False))
        out.update(
            _norm(f"{theirs}.post_attention_layernorm", f"{ours}.block2.norm", D, beta=False)
        )
    out.update(_norm("model.norm", "decoder.norm", D, beta=False))
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = (("out_proj.weight",), True, (V, D))
    return out


def _norm(theirs: str, ours: str, D: int, beta: bool) -> dict[str, Piece]:
    """A norm's weight (our gamma) and, for LayerNorm, its bias (our beta)."""
    out: dict[str, Piece] = {f"{theirs}.weight": ((f"{ours}.gamma",), False, (D,))}
    if beta:
        out[f"{theirs}.bias"] = ((f"{ours}.beta",), False, (D,))
    return out


def read_gpt2_llama(path: str | os.PathLike[str], dtype: str = "float32"):
    """(TransformerConfig, {our name: array}) of a GPT-2 or Llama folder, every field and
    array checked (names, shapes and dtypes before any array is read)."""
    folder = model_folder(path, "a GPT-2 or Llama model folder", _HUB)
    dtype = checked_dtype(dtype)
    config = read_config(
        folder, "a GPT-2 or Llama folder needs config.json as transformers writes it"
    )
    cfg = config_from_hf(config, f"{folder}/config.json", dtype)
    with open_safetensors(folder, ARCHITECTURES[config["model_type"]]) as (f, weights):
        names = set(f.keys())
        gpt2_bare = cfg.norm == "layer" and "wte.weight" in names  # a GPT2Model file
        expected = hf_names(cfg, "" if gpt2_bare else None)
        also = _stored_copies(cfg, names, "" if gpt2_bare else "transformer.")
        check_headers(f, weights, {n: shape for n, (_, _, shape) in expected.items()}, also)
        arrays = read_finite(f, weights, expected, cfg.dtype)
        state = {}
        for name, (mine, transposed, _) in expected.items():
            a = arrays[name].T if transposed else arrays[name]
            for ours, part in zip(mine, np.split(a, len(mine), axis=-1), strict=True):
                state[ours] = np.ascontiguousarray(part)
        for name in sorted(names & set(also)):
            _check_copy(f, weights, name, cfg, state["embed.weight"])
    return cfg, state


def _stored_copies(cfg: TransformerConfig, names: set[str], p: str) -> dict[str, tuple[int, ...]]:
    """The arrays a file may hold beside the weights, each checked by ``_check_copy``:
    lm_head.weight of a tied model, and the buffers older transformers saved."""
    D, T = cfg.d_model, cfg.max_len
    also: dict[str, tuple[int, ...]] = (
        {"lm_head.weight": (cfg.tgt_vocab, D)} if cfg.tie_embeddings else {}
    )
    for i in range(cfg.N):
        if cfg.norm == "layer":
            also[f"{p}h.{i}.attn.bias"] = (1, 1, T, T)
            also[f"{p}h.{i}.attn.masked_bias"] = ()
        else:
            also[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = (D // cfg.h // 2,)
    if cfg.norm == "rms":
        also["model.rotary_emb.inv_freq"] = (D // cfg.h // 2,)
    return {n: shape for n, shape in also.items() if n in names}


def _check_copy(f: Any, weights: Path, name: str, cfg: TransformerConfig, embed: Any) -> None:
    """A stored copy (``_stored_copies``) must be what config.json implies."""
    a = f.get_tensor(name)
    if name == "lm_head.weight":
        want, what = embed, "the tied embedding (tie_word_embeddings is true)"
    elif name.endswith("attn.bias"):
        want, what = np.tril(np.ones(a.shape, dtype=a.dtype)), "GPT-2's causal mask"
    elif name.endswith("masked_bias"):
        return  # the value masked scores were set to (-1e4): masked positions weigh 0 either way
    else:
        d = cfg.d_model // cfg.h
        want, what = (
            cfg.rotary_base ** (-np.arange(0, d, 2) / d),
            "RoPE's frequencies of rope_theta",
        )
    if not np.allclose(a, want, rtol=1e-5, atol=1e-6):
        raise CheckpointError(
            f"{weights}: {name} is not {what} that config.json implies; this model computes "
            "something else than this library's GPT-2 or Llama: load it with transformers"
        )


def write_gpt2_llama(model: Any, path: str | os.PathLike[str], overwrite: bool = False) -> Path:
    """Write the TransformerLM ``model`` as a GPT-2 or Llama folder (config.json,
    generation_config.json, model.safetensors); an existing file there is an error unless
    ``overwrite``. What fits neither layout is refused first (gpt2_llama_config.hf_config)."""
    cfg = model.cfg
    config = hf_config(cfg)  # refuses what neither GPT-2 nor Llama computes
    ours = {k: backend.to_numpy(v) for k, v in model.state_dict().items()}
    tensors = {}
    for name, (mine, transposed, shape) in hf_names(cfg).items():
        a = np.concatenate([ours[m] for m in mine], axis=-1) if len(mine) > 1 else ours[mine[0]]
        tensors[name] = np.ascontiguousarray((a.T if transposed else a).reshape(shape))
    generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    return write_model_folder(path, tensors, config, generation, overwrite)


_HUB = (
    "call huggingface_hub.snapshot_download(repo_id='{shown}', allow_patterns=['config.json', "
    "'model.safetensors']) once (it needs the network) and pass the folder it returns"
)
