"""Lesson 11 (speed): the checks of its exercises.

- ``check_11_1``: Exercise 1 (a roofline reading: a float32 product's FLOPs per byte, the
  time the roofline model gives it, and whether it waits for compute or for memory)
- ``check_11_2``: Exercise 2 (memory of the scores: every attention of the model)
- ``check_11_3``: Exercise 3 (what a faster part buys: Amdahl's law on a profile's shares)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _rng, _without_library


def _number(got: object, where: str, what: str) -> float:
    """One number of an answer: an int, a float, a NumPy scalar, a one-element array or
    Tensor; anything else an AssertionError naming ``what``."""
    if hasattr(got, "numpy") and callable(got.numpy):
        got = got.numpy()
    ok = not isinstance(got, bool | str | bytes) and got is not None
    try:
        value = np.asarray(got, dtype=float) if ok else np.asarray([])
    except (TypeError, ValueError):
        value = np.asarray([])
    assert value.size == 1 and bool(np.isfinite(value).all()), (
        f"{where}: {what} is {got!r:.60}; return one finite number"
    )
    return float(value.reshape(()))


def _roofline(m: int, k: int, n: int, peak: float, bandwidth: float) -> tuple[float, float, str]:
    """(FLOPs per byte, seconds, bound) of a float32 (m, k) @ (k, n) on the roofline model:
    2mkn FLOPs, A and B read once and C written once (4 bytes a number)."""
    flops, moved = 2 * m * k * n, 4 * (m * k + k * n + m * n)
    compute_s, memory_s = flops / peak, moved / bandwidth
    return flops / moved, max(compute_s, memory_s), "compute" if compute_s > memory_s else "memory"


def _intensity_mistakes(m: int, k: int, n: int, peak: float, bandwidth: float) -> list:
    """(the intensity a usual mistake gives, its hint), for one product."""
    flops, ab, c = 2 * m * k * n, m * k + k * n, m * n
    return [
        (flops / 2 / (4 * (ab + c)), "a multiply-add is two floating-point operations "
                                     "(section 3's 2·m·k·n)"),
        (flops / (ab + c), "bytes, not numbers: a float32 number takes 4 bytes"),
        (flops / (4 * ab), "the result C goes to memory too: count the bytes written"),
        (flops / (4 * (ab + 2 * c)), "C is only written (C = A B, not C += A B): once, not "
                                     "read and written"),
        (4 * (ab + c) / flops, "FLOPs per byte, not bytes per FLOP"),
        (flops / (4 * 2 * m * k * n), "each matrix crosses the memory bus once (the caches "
                                      "reuse it), not once per multiply"),
        (peak / bandwidth, "that is the machine's ridge point, peak_flops / bandwidth; the "
                           "intensity belongs to the product"),
    ]  # fmt: skip


def _time_mistakes(m: int, k: int, n: int, peak: float, bandwidth: float) -> list:
    """(the time a usual mistake gives, its hint), for one product."""
    compute_s, memory_s = 2 * m * k * n / peak, 4 * (m * k + k * n + m * n) / bandwidth
    return [
        (compute_s + memory_s, "compute and memory traffic overlap: the slower of the two "
                               "sets the time, not their sum"),
        (min(compute_s, memory_s), "the faster of the two limits does not set the time: the "
                                   "product waits for the slower"),
        (compute_s, "that is the time of the FLOPs alone: a memory-bound product waits for "
                    "its bytes"),
        (memory_s, "that is the time of the bytes alone: a compute-bound product waits for "
                   "its FLOPs"),
    ]  # fmt: skip


def _hint(mine: list[float], mistakes: list[list], otherwise: str) -> str:
    """The hint of the mistake that gives ``mine`` on every product (``mistakes[product]`` is
    a list of (value, hint), the same mistakes in the same order for each product)."""
    for j, (_, hint) in enumerate(mistakes[0]):
        if all(np.isclose(x, row[j][0], rtol=1e-6) for x, row in zip(mine, mistakes, strict=True)):
            return hint
    return otherwise


GEMMS = [  # (m, k, n, peak FLOP/s, bandwidth bytes/s): a CPU core, then a GPU
    (1024, 1024, 1024, 100e9, 20e9),  # square: compute-bound
    (4096, 512, 1, 100e9, 20e9),  # matrix times vector: memory-bound
    (1024, 64, 64, 100e9, 20e9),  # thin, on the CPU: compute-bound
    (1024, 64, 64, 60e12, 3e12),  # the same thin product on the GPU: memory-bound
    (8192, 512, 2048, 60e12, 3e12),  # a feed-forward layer's: compute-bound
]


@_exercise("Exercise 1 (a roofline reading)")
def check_11_1(gemm_roofline: Callable) -> None:
    """Intensity, time and bound of five float32 products on two machines, against the
    roofline model; each of the three parts is checked on every product in turn."""
    answers = []
    for m, k, n, peak, bandwidth in GEMMS:
        where = f"gemm_roofline({m}, {k}, {n}, {peak:.3g}, {bandwidth:.3g})"
        got = gemm_roofline(m, k, n, peak, bandwidth)
        assert isinstance(got, tuple | list) and len(got) == 3, (
            f"{where}: you return {got!r:.60}; return three things: (intensity, seconds, "
            "bound), bound the string 'compute' or 'memory'"
        )
        answers.append((where, got))
    for part, what, mistakes, otherwise in (
        (0, "the intensity", _intensity_mistakes,
         "FLOPs (2·m·k·n) over the bytes of A, B and C, 4 each, each moved once"),
        (1, "the time", _time_mistakes,
         "the time the FLOPs take at peak_flops, and the time the bytes take at bandwidth"),
    ):  # fmt: skip
        mine = [_number(got[part], where, what) for where, got in answers]
        want = [_roofline(*g)[part] for g in GEMMS]
        wrong = [i for i in range(len(GEMMS)) if not np.isclose(mine[i], want[i], rtol=1e-6)]
        if wrong:
            hint = _hint(mine, [mistakes(*g) for g in GEMMS], otherwise)
            i = wrong[0]
            raise AssertionError(
                f"{answers[i][0]}: {what} is {mine[i]:.6g}, the roofline model gives "
                f"{want[i]:.6g} ({'FLOP/byte' if part == 0 else 's'}); hint: {hint}"
            )
    for (where, got), (m, k, n, peak, bandwidth) in zip(answers, GEMMS, strict=True):
        want = _roofline(m, k, n, peak, bandwidth)[2]
        bound = got[2].lower() if isinstance(got[2], str) else ""
        said = [kind for kind in ("compute", "memory") if kind in bound]
        assert len(said) == 1, (
            f"{where}: bound is {got[2]!r:.40}; return the string 'compute' or 'memory'"
        )
        assert said[0] == want, (
            f"{where}: you say {said[0]}-bound, it is {want}-bound (intensity "
            f"{_roofline(m, k, n, peak, bandwidth)[0]:.3g}, ridge {peak / bandwidth:.3g} "
            "FLOP/byte); hint: a product that does many FLOPs per byte waits for its FLOPs: "
            "compare its intensity with the ridge point peak_flops / bandwidth"
        )


def _kept_scores(B: int, H: int, S: int, T: int, N: int, dtype: type) -> int:
    """Bytes of every attention probability matrix one forward pass of a small encoder-decoder
    keeps, read off the model's own layers (attention_weights(True))."""
    cfg = mt.TransformerConfig(src_vocab=12, tgt_vocab=12, d_model=4 * H, h=H, N=N, d_ff=8)
    model = mt.nn.Transformer(cfg, seed=0).to(dtype=np.dtype(dtype).name)
    rng = _rng(20)
    src, tgt = rng.integers(4, 12, size=(B, S)), rng.integers(4, 12, size=(B, T))
    model.attention_weights(True)
    with mt.no_grad():
        model(src, tgt)
    kept = [m.last_weights for m in model.modules() if hasattr(m, "last_weights")]
    return sum(np.asarray(w).nbytes for w in kept)


