"""Marian's ``config.json`` <-> ``TransformerConfig``: each field mapped, checked or refused.

The Helsinki-NLP opus-mt models are Marian encoder-decoders in Hugging Face's layout. Their
architecture is the paper's, with five differences that are switches of TransformerConfig:

    config.json                          TransformerConfig
    d_model                              d_model
    encoder_layers, decoder_layers       N, decoder_N
    encoder_attention_heads, decoder_..  h, decoder_h
    encoder_ffn_dim, decoder_ffn_dim     d_ff, decoder_d_ff
    vocab_size, decoder_vocab_size       src_vocab, tgt_vocab
    max_position_embeddings              max_len
    dropout                              dropout
    pad_token_id, eos_token_id           pad_id, eos_id
    decoder_start_token_id               bos_id (Marian starts the decoder from the pad id)
    activation_function                  activation ("swish"/"silu", "gelu", "relu")
    scale_embedding                      scale_embedding (√d_model; opus-mt: true)
    share_encoder_decoder_embeddings     tie_embeddings (with tie_word_embeddings, both equal)
    (always)                             position_layout "halves", logits_bias True

Fields that must hold one value (``FIXED``: Marian's post-LN stack without extra norms, no
attention or activation dropout, no layer drop) are checked; fields that do not change the
translation (``NO_EFFECT``: bookkeeping and generation defaults) are accepted and named
there with the reason; any other field is refused by name, so nothing is silently ignored.

Decoding defaults (``generation_from_marian``): num_beams, max_length and
forced_eos_token_id of generation_config.json (else of config.json), as transformers'
``generate`` reads them; ``Translator.from_pretrained`` decodes with them unless told otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..checks import is_int, short
from ..config import TransformerConfig
from ..data.folder_files import read_json
from ..errors import ConfigError

ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}
SIZES = {  # config.json name -> TransformerConfig name (a positive int each)
    "d_model": "d_model",
    "encoder_layers": "N",
    "decoder_layers": "decoder_N",
    "encoder_attention_heads": "h",
    "decoder_attention_heads": "decoder_h",
    "encoder_ffn_dim": "d_ff",
    "decoder_ffn_dim": "decoder_d_ff",
    "vocab_size": "src_vocab",
    "max_position_embeddings": "max_len",
}
IDS = {"pad_token_id": "pad_id", "eos_token_id": "eos_id", "decoder_start_token_id": "bos_id"}
FIXED: dict[str, Any] = {  # what this library's model computes; another value is refused
    "model_type": "marian",
    "is_encoder_decoder": True,
    "is_decoder": False,
    "attention_dropout": 0.0,  # the model drops sublayer outputs only (paper 5.4)
    "activation_dropout": 0.0,
    "encoder_layerdrop": 0.0,
    "decoder_layerdrop": 0.0,
    "normalize_before": False,  # post-LN
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "add_bias_logits": False,
    "static_position_embeddings": True,
    "do_blenderbot_90_layernorm": False,
}
NO_EFFECT = {  # accepted: they do not change the logits (the reason given)
    "_name_or_path": "where it was saved",
    "transformers_version": "the writer's version",
    "architectures": "checked: must name MarianMTModel",
    "dtype": "the caller's dtype argument decides",
    "torch_dtype": "the caller's dtype argument decides",
    "use_cache": "decoding always caches keys and values",
    "init_std": "initialisation of new weights only",
    "gradient_checkpointing": "memory/time trade-off in training",
    "id2label": "classification heads, not in a translation model",
    "label2id": "classification heads, not in a translation model",
    "_num_labels": "classification heads, not in a translation model",
    "classif_dropout": "classification heads, not in a translation model",
    "classifier_dropout": "classification heads, not in a translation model",
    "num_hidden_layers": "checked: must equal encoder_layers",
    "bos_token_id": "unused by Marian (decoder_start_token_id starts the decoder)",
    "unk_token_id": "the tokenizer's (vocab.json)",
    "sep_token_id": "the tokenizer's",
    "tokenizer_class": "the tokenizer's (tokenizer_config.json decides)",
    "extra_pos_embeddings": "BART's offset for learned positions; Marian's are fixed sinusoids",
    "output_past": "an old name of use_cache",
    "problem_type": "classification heads, not in a translation model",
    "output_attentions": "what forward returns, not what it computes",
    "output_hidden_states": "what forward returns, not what it computes",
    "return_dict": "what forward returns, not what it computes",
    **dict.fromkeys(
        ("num_beams", "max_length", "forced_eos_token_id"),
        "a decoding default, read by generation_from_marian (Translator.from_pretrained)",
    ),
    **dict.fromkeys(
        (
            "bad_words_ids",
            "min_length",
            "length_penalty",
            "no_repeat_ngram_size",
            "early_stopping",
            "do_sample",
            "temperature",
            "top_k",
            "top_p",
            "repetition_penalty",
            "num_return_sequences",
            "force_bos_token_to_be_generated",
            "task_specific_params",
            "prefix",
        ),
        "a generation default (the decoders ban pad; --beam and --max-len decide the rest)",
    ),  # fmt: skip
}
DEFAULT_MAX_LENGTH = 20  # transformers' max_length when a folder sets none
MAX_DEFAULT_TOKENS = 512  # the most tokens a default (not an explicit max_len) decodes
GENERATION_BYTES = 1 << 20  # a generation_config.json is a few hundred bytes


def config_from_marian(d: Any, where: str = "config.json", dtype: str = "float32"):
    """A ``TransformerConfig`` of Marian's ``config.json`` dict ``d``; ConfigError naming
    every field that is missing, of the wrong type, another value than ``FIXED`` or unknown."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: must be a JSON object, got {type(d).__name__}")
    if d.get("model_type", "marian") != "marian":  # another model: say so, not every field
        lm = " (a GPT-2 or Llama folder: mt.nn.TransformerLM.from_pretrained)"
        raise ConfigError(
            f"{where}: model_type = {short(d['model_type'])} (this library computes 'marian'): "
            f"Transformer.from_pretrained reads Marian (MarianMTModel) folders only"
            f"{lm if d['model_type'] in ('gpt2', 'llama') else ''}; load this model with "
            "transformers instead"
        )
    known = {
        *SIZES,
        *IDS,
        *FIXED,
        *NO_EFFECT,
        "decoder_vocab_size",
        "activation_function",
        "dropout",
    }
    known |= {"scale_embedding", "share_encoder_decoder_embeddings", "tie_word_embeddings"}
    problems = [f"unsupported field {k!r} = {short(d[k])}" for k in sorted(set(d) - known)]
    for key, want in FIXED.items():
        if key in d and (d[key] != want or type(d[key]) is not type(want) and want != 0):
            problems.append(f"{key} = {short(d[key])} (this library computes {want!r})")
    fields: dict[str, Any] = {"position_layout": "halves", "logits_bias": True, "dtype": dtype}
    for key, name in {**SIZES, **IDS}.items():
        low = 0 if key in IDS else 1
        if key not in d and key in ("decoder_layers", "decoder_attention_heads"):
            continue  # the encoder's
        if not is_int(d.get(key)) or d[key] < low:
            problems.append(f"{key} must be an int >= {low}, got {short(d.get(key, '<missing>'))}")
        else:
            fields[name] = int(d[key])
    for key in ("scale_embedding", "share_encoder_decoder_embeddings", "tie_word_embeddings"):
        if not isinstance(d.get(key, True), bool):
            problems.append(f"{key} must be true or false, got {short(d[key])}")
    share = d.get("share_encoder_decoder_embeddings", True)
    if share != d.get("tie_word_embeddings", True):
        problems.append(
            f"share_encoder_decoder_embeddings = {share} with tie_word_embeddings = "
            f"{d.get('tie_word_embeddings')}: only both true (one matrix) or both false "
            "(three) are supported"
        )
    activation = d.get("activation_function", "gelu")  # MarianConfig's default
    if not isinstance(activation, str) or activation not in ACTIVATIONS:  # a list: unhashable
        problems.append(
            f"activation_function {short(activation)} (supported: one string of "
            f"{list(ACTIVATIONS)})"
        )
    if "num_hidden_layers" in d and d["num_hidden_layers"] != d.get("encoder_layers"):
        problems.append(f"num_hidden_layers = {short(d['num_hidden_layers'])} != encoder_layers")
    names = d.get("architectures", ["MarianMTModel"])
    if not isinstance(names, list) or "MarianMTModel" not in names:
        problems.append(f"architectures = {short(names)} (this reads MarianMTModel checkpoints)")
    if not isinstance(d.get("dropout", 0.1), (int, float)) or isinstance(d.get("dropout"), bool):
        problems.append(f"dropout must be a number, got {short(d['dropout'])}")
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems) + _FIX)
    fields["tgt_vocab"] = d.get("decoder_vocab_size") or fields["src_vocab"]
    fields.update(
        activation=ACTIVATIONS[activation],
        scale_embedding=d.get("scale_embedding", False),  # MarianConfig's default
        tie_embeddings=share,
        dropout=float(d.get("dropout", 0.1)),
    )
    try:
        return TransformerConfig(**fields)
    except ConfigError as err:
        raise ConfigError(f"{where}: these values make no valid model: {err}") from None


