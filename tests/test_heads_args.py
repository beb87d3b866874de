"""The heads API (``minitransformer.tools.heads``) checks every argument where it enters: a
mistake is the library's own error (a ``MiniTransformerError``) naming the function and the
fix, never a raw TypeError / ValueError / AttributeError from deep inside; and the natural
other forms of a valid argument (a head as a JSON list, NumPy integers, a stream of
batches, ``data.batching.Batch``) are accepted and mean the same."""

from __future__ import annotations

import json

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import nn
from minitransformer.config import TransformerConfig
from minitransformer.errors import ArgumentError, MiniTransformerError
from minitransformer.tools import heads

V = 20


@pytest.fixture(scope="module")
def setup():
    """A tiny Transformer (2 layers of 4 heads each kind), a batch, and a tiny TransformerLM."""
    mt.backend.manual_seed(0)
    model = nn.Transformer(TransformerConfig.preset("tiny", src_vocab=V, tgt_vocab=V), seed=0)
    rng = np.random.default_rng(3)
    src = rng.integers(3, V, size=(3, 7))
    tgt = rng.integers(3, V, size=(3, 6))
    lm = nn.TransformerLM(vocab=V, d_model=16, h=2, N=1, d_ff=32)
    return {"model": model, "src": src, "tin": tgt[:, :-1], "tout": tgt[:, 1:], "lm": lm}


WEIGHTS = np.full((1, 2, 3, 3), 1 / 3)
SCORES = {("cross", 0): np.array([0.1, 0.2])}

