"""Tasks: ready-made datasets of (source ids, target ids) pairs, from a name and a seed.

    task = make_task("copy", seed=0)       # or reverse, sort, translate, translate-en-es, lm
    task.splits["train"][0]                          # ([5, 9, 7], [5, 9, 7]) - no BOS/EOS yet
    task.vocab.tokenize("3 1 4")                     # text -> ids (a Vocab or a BPE)
    task.detokenize(ids)                             # ids -> text, e.g. for BLEU
    task.references("test")                          # the reference texts of a split

Source and target share one vocabulary (so the model may tie its embeddings). Ids exclude
BOS and EOS; `minitransformer.data.batching` adds them. Everything is a function of the
task name, the seed and the knobs, so `make_task(**task.knobs)` rebuilds the same task.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from minitransformer.data.bpe import BPE
from minitransformer.data.toylang import make_translation_pairs
from minitransformer.data.vocab import CharVocab, Tokenizer, Vocab
from minitransformer.errors import ConfigError

Pair = tuple[list[int], list[int]]
SPLITS = ("train", "valid", "test")
BIBLE_FILE = "bible_en_es.tsv.gz"


@dataclass
class Task:
    """A dataset ready for training and evaluation.

    Attributes:
        name: the registry name ("copy", "translate-en-es", ...).
        vocab: the shared source/target tokenizer (`Vocab` or `BPE`; both follow the
            `Tokenizer` interface: tokenize, detokenize, to_dict, len).
        splits: "train", "valid", "test" -> list of (source ids, target ids), without
            BOS/EOS.
        max_len: positions the model needs: the longest source, or target + 1 (the decoder
            sees BOS + target and predicts target + EOS), over all splits.
        texts: per split, the (source text, reference text) pairs the ids came from.
        knobs: the arguments that rebuild this task with `make_task(**knobs)`.
    """

    name: str
    vocab: Tokenizer
    splits: dict[str, list[Pair]]
    max_len: int
    texts: dict[str, list[tuple[str, str]]] = field(repr=False)
    knobs: dict[str, Any] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def detokenize(self, ids: Iterable[int]) -> str:
        """Ids -> text (stops at EOS, skips PAD/BOS)."""
        return self.vocab.detokenize(ids)

    def sources(self, split: str) -> list[str]:
        """Source texts of a split, in order."""
        return [s for s, _ in self._texts(split)]

    def references(self, split: str) -> list[str]:
        """Reference (target) texts of a split, in order: what BLEU compares against."""
        return [t for _, t in self._texts(split)]

    def _texts(self, split: str) -> list[tuple[str, str]]:
        if split not in self.texts:
            raise ConfigError(f"unknown split {split!r}; choose one of {list(self.texts)}.")
        return self.texts[split]

    def summary(self) -> str:
        """One line: name, vocabulary size, split sizes, max_len."""
        sizes = ", ".join(f"{k} {len(v):,}" for k, v in self.splits.items())
        return f"{self.name}: vocab {len(self.vocab):,}, {sizes}, max_len {self.max_len}"


def _make(name: str, vocab: Tokenizer, texts: dict, knobs: dict) -> Task:
    splits = {k: [(vocab.tokenize(s), vocab.tokenize(t)) for s, t in v] for k, v in texts.items()}
    max_len = max((max(len(s), len(t) + 1) for v in splits.values() for s, t in v), default=1)
    return Task(name, vocab, splits, max_len, texts, {"name": name, **knobs})


# --- copy, reverse, sort ------------------------------------------------------------------

_TRANSFORMS: dict[str, Callable[[list[int]], list[int]]] = {
    "copy": lambda s: list(s),
    "reverse": lambda s: s[::-1],
    "sort": sorted,
}


def _random_sequences(rng, n: int, n_symbols: int, min_len: int, max_len: int) -> list[list[int]]:
    lengths = rng.integers(min_len, max_len + 1, size=n)
    rows = rng.integers(0, n_symbols, size=(n, max_len)).tolist()
    return [row[:length] for row, length in zip(rows, lengths.tolist(), strict=True)]


def _sequence_task(
    name: str,
    seed: int = 0,
    n_symbols: int = 20,
    min_len: int = 1,
    max_len: int = 10,
    n_train: int = 20_000,
    n_valid: int = 1_000,
    n_test: int = 1_000,
) -> Task:
    """Random symbol sequences; the target is the source copied, reversed or sorted.

    Symbols are the words "0".."n_symbols-1" (ids 4.. in that order, so sorting ids sorts
    symbols). Valid and test sequences never occur in train nor in each other; short ones
    are rarer there, since most short sequences already appear in train.
    """
    if not 1 <= min_len <= max_len or n_symbols < 2:
        raise ConfigError(
            f"{name}: need n_symbols >= 2 and 1 <= min_len <= max_len; got n_symbols="
            f"{n_symbols}, min_len={min_len}, max_len={max_len}."
        )
    rng = np.random.default_rng(seed)
    train = _random_sequences(rng, n_train, n_symbols, min_len, max_len)
    seen = {tuple(s) for s in train}
    held: list[list[int]] = []
    for _ in range(50):
        need = n_valid + n_test - len(held)
        if need == 0:
            break
        for s in _random_sequences(rng, 2 * need, n_symbols, min_len, max_len):
            if tuple(s) not in seen and len(held) < n_valid + n_test:
                seen.add(tuple(s))
                held.append(s)
    else:
        raise ConfigError(
            f"{name}: only {len(held)} of {n_valid + n_test} held-out sequences are unseen in "
            "train; the sequence space is too small - raise n_symbols or max_len."
        )
    symbols = [str(i) for i in range(n_symbols)]
    vocab = Vocab(symbols)
    f = _TRANSFORMS[name]

    def text(seq: list[int]) -> str:
        return " ".join(symbols[i] for i in seq)

    parts = {"train": train, "valid": held[:n_valid], "test": held[n_valid:]}
    texts = {k: [(text(s), text(f(s))) for s in v] for k, v in parts.items()}
    knobs = dict(seed=seed, n_symbols=n_symbols, min_len=min_len, max_len=max_len,
                 n_train=n_train, n_valid=n_valid, n_test=n_test)  # fmt: skip
    return _make(name, vocab, texts, knobs)


def copy_task(seed: int = 0, **knobs: Any) -> Task:
    """Target = source. Knobs: n_symbols, min_len, max_len, n_train, n_valid, n_test."""
    return _sequence_task("copy", seed, **knobs)


def reverse_task(seed: int = 0, **knobs: Any) -> Task:
    """Target = source reversed. Same knobs as `copy_task`."""
    return _sequence_task("reverse", seed, **knobs)


def sort_task(seed: int = 0, **knobs: Any) -> Task:
    """Target = source sorted ascending. Same knobs as `copy_task`."""
    return _sequence_task("sort", seed, **knobs)


# --- the toy language pair ----------------------------------------------------------------


def translate_task(
    seed: int = 0,
    n_train: int = 50_000,
    n_valid: int = 1_000,
    n_test: int = 1_000,
    lang_seed: int = 0,
    min_words: int = 3,
    max_words: int = 15,
) -> Task:
    """The synthetic language pair of `minitransformer.data.toylang`, word-level vocabulary
    built from the training split (both sides, one vocabulary)."""
    texts = make_translation_pairs(n_train, n_valid, n_test, seed, lang_seed, min_words, max_words)
    vocab = Vocab.from_tokens(w for s, t in texts["train"] for w in (*s.split(), *t.split()))
    knobs = dict(seed=seed, n_train=n_train, n_valid=n_valid, n_test=n_test,
                 lang_seed=lang_seed, min_words=min_words, max_words=max_words)  # fmt: skip
    return _make("translate", vocab, texts, knobs)


# --- English -> Spanish Bible verses ------------------------------------------------------


def normalize(text: str, lowercase: bool = True) -> str:
    """Light normalisation: lowercase (the first word of a verse is often in capitals, "EN el
    principio"), single spaces. Punctuation is split off later, inside the BPE."""
    return " ".join((text.lower() if lowercase else text).split())


def load_bible_pairs() -> list[tuple[str, str]]:
    """The shipped English-Spanish verse pairs (<= 20 words per side), as raw text."""
    from minitransformer.data.bible import read_tsv_gz  # lazy: keeps `python -m ...bible` clean

    ref = resources.files("minitransformer.data").joinpath("files", BIBLE_FILE)
    with resources.as_file(ref) as path:
        return read_tsv_gz(path)


def translate_en_es_task(
    seed: int = 0,
    max_words: int = 20,
    n_valid: int = 500,
    n_test: int = 500,
    n_merges: int = 3_000,
    n_train: int | None = None,
    lowercase: bool = True,
) -> Task:
    """English -> Spanish Bible verses (KJV -> Reina-Valera 1909, public domain).

    Pairs with at most `max_words` words per side (20 at most: the shipped file holds no
    longer ones), normalised by `normalize`. Valid and test pairs are drawn by `seed` among
    verses whose English text occurs only once, so no test source is also a training source.
    A joint BPE with `n_merges` merges is learned on the training split (both sides), with
    punctuation split off as separate words (and glued back by `detokenize`, so texts and
    BLEU references keep their natural spacing).
    `n_train` caps the training split (default: all remaining pairs, about 10,700).
    """
    if not 1 <= max_words <= 20:
        raise ConfigError(f"max_words must be within 1..20 (the shipped file); got {max_words}.")
    pairs = [
        (normalize(e, lowercase), normalize(s, lowercase))
        for e, s in load_bible_pairs()
        if len(e.split()) <= max_words and len(s.split()) <= max_words
    ]
    train, held = _held_out(pairs, [e for e, _ in pairs], n_valid + n_test, seed)
    if n_train is not None:
        train = train[:n_train]
    texts = {"train": train, "valid": held[:n_valid], "test": held[n_valid:]}
    bpe = BPE.train((x for pair in train for x in pair), n_merges, split_punctuation=True)
    knobs = dict(seed=seed, max_words=max_words, n_valid=n_valid, n_test=n_test,
                 n_merges=n_merges, n_train=n_train, lowercase=lowercase)  # fmt: skip
    return _make("translate-en-es", bpe, texts, knobs)


def _held_out(items: list, keys: list[str], n_held: int, seed: int) -> tuple[list, list]:
    """(train, held): ``n_held`` items drawn by ``seed`` among those whose key occurs once
    (so no held-out text is also a training text), the rest for training."""
    count: dict[str, int] = {}
    for key in keys:
        count[key] = count.get(key, 0) + 1
    held, train = [], []
    for i in np.random.default_rng(seed).permutation(len(items)).tolist():
        if len(held) < n_held and count[keys[i]] == 1:
            held.append(items[i])
        else:
            train.append(items[i])
    if len(held) < n_held:
        raise ConfigError(
            f"only {len(held)} unique verses for {n_held} valid+test examples; "
            "lower n_valid/n_test or raise max_words."
        )
    return train, held


# --- language modelling: the English verses -----------------------------------------------

LM_TOKENIZERS = ("bpe", "char")  # lm_task's tokenizer knob: subwords or characters


def lm_task(
    seed: int = 0,
    tokenizer: str = "bpe",
    max_words: int = 20,
    n_valid: int = 500,
    n_test: int = 500,
    n_merges: int = 2_000,
    n_train: int | None = None,
    lowercase: bool = False,
) -> Task:
    """The English side of the shipped verses (KJV), one verse a sequence, for the
    decoder-only language model (``nn.TransformerLM``): each example is ([], verse ids), so
    the model reads BOS + verse and predicts verse + EOS.

    ``tokenizer``: "bpe" (subwords, ``n_merges`` merges learned on the training verses,
    punctuation split off) or "char" (one token per character, spaces included). Valid and
    test verses are drawn by ``seed`` among verses that occur once (none is also a training
    verse); case is kept unless ``lowercase``. ``n_train`` caps the training split.
    """
    if tokenizer not in LM_TOKENIZERS:
        raise ConfigError(f"lm: tokenizer must be 'bpe' or 'char', got {tokenizer!r}.")
    if not 1 <= max_words <= 20:
        raise ConfigError(f"max_words must be within 1..20 (the shipped file); got {max_words}.")
    verses = [normalize(e, lowercase) for e, _ in load_bible_pairs() if len(e.split()) <= max_words]
    train, held = _held_out(verses, verses, n_valid + n_test, seed)
    if n_train is not None:
        train = train[:n_train]
    texts = {
        "train": [("", v) for v in train],
        "valid": [("", v) for v in held[:n_valid]],
        "test": [("", v) for v in held[n_valid:]],
    }
    if tokenizer == "char":
        vocab: Tokenizer = CharVocab.from_texts(train)
    else:
        vocab = BPE.train(train, n_merges, split_punctuation=True)
    knobs = dict(seed=seed, tokenizer=tokenizer, max_words=max_words, n_valid=n_valid,
                 n_test=n_test, n_merges=n_merges, n_train=n_train,
                 lowercase=lowercase)  # fmt: skip
    return _make("lm", vocab, texts, knobs)


# --- the registry -------------------------------------------------------------------------

TASKS: dict[str, Callable[..., Task]] = {
    "copy": copy_task,
    "reverse": reverse_task,
    "sort": sort_task,
    "translate": translate_task,
    "translate-en-es": translate_en_es_task,
    "lm": lm_task,
}


def _knob_names(name: str) -> list[str]:
    fn = _sequence_task if name in _TRANSFORMS else TASKS[name]
    return [p for p in inspect.signature(fn).parameters if p not in ("name", "seed")]


def make_task(name: str, seed: int = 0, **knobs: Any) -> Task:
    """Build a task by name: copy, reverse, sort, translate, translate-en-es, lm."""
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; valid names: {', '.join(TASKS)}.")
    unknown = sorted(set(knobs) - set(_knob_names(name)))
    if unknown:
        raise ConfigError(
            f"task {name!r} has no knob(s) {unknown}; valid knobs: {_knob_names(name)}."
        )
    return TASKS[name](seed=seed, **knobs)


def tokenizer_from_dict(d: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer saved with `to_dict()` (a `Vocab` or a `BPE`), e.g. from a checkpoint."""
    kind = d.get("type")
    if kind == "vocab":
        return Vocab.from_dict(d)
    if kind == "bpe":
        return BPE.from_dict(d)
    if kind == "chars":
        return CharVocab.from_dict(d)
    raise ConfigError(f"unknown tokenizer type {kind!r}; expected 'vocab', 'chars' or 'bpe'.")
