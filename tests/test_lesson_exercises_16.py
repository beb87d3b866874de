"""Lesson 16's exercise checks (lessons/checks/lesson16.py) tell right from wrong, and the
notebook ships what the lesson promises.

- check_16_1 (the parameters of a Marian config.json): forgetting the logits bias, untied
  embeddings, learned positions, a missing cross-attention or LayerNorm, no biases, the
  encoder's sizes for the decoder and weights per head fail; the reference, a count over
  ``marian_names`` shapes, a NumPy integer and an integral float pass. The expected counts
  agree with transformers' MarianMTModel (its trainable parameters plus its logits-bias buffer).
- check_16_2 (Marian's halves table): the interleaved table, cosines first, positions from 1,
  a frequency with the wrong exponent or denominator, and the transposed table fail; float32,
  lists, a library tensor and the interleaved table reordered by hand pass.
- check_16_3 (Marian's feed-forward from its stored arrays): relu, gelu, sigmoid, untransposed
  weights (square and not), missing biases and the activation in the wrong place fail; NumPy in
  float32 and float64, einsum, a library tensor and nn.Linear layers loaded by hand pass.
- The notebook: placeholders only, each check called once, DOWNLOAD = False as shipped, the
  download only under ``if DOWNLOAD:``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
from lesson_notebooks import assert_ships_placeholders, code_cells

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.nn.marian_config import config_from_marian
from minitransformer.nn.marian_weights import marian_names
from minitransformer.nn.positional import sinusoid_table

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
NOTEBOOK = LESSONS / "16_a_real_translator.ipynb"
sys.path.insert(0, str(LESSONS))
checks = importlib.import_module("checks.lesson16")
s16 = importlib.import_module("solutions.lesson16")
CORRECT, NOT_ATTEMPTED = "correct", None  # checks._shared


def placeholder(*args, **kwargs):
    raise NotImplementedError("exercise: your code here")


# ------------------------------------------------------------------ 16.1: count_parameters
def _count(
    c, logits_bias=True, embeddings=1, positions=0, cross=True, dec_norms=3, biases=True,
    decoder_own=True, per_head=False,
):  # fmt: skip
    """A count of config c with one mistake (the defaults: the right count)."""
    D, V, L = c["d_model"], c["vocab_size"], c["max_position_embeddings"]
    b = 1 if biases else 0

    def attention(h):
        return 4 * (D * D + b * D) * (h if per_head else 1)

    def ffn(f):
        return 2 * D * f + b * (f + D)

    pre = "decoder" if decoder_own else "encoder"
    enc = c["encoder_layers"] * (attention(c["encoder_attention_heads"]) +
                                 ffn(c["encoder_ffn_dim"]) + 4 * D)  # fmt: skip
    dec = c[f"{pre}_layers"] * (
        (2 if cross else 1) * attention(c[f"{pre}_attention_heads"])
        + ffn(c[f"{pre}_ffn_dim"]) + dec_norms * 2 * D
    )  # fmt: skip
    return enc + dec + embeddings * V * D + (V if logits_bias else 0) + positions * L * D


def _count_from_names(c):  # every array Marian stores, counted from its shape
    return sum(int(np.prod(shape)) for _, _, shape in marian_names(config_from_marian(c)).values())


COUNT_WRONG = {
    "no logits bias": lambda c: _count(c, logits_bias=False),
    "untied: three embedding matrices": lambda c: _count(c, embeddings=3),
    "untied: two embedding matrices": lambda c: _count(c, embeddings=2),
    "learned positions, both stacks": lambda c: _count(c, positions=2),
    "no cross-attention": lambda c: _count(c, cross=False),
    "two LayerNorms per decoder layer": lambda c: _count(c, dec_norms=2),
    "no biases": lambda c: _count(c, biases=False),
    "the encoder's sizes for the decoder": lambda c: _count(c, decoder_own=False),
    "attention weights per head": lambda c: _count(c, per_head=True),
    "not a whole number": lambda c: _count(c) + 0.5,
    "a string": lambda c: str(_count(c)),
    "a list": lambda c: [_count(c)],
}
COUNT_VALID = {
    "reference": s16.count_parameters,
    "the mistake-free _count": _count,
    "from marian_names' shapes": _count_from_names,
    "a NumPy integer": lambda c: np.int64(_count(c)),
    "an integral float": lambda c: float(_count(c)),
}


def test_16_1_counts_opus_mt_en_es():
    """The count the lesson shows: opus-mt-en-es's config.json, read by the library."""
    assert checks._expected_count(checks.OPUS_MT_EN_ES) == 77_484_009
    assert s16.count_parameters(checks.OPUS_MT_EN_ES) == 77_484_009


