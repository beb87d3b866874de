"""Padded batches of (source ids, target ids) pairs, and a resumable stream of them.

A `Batch` holds three int64 arrays, PAD (0) filling the tails:

    src     (B, S)  the source ids
    tgt_in  (B, T)  BOS + target      what the decoder reads ("shifted right")
    tgt_out (B, T)  target + EOS      what the decoder must predict at each position

Masks are not built here: the model builds them on its own device from the pad id.
Batches are bucketed by length (pairs of similar length batched together, so little
padding is wasted) and every order is a function of a seed, so `BatchStream` can be saved
as (epoch, position) and resumed at exactly the same batch.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minitransformer.data.vocab import BOS, EOS, PAD
from minitransformer.errors import ConfigError, TokenIdError

Pair = tuple[Sequence[int], Sequence[int]]
POOL_BATCHES = 50  # bucketing sorts pools of this many batches by length


@dataclass
class Batch:
    """One padded batch; `indices` are the positions of its rows in the pairs list."""

    src: np.ndarray  # (B, S) int64
    tgt_in: np.ndarray  # (B, T) int64
    tgt_out: np.ndarray  # (B, T) int64
    n_tokens: int  # non-pad tokens in tgt_out (target tokens + one EOS per row)
    indices: np.ndarray  # (B,) int64

    def __len__(self) -> int:
        return self.src.shape[0]


def pad(seqs: Sequence[Sequence[int]], width: int | None = None, pad_id: int = PAD) -> np.ndarray:
    """Left-aligned (len(seqs), width) int64 array, filled with ``pad_id`` (this library's
    PAD; a pretrained model's own, Marian's last id, where it has another); width defaults
    to the longest sequence (at least 1)."""
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    if width is None:
        width = max(int(lengths.max(initial=0)), 1)
    flat = np.fromiter(
        itertools.chain.from_iterable(seqs), dtype=np.int64, count=int(lengths.sum())
    )
    if flat.size and flat.min() < 0:
        raise TokenIdError(f"negative token id {int(flat.min())} in a batch; ids must be >= 0.")
    out = np.full((len(seqs), width), pad_id, dtype=np.int64)
    out[np.arange(width) < lengths[:, None]] = flat  # row-major: fills each row's prefix
    return out


def make_batch(pairs: Sequence[Pair], indices: Sequence[int] | None = None) -> Batch:
    """Pad a list of (source ids, target ids) into a `Batch`, adding BOS and EOS."""
    if len(pairs) == 0:
        raise ConfigError("make_batch needs at least one (source, target) pair.")
    src = pad([s for s, _ in pairs])
    tgt_in = pad([[BOS, *t] for _, t in pairs])
    tgt_out = pad([[*t, EOS] for _, t in pairs])
    n_tokens = int(sum(len(t) for _, t in pairs)) + len(pairs)
    idx = np.arange(len(pairs)) if indices is None else np.asarray(indices, dtype=np.int64)
    return Batch(src, tgt_in, tgt_out, n_tokens, idx.astype(np.int64))


def fit_lengths(pairs: Sequence[Pair], max_len: int | None, too_long: str = "drop") -> list[int]:
    """Indices of the pairs that fit `max_len` positions (source <= max_len, target + 1 <=
    max_len), after applying `too_long`: "drop" leaves the others out, "truncate" keeps
    them (make_batch is then given cut copies, see `_cut`), "error" raises. Warns with the
    number of pairs dropped or truncated."""
    if too_long not in ("drop", "truncate", "error"):
        raise ConfigError(f"too_long must be 'drop', 'truncate' or 'error'; got {too_long!r}.")
    if max_len is None:
        return list(range(len(pairs)))
    if max_len < 2:
        raise ConfigError(f"max_len must be >= 2 (a token plus BOS/EOS); got {max_len}.")
    long = [i for i, (s, t) in enumerate(pairs) if len(s) > max_len or len(t) + 1 > max_len]
    if not long:
        return list(range(len(pairs)))
    if too_long == "error":
        raise TokenIdError(
            f"{len(long)} pairs are longer than max_len={max_len} (first: index {long[0]}); "
            "raise max_len or pass too_long='drop' or 'truncate'."
        )
    warnings.warn(
        f"{len(long)} of {len(pairs)} pairs are longer than max_len={max_len}: "
        f"{'dropped' if too_long == 'drop' else 'truncated'}.",
        stacklevel=3,
    )
    if too_long == "truncate":
        return list(range(len(pairs)))
    drop = set(long)
    return [i for i in range(len(pairs)) if i not in drop]


def _cut(pair: Pair, max_len: int | None) -> Pair:
    if max_len is None:
        return pair
    return pair[0][:max_len], pair[1][: max_len - 1]


def plan_batches(
    pairs: Sequence[Pair],
    indices: Sequence[int],
    batch_size: int,
    rng: np.random.Generator | None,
    bucket: bool = True,
    drop_last: bool = False,
) -> list[np.ndarray]:
    """Split `indices` into batches of row indices.

    With an `rng`, the order is shuffled; with `bucket`, pools of `POOL_BATCHES` batches
    are sorted by (source length, target length) before cutting, and the batches are then
    shuffled again, so each batch holds similar lengths but the order of lengths is random.
    Without an rng and with `bucket`, everything is sorted by length (good for evaluation;
    use `Batch.indices` to restore the order).
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1; got {batch_size}.")
    order = np.asarray(indices, dtype=np.int64)
    if rng is not None:
        order = rng.permutation(order)
    if bucket and len(order):
        src_len = np.array([len(pairs[i][0]) for i in order])
        tgt_len = np.array([len(pairs[i][1]) for i in order])
        pool = batch_size * POOL_BATCHES if rng is not None else len(order)
        parts = []
        for start in range(0, len(order), pool):
            sl = slice(start, start + pool)
            parts.append(order[sl][np.lexsort((tgt_len[sl], src_len[sl]))])
        order = np.concatenate(parts)
    cuts = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if drop_last and cuts and len(cuts[-1]) < batch_size:
        cuts.pop()
    if bucket and rng is not None:
        cuts = [cuts[i] for i in rng.permutation(len(cuts))]
    return cuts


