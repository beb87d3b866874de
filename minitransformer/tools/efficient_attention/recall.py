"""The long-context task of the quality study: facts stored far back, questions at the end.

One example is a sequence of ``length`` tokens (T = 512 by default) that a decoder-only
language model reads from left to right:

    x0 x0 f5_2 x0 x0 ... x0 f1_6 x0 ... f7_0 x0 ...        ... k5 f5_2 k1 f1_6 k7 f7_0 ...
    └──────────────── the store: filler and facts ────────┘ gap └── the questions ──┘

- **filler** ``x0`` fills every position of the store that holds no fact (``fillers``
  different filler tokens drawn at random; one by default: a blank haystack, so that what a
  model must learn is to find one fact among T positions and carry it over the distance,
  not to tell facts from noise. With 16 random fillers the study's model stayed at chance
  for its whole budget of steps);
- **facts** ``f{k}_{v}`` (key k, value v; one token each) sit at random positions of the
  store, ``facts`` of them, every key at most once in a sequence;
- **questions** at the end: a key token ``k{a}`` of a fact of this sequence, then the answer,
  that fact's token ``f{a}_{v}``. The model is scored at the answers only: its loss and
  accuracy there (``answers`` marks them); every other position is free to predict anything.

**Why a local window cannot answer.** One fact of key a is in the store, and its value is
uniform and independent of everything else in the sequence, so the answer is determined by
the context (by that one fact token) and by nothing else. Every fact sits at least ``gap``
positions before the answer that needs it (128 by default; the model predicts token t from
its input position t, where the fact at token p sits at p + 1: at least gap - 1 = 127
positions back), at a position that varies from sequence to sequence; the questions ask
distinct keys, so no earlier question or answer in the tail repeats it. A causal attention
of window w reads w positions back per layer, so N such layers see at most N·w positions
back (2 × 32 = 64 in the study's model, 3 × 32 = 96 with a third layer):
the fact is out of sight, the key alone narrows the answer to the ``values`` facts of key a,
and the best such a model can do is guess among them: an accuracy of 1/values (the chance
level, ``chance``) and a loss of ln(values). A full attention sees the fact; so, through two
hops, does a strided one (its local band, then its stride), and so may a linear one, whose
kernel must single out one token among T without a softmax.

    task = RecallTask()                                # T = 512, 8 keys × 8 values, 8 facts
    data = task.sample(100, np.random.default_rng(0))  # tokens (100, 512), answers (100, 512)
    batch = to_batch(data)                             # a Batch: targets PAD but at answers
    task.describe(data.tokens[0])                      # the sequence as words
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import checks
from ...data.batching import Batch
from ...data.vocab import BOS, PAD, Vocab
from ...errors import ConfigError

MAX_LENGTH = 8192  # positions: beyond this a CPU step takes minutes


@dataclass(frozen=True)
class RecallData:
    """``n`` sequences of the task: ``tokens`` (n, T) int64 token ids; ``answers`` (n, T)
    bool, True where a token is an answer the model is scored on; ``facts`` (n, T) bool,
    True where a fact sits in the store."""

    tokens: np.ndarray
    answers: np.ndarray
    facts: np.ndarray

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def rows(self, start: int, stop: int) -> RecallData:
        """Sequences ``start .. stop - 1``."""
        return RecallData(self.tokens[start:stop], self.answers[start:stop], self.facts[start:stop])


@dataclass(frozen=True)
class RecallTask:
    """The task's sizes: ``length`` tokens a sequence; ``keys`` × ``values`` fact tokens;
    ``facts`` facts in a sequence's store (distinct keys); ``questions`` asked at the end
    (distinct facts of the store); ``fillers`` filler tokens; every fact at least ``gap``
    positions before the answer that needs it."""

    length: int = 512
    keys: int = 8
    values: int = 8
    facts: int = 8
    questions: int = 8
    fillers: int = 1
    gap: int = 128

    def __post_init__(self) -> None:
        """Every field checked on construction (ConfigError naming the field and the fix)."""
        where = "RecallTask"
        for name, low, high in (("length", 16, MAX_LENGTH), ("keys", 1, 256), ("values", 2, 256),
                                ("facts", 1, 256), ("questions", 1, 256), ("fillers", 1, 256),
                                ("gap", 1, MAX_LENGTH)):  # fmt: skip
            value = getattr(self, name)
            checks.positive_int(where, name, value, f"pass e.g. {name}={RecallTask.__dict__[name]}")
            if not low <= value <= high:
                raise ConfigError(f"{where}: {name} must be in {low}..{high}, got {value}")
        if self.facts > self.keys:
            raise ConfigError(
                f"{where}: facts={self.facts} needs as many keys (each key once in a "
                f"sequence), got keys={self.keys}; raise keys or lower facts"
            )
        if self.questions > self.facts:
            raise ConfigError(
                f"{where}: questions={self.questions} asks more than the facts={self.facts} "
                "stored (each once); lower questions"
            )
        if self.store < self.facts:
            raise ConfigError(
                f"{where}: length={self.length} leaves {max(self.store, 0)} store positions "
                f"for {self.facts} facts after {2 * self.questions} question tokens and a gap "
                f"of {self.gap}; raise length or lower gap, facts or questions"
            )

    # ------------------------------------------------------------------ the layout
    @property
    def store(self) -> int:
        """Positions 0 .. store - 1 may hold a fact: the last fact ends ``gap`` positions
        before the first answer (at length - 2·questions + 1)."""
        return self.length - 2 * self.questions - self.gap + 2

    @property
    def shortest_length(self) -> int:
        """The shortest ``length`` whose store holds this task's facts."""
        return 2 * self.questions + self.gap - 2 + self.facts

    @property
    def chance(self) -> float:
        """The accuracy of the best guess without the fact: one of the key's ``values``."""
        return 1.0 / self.values

    @property
    def vocab(self) -> Vocab:
        """PAD, BOS, EOS, UNK, then k0.., f0_0.., x0.. (fact f{k}_{v} is id first_fact +
        k·values + v)."""
        keys = [f"k{k}" for k in range(self.keys)]
        facts = [f"f{k}_{v}" for k in range(self.keys) for v in range(self.values)]
        return Vocab(keys + facts + [f"x{i}" for i in range(self.fillers)])

    @property
    def vocab_size(self) -> int:
        return 4 + self.keys + self.keys * self.values + self.fillers

    @property
    def first_key(self) -> int:
        return 4

    @property
    def first_fact(self) -> int:
        return 4 + self.keys

    @property
    def first_filler(self) -> int:
        return 4 + self.keys + self.keys * self.values

    # ------------------------------------------------------------------ sampling
    def sample(self, n: int, rng: np.random.Generator) -> RecallData:
        """``n`` sequences drawn from ``rng`` (the same generator state gives the same
        sequences)."""
        n = checks.positive_int("RecallTask.sample", "n", n, "pass e.g. n=100")
        if not isinstance(rng, np.random.Generator):
            raise ConfigError(f"RecallTask.sample: rng must be a numpy.random.Generator, e.g. "
                              f"numpy.random.default_rng(0), got {type(rng).__name__}")  # fmt: skip
        T, q = self.length, self.questions
        tokens = self.first_filler + rng.integers(0, self.fillers, (n, T))
        answers = np.zeros((n, T), dtype=bool)
        facts = np.zeros((n, T), dtype=bool)
        tail = T - 2 * q  # the first question's key
        for row in range(n):
            keys = rng.choice(self.keys, self.facts, replace=False)
            values = rng.integers(0, self.values, self.facts)
            where = rng.choice(self.store, self.facts, replace=False)
            tokens[row, where] = self.first_fact + keys * self.values + values
            facts[row, where] = True
            asked = rng.choice(self.facts, q, replace=False)
            tokens[row, tail:T:2] = self.first_key + keys[asked]
            tokens[row, tail + 1 : T : 2] = (
                self.first_fact + keys[asked] * self.values + values[asked]
            )
            answers[row, tail + 1 : T : 2] = True
        return RecallData(tokens.astype(np.int64), answers, facts)

    def describe(self, tokens: np.ndarray) -> str:
        """One sequence as its tokens' names (for reading an example)."""
        return " ".join(self.vocab.decode(np.asarray(tokens).tolist()))


def to_batch(data: RecallData) -> Batch:
    """A decoder-only Batch: the model reads BOS + tokens[:-1] and predicts tokens; every
    target that is no answer is PAD, which the loss ignores, so the Trainer's step trains
    (and ``model.loss`` scores) the answers only."""
    n, T = data.tokens.shape
    tgt_in = np.concatenate([np.full((n, 1), BOS, dtype=np.int64), data.tokens[:, :-1]], axis=1)
    tgt_out = np.where(data.answers, data.tokens, PAD).astype(np.int64)
    src = np.full((n, 1), PAD, dtype=np.int64)  # no source: the model is decoder-only
    return Batch(src, tgt_in, tgt_out, int(data.answers.sum()), np.arange(n, dtype=np.int64))


__all__ = ["MAX_LENGTH", "RecallData", "RecallTask", "to_batch"]
