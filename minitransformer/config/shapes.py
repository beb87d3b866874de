"""The shape table of the model a TransformerConfig builds, in closed form: nothing is built
or allocated (``TransformerConfig.parameter_shapes``, ``num_parameters`` and
``num_weight_arrays`` read it; checkpoint.model_layout adds the dtype; tests check it
against built models).

This module stands on the ground like ``config/model.py``.
"""

from __future__ import annotations

from typing import Any

Shapes = dict[str, tuple[int, ...]]
"""Weight name -> shape, as ``state_dict()`` lists them."""


def shape_groups(cfg: Any) -> list[tuple[str, int, Shapes]]:
    """The shape table of ``cfg``'s model as (name prefix, copies, {name: shape}) in
    state_dict order; "encoder.layers.{i}." has N copies (i = 0 .. N - 1), every other
    group one. Per layer, with h_kv = kv_heads (or h) and each bias only if linear_bias:

        self_attn (+ cross_attn in the decoder): w_q (D, h d_k), w_k (D, h_kv d_k),
            w_v (D, h_kv d_v), w_o (D, D), each with a bias of its width
        ffn: w_1 (D, d_ff) + (d_ff,), w_2 (d_ff, D) + (D,), and w_3 (D, d_ff) + (d_ff,)
            when gated
        block1, block2 (+ block3): norm.gamma (D,), and norm.beta (D,) for LayerNorm
    """
    D, V = cfg.d_model, cfg.tgt_vocab
    # The model's own parameter (logits_bias) comes before its modules' in state_dict.
    top: Shapes = {"logits_bias": (V,)} if cfg.logits_bias else {}
    if cfg.decoder_only:  # nn.TransformerLM: one embedding, one stack ("decoder")
        top["embed.weight"] = (V, D)
    else:
        top["src_embed.weight"] = (cfg.src_vocab, D)
        if not cfg.tie_embeddings:
            top["tgt_embed.weight"] = (V, D)
    if cfg.learned_positions:
        top["positions.table"] = (cfg.max_len, D)
    norm = ("gamma",) if cfg.norm == "rms" else ("gamma", "beta")
    groups = [("", 1, top)]
    for stack in ("decoder",) if cfg.decoder_only else ("encoder", "decoder"):
        N, h, d_ff = cfg.sizes(stack)
        cross = stack == "decoder" and not cfg.decoder_only
        attentions = ("self_attn", "cross_attn") if cross else ("self_attn",)
        d_k, d_v = cfg.key_dim or D // h, D // h  # key_dim may differ from D / h
        h_kv = cfg.kv_heads or h
        widths = {"w_q": h * d_k, "w_k": h_kv * d_k, "w_v": h_kv * d_v, "w_o": D}
        layer: Shapes = {}
        for attention in attentions:
            for w, width in widths.items():
                layer[f"{attention}.{w}.weight"] = (D, width)
                if cfg.linear_bias:
                    layer[f"{attention}.{w}.bias"] = (width,)
        ffn = [("w_1", D, d_ff), ("w_2", d_ff, D)] + ([("w_3", D, d_ff)] if cfg.gated_ffn else [])
        for w, d_in, d_out in ffn:
            layer[f"ffn.{w}.weight"] = (d_in, d_out)
            if cfg.linear_bias:
                layer[f"ffn.{w}.bias"] = (d_out,)
        for block in range(1, len(attentions) + 2):
            for name in norm:
                layer[f"block{block}.norm.{name}"] = (D,)
        groups.append((f"{stack}.layers.{{i}}.", N, layer))
        if cfg.pre_norm:  # the stack's final norm
            groups.append((f"{stack}.norm.", 1, {name: (D,) for name in norm}))
    if not cfg.tie_embeddings:
        groups.append(("", 1, {"out_proj.weight": (D, V)}))
    return groups
