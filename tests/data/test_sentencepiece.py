"""The SentencePiece (Marian) tokenizer against transformers.MarianTokenizer, and its folder
checks. A tiny SentencePiece model is trained here on the shipped English-Spanish verses;
nothing is downloaded."""

from __future__ import annotations

import json
import random
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("sentencepiece")

from minitransformer.data import SentencePieceTokenizer  # noqa: E402
from minitransformer.data import sentencepiece as spt  # noqa: E402
from minitransformer.data.tasks import load_bible_pairs  # noqa: E402
from minitransformer.errors import ArgumentError, CheckpointError, TokenIdError  # noqa: E402

EXTRA_SOURCE = ["Zoë's naïve café façade", "日本語 text", "a smile 😀", "e\u0301 composed"]
EXTRA_TARGET = ["el niño y la niña comen ñame", "acción, pingüino, corazón", "¿qué? ¡sí!"]
ODD = [
    "", " ", "     ", "\t\n", "plain words", "  lots    of   spaces  inside  ",
    ">>es<< And God said", ">>es<<", ">>es<<Light", " >>es<< with a space first",
    "in the middle >>es<< of text", ">>fr<< an unknown code", ">>broken code",
    "Ñandú ñoño año", "crème brûlée à la carte", "Straße groß", "naïve coöperation",
    "e\u0301 and a\u0308 (combining marks)", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３", "ﬁne ﬂour",
    "中文 和 日本語 한국어", "emoji 😀🎉 👍🏽 family 👨‍👩‍👧", "Ελληνικά κείμενα", "русский текст",
    "العربية", "text with </s> inside", "an <unk> token", "<pad> first", "</s></s>",
    "end with </s>", "x<unk>y<pad>z", "tab\tseparated\twords", "new\nline", "\u00a0nbsp\u00a0",
    "zero\u200bwidth", "quotes “curly” and ‘single’", "dashes — and – and -", "a . b , c ! d ?",
    "it 's n't 're", "ALL CAPS WORDS", "MiXeD cAsE", "numbers 123 456.789", "$ 100 % # @ &",
    "a" * 300, "word " * 80, "ab" * 150, "¿Dónde está la biblioteca?", "Über Äpfel",
]  # fmt: skip


def _sentences(pairs: list[tuple[str, str]]) -> list[str]:
    """200 test sentences: unseen verses (both languages) and the odd cases above."""
    rng = random.Random(0)
    verses = [en for en, _ in pairs[-400:]] + [es for _, es in pairs[-400:]]
    picked = rng.sample(verses, 200 - len(ODD))
    return ODD + [s.upper() if k % 17 == 0 else s for k, s in enumerate(picked)]


@pytest.fixture(scope="module")
def pairs() -> list[tuple[str, str]]:
    return load_bible_pairs()


@pytest.fixture(scope="module")
def folder(tmp_path_factory, pairs):
    """A Marian-layout folder trained here (and the tokenizer train() returned)."""
    path = tmp_path_factory.mktemp("marian")
    train = pairs[:3000]
    tok = SentencePieceTokenizer.train(
        [en for en, _ in train] + EXTRA_SOURCE, [es for _, es in train] + EXTRA_TARGET, path,
        vocab_size=400, seed=0, source_lang="en", target_lang="es", language_codes=[">>es<<"],
    )  # fmt: skip
    return path, tok


def _marian(path):
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        return transformers.MarianTokenizer.from_pretrained(str(path))


def test_the_trained_folder_has_marians_layout(folder):
    path, tok = folder
    assert sorted(p.name for p in path.iterdir()) == [
        "source.spm", "target.spm", "tokenizer_config.json", "vocab.json"]  # fmt: skip
    vocab = json.loads((path / "vocab.json").read_text())
    assert vocab["</s>"] == 0 and vocab["<unk>"] == 1 and vocab["<pad>"] == len(vocab) - 1
    assert sorted(vocab.values()) == list(range(len(vocab)))
    assert (tok.eos_id, tok.unk_id, tok.pad_id, tok.bos_id) == (
        0,
        1,
        len(vocab) - 1,
        len(vocab) - 1,
    )
    assert len(tok) == tok.vocab_size == len(vocab) and ">>es<<" in vocab
    again = SentencePieceTokenizer.train(["a b c"] * 50, ["x y z"] * 50, path.parent / "again")
    assert again.encode("a b") == SentencePieceTokenizer.train(
        ["a b c"] * 50, ["x y z"] * 50, path.parent / "again2").encode("a b")  # fmt: skip


