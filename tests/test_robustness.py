# ruff: noqa: E501 - one row per bad input reads best on one line
"""Bad inputs into every public layer and op: one exception type per family of mistake
(minitransformer.errors) and a message that names the argument, what was expected, what
was given, and how to fix it. One row per mistake; each row's guard is what raises.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import backend, decode
from minitransformer.errors import (
    ArgumentError,
    ConfigError,
    DeviceError,
    DTypeError,
    ShapeError,
    TokenIdError,
)
from minitransformer.nn import StateDictKeyError
from minitransformer.train import TrainConfig

nn = mt.nn
STRICT = "strict:device1"


def t(*shape, dtype="float32", device="cpu"):
    """A Tensor of ones of the given shape (the values never matter here)."""
    return mt.tensor(np.ones(shape, dtype=dtype), device=device)


def ids(rows, device="cpu", dtype="int64"):
    return backend.asarray(np.asarray(rows, dtype=dtype), device=device)


def cfg():
    return mt.TransformerConfig(
        src_vocab=12, tgt_vocab=12, d_model=8, h=2, N=1, d_ff=16, max_len=6, dropout=0.0
    )


def model():
    return nn.Transformer(cfg())


def load(state, **kw):
    return nn.Linear(2, 3).load_state_dict(state, **kw)


def good_state(**replace):
    return {**nn.Linear(2, 3).state_dict(), **replace}


def config(**kw):
    fields = dict(src_vocab=12, tgt_vocab=12, d_model=8, h=2, N=1, d_ff=16, max_len=6)
    return mt.TransformerConfig(**{**fields, **kw})


NAN, INF = float("nan"), float("inf")

SRC, TGT = [[4, 5, 6]], [[1, 4, 5]]
M8 = "MultiHeadAttention"

# (id, call, exception type, regexes that must all appear in the message)
CASES = [
    # ---- Linear
    ("linear-width", lambda: nn.Linear(4, 3)(t(2, 5)), ShapeError, [r"\(2, 5\)", r"\(4, 3\)", "d_in"]),
    ("linear-0d", lambda: nn.Linear(4, 3)(t()), ShapeError, [r"shape \(\)", "d_in"]),
    ("linear-int-input", lambda: nn.Linear(4, 3)(t(2, 4, dtype="int64")), DTypeError,
     ["int64", "float", "Embedding"]),
    ("linear-device", lambda: nn.Linear(4, 3)(t(2, 4, device=STRICT)), DeviceError,
     [STRICT, "cpu", r"\.to\(device\)"]),
    ("F.linear-bias", lambda: F.linear(t(2, 3), t(3, 2), t(3)), ShapeError, [r"bias", r"\(3,\)", r"\(2,\)"]),
    # ---- LayerNorm
    ("layernorm-width", lambda: nn.LayerNorm(4)(t(2, 5)), ShapeError, ["gamma", r"\(4,\)", r"\(5,\)"]),
    ("layernorm-int", lambda: nn.LayerNorm(4)(t(2, 4, dtype="int64")), DTypeError, ["int64", "float32"]),
    ("layernorm-device", lambda: nn.LayerNorm(4)(t(2, 4, device=STRICT)), DeviceError, [STRICT, "cpu"]),
    # ---- Embedding
    ("embedding-float-ids", lambda: nn.Embedding(10, 4)(t(2, 3)), DTypeError, ["float32", "integer", "astype"]),
    ("embedding-bool-ids", lambda: nn.Embedding(10, 4)(np.array([[True]])), DTypeError, ["bool", "integer"]),
    ("embedding-id-too-big", lambda: nn.Embedding(10, 4)(np.array([[1, 10]])), TokenIdError,
     [r"\[0, 10\)", "10", "vocabulary"]),
    ("embedding-negative-id", lambda: nn.Embedding(10, 4)(np.array([[-1, 2]])), TokenIdError,
     [r"\[0, 10\)", "-1"]),
    ("embedding-device", lambda: nn.Embedding(10, 4)(ids([[1, 2]], STRICT)), DeviceError, [STRICT, "cpu"]),
    ("F.embedding-weight-1d", lambda: F.embedding(np.array([1]), t(4)), ShapeError, ["weight", r"\(V, D\)"]),
    # ---- MultiHeadAttention
    ("mha-query-rank", lambda: nn.MultiHeadAttention(8, 2)(t(3, 8), t(3, 8), t(3, 8)), ShapeError,
     ["query", r"\(3, 8\)", "3 axes", r"x\[None\]"]),
    ("mha-query-width", lambda: nn.MultiHeadAttention(8, 2)(t(2, 3, 6), t(2, 3, 6), t(2, 3, 6)),
     ShapeError, ["query has width 6", "d_model = 8"]),
    ("mha-key-width", lambda: nn.MultiHeadAttention(8, 2)(t(2, 3, 8), t(2, 3, 6), t(2, 3, 6)),
     ShapeError, ["key has width 6", "d_model = 8"]),
    ("mha-batch", lambda: nn.MultiHeadAttention(8, 2)(t(2, 3, 8), t(3, 4, 8), t(3, 4, 8)), ShapeError,
     [r"query \(2, 3, 8\)", r"key \(3, 4, 8\)", "batch size"]),
    ("mha-key-value-length", lambda: nn.MultiHeadAttention(8, 2)(t(2, 3, 8), t(2, 4, 8), t(2, 5, 8)),
     ShapeError, ["length S"]),
    ("mha-mask-not-broadcast",
     lambda: nn.MultiHeadAttention(8, 2)(t(2, 3, 8), t(2, 3, 8), t(2, 3, 8), mask=np.ones((2, 1, 1, 5), bool)),
     ShapeError, ["mask", r"\(2, 1, 1, 5\)", r"\(2, 2, 3, 3\)", r"\(B, 1, 1, S\)"]),
    ("mha-mask-rank-5",
     lambda: nn.MultiHeadAttention(8, 2)(t(1, 3, 8), t(1, 3, 8), t(1, 3, 8), mask=np.ones((1, 1, 1, 1, 3), bool)),
     ShapeError, ["mask", "does not broadcast"]),
    ("mha-mask-float",
     lambda: nn.MultiHeadAttention(8, 2)(t(2, 3, 8), t(2, 3, 8), t(2, 3, 8), mask=np.ones((2, 1, 1, 3), "f4")),
     DTypeError, ["mask", "float32", "bool", "True = may attend"]),
    ("mha-mask-device",
     lambda: nn.MultiHeadAttention(8, 2)(t(2, 3, 8), t(2, 3, 8), t(2, 3, 8),
                                         mask=backend.asarray(np.ones((2, 1, 1, 3), bool), device=STRICT)),
     DeviceError, [STRICT, "cpu"]),
    ("mha-int-query", lambda: nn.MultiHeadAttention(8, 2)(t(2, 3, 8, dtype="int64"), t(2, 3, 8), t(2, 3, 8)),
     DTypeError, ["int64", "float"]),
    # ---- PositionwiseFeedForward, PositionalEncoding
    ("ffn-width", lambda: nn.PositionwiseFeedForward(8, 16)(t(2, 3, 5)), ShapeError, [r"\(2, 3, 5\)", "d_in"]),
    ("ffn-device", lambda: nn.PositionwiseFeedForward(8, 16)(t(2, 3, 8, device=STRICT)), DeviceError, [STRICT]),
    ("positions-rank", lambda: nn.PositionalEncoding(8, 4)(t(3, 8)), ShapeError,
     [r"\(3, 8\)", r"\(B, T, d_model\)", "embed the token ids"]),
    ("positions-width", lambda: nn.PositionalEncoding(8, 4)(t(1, 3, 6)), ShapeError, [r"\(1, 3, 6\)", "d_model = 8"]),
    ("positions-too-long", lambda: nn.PositionalEncoding(8, 4)(t(1, 5, 8)), TokenIdError, ["T = 5", "max_len = 4"]),
    # ---- Encoder / Decoder stacks
    ("encoder-rank", lambda: nn.Encoder(1, 8, 2, 16)(t(3, 8)), ShapeError, ["query", "3 axes"]),
    ("encoder-width", lambda: nn.Encoder(1, 8, 2, 16)(t(2, 3, 5)), ShapeError, ["width 5", "d_model = 8"]),
    ("encoder-mask", lambda: nn.Encoder(1, 8, 2, 16)(t(2, 3, 8), np.ones((2, 1, 1, 4), bool)), ShapeError,
     ["mask", r"\(2, 1, 1, 4\)"]),
    ("decoder-memory-rank", lambda: nn.Decoder(1, 8, 2, 16)(t(2, 3, 8), t(4, 8)), ShapeError, ["key", "3 axes"]),
    ("decoder-memory-width", lambda: nn.Decoder(1, 8, 2, 16)(t(2, 3, 8), t(2, 4, 6)), ShapeError,
     ["key has width 6"]),
    ("decoder-memory-batch", lambda: nn.Decoder(1, 8, 2, 16)(t(2, 3, 8), t(3, 4, 8)), ShapeError, ["batch size"]),
    # ---- Transformer: token ids
    ("model-float-ids", lambda: model()(np.asarray(SRC, "f4"), TGT), DTypeError, ["src", "float32", "astype"]),
    ("model-python-floats", lambda: model()([[4.0, 5.0]], TGT), DTypeError, ["src", "float64"]),
    ("model-id-too-big", lambda: model()([[4, 12]], TGT), TokenIdError,
     ["src", r"\[0, 12\)", r"\[12\]", r"\(0, 1\)", "tokenizer"]),
    ("model-negative-tgt", lambda: model()(SRC, [[1, -1]]), TokenIdError, ["tgt_in", r"\[-1\]"]),
    ("model-src-too-long", lambda: model()([[4] * 7], TGT), TokenIdError, ["src", "length 7", "max_len = 6"]),
    ("model-tgt-too-long", lambda: model()(SRC, [[4] * 7]), TokenIdError, ["tgt_in", "length 7", "max_len"]),
    ("model-empty-batch", lambda: model()(np.zeros((0, 3), "i8"), np.zeros((0, 3), "i8")), ShapeError,
     ["src is empty", r"\(0, 3\)", "at least one"]),
    ("model-empty-sequence", lambda: model()(np.zeros((1, 0), "i8"), TGT), ShapeError, ["src is empty"]),
    ("model-ids-1d", lambda: model()(np.array([4, 5]), TGT), ShapeError, [r"\(B, L\)", r"\(2,\)", r"ids\[None, :\]"]),
    ("model-ids-3d", lambda: model()(np.ones((1, 2, 2), "i8"), TGT), ShapeError, [r"\(B, L\)", r"\(1, 2, 2\)"]),
    ("model-ragged-list", lambda: model()([[4, 5], [4]], TGT), ShapeError, ["src", "rectangular", "pad"]),
    ("model-batch-mismatch", lambda: model()(np.full((2, 3), 4), TGT), ShapeError, ["batch size"]),
    ("model-bad-memory", lambda: model().decode(TGT, t(1, 3, 6), SRC), ShapeError,
     ["memory", r"\(1, 3, 6\)", r"\(1, 3, 8\)", "model.encode"]),
    # ---- Transformer: devices
    ("batch-on-strict-model-on-cpu", lambda: model()(ids(SRC, STRICT), ids(TGT, STRICT)), DeviceError,
     ["src", STRICT, "'cpu'", "model.to"]),
    # (host NumPy ids for a model on another device are checked on the host and uploaded:
    #  tests/nn/test_nn_transformer.py checks that path)
    ("model-two-fake-devices", lambda: model().to(STRICT)(ids(SRC, "strict:device2"), ids(TGT, "strict:device2")),
     DeviceError, ["strict:device2", STRICT]),
    # ---- ops
    ("matmul-1d", lambda: F.matmul(t(3), t(3, 2)), ShapeError, ["at least 2 axes", r"\(3,\)"]),
    ("matmul-inner", lambda: F.matmul(t(2, 3), t(4, 2)), ShapeError, [r"\(2, 3\)", r"\(4, 2\)", "last axis"]),
    ("matmul-batch", lambda: F.matmul(t(2, 2, 3), t(3, 3, 2)), ShapeError, ["batch axes", r"\(2,\)", r"\(3,\)"]),
    ("matmul-device", lambda: F.matmul(t(2, 3), t(3, 2, device=STRICT)), DeviceError, ["MatMul", STRICT, "cpu"]),
    ("add-broadcast", lambda: t(2, 3) + t(4, 3), ShapeError, ["add", r"\(2, 3\)", r"\(4, 3\)", "broadcast"]),
    ("mul-broadcast", lambda: t(2, 3) * t(2, 4), ShapeError, ["mul", "broadcast"]),
    ("add-device", lambda: t(2, 3) + t(2, 3, device=STRICT), DeviceError, ["Add", STRICT]),
    ("sum-axis", lambda: t(2, 3).sum(axis=3), ShapeError, ["axis 3", "rank 2", r"\[-2, 1\]"]),
    ("reshape", lambda: t(2, 3).reshape(4, 2), ShapeError, [r"\(2, 3\)", r"\(4, 2\)"]),
    ("permute", lambda: t(2, 3).permute(0, 2), ShapeError, ["permutation"]),
    ("concat", lambda: F.concat([t(2, 3), t(2, 4)], axis=0), ShapeError, ["concat", "axis 0"]),
    ("softmax-int", lambda: F.softmax(t(3, dtype="int64")), DTypeError, ["softmax", "int64", "astype"]),
    ("softmax-axis", lambda: F.softmax(t(2, 3), axis=2), ShapeError, ["axis 2", r"\[-2, 1\]"]),
    ("layer_norm-device", lambda: F.layer_norm(t(2, 3), t(3, device=STRICT), t(3, device=STRICT)),
     DeviceError, [STRICT, "cpu"]),
    ("sdpa-rank", lambda: F.scaled_dot_product_attention(t(3), t(3), t(3)), ShapeError, ["rank >= 2"]),
    ("sdpa-d_k", lambda: F.scaled_dot_product_attention(t(1, 2, 4), t(1, 3, 5), t(1, 3, 5)), ShapeError,
     ["same d_k"]),
    ("sdpa-mask-list", lambda: F.scaled_dot_product_attention(t(1, 2, 4), t(1, 3, 4), t(1, 3, 4), mask=[[1, 1, 0]]),
     DTypeError, ["mask", "int64", "bool"]),
    ("sdpa-int", lambda: F.scaled_dot_product_attention(t(1, 2, 4, dtype="int64"), t(1, 3, 4), t(1, 3, 4)),
     DTypeError, ["q has dtype int64"]),
    ("cross_entropy-float-target", lambda: F.cross_entropy(t(2, 4), np.array([1.0, 2.0])), DTypeError,
     ["target", "float64", "astype"]),
    ("cross_entropy-target-shape", lambda: F.cross_entropy(t(2, 4), np.array([1, 2, 3])), ShapeError,
     ["target", r"\(3,\)", r"\(2,\)"]),
    ("cross_entropy-id-too-big", lambda: F.cross_entropy(t(2, 4), np.array([1, 4])), TokenIdError,
     ["target id 4", r"\[0, 4\)", "ignore_index"]),
    ("cross_entropy-negative-id", lambda: F.cross_entropy(t(2, 4), np.array([1, -2])), TokenIdError, ["-2"]),
    ("cross_entropy-device", lambda: F.cross_entropy(t(2, 4), ids([1, 2], STRICT)), DeviceError, [STRICT]),
    # ---- constructors: sizes, probabilities, switches
    ("Linear(-1, 5)", lambda: nn.Linear(-1, 5), ArgumentError, ["Linear", "d_in must be a positive int", "-1", r"Linear\(512, 2048\)"]),
    ("Linear(2.5, 3)", lambda: nn.Linear(2.5, 3), ArgumentError, ["d_in", "2.5", "positive int"]),
    ("Linear(4, 0)", lambda: nn.Linear(4, 0), ArgumentError, ["d_out", "got 0"]),
    ("Linear(True, 3)", lambda: nn.Linear(True, 3), ArgumentError, ["d_in", "True"]),
    ("Linear-bias-str", lambda: nn.Linear(2, 3, bias="no"), ArgumentError, ["bias must be True or False", "'no'"]),
    ("MHA(32, -4)", lambda: nn.MultiHeadAttention(32, -4), ArgumentError, [M8, "h must be a positive int", "-4", "number of heads"]),
    ("MHA(32, 0)", lambda: nn.MultiHeadAttention(32, 0), ArgumentError, [M8, "h must be", "got 0"]),
    ("MHA(32, 5)", lambda: nn.MultiHeadAttention(32, 5), ShapeError, [r"d_model \(32\) must be divisible by h \(5\)", r"pick h in \[1, 2, 4, 8, 16, 32\]"]),
    ("MHA(32.0, 4)", lambda: nn.MultiHeadAttention(32.0, 4), ArgumentError, ["d_model must be a positive int", "32.0"]),
    ("Dropout(1.5)", lambda: nn.Dropout(p=1.5), ArgumentError, ["Dropout", "p must be", r"\[0, 1\)", "1.5", "p=0.1"]),
    ("Dropout(-0.1)", lambda: nn.Dropout(p=-0.1), ArgumentError, ["p must be", "-0.1"]),
    ("Dropout(nan)", lambda: nn.Dropout(p=NAN), ArgumentError, ["p must be a finite number", "nan"]),
    ("LayerNorm(0)", lambda: nn.LayerNorm(0), ArgumentError, ["LayerNorm", "D must be a positive int", "got 0"]),
    ("LayerNorm-eps-0", lambda: nn.LayerNorm(4, eps=0.0), ArgumentError, ["eps must be a finite number > 0", "1e-5"]),
    ("Embedding(0, 8)", lambda: nn.Embedding(0, 8), ArgumentError, ["Embedding", "V must be a positive int", "vocabulary size"]),
    ("Embedding(10, -8)", lambda: nn.Embedding(10, -8), ArgumentError, ["D must be a positive int", "-8"]),
    ("FFN-d_ff-0", lambda: nn.PositionwiseFeedForward(8, 0), ArgumentError, ["PositionwiseFeedForward", "d_ff", "got 0"]),
    ("FFN-dropout-1", lambda: nn.PositionwiseFeedForward(8, 16, dropout=1.0), ArgumentError, ["PositionwiseFeedForward", "dropout"]),
    ("PE-max_len-0", lambda: nn.PositionalEncoding(8, 0), ArgumentError, ["PositionalEncoding", "max_len must be a positive int"]),
    ("PE-dropout-2", lambda: nn.PositionalEncoding(8, 4, dropout=2.0), ArgumentError, ["PositionalEncoding", "dropout", "2.0"]),
    ("PE-learned-str", lambda: nn.PositionalEncoding(8, 4, learned="yes"), ArgumentError, ["learned must be True or False"]),
    ("Encoder-N-0", lambda: nn.Encoder(0, 8, 2, 16), ArgumentError, ["Encoder", "N must be a positive int", "number of layers"]),
    ("Decoder-dropout", lambda: nn.Decoder(1, 8, 2, 16, dropout=-1.0), ArgumentError, ["Decoder", "dropout"]),
    ("Decoder-pre_norm-str", lambda: nn.Decoder(1, 8, 2, 16, pre_norm="false"), ArgumentError, ["pre_norm must be True or False"]),
    ("Transformer-dict", lambda: nn.Transformer({"d_model": 8}), ArgumentError, ["cfg must be a TransformerConfig", "dict", "from_dict"]),
    ("Transformer-seed", lambda: nn.Transformer(cfg(), seed=-1), ArgumentError, ["seed must be a non-negative int", "-1"]),
    ("causal_mask(-1)", lambda: nn.causal_mask(-1), ArgumentError, ["causal_mask", "T must be a non-negative int"]),
    ("model.to-int8", lambda: model().to(dtype="int8"), DTypeError, ["Transformer.to", "'float32' or 'float64'", "int8"]),
    # ---- TransformerConfig: checked at construction
    ("cfg-d_model-negative", lambda: config(d_model=-8), ConfigError, ["d_model must be a positive int, got -8", "preset"]),
    ("cfg-d_model-zero", lambda: config(d_model=0), ConfigError, ["d_model must be a positive int, got 0"]),
    ("cfg-d_model-float", lambda: config(d_model=8.0), ConfigError, ["d_model must be a positive int, got 8.0"]),
    ("cfg-N-bool", lambda: config(N=True), ConfigError, ["N must be a positive int, got True"]),
    ("cfg-h-zero", lambda: config(h=0), ConfigError, ["h must be a positive int, got 0"]),
    ("cfg-dropout-1", lambda: config(dropout=1.0), ConfigError, [r"dropout must be in \[0, 1\)", "1.0"]),
    ("cfg-dropout-nan", lambda: config(dropout=NAN), ConfigError, ["dropout must be in", "nan"]),
    ("cfg-dropout-str", lambda: config(dropout="0.1"), ConfigError, ["dropout must be in", "'0.1'"]),
    ("cfg-label_smoothing-nan", lambda: config(label_smoothing=NAN), ConfigError, ["label_smoothing must be in"]),
    ("cfg-not-divisible", lambda: config(d_model=10, h=4), ConfigError, [r"d_model \(10\) must be divisible by h \(4\)", "pick e.g."]),
    ("cfg-pre_norm-str", lambda: config(pre_norm="false"), ConfigError, ["pre_norm must be True or False", "'false'"]),
    ("cfg-pad_id-bool", lambda: config(pad_id=True), ConfigError, ["pad_id must be a non-negative int"]),
    ("cfg-max_len-huge", lambda: config(max_len=100_000_000_000), ConfigError, ["max_len = 100,000,000,000 is above the cap", "GiB", "e.g. 256"]),
    ("cfg-too-many-parameters", lambda: config(src_vocab=10**7, tgt_vocab=10**7, d_model=1024, h=8), ConfigError, ["parameters", "GiB", "reduce d_model"]),
    # ---- TrainConfig: checked at construction, not after training
    ("train-final_eval_split", lambda: TrainConfig(final_eval_split="x"), ConfigError, ["final_eval_split must be one of train, valid, test", "'x'"]),
    ("train-task", lambda: TrainConfig(task="nope"), ConfigError, ["unknown task 'nope'", "copy"]),
    ("train-steps", lambda: TrainConfig(steps=0), ConfigError, ["steps must be a positive integer", "got 0"]),
    ("train-peak_lr-nan", lambda: TrainConfig(peak_lr=NAN), ConfigError, [r"peak_lr must be in \(0, 1\)", "nan"]),
    ("train-clip_norm-inf", lambda: TrainConfig(clip_norm=INF), ConfigError, ["clip_norm must be positive and finite"]),
    ("train-seed", lambda: TrainConfig(seed=-1), ConfigError, ["seed must be a non-negative integer"]),
    ("train-preset", lambda: TrainConfig(preset="huge"), ConfigError, ["preset must be None or one of", "tiny"]),
    ("train-model_overrides", lambda: TrainConfig(model_overrides={"dmodel": 8}), ConfigError, ["model_overrides", "unknown", "dmodel"]),
    # ---- mt.tensor and dtypes
    ("tensor-strings", lambda: mt.tensor(["a"]), DTypeError, ["mt.tensor", "must be numbers", r"\['a'\]", "vocab.tokenize"]),
    ("tensor-None", lambda: mt.tensor(None), DTypeError, ["mt.tensor", "NoneType"]),
    ("tensor-object", lambda: mt.tensor(object()), DTypeError, ["mt.tensor", "object"]),
    ("tensor-ragged", lambda: mt.tensor([[1, 2], [3]]), ShapeError, ["ragged", "pad"]),
    ("tensor-dtype", lambda: mt.tensor([1.0], dtype="float16x"), DTypeError, ["'float16x'", "float32"]),
    ("Tensor-strings", lambda: mt.Tensor(["a"]), DTypeError, ["Tensor", "must be numbers"]),
    ("astype-dtype", lambda: t(2).astype("float7"), DTypeError, ["astype", "'float7'"]),
    # ---- load_state_dict
    ("load-None", lambda: load(None), ArgumentError, ["load_state_dict into Linear", "must be a dict", "NoneType", "state_dict"]),
    ("load-list", lambda: load([1, 2]), ArgumentError, ["must be a dict", "list"]),
    ("load-str-values", lambda: load({"weight": "abc", "bias": "x"}), DTypeError, ["numeric arrays", r"weight \(str\)"]),
    ("load-missing-unexpected", lambda: load({"weight": np.ones((2, 3)), "zzz": np.ones(3)}), StateDictKeyError,
     [r"missing keys: \['bias'\]", r"unexpected keys: \['zzz'\]", "strict=False"]),
    ("load-wrong-shape", lambda: load(good_state(weight=np.ones((3, 2)))), ShapeError, [r"weight: checkpoint \(3, 2\) vs model \(2, 3\)", "same config"]),
    ("load-nan", lambda: load(good_state(weight=np.full((2, 3), np.nan))), ArgumentError, ["weight hold NaN or Inf", "earlier checkpoint"]),
    ("load-strict-str", lambda: load(good_state(), strict="no"), ArgumentError, ["strict must be True or False"]),
    # ---- functional arguments
    ("transpose-axis", lambda: F.transpose(t(2, 3), 0, 5), ShapeError, ["transpose", "axis2=5", r"\(2, 3\)", r"\[-2, 1\]"]),
    ("softmax-float-axis", lambda: F.softmax(t(2, 3), axis=1.5), ShapeError, ["axis 1.5", r"\[-2, 1\]"]),
    ("dropout-p", lambda: F.dropout(t(2), 1.5), ArgumentError, ["dropout", "p=1.5", r"\[0, 1\)"]),
    ("dropout-p-nan", lambda: F.dropout(t(2), NAN), ArgumentError, ["p=nan"]),
    ("layer_norm-eps", lambda: F.layer_norm(t(2, 3), t(3), t(3), eps=-1.0), ArgumentError, ["layer_norm", "eps=-1.0", ">= 0", "1e-5"]),
    ("cross_entropy-smoothing", lambda: F.cross_entropy(t(2, 4), np.array([1, 2]), label_smoothing=1.5), ArgumentError, ["label_smoothing=1.5", r"\[0, 1\]"]),
    ("cross_entropy-reduction", lambda: F.cross_entropy(t(2, 4), np.array([1, 2]), reduction="avg"), ArgumentError, ["reduction='avg'", "'mean'"]),
    ("cross_entropy-ignore_index", lambda: F.cross_entropy(t(2, 4), np.array([1, 2]), ignore_index=0.5), ArgumentError, ["ignore_index must be an int"]),
    # ---- decoding
    ("beam-0", lambda: decode.beam_search(model(), SRC, beam_size=0), ArgumentError, ["beam_search", "beam_size must be a positive int, got 0", "paper uses 4"]),
    ("beam--3", lambda: decode.beam_search(model(), SRC, beam_size=-3), ArgumentError, ["beam_size", "-3"]),
    ("beam-2.5", lambda: decode.beam_search(model(), SRC, beam_size=2.5), ArgumentError, ["beam_size", "2.5"]),
    ("alpha-nan", lambda: decode.beam_search(model(), SRC, alpha=NAN), ArgumentError, ["alpha must be a finite number >= 0", "nan", "0.6"]),
    ("alpha-inf", lambda: decode.beam_search(model(), SRC, alpha=INF), ArgumentError, ["alpha", "inf"]),
    ("alpha--5", lambda: decode.beam_search(model(), SRC, alpha=-5), ArgumentError, ["alpha", "-5"]),
    ("length_penalty-nan", lambda: decode.length_penalty(3, NAN), ArgumentError, ["length_penalty", "alpha"]),
    ("beam-max_len-0", lambda: decode.beam_search(model(), SRC, max_len=0), ArgumentError, ["max_len must be a positive int, got 0", "None"]),
    ("greedy-max_len--2", lambda: decode.greedy_decode(model(), SRC, max_len=-2), ArgumentError, ["greedy_decode", "max_len", "-2"]),
    ("greedy-not-a-model", lambda: decode.greedy_decode("model", SRC), ArgumentError, ["model must be an mt.nn.Transformer", "str"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "kind", "patterns"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_gets_one_clear_error(call, kind, patterns):
    pytest.importorskip("array_api_strict")
    with pytest.raises(Exception) as info:  # noqa: PT011 - the exact type is checked below
        call()
    err = info.value
    assert type(err) is kind, f"{type(err).__name__}: {err}"
    message = str(err)
    for pattern in patterns:
        assert _search(pattern, message), f"{pattern!r} not in: {message}"
    assert "\n" not in message  # one line: fits a CLI error and a log record


def _search(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None


def test_every_family_is_a_builtin_exception_too():
    """`except ValueError` / `except TypeError` keep working for callers that do not know
    this library's types."""
    with pytest.raises(ValueError, match="broadcast"):
        t(2, 3) + t(4, 3)
    with pytest.raises(TypeError, match="integer"):
        nn.Embedding(10, 4)(t(1, 2))
    with pytest.raises(RuntimeError, match="device"):
        t(2) + t(2, device=STRICT)
    with pytest.raises(TypeError, match="d_in"):  # a float size: TypeError, as range(2.5)
        nn.Linear(2.5, 3)
    with pytest.raises(ValueError, match="d_in"):  # a negative size: ValueError
        nn.Linear(-1, 3)


