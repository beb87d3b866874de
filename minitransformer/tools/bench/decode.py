"""The decoding benchmark: greedy tokens/s with and without the key/value cache.

``run_decode`` times ``decode.greedy_decode(..., use_cache=...)`` at ``small``, 64 tokens,
the two modes alternating in this process; ``format_decode`` prints the result.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import numpy as np  # the fixed random source batch (host side)

from ... import backend, nn
from ...decode import greedy_decode
from .presets import DECODE_BATCH, DECODE_LENGTH, DECODE_PRESET, PRESETS


def run_decode(
    preset: str = DECODE_PRESET,
    length: int = DECODE_LENGTH,
    batch: int = DECODE_BATCH,
    seconds: float = 10.0,
    device: str = "cpu",
) -> dict[str, Any]:
    """Greedy decoding tokens/s, cached vs recomputed, alternating in this process.

    An untrained model may emit EOS at any step and stop early; so that every call decodes
    exactly ``length`` tokens, the benchmark's model gets a config whose EOS id is -1 (an
    id no argmax returns).
    """
    p = PRESETS[preset]
    cfg = p.config(max_len=max(256, length + 1))
    model = nn.Transformer(cfg, seed=0).to(device)
    # EOS id -1 (see above) is not a valid config: set on the model's own copy, past the
    # frozen config's refusal of assignment
    model.cfg = dataclasses.replace(cfg)
    object.__setattr__(model.cfg, "eos_id", -1)
    rng = np.random.default_rng(1)
    src = backend.asarray(rng.integers(3, p.vocab, size=(batch, length)), device=device)
    greedy_decode(model, src, max_len=4, use_cache=True)  # warm-up
    greedy_decode(model, src, max_len=4, use_cache=False)
    times: dict[bool, list[float]] = {True: [], False: []}
    t_end = time.perf_counter() + seconds
    while len(times[False]) < 2 or time.perf_counter() < t_end:
        for cached in (True, False):
            t = time.perf_counter()
            out = greedy_decode(model, src, max_len=length, use_cache=cached)
            backend.synchronize(device)
            times[cached].append(time.perf_counter() - t)
            assert len(out[0]) == length, "decoding stopped early"
    tok = {c: batch * length / statistics.median(ts) for c, ts in times.items()}
    return {
        "preset": preset,
        "length": length,
        "batch": batch,
        "device": device,
        "cached_tokens_per_s": tok[True],
        "recompute_tokens_per_s": tok[False],
        "speedup": tok[True] / tok[False],
        "calls": len(times[False]),
        "cached_ms_median": 1e3 * statistics.median(times[True]),
        "recompute_ms_median": 1e3 * statistics.median(times[False]),
    }


def format_decode(d: dict[str, Any]) -> str:
    """The result of ``run_decode`` as four lines."""
    return (
        f"== greedy decoding at {d['preset']}, {d['length']} tokens, batch {d['batch']} "
        f"(device {d['device']}, {d['calls']} calls each)\n"
        f"   with cache    {d['cached_tokens_per_s']:10,.0f} tok/s ({d['cached_ms_median']:.0f} "
        f"ms/call)\n"
        f"   recomputing   {d['recompute_tokens_per_s']:10,.0f} tok/s "
        f"({d['recompute_ms_median']:.0f} ms/call)\n"
        f"   cache speed-up {d['speedup']:.1f}x"
    )
