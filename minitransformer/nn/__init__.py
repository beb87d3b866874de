"""Layers and the Transformer, built on the ops in ``minitransformer.functional``.

``mt.nn.Transformer(mt.TransformerConfig.preset("tiny", src_vocab=V, tgt_vocab=V))`` builds
the model; ``model(src, tgt_in)`` maps int ids (B, S), (B, T) to logits (B, T, V).
``mt.nn.TransformerLM(vocab=V, d_model=64, h=4, N=2, d_ff=256)`` is the decoder-only language
model on the same blocks; ``lm(ids)`` maps (B, T) ids to next-token logits (B, T, V).
``mt.nn.Block`` is ``EncoderLayer``: the layer that both the encoder and the language model
stack.
"""

from ..config import TransformerConfig
from .attention import KVCache, MultiHeadAttention
from .blocks import Block, CausalStack, Decoder, DecoderLayer, Encoder, EncoderLayer
from .language_model import TransformerLM
from .layers import Dropout, Embedding, LayerNorm, Linear, PositionwiseFeedForward, RMSNorm
from .masks import causal_mask, padding_mask, target_mask
from .module import Module, ModuleList, Parameter, StateDictKeyError
from .positional import PositionalEncoding, sinusoid_table
from .recurrent import (
    AdditiveAttention,
    DotProductAttention,
    GRUCell,
    RNNCell,
    RNNSeq2Seq,
)
from .transformer import DecoderCache, Transformer


def build_model(cfg: TransformerConfig, seed: int = 0) -> Transformer | TransformerLM:
    """The model a validated config describes: TransformerLM when cfg.decoder_only, else
    the encoder-decoder Transformer (a trainer's and a checkpoint's way to build one)."""
    if cfg.decoder_only:
        return TransformerLM(config=cfg, seed=seed)
    return Transformer(cfg, seed=seed)


__all__ = [
    "AdditiveAttention",
    "Block",
    "CausalStack",
    "Decoder",
    "DecoderCache",
    "DecoderLayer",
    "DotProductAttention",
    "Dropout",
    "Embedding",
    "Encoder",
    "EncoderLayer",
    "GRUCell",
    "KVCache",
    "LayerNorm",
    "Linear",
    "Module",
    "ModuleList",
    "MultiHeadAttention",
    "Parameter",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "RMSNorm",
    "RNNCell",
    "RNNSeq2Seq",
    "StateDictKeyError",
    "Transformer",
    "TransformerLM",
    "build_model",
    "causal_mask",
    "padding_mask",
    "sinusoid_table",
    "target_mask",
]
