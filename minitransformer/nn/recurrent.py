"""Recurrent encoder-decoders: what the Transformer replaced (lesson 12).

Cells, x (B, d_in), h (B, H) -> h' (B, H):
    RNNCell  h' = tanh(x W_x + h W_h + b)
    GRUCell  z = sigmoid(x W_xz + h W_hz + b_z)            update gate
             r = sigmoid(x W_xr + h W_hr + b_r)            reset gate
             n = tanh(x W_xn + (r * h) W_hn + b_n)         candidate
             h' = (1 - z) * h + z * n                      (Cho et al., 2014)
Backward through a step is the chain rule through these ops (tanh' = 1 - y^2,
sigmoid' = y (1 - y), ops/activations.py); through k steps it is a product of k Jacobians
dh_t/dh_{t-1}, which is why gradients to distant tokens shrink (or blow up).

RNNSeq2Seq(src_vocab, tgt_vocab, cell="gru", attention=None | "additive" | "dot",
           bidirectional=False):
    src (B, S) ─ embed ─ encoder cell, S sequential steps ─► memory (B, S, H), h_S (B, H)
    tgt_in (B, T) ─ embed ─ decoder cell from h_S, T sequential steps ─► logits (B, T, V)
Without attention the whole source reaches the decoder through h_S alone: the path from
source token j to output t is (S - 1 - j) + (t + 1) recurrent steps. With attention
(Bahdanau et al., 2015) each decoder step t first reads a context c_t = sum_s a_ts memory_s,
with
    additive ("Bahdanau")  score(q, k_s) = v^T tanh(q W_q + k_s W_k + b)  (b: W_k's bias)
    dot ("scaled dot")     score(q, k_s) = (q W_q) . k_s / sqrt(H)
a_t = softmax_s(score(h_{t-1}, memory_s)) over real (non-pad) source tokens; then
h_t = cell([y_{t-1}; c_t], h_{t-1}) and logits_t = [h_t; c_t] W_o + b_o. The path from
source token j to output t is then 2 steps (the encoder step that reads x_j and writes
memory_j, then the decoder step that reads memory_j through attention and emits output t),
whatever the distance.

Bidirectional encoder (Bahdanau et al. used one): a second cell reads the source backwards,
    fwd_j = cell_f(x_j, fwd_{j-1})  (fwd_{-1} = 0),   bwd_j = cell_b(x_j, bwd_{j+1})  (bwd_S = 0),
so memory_j = fwd_j + bwd_j (B, S, H) sees the whole source around j, and the decoder starts
from fwd_{S-1} + bwd_0 (B, H): both directions' states after reading every token. The two
are summed (Bahdanau concatenated them), so every size downstream stays H. Padding at the
end of a row (pad_id) is skipped by both: the backward cell stays at 0 until it meets the
row's last real token. Backward is the chain rule through both unrolled loops (a sum's
gradient goes to both terms; the time reversal is a slice, its gradient the reversed slice).

``attention_weights(True)`` keeps the last forward's attention weights a (B, T, S) in
``last_weights`` (a raw array, for heatmaps); ``greedy_decode(src, max_len)`` is the
decoder's own step loop at inference: one cell step per output token.

The loops over time are inherent to recurrence (step t needs h_{t-1}); what does not depend
on h is hoisted out of them: the input projection of the embedding table (each step then
looks its tokens up, see ``looked_up``), the attention keys, and the output projection are
one batched op each.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

from .. import backend, checks
from .. import functional as F
from ..errors import ArgumentError, ConfigError, ShapeError
from ..tensor import Tensor, no_grad
from .inputs import check_ids
from .layers import Embedding, Linear
from .module import Module

CELLS = ("rnn", "gru")
ATTENTIONS = (None, "additive", "dot")


def _check_step(cell: str, x: Tensor, h: Tensor, d_in: int, H: int) -> None:
    if x.ndim != 2 or x.shape[1] != d_in:
        raise ShapeError(f"{cell}: x has shape {tuple(x.shape)}, need (B, d_in={d_in})")
    if tuple(h.shape) != (x.shape[0], H):
        raise ShapeError(
            f"{cell}: h has shape {tuple(h.shape)}, need (B, H) = ({x.shape[0]}, {H}); "
            "start from zeros of that shape (cell.zero_state(B))"
        )


def _positive_ints(where: str, **sizes: Any) -> None:
    bad = [
        f"{k}={v!r}"
        for k, v in sizes.items()
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0
    ]
    if bad:
        raise ConfigError(f"{where}: {', '.join(bad)}; each size must be a positive int")


class _Cell(Module):
    """Shared by the cells: ``w_x`` projects inputs to the gates (hoistable over time),
    ``step(xw, h)`` does the part that needs h."""

    n_gates = 1

    def __init__(self, d_in: int, d_hidden: int, generator: backend.Generator | None):
        super().__init__()
        _positive_ints(type(self).__name__, d_in=d_in, d_hidden=d_hidden)
        self.d_in, self.d_hidden = d_in, d_hidden
        self.w_x = Linear(d_in, self.n_gates * d_hidden, generator=generator)  # + the biases

    def forward(self, x: Tensor, h: Tensor) -> Tensor:
        """One step: x (B, d_in), h (B, H) -> h' (B, H)."""
        _check_step(type(self).__name__, x, h, self.d_in, self.d_hidden)
        return self.step(self.w_x(x), h)

    def step(self, xw: Tensor, h: Tensor) -> Tensor:
        raise NotImplementedError

    def zero_state(self, B: int) -> Tensor:
        """h_0 = 0 (B, H) in the cell's dtype and on its device."""
        w = self.w_x.weight
        xp = backend.namespace(w.data)
        return Tensor(xp.zeros((B, self.d_hidden), dtype=w.dtype, device=w.data.device))

    def extra_repr(self) -> str:
        return f"d_in={self.d_in}, d_hidden={self.d_hidden}"