def test_encode_matches_marian_tokenizer_on_200_sentences(folder, pairs):
    path, _ = folder
    ours, theirs = SentencePieceTokenizer.from_pretrained(path), _marian(path)
    sentences = _sentences(pairs)
    assert len(sentences) == 200
    unknown = codes = 0
    for text in sentences:
        ids = ours.encode(text)
        assert ids == theirs(text).input_ids, text
        assert ours.encode_target(text) == theirs(text_target=text).input_ids, text
        unknown += ids.count(ours.unk_id)
        codes += ids.count(ours.vocab[">>es<<"])
    assert unknown > 20 and codes == 3  # the <unk> and >>es<< paths were exercised
    assert ours.encode_batch(sentences[:3]) == [ours.encode(s) for s in sentences[:3]]


def test_decode_matches_marian_tokenizer(folder, pairs):
    path, _ = folder
    ours, theirs = SentencePieceTokenizer.from_pretrained(path), _marian(path)
    rows = [theirs(text_target=s).input_ids for s in _sentences(pairs)]
    rng = np.random.default_rng(0)
    special = [ours.eos_id, ours.unk_id, ours.pad_id, ours.vocab[">>es<<"]]
    for _ in range(100):  # random ids, the special ones often
        row = rng.integers(0, len(ours), rng.integers(0, 30)).tolist()
        rows.append([special[i % 4] if i % 3 == 0 else i for i in row])
    for row in rows:
        assert ours.decode(row) == theirs.decode(row, skip_special_tokens=True), row
    assert ours.decode(np.array(rows[7])) == ours.decode(rows[7])  # NumPy ids too
    assert ours.decode_batch(rows[:4]) == [ours.decode(r) for r in rows[:4]]
    assert ours.decode(ours.encode_target("el niño come")) == "el niño come"


def test_separate_vocabularies_and_clean_up_match_marian(folder, pairs, tmp_path):
    path, tok = folder
    protos = [(path / n).read_bytes() for n in ("source.spm", "target.spm")]
    target_vocab = dict(tok.vocab)  # the target side's <pad> elsewhere (swapped with id 5)
    moved = next(t for t, i in tok.vocab.items() if i == 5)
    target_vocab["<pad>"], target_vocab[moved] = 5, tok.pad_id
    config = {"separate_vocabs": True, "clean_up_tokenization_spaces": True}
    SentencePieceTokenizer(*protos, tok.vocab, target_vocab, config).save_pretrained(tmp_path)
    ours, theirs = SentencePieceTokenizer.from_pretrained(tmp_path), _marian(tmp_path)
    assert ours.separate_vocabs and ours.target_vocab != ours.vocab
    sentences = _sentences(pairs)[::4] + ["a , b . it 's", "<pad> first", "x<unk>y<pad>z"]
    for text in sentences:
        assert ours.encode(text) == theirs(text).input_ids, text
        assert ours.encode_target(text) == theirs(text_target=text).input_ids, text
        row = theirs(text_target=text).input_ids + [target_vocab["<pad>"], 5]
        assert ours.decode(row) == theirs.decode(row, skip_special_tokens=True), text
    assert ours.decode(theirs(text_target="a , b . it 's").input_ids) == "a, b. it's"


def test_the_tokenizer_interface_of_the_library(folder):
    _, tok = folder
    ids = tok.encode("And God said")
    assert tok.tokenize("And God said") == ids and ids[-1] == tok.eos_id
    assert tok.detokenize(ids + [5, 6]) == tok.decode(ids) == "And God said"
    assert tok.pieces(">>es<< </s>Hi", target=True)[:2] == [">>es<<", "</s>"]
    assert "SentencePieceTokenizer(en->es" in repr(tok)


def test_save_pretrained_round_trip(folder, tmp_path, pairs):
    path, tok = folder
    written = tok.save_pretrained(tmp_path / "copy")
    assert {p.name for p in written} == {p.name for p in path.iterdir()}
    for p in written:
        assert p.read_bytes() == (path / p.name).read_bytes()
    back = SentencePieceTokenizer.from_pretrained(tmp_path / "copy")
    for text in _sentences(pairs)[:60]:
        assert back.encode(text) == tok.encode(text)
        assert back.decode(back.encode_target(text)) == tok.decode(tok.encode_target(text))
    tok.save_pretrained(tmp_path / "copy")  # the same files again: fine
    other = SentencePieceTokenizer.train(["a b c"] * 50, ["x y z"] * 50, tmp_path / "other")
    with pytest.raises(CheckpointError, match="already there with other contents"):
        other.save_pretrained(tmp_path / "copy")
    assert back.encode("And") == tok.encode("And")  # nothing was written by the refusal
    other.save_pretrained(tmp_path / "copy", overwrite=True)
    assert SentencePieceTokenizer.from_pretrained(tmp_path / "copy").vocab == other.vocab


def _vocab_with(edit):
    def apply(path):
        vocab = json.loads((path / "vocab.json").read_text())
        (path / "vocab.json").write_text(edit(vocab))

    return apply


def _config(fields):
    return lambda path: (path / "tokenizer_config.json").write_text(json.dumps(fields))


