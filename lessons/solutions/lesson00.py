"""Reference solutions of lesson 00 (tokens from scratch: byte-pair encoding)."""

from __future__ import annotations

from collections import Counter


def merge_step(vocab):
    # count every adjacent pair of every word, weighted by the word's count; the most frequent
    # pair (the smallest of those tied) is merged, left to right, in every word that holds it
    counts = Counter()
    for symbols, n in vocab.items():
        for pair in zip(symbols, symbols[1:], strict=False):
            counts[pair] += n
    best = min(counts, key=lambda pair: (-counts[pair], pair))
    new_vocab = {}
    for symbols, n in vocab.items():
        merged, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                merged.append(best[0] + best[1])
                i += 2
            else:
                merged.append(symbols[i])
                i += 1
        new_vocab[tuple(merged)] = n
    return best, new_vocab


def encode(text, merges):
    # each word as its characters, '</w>' on the last one; then every merge in the order it
    # was learned, joining each occurrence of its pair from left to right
    pieces = []
    for word in text.split():
        symbols = [*word[:-1], word[-1] + "</w>"]
        for a, b in merges:
            merged, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        pieces.extend(symbols)
    return pieces
