"""GPT-2's and Llama's ``config.json`` <-> ``TransformerConfig``: each field mapped, checked
or refused, as marian_config.py does for Marian.

    GPT-2 (GPT2LMHeadModel)        Llama (LlamaForCausalLM)      TransformerConfig
    n_embd                         hidden_size                   d_model
    n_head                         num_attention_heads           h
    (all heads)                    num_key_value_heads           kv_heads (None when = h)
    n_layer                        num_hidden_layers             N
    n_inner (null: 4 n_embd)       intermediate_size             d_ff
    n_positions                    max_position_embeddings       max_len
    vocab_size                     vocab_size                    src_vocab = tgt_vocab
    activation_function            hidden_act                    activation (ACTIVATIONS)
    layer_norm_epsilon             rms_norm_eps                  norm_eps
    resid_pdrop                    (none: 0)                     dropout
    (always)                       rope_parameters.rope_theta    rotary_base
                                   (or the older rope_theta)
    (always)                       attention_bias = mlp_bias     linear_bias
    tie_word_embeddings (true)     tie_word_embeddings (false)   tie_embeddings
    bos/eos/pad_token_id           bos/eos/pad_token_id          bos_id, eos_id, pad_id
    GPT-2's block: pre_norm, norm "layer", learned_positions, a plain FFN, biases.
    Llama's block: pre_norm, norm "rms", rotary "halves", gated_ffn, no learned positions.
    Both: scale_embedding False, logits_bias False, label_smoothing 0, full attention.

Token ids. A pad_token_id of null (GPT-2's and Llama's own configs), or one equal to the eos
id (a common stand-in for "none"), becomes the smallest id that is neither the bos nor the
eos id (0 when that is free): a language model's logits never depend on it, and this
library needs a pad id distinct from eos. save_pretrained writes it back as pad_token_id.
An eos_token_id may be a list of one id; several end ids are refused.

Fields that must hold one value (``FIXED``) are checked; fields that do not change the
logits (``NO_EFFECT``, with the reason) are accepted; any other field is refused by name,
and so is any other model_type or architecture (mistral, qwen2, gpt_neox, bert, marian, ...).
``hf_config`` writes the config.json of a model of either shape, and refuses by field name a
model that is neither.
"""

from __future__ import annotations

import math
from typing import Any

from ..checks import is_int, is_real, short
from ..config import TransformerConfig
from ..errors import ConfigError
from .marian_config import NO_EFFECT as MARIAN_NO_EFFECT

ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}
ACTIVATIONS = {  # their name -> ours (both models' tables: ACT2FN's names)
    "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
    "relu": "relu", "silu": "swish", "swish": "swish",
}  # fmt: skip
WRITTEN_ACTIVATION = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "swish": "silu"}
SIZES = {  # config.json name -> TransformerConfig name (a positive int each)
    "gpt2": {"n_embd": "d_model", "n_head": "h", "n_layer": "N", "n_positions": "max_len",
             "vocab_size": "src_vocab"},
    "llama": {"hidden_size": "d_model", "num_attention_heads": "h", "num_hidden_layers": "N",
              "intermediate_size": "d_ff", "max_position_embeddings": "max_len",
              "vocab_size": "src_vocab"},
}  # fmt: skip
FIXED: dict[str, dict[str, Any]] = {  # what this library computes; another value is refused
    "gpt2": {
        "add_cross_attention": False,  # an encoder's memory: not a language model's
        "scale_attn_weights": True,  # softmax(q kᵀ / √d_k)
        "scale_attn_by_inverse_layer_idx": False,  # an extra 1 / (layer + 1)
        "reorder_and_upcast_attn": False,
    },
    "llama": {},
}
COMMON_FIXED = {"is_encoder_decoder": False, "pruned_heads": {}}
_SHARED = (  # bookkeeping and generation defaults, with Marian's reasons
    "_name_or_path", "transformers_version", "dtype", "torch_dtype", "use_cache",
    "gradient_checkpointing", "id2label", "label2id", "_num_labels", "problem_type",
    "output_attentions", "output_hidden_states", "return_dict", "tokenizer_class",
    "unk_token_id", "sep_token_id", "output_past", "num_beams", "max_length", "min_length",
    "bad_words_ids", "length_penalty", "no_repeat_ngram_size", "early_stopping", "do_sample",
    "temperature", "top_k", "top_p", "repetition_penalty", "num_return_sequences",
    "task_specific_params", "prefix",
)  # fmt: skip
_BOOKKEEPING = {
    **{k: MARIAN_NO_EFFECT[k] for k in _SHARED},
    "initializer_range": "initialisation of new weights only",
    "architectures": "checked: must name the model_type's architecture",
}
_SUMMARY = ("summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
            "summary_first_dropout")  # fmt: skip
