"""Lesson 00 (tokens from scratch: byte-pair encoding): its exercise checks accept other valid
forms of a right answer and fail wrong answers with a hint; the solutions agree with the
library's BPE; the notebook ships placeholders and gives no exercise away before its cell
(the solutions and placeholders: CASES_00 in test_lesson_exercises.py; garbage answers:
test_lesson_checks_robust.py).

- 00.1 (one merge step): pairs counted once per word (counts ignored), ties broken by the
  first pair met or the largest, only the first occurrence merged, a run merged right to left,
  the merged symbol kept as a tuple, counts lost, the caller's vocabulary changed in place, the
  pair left unmerged, and a call into the library fail, each with its hint; a list for the
  pair, list keys, a Counter and a loop over a sorted vocabulary pass;
- 00.2 (encoding with a merge list): the merges reversed, the end-of-word marker left out or
  kept as a symbol of its own, only the first occurrence merged, no merge applied, a string
  instead of a list, the caller's merge list consumed, and the library's encoder fail; a
  tuple of pieces and the library's lowest-rank-first order written by hand pass.
"""

from __future__ import annotations

import importlib
from collections import Counter

import pytest
from lesson_notebooks import LESSONS, assert_ships_placeholders, checks, code_before
from lesson_notebooks import hint_of as _fails

from minitransformer.data.bpe import BPE, learn_merges

NOTEBOOK = LESSONS / "00_tokens_from_scratch.ipynb"
s00 = importlib.import_module("solutions.lesson00")
c00 = importlib.import_module("checks.lesson00")


def _merge(symbols, pair, first_only=False):
    return c00._merge_word(tuple(symbols), tuple(pair), first_only=first_only)


_counts, _best = c00._pair_counts, c00._best  # the checks' own pair counts and choice


def _with(pick, merge=_merge):
    """A merge_step answer choosing its pair with ``pick(counts)`` and merging with ``merge``."""

    def step(vocab):
        pair = pick(_counts(vocab))
        return pair, {merge(s, pair): n for s, n in vocab.items()}

    return step


def _first_best(counts):  # max() keeps the first of the tied pairs it meets
    return max(counts, key=counts.get)


def _largest_best(counts):
    return max(counts, key=lambda p: (counts[p], p))


def _unweighted(vocab):
    pair = _best(_counts(vocab, weighted=False))
    return pair, {_merge(s, pair): n for s, n in vocab.items()}


def _in_place(vocab):
    pair, new = s00.merge_step(vocab)
    vocab.clear()
    vocab.update(new)
    return pair, vocab


def _lost_counts(vocab):
    pair, new = s00.merge_step(vocab)
    return pair, dict.fromkeys(new, 1)


def _as_tuple_symbol(vocab):
    pair, new = s00.merge_step(vocab)
    joined = pair[0] + pair[1]
    return pair, {tuple(pair if s == joined else s for s in k): n for k, n in new.items()}


def _library_step(vocab):
    words = {"".join(s).replace("</w>", ""): n for s, n in vocab.items()}
    learn_merges(words, 1)
    return s00.merge_step(vocab)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (_unweighted, "as many times as its word occurs"),
        (_with(_first_best), "tied for the most frequent"),
        (_with(_largest_best), "tied for the most frequent"),
        (_with(_best, lambda s, p: _merge(s, p, first_only=True)), "every occurrence"),
        (_with(_best, c00._merge_right_to_left), "left to right"),
        (_with(_best, lambda s, p: tuple(s)), "still has the pair apart"),
        (_lost_counts, "keeps its count"),
        (_as_tuple_symbol, "tuple of its symbols"),
        (_in_place, "changed its input vocab"),
        (_library_step, "calls the library"),
        (lambda v: s00.merge_step(v)[0], "return (pair, new_vocab)"),
        (lambda v: ("".join(s00.merge_step(v)[0]), s00.merge_step(v)[1]), "tuple of two"),
    ],
    ids=["unweighted", "tie-first", "tie-largest", "first-only", "right-to-left", "unmerged",
         "counts-lost", "tuple-symbol", "in-place", "library", "pair-only", "pair-string"],
)  # fmt: skip
def test_00_1_wrong_answers_get_their_hint(answer, hint):
    assert hint in _fails(checks.check_00_1, answer)


def _list_forms(vocab):
    pair, new = s00.merge_step(vocab)
    return list(pair), Counter(new)