class RNNCell(_Cell):
    """h' = tanh(x W_x + h W_h + b); W_x (d_in, H), W_h (H, H)."""

    def __init__(self, d_in: int, d_hidden: int, generator: backend.Generator | None = None):
        super().__init__(d_in, d_hidden, generator)
        self.w_h = Linear(d_hidden, d_hidden, bias=False, generator=generator)

    def step(self, xw: Tensor, h: Tensor) -> Tensor:
        return F.tanh(xw + self.w_h(h))


class GRUCell(_Cell):
    """Gated recurrent unit; the formulas are in the module docstring. W_x (d_in, 3H) holds
    [W_xz | W_xr | W_xn], W_hzr (H, 2H) holds [W_hz | W_hr]."""

    n_gates = 3

    def __init__(self, d_in: int, d_hidden: int, generator: backend.Generator | None = None):
        super().__init__(d_in, d_hidden, generator)
        self.w_hzr = Linear(d_hidden, 2 * d_hidden, bias=False, generator=generator)
        self.w_hn = Linear(d_hidden, d_hidden, bias=False, generator=generator)

    def step(self, xw: Tensor, h: Tensor) -> Tensor:
        H = self.d_hidden
        zr = F.sigmoid(xw[:, : 2 * H] + self.w_hzr(h))  # (B, 2H)
        z, r = zr[:, :H], zr[:, H:]
        n = F.tanh(xw[:, 2 * H :] + self.w_hn(r * h))  # (B, H)
        return h + z * (n - h)  # = (1 - z) h + z n


def make_cell(cell: str, d_in: int, d_hidden: int, generator: Any = None) -> _Cell:
    """ "rnn" -> RNNCell, "gru" -> GRUCell."""
    if cell not in CELLS:
        raise ConfigError(f"cell={cell!r} is not a recurrent cell; choose one of {CELLS}")
    return (RNNCell if cell == "rnn" else GRUCell)(d_in, d_hidden, generator)


