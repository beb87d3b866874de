"""Helpers (not tests) for tests/nn: tiny float64 models and a sampled gradient check."""

from __future__ import annotations

import numpy as np

import minitransformer as mt

PAD, BOS, EOS, V = 0, 1, 2, 11


def tiny_config(**overrides) -> mt.TransformerConfig:
    """d_model 8, h 2, N 2, d_ff 16, vocab 11, float64, no dropout: gradcheck-sized."""
    fields = dict(
        src_vocab=V, tgt_vocab=V, d_model=8, h=2, N=2, d_ff=16, dropout=0.0, max_len=16,
        label_smoothing=0.1, dtype="float64",
    )  # fmt: skip
    fields.update(overrides)
    return mt.TransformerConfig(**fields)


def tiny_batch(device: str = "cpu"):
    """src (2, 5), tgt_in (2, 4), tgt_out (2, 4) int64 on ``device``, with padding in each."""
    src = np.array([[3, 4, 5, 6, EOS], [7, 8, EOS, PAD, PAD]])
    tgt_in = np.array([[BOS, 9, 10, 3], [BOS, 4, 5, PAD]])
    tgt_out = np.array([[9, 10, 3, EOS], [4, 5, EOS, PAD]])
    return tuple(
        mt.backend.asarray(a, dtype="int64", device=device) for a in (src, tgt_in, tgt_out)
    )


def to_np(x) -> np.ndarray:
    return mt.backend.to_numpy(x.data if isinstance(x, mt.Tensor) else x)


def sampled_gradcheck(loss_fn, params, per_param: int | None = 4, eps=1e-6, rtol=1e-5, atol=1e-7):
    """Compare backward with central differences on ``per_param`` random elements of each
    parameter (all elements when None). The full check of every element of every
    parameter is O(#params) forward passes; a few per tensor catch a wrong backward with
    the same power for any bug that is not confined to a handful of elements."""
    for p in params:
        p.grad = None
    loss = loss_fn()
    loss.backward()
    rng = np.random.default_rng(0)
    for index, p in enumerate(params):
        analytic = to_np(p.grad) if p.grad is not None else np.zeros(p.shape)
        flats = (
            range(p.size)
            if per_param is None
            else rng.choice(p.size, min(per_param, p.size), replace=False)
        )
        for flat in flats:
            pos = tuple(int(i) for i in np.unravel_index(int(flat), p.shape))
            original = float(p.data[pos])
            with mt.no_grad():
                p.data[pos] = original + eps
                plus = float(loss_fn().item())
                p.data[pos] = original - eps
                minus = float(loss_fn().item())
                p.data[pos] = original
            numeric = (plus - minus) / (2 * eps)
            assert abs(analytic[pos] - numeric) <= atol + rtol * abs(numeric), (
                f"param {index} {p.shape} at {pos}: backward {analytic[pos]:.10g}, "
                f"finite differences {numeric:.10g}"
            )


def f64(module, device: str = "cpu"):
    """The module in float64 on ``device`` with its parameters nudged off their init (the
    zero biases would hide a transposed gradient)."""
    module.to(device, "float64")
    rng = np.random.default_rng(1)
    for p in module.parameters():
        p.data = mt.backend.asarray(to_np(p) + 0.3 * rng.standard_normal(p.shape), device=device)
    return module


def rnn_batch(device: str = "cpu"):
    """For the RNN encoder-decoder: src (2, 5) with padding at the end of the second row,
    tgt_in and tgt_out (2, 4), int64 on ``device``."""
    src = np.array([[3, 4, 5, 6, 2], [7, 8, 2, 0, 0]])
    tgt_in = np.array([[1, 6, 5, 4], [1, 8, 7, 0]])
    tgt_out = np.array([[6, 5, 4, 2], [8, 7, 2, 0]])
    return tuple(
        mt.backend.asarray(a, dtype="int64", device=device) for a in (src, tgt_in, tgt_out)
    )
