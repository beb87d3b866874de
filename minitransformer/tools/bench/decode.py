"""The decoding benchmark: greedy tokens/s with and without the key/value cache.

``run_decode`` times ``decode.greedy_decode(..., use_cache=...)`` at ``small``, 64 tokens,
the modes alternating in this process; ``format_decode`` prints the result. The modes:
cached (eager steps), recomputing (no cache) and, on CUDA, cached with each step replayed
from a CUDA graph (``use_graph="auto"``, fast/gpu/decode_graph.py; its first decodes, the
warm-up and the captures, run before the timing). Issue 49's target: cached >= 3x
recomputing at small, 64 tokens, on the GPU.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import numpy as np  # the fixed random source batch (host side)

from ... import backend, nn
from ...decode import greedy_decode
from ...fast.gpu.decode_graph import graphs_for
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
    modes = {"cached": {"use_graph": False}, "recompute": {"use_cache": False, "use_graph": False}}
    if device.startswith("cuda"):  # each cached step replayed from a CUDA graph
        modes["graph"] = {"use_graph": "auto"}
        for _ in range(2):  # the shape's warm-up decode, then its captures
            greedy_decode(model, src, max_len=length, **modes["graph"])
    for how in modes.values():  # warm-up
        greedy_decode(model, src, max_len=4, **how)
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    t_end = time.perf_counter() + seconds
    while len(times["recompute"]) < 2 or time.perf_counter() < t_end:
        for mode, how in modes.items():
            t = time.perf_counter()
            out = greedy_decode(model, src, max_len=length, **how)
            backend.synchronize(device)
            times[mode].append(time.perf_counter() - t)
            assert len(out[0]) == length, "decoding stopped early"
    tok = {mode: batch * length / statistics.median(ts) for mode, ts in times.items()}
    d = {
        "preset": preset,
        "length": length,
        "batch": batch,
        "device": device,
        "cached_tokens_per_s": tok["cached"],
        "recompute_tokens_per_s": tok["recompute"],
        "speedup": tok["cached"] / tok["recompute"],
        "calls": len(times["recompute"]),
        "cached_ms_median": 1e3 * statistics.median(times["cached"]),
        "recompute_ms_median": 1e3 * statistics.median(times["recompute"]),
    }
    if "graph" in modes:
        d["graph_tokens_per_s"] = tok["graph"]
        d["graph_speedup"] = tok["graph"] / tok["recompute"]
        d["graph_ms_median"] = 1e3 * statistics.median(times["graph"])
        d["graph_stats"] = graphs_for(model).stats()
    return d


def format_decode(d: dict[str, Any]) -> str:
    """The result of ``run_decode`` as four lines (six with the CUDA graph's)."""
    graph = ""
    if "graph_tokens_per_s" in d:
        s = d["graph_stats"]
        graph = (
            f"   graph-replayed {d['graph_tokens_per_s']:9,.0f} tok/s "
            f"({d['graph_ms_median']:.0f} ms/call; {s['graphs']} graphs, {s['replays']} "
            f"replays, fallbacks {s['fallbacks'] or 'none'})\n"
        )
    return (
        f"== greedy decoding at {d['preset']}, {d['length']} tokens, batch {d['batch']} "
        f"(device {d['device']}, {d['calls']} calls each)\n"
        f"   with cache    {d['cached_tokens_per_s']:10,.0f} tok/s ({d['cached_ms_median']:.0f} "
        f"ms/call)\n"
        f"{graph}"
        f"   recomputing   {d['recompute_tokens_per_s']:10,.0f} tok/s "
        f"({d['recompute_ms_median']:.0f} ms/call)\n"
        f"   cache speed-up {d['speedup']:.1f}x"
        + (f", graph-replayed {d['graph_speedup']:.1f}x" if graph else "")
    )