def _scores_hint(mine: int, B: int, H: int, S: int, T: int, N: int, i: int) -> str:
    """Where to look, for a byte count off by a recognisable part."""
    for other, hint in [
        (N * B * H * (S * S + T * T + T * S), "bytes, not numbers: each one takes itemsize"),
        (B * H * (S * S + T * T + T * S) * i, "each of the N layers of each stack keeps its own"),
        (N * B * (S * S + T * T + T * S) * i, "every head has its own matrix of weights"),
        (N * B * H * (T * T + T * S) * i, "the encoder's self-attention keeps its weights too"),
        (N * B * H * (S * S + T * T) * i, "the decoder has a second attention: cross-attention"),
        (N * B * H * (S * S + 2 * T * T) * i, "cross-attention's queries come from the target, "
                                              "its keys from the source"),
        (N * B * H * (2 * S * S + T * T) * i, "cross-attention's queries come from the target, "
                                              "its keys from the source"),
        (B * H * T * S * i, "one attention's matrix is section 2's; the model has 3N of them"),
    ]:  # fmt: skip
        if mine == other:
            return hint
    return "list the attention layers of lesson 08's encoder and decoder, and each one's P shape"


@_exercise("Exercise 2 (memory of the scores)")
def check_11_2(score_bytes: Callable) -> None:
    """All attention weights of one forward pass of an encoder-decoder, in bytes, against the
    arrays a small model of these sizes stores."""
    for (B, H, S, T, N), dtype in [
        ((2, 3, 7, 5, 2), np.float32),
        ((1, 2, 3, 6, 3), np.float64),
        ((3, 1, 4, 4, 1), np.float32),
    ]:
        i = np.dtype(dtype).itemsize
        want = _kept_scores(B, H, S, T, N, dtype)
        where = f"score_bytes(B={B}, H={H}, S={S}, T={T}, N={N}, itemsize={i})"
        mine = _without_library(
            score_bytes, B, H, S, T, N, i, where=where,
            instead="multiply out the shapes of the weights (lessons 05 and 08)",
        )  # fmt: skip
        assert mine == want, (
            f"{where} = {mine}; the model's attention weights take {want} bytes; hint: "
            f"{_scores_hint(mine, B, H, S, T, N, i)}"
        )