BAD = {
    "missing source.spm": ("source.spm", lambda p: (p / "source.spm").unlink()),
    "missing target.spm": ("target.spm", lambda p: (p / "target.spm").unlink()),
    "missing vocab.json": ("vocab.json", lambda p: (p / "vocab.json").unlink()),
    "vocab.json not JSON": ("vocab.json", lambda p: (p / "vocab.json").write_text("{'a': 1")),
    "vocab.json a list": ("vocab.json", _vocab_with(lambda v: json.dumps(list(v)))),
    "negative id": ("vocab.json", _vocab_with(lambda v: json.dumps({**v, "▁the": -1}))),
    "bool id": ("vocab.json", _vocab_with(lambda v: json.dumps({**v, "▁the": True}))),
    "float id": ("vocab.json", _vocab_with(lambda v: json.dumps({**v, "▁the": 2.0}))),
    "duplicate ids": ("vocab.json", _vocab_with(lambda v: json.dumps({**v, "▁the": 0}))),
    "a gap": ("vocab.json", _vocab_with(lambda v: json.dumps({**v, "<pad>": 10**6}))),
    "duplicate key": ("vocab.json", _vocab_with(lambda v: '{"</s>": 0, "</s>": 1}')),
    "no <pad>": (
        "vocab.json",
        _vocab_with(lambda v: json.dumps({t: i for t, i in v.items() if t != "<pad>"})),
    ),  # fmt: skip
    "garbage spm": ("source.spm", lambda p: (p / "source.spm").write_bytes(b"\x08\xff" * 50)),
    "huge spm": (
        "target.spm: .* above the cap",
        lambda p: _sparse(p / "target.spm", spt.MAX_SPM_BYTES + 1),
    ),
    "huge vocab": (
        "vocab.json: .* above the cap",
        lambda p: _sparse(p / "vocab.json", spt.MAX_VOCAB_BYTES + 1),
    ),
    "spm a folder": (
        "source.spm",
        lambda p: ((p / "source.spm").unlink(), (p / "source.spm").mkdir()),
    ),  # fmt: skip
    "unknown field": ("do_lower_case", _config({"do_lower_case": True})),
    "sampling": ("sp_model_kwargs", _config({"sp_model_kwargs": {"enable_sampling": True}})),
    "other class": ("tokenizer_class", _config({"tokenizer_class": "BertTokenizer"})),
    "bad flag": ("separate_vocabs", _config({"separate_vocabs": "yes"})),
    "config a list": ("tokenizer_config.json", _config([1, 2])),
    "added token": (
        "added_tokens_decoder",
        _config({"added_tokens_decoder": {"5": {"content": "<mask>"}}}),
    ),  # fmt: skip
    "added id a superscript": (
        "added_tokens_decoder key '²' is not a token id",
        _config({"added_tokens_decoder": {"²": "<pad>"}}),
    ),  # fmt: skip
    "added id of 5,000 digits": (
        "added_tokens_decoder key '1111.* is not a token id",
        _config({"added_tokens_decoder": {"1" * 5000: "<pad>"}}),
    ),  # fmt: skip
    "added id mismatch": ("<pad>", _config({"added_tokens_decoder": {"3": "<pad>"}})),
    "separate, no target_vocab": ("target_vocab.json", _config({"separate_vocabs": True})),
}


def _sparse(path, size):
    with open(path, "wb") as f:
        f.truncate(size)  # no disk used, nothing read: the size check comes first


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_folders_give_the_librarys_error(folder, tmp_path, case):
    path, tok = folder
    tok.save_pretrained(tmp_path)
    named, breaks = BAD[case]
    breaks(tmp_path)
    with pytest.raises(CheckpointError, match=named) as err:
        SentencePieceTokenizer.from_pretrained(tmp_path)
    assert str(tmp_path) in str(err.value)


def test_bad_arguments(folder, tmp_path, monkeypatch):
    _, tok = folder
    with pytest.raises(CheckpointError, match="not a folder"):
        SentencePieceTokenizer.from_pretrained(tmp_path / "nowhere")
    for ids in ([-1], [len(tok)], [1.5], [True], ["3"]):
        with pytest.raises(TokenIdError):
            tok.decode(ids)
    with pytest.raises(ArgumentError, match="str"):
        tok.encode(["a list"])
    for kwargs in (
        {"vocab_size": 0},
        {"vocab_size": 10.0},
        {"seed": -1},
        {"language_codes": ["es"]},
    ):
        with pytest.raises(ArgumentError):
            SentencePieceTokenizer.train(["a b"] * 9, ["c d"] * 9, tmp_path / "t", **kwargs)
    with pytest.raises(ArgumentError, match="target_sentences"):
        SentencePieceTokenizer.train(["a b"] * 9, [], tmp_path / "t")
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[hf\]"'):
        SentencePieceTokenizer.from_pretrained(folder[0])
    (tmp_path / "a file").write_text("x")
    with pytest.raises(CheckpointError, match="cannot make the folder"):
        folder[1].save_pretrained(tmp_path / "a file" / "below")