def _sorted_loop(vocab):
    # a different way to the same answer: pairs counted per word, the best by sorting
    counts = {}
    for symbols in sorted(vocab):
        for i in range(len(symbols) - 1):
            counts[symbols[i], symbols[i + 1]] = counts.get((symbols[i], symbols[i + 1]), 0)
            counts[symbols[i], symbols[i + 1]] += vocab[symbols]
    best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    return best, {_merge(s, best): n for s, n in vocab.items()}


@pytest.mark.parametrize("answer", [_list_forms, _sorted_loop], ids=["lists", "sorted-loop"])
def test_00_1_other_valid_forms_pass(answer):
    assert checks.check_00_1(answer) == checks.CORRECT


def test_00_1_solution_learns_the_librarys_merges():
    words = Counter("the lower the newest widest lowest the and the land and".split())
    vocab, merges = {c00._spell(w): n for w, n in words.items()}, []
    for _ in range(12):
        pair, vocab = s00.merge_step(vocab)
        merges.append(pair)
    assert merges == learn_merges(words, 12)


def _reversed(text, merges):
    return s00.encode(text, merges[::-1])


def _no_marker(text, merges):
    return [p.replace("</w>", "") for p in s00.encode(text, merges)]


def _marker_apart(text, merges):
    return c00._encode(text, merges, spell=lambda w: (*w, "</w>"))


def _first_only(text, merges):
    out = []
    for word in text.split():
        symbols = c00._spell(word)
        for pair in merges:
            symbols = _merge(symbols, pair, first_only=True)
        out.extend(symbols)
    return out


def _consumes(text, merges):
    out = s00.encode(text, merges)
    merges.clear()
    return out


def _library_encode(text, merges):
    return BPE(merges, vocab=None).encode(text)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (_reversed, "in the order they were learned"),
        (_no_marker, "carries '</w>'"),
        (_marker_apart, "not a symbol"),
        (_first_only, "not only the first"),
        (lambda t, m: [p for w in t.split() for p in c00._spell(w)], "no merge was applied"),
        (lambda t, m: " ".join(s00.encode(t, m)), "return a list of pieces"),
        (_consumes, "changed its input merges"),
        (_library_encode, "calls the library"),
    ],
    ids=["reversed", "no-marker", "marker-apart", "first-only", "unmerged", "string",
         "consumes", "library"],
)  # fmt: skip
def test_00_2_wrong_answers_get_their_hint(answer, hint):
    assert hint in _fails(checks.check_00_2, answer)


def _lowest_rank_first(text, merges):
    # the library's order, written by hand: merge the present pair learned earliest, repeat
    rank = {tuple(p): r for r, p in enumerate(merges)}
    out = []
    for word in text.split():
        symbols = list(c00._spell(word))
        while len(symbols) > 1:
            pairs = [(rank.get(p, len(rank)), p) for p in zip(symbols, symbols[1:], strict=False)]
            r, best = min(pairs)
            if r == len(rank):
                break
            symbols = list(_merge(symbols, best))
        out.extend(symbols)
    return tuple(out)


def test_00_2_other_valid_forms_pass():
    assert checks.check_00_2(_lowest_rank_first) == checks.CORRECT


def test_00_2_solution_agrees_with_the_library():
    texts = ["and god said let there be light", "the lowest newest widest", "zebra and the"]
    bpe = BPE.train(texts * 3, 25)
    for text in [*texts, "light there be", "quartz"]:
        assert s00.encode(text, bpe.merges) == bpe.encode(text)


# ------------------------------------------------------------------ the notebook
def test_ships_placeholders_and_calls_each_check_once():
    assert_ships_placeholders(NOTEBOOK, 0, ["00_1", "00_2"], ["merge_step", "encode"])


def test_no_cell_gives_an_exercise_away_before_it():
    """No merge of a pair before exercise 1 (counting pairs is shown; choosing the best and
    rebuilding the words is the exercise); no encoder of a text before exercise 2 (the
    library's encoder is used only after it)."""
    before_1 = code_before(NOTEBOOK, "merge_step")
    assert "def merge_pair(" not in before_1 and "learn_merges(" not in before_1
    assert "min(counts" not in before_1 and ".encode(" not in before_1
    before_2 = code_before(NOTEBOOK, "encode")
    assert ".encode(" not in before_2 and ".tokenize(" not in before_2
    assert "segment_word" not in before_2 and "BPE.train(" not in before_2
