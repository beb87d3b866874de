"""The exercise checks of every lesson (01-21) (lessons/checks/) tell right from wrong.

For every exercise: the reference solution (lessons/solutions/lessonNN.py) passes; the
placeholder the notebook ships (a function raising NotImplementedError, or None) is reported as
"not attempted yet" without failing; and known wrong answers -- the mistakes a learner makes --
fail with AssertionError. Includes the three answers earlier checks let through: a head that
forgets to slice the biases (06), an equivariance test that compares sums (07), and a greedy loop
that keeps appending after EOS (08).
"""

from __future__ import annotations

import importlib
import json
import math

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks
from lesson_notebooks import function_class as _fn

import minitransformer as mt
from minitransformer.function import Function

through_rank0 = importlib.import_module("test_lesson_exercises_14")._through_rank0  # not a ring
t02, t03, t04, t10 = (
    importlib.import_module(f"test_lesson_exercises_{n}") for n in ("02", "03", "04", "10")
)


def solutions(n: int):
    return importlib.import_module(f"solutions.lesson{n:02d}")


def placeholder(*args, **kwargs):
    raise NotImplementedError("exercise: your code here")


class PlaceholderFunction(Function):
    @staticmethod
    def forward(ctx, *arrays, **params):
        raise NotImplementedError("exercise: your code here")

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("exercise: your code here")


def notebook_value_class() -> type:
    """Lesson 01's scalar `Value`, taken from the notebook's own cell."""
    nb = json.loads((LESSONS / "01_autograd.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and src.startswith("class Value:"):
            ns = {"math": math}
            exec(src, ns)
            return ns["Value"]
    raise AssertionError("lesson 01 has no cell defining class Value")


def _value(tanh, neg, sub) -> type:
    Value = notebook_value_class()
    Value.tanh, Value.__neg__, Value.__sub__ = tanh, neg, sub
    return Value


# ------------------------------------------------------------------ the wrong answers
s1, s2, s3, s4, s5 = (solutions(n) for n in range(1, 6))
s6, s7, s8, s9, s10, s11 = (solutions(n) for n in range(6, 12))


def _tanh_wrong_grad(self):  # local derivative of tanh taken as 1 - x^2
    t = math.tanh(self.data)
    return type(self)(t, (self,), (1 - self.data**2,))


def _sub_wrong_sign(self, other):  # a - b computed as a + b
    return self + other


def _sig_forward(ctx, x):
    y = 1 / (1 + ctx.xp.exp(-x))  # overflows at x = -1000
    ctx.save_for_backward(y)
    return y


def _sig_backward_ok(ctx, grad):
    (y,) = ctx.saved
    return grad * y * (1 - y)


def _sig_stable_forward(ctx, x):
    return s1.Sigmoid.forward(ctx, x)


def _sig_backward_wrong(ctx, grad):
    (y,) = ctx.saved
    return grad * y  # missing (1 - y)


def _rms_forward_with_mean(ctx, x, gamma, eps=1e-6):  # LayerNorm's centring kept
    xc = x - x.mean(axis=-1, keepdims=True)
    r = 1 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)
    ctx.save_for_backward(xc * r, r, gamma)
    return xc * r * gamma


def _rms_backward_layernorm(ctx, grad):  # LayerNorm's backward (with the mean term)
    x_hat, r, gamma = ctx.saved
    g_hat = grad * gamma
    dx = r * (
        g_hat
        - g_hat.mean(axis=-1, keepdims=True)
        - x_hat * (g_hat * x_hat).mean(axis=-1, keepdims=True)
    )
    return dx, (grad * x_hat).reshape(-1, x_hat.shape[-1]).sum(axis=0)


def _rms_backward_unsummed(ctx, grad):  # dgamma left (B, T, D): the engine would sum it
    dx, _ = s4.RMSNorm.backward(ctx, grad)
    return dx, grad * ctx.saved[0]


def _rms_forward_eps_outside(ctx, x, gamma, eps=1e-6):  # x / (sqrt(mean x^2) + eps)
    r = 1 / (np.sqrt((x * x).mean(axis=-1, keepdims=True)) + eps)
    ctx.save_for_backward(x * r, r, gamma)
    return x * r * gamma


def _equiv_loose(f, x, perm):  # a tolerance far above rounding
    return bool(np.allclose(f(x[:, perm]), f(x)[:, perm], atol=0.1))


def _head_no_bias(x_q, x_kv, W, h, i):  # the bias slices forgotten
    no_bias = {k: (np.zeros_like(v) if k.startswith("b") else v) for k, v in W.items()}
    return s6.head_output(x_q, x_kv, no_bias, h, i)


def _head_whole_bias_scale(x_q, x_kv, W, h, i):  # scaled by sqrt(D) instead of sqrt(d_k)
    d_k = W["wq"].shape[0] // h
    c = slice(i * d_k, (i + 1) * d_k)
    q = (x_q @ W["wq"][:, c] + W["bq"][c]) * np.sqrt(d_k / (d_k * h))
    k = x_kv @ W["wk"][:, c] + W["bk"][c]
    v = x_kv @ W["wv"][:, c] + W["bv"][c]
    return s6._attention(q, k, v)


def _head_rows_not_columns(x_q, x_kv, W, h, i):  # sliced the rows of W
    d_k = W["wq"].shape[0] // h
    c = slice(i * d_k, (i + 1) * d_k)
    q = x_q[..., c] @ W["wq"][c, c] + W["bq"][c]
    k = x_kv[..., c] @ W["wk"][c, c] + W["bk"][c]
    v = x_kv[..., c] @ W["wv"][c, c] + W["bv"][c]
    return s6._attention(q, k, v)


def _equiv_sum_over_positions(f, x, perm):
    return bool(np.allclose(f(x[:, perm]).sum(axis=1), f(x).sum(axis=1), atol=1e-6))


def _equiv_total_sum(f, x, perm):
    return bool(np.isclose(f(x[:, perm]).sum(), f(x)[:, perm].sum(), atol=1e-6))


def _equiv_invariance(f, x, perm):  # tests invariance f(x_pi) = f(x) instead
    return bool(np.allclose(f(x[:, perm]), f(x), atol=1e-6))


def _greedy_appends_after_eos(model, src, max_len):
    """Tracks 'done' only to stop, but keeps appending to finished sentences."""
    cfg = model.cfg
    B = src.shape[0]
    with mt.no_grad():
        memory = model.encode(src)
        cache = model.new_cache()
        last = np.full((B, 1), cfg.bos_id)
        outputs = [[] for _ in range(B)]
        done = np.zeros(B, dtype=bool)
        for _ in range(max_len):
            logits = model.decode(last, memory, src, cache).numpy()[:, -1].copy()
            logits[:, [cfg.pad_id, cfg.bos_id]] = -np.inf
            nxt = logits.argmax(-1)
            for b in range(B):
                if nxt[b] != cfg.eos_id:
                    outputs[b].append(int(nxt[b]))
            done |= nxt == cfg.eos_id
            if done.all():
                break
            last = nxt[:, None]
    return outputs


def _greedy_runs_to_max_len(model, src, max_len):
    """Right outputs, but decodes max_len steps and feeds finished sentences their argmax."""
    cfg = model.cfg
    B = src.shape[0]
    with mt.no_grad():
        memory = model.encode(src)
        cache = model.new_cache()
        last = np.full((B, 1), cfg.bos_id)
        outputs = [[] for _ in range(B)]
        done = np.zeros(B, dtype=bool)
        for _ in range(max_len):
            logits = model.decode(last, memory, src, cache).numpy()[:, -1].copy()
            logits[:, [cfg.pad_id, cfg.bos_id]] = -np.inf
            nxt = logits.argmax(-1)
            for b in np.nonzero(~done & (nxt != cfg.eos_id))[0]:
                outputs[b].append(int(nxt[b]))
            done |= nxt == cfg.eos_id
            last = nxt[:, None]
    return outputs


def _greedy_allows_pad(model, src, max_len):  # never masks <pad>/<bos>
    cfg = model.cfg
    B = src.shape[0]
    with mt.no_grad():
        memory = model.encode(src)
        cache = model.new_cache()
        last = np.full((B, 1), cfg.bos_id)
        outputs = [[] for _ in range(B)]
        done = np.zeros(B, dtype=bool)
        for _ in range(max_len):
            nxt = model.decode(last, memory, src, cache).numpy()[:, -1].argmax(-1)
            nxt[done] = cfg.pad_id
            for b in np.nonzero(~done & (nxt != cfg.eos_id))[0]:
                outputs[b].append(int(nxt[b]))
            done |= nxt == cfg.eos_id
            if done.all():
                break
            last = nxt[:, None]
    return outputs


def _mp_unclipped(hyp, refs, n):
    found = {tuple(r[i : i + n]) for r in refs for i in range(len(r) - n + 1)}
    grams = [tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1)]
    return sum(g in found for g in grams), len(grams)


