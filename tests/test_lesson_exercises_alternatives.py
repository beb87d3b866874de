"""Issue 28: every exercise check accepts a right answer in any valid form. For the checks
that had no such test (the others: tests/test_lesson_exercises_NN.py), right answers written
otherwise than lessons/solutions/: the same formula rearranged, a loop for vectorised code,
another NumPy route (np.triu, einsum, complex phases), float32 where float64 is
not needed, a NumPy scalar, a 0-d or one-element array, a list where the text allows it."""

from __future__ import annotations

import functools
import importlib
import math

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_cells

import minitransformer as mt

s1, s10 = (importlib.import_module(f"solutions.lesson{n}") for n in ("01", "10"))


# ------------------------------------------------------------------ 01.1: Value methods
def _tanh_by_exp(self):  # tanh x = (e^2x - 1) / (e^2x + 1), d/dx = 1 / cosh² x
    e = math.exp(2 * self.data)
    return type(self)((e - 1) / (e + 1), (self,), (1 / math.cosh(self.data) ** 2,))


def _tanh_composed(self):  # built from Value's own exp, + and **: the graph differentiates it
    e = (self * 2.0).exp()
    return (e + -1.0) * (e + 1.0) ** -1


def _sub_node(self, other):  # one node with local derivatives (1, -1)
    other = other if isinstance(other, type(self)) else type(self)(other)
    return type(self)(self.data - other.data, (self, other), (1.0, -1.0))


def _value_with(**methods) -> type:
    """A fresh copy of lesson 01's ``Value`` (the notebook's cell) with the solution's
    methods, some replaced by ``methods``."""
    cells = code_cells(LESSONS / "01_autograd.ipynb")
    namespace = {"math": math}
    exec(next(c for c in cells if c.startswith("class Value:")), namespace)
    Value = namespace["Value"]
    chosen = {"tanh": s1.value_tanh, "__neg__": s1.value_neg, "__sub__": s1.value_sub, **methods}
    for name, method in chosen.items():
        setattr(Value, name, method)
    return Value


VALUE_VALID = {
    "tanh from exp, 1/cosh^2": {"tanh": _tanh_by_exp},
    "tanh composed of Value ops": {"tanh": _tanh_composed},
    "neg as its own node": {"__neg__": lambda v: type(v)(-v.data, (v,), (-1.0,))},
    "sub as a + (-b)": {"__sub__": lambda a, b: a + (-b)},  # -b: a Value or a plain number
    "sub as its own node": {"__sub__": _sub_node},
}


# ------------------------------------------------------------------ 01.3: one-sided eps
def _eps_by_grid():  # minimise the error model eps/2 + 2u/eps numerically
    u = np.finfo(np.float32).eps / 2
    eps = np.logspace(-7, -1, 2001)
    return eps[np.argmin(eps / 2 + 2 * u / eps)]


EPS_VALID = {
    "sqrt(machine eps): one rounding error": lambda: math.sqrt(np.finfo(np.float32).eps),
    "2 sqrt(u) as a float32": lambda: np.float32(2 * np.sqrt(np.finfo(np.float32).eps / 2)),
    "the model minimised on a grid": _eps_by_grid,
}


# ------------------------------------------------------------------ 03.2 (03.1: its own file)
MARGIN_VALID = {
    "log1p(V (1 - eps) / eps)": lambda eps, V: math.log1p(V * (1 - eps) / eps),
    "log of V(1 - eps)/eps + 1": lambda eps, V: np.log(V * (1 - eps) / eps + 1),
}


# ------------------------------------------------------------------ 04.2
GAIN_VALID = {
    "eps ** -0.5": lambda eps: eps**-0.5,
    "math.sqrt(1 / eps)": lambda eps: math.sqrt(1 / eps),
    "a float32": lambda eps: np.float32(1 / np.sqrt(eps)),
    "a 0-d array": lambda eps: np.array(1 / np.sqrt(eps)),
}


# ------------------------------------------------------------------ 05.2, 05.3: masks
def _padding_loop(lengths, S):
    mask = np.zeros((len(lengths), 1, 1, S), dtype=bool)
    for b, n in enumerate(lengths):
        mask[b, 0, 0, :n] = True
    return mask


PADDING_VALID = {
    "a loop over sentences": _padding_loop,
    "broadcast to 4-D directly": lambda L, S: np.arange(S) < np.asarray(L)[:, None, None, None],
    "an array of comprehensions": lambda L, S: np.array([[[[i < n for i in range(S)]]] for n in L]),
}


def _window_loop(T, w):
    mask = np.zeros((1, 1, T, T), dtype=bool)
    for t in range(T):
        mask[0, 0, t, max(0, t - w + 1) : t + 1] = True
    return mask