def generation_from_marian(
    folder: str | os.PathLike[str], cfg: TransformerConfig
) -> dict[str, Any]:
    """The decoding defaults of the Marian folder of ``cfg``'s model, read as transformers'
    ``generate`` reads them: from generation_config.json when the folder has one, else from
    config.json (transformers reads only the first of the two that exists).

    Returns ``{"beam_size", "max_len", "forced_eos"}`` (``Translator``'s defaults):
    num_beams (1 when unset); max_length - 1 tokens (max_length counts the decoder's start
    token; 20 when unset, as in transformers), at most ``MAX_DEFAULT_TOKENS`` and the model's
    positions, so a config that claims 65,536 positions does not make a default that decodes
    for minutes; and whether forced_eos_token_id (which must be the model's EOS) ends a
    sequence cut at that limit with EOS. A value of the wrong type or range is a ConfigError
    naming the field and the file.
    """
    folder = Path(os.fspath(folder))
    path = folder / "generation_config.json"
    if not path.exists():
        path = folder / "config.json"
    d = read_json(path, GENERATION_BYTES, "write it as transformers does, or remove it")
    if not isinstance(d, dict):
        raise ConfigError(f"{path}: must be a JSON object, got {type(d).__name__}")
    beams, length, forced = (d.get(k) for k in ("num_beams", "max_length", "forced_eos_token_id"))
    problems = []
    if beams is not None and (not is_int(beams) or not 1 <= beams <= cfg.tgt_vocab):
        problems.append(
            f"num_beams must be an int from 1 (greedy) to the target vocabulary's "
            f"{cfg.tgt_vocab:,} tokens, got {short(beams)}"
        )
    if length is not None and (not is_int(length) or length < 2):
        problems.append(
            f"max_length must be an int >= 2 (it counts the decoder's start token), got "
            f"{short(length)}"
        )
    if forced is not None and (not is_int(forced) or forced != cfg.eos_id):
        problems.append(
            f"forced_eos_token_id must be null or the model's eos id {cfg.eos_id}, got "
            f"{short(forced)}"
        )
    if problems:
        raise ConfigError(
            f"{path}: " + "; ".join(problems) + ". Fix or remove the field (transformers' "
            "defaults: num_beams 1, max_length 20, no forced EOS)"
        )
    length = DEFAULT_MAX_LENGTH if length is None else int(length)
    return {
        "beam_size": 1 if beams is None else int(beams),
        "max_len": min(length - 1, MAX_DEFAULT_TOKENS, cfg.max_len),
        "forced_eos": forced is not None,
    }


