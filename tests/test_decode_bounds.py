"""Decoding work is bounded: a beam wider than the vocabulary is refused before any decoding,
--max-len bounds the tokens generated, a Marian folder decodes with its generation config
(num_beams, max_length, forced_eos_token_id; transformers' max_length 20 when unset, so a
config claiming 65,536 positions does not decode for minutes); a bad generation value or a
list/dict activation_function is a ConfigError naming the field and the file.

The Marian folders are made here: a SentencePiece tokenizer trained on a few hundred
sentences and a tiny random model whose EOS logit is -1e4, so it never ends a sentence by
itself and every output is as long as the limit lets it be.
"""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest
from test_cli import assert_user_error, run_main
from test_decode import TableModel
from tiny_runs import marian_config, verse_tokenizer

import minitransformer as mt
from minitransformer.decode import Decoding, beam_search, greedy_decode
from minitransformer.errors import ArgumentError, ConfigError
from minitransformer.runtime import translator as translator_module
from minitransformer.runtime.translator import Translator

pytest.importorskip("sentencepiece")

SENTENCES = ["In the beginning God created the heaven and the earth.", "and the earth was"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A Marian folder (64 positions) of a model that never emits EOS by itself."""
    folder = tmp_path_factory.mktemp("never-eos")
    tok = verse_tokenizer(folder, pairs=300, vocab_size=100)
    cfg = marian_config(len(tok), tok.pad_id, tok.eos_id, N=1)
    model = mt.nn.Transformer(cfg, seed=1)
    model.logits_bias.data[cfg.eos_id] = -1e4
    model.save_pretrained(folder)
    return folder


@pytest.fixture
def folder(base, tmp_path):
    """A copy of ``base`` to edit."""
    return shutil.copytree(base, tmp_path / "model")


def edit(path, **fields):
    """Set (or, with None, remove) fields of a JSON file."""
    d = json.loads(path.read_text())
    d.update(fields)
    path.write_text(json.dumps({k: v for k, v in d.items() if v is not None}))


@pytest.fixture
def lengths(monkeypatch):
    """The id lists the Translator's decoding returns (one list per sentence), recorded."""
    seen = []

    def recorded(*args, **kwargs):
        out = beam_search(*args, **kwargs)
        seen.extend(len(ids) for ids in out)
        return out

    monkeypatch.setattr(translator_module, "beam_search", recorded)
    return seen


# ------------------------------------------------------------------ beam vs vocabulary


def test_a_beam_wider_than_the_vocabulary_is_refused_before_decoding(base, monkeypatch):
    t = Translator.from_pretrained(base)
    V = t.model.cfg.tgt_vocab
    src = t.encode_batch(SENTENCES)
    assert len(beam_search(t.model, src, beam_size=V, max_len=2)) == 2  # V itself: allowed

    def boom(*args, **kwargs):
        raise AssertionError("decoding started with a beam wider than the vocabulary")

    monkeypatch.setattr(mt.nn.Transformer, "encode", boom)
    start = time.perf_counter()
    with pytest.raises(ArgumentError, match=f"beam_size {V + 1} .*vocabulary of {V} tokens"):
        beam_search(t.model, src, beam_size=V + 1)
    with pytest.raises(ArgumentError, match=f"at most {V}"):
        t.translate(["", "   "], beam_size=100_000)  # refused even with nothing to decode
    assert time.perf_counter() - start < 2


def test_the_cli_refuses_beam_100000_in_one_line(base, monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise AssertionError("decoding started with a beam wider than the vocabulary")

    monkeypatch.setattr(mt.nn.Transformer, "encode", boom)
    start = time.perf_counter()
    for command in ("translate", "evaluate"):
        argv = [command, "--pretrained", str(base), "--beam", "100000"]
        code, out, err = run_main(argv + (SENTENCES if command == "translate" else []), capsys)
        assert_user_error(code, err, "beam_size 100,000 (--beam)", "target vocabulary")
        assert out == ""
    assert time.perf_counter() - start < 10


# ------------------------------------------------------------------ --max-len


def test_max_len_bounds_the_output(folder, lengths, capsys):
    edit(folder / "config.json", forced_eos_token_id=None)
    edit(folder / "generation_config.json", forced_eos_token_id=None)  # no EOS forced here
    code, out, err = run_main(["translate", "--pretrained", str(folder), *SENTENCES], capsys)
    assert code == 0, err
    assert lengths == [63, 63]  # max_length 64 counts the start token: 63 tokens
    lengths.clear()
    argv = ["translate", "--pretrained", str(folder), "--max-len", "5", *SENTENCES]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    assert lengths == [5, 5] and len(out.splitlines()) == 2
    lengths.clear()
    t = Translator.from_pretrained(folder)
    t.translate(SENTENCES, max_len=3, beam_size=2)
    assert lengths == [3, 3]


def test_max_len_is_checked_where_it_enters(base, capsys):
    code, _, err = run_main(
        ["translate", "--pretrained", str(base), "--max-len", "65", "x"], capsys
    )
    assert_user_error(code, err, "max_len 65 (--max-len)", "64 positions", "at most 64")
    for bad in ("0", "-3", "2.5", "ten"):
        code, _, err = run_main(["translate", "--pretrained", str(base), f"--max-len={bad}", "x"],
                                capsys)  # fmt: skip
        assert code == 2 and "--max-len" in err and "Traceback" not in err
    t = Translator.from_pretrained(base)
    for bad in (0, 65, 2.5, "8", True):
        with pytest.raises(ArgumentError, match="max_len"):
            t.translate(["x"], max_len=bad)


def test_a_checkpoint_keeps_todays_defaults(base, lengths):
    pretrained = Translator.from_pretrained(base)
    t = Translator(pretrained.model, pretrained.tokenizer)  # what from_checkpoint builds
    assert t.defaults == Decoding(beam_size=1, max_len=None, forced_eos=False)
    t.translate(SENTENCES[:1])
    assert lengths == [64]  # greedy up to the model's positions, as before


# ------------------------------------------------------------------ the generation config


def test_huge_max_position_embeddings_decodes_fast_by_default(folder, lengths, monkeypatch):
    (folder / "generation_config.json").unlink()  # no max_length anywhere: transformers' 20
    edit(folder / "config.json", max_position_embeddings=65_536, forced_eos_token_id=None)
    calls = []
    decode = mt.nn.Transformer.decode

    def counted(self, *args, **kwargs):
        calls.append(1)
        assert len(calls) <= 100, "more than 100 decoder steps for one short sentence"
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(mt.nn.Transformer, "decode", counted)
    start = time.perf_counter()
    t = Translator.from_pretrained(folder)
    assert t.model.cfg.max_len == 65_536
    t.translate(SENTENCES[1:])
    assert time.perf_counter() - start < 5
    assert lengths == [19] and len(calls) == 19
    assert t.defaults == Decoding(beam_size=1, max_len=19, forced_eos=False)


def test_a_large_max_length_is_capped_for_the_default(folder):
    edit(folder / "config.json", max_position_embeddings=65_536)
    edit(folder / "generation_config.json", max_length=65_536)
    assert Translator.from_pretrained(folder).defaults.max_len == 512


def test_forced_eos_ends_a_cut_sequence_with_eos(folder, lengths):
    edit(folder / "generation_config.json", max_length=8)  # forced_eos_token_id 0 (= eos)
    t = Translator.from_pretrained(folder)
    assert t.defaults == Decoding(beam_size=1, max_len=7, forced_eos=True)
    t.translate(SENTENCES)
    assert lengths == [6, 6]  # 7 tokens, the 7th the forced EOS
    lengths.clear()
    t.translate(SENTENCES, beam_size=3, max_len=4)
    assert lengths == [3, 3]
    src = t.encode_batch(SENTENCES)
    assert [len(r) for r in greedy_decode(t.model, src, max_len=4)] == [4, 4]
    assert [len(r) for r in greedy_decode(t.model, src, max_len=4, forced_eos=True)] == [3, 3]
    assert greedy_decode(t.model, src, max_len=1, forced_eos=True) == [[], []]


def _forced_eos_table():
    """TableModel's odds for the forced-EOS test. From BOS: 3 (p 0.6) or 4 (p 0.4); after 3:
    5 (p 0.99) or EOS (p 0.01); after 4: EOS or 5 (p 0.5 each)."""
    table = np.full((6, 6), 1e-9)
    table[1, 3], table[1, 4] = 0.6, 0.4
    table[3, 5], table[3, 2] = 0.99, 0.01
    table[4, 2], table[4, 5] = 0.5, 0.5
    table[5, 2] = 1.0
    return TableModel(table)


def test_beam_search_scores_a_forced_eos_as_transformers_does():
    src = np.ones((1, 2), dtype=np.int64)
    # cut at 2 tokens: without forcing, "3 5" (0.594) beats "4 EOS" (0.2)
    assert beam_search(_forced_eos_table(), src, beam_size=2, alpha=0.0, max_len=2) == [[3, 5]]
    # forced: the 2nd token is EOS at log-probability 0 (ForcedEOSTokenLogitsProcessor sets
    # the others to -inf after log_softmax): "3 EOS" scores 0.6, not 0.6 * 0.01
    got = beam_search(_forced_eos_table(), src, beam_size=2, alpha=0.0, max_len=2, forced_eos=True)
    assert got == [[3]]


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_the_defaults_decode_as_transformers_generate(folder):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    edit(folder / "generation_config.json", max_length=10)
    tok = transformers.MarianTokenizer.from_pretrained(folder)
    model = transformers.MarianMTModel.from_pretrained(folder).eval()
    batch = tok(SENTENCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False)  # the folder's generation config
    eos = model.config.eos_token_id
    assert out.shape[1] == 10 and (out[:, -1] == eos).all()  # cut at max_length: EOS forced
    ours = Translator.from_pretrained(folder)
    assert ours.translate(SENTENCES) == tok.batch_decode(out, skip_special_tokens=True)


@pytest.mark.parametrize("where", ["generation_config.json", "config.json"])
def test_num_beams_of_the_config_is_the_default_beam(folder, where, capsys, monkeypatch):
    if where == "config.json":
        (folder / "generation_config.json").unlink()
    edit(folder / where, num_beams=3, max_length=6)
    t = Translator.from_pretrained(folder)
    assert t.defaults.beam_size == 3 and t.defaults.max_len == 5
    beams = []

    def recorded(model, src, beam_size, *args):
        beams.append(beam_size)
        return beam_search(model, src, beam_size, *args)

    monkeypatch.setattr(translator_module, "beam_search", recorded)
    assert t.translate(SENTENCES) == t.translate(SENTENCES, beam_size=3)
    assert beams == [3, 3]
    if where == "config.json":
        return  # the command line's part once (evaluate loads the English-Spanish test set)
    argv = ["evaluate", "--pretrained", str(folder), "--samples", "2", "--json"]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    assert json.loads(out)["decoding"] == "beam 3 (alpha 0.6)"
    code, out, err = run_main(argv + ["--beam", "1", "--max-len", "2"], capsys)
    assert code == 0, err
    assert json.loads(out)["decoding"] == "greedy, at most 2 tokens"


def test_generation_config_json_wins_over_config_json(folder):
    edit(folder / "config.json", num_beams=4, max_length=30)
    edit(folder / "generation_config.json", max_length=None)  # absent there: 20, not 30
    assert Translator.from_pretrained(folder).defaults == Decoding(1, 19, True)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("num_beams", 0, "num_beams must be an int from 1"),
        ("num_beams", "4", "num_beams must be an int"),
        ("num_beams", 10**6, "target vocabulary's"),
        ("max_length", 1, "max_length must be an int >= 2"),
        ("max_length", [512], "max_length must be an int"),
        ("forced_eos_token_id", [0], "forced_eos_token_id must be null or the model's eos"),
        ("forced_eos_token_id", 5, "forced_eos_token_id must be null"),
    ],
)
def test_bad_generation_values_are_refused_by_name(folder, field, value, expected, capsys):
    edit(folder / "generation_config.json", **{field: value})
    with pytest.raises(ConfigError, match=expected) as err:
        Translator.from_pretrained(folder)
    assert "generation_config.json" in str(err.value)
    code, _, err = run_main(["translate", "--pretrained", str(folder), "x"], capsys)
    assert_user_error(code, err, "generation_config.json", field)


# ------------------------------------------------------------------ activation_function


@pytest.mark.parametrize("value", [["relu"], {"name": "relu"}])
def test_a_list_or_dict_activation_function_is_a_config_error(folder, value, capsys):
    edit(folder / "config.json", activation_function=value)
    with pytest.raises(ConfigError) as err:
        mt.nn.Transformer.from_pretrained(folder)
    for word in ("config.json", "activation_function", "'swish'", "'gelu'", "'relu'"):
        assert word in str(err.value), word
    with pytest.raises(ConfigError, match="activation_function"):
        Translator.from_pretrained(folder)
    code, out, err = run_main(["translate", "--pretrained", str(folder), "x"], capsys)
    assert_user_error(code, err, "config.json", "activation_function", "supported")
    assert out == ""