NO_EFFECT: dict[str, dict[str, str]] = {
    "gpt2": {
        **_BOOKKEEPING,
        "n_ctx": "an old name of n_positions (checked: must equal it)",
        "attn_pdrop": "dropout of the attention weights while training; eval mode has none",
        "embd_pdrop": "dropout while training; this model drops its embeddings at resid_pdrop",
        **dict.fromkeys(_SUMMARY, "GPT2DoubleHeadsModel's classification head, not an LM's"),
    },
    "llama": {
        **_BOOKKEEPING,
        "attention_dropout": "dropout of the attention weights while training; eval mode has none",
        "pretraining_tp": "older transformers split the projections in slices: the same product",
        "head_dim": "checked: must equal hidden_size / num_attention_heads",
        "rope_scaling": "checked: must be null or the default rope type",
    },
}
ROPE_KEYS = ("rope_type", "rope_theta")  # what a default rope_parameters holds


def config_from_hf(d: Any, where: str = "config.json", dtype: str = "float32") -> TransformerConfig:
    """A decoder-only ``TransformerConfig`` of a GPT-2 or Llama ``config.json`` dict ``d``;
    a ConfigError naming every field that is missing, of the wrong type or value, or unknown
    (and the model_type or architecture when it is neither GPT-2 nor Llama)."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: must be a JSON object, got {type(d).__name__}")
    kind = d.get("model_type")
    if not isinstance(kind, str) or kind not in ARCHITECTURES:
        other = (
            " (a Marian folder loads with mt.nn.Transformer.from_pretrained)"
            if kind == "marian" else ""
        )  # fmt: skip
        raise ConfigError(
            f"{where}: model_type = {short(kind if 'model_type' in d else '<missing>')}: "
            f"TransformerLM.from_pretrained reads GPT-2 (model_type 'gpt2', GPT2LMHeadModel) "
            f"and Llama (model_type 'llama', LlamaForCausalLM) folders only{other}; load "
            "this model with transformers instead"
        )
    known = {*SIZES[kind], *FIXED[kind], *COMMON_FIXED, *NO_EFFECT[kind], "model_type"}
    known |= {"bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings"}
    known |= _OWN_FIELDS[kind]
    problems = [f"unsupported field {k!r} = {short(d[k])}" for k in sorted(set(d) - known)]
    for key, want in {**FIXED[kind], **COMMON_FIXED}.items():
        if key in d and (d[key] != want or type(d[key]) is not type(want)):
            problems.append(f"{key} = {short(d[key])} (this library computes {want!r})")
    names = d.get("architectures", [ARCHITECTURES[kind]])
    if not isinstance(names, list) or names != [ARCHITECTURES[kind]]:
        problems.append(
            f"architectures = {short(names)} (this reads {ARCHITECTURES[kind]} checkpoints, "
            f"the language model of model_type {kind!r})"
        )
    fields: dict[str, Any] = {"dtype": dtype}
    for key, name in SIZES[kind].items():
        if not is_int(d.get(key)) or d[key] < 1:
            problems.append(f"{key} must be an int >= 1, got {short(d.get(key, '<missing>'))}")
        else:
            fields[name] = int(d[key])
    activation = d.get(*_ACTIVATION_KEY[kind])
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        problems.append(
            f"{_ACTIVATION_KEY[kind][0]} {short(activation)} (supported: one string of "
            f"{list(ACTIVATIONS)})"
        )
    else:
        fields["activation"] = ACTIVATIONS[activation]
    tie = d.get("tie_word_embeddings", kind == "gpt2")  # each config class's default
    if not isinstance(tie, bool):
        problems.append(f"tie_word_embeddings must be true or false, got {short(tie)}")
    fields["tie_embeddings"] = tie
    (_gpt2_fields if kind == "gpt2" else _llama_fields)(d, fields, problems)
    _token_ids(d, fields, problems)
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems) + _FIX)
    try:
        return TransformerConfig(
            src_vocab=fields["src_vocab"], tgt_vocab=fields.pop("src_vocab"), decoder_only=True,
            pre_norm=True, scale_embedding=False, label_smoothing=0.0, **fields,
        )  # fmt: skip
    except ConfigError as err:
        raise ConfigError(f"{where}: these values make no valid model: {err}") from None


_ACTIVATION_KEY = {"gpt2": ("activation_function", "gelu_new"), "llama": ("hidden_act", "silu")}
_OWN_FIELDS = {
    "gpt2": {"n_inner", "activation_function", "layer_norm_epsilon", "resid_pdrop"},
    "llama": {"num_key_value_heads", "hidden_act", "rms_norm_eps", "rope_theta",
              "rope_parameters", "attention_bias", "mlp_bias"},
}  # fmt: skip


def _fraction(d: dict[str, Any], key: str, default: float, problems: list[str],
              zero: bool = False) -> float:  # fmt: skip
    """d[key] (or ``default``) as a float in (0, 1), or [0, 1) when ``zero`` is allowed
    (a dropout rate); else a problem named by the key."""
    value = d.get(key, default)
    if not is_real(value) or not (0 <= value < 1 if zero else 0 < value < 1):
        interval = "[0, 1)" if zero else "(0, 1)"
        problems.append(f"{key} must be a number in {interval}, got {short(value)}")
        return default
    return float(value)


def _gpt2_fields(d: dict[str, Any], fields: dict[str, Any], problems: list[str]) -> None:
    """GPT-2's own fields into ``fields`` (or ``problems``)."""
    inner = d.get("n_inner")
    if inner is not None and (not is_int(inner) or inner < 1):
        problems.append(f"n_inner must be null (4 n_embd) or an int >= 1, got {short(inner)}")
    elif "d_model" in fields:
        fields["d_ff"] = int(inner) if inner is not None else 4 * fields["d_model"]
    if "n_ctx" in d and d["n_ctx"] != d.get("n_positions"):
        problems.append(f"n_ctx = {short(d['n_ctx'])} != n_positions")
    fields["norm_eps"] = _fraction(d, "layer_norm_epsilon", 1e-5, problems)
    fields["dropout"] = _fraction(d, "resid_pdrop", 0.1, problems, zero=True)
    fields.update(norm="layer", learned_positions=True)