# (what is wrong, the call as a function of the setup, a word the message must hold)
BAD = [
    # set_heads: the model, then `off`
    ("set_heads: a TransformerLM", lambda s: heads.set_heads(s["lm"], []), "TransformerLM"),
    ("set_heads: no model", lambda s: heads.set_heads(None, []), "nn.Transformer"),
    ("set_heads: off None", lambda s: heads.set_heads(s["model"], None), "off must be"),
    ("set_heads: off an int", lambda s: heads.set_heads(s["model"], 5), "off must be"),
    ("set_heads: off a str", lambda s: heads.set_heads(s["model"], "cross"), "off must be"),
    ("set_heads: one bare triple", lambda s: heads.set_heads(s["model"], ("cross", 0, 1)),
     "not a list of heads"),
    ("set_heads: a pair", lambda s: heads.set_heads(s["model"], [("cross", 0)]), "triple"),
    ("set_heads: a bool layer", lambda s: heads.set_heads(s["model"], [("cross", True, 1)]),
     "layer"),
    ("set_heads: a float head", lambda s: heads.set_heads(s["model"], [("cross", 0, 1.0)]),
     "head index"),
    ("set_heads: a negative layer", lambda s: heads.set_heads(s["model"], [("cross", -1, 0)]),
     ">= 0"),
    ("set_heads: a layer beyond the model",
     lambda s: heads.set_heads(s["model"], [("cross", 2, 0)]), "2 layers of 4 heads"),
    ("set_heads: a head beyond the model",
     lambda s: heads.set_heads(s["model"], [["cross", 0, 4]]), "no such head"),
    ("set_heads: a huge layer", lambda s: heads.set_heads(s["model"], [("cross", 10**5000, 0)]),
     "no such head"),
    ("set_heads: an unknown kind", lambda s: heads.set_heads(s["model"], [("self", 0, 0)]),
     "one of"),
    ("set_heads: a list as kind", lambda s: heads.set_heads(s["model"], [(["cross"], 0, 0)]),
     "one of"),
    # attention_maps / model_head_stats
    ("attention_maps: a TransformerLM",
     lambda s: heads.attention_maps(s["lm"], s["src"], s["tin"]), "not support"),
    ("attention_maps: float ids",
     lambda s: heads.attention_maps(s["model"], s["src"] * 1.0, s["tin"]), "integer"),
    ("attention_maps: rows that differ",
     lambda s: heads.attention_maps(s["model"], s["src"], s["tin"][:2]), "rows"),
    ("attention_maps: ids beyond the vocabulary",
     lambda s: heads.attention_maps(s["model"], s["src"] + V, s["tin"]), "vocabulary"),
    ("model_head_stats: a TransformerLM",
     lambda s: heads.model_head_stats(s["lm"], s["src"], s["tin"]), "TransformerLM"),
    ("model_head_stats: maps a list",
     lambda s: heads.model_head_stats(s["model"], s["src"], s["tin"], [1]), "maps must be"),
    ("model_head_stats: maps with a bad key",
     lambda s: heads.model_head_stats(s["model"], s["src"], s["tin"], {"a": 1}), "key of maps"),
    ("model_head_stats: maps of other ids",
     lambda s: heads.model_head_stats(s["model"], s["src"], s["tin"],
                                      {("cross", 0): np.ones((3, 4, 2, 2))}), "shape"),
    # head_importance
    ("head_importance: a TransformerLM",
     lambda s: heads.head_importance(s["lm"], [(s["src"], s["tin"], s["tout"])]), "TransformerLM"),
    ("head_importance: no batches", lambda s: heads.head_importance(s["model"], []), "empty"),
    ("head_importance: batches None", lambda s: heads.head_importance(s["model"], None),
     "iterable"),
    ("head_importance: one bare triple",
     lambda s: heads.head_importance(s["model"], (s["src"], s["tin"], s["tout"])), "triple"),
    ("head_importance: a pair",
     lambda s: heads.head_importance(s["model"], [(s["src"], s["tin"])]), "triple"),
    ("head_importance: tgt_out of another shape",
     lambda s: heads.head_importance(s["model"], [(s["src"], s["tin"], s["tout"][:, 1:])]),
     "tgt_out"),
    ("head_importance: normalize a str",
     lambda s: heads.head_importance(s["model"], [(s["src"], s["tin"], s["tout"])], "no"),
     "normalize"),
    # prune_order
    ("prune_order: None", lambda s: heads.prune_order(None), "dict"),
    ("prune_order: a list", lambda s: heads.prune_order([0.1, 0.2]), "dict"),
    ("prune_order: a key of one word", lambda s: heads.prune_order({"cross": [0.1]}),
     "(kind, layer)"),
    ("prune_order: a NaN score", lambda s: heads.prune_order({("cross", 0): [np.nan, 1.0]}),
     "finite"),
    ("prune_order: scores of two axes", lambda s: heads.prune_order({("cross", 0): np.eye(2)}),
     "(H,)"),
    ("prune_order: words as scores", lambda s: heads.prune_order({("cross", 0): ["a", "b"]}),
     "finite"),
    ("prune_order: one number", lambda s: heads.prune_order({("cross", 0): 1.0}), "(H,)"),
    ("prune_order: a negative layer", lambda s: heads.prune_order({("cross", -1): [1.0]}),
     ">= 0"),
    # head_stats
    ("head_stats: a str", lambda s: heads.head_stats("abc"), "numbers"),
    ("head_stats: ragged lists", lambda s: heads.head_stats([[[[1.0], [0.5, 0.5]]]]), "numbers"),
    ("head_stats: no keys", lambda s: heads.head_stats(np.ones((1, 1, 3, 0))), ">= 1"),
    ("head_stats: no rows", lambda s: heads.head_stats(np.ones((1, 1, 0, 3))), ">= 1"),
    ("head_stats: NaN", lambda s: heads.head_stats(WEIGHTS * np.nan), "NaN"),
    ("head_stats: negative weights", lambda s: heads.head_stats(-WEIGHTS), "[0, 1]"),
    ("head_stats: valid of words", lambda s: heads.head_stats(WEIGHTS, [["a", "b", "c"]]),
     "valid"),
    ("head_stats: valid of 2s", lambda s: heads.head_stats(WEIGHTS, np.full((1, 3), 2)), "bools"),
    ("head_stats: valid of another shape",
     lambda s: heads.head_stats(WEIGHTS, np.ones((2, 3), dtype=bool)), "valid has shape"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "call", "word"), BAD, ids=[case for case, *_ in BAD])
