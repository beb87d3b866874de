"""What the benchmark measures: its sizes (``PRESETS``) and the matmul FLOPs of one step.

A preset is a model size of ``TransformerConfig.preset`` plus the vocabulary, the sentence
length and the batch of the fixed random batch every implementation trains on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...config import TransformerConfig


@dataclasses.dataclass(frozen=True)
class BenchPreset:
    """One benchmark size: the model preset plus vocabulary, sequence length and batch."""

    name: str
    vocab: int
    length: int  # source and target length
    batch: int

    def config(self, **overrides: Any) -> TransformerConfig:
        """The model's config: the named preset at this vocabulary, ``overrides`` applied."""
        V = self.vocab
        fields = {"max_len": max(256, self.length + 1), **overrides}
        return TransformerConfig.preset(self.name, src_vocab=V, tgt_vocab=V, **fields)


PRESETS = {
    "tiny": BenchPreset("tiny", vocab=32, length=16, batch=64),
    "small": BenchPreset("small", vocab=1000, length=32, batch=32),
    "base": BenchPreset("base", vocab=8000, length=32, batch=16),
    # the base model at a GPU-sized batch (64 sentences of 64 tokens): asked for by name only
    "base-64x64": BenchPreset("base", vocab=8000, length=64, batch=64),
}
DEFAULT_PRESETS = ("tiny", "small", "base")  # what ``bench`` times when no --preset is given
DECODE_PRESET, DECODE_LENGTH, DECODE_BATCH = "small", 64, 32


def step_flops(cfg: Any, B: int, S: int, T: int) -> int:
    """Matmul FLOPs of one training step: 3 x forward (backward = 2 x forward for every
    product: dX and dW of each linear, two products per attention product).

    Forward, with D = d_model, per encoder layer: Q, K, V, O projections 4 * 2BSD^2,
    scores and P V 2 * 2BS^2D, feed-forward 2 * 2BSD d_ff. Per decoder layer: self-attention
    as above over T, cross-attention 2 * 2BTD^2 (Q, O) + 2 * 2BSD^2 (K, V of memory) +
    2 * 2BTSD, feed-forward 2 * 2BTD d_ff. Output projection 2BTDV.
    """
    D, F, V = cfg.d_model, cfg.d_ff, cfg.tgt_vocab
    enc = 8 * B * S * D * D + 4 * B * S * S * D + 4 * B * S * D * F
    dec = (8 * B * T * D * D + 4 * B * T * T * D) + (
        4 * B * T * D * D + 4 * B * S * D * D + 4 * B * T * S * D
    )
    dec += 4 * B * T * D * F
    forward = cfg.N * (enc + dec) + 2 * B * T * D * V
    return 3 * forward