def marian_config(cfg: TransformerConfig) -> dict[str, Any]:
    """The ``config.json`` dict of a model of ``cfg`` in Marian's layout (save_pretrained).

    A model with the paper's interleaved positions is saved with its features reordered
    (see marian_weights.py), so the layout needs no field. Refused (ConfigError): what Marian
    cannot compute, pre-LN, learned positions, a key_dim, unscaled attention, an attention
    kind other than the paper's full one, and the switches of the block since 2017 (RMSNorm,
    another norm eps, rotary positions, a gated FFN, shared key/value heads, no biases,
    GPT-2's gelu_tanh).
    """
    unsupported = {
        "pre_norm": (cfg.pre_norm, False),
        "learned_positions": (cfg.learned_positions, False),
        "key_dim": (cfg.key_dim, None),
        "scale_attention": (cfg.scale_attention, True),
        "attention": (cfg.attention, "full"),
        "norm": (cfg.norm, "layer"),
        "norm_eps": (cfg.norm_eps, 1e-5),  # Marian's LayerNorms: PyTorch's default eps
        "rotary": (cfg.rotary, None),
        "gated_ffn": (cfg.gated_ffn, False),
        "kv_heads": (cfg.kv_heads, None),
        "linear_bias": (cfg.linear_bias, True),
    }
    bad = [f"{k}={v!r}" for k, (v, ok) in unsupported.items() if v != ok]
    if cfg.activation not in ACTIVATIONS:  # GPT-2's gelu_tanh: no name in Marian's config
        bad.append(f"activation={cfg.activation!r}")
    if bad:
        raise ConfigError(
            f"save_pretrained: Marian's layout has no place for {', '.join(bad)}; only a "
            "post-LN model with sinusoidal positions, full attention and d_k = d_model / h can be "
            "saved in it"
        )
    (N, h, d_ff), (N_dec, h_dec, d_ff_dec) = cfg.sizes("encoder"), cfg.sizes("decoder")
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "d_model": cfg.d_model,
        "encoder_layers": N,
        "decoder_layers": N_dec,
        "encoder_attention_heads": h,
        "decoder_attention_heads": h_dec,
        "encoder_ffn_dim": d_ff,
        "decoder_ffn_dim": d_ff_dec,
        "vocab_size": cfg.src_vocab,
        "decoder_vocab_size": cfg.tgt_vocab,
        "max_position_embeddings": cfg.max_len,
        "activation_function": cfg.activation,
        "scale_embedding": cfg.scale_embedding,
        "share_encoder_decoder_embeddings": cfg.tie_embeddings,
        "tie_word_embeddings": cfg.tie_embeddings,
        "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id,
        "decoder_start_token_id": cfg.bos_id,
        "forced_eos_token_id": cfg.eos_id,
        "dropout": cfg.dropout,
        **{k: v for k, v in FIXED.items() if k in ("attention_dropout", "activation_dropout")},
        "is_encoder_decoder": True,
        "dtype": cfg.dtype,
    }


_FIX = (
    ". This reads Hugging Face MarianMTModel folders (Helsinki-NLP/opus-mt-*); a field this "
    "library does not compute is refused rather than ignored: remove or fix it, or load the "
    "model with transformers instead"
)
