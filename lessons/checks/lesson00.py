"""Lesson 00 (tokens from scratch: byte-pair encoding): the checks of its exercises.

- ``check_00_1``: Exercise 1 (one merge step)
- ``check_00_2``: Exercise 2 (encoding with a merge list)

Words are spelled as tuples of symbols, the last one carrying the end-of-word marker
``</w>``: "low" is ``("l", "o", "w</w>")``. A vocabulary maps each spelled word to its count.

Exercise 1's answer ``merge_step(vocab)`` returns ``(pair, new_vocab)``: the most frequent
adjacent pair, each pair counted once per occurrence in a word times that word's count (ties go
to the smallest pair in Python's order, as the library's ``learn_merges`` does), and the
vocabulary with every occurrence of that pair merged, left to right, into one symbol (the two
strings joined). The pair may be a tuple or a list of two strings; the vocabulary any mapping
from tuples (or lists) of symbols to counts.

Exercise 2's answer ``encode(text, merges)`` returns the pieces of ``text``: split on
whitespace, each word spelled as above, the merges applied in the order they were learned
(an earlier merge first), the words' pieces one after another. A list or tuple of strings.

Both must be Python of the learner's own (a call into the library fails with a hint) and must
leave the caller's vocabulary and merge list as they were (``_exercise``'s watch on the inputs,
``_inputs.py``, fails an answer that changed them). Each usual slip gets its own hint.
See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from ._shared import _exercise, _without_library

EOW = "</w>"
Pair = tuple[str, str]
Vocab = dict[tuple[str, ...], int]


def _spell(word: str) -> tuple[str, ...]:
    return (*word[:-1], word[-1] + EOW)


def _pair_counts(vocab: Mapping[tuple[str, ...], int], weighted: bool = True) -> Counter:
    counts: Counter = Counter()
    for symbols, n in vocab.items():
        for pair in zip(symbols, symbols[1:], strict=False):
            counts[pair] += n if weighted else 1
    return counts


def _best(counts: Counter) -> Pair:
    return min(counts, key=lambda p: (-counts[p], p))


def _merge_word(symbols: tuple[str, ...], pair: Pair, first_only: bool = False) -> tuple:
    out, i = [], 0
    merged_once = False
    while i < len(symbols):
        here = tuple(symbols[i : i + 2]) == pair
        if here and not (first_only and merged_once):
            out.append(pair[0] + pair[1])
            i, merged_once = i + 2, True
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def _merge_right_to_left(symbols: tuple[str, ...], pair: Pair) -> tuple:
    out, i = [], len(symbols) - 1
    while i >= 0:
        if i >= 1 and (symbols[i - 1], symbols[i]) == pair:
            out.append(pair[0] + pair[1])
            i -= 2
        else:
            out.append(symbols[i])
            i -= 1
    return tuple(reversed(out))


def _step(vocab: Vocab, **how: Any) -> tuple[Pair, Vocab]:
    pair = _best(_pair_counts(vocab))
    return pair, {_merge_word(s, pair, **how): n for s, n in vocab.items()}


# small vocabularies, each showing one trap: counts that outweigh words, a run "a a a",
# ties, the end-of-word marker, a pair that occurs twice in one word
_VOCABS: list[Vocab] = [
    {_spell("low"): 5, _spell("lower"): 2, _spell("newest"): 6, _spell("widest"): 3},
    {_spell("aaab"): 1, _spell("aaa"): 3, _spell("ba"): 1},
    {_spell("cd"): 2, _spell("ab"): 2, _spell("ef"): 1},  # a tie: ("a", "b</w>") < ("c", ...)
    {_spell("xy"): 1, _spell("zxy"): 1, _spell("yz"): 7, _spell("yzyz"): 1},
    {_spell("ababa"): 3, _spell("ba"): 1},  # the pair twice in one word
    {("th", "e</w>"): 10, ("th", "a", "t</w>"): 4, ("o", "th", "e", "r</w>"): 3},
]


def _as_vocab(got: Any, where: str) -> Vocab:
    assert isinstance(got, Mapping), (
        f"{where}: the new vocabulary is a {type(got).__name__}; return a dict from each "
        "word's symbols (a tuple of strings) to its count"
    )
    vocab: Vocab = {}
    for symbols, n in got.items():
        ok = isinstance(symbols, tuple | list) and all(isinstance(s, str) for s in symbols)
        assert ok, (
            f"{where}: a key of the new vocabulary is {symbols!r:.60}; keep each word as a "
            "tuple of its symbols (strings), as in the vocabulary you were given"
        )
        vocab[tuple(symbols)] = n
    return vocab


def _as_pair(got: Any, where: str) -> Pair:
    ok = isinstance(got, tuple | list) and len(got) == 2 and all(isinstance(s, str) for s in got)
    assert ok, f"{where}: the pair is {got!r:.60}; return it as a tuple of two symbols (strings)"
    return (got[0], got[1])


def _pair_hint(vocab: Vocab, pair: Pair) -> str:
    weighted, plain = _pair_counts(vocab), _pair_counts(vocab, weighted=False)
    if pair not in weighted:
        return "that pair is not two adjacent symbols of any word: count pairs inside each word"
    if weighted[pair] == max(weighted.values()):
        return (
            "several pairs are tied for the most frequent: take the smallest in Python's order "
            "(min over the tied pairs), so that the merges depend on the counts alone"
        )
    if pair == _best(plain):
        return "each occurrence of a pair counts as many times as its word occurs (its count)"
    return "count every adjacent pair of every word, times the word's count, and take the largest"


def _vocab_hint(vocab: Vocab, pair: Pair, mine: Vocab) -> str:
    if sum(mine.values()) != sum(vocab.values()) or len(mine) != len(vocab):
        return "every word keeps its count: the merge changes how words are spelled, not how often"
    if sorted("".join(s) for s in mine) != sorted("".join(s) for s in vocab):
        return "a merge joins two symbols into one string ('a' + 'b' = 'ab'): no letter is lost"
    if mine == {_merge_word(s, pair, first_only=True): n for s, n in vocab.items()}:
        return "merge every occurrence of the pair in a word, not only the first"
    if mine == {_merge_right_to_left(s, pair): n for s, n in vocab.items()}:
        return "merge from left to right: in a a a, the first two a's merge and the third stays"
    if mine == vocab:
        return "the new vocabulary still has the pair apart: merge it in every word that has it"
    return "go through each word's symbols from left to right, joining the pair where it occurs"


@_exercise("Exercise 1 (one merge step)")
def check_00_1(merge_step: Callable) -> None:
    """Against the step written out, on vocabularies with weighted counts, runs, ties and
    end-of-word symbols; the vocabulary passed in must come back unchanged."""
    for k, vocab in enumerate(_VOCABS):
        where = f"merge_step(vocabulary {k + 1})"
        got = _without_library(
            merge_step, dict(vocab), where=where,
            instead="count the pairs with a loop and a dict, then rebuild each word",
        )  # fmt: skip
        assert isinstance(got, tuple | list) and len(got) == 2, (
            f"{where}: you return {got!r:.60}; return (pair, new_vocab)"
        )
        assert not all(isinstance(x, str) for x in got), (
            f"{where}: you return {got!r:.60}, a pair alone; return (pair, new_vocab)"
        )
        pair, mine = _as_pair(got[0], where), _as_vocab(got[1], where)
        want_pair, want = _step(vocab)
        assert pair == want_pair, (
            f"{where}: you merge {pair}, the most frequent pair is {want_pair}; hint: "
            f"{_pair_hint(vocab, pair)}"
        )
        assert mine == want, (
            f"{where}: the merged vocabulary is not right (for {pair}); hint: "
            f"{_vocab_hint(vocab, pair, mine)}"
        )


def _learn(texts: list[str], n_merges: int) -> list[Pair]:
    vocab: Vocab = dict(Counter(_spell(w) for t in texts for w in t.split()))
    merges = []
    for _ in range(n_merges):
        if all(len(symbols) == 1 for symbols in vocab):
            break  # no pair left to merge
        pair, vocab = _step(vocab)
        merges.append(pair)
    return merges


def _encode(text: str, merges: list[Pair], spell: Callable = _spell) -> list[str]:
    pieces: list[str] = []
    for word in text.split():
        symbols = spell(word)
        for pair in merges:
            symbols = _merge_word(symbols, pair)
        pieces.extend(symbols)
    return pieces


_CORPUS = [
    "in the beginning god created the heaven and the earth",
    "and the earth was without form and void and darkness was upon the face of the deep",
    "and god said let there be light and there was light",
    "the lower the newest the widest the lowest",
]
# (text, merges): learned merges; a text with words never seen and a character never seen;
# an order that matters (the earlier merge must win); repeated spaces; no text at all
_CASES: list[tuple[str, list[Pair]]] = [
    ("and the earth was light", _learn(_CORPUS, 30)),
    ("the newest heavens lowered upon the deep", _learn(_CORPUS, 60)),
    ("zebra quartz and the", _learn(_CORPUS, 45)),
    ("abc cab", [("b", "c</w>"), ("a", "b"), ("c", "a"), ("ca", "b</w>")]),
    ("  aaaa   aaa ", [("a", "a"), ("aa", "a</w>"), ("a", "a</w>")]),
    ("the the the", _learn(_CORPUS, 10)),
    ("", _learn(_CORPUS, 10)),
    ("x", [("x", "x")]),
    ("ababa baba", [("a", "b"), ("ab", "ab"), ("b", "a")]),  # a pair twice in one word
]


def _encode_hint(text: str, merges: list[Pair], mine: list[str]) -> str:
    def apart(word: str) -> tuple[str, ...]:
        return (*word, EOW)

    if "".join(mine).replace(EOW, " ").split() != text.split():
        if "".join(mine) == "".join(text.split()):
            return "the last symbol of each word carries '</w>', so that decoding finds the spaces"
        return "the pieces, joined with '</w>' read as a space, must give the text back"
    if mine == _encode(text, merges, spell=apart):
        return "'</w>' is part of the word's last symbol ('w</w>'), as in training, not a symbol"
    if mine == _encode(text, merges[::-1]):
        return "apply the merges in the order they were learned: an earlier merge goes first"
    spelled = [p for w in text.split() for p in _spell(w)]
    if mine == spelled:
        return "no merge was applied: every merge of the list whose pair occurs joins it"
    once = []
    for word in text.split():
        symbols = _spell(word)
        for pair in merges:
            symbols = _merge_word(symbols, pair, first_only=True)
        once.extend(symbols)
    if mine == once:
        return "a merge joins every occurrence of its pair in the word, not only the first"
    return "spell each word as its characters ('</w>' on the last), then apply every merge in order"


@_exercise("Exercise 2 (encoding with a merge list)")
def check_00_2(encode: Callable) -> None:
    """Against the merges applied in order to each word, on learned and hand-made merge lists;
    the merge list passed in must come back unchanged."""
    for text, merges in _CASES:
        where = f"encode({text!r}, <{len(merges)} merges>)"
        got = _without_library(
            encode, text, list(merges), where=where,
            instead="spell each word, then loop over the merges joining each pair",
        )  # fmt: skip
        ok = isinstance(got, list | tuple) and all(isinstance(p, str) for p in got)
        assert ok, f"{where}: you return {got!r:.60}; return a list of pieces (strings)"
        want = _encode(text, merges)
        assert list(got) == want, (
            f"{where}: you give {list(got)!r:.120}, the pieces are {want!r:.120}; hint: "
            f"{_encode_hint(text, merges, list(got))}"
        )
