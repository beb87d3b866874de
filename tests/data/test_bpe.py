import json
import time
from collections import Counter

import numpy as np
import pytest

from minitransformer.data.bpe import BPE, EOW, join_punct, learn_merges, split_punct
from minitransformer.data.vocab import UNK

TEXTS = [
    "the lowest low lower newer newest widest",
    "el más bajo y el más nuevo",
    "low lower lowest new newer newest wide wider widest",
]


def test_merges_follow_the_paper_example():
    # The toy vocabulary of Sennrich et al. (2016), figure 1. The paper's first three merges
    # are "e s", "es t", "est </w>"; with the marker attached to the last character (as in
    # their released code) the latter two are one merge. Then "l o" (count 7), then a tie
    # at 6 between "e w", "n e" and "w est</w>", broken toward the smallest pair.
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    merges = learn_merges(counts, 4)
    assert merges == [("e", "s"), ("es", "t</w>"), ("l", "o"), ("e", "w")]


def test_round_trip_on_unseen_text():
    bpe = BPE.train(TEXTS, n_merges=30)
    assert len(bpe.merges) == 30
    for text in ["slowest wider newer", "el nuevo", "owl wow"]:
        assert bpe.detokenize(bpe.tokenize(text)) == text
    pieces = bpe.encode("lowest")
    assert "".join(pieces) == "lowest" + EOW and len(pieces) < len("lowest")


def test_unknown_characters_and_empty_text():
    bpe = BPE.train(TEXTS, n_merges=10)
    ids = bpe.tokenize("low Qx")
    assert UNK in ids
    assert bpe.detokenize(ids).split()[0] == "low"  # the word boundary survives
    assert bpe.detokenize(bpe.tokenize("lowQ low")) == "low<unk> low"
    assert bpe.tokenize("") == [] and bpe.detokenize([]) == "" and bpe.encode("  ") == []


def test_split_punctuation():
    texts = ["dijo: ¿qué? (y luz.)", "said, let [there] be light!"]
    bpe = BPE.train(texts, 40, split_punctuation=True)
    assert ":</w>" in bpe.vocab and "¿</w>" in bpe.vocab
    assert bpe.encode("luz.") == bpe.encode("luz .")
    for text in ["dijo: ¿qué luz?", "let (there) be: light, [said]!"]:
        assert bpe.detokenize(bpe.tokenize(text)) == text
    again = BPE.from_dict(json.loads(json.dumps(bpe.to_dict())))
    assert again.detokenize(again.tokenize("¿luz?")) == "¿luz?"
    assert join_punct(split_punct("a (b), c: ¡d!")) == "a (b), c: ¡d!"


def test_dict_round_trip():
    bpe = BPE.train(TEXTS, n_merges=20)
    again = BPE.from_dict(json.loads(json.dumps(bpe.to_dict())))
    assert again.merges == bpe.merges and again.vocab == bpe.vocab
    assert again.tokenize("newest lowest") == bpe.tokenize("newest lowest")


def test_training_is_deterministic_and_quick():
    words = [f"w{i % 97}x{i % 13}y{i % 7}" for i in range(3000)]
    texts = [" ".join(words[i : i + 10]) for i in range(0, 3000, 10)]
    start = time.perf_counter()
    a = BPE.train(texts, n_merges=400)
    assert time.perf_counter() - start < 5
    assert a.merges == BPE.train(list(reversed(texts)), n_merges=400).merges


def naive_merges(word_counts, n_merges):
    """Recount every pair after every merge: slow, obviously right."""
    from minitransformer.data.bpe import _merge_word, _pairs, _spell

    words = {_spell(w): c for w, c in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = {}
        for symbols, c in words.items():
            for p in _pairs(symbols):
                counts[p] = counts.get(p, 0) + c
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        words = {_merge_word(s, best, best[0] + best[1]): c for s, c in words.items()}
    return merges


def test_incremental_counts_match_a_naive_recount():
    rng = np.random.default_rng(0)
    words = {"".join(rng.choice(list("aab"), rng.integers(1, 9))) for _ in range(300)}
    counts = {w: int(rng.integers(1, 20)) for w in sorted(words)}
    assert learn_merges(counts, 60) == naive_merges(counts, 60)


@pytest.mark.parametrize("n", [0, 1, 7, 25])
def test_a_prefix_of_the_merges_is_the_smaller_tokenizer(n):
    """from_merges on the first n of a longer learning = BPE.train with n merges: the same
    merges, vocabulary and pieces (lesson 00 builds its vocabulary sweep this way)."""
    words = Counter(w for t in TEXTS for w in t.split())
    long = learn_merges(words, 40)
    small, trained = BPE.from_merges(long[:n], words), BPE.train(TEXTS, n_merges=n)
    assert small.merges == trained.merges
    assert small.vocab.to_dict() == trained.vocab.to_dict()
    assert [small.tokenize(t) for t in TEXTS] == [trained.tokenize(t) for t in TEXTS]
