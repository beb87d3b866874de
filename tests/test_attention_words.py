"""The explorer's words: which BPE pieces of the shipped en-es-tiny model make one word
(``explorer.words``, checked on the real tokenizer), how the data and the PNG grid carry
them (``source_words``, ``grid.word_labels``: ``beg·``, ``·in·``, ``·ning``), and the page's
colour scale (matplotlib's viridis, as the grid). The page's drawing of them in a browser:
test_attention_page.py."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import test_attention_page as page_tests

from minitransformer.data.bpe import split_punct
from minitransformer.data.vocab import BOS, EOS, Vocab
from minitransformer.tools import explorer
from minitransformer.tools.explorer import grid, script

translator = page_tests.translator  # the page tests' fixtures: the shipped model, and its
data = page_tests.data  # data for their sentence ("In the beginning God created ...")


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("in the beginning god created",
         [["in"], ["the"], ["beg", "in", "ning"], ["god"], ["cre", "a", "ted"]]),
        ("en el principio creó dios los cielos y la tierra.",
         [["en"], ["el"], ["prin", "ci", "pio"], ["cre", "ó"], ["dios"], ["los"], ["cielos"],
          ["y"], ["la"], ["tierra"], ["."]]),
        ("y fue la luz;", [["y"], ["fu", "e"], ["la"], ["luz"], [";"]]),
        ("In the beginning God",  # unknown capitals: <unk> stays inside its word
         [["<unk>", "n"], ["the"], ["beg", "in", "ning"], ["<unk>", "od"]]),
    ],
)  # fmt: skip
def test_the_pieces_of_a_word_are_grouped(translator, sentence, expected):
    tokenizer = translator.tokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids = tokenizer.tokenize(sentence)
    assert explorer.words(tokenizer, ids) == expected
    assert [piece for word in expected for piece in word] == explorer.pieces(tokenizer, ids)


@pytest.mark.parametrize(
    "sentence",
    ["and god said, let there be light: and there was light.", "beginning created heaven",
     "y dijo dios: sea la luz; y fue la luz.", "the waters under the firmament"],
)  # fmt: skip
def test_the_words_spell_the_sentence(translator, sentence):
    tokenizer = translator.tokenizer
    found = explorer.words(tokenizer, tokenizer.tokenize(sentence))
    assert ["".join(word) for word in found] == split_punct(sentence).split()


def test_special_tokens_and_a_cut_word_end_a_word(translator):
    tokenizer = translator.tokenizer
    beginning = tokenizer.tokenize("beginning")  # beg, in, ning</w>
    ids = [BOS, *beginning, EOS, *beginning[:2]]  # the last word cut inside
    assert explorer.words(tokenizer, ids) == [["<bos>"], ["beg", "in", "ning"], ["<eos>"],
                                              ["beg", "in"]]  # fmt: skip
    vocab = Vocab(["the", "dog"])  # a word vocabulary: one word per token
    assert explorer.words(vocab, vocab.tokenize("the dog")) == [["the"], ["dog"]]


def test_the_data_and_the_grid_carry_the_words(data):
    assert data["source_words"] == [2, 1, 3, 2, 3, 1, 1, 1, 1, 1, 1]  # In, the, beginning, ...
    for side in ("source", "target"):
        assert sum(data[side + "_words"]) == len(data[side])
    assert data["target_words"][0] == 1  # <bos>
    labels = grid.word_labels(data["source"], data["source_words"])
    assert labels[:6] == ["<unk>·", "·n", "the", "beg·", "·in·", "·ning"]


def test_the_page_colours_are_matplotlibs_viridis(data):
    import matplotlib

    table = np.asarray(script.VIRIDIS, dtype=np.float64) / 255
    anchors = matplotlib.colormaps["viridis"](np.linspace(0, 1, len(table)))[:, :3]
    np.testing.assert_allclose(table, anchors, atol=1 / 255)
    assert json.dumps([list(c) for c in script.VIRIDIS]) in explorer.render_page(data)