def _llama_fields(d: dict[str, Any], fields: dict[str, Any], problems: list[str]) -> None:
    """Llama's own fields into ``fields`` (or ``problems``)."""
    D, h = fields.get("d_model"), fields.get("h")
    kv = d.get("num_key_value_heads")
    if kv is not None and (not is_int(kv) or kv < 1):
        problems.append(f"num_key_value_heads must be null or an int >= 1, got {short(kv)}")
    elif kv is not None and kv != h:
        fields["kv_heads"] = int(kv)
    head_dim = d.get("head_dim")
    if head_dim is not None and (not is_int(head_dim) or D and h and head_dim * h != D):
        problems.append(
            f"head_dim = {short(head_dim)} with hidden_size {D} and num_attention_heads {h}: "
            "this library's heads are hidden_size / num_attention_heads wide"
        )
    fields["norm_eps"] = _fraction(d, "rms_norm_eps", 1e-6, problems)
    fields["rotary_base"] = _rope_theta(d, problems)
    biases = {k: d.get(k, False) for k in ("attention_bias", "mlp_bias")}
    if any(not isinstance(v, bool) for v in biases.values()):
        problems.append(f"attention_bias and mlp_bias must be true or false, got {biases}")
    elif biases["attention_bias"] != biases["mlp_bias"]:
        problems.append(
            f"attention_bias = {biases['attention_bias']} with mlp_bias = {biases['mlp_bias']}: "
            "this library's linear_bias gives both or neither their biases"
        )
    fields.update(
        linear_bias=biases["attention_bias"], dropout=0.0, norm="rms", rotary="halves",
        gated_ffn=True,
    )  # fmt: skip