def _logprob_no_eos(logits, out_ids, eos_id):
    return s10.sequence_logprob(logits[:-1], out_ids[:-1], out_ids[-1]) if out_ids else 0.0


def _logprob_unstable(logits, out_ids, eos_id):
    targets = [*out_ids, eos_id]
    logp = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    return float(logp[np.arange(len(targets)), targets].sum())


# (check, solution, placeholder, [wrong answers])
CASES = {
    "01_1": (
        checks.check_01_1,
        lambda: _value(s1.value_tanh, s1.value_neg, s1.value_sub),
        lambda: _value(placeholder, placeholder, placeholder),
        [
            lambda: _value(_tanh_wrong_grad, s1.value_neg, s1.value_sub),
            lambda: _value(s1.value_tanh, s1.value_neg, _sub_wrong_sign),
            lambda: _value(s1.value_tanh, lambda self: self, s1.value_sub),
        ],
    ),
    "01_2": (
        checks.check_01_2,
        lambda: s1.Sigmoid,
        lambda: PlaceholderFunction,
        [
            lambda: _fn(_sig_forward, _sig_backward_ok),
            lambda: _fn(_sig_stable_forward, _sig_backward_wrong),
        ],
    ),
    "01_3": (
        checks.check_01_3,
        lambda: s1.best_eps_float32,
        lambda: placeholder,
        [
            lambda: lambda: (np.finfo(np.float32).eps / 2) ** (1 / 3),  # the central rule
            lambda: lambda: 1e-6,  # gradcheck's float64 default
            lambda: lambda: 1e-2,  # truncation ignored
        ],
    ),
    "02_1": (
        checks.check_02_1,
        lambda: s2.outer_backward,
        lambda: placeholder,
        [
            lambda: lambda u, v, G: (G.sum(1), G.sum(0)),
            lambda: lambda u, v, G: (G.T @ u, G @ v),
        ],
    ),
    "02_2": (
        checks.check_02_2,
        lambda: s2.linear_t_backward,
        lambda: placeholder,
        [
            lambda: lambda x, W, G: (G @ W, np.einsum("btd,bto->do", x, G)),  # dW transposed
            lambda: lambda x, W, G: (G @ W, G[0].T @ x[0]),  # one batch entry only
        ],
    ),
    "02_3": (  # more wrong answers and the valid forms: tests/test_lesson_exercises_02.py
        checks.check_02_3,
        lambda: s2.gather_scale_grad,
        lambda: placeholder,
        [
            lambda: t02._buffered,  # a repeated id counted once
            lambda: lambda x, s, idx, G: t02._fixed_add(s, idx, G),  # forgot x
        ],
    ),
    "03_1": (  # more wrong answers and the valid forms: tests/test_lesson_exercises_03.py
        checks.check_03_1,
        lambda: s3.logsumexp_with_grad,
        lambda: placeholder,
        [
            lambda: t03._cells_log_softmax,  # nan on a fully masked row
            lambda: lambda x, axis=-1: np.logaddexp.reduce(x, axis=axis),  # no gradient
        ],
    ),
    "03_2": (
        checks.check_03_2,
        lambda: s3.best_margin,
        lambda: placeholder,
        [
            lambda: lambda eps, V: np.log((1 - eps) / eps),
            lambda: lambda eps, V: np.log((1 - eps) / (eps / V)),
        ],
    ),
    "03_3": (  # more wrong answers and the valid forms: tests/test_lesson_exercises_03.py
        checks.check_03_3,
        lambda: s3.ce_grad,
        lambda: placeholder,
        [
            lambda: lambda x, t, eps, ig: s3.ce_grad(x, t, eps, ig) * (t != ig).sum() / len(t),
            lambda: lambda x, t, eps, ig: s3.ce_grad(x, t, 0.0, ig),  # smoothing ignored
            lambda: t03._cells_12_and_14,  # the lesson's q, eps over all V classes
        ],
    ),
    "04_1": (
        checks.check_04_1,
        lambda: s4.RMSNorm,
        lambda: PlaceholderFunction,
        [
            lambda: _fn(_rms_forward_with_mean, _rms_backward_layernorm),
            lambda: _fn(s4.RMSNorm.forward, _rms_backward_layernorm),
            lambda: _fn(s4.RMSNorm.forward, _rms_backward_unsummed),
            lambda: _fn(_rms_forward_eps_outside, s4.RMSNorm.backward),
        ],
    ),
    "04_2": (
        checks.check_04_2,
        lambda: s4.max_gain,
        lambda: placeholder,
        [lambda: lambda eps: 1 / eps, lambda: lambda eps: 1.0],
    ),
    "04_3": (  # more wrong answers and the valid forms: tests/test_lesson_exercises_04.py
        checks.check_04_3,
        lambda: s4.add_norm_backward,
        lambda: placeholder,
        [
            lambda: t04.ADD_NORM_WRONG["no identity path"][0],
            lambda: t04.ADD_NORM_WRONG["LayerNorm skipped"][0],
        ],
    ),
    "05_1": (  # more wrong answers and the valid forms: tests/test_lesson_exercises_05.py
        checks.check_05_1,
        lambda: s5.temperature_grad,
        lambda: placeholder,
        [
            lambda: lambda S, tau, dP: -s5.temperature_grad(S, tau, dP),  # the sign
            lambda: lambda S, tau, dP: s5.temperature_grad(S, tau, dP) * tau,  # 1/tau, not 1/tau²
        ],
    ),
    "05_2": (
        checks.check_05_2,
        lambda: s5.padding_mask_from_lengths,
        lambda: placeholder,
        [
            lambda: lambda L, S: (np.arange(S)[None] <= np.asarray(L)[:, None])[:, None, None],
            lambda: lambda L, S: (np.arange(S)[None] < np.asarray(L)[:, None])[:, None, :, None],
        ],
    ),
    "05_3": (
        checks.check_05_3,
        lambda: s5.local_causal_mask,
        lambda: placeholder,
        [
            lambda: lambda T, w: s5.local_causal_mask(T, w + 1),  # off by one
            lambda: (
                lambda T, w: np.abs(np.subtract.outer(np.arange(T), np.arange(T)))[None, None] < w
            ),  # symmetric window: sees the future
        ],
    ),
    "06_1": (  # more wrong answers: tests/test_lesson_exercises_06.py
        checks.check_06_1,
        lambda: s6.mha_num_parameters,
        lambda: placeholder,
        [
            lambda: lambda D, h, d_k: 4 * D * D + 4 * D,  # d_k taken as D / h
            lambda: lambda D, h, d_k: 2 * D * h * d_k + 2 * D * D,  # no biases
        ],
    ),
    "06_2": (
        checks.check_06_2,
        lambda: s6.head_output,
        lambda: placeholder,
        [
            lambda: _head_no_bias,
            lambda: _head_whole_bias_scale,
            lambda: _head_rows_not_columns,
        ],
    ),
    "06_3": (
        checks.check_06_3,
        lambda: s6.attention_entropy,
        lambda: placeholder,
        [
            lambda: lambda w: np.nansum(-w * np.log(w), axis=-1).sum(-1),  # sum, not mean
            lambda: lambda w: (-w * np.log(w + 1e-3)).sum(-1).mean(-1),  # fudged log
        ],
    ),
    "07_1": (  # more wrong answers: tests/test_lesson_exercises_07.py
        checks.check_07_1,
        lambda: s7.fastest_safe_pair,
        lambda: placeholder,
        [
            lambda: lambda D, L: D // 2 - 1,  # the slowest pair, always safe
            lambda: (
                lambda D, L: next(  # a full turn 2π, not half of it
                    (i for i in range(D // 2) if (L - 1) * 1e4 ** (-2 * i / D) < 2 * np.pi), None
                )
            ),
        ],
    ),
    "07_2": (
        checks.check_07_2,
        lambda: s7.recover_offset,
        lambda: placeholder,
        [
            lambda: lambda a, b, D: s7.recover_offset(a, b, 4),  # a fast pair: wraps around
            lambda: lambda a, b, D: -s7.recover_offset(a, b, D),
        ],
    ),
    "07_3": (
        checks.check_07_3,
        lambda: s7.is_permutation_equivariant,
        lambda: placeholder,
        [
            lambda: _equiv_sum_over_positions,
            lambda: _equiv_total_sum,
            lambda: _equiv_invariance,
            lambda: _equiv_loose,
        ],
    ),
    "08_1": (  # more wrong answers and the valid forms: tests/test_lesson_exercises_08.py
        checks.check_08_1,
        lambda: s8.make_decoder_io,
        lambda: placeholder,
        [
            lambda: lambda ts, b, e, p: s8.make_decoder_io(ts, b, e, p)[::-1],  # swapped
            lambda: lambda ts, b, e, p: [a[:, :-1] for a in s8.make_decoder_io(ts, b, e, p)],
        ],
    ),
    "08_2": (  # more wrong answers and the valid forms: tests/test_lesson_exercises_08.py
        checks.check_08_2,
        lambda: s8.cached_attention_step,
        lambda: placeholder,
        [
            lambda: (
                lambda q, k, v, kc, vc: (v, np.concatenate([kc, k], 2), np.concatenate([vc, v], 2))
            ),  # its own key only
            lambda: (
                lambda q, k, v, kc, vc: (*s8.cached_attention_step(q, k, v, kc, vc)[:1], kc, vc)
            ),  # caches not grown
        ],
    ),
    "08_3": (
        checks.check_08_3,
        lambda: s8.greedy_batch,
        lambda: placeholder,
        [
            lambda: _greedy_appends_after_eos,
            lambda: _greedy_runs_to_max_len,
            lambda: _greedy_allows_pad,
        ],
    ),
    "09_1": (
        checks.check_09_1,
        lambda: s9.decay_step,
        lambda: placeholder,
        [
            lambda: lambda f, d, w: w / f,  # decays as 1/s
            lambda: lambda f, d, w: f * w,  # the warm-up branch
            lambda: lambda f, d, w: d**0.5 * w / f**2,  # d_model kept
        ],
    ),
    "09_2": (
        checks.check_09_2,
        lambda: s9.floor_offset,
        lambda: placeholder,
        [
            lambda: lambda e: -(1 - e) * np.log(1 - e) - e * np.log(e),  # nan at eps = 0
            lambda: lambda e: -e * math.log(e) if e else 0.0,  # the correct token left out
        ],
    ),
    "09_3": (
        checks.check_09_3,
        lambda: s9.first_gradient_update,
        lambda: placeholder,
        [
            lambda: lambda g, t, lr, b, eps=1e-9: -lr * g / (np.abs(g) + eps),  # update 1's
            lambda: lambda g, t, lr, b, eps=1e-9: -s9.first_gradient_update(g, t, lr, b, eps),
        ],
    ),
    "10_1": (
        checks.check_10_1,
        lambda: s10.modified_precision,
        lambda: placeholder,
        [lambda: _mp_unclipped, lambda: t10.PRECISION_WRONG["best single reference"][0]],
    ),
    "10_2": (  # more wrong answers: tests/test_lesson_exercises_10.py
        checks.check_10_2,
        lambda: s10.brevity_penalty,
        lambda: placeholder,
        [
            lambda: lambda c, r: s10.brevity_penalty(c, [[min(x)] for x in r]),  # the shortest
            lambda: lambda c, r: s10.brevity_penalty(c, [[x[0]] for x in r]),  # the first
        ],
    ),
    "10_3": (
        checks.check_10_3,
        lambda: s10.sequence_logprob,
        lambda: placeholder,
        [lambda: _logprob_no_eos, lambda: _logprob_unstable],
    ),
    "11_1": (  # more wrong answers: tests/test_lesson_exercises_11.py
        checks.check_11_1,
        lambda: s11.gemm_roofline,
        lambda: placeholder,
        [
            lambda: lambda m, k, n, p, b: (*s11.gemm_roofline(m, k, n, p, b)[:2], "compute"),
            lambda: (
                lambda m, k, n, p, b: (  # FLOPs without the 2
                    m * k * n / (4 * (m * k + k * n + m * n)),
                    *s11.gemm_roofline(m, k, n, p, b)[1:],
                )
            ),
        ],
    ),
    "11_2": (  # more wrong answers: tests/test_lesson_exercises_11.py
        checks.check_11_2,
        lambda: s11.score_bytes,
        lambda: placeholder,
        [
            lambda: lambda B, H, S, T, N, i: B * H * T * S * i,  # one attention's
            lambda: lambda B, H, S, T, N, i: N * B * H * (T * T + T * S) * i,  # no encoder
        ],
    ),
    "11_3": (  # more wrong answers: tests/test_lesson_exercises_11.py
        checks.check_11_3,
        lambda: s11.step_speedup,
        lambda: placeholder,
        [
            lambda: lambda f, s: 1 / s11.step_speedup(f, s),  # the new time
            lambda: lambda f, s: 1 / np.sum(f / s),  # the untouched rest forgotten
        ],
    ),
}

WRONG = [(name, i) for name, case in CASES.items() for i in range(len(case[3]))]


def test_every_exercise_has_a_case():
    names = {n[len("check_") :] for n in dir(checks) if n.startswith("check_")}
    assert names == set(CASES), f"checks without test cases: {names - set(CASES)}"


@pytest.mark.parametrize("name", CASES)
def test_solution_passes(name, capsys):
    check, solution, _, _ = CASES[name]
    assert check(solution()) == checks.CORRECT
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("name", CASES)
def test_placeholder_is_not_attempted(name, capsys):
    check, _, ph, _ = CASES[name]
    assert checks.NOT_ATTEMPTED is None  # so Jupyter shows no Out[] under the check cell
    assert check(ph()) is checks.NOT_ATTEMPTED
    assert check(None) is checks.NOT_ATTEMPTED
    assert capsys.readouterr().out.count("not attempted yet") == 2


@pytest.mark.parametrize(("name", "i"), WRONG, ids=[f"{n}-wrong{i}" for n, i in WRONG])
def test_wrong_answer_fails(name, i):
    check, _, _, wrong = CASES[name]
    with pytest.raises(AssertionError):
        check(wrong[i]())


def test_greedy_batch_matches_greedy_decode_on_a_model():
    """check_08_3 with a real (untrained) model: the solution agrees with greedy_decode."""
    cfg = mt.TransformerConfig.preset("tiny", src_vocab=12, tgt_vocab=12, max_len=16)
    model = mt.nn.Transformer(cfg, seed=0)
    model.eval()
    src = np.array([[5, 6, 7, 2], [8, 9, 2, 0]])
    assert checks.check_08_3(s8.greedy_batch, model, src) == checks.CORRECT


def test_checks_import_nothing_from_notebooks():
    """checks/ and the solutions stand alone (the notebooks import them, not the reverse):
    no check reads a notebook or the kernel's namespace. IPython is used in one place only,
    to show a wrong answer's hint without the checks' frames (_shared.py's _your_traceback)."""
    files = sorted((LESSONS / "checks").glob("*.py"))
    text = "".join(f.read_text(encoding="utf-8") for f in files)
    assert "ipynb" not in text and "user_ns" not in text
    using = [f.name for f in files if "get_ipython" in f.read_text(encoding="utf-8")]
    assert using == ["_shared.py"]
    assert text.count("from IPython import") == 1


def _code_cells(nn: str) -> list[str]:
    path = next(LESSONS.glob(f"{nn}_*.ipynb"))
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("nn", [f"{n:02d}" for n in range(1, 12)])
def test_notebook_ships_placeholders_and_calls_every_check(nn):
    """Lesson NN calls each check_NN_K once, the learner cells hold placeholders (no solution
    shipped), and every name the solutions module defines for an exercise is defined there."""
    cells = _code_cells(nn)
    text = "\n".join(cells)
    mine = sorted(n for n in dir(checks) if n.startswith(f"check_{nn}_"))
    for name in mine:
        assert text.count(f"checks.{name}(") == 1, f"lesson {nn} must call checks.{name} once"
    assert "NotImplementedError(" in text
    sol = solutions(int(nn))
    for name in [n for n in vars(sol) if not n.startswith("_") and callable(getattr(sol, n))]:
        if getattr(getattr(sol, name), "__module__", None) != sol.__name__:
            continue  # imported helpers (Function, ...)
        defining = [c for c in cells if f"def {name}(" in c or f"class {name}(" in c]
        assert len(defining) == 1, f"lesson {nn}: no single exercise cell defines {name}"
        assert "NotImplementedError(" in defining[0], (
            f"lesson {nn}: the cell defining {name} ships more than a placeholder"
        )


# ------------------------------------------------ lessons 12-14 (added after the first eleven)
s12, s13, s14 = (solutions(n) for n in (12, 13, 14))
ablate = importlib.import_module("minitransformer.tools.ablate")


def _additive_no_tanh(q, m, W_q, W_k, b, v):  # the squashing forgotten
    return (q @ W_q + m @ W_k + b) @ v


def _additive_no_bias(q, m, W_q, W_k, b, v):
    return np.tanh(q @ W_q + m @ W_k) @ v


def _additive_softmaxed(q, m, W_q, W_k, b, v):  # the attention weights, not the scores
    s = np.tanh(q @ W_q + m @ W_k + b) @ v
    return np.exp(s - s.max()) / np.exp(s - s.max()).sum()


def _additive_tanh_outside(q, m, W_q, W_k, b, v):  # tanh after v
    return np.tanh((q @ W_q + m @ W_k + b) @ v)


def _perplexity(
    switch=True,
    restore=True,
    ignore_pads=True,
    label_smoothing=0.0,
    per_sentence=False,
    chunk=None,
    mean_of_means=False,
    base=math.e,
    no_exp=False,
    honour_eval_mode=True,
):
    """A perplexity(model, pairs, eval_mode=True) answer to exercise 13.2 with one mistake."""
    from minitransformer.data.batching import make_batch

    F = importlib.import_module("minitransformer.functional")

    def nll(model, pairs):  # (sum of token losses, token count)
        batch = make_batch(pairs)
        with mt.no_grad():
            logits = model(batch.src, batch.tgt_in)
        pad = 0 if ignore_pads else None
        loss = F.cross_entropy(
            logits,
            batch.tgt_out,
            label_smoothing=label_smoothing,
            ignore_index=pad,
            reduction="sum",
        )
        return loss.item(), batch.n_tokens if ignore_pads else batch.tgt_out.size

    def perplexity(model, pairs, eval_mode=True):
        was = model.training
        if switch:
            model.train(not eval_mode if honour_eval_mode else False)
        try:
            if per_sentence:
                return float(np.mean([math.exp(np.divide(*nll(model, [p]))) for p in pairs]))
            size = chunk or len(pairs)
            parts = [nll(model, pairs[i : i + size]) for i in range(0, len(pairs), size)]
            if mean_of_means:
                mean = float(np.mean([t / n for t, n in parts]))
            else:
                mean = sum(t for t, _ in parts) / sum(n for _, n in parts)
            return mean if no_exp else base**mean
        finally:
            if restore == "train":
                model.train()
            elif restore:
                model.train(was)

    return perplexity


def _ring_sum_everywhere(buffers, send):  # np.sum into every buffer: no ring at all
    total = np.sum(buffers, axis=0)
    for b in buffers:
        b[...] = total


def _ring_scatter_only(buffers, send):  # the reduce-scatter half: buffers not summed
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]
    for k in range(N - 1):
        for r in range(N):
            chunks[(r + 1) % N][(r - k) % N] += send(r, (r + 1) % N, (r - k) % N)


CASES_12_14 = {
    "12_1": (  # more wrong answers and the valid forms: tests/test_lesson_exercises_12.py
        checks.check_12_1,
        lambda: s12.attention_stops_cheaper,
        lambda: placeholder,
        [
            lambda: lambda d, g: g * d,  # the projections left out: section 7's core count
            lambda: lambda d, g: max(1, (g - 2) * d - 1),  # the last cheaper n, not the first
            lambda: lambda d, g: (g - 2) * d,  # 0 or negative where attention is never cheaper
            lambda: lambda d, g: d,  # section 7's n = d, only right for a GRU
        ],
    ),
    "12_2": (
        checks.check_12_2,
        lambda: s12.dilated_layers,
        lambda: placeholder,
        [
            lambda: lambda n, k: math.ceil(math.log(n, k)),  # float log: 125 at k = 5 -> 4
            lambda: lambda n, k: int(math.log(n, k)),  # floor, not ceiling
            lambda: lambda n, k: math.ceil((n - 1) / (k - 1)),  # a contiguous stack
            lambda: lambda n, k: math.ceil(math.log2(n)),  # base 2 whatever k
        ],
    ),
    "12_3": (
        checks.check_12_3,
        lambda: s12.additive_scores,
        lambda: placeholder,
        [
            lambda: _additive_no_tanh,
            lambda: _additive_no_bias,
            lambda: _additive_softmaxed,
            lambda: _additive_tanh_outside,
        ],
    ),
    "13_1": (
        checks.check_13_1,
        lambda: s13.dropout_variance,
        lambda: placeholder,
        [
            lambda: lambda x, p: x**2 / (1 - p),  # E[y^2], not the variance
            lambda: lambda x, p: x**2 * p * (1 - p),  # Bernoulli variance, the 1/(1-p) forgotten
            lambda: lambda x, p: x * p / (1 - p),  # not squared (negative for x < 0)
            lambda: lambda x, p: x**2 * p,  # no rescaling
            lambda: lambda x, p: np.float32(x**2 * p),  # no rescaling, in float32
            lambda: lambda x, p: np.float32(x**2 * p * (1 - p)),  # Bernoulli's, in float32
            lambda: lambda x, p: x * x * (1 - p) / p if p else 0.0,  # the ratio upside down
            lambda: 0.1 / 0.9,  # a number, not the function
        ],
    ),
    "13_2": (
        checks.check_13_2,
        lambda: s13.perplexity,
        lambda: placeholder,
        [
            lambda: _perplexity(switch=False),  # model.eval() forgotten: measures as found
            lambda: _perplexity(restore=False),  # leaves the model in eval mode
            lambda: _perplexity(restore="train"),  # always hands back a training-mode model
            lambda: _perplexity(ignore_pads=False),  # the padding counted as targets
            lambda: _perplexity(label_smoothing=0.1),  # the training loss, not the metric
            lambda: _perplexity(per_sentence=True),  # mean of per-sentence perplexities
            lambda: _perplexity(chunk=100, mean_of_means=True),  # chunks of 100 and 30 averaged
            lambda: _perplexity(base=2.0),  # 2 ** (cross-entropy in nats)
            lambda: _perplexity(no_exp=True),  # the cross-entropy itself
            lambda: _perplexity(honour_eval_mode=False),  # eval_mode=False ignored
            lambda: lambda model, pairs: s13.perplexity(model, pairs),  # no eval_mode argument
        ],
    ),
    "13_3": (
        checks.check_13_3,
        lambda: s13.my_variant,
        lambda: placeholder,
        [
            lambda: lambda: ablate.Variant("base", "the base"),  # no change
            lambda: lambda: ablate.Variant("x", "N 3, h 2", model={"N": 3, "h": 2}),  # two
            lambda: lambda: ablate.Variant("h-4", "h 4", model={"h": 4}),  # the base's value
            lambda: lambda: ablate.Variant("x", "d_k 8, no warm-up", {"key_dim": 8}, warmup=False),
            lambda: lambda: ablate.Variant("x", "dropout", model={"dropout": 0.3}),  # train=
            lambda: lambda: ablate.Variant("x", "layers", model={"layers": 3}),  # no such field
            lambda: lambda: ablate.Variant("x", "h 3", model={"h": 3}),  # 64 % 3: does not build
            lambda: lambda: ablate.Variant("x", "random", random_positions=True),
            lambda: lambda: {"model": {"N": 3}},  # not a Variant
            lambda: lambda: ablate.Variant("x", "N 3", model=[("N", 3)]),  # model= not a dict
            lambda: lambda: ablate.Variant("x", "P_drop", train={"dropout": "0.3"}),  # a string
        ],
    ),
    "14_1": (
        checks.check_14_1,
        lambda: s14.balanced_split,
        lambda: placeholder,
        [
            lambda: lambda t, N: [np.arange(r, len(t), N) for r in range(N)],  # strided
            lambda: lambda t, N: np.array_split(np.arange(len(t)), N),  # contiguous
            lambda: lambda t, N: [s[s != 0] for s in s14.balanced_split(t, N)],  # a row lost
            lambda: lambda t, N: [t[s] for s in s14.balanced_split(t, N)],  # tokens, not rows
        ],
    ),
    "14_2": (
        checks.check_14_2,  # the all-gather, after the check's own reduce-scatter
        lambda: s14.all_gather_with_send,
        lambda: placeholder,
        [
            lambda: _ring_sum_everywhere,
            lambda: _ring_scatter_only,  # a second reduce-scatter instead of the all-gather
            lambda: through_rank0,
        ],
    ),
    "14_3": (
        checks.check_14_3,
        lambda: s14.equal_terms_size,
        lambda: placeholder,
        [
            lambda: lambda N, alpha, BW: alpha * BW,  # the 1/N of the chunks forgotten
            lambda: lambda N, alpha, BW: 2 * (N - 1) * alpha * BW,
            lambda: lambda N, alpha, BW: N * alpha / BW,  # units: bytes = s x bytes/s
            lambda: lambda N, alpha, BW: (N - 1) * alpha * BW,
        ],
    ),
}
CASES.update(CASES_12_14)  # so test_every_exercise_has_a_case sees them
WRONG_12_14 = [(name, i) for name, case in CASES_12_14.items() for i in range(len(case[3]))]


@pytest.mark.parametrize("name", CASES_12_14)
def test_solution_passes_12_14(name, capsys):
    test_solution_passes(name, capsys)


@pytest.mark.parametrize("name", CASES_12_14)
def test_placeholder_is_not_attempted_12_14(name, capsys):
    test_placeholder_is_not_attempted(name, capsys)


@pytest.mark.parametrize(("name", "i"), WRONG_12_14, ids=[f"{n}-wrong{i}" for n, i in WRONG_12_14])
def test_wrong_answer_fails_12_14(name, i):
    test_wrong_answer_fails(name, i)


@pytest.mark.parametrize("nn", ["12", "13", "14"])
def test_notebook_ships_placeholders_and_calls_every_check_12_14(nn):
    test_notebook_ships_placeholders_and_calls_every_check(nn)


def test_dilated_layers_check_uses_the_lessons_bfs():
    """check_12_2 given a BFS compares with it: a BFS that disagrees fails the solution."""
    assert (
        checks.check_12_2(s12.dilated_layers, lambda n, kind, k: s12.dilated_layers(n, k))
        == checks.CORRECT
    )
    with pytest.raises(AssertionError):
        checks.check_12_2(s12.dilated_layers, lambda n, kind, k: 99)


# ------------------------------------------------ lesson 15 (more cases: tests/test_lesson15.py)
s15 = solutions(15)
CASES_15 = {
    "15_1": (
        checks.check_15_1,
        lambda: s15.merge,
        lambda: placeholder,
        [lambda: lambda a, b: (np.maximum(a[0], b[0]), a[1] + b[1], a[2] + b[2])],  # no rescale
    ),
    "15_2": (
        checks.check_15_2,
        lambda: s15.block_probs,
        lambda: placeholder,
        [lambda: lambda q, k, lse: np.exp(q @ k.T - lse)],  # the 1/sqrt(d_k) forgotten
    ),
}
CASES.update(CASES_15)  # so test_every_exercise_has_a_case sees them


# ------------------------------------ lesson 16 (more cases: tests/test_lesson_exercises_16.py)
s16 = solutions(16)
CASES_16 = {
    "16_1": (
        checks.check_16_1,
        lambda: s16.halves_table,
        lambda: placeholder,
        [lambda: lambda L, D: mt.nn.sinusoid_table(L, D)],  # the paper's interleaved table
    ),
    "16_2": (
        checks.check_16_2,
        lambda: s16.halves_twin,
        lambda: placeholder,
        # the head axis of W_q reordered too
        [
            lambda: (
                lambda st, o: {
                    n: a[..., o] if n.endswith("w_q.weight") else a
                    for n, a in s16.halves_twin(st, o).items()
                }
            )
        ],
    ),
    "16_3": (
        checks.check_16_3,
        lambda: s16.marian_ffn,
        lambda: placeholder,
        [lambda: lambda x, w1, b1, w2, b2: np.maximum(x @ w1.T + b1, 0) @ w2.T + b2],  # relu
    ),
}
CASES.update(CASES_16)  # so test_every_exercise_has_a_case sees them

# ------------------------------------ lesson 17 (more cases: tests/test_lesson_exercises_17.py)
s17 = solutions(17)
CASES_17 = {
    "17_1": (checks.check_17_1, lambda: s17.sampling_probs, lambda: placeholder,
             [lambda: lambda z, t, k=None: s17.sampling_probs(z, 1 / t, k)]),  # τ multiplied
    "17_2": (checks.check_17_2, lambda: s17.sliding_windows, lambda: placeholder,
             [lambda: lambda t, b, s: (s17.sliding_windows(t, b, s)[0],) * 2]),  # not shifted
    "17_3": (checks.check_17_3, lambda: s17.sliding_window_mask, lambda: placeholder,
             [lambda: lambda T, o, w: np.tril(np.ones((T, o + T), bool), k=o)]),  # no window
}  # fmt: skip
CASES.update(CASES_17)

# ------------------------------------ lesson 18 (more cases: tests/test_lesson_exercises_18.py)
s18 = solutions(18)
CASES_18 = {
    "18_1": (checks.check_18_1, lambda: s18.fit_power_law, lambda: placeholder,
             [lambda: lambda n, loss: s18.fit_power_law(n, loss)[::-1]]),  # (alpha, a)
    "18_2": (checks.check_18_2, lambda: s18.optimal_size, lambda: placeholder,
             [lambda: lambda n, loss: n[int(np.argmin(loss))]]),  # the measured best size
    "18_3": (checks.check_18_3, lambda: s18.attention_flops, lambda: placeholder,
             # every query reads its whole sequence: not causal
             [lambda: lambda L, layers, d: 12 * layers * d * sum(int(n) ** 2 for n in L)]),
}  # fmt: skip
CASES.update(CASES_18)


# ------------------------------------ lesson 19 (more cases: tests/test_lesson_exercises_19.py)
s19 = solutions(19)
CASES_19 = {
    "19_1": (checks.check_19_1, lambda: s19.positional_offset, lambda: placeholder,
             [lambda: lambda w, n: None]),  # never positional
    "19_2": (checks.check_19_2, lambda: s19.importance_by_differences, lambda: placeholder,
             [lambda: lambda f, n, e: 2 * s19.importance_by_differences(f, n, e)]),  # no /2
}  # fmt: skip
CASES.update(CASES_19)

# ------------------------------------ lesson 20 (more cases: tests/test_lesson_exercises_20.py)
s20 = solutions(20)
CASES_20 = {
    "20_1": (checks.check_20_1, lambda: s20.strided_keys, lambda: placeholder,
             # the band without the columns
             [lambda: lambda p, S, s, c: [j for j in range(max(0, p - s + 1), min(S, p + s))
                                          if j <= p or not c]]),
    "20_2": (checks.check_20_2, lambda: s20.causal_linear_attention, lambda: placeholder,
             # every key read: not causal
             [lambda: lambda fq, fk, v: (fq @ (fk.T @ v)) / (fq @ fk.sum(0))[:, None]]),
    "20_3": (checks.check_20_3, lambda: s20.crossover_length, lambda: placeholder,
             [lambda: lambda d, w, o: math.ceil(o * (2 * w + 1))]),  # equality counted as faster
}  # fmt: skip
CASES.update(CASES_20)

# ------------------------------------ lesson 21 (more cases: tests/test_lesson_exercises_21.py)
s21 = solutions(21)
CASES_21 = {
    "21_1": (checks.check_21_1, lambda: s21.rms_norm_backward, lambda: placeholder,
             # r taken as a constant: only the first term of dx
             [lambda: lambda x, g, u, e: (u * g / np.sqrt((x * x).mean(-1, keepdims=True) + e),
                                          s21.rms_norm_backward(x, g, u, e)[1])]),
    "21_2": (checks.check_21_2, lambda: s21.rope_halves, lambda: placeholder,
             [lambda: lambda x, o, b: s21.rope_halves(x, 0, b)]),  # the offset left out
    "21_3": (checks.check_21_3, lambda: s21.kv_cache_bytes, lambda: placeholder,
             [lambda: lambda N, D, h, kv, L, b: 2 * N * h * (D // h) * L * b]),  # h, not kv_heads
}  # fmt: skip
CASES.update(CASES_21)


@pytest.mark.parametrize(
    "name", [*CASES_15, *CASES_16, *CASES_17, *CASES_18, *CASES_19, *CASES_20, *CASES_21]
)
def test_lesson15_16_cases(name, capsys):
    test_solution_passes(name, capsys)
    test_placeholder_is_not_attempted(name, capsys)
    test_wrong_answer_fails(name, 0)


# ------------------------------------ lesson 00 (more cases: tests/test_lesson_exercises_00.py)
s00 = solutions(0)
CASES_00 = {
    "00_1": (checks.check_00_1, lambda: s00.merge_step, lambda: placeholder,
             # the pair counted once per word, whatever the word's count
             [lambda: lambda v: s00.merge_step(dict.fromkeys(v, 1))]),
    "00_2": (checks.check_00_2, lambda: s00.encode, lambda: placeholder,
             [lambda: lambda text, merges: s00.encode(text, merges[::-1])]),  # the order reversed
}  # fmt: skip
CASES.update(CASES_00)


@pytest.mark.parametrize("name", CASES_00)
def test_lesson00_cases(name, capsys):
    test_solution_passes(name, capsys)
    test_placeholder_is_not_attempted(name, capsys)
    test_wrong_answer_fails(name, 0)
