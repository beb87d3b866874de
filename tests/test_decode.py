"""Decoding: cached == uncached, beam search beats greedy where it should, stops and guards."""

from types import SimpleNamespace

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.config import TransformerConfig
from minitransformer.decode import beam_search, greedy_decode, length_penalty
from minitransformer.nn import Transformer
from minitransformer.nn.transformer import DecoderCache
from minitransformer.tensor import Tensor

PAD, BOS, EOS = 0, 1, 2


def _model(device="cpu", dtype="float64", max_len=16):
    cfg = TransformerConfig.preset(
        "tiny", src_vocab=15, tgt_vocab=15, max_len=max_len, dtype=dtype, dropout=0.0
    )
    return Transformer(cfg, seed=3).to(device)


def _src(device="cpu"):
    src = np.random.default_rng(1).integers(4, 15, (3, 6))
    src[2, 4:] = PAD  # a padded row
    return mt.backend.asarray(src, device=device)


def test_greedy_with_cache_equals_without(device):
    model = _model(device)
    src = _src(device)
    assert greedy_decode(model, src, max_len=12) == greedy_decode(
        model, src, max_len=12, use_cache=False
    )


def test_cached_logits_equal_full_recomputation():
    model = _model()
    src = _src()
    memory = model.encode(src)
    tgt = np.random.default_rng(2).integers(3, 15, (3, 7))
    tgt[:, 0] = BOS
    with mt.no_grad():
        full = model.decode(tgt, memory, src).numpy()
        cache = model.new_cache()
        steps = [model.decode(tgt[:, t : t + 1], memory, src, cache).numpy() for t in range(7)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-10)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_decoding_checks_the_source_once_not_at_every_step(search, monkeypatch):
    """src is checked by encode and at the cache's first step; later steps check only
    their new target ids."""
    from minitransformer.nn import transformer

    names = []

    def counted(name, *args, **kwargs):
        names.append(name)
        return check_ids(name, *args, **kwargs)

    check_ids = transformer.check_ids
    monkeypatch.setattr(transformer, "check_ids", counted)
    model = _model(max_len=40)
    # never emitted: decode all max_len steps. Not a valid id, so set past the frozen
    # config's refusal (a config is validated once, when made), on this model's config only
    object.__setattr__(model.cfg, "eos_id", -1)
    if search == "greedy":
        greedy_decode(model, _src(), max_len=12)
    else:
        beam_search(model, _src(), beam_size=2, max_len=12)
    assert names.count("src") == 2
    assert names.count("tgt_in") == 12


def test_greedy_respects_max_len_and_the_models_positions():
    model = _model(max_len=8)
    out = greedy_decode(model, _src(), max_len=100)  # more than the model has positions
    assert all(len(seq) <= 8 for seq in out)
    out = greedy_decode(model, _src(), max_len=3)
    assert all(len(seq) <= 3 for seq in out)


def test_decoding_never_emits_pad_or_bos():
    out = greedy_decode(_model(), _src(), max_len=12) + beam_search(_model(), _src(), 3)
    assert all(tok not in (PAD, BOS) for seq in out for tok in seq)


def test_decoding_restores_training_mode():
    model = _model()
    model.train()
    greedy_decode(model, _src(), max_len=4)
    beam_search(model, _src(), 2, max_len=4)
    assert model.training


def test_beam_of_one_is_greedy():
    model = _model()
    assert beam_search(model, _src(), beam_size=1) == greedy_decode(model, _src())


def test_beam_search_on_strict_device_matches_cpu():
    pytest.importorskip("array_api_strict")
    cpu = beam_search(_model(), _src(), beam_size=3, max_len=8)
    strict = beam_search(_model("strict:device1"), _src("strict:device1"), beam_size=3, max_len=8)
    assert cpu == strict


def test_length_penalty_formula():
    assert length_penalty(1, 0.0) == 1.0
    assert length_penalty(7, 0.6) == pytest.approx(2.0**0.6)


class TableModel:
    """A stand-in 'model' whose next-token distribution depends only on the last token.

    From BOS: token 3 (p 0.6) or token 4 (p 0.4). After 3: every token about equally likely
    (the best continuation, EOS, has p 0.3). After 4: EOS with p 0.99. Greedy takes 3 then
    EOS (0.6 * 0.3 = 0.18); the best sequence is 4 EOS (0.4 * 0.99 = 0.396). Another
    ``table`` (6 x 6, row: the last token, column: the next one's weight) gives other odds.
    """

    def __init__(self, table=None):
        self.cfg = SimpleNamespace(max_len=6, pad_id=PAD, bos_id=BOS, eos_id=EOS)
        self.training = False
        self.device = "cpu"
        if table is None:
            table = np.full((6, 6), 1e-6)
            table[BOS, 3], table[BOS, 4] = 0.6, 0.4
            table[3, :] = [1e-6, 1e-6, 0.3, 0.25, 0.25, 0.2]
            table[4, EOS] = 0.99
            table[4, 5] = 0.01
            table[5, EOS] = 1.0
        self.logits = np.log(table / table.sum(1, keepdims=True))

    def eval(self):
        self.training = False

    def train(self, mode=True):
        self.training = mode

    def new_cache(self, capacity=None):
        return DecoderCache()  # no layers: beam search's keep_rows has nothing to reorder

    def encode(self, src):
        return Tensor(np.zeros((src.shape[0], 1, 1)))

    def decode(self, tgt_in, memory, src, cache=None):
        last = np.asarray(tgt_in)[:, -1]
        return Tensor(self.logits[last][:, None, :].copy())


def test_beam_search_finds_what_greedy_misses():
    model = TableModel()
    src = np.ones((1, 2), dtype=np.int64)
    assert greedy_decode(model, src) == [[3]]
    assert beam_search(model, src, beam_size=2, alpha=0.0) == [[4]]
