"""What the explorer shows, gathered once: a sentence, the model's translation, every
attention layer's weights and every head's statistics, as plain JSON-ready data.

The model translates the sentence (its default decoding: greedy for a checkpoint of this
library), then runs once more on the source and the decoder input ``[BOS] + translation``
(the input the decoder saw while it wrote the translation) with every attention layer
keeping its weights (``heads.attention_maps``). The queries of the decoder's attention are
those input tokens: the row of ``<bos>`` is the state that chose the first word.

    data = attention_data(Translator.from_checkpoint("runs/translate-en-es"), "In the beginning")
    data["kinds"][2]["layers"][0][1]     # cross-attention, layer 0, head 1: T rows of S weights

What is shown is what the model read, and its size is bounded whatever the input: the
sentence is decoded by the project's rule (``data.text.readable_text``: bytes that are not
UTF-8 and lone surrogates become U+FFFD), only its first ``max_len`` tokens are read (a
longer one is cut, with one warning), and the texts shown are cut with "…" (the sentence to
``SENTENCE_CHARS`` characters, the translation to ``TRANSLATION_CHARS``, a token to
``TOKEN_CHARS``), so the page and the grid stay small for a sentence of any length.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ... import backend
from ...data.batching import pad
from ...data.bpe import BPE, EOW
from ...data.text import TOKEN_CHARS, readable_text, shorten
from ...data.vocab import BOS, EOS, PAD
from ...decode import beam_search
from ...errors import ArgumentError
from ..heads import KINDS, STATS, attention_maps, model_head_stats

DIGITS = 4
"""Weights and statistics are rounded to this many decimals (the page stays small)."""

SENTENCE_CHARS = 500
"""The most characters of the sentence the page and the grid show (then "…")."""

TRANSLATION_CHARS = 1000
"""The most characters of the translation they show (it has at most max_len tokens)."""

SIDES = {"encoder self": ("source", "source"), "decoder self": ("target", "target"),
         "cross": ("target", "source")}  # fmt: skip
"""Each kind's (queries, keys): which token row its rows and columns are."""


def check_sentence(sentence: Any) -> str:
    """The sentence, decoded by the project's rule (``data.text.readable_text``) and
    stripped; an ArgumentError naming the fix when it is not a text or is blank (there would
    be no token to attend to)."""
    if not isinstance(sentence, str):
        raise ArgumentError(
            f"the sentence must be a text, got {type(sentence).__name__}; give one "
            'sentence, e.g. "In the beginning God created the heaven and the earth."'
        )
    if not sentence.strip():
        raise ArgumentError(
            f"the sentence is empty ({sentence!r}): there is nothing to attend to. "
            'Fix: give a sentence, e.g. "In the beginning God created the heaven and the earth."'
        )
    return readable_text(sentence).strip()


def pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """Ids -> the tokens as shown: a word, or a BPE piece without its end-of-word mark
    (``ning</w>`` -> ``ning``); an id the tokenizer cannot name shows as its number."""
    vocab = getattr(tokenizer, "vocab", tokenizer)  # a BPE keeps its pieces in a Vocab
    if not hasattr(vocab, "id_to_token"):
        return [str(int(i)) for i in ids]
    out = []
    for i in ids:
        piece = readable_text(str(vocab.id_to_token(int(i))))
        out.append(shorten(piece.replace("</w>", "") or piece, TOKEN_CHARS))
    return out


def words(tokenizer: Any, ids: list[int]) -> list[list[str]]:
    """Ids -> the words they spell, each the list of its tokens as ``pieces`` shows them:
    the one place the explorer decides which pieces make one word.

    The rule is the tokenizer's own mark: a BPE (``data.bpe``) ends every word with a piece
    that carries ``</w>``, so ``beg``, ``in``, ``ning</w>`` are one word ("beginning"); an
    unknown piece (``<unk>``) belongs to the word it is in. ``<pad>``, ``<bos>`` and
    ``<eos>`` are words of their own, and a word still open at the end (a sentence cut at
    max_len, a translation stopped inside a word) ends there. A tokenizer without that mark
    (a vocabulary of words or of characters) has one word per token.

        words(bpe, bpe.tokenize("in the beginning"))   # [["in"], ["the"], ["beg", "in", "ning"]]
    """
    shown = pieces(tokenizer, ids)
    if not isinstance(tokenizer, BPE):
        return [[piece] for piece in shown]
    groups: list[list[str]] = []
    word: list[str] = []
    for i, piece in zip(ids, shown, strict=True):
        if int(i) in (PAD, BOS, EOS):
            groups += [word, [piece]] if word else [[piece]]
            word = []
            continue
        word.append(piece)
        if str(tokenizer.vocab.id_to_token(int(i))).endswith(EOW):
            groups.append(word)
            word = []
    return groups + [word] if word else groups