WINDOW_VALID = {
    "a loop over queries": _window_loop,
    "np.triu of np.tril": lambda T, w: np.triu(np.tril(np.ones((T, T), bool)), 1 - w)[None, None],
    "query - key in 0 .. w-1": lambda T, w: np.isin(
        np.subtract.outer(np.arange(T), np.arange(T)), np.arange(w)
    )[None, None],
}


# ------------------------------------------------------------------ 06.3: entropy
def _entropy_per_head(w):  # a loop over heads and rows, a list back
    heads = []
    for head in w:
        rows = [-sum(p * math.log(p) for p in row if p > 0) for row in head]
        heads.append(sum(rows) / len(rows))
    return heads


ENTROPY_VALID = {
    "np.log with where=": lambda w: (
        -(w * np.log(w, where=w > 0, out=np.zeros_like(w))).sum(-1).mean(-1)
    ),
    "nansum (0 log 0 = nan dropped)": lambda w: np.nansum(-w * np.log(w), axis=-1).mean(-1),
    "loops over heads, a list": _entropy_per_head,
    "mean over queries first": lambda w: -(w * np.log(np.where(w > 0, w, 1.0))).mean(-2).sum(-1),
    "einsum": lambda w: -np.einsum("hts,hts->h", w, np.log(np.where(w > 0, w, 1))) / w.shape[1],
}


# ------------------------------------------------------------------ 07.1, 07.2: positions
def _safe_pair_by_logs(d_model, length):  # the first i with i > (D/2)·log((L-1)/π)/log(1e4)
    if length <= 1:
        return 0
    i = math.floor(d_model / 2 * math.log((length - 1) / math.pi) / math.log(1e4)) + 1
    return max(i, 0) if i < d_model // 2 else None


