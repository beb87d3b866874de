import pytest

from minitransformer.data.metrics import (
    bleu,
    copy_baseline,
    exact_match,
    token_accuracy,
    word_lookup_baseline,
    word_lookup_table,
)
from minitransformer.errors import ShapeError


def test_bleu_known_cases():
    refs = ["the cat sat on the mat", "a dog ran in the park today"]
    assert bleu(refs, refs) == pytest.approx(100.0)
    assert bleu(["zzz qqq", "xxx yyy"], refs) == pytest.approx(0.0)
    partial = bleu(["the cat sat on a mat", "a dog ran in the park"], refs)
    assert 30 < partial < 100
    with pytest.raises(ShapeError, match="one hypothesis per reference"):
        bleu(["a"], refs)


def test_exact_match_and_token_accuracy():
    assert exact_match(["a b", "c  d", "e"], ["a b", "c d", "f"]) == pytest.approx(2 / 3)
    assert exact_match([[1, 2], [3]], [[1, 2], [4]]) == 0.5
    assert token_accuracy([[5, 6, 7], [5]], [[5, 9, 7], [5, 6]]) == pytest.approx(3 / 5)
    assert token_accuracy([[5, 6, 7, 8]], [[5, 6]]) == 1.0


def test_baselines():
    assert copy_baseline(["a b"]) == ["a b"]
    train = [("the dog sleeps", "lo kan dormet"), ("the cat sleeps", "lo mis dormet"),
             ("a dog runs", "un kan coret"), ("the cat runs", "lo mis coret")]  # fmt: skip
    table = word_lookup_table(train)
    assert table["dog"] == "kan" and table["cat"] == "mis" and table["sleeps"] == "dormet"
    assert table["the"] == "lo" and table["runs"] == "coret"
    assert word_lookup_baseline(train, ["the cat sleeps quietly"]) == ["lo mis dormet quietly"]
    assert word_lookup_table([]) == {}
