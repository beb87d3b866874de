"""Lesson 16's exercise checks (lessons/checks/lesson16.py) tell right from wrong with the right
hint and never crash on an answer; the notebook ships what the lesson promises.

- check_16_1 (the parameters of a Marian config.json): each mistake a learner would make gets
  its own hint, told apart by its exact amount on every config; calling the library's count,
  raising, and returning a string, a list, None or NaN fail; the reference, a helper function,
  a NumPy integer, an integral float and a 0-d array pass. The expected counts agree with
  transformers' MarianMTModel (its trainable parameters plus its logits-bias buffer).
- check_16_2 (Marian's halves table) and check_16_3 (Marian's feed-forward from its stored
  arrays): WRONG and VALID below list the answers, each wrong one with the hint it must get.
- The notebook: placeholders only, each check called once, DOWNLOAD = False as shipped, the
  download only under ``if DOWNLOAD:``.
- lessons/checkpoints/marian-tiny (the lesson's offline fidelity check): this library
  reproduces the committed transformers logits, and (with transformers) they are what
  transformers computes from the committed weights.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, assert_ships_placeholders, code_cells

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.nn.marian_config import config_from_marian
from minitransformer.nn.marian_weights import marian_names
from minitransformer.nn.positional import sinusoid_table

NOTEBOOK = LESSONS / "16_a_real_translator.ipynb"
checks = importlib.import_module("checks.lesson16")
s16 = importlib.import_module("solutions.lesson16")
CORRECT, NOT_ATTEMPTED = "correct", None  # checks._shared


def placeholder(*args, **kwargs):
    raise NotImplementedError("exercise: your code here")


# ------------------------------------------------------------------ 16.1: count_parameters
def _count(
    c, logits_bias=True, embeddings=1, positions=0, cross=True, dec_norms=3, biases=True,
    decoder_own=True, per_head=False, enc_cross=False, projections=4, norm_vectors=2,
    enc_norms=2, extra_norms=0, ffn_biases=True,
):  # fmt: skip
    """A count of config c with one mistake or two (the defaults: the right count)."""
    D, V, L = c["d_model"], c["vocab_size"], c["max_position_embeddings"]
    b = 1 if biases else 0
    norm = norm_vectors * D

    def attention(h):
        return projections * (D * D + b * D) * (h if per_head else 1)

    def ffn(f):
        return 2 * D * f + b * ffn_biases * (f + D)

    pre = "decoder" if decoder_own else "encoder"
    enc = c["encoder_layers"] * ((2 if enc_cross else 1) * attention(c["encoder_attention_heads"])
                                 + ffn(c["encoder_ffn_dim"]) + enc_norms * norm)  # fmt: skip
    dec = c[f"{pre}_layers"] * (
        (2 if cross else 1) * attention(c[f"{pre}_attention_heads"])
        + ffn(c[f"{pre}_ffn_dim"]) + dec_norms * norm
    )  # fmt: skip
    return enc + dec + embeddings * V * D + (V if logits_bias else 0) + positions * L * D + (
        extra_norms * 2 * D
    )  # fmt: skip


def _count_from_names(c):  # every array Marian stores, counted from its shape
    return sum(int(np.prod(shape)) for _, _, shape in marian_names(config_from_marian(c)).values())


def _count_calling_the_library(c):
    return config_from_marian(c).num_parameters()


def _count_with_a_helper(c):  # the sum split over a helper function: still written out
    return _count(c)


def _raises_key_error(c):
    return c["num_layers"] * 4


COUNT_WRONG = {  # name: (answer, what its hint must say)
    "no logits bias": (lambda c: _count(c, logits_bias=False), "add to the logits"),
    "untied: three embedding matrices": (lambda c: _count(c, embeddings=3), "three times"),
    "untied: two embedding matrices": (lambda c: _count(c, embeddings=2), "count it twice"),
    "no embedding": (lambda c: _count(c, embeddings=0), "shared embedding itself"),
    "learned positions, both stacks": (lambda c: _count(c, positions=2), "sinusoids"),
    "learned positions, one table": (lambda c: _count(c, positions=1), "sinusoids"),
    "no cross-attention": (lambda c: _count(c, cross=False), "two attentions"),
    "cross-attention in the encoder too": (lambda c: _count(c, enc_cross=True), "only the decoder"),
    "three projections per attention": (lambda c: _count(c, projections=3), "four projections"),
    "two LayerNorms per decoder layer": (lambda c: _count(c, dec_norms=2), "three sublayers"),
    "three LayerNorms per encoder layer": (lambda c: _count(c, enc_norms=3), "two sublayers"),
    "no LayerNorms": (lambda c: _count(c, norm_vectors=0), "LayerNorms are missing"),
    "LayerNorm with γ only": (lambda c: _count(c, norm_vectors=1), "γ and β"),
    "a final LayerNorm per stack": (lambda c: _count(c, extra_norms=2), "post-LN"),
    "no biases": (lambda c: _count(c, biases=False), "the biases are missing"),
    "no feed-forward biases": (lambda c: _count(c, ffn_biases=False), "feed-forward's biases"),
    "the encoder's sizes for the decoder": (
        lambda c: _count(c, decoder_own=False),
        "uses the encoder's",
    ),
    "attention weights per head": (lambda c: _count(c, per_head=True), "heads split d_model"),
    "two mistakes at once": (
        lambda c: _count(c, logits_bias=False, dec_norms=2),
        "two things.*logits.*three sublayers",
    ),
    "calls num_parameters": (_count_calling_the_library, "calls config_from_marian"),
    "counts marian_names' shapes": (_count_from_names, "calls config_from_marian, marian_names"),
    "a key config.json lacks": (_raises_key_error, "raised KeyError.*has the keys"),
    "not a whole number": (lambda c: _count(c) + 0.5, "whole number"),
    "a string": (lambda c: str(_count(c)), "whole number"),
    "a list": (lambda c: [_count(c)], "whole number"),
    "None": (lambda c: None, "whole number"),
    "NaN": (lambda c: float("nan"), "whole number"),
}
COUNT_VALID = {
    "reference": s16.count_parameters,
    "the mistake-free _count": _count,
    "through a helper function": _count_with_a_helper,
    "a NumPy integer": lambda c: np.int64(_count(c)),
    "an integral float": lambda c: float(_count(c)),
    "a 0-d NumPy array": lambda c: np.array(_count(c)),
}


def test_16_1_mistakes_are_told_apart():
    """No two mistakes of checks._mistakes miss or add the same amounts on every config the
    check tries, so each wrong count gets its own hint (on opus-mt's config alone, no
    LayerNorms and no feed-forward biases both come to 30,720)."""
    table = [checks._mistakes(d) for d in checks.CONFIGS]
    amounts = [tuple(row[k][0] for row in table) for k in range(len(table[0]))]
    assert len(set(amounts)) == len(amounts)
    assert all(any(a) for a in amounts)


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


def _interleaved(L, D):  # the paper's table, built by hand
    table = np.empty((L, D))
    table[:, 0::2], table[:, 1::2] = np.sin(_angles(L, D)), np.cos(_angles(L, D))
    return table


def _interleaved_reordered(L, D):  # the paper's table built by hand, columns taken in order P
    return _interleaved(L, D)[:, np.r_[0:D:2, 1:D:2]]


def _halves_by_the_library(L, D):
    return sinusoid_table(L, D, "halves")


def _halves_reversed(L, D):  # sines first, cosines second, each half from the last θ_i
    a = _angles(L, D)[:, ::-1]
    return np.concatenate([np.sin(a), np.cos(a)], axis=1)


def _halves_nan(L, D):
    table = _halves(L, D)
    table[-1, -1] = np.nan
    return table


TABLE_WRONG = {  # name: (answer, what its hint must say)
    "interleaved (the paper's)": (_interleaved, "interleaved"),
    "cosines first": (lambda L, D: np.roll(_halves(L, D), D // 2, axis=1), "each other's place"),
    "each half reversed": (_halves_reversed, "each half runs the wrong way"),
    "positions from 1": (lambda L, D: _halves(L, D, start=1), "position 0 is wrong"),
    "exponent i / d_model": (lambda L, D: _halves(L, D, exponent=1), "look at the angles"),
    "divided by d_model / 2": (lambda L, D: _halves(L, D, denominator=D // 2), "the angles"),
    "transposed": (lambda L, D: _halves(L, D).T, "shape"),
    "sines only": (lambda L, D: np.sin(np.concatenate([_angles(L, D)] * 2, axis=1)), "hint"),
    "float16": (lambda L, D: _halves(L, D).astype(np.float16), "float16"),
    "calls sinusoid_table": (_halves_by_the_library, "calls sinusoid_table"),
    "a NaN": (_halves_nan, "NaN"),
    "arguments swapped": (lambda D, L: _halves(L, D), "raised|shape"),
    "a list of tensors": (lambda L, D: [mt.tensor(r) for r in _halves(L, D)], "return"),
}
TABLE_VALID = {
    "reference": s16.halves_table,
    "float32": lambda L, D: s16.halves_table(L, D).astype(np.float32),
    "lists": lambda L, D: s16.halves_table(L, D).tolist(),
    "a library tensor": lambda L, D: mt.tensor(s16.halves_table(L, D), dtype="float64"),
    "the interleaved table reordered by hand": _interleaved_reordered,
    "a loop over positions": lambda L, D: np.array(
        [
            [
                np.sin(p / 10000 ** (2 * (j % (D // 2)) / D))
                if j < D // 2
                else np.cos(p / 10000 ** (2 * (j % (D // 2)) / D))
                for j in range(D)
            ]
            for p in range(L)
        ]
    ),  # fmt: skip
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


def _ffn_raises(x, w1, b1, w2, b2):  # this library's F.linear on NumPy arrays, untransposed
    return F.linear(F.swish(F.linear(mt.tensor(x), mt.tensor(w1), mt.tensor(b1))), w2, b2)


FFN_WRONG = {  # name: (answer, what its hint must say); the first inputs have d_ff = d_model
    "relu (the paper's)": (_ffn(act=lambda h: np.maximum(h, 0)), "the paper's activation"),
    "gelu": (_ffn(act=_gelu), "swish, not the paper's relu"),
    "sigmoid": (_ffn(act=lambda h: 1 / (1 + np.exp(-h))), "one step at a time"),
    "weights not transposed": (_ffn(transpose=False), "untransposed"),
    "no biases": (_ffn(biases=False), "biases are missing"),
    "the activation after fc2": (_ffn(act_last=True), "one step at a time"),
    "the hidden layer only": (lambda x, w1, b1, w2, b2: _silu(x @ w1.T + b1), "step"),
    "fc2 first": (lambda x, w1, b1, w2, b2: _silu(x @ w2.T + b2) @ w1.T + b1, "step"),
    "raises on the arrays": (_ffn_raises, "raised"),
    "NaN": (lambda x, *w: np.full(x.shape, np.nan), "NaN"),
    "a tuple": (lambda *a: (_ffn()(*a), None), "return"),
    "None": (lambda *a: None, "return numbers"),
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
def test_catches_with_the_right_hint(name, case):
    answer, hint = WRONG[name][case]
    with pytest.raises(AssertionError, match=hint):
        CHECKS[name][0](answer)


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
        CHECKS[name][0](wrong[name][0])


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


# ------------------------------------------------------------------ the committed Marian reference
MARIAN_TINY = LESSONS / "checkpoints" / "marian-tiny"


def test_marian_tiny_fixture_matches_its_committed_logits():
    """What the lesson shows offline: this library's loader on a MarianMTModel that
    transformers saved gives the logits transformers computed (committed beside it)."""
    from safetensors.numpy import load_file

    hf = load_file(MARIAN_TINY / "hf_reference.safetensors")
    model = mt.nn.Transformer.from_pretrained(MARIAN_TINY)
    cfg = model.cfg
    assert (cfg.activation, cfg.position_layout, cfg.logits_bias, cfg.scale_embedding) == (
        "swish", "halves", True, True
    )  # fmt: skip
    assert cfg.bos_id == cfg.pad_id and cfg.eos_id == 0
    with mt.no_grad():
        got = model(hf["src"], hf["tgt_in"]).numpy()
    assert (hf["src"] == cfg.pad_id).any()  # the batch exercises the source mask
    assert np.abs(got - hf["logits"]).max() <= 1e-5 * np.abs(hf["logits"]).max()
    sizes = sum(p.stat().st_size for p in MARIAN_TINY.iterdir())
    assert sizes < 100_000  # small enough to commit


def test_marian_tiny_reference_is_what_transformers_computes():
    """The committed logits are transformers' own for the committed weights (rerun here)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from safetensors.numpy import load_file

    hf = load_file(MARIAN_TINY / "hf_reference.safetensors")
    model = transformers.MarianMTModel.from_pretrained(MARIAN_TINY).eval()
    pad = model.config.pad_token_id
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor(hf["src"]),
            attention_mask=torch.tensor(hf["src"] != pad),
            decoder_input_ids=torch.tensor(hf["tgt_in"]),
        ).logits.numpy()
    assert np.abs(logits - hf["logits"]).max() <= 1e-5 * np.abs(hf["logits"]).max()
