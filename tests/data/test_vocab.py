import json

import pytest

from minitransformer.data.vocab import BOS, EOS, PAD, UNK, Tokenizer, Vocab
from minitransformer.errors import ConfigError, TokenIdError


def test_special_ids_are_fixed():
    v = Vocab(["a", "b"])
    assert (PAD, BOS, EOS, UNK) == (0, 1, 2, 3)
    assert v.tokens[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert len(v) == 6 and v.encode(["a", "b"]) == [4, 5]


def test_encode_unknown_and_decode_stops_at_eos():
    v = Vocab(["a", "b"])
    assert v.encode(["b", "zzz"]) == [5, UNK]
    assert v.decode([BOS, 4, PAD, 5, EOS, 4]) == ["a", "b"]
    assert v.decode([4, EOS, 5], strip_special=False) == ["a", "<eos>", "b"]
    assert v.detokenize(v.tokenize("a b q")) == "a b <unk>"


def test_from_tokens_is_deterministic_and_respects_min_count():
    words = "c b a b c c d".split()
    v = Vocab.from_tokens(words)
    assert v.tokens[4:] == ["c", "b", "a", "d"]  # by count, then alphabetically
    assert Vocab.from_tokens(reversed(words)) == v
    assert Vocab.from_tokens(words, min_count=2).tokens[4:] == ["c", "b"]


def test_dict_round_trip_is_json():
    v = Vocab.from_tokens("x y z y".split())
    d = json.loads(json.dumps(v.to_dict()))
    assert Vocab.from_dict(d) == v
    assert isinstance(v, Tokenizer)


def test_errors_name_the_problem():
    v = Vocab(["a"])
    with pytest.raises(TokenIdError, match="outside the vocabulary"):
        v.decode([99])
    with pytest.raises(ConfigError, match="first four tokens"):
        Vocab.from_dict({"type": "vocab", "tokens": ["a", "b", "c", "d"]})
    with pytest.raises(ConfigError):
        Vocab.from_tokens(["a"], min_count=0)
