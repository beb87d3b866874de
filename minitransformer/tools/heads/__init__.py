"""What the heads do: statistics of each attention head, and their importance.

- ``stats.head_stats``: per head, from attention weights (..., H, T, S): the mean entropy of
  a row, the mass on the previous / same / next position, the mean attended distance and
  the confidence (the mean largest weight), over the rows of real tokens.
- ``collect.attention_maps`` / ``collect.model_head_stats``: run a Transformer on a batch and
  gather every attention layer's weights, and its statistics per (kind, layer, head), for
  encoder self-, decoder self- and cross-attention.
- ``importance.head_importance``: Michel et al. (2019)'s importance of each head,
  |dL/dm_h| for the gate m_h of ``MultiHeadAttention.head_mask``, summed over batches, with
  the library's own backward (raw: ``importance.prune_order`` ranks every head on them at
  once); ``importance.set_heads`` switches heads off.

Every argument is checked where it enters (args.py), as ``nn`` checks its own: a mistake is
an ArgumentError (or a ShapeError, a DTypeError, a TokenIdError for ids) naming the function,
the argument and the fix. The model must be an encoder-decoder ``nn.Transformer`` (a
``TransformerLM`` has one kind of attention and is refused); a head is ``(kind, layer,
head)``, and a list ``[kind, layer, head]`` (as JSON gives a triple back) is the same head;
NumPy integers are integers, bools and floats are not.

Floors: above ``nn`` (it runs models), beside ``viz`` and ``decode``; nothing below imports it.
"""

from .collect import KINDS, attention_maps, model_head_stats
from .importance import head_importance, prune_order, set_heads
from .stats import STATS, head_stats

__all__ = [
    "KINDS",
    "STATS",
    "attention_maps",
    "head_importance",
    "head_stats",
    "model_head_stats",
    "prune_order",
    "set_heads",
]