def attention_data(translator: Any, sentence: str, checkpoint: str = "") -> dict[str, Any]:
    """Translate ``sentence`` with ``translator`` (a ``translator.Translator``) and gather
    what the page and the grid draw (module doc): the texts, the token rows ``source`` and
    ``target`` (the decoder's input), per kind its layers' weights ``[layer][head][query]
    [key]``, and one row of statistics per head (``heads.STATS``); ``sentence_tokens``: how
    many tokens the whole sentence has (``source`` holds those the model read);
    ``source_words`` and ``target_words``: how many tokens each word of those rows has, in
    order (``words``: ``[1, 1, 3]`` for "in the beg in ning")."""
    sentence = check_sentence(sentence)
    model, tokenizer, cfg = translator.model, translator.tokenizer, translator.model.cfg
    all_ids = tokenizer.tokenize(sentence)
    src_ids = translator.fit(all_ids)  # what the model reads (a longer one: one warning)
    unknown = src_ids.count(tokenizer.unk_id)
    if unknown:
        warnings.warn(
            f"{unknown} token(s) of the sentence are not in the model's vocabulary of "
            f"{len(tokenizer):,}; they were read as <unk>",
            stacklevel=2,
        )
    src = backend.asarray(pad([src_ids], pad_id=cfg.pad_id), device=model.device)
    how = translator.decoding()
    out_ids = beam_search(model, src, how.beam_size, 0.6, how.max_len, how.forced_eos)[0]
    tgt_ids = ([cfg.bos_id] + list(out_ids))[: cfg.max_len]  # the decoder's input
    tgt = backend.asarray(pad([tgt_ids], pad_id=cfg.pad_id), device=model.device)
    maps = attention_maps(model, src, tgt)
    kinds = []
    for kind in KINDS:
        layers = sorted(layer for k, layer in maps if k == kind)
        queries, keys = SIDES[kind]
        weights = [np.round(maps[kind, layer][0].astype(np.float64), DIGITS).tolist()
                   for layer in layers]  # fmt: skip
        kinds.append({"name": kind, "queries": queries, "keys": keys, "layers": weights})
    stats = [{k: (round(v, DIGITS) if isinstance(v, float) else v) for k, v in row.items()}
             for row in model_head_stats(model, src, tgt, maps)]  # fmt: skip
    return {
        "checkpoint": shorten(readable_text(str(checkpoint)), SENTENCE_CHARS),
        "sentence": shorten(sentence, SENTENCE_CHARS),
        "sentence_tokens": len(all_ids),
        "translation": shorten(readable_text(tokenizer.detokenize(out_ids)), TRANSLATION_CHARS),
        "source": pieces(tokenizer, src_ids),
        "target": ["<bos>"] + pieces(tokenizer, tgt_ids[1:]),
        "source_words": [len(word) for word in words(tokenizer, src_ids)],
        "target_words": [1] + [len(word) for word in words(tokenizer, tgt_ids[1:])],
        "kinds": kinds,
        "stat_names": list(STATS),
        "stats": stats,
    }


def heads_of(data: dict[str, Any], kind: str) -> int:
    """How many heads of ``kind`` the data holds (every layer's, added)."""
    found = [k for k in data["kinds"] if k["name"] == kind]
    if not found:
        raise ArgumentError(f"heads_of: no kind {kind!r}; the kinds are {KINDS}")
    return sum(len(layer) for layer in found[0]["layers"])
