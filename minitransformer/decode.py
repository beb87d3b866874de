"""Decoding: turn a trained model's next-token distribution into output sequences.

greedy_decode: at each step take the most probable next token (one forward step each).
beam_search:   keep the ``beam_size`` best partial outputs by total log-probability; rank
               finished ones by  log p(Y) / lp(Y),  lp(Y) = ((5 + |Y|) / 6)^alpha  (the
               length penalty of Wu et al. 2016 that the paper uses, §6.1: beam 4, α 0.6).

Both are batched (no Python loop over sentences) and, by default, *incremental*: the
decoder's keys/values of earlier positions live in a cache (``model.new_cache()``), so
step t costs one position instead of recomputing all t. ``use_cache=False`` recomputes the
whole prefix every step (the slow reference the tests compare against).
The source ids are checked by ``model.encode`` and at the cache's first step (the cache
keeps the source's padding mask), not at every step: each later step checks only its new
token ids (``use_cache=False`` has no cache, so each of its steps checks src again).
The beams' bookkeeping (scores, ranking) is host NumPy: B·k rows of V numbers per step.

Outputs are lists of token ids without BOS/EOS. Decoding stops at EOS or after
``max_len`` tokens (never past the model's ``cfg.max_len`` positions). ``forced_eos``
(transformers' ``forced_eos_token_id``) makes the last of those tokens EOS, so a sequence cut
at the limit ends with EOS: at most ``max_len - 1`` tokens come out, and beam search scores
the forced EOS as log-probability 0, as transformers' ``ForcedEOSTokenLogitsProcessor`` does.
A beam wider than the target vocabulary is refused: from BOS there are only V next tokens,
so the extra beams are dead rows that cost memory and time (B·k·V numbers a step).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import backend, checks
from . import functional as F
from .errors import ArgumentError
from .fast.gpu.decode_graph import bucketed_source, stepper, use_graphs
from .tensor import Tensor, no_grad


@dataclass(frozen=True)
class Decoding:
    """How to decode when the caller does not say (a Translator's defaults): the beam size
    (1 = greedy), the most tokens to generate (None: the model's positions) and whether the
    last of them is forced to be EOS. A Marian folder's come from its generation config."""

    beam_size: int = 1
    max_len: int | None = None
    forced_eos: bool = False


def check_beam_size(where: str, beam_size: Any, model: Any) -> int:
    """``beam_size`` as an int from 1 to the model's target vocabulary (``cfg.tgt_vocab``),
    else an ArgumentError naming it and the fix."""
    k = checks.positive_int(where, "beam_size", beam_size, "the paper uses 4; 1 is greedy decoding")
    vocab = getattr(model.cfg, "tgt_vocab", None)
    if vocab is not None and k > vocab:
        raise ArgumentError(
            f"{where}: beam_size {k:,} (--beam) is wider than the model's target vocabulary "
            f"of {vocab:,} tokens: a beam holds at most one hypothesis per next token, the rest "
            f"would be dead rows costing memory and time. Fix: a beam of at most {vocab:,} "
            "(4-5 is usual; 1 is greedy)"
        )
    return k


@contextlib.contextmanager
def _inference(model: Any) -> Iterator[None]:
    """Evaluation mode (no dropout) and no graph, then the model's mode as it was."""
    was_training = model.training
    model.eval()
    try:
        with no_grad():
            yield
    finally:
        model.train(was_training)


def _ids(model: Any, src: Any) -> Any:
    data = src.data if isinstance(src, Tensor) else src
    if not backend.is_array(data):
        data = backend.asarray(data, device=model.device)
    return data


def _steps(model: Any, max_len: int | None) -> int:
    """How many tokens may be generated: positions 0 .. cfg.max_len - 1 are available."""
    limit = model.cfg.max_len
    return limit if max_len is None else min(max_len, limit)


def _check_model(where: str, model: Any) -> None:
    if not (hasattr(model, "cfg") and hasattr(model, "encode") and hasattr(model, "decode")):
        raise ArgumentError(
            f"{where}: model must be an mt.nn.Transformer, got {type(model).__name__}; load "
            "one with Translator.load(run_dir) or build nn.Transformer(cfg)"
        )


def _check_max_len(where: str, max_len: Any) -> int | None:
    if max_len is None:
        return None
    return checks.positive_int(
        where, "max_len", max_len, "the most tokens to generate, or None for the model's max_len"
    )


def _strip(rows: Any, cfg: Any) -> list[list[int]]:
    """(B, L) host ids after BOS -> lists cut at the first EOS, without PAD."""
    out = []
    for row in rows.tolist():
        seq = []
        for tok in row:
            if tok == cfg.eos_id:
                break
            if tok != cfg.pad_id:
                seq.append(int(tok))
        out.append(seq)
    return out


def greedy_decode(
    model: Any,
    src: Any,
    max_len: int | None = None,
    use_cache: bool = True,
    forced_eos: bool = False,
    use_graph: bool | str = "auto",
) -> list[list[int]]:
    """src (B, S) ids -> B output id lists, taking the arg-max token at every step;
    ``forced_eos``: the max_len-th token is EOS (so no forward step is run for it).
    ``use_graph``: "auto" replays each cached step from a CUDA graph on a GPU with the
    fused kernels on (fast/gpu/decode_graph.py); False never; the CPU never does."""
    _check_model("greedy_decode", model)
    max_len = _check_max_len("greedy_decode", max_len)
    use_cache = checks.flag("greedy_decode", "use_cache", use_cache)
    forced_eos = checks.flag("greedy_decode", "forced_eos", forced_eos)
    graphed = use_graphs("greedy_decode", model, use_graph, use_cache)
    cfg = model.cfg
    with _inference(model):
        src = _ids(model, src)
        xp = backend.namespace(src)
        steps = _steps(model, max_len) - int(forced_eos)  # a forced EOS: not output
        cache, step = _stepper(model, src, steps, use_cache, graphed)
        B = src.shape[0]
        ys = _output_ids(xp, B, steps, cfg, src)  # (B, steps + 1), BOS then PAD
        done = xp.zeros((B,), dtype=xp.bool, device=src.device)
        pad = xp.asarray(cfg.pad_id, dtype=src.dtype, device=src.device)
        for t in range(1, steps + 1):  # token t is written into ys[:, t]
            last = step(ys[:, t - 1 : t] if use_cache else ys[:, :t])  # (B, V)
            _forbid_specials(last, cfg)
            nxt = xp.astype(xp.argmax(last, axis=-1), src.dtype)  # (B,)
            nxt = xp.where(done, pad, nxt)
            ys[:, t] = nxt  # in place: the ids so far are not copied
            done = done | (nxt == cfg.eos_id)
            if bool(xp.all(done)):
                break
    return _strip(backend.to_numpy(ys[:, 1:]), cfg)


def _stepper(model: Any, src: Any, steps: int, use_cache: bool, graphed: bool,
             rows: Any = None) -> tuple[Any, Any]:  # fmt: skip
    """(cache, step): the source encoded (its rows taken ``rows``, beam search's B·k, when
    given) and ``step(ids) -> logits (B, V)`` of the next position, through the cache when
    ``use_cache``, replayed from CUDA graphs when ``graphed`` (the source is then padded to
    a bucket's length and the cache is the shape's own, reused: decode_graph.py)."""
    xp = backend.namespace(src)
    if graphed:
        src = bucketed_source(src, model.cfg.pad_id, model.cfg.max_len)
    memory = model.encode(src)  # (B, S, D)
    if rows is not None:  # each sentence's beams: its rows repeated
        src = xp.take(src, rows, axis=0)
        memory = Tensor._wrap(xp.take(memory.data, rows, axis=0))
    capacity = max(steps, 1)
    if not graphed:
        cache = model.new_cache(capacity=capacity) if use_cache else None
        return cache, lambda ids: model.decode(ids, memory, src, cache).data[:, -1, :]

    def run(ids: Any, cache: Any) -> Any:  # the step a graph captures: no host read
        return model.decode(ids, memory, src, cache, checked=True).data[:, -1, :]

    return stepper(model, (src.shape[0], src.shape[1], capacity), capacity, run)


def _output_ids(xp: Any, rows: int, steps: int, cfg: Any, src: Any) -> Any:
    """The output ids of a decode, allocated once: (rows, steps + 1), BOS in column 0 and
    PAD after it; step t writes its token into column t (no concatenation per token)."""
    ys = xp.full((rows, steps + 1), cfg.pad_id, dtype=src.dtype, device=src.device)
    ys[:, 0] = cfg.bos_id
    return ys


def _forbid_specials(logits: Any, cfg: Any) -> None:
    """PAD and BOS are never outputs: give them -inf (in place, on a fresh array)."""
    logits[:, cfg.pad_id] = -float("inf")
    logits[:, cfg.bos_id] = -float("inf")


def length_penalty(length: int, alpha: float) -> float:
    """lp(Y) = ((5 + |Y|) / 6)^alpha; alpha = 0 ranks by raw log-probability."""
    return _lp(length, _check_alpha("length_penalty", alpha))


def _lp(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(
    model: Any,
    src: Any,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len: int | None = None,
    forced_eos: bool = False,
    use_graph: bool | str = "auto",
) -> list[list[int]]:
    """src (B, S) ids -> B output id lists, the best of ``beam_size`` hypotheses each
    (``beam_size`` at most the target vocabulary).

    Beams of all sentences are decoded together as one batch of B·k rows. At each step the
    k·V continuations of a sentence's k beams are ranked by total log-probability and the
    best k kept; a continuation that ends in EOS leaves the beam as a finished hypothesis
    (scored with the length penalty). A sentence stops when it has k finished hypotheses
    and no live beam can still beat its best one. ``forced_eos``: at the last step every live
    beam ends with EOS at log-probability 0 (no forward step is run for it). ``use_graph``:
    as greedy_decode's (each step replayed from a CUDA graph on a GPU).
    """
    _check_model("beam_search", model)
    k = check_beam_size("beam_search", beam_size, model)
    alpha = _check_alpha("beam_search", alpha)
    max_len = _check_max_len("beam_search", max_len)
    forced_eos = checks.flag("beam_search", "forced_eos", forced_eos)
    graphed = use_graphs("beam_search", model, use_graph, True)
    if k == 1:
        return greedy_decode(model, src, max_len, forced_eos=forced_eos, use_graph=use_graph)
    cfg = model.cfg
    with _inference(model):
        src = _ids(model, src)
        xp = backend.namespace(src)
        dev = src.device
        B = src.shape[0]
        rows = xp.reshape(xp.broadcast_to(xp.arange(B, device=dev)[:, None], (B, k)), (-1,))
        steps = _steps(model, max_len)  # the source, memory and cache: (B·k, S) rows
        cache, step = _stepper(model, src, steps, True, graphed, rows)
        ys = _output_ids(xp, B * k, steps, cfg, src)  # (B·k, steps + 1)
        # Only beam 0 starts alive, so the first step does not pick k copies of one token.
        neg_inf = -float("inf")
        scores = [[0.0] + [neg_inf] * (k - 1) for _ in range(B)]
        finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
        for t in range(1, steps + 1):  # the beams' token t is written into ys[:, t]
            if forced_eos and t == steps:
                _finish_with_eos(finished, scores, backend.to_numpy(ys[:, 1:t]), k, alpha)
                break
            last = step(ys[:, t - 1 : t])  # (B·k, V)
            _forbid_specials(last, cfg)
            logp = backend.to_numpy(F.log_softmax(Tensor._wrap(last)).data)  # host (B·k, V)
            V = logp.shape[-1]
            parents, tokens = [], []
            for b in range(B):
                total = logp[b * k : (b + 1) * k] + np.asarray(scores[b])[:, None]
                flat = total.reshape(-1)
                best = np.argsort(-flat, kind="stable")[: 2 * k]
                new_scores, kept = [], []
                for idx in best.tolist():
                    score = float(flat[idx])
                    if score == neg_inf:
                        break
                    parent, tok = divmod(idx, V)
                    if tok == cfg.eos_id or t == steps:
                        prefix = backend.to_numpy(ys[b * k + parent, 1:t]).tolist()
                        out = prefix if tok == cfg.eos_id else prefix + [tok]
                        norm = score / _lp(len(out) + 1, alpha)
                        finished[b].append((norm, out))
                    elif len(kept) < k:
                        kept.append((parent, tok))
                        new_scores.append(score)
                    if len(kept) == k:
                        break
                while len(kept) < k:  # fewer than k live continuations: pad dead beams
                    kept.append((0, cfg.pad_id))
                    new_scores.append(neg_inf)
                if _sentence_done(finished[b], new_scores, k, steps, alpha):
                    new_scores = [neg_inf] * k
                scores[b] = new_scores
                parents += [b * k + p for p, _ in kept]
                tokens += [tok for _, tok in kept]
            if all(s[0] == neg_inf for s in scores):
                break
            order = xp.asarray(np.asarray(parents), device=dev)
            new_tok = xp.asarray(np.asarray(tokens, dtype="int64"), device=dev)
            ys[:, :t] = xp.take(ys[:, :t], order, axis=0)  # in place: the survivors' prefixes
            ys[:, t] = xp.astype(new_tok, ys.dtype)
            cache.keep_rows(order)  # in place, into the same buffers
    return [max(f)[1] if f else [] for f in finished]


def _finish_with_eos(
    finished: list[list[tuple[float, list[int]]]],
    scores: list[list[float]],
    prefixes: Any,
    k: int,
    alpha: float,
) -> None:
    """The forced EOS of the last step: every live beam (score above -inf) is finished as its
    prefix plus EOS, which adds log-probability 0 (transformers' forced_eos_token_id)."""
    for b, row in enumerate(scores):
        for j, score in enumerate(row):
            if score != -float("inf"):
                out = prefixes[b * k + j].tolist()
                finished[b].append((score / _lp(len(out) + 1, alpha), out))


def _check_alpha(where: str, alpha: Any) -> float:
    return checks.real(
        where, "alpha", alpha, 0.0,
        fix="alpha is the length penalty's exponent: 0 = none, the paper uses 0.6",
    )  # fmt: skip


def _sentence_done(
    finished: list[tuple[float, list[int]]], alive: list[float], k: int, steps: int, alpha: float
) -> bool:
    """True when k hypotheses are finished and no live beam can overtake the best one.

    A live beam's log-probability only falls as it grows, so its best possible final score
    is its current log-probability divided by the largest length penalty it could reach.
    """
    if len(finished) < k:
        return False
    best_alive = max(alive)
    if best_alive == -float("inf"):
        return True
    return max(f[0] for f in finished) >= best_alive / _lp(steps, alpha)