def test_valid_inputs_still_pass():
    """The guards refuse only mistakes: broadcasting, masks as lists, and Python id lists
    of a valid shape go through."""
    assert (t(2, 3) + t(1, 3)).shape == (2, 3)
    assert (t(2, 3) * 2.0).shape == (2, 3)
    assert F.matmul(t(2, 1, 3, 4), t(5, 4, 2)).shape == (2, 5, 3, 2)
    out = F.scaled_dot_product_attention(
        t(1, 2, 4), t(1, 3, 4), t(1, 3, 4), mask=[[True, True, False]]
    )
    assert out.shape == (1, 2, 4)
    assert model()(SRC, TGT).shape == (1, 3, 12)


def test_optim_is_reachable_from_the_top_level_in_a_fresh_interpreter():
    """`import minitransformer as mt; mt.optim.Adam(...)` with nothing else imported first
    (a fresh process: this test session has long imported minitransformer.optim)."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import minitransformer as mt, numpy as np\n"
        "p = mt.nn.Parameter(np.ones(3, dtype='float32'))\n"
        "opt = mt.optim.Adam([p], lr=0.1)\n"
        "p.grad = np.ones(3, dtype='float32')\n"
        "opt.step()\n"
        "sched = mt.optim.NoamSchedule(opt, d_model=8, warmup=4)\n"
        "print(type(opt).__name__, type(sched).__name__, float(p.data[0]) < 1.0)\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Adam", "NoamSchedule", "True"]


def test_missing_gpu_is_reported_once_not_per_test():
    """Without CuPy and a GPU, the cuda:0 variants are deselected and the summary says so
    in one line, while real skips keep their own lines (-ra)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/ops/test_reduce.py",
        ],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    gpu_lines = [line for line in lines if "CuPy with a GPU" in line]
    if mt.cuda_available():
        assert gpu_lines == [], done.stdout
    else:
        assert len(gpu_lines) == 1, done.stdout
        assert "deselected" in gpu_lines[0]
        assert not any(line.startswith("SKIPPED") and "cuda" in line.lower() for line in lines)