def run_cell(
    cell: _Cell, xw: Callable[[int], Tensor], L: int, h: Tensor, keep: Any = None
) -> tuple[Tensor, Tensor]:
    """Unroll ``cell`` for L steps from h (B, H): ``xw(t)`` gives step t's input projection
    (B, G*H) -> states (B, L, H), last h (B, H). ``keep`` (B, L) float 1/0 freezes h at
    padding."""
    outs = []
    for t in range(L):  # sequential: step t needs h_{t-1}
        h_new = cell.step(xw(t), h)
        h = h_new if keep is None else h + (h_new - h) * keep[:, t : t + 1]
        outs.append(h[:, None])
    return F.concat(outs, axis=1), h


def sliced(xw: Tensor) -> Callable[[int], Tensor]:
    """Step inputs from a projected sequence xw (B, L, G*H): t -> xw[:, t]."""
    return lambda t: xw[:, t]


def looked_up(ids: Any, embed: Embedding, w_x: Linear) -> Callable[[int], Tensor]:
    """Step inputs for token ids (B, L): t -> (E W_x + b)[ids[:, t]], which equals
    embed(ids[:, t]) W_x + b. The (V, G*H) table is projected once per pass, so each step is
    a lookup, and each step's backward touches only that table (slicing one projected
    (B, L, G*H) tensor would cost a full-size gradient per step, O(L^2) in all). Cheaper
    than projecting the sequence while V <= B*L, as in the lessons."""
    table = w_x(embed.weight)  # (V, G*H)
    return lambda t: F.embedding(ids[:, t], table, validate=False)


class _Attention(Module):
    """Shared by the scorers: ``keys(memory)`` once per source, ``forward`` per step."""

    def forward(self, query: Tensor, memory: Tensor, keys: Tensor, bias: Any) -> Tensor:
        """query (B, Hq), memory (B, S, Hk), bias (B, S) 0 / -1e9 -> context (B, Hk)."""
        a = self.weights(query, keys, bias)  # (B, S)
        return F.matmul(a[:, None], memory)[:, 0]  # (B, 1, S) @ (B, S, Hk) -> (B, Hk)

    def weights(self, query: Tensor, keys: Any, bias: Any) -> Tensor:
        """a = softmax_s(score(query, key_s) + bias_s) (B, S): each row sums to 1."""
        return F.softmax(self.scores(query, keys) + bias, axis=-1)


class AdditiveAttention(_Attention):
    """Bahdanau: score(q, k_s) = v^T tanh(q W_q + k_s W_k + b); W_q (Hq, A), W_k (Hk, A)."""

    def __init__(self, d_query: int, d_key: int, d_attn: int, generator: Any = None):
        super().__init__()
        self.w_q = Linear(d_query, d_attn, bias=False, generator=generator)
        self.w_k = Linear(d_key, d_attn, generator=generator)
        self.v = Linear(d_attn, 1, bias=False, generator=generator)

    def keys(self, memory: Tensor) -> Tensor:
        return self.w_k(memory)  # (B, S, A)

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        e = F.tanh(keys + self.w_q(query)[:, None])  # (B, S, A)
        return self.v(e)[:, :, 0]  # (B, S)


class DotProductAttention(_Attention):
    """score(q, k_s) = (q W_q) . k_s / sqrt(Hk); W_q (Hq, Hk) (Luong's "general" score,
    scaled as in the Transformer)."""

    def __init__(self, d_query: int, d_key: int, generator: Any = None):
        super().__init__()
        self.w_q = Linear(d_query, d_key, bias=False, generator=generator)
        self.scale = 1.0 / math.sqrt(d_key)

    def keys(self, memory: Tensor) -> Tensor:
        return F.transpose(memory) * self.scale  # (B, Hk, S)

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        return F.matmul(self.w_q(query)[:, None], keys)[:, 0]  # (B, 1, Hk) @ (B, Hk, S)


