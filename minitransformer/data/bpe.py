"""Byte-pair encoding (Sennrich, Haddow & Birch 2016), written from scratch.

Training starts from words spelled as characters, the last one carrying an end-of-word
marker (`"low"` -> `l o w</w>`), and repeatedly merges the most frequent adjacent pair of
symbols, counting pairs over word *frequencies* (each distinct word is handled once).
Source and target text are learned jointly, as in the paper, so both sides share one
vocabulary. Pair counts are kept up to date incrementally: a merge only revisits the words
that contain the merged pair, and a heap with lazy deletion finds the next best pair, so
thousands of merges take seconds, not minutes.

With `split_punctuation`, punctuation marks are split off as words of their own before
anything else (a light pre-tokenizer, like the Moses tokenizer used before subword-nmt), and
glued back when decoding: "dijo: ¿qué?" is learned as "dijo : ¿ qué ?" and decodes back to
"dijo: ¿qué?". Quotes are left alone (opening and closing ones look the same).

Encoding applies the merges in the order they were learned. A character never seen in
training becomes UNK; if it ended a word, a lone `</w>` piece follows it so the word
boundary survives decoding.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from minitransformer.data.vocab import BOS, EOS, PAD, UNK, Vocab
from minitransformer.errors import ConfigError

EOW = "</w>"
_PUNCT = re.compile(r"([.,;:!?¡¿()\[\]])")
_SPACE_BEFORE = re.compile(r" ([.,;:!?)\]])")
_SPACE_AFTER = re.compile(r"([¡¿(\[]) ")

Pair = tuple[str, str]


def split_punct(text: str) -> str:
    """Put spaces around punctuation marks: "dijo: ¿qué?" -> "dijo : ¿ qué ?"."""
    return " ".join(_PUNCT.sub(r" \1 ", text).split())


def join_punct(text: str) -> str:
    """Undo `split_punct` for text in the usual spacing: "dijo : ¿ qué ?" -> "dijo: ¿qué?"."""
    return _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text))


def _spell(word: str) -> tuple[str, ...]:
    """A word as its starting symbols: characters, the last one marked as word end."""
    return (*word[:-1], word[-1] + EOW)


def _pairs(symbols: tuple[str, ...]) -> Iterable[Pair]:
    return zip(symbols, symbols[1:], strict=False)


def _merge_word(symbols: tuple[str, ...], pair: Pair, merged: str) -> tuple[str, ...]:
    """Replace every non-overlapping occurrence of `pair` (left to right) by `merged`."""
    out: list[str] = []
    i, n = 0, len(symbols)
    while i < n:
        if i + 1 < n and symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
            out.append(merged)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def learn_merges(word_counts: dict[str, int], n_merges: int) -> list[Pair]:
    """Learn up to `n_merges` merges from word frequencies (stops early if no pair is left).

    Ties between equally frequent pairs go to the lexicographically smallest pair, so the
    result depends only on the counts.
    """
    words = [_spell(w) for w in sorted(word_counts)]
    freqs = [word_counts[w] for w in sorted(word_counts)]
    pair_counts: dict[Pair, int] = defaultdict(int)
    where: dict[Pair, set[int]] = defaultdict(set)  # pair -> indices of words holding it
    for idx, (symbols, f) in enumerate(zip(words, freqs, strict=True)):
        for p in _pairs(symbols):
            pair_counts[p] += f
            where[p].add(idx)
    heap = [(-c, p) for p, c in pair_counts.items()]
    heapq.heapify(heap)

    merges: list[Pair] = []
    while len(merges) < n_merges and heap:
        neg, best = heapq.heappop(heap)
        if pair_counts.get(best, 0) != -neg:  # stale entry: the count changed since
            continue
        if -neg < 1:
            break
        merges.append(best)
        merged = best[0] + best[1]
        touched: set[Pair] = set()
        for idx in sorted(where.pop(best, ())):
            old, f = words[idx], freqs[idx]
            new = _merge_word(old, best, merged)
            for p in _pairs(old):
                pair_counts[p] -= f
                touched.add(p)
            for p in _pairs(new):
                pair_counts[p] += f
                where[p].add(idx)
                touched.add(p)
            words[idx] = new
        pair_counts.pop(best, None)
        for p in touched:
            c = pair_counts.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            else:
                pair_counts.pop(p, None)
                where.pop(p, None)
    return merges


class BPE:
    """A trained subword tokenizer: merges + a vocabulary of pieces (the `Tokenizer` interface).

    >>> bpe = BPE.train(["low lower lowest", "new newer newest"], n_merges=10)
    >>> bpe.detokenize(bpe.tokenize("lower newest")) == "lower newest"
    True
    """

    pad_id, bos_id, eos_id, unk_id = PAD, BOS, EOS, UNK

    def __init__(
        self, merges: Iterable[Pair], vocab: Vocab, split_punctuation: bool = False
    ) -> None:
        self.merges: list[Pair] = [(a, b) for a, b in merges]
        self.vocab = vocab
        self.split_punctuation = split_punctuation
        self._rank = {p: r for r, p in enumerate(self.merges)}
        self._cache: dict[str, tuple[str, ...]] = {}

    @classmethod
    def train(cls, texts: Iterable[str], n_merges: int, split_punctuation: bool = False) -> BPE:
        """Learn `n_merges` merges from whitespace-split `texts` (pass source and target
        sentences together for a joint vocabulary); see the module docstring for
        `split_punctuation`."""
        if n_merges < 0:
            raise ConfigError(f"n_merges must be >= 0; got {n_merges}.")
        if split_punctuation:
            texts = map(split_punct, texts)
        counts = Counter(w for t in texts for w in t.split())
        return cls.from_merges(learn_merges(counts, n_merges), counts, split_punctuation)

    @classmethod
    def from_merges(
        cls, merges: Iterable[Pair], words: Iterable[str], split_punctuation: bool = False
    ) -> BPE:
        """The tokenizer of `merges` (in the order they were learned) from the training
        `words`: its vocabulary is the end-of-word marker, every character of the words alone
        and at a word's end, and one piece per merge. A prefix of a merge list learned with
        `learn_merges` is the list fewer merges would have learned, so one long learning
        gives the tokenizers of every smaller size."""
        merges = [(a, b) for a, b in merges]
        chars = sorted({c for w in words for c in w})
        pieces = [EOW] + [s for c in chars for s in (c, c + EOW)] + [a + b for a, b in merges]
        return cls(merges, Vocab(pieces), split_punctuation)

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        return f"BPE(merges={len(self.merges)}, vocab={len(self.vocab)})"

    def segment_word(self, word: str) -> tuple[str, ...]:
        """One word -> its pieces, applying merges lowest rank first (cached per word)."""
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        symbols = _spell(word)
        rank = self._rank
        while len(symbols) > 1:
            best = min(_pairs(symbols), key=lambda p: rank.get(p, len(rank)))
            if best not in rank:
                break
            symbols = _merge_word(symbols, best, best[0] + best[1])
        self._cache[word] = symbols
        return symbols

    def encode(self, text: str) -> list[str]:
        """Text -> subword pieces (strings), e.g. `["low", "er</w>"]`; "" gives []."""
        if self.split_punctuation:
            text = split_punct(text)
        return [p for w in text.split() for p in self.segment_word(w)]

    def decode(self, pieces: Iterable[str]) -> str:
        """Pieces -> text: concatenate, turn `</w>` into a space, strip the ends."""
        text = "".join(pieces).replace(EOW, " ").strip()
        return join_punct(text) if self.split_punctuation else text

    def tokenize(self, text: str) -> list[int]:
        """Text -> ids (no BOS/EOS). Unseen characters become UNK, keeping word boundaries."""
        ids: list[int] = []
        for piece in self.encode(text):
            i = self.vocab.token_to_id(piece)
            if i != UNK:
                ids.append(i)
            elif piece.endswith(EOW) and len(piece) > len(EOW):  # unseen final character
                ids.extend(
                    (self.vocab.token_to_id(piece[: -len(EOW)]), self.vocab.token_to_id(EOW))
                )
            else:
                ids.append(UNK)
        return ids

    def detokenize(self, ids: Iterable[int]) -> str:
        """Ids -> text, stopping at EOS; UNK shows as `<unk>`."""
        return self.decode(self.vocab.decode(ids))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (merges and piece vocabulary) for checkpoints."""
        return {
            "type": "bpe",
            "merges": [[a, b] for a, b in self.merges],
            "vocab": self.vocab.to_dict(),
            "split_punctuation": self.split_punctuation,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BPE:
        """Inverse of `to_dict`."""
        if d.get("type") != "bpe" or "merges" not in d or "vocab" not in d:
            raise ConfigError(
                "BPE.from_dict expects {'type': 'bpe', 'merges': [...], 'vocab': {...}} as "
                f"written by BPE.to_dict(); got keys {sorted(d)}."
            )
        merges = [tuple(m) for m in d["merges"]]
        return cls(merges, Vocab.from_dict(d["vocab"]), bool(d.get("split_punctuation", False)))