def test_a_bad_argument_is_the_librarys_error(setup, case, call, word):
    with pytest.raises(MiniTransformerError) as info:
        call(setup)
    message = str(info.value)
    assert word in message, (case, message)
    assert "\n" not in message and len(message) < 400, message  # one readable line
    function = case.split(":")[0]
    assert message.startswith(function) or function not in ("set_heads", "prune_order"), message


def test_a_bad_call_leaves_the_model_as_it_was(setup):
    """A refused call changes no gate, mode or gradient flag (the checks come first, or
    the state is restored)."""
    model, src, tin, tout = setup["model"], setup["src"], setup["tin"], setup["tout"]
    assert heads.set_heads(model, [("cross", 0, 1)]) == 1
    gates = [m.head_mask for m in model.modules() if isinstance(m, nn.MultiHeadAttention)]
    for call in (lambda: heads.set_heads(model, [("cross", 9, 0)]),
                 lambda: heads.head_importance(model, [(src, tin, tout), (src, tin)])):  # fmt: skip
        with pytest.raises(ArgumentError):
            call()
    after = [m.head_mask for m in model.modules() if isinstance(m, nn.MultiHeadAttention)]
    assert all(a is b for a, b in zip(gates, after, strict=True))
    assert model.training and all(p.requires_grad for p in model.parameters())
    heads.set_heads(model)


# ------------------------------------------------------------------ valid other forms


def test_heads_from_json_lists_and_numpy_ints_are_the_same_heads(setup):
    model = setup["model"]
    off = [("cross", 1, 2), ("encoder self", 0, 3)]
    from_json = json.loads(json.dumps(off))  # [["cross", 1, 2], ["encoder self", 0, 3]]
    numpy_ints = [(kind, np.int64(layer), np.int32(h)) for kind, layer, h in off]

    def gates():
        return [None if m.head_mask is None else m.head_mask.numpy().tolist()
                for m in model.modules() if isinstance(m, nn.MultiHeadAttention)]  # fmt: skip

    assert heads.set_heads(model, off) == 2
    want = gates()
    for form in (from_json, numpy_ints, set(off), iter(off)):
        heads.set_heads(model)
        assert heads.set_heads(model, form) == 2
        assert gates() == want
    heads.set_heads(model)


def test_importance_takes_lists_streams_and_batch_objects(setup):
    from minitransformer.data.batching import Batch

    model, src, tin, tout = setup["model"], setup["src"], setup["tin"], setup["tout"]
    want = heads.head_importance(model, [(src, tin, tout)])
    batch = Batch(src=src, tgt_in=tin, tgt_out=tout, n_tokens=int(tout.size),
                  indices=np.arange(3))  # fmt: skip
    for batches in ([[src, tin, tout]], ((src, tin, tout) for _ in range(1)), [batch],
                    [(src.tolist(), tin.tolist(), tout.tolist())]):  # fmt: skip
        got = heads.head_importance(model, batches)
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-12)


def test_prune_order_takes_lists_and_numpy_layers(setup):
    order = heads.prune_order({("cross", np.int64(1)): [0.3, 0.1], ("encoder self", 0): [0.2]})
    assert order == [("cross", 1, 1), ("encoder self", 0, 0), ("cross", 1, 0)]
    assert all(type(layer) is int for _, layer, _ in order)


def test_stats_take_lists_and_valid_as_zeros_and_ones(setup):
    listed = heads.head_stats(WEIGHTS.tolist(), [[1, 1, 0]])
    arrays = heads.head_stats(WEIGHTS, np.array([[True, True, False]]))
    for name in heads.STATS:
        np.testing.assert_allclose(listed[name], arrays[name])
    rows = heads.model_head_stats(setup["model"], setup["src"].tolist(), setup["tin"].tolist())
    assert len(rows) == 3 * 2 * 4