class RNNSeq2Seq(Module):
    """An RNN encoder-decoder, with or without attention; see the module docstring.

    forward(src (B, S), tgt_in (B, T) int ids) -> logits (B, T, tgt_vocab). Ids equal to
    ``pad_id`` in src leave the encoder state unchanged and get no attention.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d_embed: int = 32,
        d_hidden: int = 64,
        cell: str = "gru",
        attention: str | None = None,
        pad_id: int = 0,
        seed: int = 0,
        bidirectional: bool = False,
    ):
        super().__init__()
        _positive_ints(
            "RNNSeq2Seq",
            src_vocab=src_vocab,
            tgt_vocab=tgt_vocab,
            d_embed=d_embed,
            d_hidden=d_hidden,
        )
        if attention not in ATTENTIONS:
            raise ConfigError(f"attention={attention!r}; choose one of {ATTENTIONS}")
        if not isinstance(pad_id, int) or not 0 <= pad_id < min(src_vocab, tgt_vocab):
            raise ConfigError(f"pad_id={pad_id!r} must be an id inside both vocabularies")
        if not isinstance(bidirectional, bool):
            raise ConfigError(f"bidirectional={bidirectional!r} must be True or False")
        gen = backend.Generator(seed, "cpu")
        self.src_vocab, self.tgt_vocab, self.pad_id = src_vocab, tgt_vocab, pad_id
        self.cell_name, self.attention_name = cell, attention
        H = d_hidden
        self.src_embed = Embedding(src_vocab, d_embed, generator=gen)
        self.encoder = make_cell(cell, d_embed, H, gen)
        self.bidirectional = bidirectional
        if bidirectional:
            self.encoder_back = make_cell(cell, d_embed, H, gen)  # reads the source backwards
        self.tgt_embed = Embedding(tgt_vocab, d_embed, generator=gen)
        self.decoder = make_cell(cell, d_embed, H, gen)
        if attention is not None:
            self.attention = (
                AdditiveAttention(H, H, H, gen)
                if attention == "additive"
                else DotProductAttention(H, H, gen)
            )
            self.w_c = Linear(H, self.decoder.n_gates * H, bias=False, generator=gen)
        self.out = Linear(2 * H if attention else H, tgt_vocab, generator=gen)
        self.store_weights, self.last_weights = False, None

    def encode(self, src: Any) -> tuple[Tensor, Tensor, Any]:
        """src (B, S) ids -> memory (B, S, H), final state (B, H), keep (B, S) float 1/0.
        Bidirectional: memory = fwd + bwd (B, S, H), final state fwd_{S-1} + bwd_0."""
        src = check_ids("src", src, self.src_vocab, sys.maxsize, self.device)
        xp, w = backend.namespace(src), self.out.weight
        keep = xp.astype(src != self.pad_id, w.dtype)  # (B, S)
        B, S = src.shape
        xw = looked_up(src, self.src_embed, self.encoder.w_x)  # t -> (B, G*H)
        memory, h = run_cell(self.encoder, xw, S, self.encoder.zero_state(B), keep)
        if self.bidirectional:  # step t of the backward cell reads position S - 1 - t
            xb = looked_up(src, self.src_embed, self.encoder_back.w_x)
            h0 = self.encoder_back.zero_state(B)
            back, h_b = run_cell(self.encoder_back, lambda t: xb(S - 1 - t), S, h0, keep[:, ::-1])
            memory, h = memory + back[:, ::-1], h + h_b  # back[:, ::-1][:, j] = bwd_j
        return memory, h, keep

    def _step(self, yw: Tensor, h: Tensor, memory: Tensor, keys: Any, bias: Any) -> tuple:
        """One decoder step: yw (B, G*H) the input projection of y_{t-1}, h = h_{t-1} ->
        (h_t (B, H), features (B, 2H or H) for the output layer, weights a_t (B, S) or None)."""
        if self.attention_name is None:
            h = self.decoder.step(yw, h)
            return h, h, None
        a = self.attention.weights(h, keys, bias)  # (B, S)
        c = F.matmul(a[:, None], memory)[:, 0]  # (B, H)
        h = self.decoder.step(yw + self.w_c(c), h)
        return h, F.concat([h, c], axis=-1), a

    def forward(self, src: Any, tgt_in: Any) -> Tensor:
        """src (B, S), tgt_in (B, T) ids -> logits (B, T, tgt_vocab)."""
        memory, h, keep = self.encode(src)
        tgt = check_ids("tgt_in", tgt_in, self.tgt_vocab, sys.maxsize, self.device)
        if tgt.shape[0] != memory.shape[0]:
            raise ShapeError(f"src has batch size {memory.shape[0]} but tgt_in {tgt.shape[0]}")
        yw = looked_up(tgt, self.tgt_embed, self.decoder.w_x)  # t -> (B, G*H)
        if self.attention_name is None:
            states, _ = run_cell(self.decoder, yw, tgt.shape[1], h)
            return self.out(states)  # (B, T, V)
        keys = self.attention.keys(memory)
        bias = (keep - 1) * 1e9  # (B, S): 0 for tokens, -1e9 for padding
        outs, weights = [], []
        for t in range(tgt.shape[1]):  # sequential: the query is h_{t-1}
            h, feats, a = self._step(yw(t), h, memory, keys, bias)
            outs.append(feats[:, None])  # (B, 1, 2H)
            if self.store_weights:
                weights.append(a.data[:, None])
        if self.store_weights:
            self.last_weights = backend.namespace(bias).concat(weights, axis=1)  # (B, T, S)
        return self.out(F.concat(outs, axis=1))  # (B, T, 2H) -> (B, T, V)

    def attention_weights(self, on: bool = True) -> None:
        """Keep (on=True) the attention weights of the last forward in ``.last_weights``
        (B, T, S), a raw array; models without attention keep None."""
        self.store_weights = checks.flag("attention_weights", "on", on)
        self.last_weights = None

    def greedy_decode(
        self, src: Any, max_len: int, bos_id: int = 1, eos_id: int = 2
    ) -> list[list[int]]:
        """src (B, S) ids -> B output id lists (no BOS/EOS): the arg-max token at each step,
        fed back as the next input. Encodes once, then one decoder step per token: the
        state h carries the prefix, so step t costs the same for every t."""
        max_len = checks.positive_int("greedy_decode", "max_len", max_len)
        for name, tok in (("bos_id", bos_id), ("eos_id", eos_id)):
            if not checks.is_int(tok) or not 0 <= tok < self.tgt_vocab:
                raise ArgumentError(f"greedy_decode: {name}={tok!r} is not a target id")
        with no_grad():
            memory, h, keep = self.encode(src)
            xp = backend.namespace(keep)
            keys = None if self.attention_name is None else self.attention.keys(memory)
            bias = (keep - 1) * 1e9
            table = self.decoder.w_x(self.tgt_embed.weight)  # (V, G*H): a lookup per step
            y = xp.full((h.shape[0],), bos_id, dtype=xp.int64, device=keep.device)
            done = xp.zeros((h.shape[0],), dtype=xp.bool, device=keep.device)
            rows = []
            for _ in range(max_len):  # sequential: step t needs y_{t-1} and h_{t-1}
                h, feats, _ = self._step(
                    F.embedding(y, table, validate=False), h, memory, keys, bias
                )
                y = xp.astype(xp.argmax(self.out(feats).data, axis=-1), xp.int64)  # (B,)
                rows.append(y)
                done = done | (y == eos_id)
                if bool(xp.all(done)):
                    break
        out = []
        for row in backend.to_numpy(xp.stack(rows, axis=1)).tolist():  # (B, steps)
            out.append(row[: row.index(eos_id)] if eos_id in row else row)
        return out

    def loss(self, logits: Tensor, tgt_out: Any, label_smoothing: float = 0.0) -> Tensor:
        """Mean cross-entropy over non-pad targets."""
        return F.cross_entropy(
            logits, tgt_out, label_smoothing=label_smoothing, ignore_index=self.pad_id
        )

    def extra_repr(self) -> str:
        H = self.encoder.d_hidden
        bi = ", bidirectional=True" if self.bidirectional else ""
        return f"cell={self.cell_name!r}, attention={self.attention_name!r}, d_hidden={H}{bi}"