def _rope_theta(d: dict[str, Any], problems: list[str]) -> float:
    """RoPE's base: rope_parameters' rope_theta (transformers 5), else rope_theta (older
    files; both given must agree); any rope type but the default (scaled RoPE) is refused."""
    theta = d.get("rope_theta")
    params = d.get("rope_parameters")
    if params is not None:
        if not isinstance(params, dict):
            problems.append(f"rope_parameters must be an object, got {short(params)}")
            return 10000.0
        extra = sorted(set(params) - set(ROPE_KEYS))
        kind = params.get("rope_type", "default")
        if kind != "default" or extra:
            problems.append(
                f"rope_parameters = {short(params, 120)}: this library computes the default "
                "RoPE only (rope_type 'default' and rope_theta; no scaling, no "
                f"{', '.join(extra) or 'other type'})"
            )
        if theta is not None and params.get("rope_theta", theta) != theta:
            problems.append(
                f"rope_theta = {short(theta)} and rope_parameters' rope_theta = "
                f"{short(params['rope_theta'])} disagree"
            )
        theta = params.get("rope_theta", theta)
    scaling = d.get("rope_scaling")
    if scaling is not None and (
        not isinstance(scaling, dict)
        or scaling.get("rope_type", scaling.get("type")) != "default"
        or set(scaling) - {"rope_type", "type", "rope_theta"}
    ):
        problems.append(
            f"rope_scaling = {short(scaling, 120)}: this library computes the default RoPE "
            "only (rope_scaling null)"
        )
    theta = 10000.0 if theta is None else theta
    if not is_real(theta) or not 1 < theta < math.inf:
        problems.append(f"rope_theta must be a finite number > 1, got {short(theta)}")
        return 10000.0
    return float(theta)


def _token_ids(d: dict[str, Any], fields: dict[str, Any], problems: list[str]) -> None:
    """bos_id, eos_id and pad_id (see the module docstring for a missing pad id)."""
    eos = d.get("eos_token_id")
    if isinstance(eos, list) and len(eos) == 1:
        eos = eos[0]
    ids = {"bos_token_id": d.get("bos_token_id"), "eos_token_id": eos}
    for key, value in ids.items():
        if not is_int(value) or value < 0:
            several = isinstance(value, list)
            problems.append(
                f"{key} must be an int >= 0, got {short(d.get(key, '<missing>'))}"
                + (" (several end ids: this library stops at one)" if several else "")
            )
    pad = d.get("pad_token_id")
    if pad is not None and (not is_int(pad) or pad < 0):
        problems.append(f"pad_token_id must be null or an int >= 0, got {short(pad)}")
    if problems:
        return
    fields.update(bos_id=int(ids["bos_token_id"]), eos_id=int(eos))
    if pad is None or pad == eos:
        pad = min(set(range(3)) - {fields["bos_id"], fields["eos_id"]})
    fields["pad_id"] = int(pad)


