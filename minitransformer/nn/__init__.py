"""Layers and the Transformer, built on the ops in ``minitransformer.functional``.

``mt.nn.Transformer(mt.TransformerConfig.preset("tiny", src_vocab=V, tgt_vocab=V))`` builds
the model; ``model(src, tgt_in)`` maps int ids (B, S), (B, T) to logits (B, T, V).
"""

from .attention import KVCache, MultiHeadAttention
from .layers import Dropout, Embedding, LayerNorm, Linear, PositionwiseFeedForward
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
from .transformer import (
    Decoder,
    DecoderCache,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    Transformer,
)

__all__ = [
    "AdditiveAttention",
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
    "RNNCell",
    "RNNSeq2Seq",
    "StateDictKeyError",
    "Transformer",
    "causal_mask",
    "padding_mask",
    "sinusoid_table",
    "target_mask",
]
