"""Scores for translations and sequence tasks, and two baselines to beat.

`bleu` is corpus-level sacreBLEU (the standard, comparable number) on detokenized text.
sacrebleu is an optional dependency, imported only when `bleu` is called.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minitransformer.errors import ShapeError, install_hint


def _same_length(a: Sequence, b: Sequence, what: str) -> None:
    if len(a) != len(b):
        raise ShapeError(
            f"{what}: got {len(a)} hypotheses but {len(b)} references; pass one hypothesis "
            "per reference, in the same order."
        )


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU (0-100) of `hypotheses` against one reference each, via sacreBLEU with
    its default settings (13a tokenization, exponential smoothing off, case-sensitive)."""
    _same_length(hypotheses, references, "bleu")
    try:
        import sacrebleu
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "bleu() needs sacrebleu: pip install sacrebleu (or the dev extra: "
            f"{install_hint('dev')})"
        ) from e
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)


def exact_match(hypotheses: Sequence[str] | Sequence[Sequence[int]], references: Sequence) -> float:
    """Fraction of hypotheses equal to their reference (strings compared after whitespace
    normalisation, id sequences compared as lists)."""
    _same_length(hypotheses, references, "exact_match")
    if not references:
        return 0.0

    def norm(x):
        return " ".join(x.split()) if isinstance(x, str) else [int(i) for i in x]

    return sum(norm(h) == norm(r) for h, r in zip(hypotheses, references, strict=True)) / len(
        references
    )


def token_accuracy(
    hypotheses: Sequence[Sequence[int]], references: Sequence[Sequence[int]]
) -> float:
    """Fraction of reference tokens predicted at the same position (missing positions count
    as wrong, extra hypothesis tokens are ignored)."""
    _same_length(hypotheses, references, "token_accuracy")
    correct = total = 0
    for h, r in zip(hypotheses, references, strict=True):
        h, r = list(h)[: len(r)], list(r)
        correct += sum(int(a) == int(b) for a, b in zip(h, r, strict=False))
        total += len(r)
    return correct / total if total else 0.0


def copy_baseline(sources: Sequence[str]) -> list[str]:
    """The laziest translation: the source sentence itself."""
    return list(sources)


def word_lookup_table(train_pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Best target word for each source word, from sentence-level co-occurrence in train.

    The score of a (source word s, target word t) pair is the Dice coefficient
    2·c(s,t) / (c(s) + c(t)), where c counts the sentence pairs containing the word(s)
    (each word counted once per sentence). Dividing by the target count keeps frequent
    target words (articles, particles) from winning for every source word. Ties go to the
    more frequent, then alphabetically first, target word.
    """
    src_index: dict[str, int] = {}
    tgt_index: dict[str, int] = {}
    codes: list[np.ndarray] = []
    src_sets, tgt_sets = [], []
    for s, t in train_pairs:
        us = np.array(sorted({src_index.setdefault(w, len(src_index)) for w in s.split()}))
        ut = np.array(sorted({tgt_index.setdefault(w, len(tgt_index)) for w in t.split()}))
        src_sets.append(us)
        tgt_sets.append(ut)
    n_t = max(len(tgt_index), 1)
    for us, ut in zip(src_sets, tgt_sets, strict=True):
        if len(us) and len(ut):
            codes.append((us[:, None] * n_t + ut[None, :]).ravel())
    if not codes:
        return {}
    pair_codes, joint = np.unique(np.concatenate(codes), return_counts=True)
    c_src = np.bincount(np.concatenate(src_sets), minlength=len(src_index))
    c_tgt = np.bincount(np.concatenate(tgt_sets), minlength=len(tgt_index))
    s_id, t_id = pair_codes // n_t, pair_codes % n_t
    dice = 2.0 * joint / (c_src[s_id] + c_tgt[t_id])
    tgt_words = np.array(sorted(tgt_index, key=tgt_index.get), dtype=object)
    alpha_rank = np.argsort(np.argsort(tgt_words.astype(str)))  # alphabetical rank per id
    order = np.lexsort((alpha_rank[t_id], -c_tgt[t_id], -dice, s_id))
    first = np.ones(len(order), dtype=bool)
    first[1:] = s_id[order][1:] != s_id[order][:-1]
    best = order[first]
    src_words = sorted(src_index, key=src_index.get)
    return {src_words[s]: str(tgt_words[t]) for s, t in zip(s_id[best], t_id[best], strict=True)}


def word_lookup_baseline(
    train_pairs: Sequence[tuple[str, str]], test_sources: Sequence[str]
) -> list[str]:
    """Translate word by word in source order with `word_lookup_table(train_pairs)`;
    source words never seen in training are copied through."""
    table = word_lookup_table(train_pairs)
    return [" ".join(table.get(w, w) for w in s.split()) for s in test_sources]