def hf_config(cfg: TransformerConfig) -> dict[str, Any]:
    """The ``config.json`` dict of a TransformerLM of ``cfg`` in GPT-2's or Llama's layout
    (save_pretrained), whichever its block is. A ConfigError names the fields that fit
    neither layout (post-LN, another attention kind, a logits bias, a key_dim, a mix such as
    RMSNorm with learned positions). Training-only fields are not written (label_smoothing;
    a Llama's dropout, which its config has no place for)."""
    common = {
        "decoder_only": (cfg.decoder_only, True), "pre_norm": (cfg.pre_norm, True),
        "attention": (cfg.attention, "full"), "key_dim": (cfg.key_dim, None),
        "scale_attention": (cfg.scale_attention, True), "logits_bias": (cfg.logits_bias, False),
        "scale_embedding": (cfg.scale_embedding, False),
    }  # fmt: skip
    layouts = {
        "gpt2": {"norm": (cfg.norm, "layer"), "rotary": (cfg.rotary, None),
                 "learned_positions": (cfg.learned_positions, True),
                 "gated_ffn": (cfg.gated_ffn, False), "kv_heads": (cfg.kv_heads, None),
                 "linear_bias": (cfg.linear_bias, True)},
        "llama": {"norm": (cfg.norm, "rms"), "rotary": (cfg.rotary, "halves"),
                  "learned_positions": (cfg.learned_positions, False),
                  "gated_ffn": (cfg.gated_ffn, True)},
    }  # fmt: skip
    misfits = {
        kind: [f"{k}={v!r}" for k, (v, ok) in {**common, **fields}.items() if v != ok]
        for kind, fields in layouts.items()
    }
    kind = min(misfits, key=lambda k: len(misfits[k]))
    if misfits[kind]:
        raise ConfigError(
            f"save_pretrained: neither GPT-2's layout nor Llama's has a place for "
            f"{', '.join(misfits[kind])} (the closer one is {ARCHITECTURES[kind]}'s); only "
            "a pre-LN model with full attention, d_k = d_model / h, no logits bias and either "
            "GPT-2's block (block='gpt2') or Llama's (block='llama') can be saved in them"
        )
    out: dict[str, Any] = {"architectures": [ARCHITECTURES[kind]], "model_type": kind}
    out.update(_gpt2_config(cfg) if kind == "gpt2" else _llama_config(cfg))
    out.update(
        bos_token_id=cfg.bos_id, eos_token_id=cfg.eos_id, pad_token_id=cfg.pad_id,
        tie_word_embeddings=cfg.tie_embeddings, dtype=cfg.dtype,
    )  # fmt: skip
    return out


def _gpt2_config(cfg: TransformerConfig) -> dict[str, Any]:
    """GPT-2's own fields of ``cfg``."""
    return {
        "n_embd": cfg.d_model, "n_head": cfg.h, "n_layer": cfg.N, "n_inner": cfg.d_ff,
        "n_positions": cfg.max_len, "vocab_size": cfg.tgt_vocab,
        "activation_function": WRITTEN_ACTIVATION[cfg.activation],
        "layer_norm_epsilon": cfg.norm_eps, "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout, "attn_pdrop": 0.0, **FIXED["gpt2"],
    }  # fmt: skip


def _llama_config(cfg: TransformerConfig) -> dict[str, Any]:
    """Llama's own fields of ``cfg``; RoPE's base both as transformers 5 reads it
    (rope_parameters) and as older versions do (rope_theta)."""
    act = WRITTEN_ACTIVATION[cfg.activation]
    act = "gelu_pytorch_tanh" if act == "gelu_new" else act  # the name Llama configs use
    return {
        "hidden_size": cfg.d_model, "num_attention_heads": cfg.h,
        "num_key_value_heads": cfg.kv_heads or cfg.h, "head_dim": cfg.d_model // cfg.h,
        "num_hidden_layers": cfg.N, "intermediate_size": cfg.d_ff,
        "max_position_embeddings": cfg.max_len, "vocab_size": cfg.tgt_vocab,
        "hidden_act": act, "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rotary_base,
        "rope_parameters": {"rope_theta": cfg.rotary_base, "rope_type": "default"},
        "attention_bias": cfg.linear_bias, "mlp_bias": cfg.linear_bias,
        "attention_dropout": 0.0,
    }  # fmt: skip


_FIX = (
    ". This reads Hugging Face GPT2LMHeadModel and LlamaForCausalLM folders; a field this "
    "library does not compute is refused rather than ignored: remove or fix it, or load the "
    "model with transformers instead"
)