@pytest.mark.parametrize("i", range(1, len(checks.CONFIGS)))
def test_16_1_expected_counts_agree_with_transformers(i):
    """MarianMTModel's trainable parameters (the sinusoid tables are frozen) plus its
    final_logits_bias (a buffer there, a parameter here) = the count the check expects."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    c = checks.CONFIGS[i]
    fields = {k: v for k, v in c.items() if k != "tie_word_embeddings"}
    model = transformers.MarianMTModel(transformers.MarianConfig(**fields))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable + model.final_logits_bias.numel() == checks._expected_count(c)


# ------------------------------------------------------------------ 16.2: halves_table
def _angles(L, D, start=0, exponent=2, denominator=None):
    i = np.arange(D // 2)
    return np.arange(start, start + L)[:, None] / 10000.0 ** (exponent * i / (denominator or D))


def _halves(L, D, **kw):
    a = _angles(L, D, **kw)
    return np.concatenate([np.sin(a), np.cos(a)], axis=1)


def _interleaved_reordered(L, D):  # the paper's table built by hand, columns taken in order P
    table = np.empty((L, D))
    table[:, 0::2], table[:, 1::2] = np.sin(_angles(L, D)), np.cos(_angles(L, D))
    return table[:, np.r_[0:D:2, 1:D:2]]


TABLE_WRONG = {
    "interleaved (the paper's)": lambda L, D: sinusoid_table(L, D, "interleaved"),
    "cosines first": lambda L, D: np.roll(_halves(L, D), D // 2, axis=1),
    "positions from 1": lambda L, D: _halves(L, D, start=1),
    "exponent i / d_model": lambda L, D: _halves(L, D, exponent=1),
    "divided by d_model / 2": lambda L, D: _halves(L, D, denominator=D // 2),
    "transposed": lambda L, D: _halves(L, D).T,
    "sines only": lambda L, D: np.sin(np.concatenate([_angles(L, D)] * 2, axis=1)),
    "float16": lambda L, D: _halves(L, D).astype(np.float16),
}
TABLE_VALID = {
    "reference": s16.halves_table,
    "float32": lambda L, D: s16.halves_table(L, D).astype(np.float32),
    "lists": lambda L, D: s16.halves_table(L, D).tolist(),
    "a library tensor": lambda L, D: mt.tensor(s16.halves_table(L, D), dtype="float64"),
    "the interleaved table reordered by hand": _interleaved_reordered,
}


# ------------------------------------------------------------------ 16.3: marian_ffn
def _silu(x):
    return x / (1 + np.exp(-x))


def _gelu(x):
    from math import erf

    return x * 0.5 * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def _ffn(act=_silu, transpose=True, biases=True, act_last=False):
    def ffn(x, w1, b1, w2, b2):
        w1, w2 = (w1.T, w2.T) if transpose else (w1, w2)
        b1, b2 = (b1, b2) if biases else (0, 0)
        h = x @ w1 + b1
        out = (h if act_last else act(h)) @ w2 + b2
        return act(out) if act_last else out

    return ffn


def _ffn_layers(x, w1, b1, w2, b2):  # nn.Linear layers of this library, loaded by hand
    fc1, fc2 = mt.nn.Linear(*w1.shape[::-1]), mt.nn.Linear(*w2.shape[::-1])
    for layer, w, b in ((fc1, w1, b1), (fc2, w2, b2)):
        layer.weight.data = np.ascontiguousarray(w.T).astype(np.float32)
        layer.bias.data = b.astype(np.float32)
    return fc2(F.swish(fc1(mt.tensor(x, dtype="float32"))))


FFN_WRONG = {
    "relu (the paper's)": _ffn(act=lambda h: np.maximum(h, 0)),
    "gelu": _ffn(act=_gelu),
    "sigmoid": _ffn(act=lambda h: 1 / (1 + np.exp(-h))),
    "weights not transposed": _ffn(transpose=False),
    "no biases": _ffn(biases=False),
    "the activation after fc2": _ffn(act_last=True),
    "the hidden layer only": lambda x, w1, b1, w2, b2: _silu(x @ w1.T + b1),
    "fc2 first": lambda x, w1, b1, w2, b2: _silu(x @ w2.T + b2) @ w1.T + b1,
}
FFN_VALID = {
    "reference (library ops)": s16.marian_ffn,
    "NumPy": _ffn(),
    "einsum": lambda x, w1, b1, w2, b2: (
        np.einsum("btf,df->btd", _silu(np.einsum("btd,fd->btf", x, w1) + b1), w2) + b2
    ),
    "a library tensor": lambda *a: mt.tensor(_ffn()(*a)),
    "nn.Linear layers": _ffn_layers,
}


# ------------------------------------------------------------------ every check
CHECKS = {
    "16_1": (checks.check_16_1, s16.count_parameters),
    "16_2": (checks.check_16_2, s16.halves_table),
    "16_3": (checks.check_16_3, s16.marian_ffn),
}


WRONG = {"16_1": COUNT_WRONG, "16_2": TABLE_WRONG, "16_3": FFN_WRONG}
VALID = {"16_1": COUNT_VALID, "16_2": TABLE_VALID, "16_3": FFN_VALID}


@pytest.mark.parametrize(("name", "case"), [(n, c) for n in WRONG for c in WRONG[n]])
def test_catches(name, case):
    with pytest.raises(AssertionError):
        CHECKS[name][0](WRONG[name][case])


@pytest.mark.parametrize(("name", "case"), [(n, c) for n in VALID for c in VALID[n]])
def test_accepts(name, case, capsys):
    assert CHECKS[name][0](VALID[name][case]) == CORRECT
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("name", CHECKS)
def test_placeholder_is_not_attempted(name, capsys):
    check, _ = CHECKS[name]
    assert check(placeholder) is NOT_ATTEMPTED
    assert check(None) is NOT_ATTEMPTED
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("name", CHECKS)
def test_a_failing_check_gives_a_hint(name):
    wrong = {"16_1": COUNT_WRONG["no logits bias"], "16_2": TABLE_WRONG["cosines first"],
             "16_3": FFN_WRONG["weights not transposed"]}  # fmt: skip
    with pytest.raises(AssertionError, match="hint"):
        CHECKS[name][0](wrong[name])


def test_notebook_ships_placeholders_and_calls_every_check():
    assert_ships_placeholders(
        NOTEBOOK, 16, CHECKS, ("count_parameters", "halves_table", "marian_ffn")
    )


def test_notebook_never_downloads_as_shipped():
    """DOWNLOAD = False in the first code cell; the Hub is reached only under `if DOWNLOAD:`."""
    cells = code_cells(NOTEBOOK)
    assert "\nDOWNLOAD = False" in cells[0]
    lines = "\n".join(cells).splitlines()
    calls = [i for i, line in enumerate(lines) if "pretrained_folder(" in line]
    assert calls, "the lesson shows how to download opus-mt"
    for i in calls:
        guard = max(j for j in range(i) if lines[j] and not lines[j].startswith(" "))
        assert lines[guard] == "if DOWNLOAD:", (
            f"pretrained_folder called outside `if DOWNLOAD:`: {lines[i]}"
        )
