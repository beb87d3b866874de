import json
import warnings

import numpy as np
import pytest

from minitransformer.data.batching import BatchStream, batches, make_batch, pad
from minitransformer.data.vocab import BOS, EOS, PAD
from minitransformer.errors import ConfigError, TokenIdError


def random_pairs(n=500, seed=0):
    rng = np.random.default_rng(seed)
    return [
        (rng.integers(4, 30, rng.integers(1, 20)).tolist(),
         rng.integers(4, 30, rng.integers(0, 25)).tolist())
        for _ in range(n)
    ]  # fmt: skip


def test_make_batch_shapes_padding_bos_eos():
    b = make_batch([([5, 6, 7], [8, 9]), ([5], [10, 11, 12, 13])])
    assert b.src.dtype == np.int64 and b.tgt_in.dtype == np.int64
    np.testing.assert_array_equal(b.src, [[5, 6, 7], [5, PAD, PAD]])
    np.testing.assert_array_equal(b.tgt_in, [[BOS, 8, 9, PAD, PAD], [BOS, 10, 11, 12, 13]])
    np.testing.assert_array_equal(b.tgt_out, [[8, 9, EOS, PAD, PAD], [10, 11, 12, 13, EOS]])
    assert b.n_tokens == 3 + 5 == int((b.tgt_out != PAD).sum())
    assert len(b) == 2 and b.indices.tolist() == [0, 1]


def test_empty_target_and_bad_ids():
    b = make_batch([([4], [])])
    assert b.tgt_in.tolist() == [[BOS]] and b.tgt_out.tolist() == [[EOS]] and b.n_tokens == 1
    with pytest.raises(TokenIdError, match="negative"):
        pad([[1, -2]])
    with pytest.raises(ConfigError):
        make_batch([])


def test_one_pass_covers_everything_once_and_is_reproducible():
    pairs = random_pairs()
    seen = np.concatenate([b.indices for b in batches(pairs, 32, seed=1)])
    assert sorted(seen.tolist()) == list(range(len(pairs)))
    a = [b.indices.tolist() for b in batches(pairs, 32, seed=1)]
    assert a == [b.indices.tolist() for b in batches(pairs, 32, rng=np.random.default_rng(1))]
    assert a != [b.indices.tolist() for b in batches(pairs, 32, seed=2)]
    for b in batches(pairs, 32, seed=1):  # rows really are the pairs they claim to be
        for row, i in enumerate(b.indices):
            s, t = pairs[i]
            assert b.src[row, : len(s)].tolist() == s and b.tgt_out[row, len(t)] == EOS


def test_bucketing_wastes_less_padding():
    pairs = random_pairs(2_000)

    def fill(bucket):
        bs = list(batches(pairs, 32, seed=0, bucket=bucket))
        return sum((b.src != PAD).sum() for b in bs) / sum(b.src.size for b in bs)

    assert fill(True) > 0.9 > fill(False)


def test_unshuffled_order():
    pairs = random_pairs(100)
    plain = [b.indices.tolist() for b in batches(pairs, 16, shuffle=False, bucket=False)]
    assert sum(plain, []) == list(range(100))
    lengths = [len(pairs[i][0]) for b in batches(pairs, 16, shuffle=False) for i in b.indices]
    assert lengths == sorted(lengths)


def test_max_len_drop_truncate_error():
    pairs = [([4] * 3, [5] * 2), ([4] * 9, [5] * 2), ([4] * 2, [5] * 7)]
    with pytest.warns(UserWarning, match="2 of 3 pairs .* dropped"):
        kept = list(batches(pairs, 8, max_len=5, shuffle=False))
    assert [b.indices.tolist() for b in kept] == [[0]]
    with pytest.warns(UserWarning, match="truncated"):
        (b,) = list(batches(pairs, 8, max_len=5, too_long="truncate", shuffle=False, bucket=False))
    assert b.src.shape == (3, 5) and b.tgt_in.shape == (3, 5)
    assert b.src[1].tolist() == [4] * 5 and b.tgt_out[2].tolist() == [5, 5, 5, 5, EOS]
    with pytest.raises(TokenIdError, match="max_len=5"):
        list(batches(pairs, 8, max_len=5, too_long="error"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(batches(pairs, 8, max_len=10))  # nothing too long: no warning


def test_stream_runs_over_epochs_and_resumes_exactly():
    pairs = random_pairs(300)
    stream = BatchStream(pairs, 32, seed=7)
    per_epoch = stream.batches_per_epoch
    assert per_epoch == 10
    first = [next(stream).indices.tolist() for _ in range(per_epoch)]
    assert sorted(sum(first, [])) == list(range(300))
    for _ in range(3):
        next(stream)
    state = json.loads(json.dumps(stream.state_dict()))
    assert (state["epoch"], state["position"], state["step"]) == (1, 3, 13)
    expected = [next(stream).indices.tolist() for _ in range(25)]

    resumed = BatchStream(pairs, 32, seed=7)
    resumed.load_state_dict(state)
    assert [next(resumed).indices.tolist() for _ in range(25)] == expected
    assert resumed.step == 38
    with pytest.raises(ConfigError, match="batch_size"):
        BatchStream(pairs, 16, seed=7).load_state_dict(state)