def batches(
    pairs: Sequence[Pair],
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int | None = 0,
    rng: np.random.Generator | None = None,
    bucket: bool = True,
    max_len: int | None = None,
    too_long: str = "drop",
    drop_last: bool = False,
) -> Iterator[Batch]:
    """One pass over `pairs` in padded batches of `batch_size` pairs.

    shuffle: random order from `rng` (or `numpy.random.default_rng(seed)`); off for a
        fixed order (then with `bucket` the batches come sorted by length).
    bucket: batch similar lengths together (see `plan_batches`).
    max_len / too_long: positions the model has; longer pairs are dropped, truncated or
        refused ("drop", "truncate", "error"), with a warning.
    """
    if shuffle and rng is None:
        rng = np.random.default_rng(seed)
    keep = fit_lengths(pairs, max_len, too_long)
    for rows in plan_batches(pairs, keep, batch_size, rng if shuffle else None, bucket, drop_last):
        yield make_batch([_cut(pairs[i], max_len) for i in rows], rows)


class BatchStream:
    """Endless shuffled, bucketed batches, epoch after epoch, resumable at any step.

    Epoch e is ordered by `numpy.random.default_rng([seed, e])`, so the state is just
    (epoch, position) and `load_state_dict` brings back the exact same next batch:

        stream = BatchStream(task.splits["train"], batch_size=64, seed=0)
        batch = next(stream)
        state = stream.state_dict()          # JSON-serialisable; store it in the checkpoint
        ...
        stream.load_state_dict(state)        # continue where it stopped
    """

    def __init__(
        self,
        pairs: Sequence[Pair],
        batch_size: int,
        seed: int = 0,
        *,
        bucket: bool = True,
        max_len: int | None = None,
        too_long: str = "drop",
        drop_last: bool = False,
    ) -> None:
        self.pairs, self.batch_size, self.seed = pairs, batch_size, seed
        self.bucket, self.max_len, self.drop_last = bucket, max_len, drop_last
        self._keep = fit_lengths(pairs, max_len, too_long)
        if not self._keep:
            raise ConfigError("BatchStream has no pairs to batch (empty, or all too long).")
        self.epoch = self.position = self.step = 0
        self._plan: list[np.ndarray] | None = None

    def _epoch_plan(self) -> list[np.ndarray]:
        if self._plan is None:
            rng = np.random.default_rng([self.seed, self.epoch])
            self._plan = plan_batches(
                self.pairs, self._keep, self.batch_size, rng, self.bucket, self.drop_last
            )
            if not self._plan:
                raise ConfigError(
                    f"no full batch of {self.batch_size} from {len(self._keep)} pairs with "
                    "drop_last=True; lower batch_size."
                )
        return self._plan

    @property
    def batches_per_epoch(self) -> int:
        return len(self._epoch_plan())

    def __iter__(self) -> BatchStream:
        return self

    def __next__(self) -> Batch:
        plan = self._epoch_plan()
        if self.position >= len(plan):
            self.epoch, self.position, self._plan = self.epoch + 1, 0, None
            plan = self._epoch_plan()
        rows = plan[self.position]
        self.position += 1
        self.step += 1
        return make_batch([_cut(self.pairs[i], self.max_len) for i in rows], rows)

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable position of the stream (plus what must match on restore)."""
        return {
            "epoch": self.epoch,
            "position": self.position,
            "step": self.step,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "n_pairs": len(self._keep),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict()`; the pairs, seed and batch size must be the same."""
        mine = self.state_dict()
        for key in ("seed", "batch_size", "n_pairs"):
            if state.get(key) != mine[key]:
                raise ConfigError(
                    f"BatchStream state has {key}={state.get(key)!r} but this stream has "
                    f"{mine[key]!r}; resume with the same data, seed and batch size."
                )
        self.epoch, self.position, self.step = state["epoch"], state["position"], state["step"]
        self._plan = None
