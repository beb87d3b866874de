"""N-gram baselines of a language model's loss: what counting alone achieves.

Every sequence is read as the model reads it: BOS + tokens, each position predicting the
next of tokens + EOS. Over a split's M targets w_m (with previous token v_m), in nats:

    loss = -(1/M) Σ_m log p(w_m | v_m)

    unigram:  p(w)     = (c(w) + 1) / (C + V)                     add-one, ignoring v
    bigram:   p(w | v) = λ c(v, w) / c(v) + (1 - λ) p_unigram(w)  (c(v) = 0: the unigram)

c counts the training targets (C of them), c(v, w) the training pairs; V is the vocabulary
size. λ is the value of a grid (0.05 .. 0.95) with the lowest loss on the split it is
``tuned_on`` (the validation split): a generous baseline, since it has seen that split once.
A model that learned nothing beyond counting sits near these numbers; a Transformer that
uses the whole prefix beats the bigram. Host NumPy, no loop over tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

LAMBDAS = np.round(np.arange(0.05, 0.96, 0.05), 2)


def pairs_of(sequences: Sequence[Sequence[int]], bos: int, eos: int) -> tuple[np.ndarray, ...]:
    """(previous, target) int64 arrays over every position of BOS + s -> s + EOS."""
    prev = [np.asarray([bos, *s], dtype=np.int64) for s in sequences]
    nxt = [np.asarray([*s, eos], dtype=np.int64) for s in sequences]
    if not prev:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(prev), np.concatenate(nxt)


class NGramBaselines:
    """Unigram and bigram counts of training sequences; ``losses(held)`` scores others.

    >>> b = NGramBaselines([[5, 6], [5, 7]], vocab_size=8, bos=1, eos=2)
    >>> sorted(b.losses([[5, 6]]))
    ['bigram', 'bigram_lambda', 'unigram']
    """

    def __init__(self, train: Sequence[Sequence[int]], vocab_size: int, bos: int, eos: int) -> None:
        self.V, self.bos, self.eos = vocab_size, bos, eos
        prev, nxt = pairs_of(train, bos, eos)
        counts = np.bincount(nxt, minlength=vocab_size).astype(np.float64)
        self.unigram = (counts + 1.0) / (counts.sum() + vocab_size)  # (V,) add-one
        self.codes, self.pair_counts = np.unique(prev * vocab_size + nxt, return_counts=True)
        self.context = np.bincount(prev, minlength=vocab_size).astype(np.float64)  # c(v)

    def _bigram_ml(self, prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
        """c(v, w) / c(v) at each (v, w) (0 where the pair or the context was never seen)."""
        codes = prev * self.V + nxt
        if len(self.codes) == 0:  # no training pairs
            return np.zeros(len(codes))
        at = np.minimum(np.searchsorted(self.codes, codes), len(self.codes) - 1)
        pair = np.where(self.codes[at] == codes, self.pair_counts[at], 0)
        return np.divide(pair, self.context[prev], out=np.zeros(len(codes)),
                         where=self.context[prev] > 0)  # fmt: skip

    def losses(
        self, held: Sequence[Sequence[int]], tuned_on: Sequence[Sequence[int]] | None = None
    ) -> dict[str, float]:
        """{"unigram", "bigram": nats per target token on ``held``; "bigram_lambda": the λ,
        chosen on ``tuned_on`` (default: ``held`` itself)}."""
        prev, nxt = pairs_of(held, self.bos, self.eos)
        if len(nxt) == 0:
            return {"unigram": float("nan"), "bigram": float("nan"), "bigram_lambda": 0.5}
        lam = self._best_lambda(tuned_on if tuned_on is not None else held)
        uni = self.unigram[nxt]
        bigram = lam * self._bigram_ml(prev, nxt) + (1.0 - lam) * uni
        return {
            "unigram": float(-np.log(uni).mean()),
            "bigram": float(-np.log(bigram).mean()),
            "bigram_lambda": float(lam),
        }

    def _best_lambda(self, sequences: Sequence[Sequence[int]]) -> float:
        """The λ of LAMBDAS with the lowest bigram loss on ``sequences``."""
        prev, nxt = pairs_of(sequences, self.bos, self.eos)
        ml, uni = self._bigram_ml(prev, nxt), self.unigram[nxt]
        mixed = LAMBDAS[:, None] * ml[None, :] + (1.0 - LAMBDAS[:, None]) * uni[None, :]
        return float(LAMBDAS[np.argmin(-np.log(mixed).mean(axis=1))])


def task_baselines(task: Any, split: str = "valid", samples: int | None = None) -> dict[str, float]:
    """The baselines of a language-model task (``tasks.lm_task``) on the first ``samples``
    sequences of ``split`` (all when None): counted on its training targets, λ tuned on its
    validation split."""
    vocab = task.vocab
    targets = {name: [t for _, t in pairs] for name, pairs in task.splits.items()}
    counts = NGramBaselines(targets["train"], len(vocab), vocab.bos_id, vocab.eos_id)
    return counts.losses(targets[split][: samples or None], tuned_on=targets["valid"])
