import time

import pytest

from minitransformer.data.metrics import bleu, word_lookup_baseline
from minitransformer.data.toylang import (
    ADJECTIVES,
    AGREE,
    NOUN_ENDINGS,
    NOUNS,
    VERB_ENDINGS,
    ToyLanguage,
    make_translation_pairs,
)


@pytest.fixture(scope="module")
def pairs():
    start = time.perf_counter()
    splits = make_translation_pairs(seed=0)
    assert time.perf_counter() - start < 5, "generating 52k pairs should take about a second"
    return splits


def test_sizes_lengths_and_types(pairs):
    assert [len(pairs[k]) for k in ("train", "valid", "test")] == [50_000, 1_000, 1_000]
    train = pairs["train"]
    for s, t in train:
        assert 3 <= len(s.split()) <= 15 and 3 <= len(t.split()) <= 15
    src_types = {w for s, _ in train for w in s.split()}
    tgt_types = {w for _, t in train for w in t.split()}
    assert len(src_types) >= 150 and len(tgt_types) >= 150
    lang = ToyLanguage(0)
    assert src_types <= lang.source_types() and tgt_types <= lang.target_types()


def test_mapping_is_deterministic(pairs):
    seen = {}
    for s, t in pairs["train"] + pairs["valid"] + pairs["test"]:
        assert seen.setdefault(s, t) == t


def test_held_out_sources_unseen_in_train(pairs):
    train = {s for s, _ in pairs["train"]}
    assert not train & {s for s, _ in pairs["test"]}
    assert not {s for s, _ in pairs["valid"]} & {s for s, _ in pairs["test"]}


def test_reproducible_from_seeds():
    a = make_translation_pairs(n_train=200, n_valid=10, n_test=10, seed=5)
    assert a == make_translation_pairs(n_train=200, n_valid=10, n_test=10, seed=5)
    assert a != make_translation_pairs(n_train=200, n_valid=10, n_test=10, seed=6)
    other_lang = make_translation_pairs(n_train=200, n_valid=10, n_test=10, seed=5, lang_seed=1)
    assert [s for s, _ in other_lang["train"]] == [s for s, _ in a["train"]]
    assert [t for _, t in other_lang["train"]] != [t for _, t in a["train"]]


def test_known_phenomena():
    """Spot checks of verb-final order, negation, gender agreement and adjective order."""
    lang = ToyLanguage(0)
    verb_forms = {lang.verb[v] + e for v in lang.verb for e in VERB_ENDINGS.values()}
    checked = 0
    for s, t in make_translation_pairs(n_train=5_000, n_valid=1, n_test=1)["train"]:
        words, out = s.split(), t.split()
        assert out[-1] in verb_forms  # verb-final
        if "not" in words:
            assert out[-2] == "ne"
        # "the ADJ1 ADJ2 NOUN ..." (singular subject) -> "DET NOUN ADJ2 ADJ1 ..."
        if words[0] == "the" and words[1] in ADJECTIVES and words[2] in ADJECTIVES:
            if words[3] in NOUNS:
                stem, gender = lang.noun[words[3]]
                ending = AGREE[(gender, "sg")]
                assert out[:4] == [
                    "l" + ending,
                    stem + NOUN_ENDINGS[(gender, "sg")],
                    lang.adj[words[2]] + ending,
                    lang.adj[words[1]] + ending,
                ]
                checked += 1
    assert checked > 10


def test_word_lookup_baseline_is_far_below_40_bleu(pairs):
    sources = [s for s, _ in pairs["test"]]
    references = [t for _, t in pairs["test"]]
    hyps = word_lookup_baseline(pairs["train"], sources)
    score = bleu(hyps, references)
    assert score < 40
    assert bleu(references, references) == pytest.approx(100.0)