def _amdahl(fractions: np.ndarray, speedups: np.ndarray) -> float:
    """The whole step's speedup when each part (a fraction of the old time) runs its speedup
    times faster and the rest of the time is unchanged."""
    return float(1 / (1 - fractions.sum() + (fractions / speedups).sum()))


def _amdahl_hint(mine: float, f: np.ndarray, s: np.ndarray) -> str:
    """Where to look, for a speedup off by a recognisable mistake."""
    new_time = 1 - f.sum() + (f / s).sum()
    for other, hint in [
        (new_time, "that is the new time as a fraction of the old; the speedup is old / new"),
        (1 / (f / s).sum(), "the rest of the step (1 − the fractions) still takes its time"),
        ((f * s).sum() + 1 - f.sum(), "speedups do not average: add up the new times of the "
                                      "parts, then compare with the old time"),
        ((f * s).sum(), "speedups do not average: add up the new times of the parts"),
        (1 / (1 - (f * s).sum()), "a part's new time is its fraction divided by its speedup"),
        (1 / (1 - f.sum()), "a part made s times faster still takes its fraction / s of the "
                            "old time, not nothing"),
    ]:  # fmt: skip
        if np.isfinite(other) and np.isclose(mine, other, rtol=1e-6):
            return hint
    return "the new time is the untouched part plus each part's fraction over its speedup"


AMDAHL_CASES = [  # (fractions of the old step time, their speedups)
    ([0.6], [10.0]),
    ([0.5, 0.2], [4.0, 2.0]),
    ([0.3, 0.3, 0.1], [1.5, 20.0, 3.0]),
    ([0.9], [np.inf]),  # the matrix products for free
    ([0.25, 0.75], [2.0, 8.0]),  # every part accelerated
]


@_exercise("Exercise 3 (what a faster part buys)")
def check_11_3(step_speedup: Callable) -> None:
    """Amdahl's law on five steps, one with a part made free (an infinite speedup)."""
    for fractions, speedups in AMDAHL_CASES:
        f, s = np.array(fractions), np.array(speedups)
        want = _amdahl(f, s)
        where = f"step_speedup({fractions}, {speedups})"
        got = step_speedup(f, s)
        mine = _number(got, where, "the speedup")
        assert np.isclose(mine, want, rtol=1e-9), (
            f"{where} = {mine:.6g}, expected {want:.6g}; hint: {_amdahl_hint(mine, f, s)}"
        )