SAFE_PAIR_VALID = {
    "closed form by logarithms": _safe_pair_by_logs,
    "np.argmax over the safe pairs, a NumPy integer or None": lambda D, L: (
        np.argmax(safe)
        if (safe := (L - 1) * 1e4 ** (-np.arange(0, D, 2) / D) < np.pi).any()
        else None
    ),
    "a float index": lambda D, L: next(
        (float(i) for i in range(D // 2) if (L - 1) * 1e4 ** (-2 * i / D) < math.pi), None
    ),
}


def _offset_by_phase(pe_a, pe_b, d_model):  # the slowest pair as a complex number cos + i sin
    i = d_model // 2 - 1
    omega = 10000.0 ** (-2 * i / d_model)
    za, zb = pe_a[2 * i + 1] + 1j * pe_a[2 * i], pe_b[2 * i + 1] + 1j * pe_b[2 * i]
    return np.round(np.angle(zb * np.conj(za)) / omega).astype(np.int64)  # a NumPy integer


def _offset_by_search(pe_a, pe_b, d_model):  # turn PE(p) by every k, keep the closest match
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    ks = np.arange(-1000, 1001)[:, None]
    s, c = pe_a[0::2], pe_a[1::2]
    turned_s = s * np.cos(ks * omega) + c * np.sin(ks * omega)
    turned_c = c * np.cos(ks * omega) - s * np.sin(ks * omega)
    err = ((turned_s - pe_b[0::2]) ** 2 + (turned_c - pe_b[1::2]) ** 2).sum(-1)
    return int(ks[np.argmin(err), 0])


OFFSET_VALID = {
    "complex phase, a NumPy integer": _offset_by_phase,
    "search over every k": _offset_by_search,
}


# ------------------------------------------------------------------ 08.3 (08.2: its own file)
def _greedy_pad_at_once(model, src, max_len):
    """<pad> fed from the step right after a sentence's <eos> (the solution feeds that <eos>
    once); <pad> and <bos> banned with np.where."""
    cfg, B = model.cfg, len(src)
    memory, cache = model.encode(src), model.new_cache()
    last, done, outputs = np.full((B, 1), cfg.bos_id), np.zeros(B, bool), [[] for _ in src]
    with mt.no_grad():
        for _ in range(max_len):
            logits = model.decode(last, memory, src, cache).numpy()[:, -1]
            banned = np.isin(np.arange(logits.shape[-1]), [cfg.pad_id, cfg.bos_id])
            nxt = np.where(banned, -np.inf, logits).argmax(-1)
            for b in np.flatnonzero(~done & (nxt != cfg.eos_id)):
                outputs[b].append(int(nxt[b]))
            done |= nxt == cfg.eos_id
            if done.all():
                break
            last = np.where(done, cfg.pad_id, nxt)[:, None]
    return outputs


def _greedy_ranked(model, src, max_len):
    """Ranks the tokens (argsort) and takes the best that is not <pad>/<bos>; Python lists."""
    cfg = model.cfg
    memory, cache = model.encode(src), model.new_cache()
    fed = [cfg.bos_id] * len(src)
    outputs, finished = [[] for _ in fed], [False] * len(fed)
    for _ in range(max_len):
        logits = model.decode(np.array(fed)[:, None], memory, src, cache).numpy()[:, -1]
        for b, row in enumerate(logits):
            best = next(int(k) for k in np.argsort(-row) if k not in (cfg.pad_id, cfg.bos_id))
            if not finished[b] and best != cfg.eos_id:
                outputs[b].append(best)
            finished[b] = finished[b] or best == cfg.eos_id
            fed[b] = cfg.pad_id if finished[b] else best
        if all(finished):
            break
    return outputs


GREEDY_VALID = {"<pad> right after <eos>": _greedy_pad_at_once, "argsort, lists": _greedy_ranked}


# ------------------------------------------------------------------ 10.2: brevity penalty
def _bp_loops(hyp_lens, ref_lens):  # sorted, so a strict < keeps the shorter on a tie
    c = r = 0
    for h, lens in zip(hyp_lens, ref_lens, strict=True):
        best = None
        for x in sorted(lens):
            if best is None or abs(x - h) < abs(best - h):
                best = x
        c, r = c + h, r + best
    return 1.0 if c >= r else math.exp(1 - r / c)


def _closest_total(hyp_lens, ref_lens):  # r: the closest length, the shorter on a tie
    pairs = zip(hyp_lens, ref_lens, strict=True)
    return sum(min(lens, key=lambda x, h=h: (abs(x - h), x)) for h, lens in pairs)


BP_VALID = {
    "loops": _bp_loops,
    "the paper's min(1, e^(1 - r/c))": lambda h, r: np.minimum(
        1.0, np.exp(1 - _closest_total(h, r) / sum(h))
    ),
    "e^min(0, 1 - r/c)": lambda h, r: math.exp(min(0.0, 1 - _closest_total(h, r) / sum(h))),
    "a 0-d array": lambda h, r: np.array(s10.brevity_penalty(h, r)),
}


# ------------------------------------------------------------------ 11.2: the scores' bytes
def _score_bytes_by_shapes(B, H, S, T, N, itemsize):  # one P per attention, (B, H, queries, keys)
    shapes = [(B, H, S, S), (B, H, T, T), (B, H, T, S)]  # enc self, dec self, dec cross
    return N * sum(int(np.prod(s)) for s in shapes) * itemsize


SCORES_VALID = {
    "np.prod of the shapes": _score_bytes_by_shapes,
    "(S + T)^2 - S*T": lambda B, H, S, T, N, i: N * B * H * ((S + T) ** 2 - S * T) * i,
    "a NumPy integer": lambda B, H, S, T, N, i: np.int64(N * B * H * i) * (S * S + T * T + S * T),
}


# ------------------------------------------------------------------ every check
@functools.cache
def _untrained_model() -> tuple:
    """check_08_3's second part: an untrained tiny model and a padded batch (greedy_decode's)."""
    cfg = mt.TransformerConfig.preset("tiny", src_vocab=12, tgt_vocab=12, max_len=16)
    model = mt.nn.Transformer(cfg, seed=0)
    model.eval()
    return model, np.array([[5, 6, 7, 2], [8, 9, 2, 0]])


CHECKS = {  # how to check an answer, the valid answers
    "01_1": (lambda methods: checks.check_01_1(_value_with(**methods)), VALUE_VALID),
    "01_3": (checks.check_01_3, EPS_VALID),
    "03_2": (checks.check_03_2, MARGIN_VALID),
    "04_2": (checks.check_04_2, GAIN_VALID),
    "05_2": (checks.check_05_2, PADDING_VALID),
    "05_3": (checks.check_05_3, WINDOW_VALID),
    "06_3": (checks.check_06_3, ENTROPY_VALID),
    "07_1": (checks.check_07_1, SAFE_PAIR_VALID),
    "07_2": (checks.check_07_2, OFFSET_VALID),
    "08_3": (lambda answer: checks.check_08_3(answer, *_untrained_model()), GREEDY_VALID),
    "10_2": (checks.check_10_2, BP_VALID),
    "11_2": (checks.check_11_2, SCORES_VALID),
}
CASES = [
    pytest.param(name, answer, id=f"{name}-{form}")
    for name, (_, forms) in CHECKS.items()
    for form, answer in forms.items()
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # log 0 in the nansum form
@pytest.mark.parametrize(("name", "answer"), CASES)
def test_a_valid_form_passes(name, answer, capsys):
    assert CHECKS[name][0](answer) == checks.CORRECT
    assert "✓" in capsys.readouterr().out
