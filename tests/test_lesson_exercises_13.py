"""Lesson 13 (ablations): its exercise checks accept every valid form of a right answer, and
the lesson's computed findings follow their stated rules.

- 13.1 (dropout's variance) accepts a float32 answer (np.float32 carries ~7 digits: the check's
  tolerance follows the answer's dtype) and any equivalent formula, and still rejects the
  wrong ones, float32 or not (those are in tests/test_lesson_exercises.py);
- 13.2 (ablate model.eval(): a held-out perplexity measured in eval or training mode) accepts
  any valid way of computing it; the notebook's experiment cell under it runs with the
  reference solution;
- the notebook's quoted Table 3 agrees with the library's (ablate.PAPER) and its computed
  "biggest effect" is the paper's N = 2 row; the verdict rule judges on both metrics (a claim
  with one metric as claimed is "mixed", not "holds"); one ``verdicts`` feeds section 6 and
  the Summary; no cell ends in a bare ``model.eval()`` (a module's repr, ~100 lines); the
  figures go to ``figures.plots_dir``;
- each 13.1 mistake gets its own hint, and a malformed answer to any check fails with a hint,
  never another exception; no cell above exercise 1 gives its formula away; the effects figure
  has linear axes; "Reading the verdicts" says what the run measured (made-up verdicts).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import json
import math
import re

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.data.batching import make_batch
from minitransformer.tools import ablate

NOTEBOOK = LESSONS / "13_ablations.ipynb"
s13 = importlib.import_module("solutions.lesson13")


def _cells(kind: str) -> list[str]:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def _code_cell(marker: str) -> str:
    found = [c for c in _cells("code") if marker in c]
    assert len(found) == 1, f"lesson 13 has {len(found)} code cells containing {marker!r}"
    return found[0]


# ------------------------------------------------------------------ 13.1, valid forms
VARIANCES = {
    "float32": lambda x, p: np.float32(x) ** 2 * np.float32(p) / np.float32(1 - p),
    "float32 E[y^2] - E[y]^2": lambda x, p: np.float32(x**2 / (1 - p)) - np.float32(x**2),
    "float64": lambda x, p: np.float64(x) ** 2 * p / (1 - p),
    "0-d array": lambda x, p: np.asarray(x**2 * p / (1 - p)),
    "E[y^2] - E[y]^2": lambda x, p: (x / (1 - p)) ** 2 * (1 - p) - x**2,
    "Python float": lambda x, p: math.pow(x, 2) * p / (1 - p),
    "library Tensor": lambda x, p: mt.tensor(x**2 * p / (1 - p)),
}


@pytest.mark.parametrize("form", VARIANCES)
def test_13_1_accepts_every_valid_form(form, capsys):
    assert checks.check_13_1(VARIANCES[form]) == checks.CORRECT
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer",
    [
        lambda x, p: np.array([x**2 * p / (1 - p)] * 2),  # not one number
        lambda x, p: None if p else 0.0,  # nothing returned
        lambda x, p: np.float32(x**2 * p / (1 - p) * 1.001),  # 0.1 % off, in float32
    ],
)
def test_13_1_rejects_non_answers(answer):
    with pytest.raises(AssertionError):
        checks.check_13_1(answer)


# ------------------------------------------------------------------ 13.2, valid forms
def _in_mode(model, eval_mode):
    """Switch the model for the measurement; return a function that puts the mode back."""
    was = model.training
    if eval_mode:
        model.eval()
    else:
        model.train()
    return lambda: model.train(was)


def _ppl_numpy(model, pairs, eval_mode=True):
    """float64 log-softmax by hand; the pads masked out with the batch's own count."""
    restore = _in_mode(model, eval_mode)
    try:
        b = make_batch(pairs)
        with mt.no_grad():
            z = model(b.src, b.tgt_in).numpy().astype(np.float64)  # (B, T, V)
        logp = z - z.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        picked = np.take_along_axis(logp, b.tgt_out[..., None], -1)[..., 0]
        real = b.tgt_out != model.cfg.pad_id
        return np.exp(-picked[real].sum() / real.sum())
    finally:
        restore()


def _ppl_per_pair(model, pairs, eval_mode=True):
    """One pair at a time: the token-weighted mean of the losses (sum over sum)."""
    restore = _in_mode(model, eval_mode)
    try:
        total = count = 0.0
        for pair in pairs:
            b = make_batch([pair])
            with mt.no_grad():
                loss = F.cross_entropy(model(b.src, b.tgt_in), b.tgt_out, ignore_index=0)
            total += loss.item() * b.n_tokens
            count += b.n_tokens
        return math.exp(total / count)
    finally:
        restore()


def _ppl_chunked_float32(model, pairs, eval_mode=True):
    """Chunks of 7 pairs, sums accumulated, the result returned as np.float32."""
    restore = _in_mode(model, eval_mode)
    try:
        total, count = np.float32(0), 0
        for i in range(0, len(pairs), 7):
            b = make_batch(pairs[i : i + 7])
            logits = model(b.src, b.tgt_in)
            total += np.float32(
                F.cross_entropy(logits, b.tgt_out, ignore_index=0, reduction="sum").item()
            )
            count += b.n_tokens
        return np.exp(total / np.float32(count), dtype=np.float32)
    finally:
        restore()


@pytest.mark.parametrize(
    "answer",
    [
        s13.perplexity, _ppl_numpy, _ppl_per_pair, _ppl_chunked_float32,
        lambda model, pairs, eval_mode=True: mt.tensor([s13.perplexity(model, pairs, eval_mode)]),
        lambda model, pairs, **o: s13.perplexity(model, pairs, o.get("eval_mode", True)),
    ],
)  # fmt: skip
def test_13_2_accepts_every_valid_form(answer, capsys):
    assert checks.check_13_2(answer) == checks.CORRECT
    assert "✓" in capsys.readouterr().out


def test_13_2_experiment_cell_runs_with_the_solution():
    """The check cell of exercise 2, with the solution and a tiny section-4 setting: it trains
    one model per dropout rate and prints both measurements."""
    s0 = ablate.AblationSettings.fast(
        steps=3, warmup=2, n_train=64, eval_samples=8, long_samples=4, curve_every=0,
        curve_samples=8, model={"d_model": 16, "h": 2, "N": 1, "d_ff": 32},
    )  # fmt: skip
    namespace = dict(
        checks=checks, ablate=ablate, GAP_PS=(0.0, 0.1, 0.3), s0=s0,
        gap_data=ablate.make_data(s0), perplexity=s13.perplexity,
    )  # fmt: skip
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(_code_cell("checks.check_13_2("), namespace)
    text = out.getvalue()
    assert "✓" in text and "P_drop 0.1: held-out PPL" in text and "P_drop 0.3:" in text, text


# ------------------------------------------------------------------ the computed findings
def _run_table3_cell() -> tuple[dict, str]:
    shown: list[str] = []
    namespace = dict(PPL_TOL=0.02, BLEU_TOL=1.0, display=shown.append, Markdown=str)
    exec(_code_cell("TABLE3 = {"), namespace)
    return namespace, "\n".join(shown)


def test_table3_cell_quotes_the_papers_rows_as_the_library_does():
    ns, _ = _run_table3_cell()
    table, base = ns["TABLE3"], ns["TABLE3_BASE"]
    same_row = {
        "heads-1": "(A) h 1, d_k = d_v = 512", "heads-2": "(A) h 4, d_k = d_v = 128",
        "heads-8": "(A) h 16, d_k = d_v = 32", "heads-16": "(A) h 32, d_k = d_v = 16",
        "d_k-4": "(B) d_k 16", "d_k-8": "(B) d_k 32", "no-dropout": "(D) P_drop 0.0",
        "dropout-0.2": "(D) P_drop 0.2", "no-label-smoothing": "(D) ε_ls 0.0",
        "label-smoothing-0.2": "(D) ε_ls 0.2",
        "learned-positions": "(E) learned positional embedding",
    }  # fmt: skip
    assert set(same_row) | {"base"} == set(ablate.PAPER)
    assert ablate.PAPER["base"][:2] == base
    for name, row in same_row.items():
        assert ablate.PAPER[name][:2] == table[row], name
    assert len(table) == 18  # rows A-E of Table 3; "big" changes several things


def test_the_papers_biggest_effect_is_computed_to_be_n_2_not_dropout():
    ns, text = _run_table3_cell()
    assert ns["by_ppl"][0] == ns["by_bleu"][0] == "(C) N 2"
    assert "**biggest single-change effect** by perplexity is **(C) N 2**" in text
    assert ns["by_ppl"].index("(D) P_drop 0.0") > 0


def _rule() -> dict:
    namespace = dict(np=np, SEEDS=(0, 1, 2))
    exec(_code_cell("def judge("), namespace)
    return namespace


def test_direction_needs_the_mean_beyond_the_tolerance_and_every_seed_to_agree():
    direction = _rule()["direction"]
    assert direction([3, 4, 5], 1.0) == "higher"
    assert direction([-3, -4, -5], 1.0) == "lower"
    assert direction([0.5, -0.9, 0.8], 1.0) == "same"
    assert direction([6, -1, 4], 1.0) == "unclear"  # the mean is beyond 1, the seeds disagree


def test_a_claim_holds_only_when_both_metrics_move_as_claimed():
    judge = _rule()["judge"]
    worse_ppl, worse_bleu = [1.10, 1.12, 1.08], [-3.0, -4.0, -2.5]
    assert judge(worse_ppl, worse_bleu, "higher", "lower")[0] == "holds"
    assert judge(worse_ppl, [0.2, -0.3, 0.1], "higher", "lower")[0] == "mixed"  # BLEU flat
    assert judge([1.0, 1.01, 0.99], [3.0, 2.0, 4.0], "higher", "lower")[0] == "does not hold"
    assert judge([1.0, 1.01, 0.99], [0.1, -0.2, 0.3], "same", "same")[0] == "holds"
    assert judge(worse_ppl, [0.1, -0.2, 0.3], "same", "same")[0] == "mixed"


def test_section_6_and_the_summary_read_one_verdict():
    """The verdicts are computed once (section 6's cell) and the Summary renders them: no
    markdown cell states which claims held."""
    assert "verdicts[claim] = judge(" in _code_cell("CLAIMS = [")
    assert "verdicts.items()" in _code_cell("groups = {")
    for text in _cells("markdown"):
        assert "learned ≈ sinusoidal" not in text and "biggest single effect" not in text


def test_no_cell_ends_in_a_bare_mode_switch():
    """``model.eval()`` returns the model: as a cell's last line it prints its repr."""
    for source in _cells("code"):
        body = ast.parse(source).body
        last = body[-1] if body else None
        if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
            func = last.value.func
            assert not (isinstance(func, ast.Attribute) and func.attr in ("eval", "train")), (
                f"a cell ends in {ast.unparse(last)}: assign it (or end with ;)"
            )


def test_figures_go_to_plots_dir():
    text = "\n".join(_cells("code"))
    assert 'plots_dir("13")' in text
    assert "../plots" not in text and 'os.environ.get("MT_PLOTS_DIR"' not in text


# ------------------------------------------------------------------ round 4: hints, robustness
@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda x, p: x**2 / (1 - p), "that is E[y²]"),
        (lambda x, p: x**2 * p * (1 - p), "m's own variance is p(1 − p)"),
        (lambda x, p: x**2 * p, "m's own variance is p(1 − p)"),
        (lambda x, p: x * p / (1 - p), "look at the power of x"),
        (lambda x, p: float("nan"), "finite number"),
        (lambda x, p: "abc", "return one number"),
        (lambda x, p: {"var": 0.1}, "return one number"),
        (0.1 / 0.9, "pass your function"),
    ],
)
def test_13_1_each_mistake_gets_its_hint(answer, hint):
    with pytest.raises(AssertionError, match=re.escape(hint)):
        checks.check_13_1(answer)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda model, pairs: s13.perplexity(model, pairs), "eval_mode=False"),
        (lambda model, pairs, eval_mode=True: None, "return one number"),
        (lambda model, pairs, eval_mode=True: [1.0, 2.0], "return one number"),
        (lambda model, pairs, eval_mode=True: float("nan"), "finite number"),
        ("perplexity", "pass your function"),
    ],
)
def test_13_2_non_answers_get_a_hint(answer, hint):
    with pytest.raises(AssertionError, match=re.escape(hint)):
        checks.check_13_2(answer)


@pytest.mark.parametrize(
    "variant",
    [
        ablate.Variant("pre-ln", "pre-LN", {"pre_norm": True}),
        ablate.Variant("learned", "learned", {"learned_positions": True}, random_positions=True),
        ablate.Variant("dropout-0.2", "P_drop 0.2", train={"dropout": 0.2}),
        ablate.Variant("no-warmup", "no warm-up", warmup=False),
        ablate.Variant("d_k-8", "d_k 8", {"key_dim": 8}),
        ablate.Variant("ls", "ε_ls 0.2", train={"label_smoothing": 0.2, "dropout": 0.1}),
    ],
)
def test_13_3_accepts_every_kind_of_one_change(variant, capsys):
    assert checks.check_13_3(lambda: variant) == checks.CORRECT
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("variant", "hint"),
    [
        (ablate.Variant("x", "N", model="N=3"), "takes a dict"),
        (ablate.Variant("x", "P", train={"dropout": True}), "a rate is a number"),
        (ablate.Variant("x", "P", train={"dropout": 1.5}), r"must be in \[0, 1\)"),
        (ablate.Variant("x", "d_ff", {"d_ff": np.array([128, 128])}), "does not build"),
        (ablate.Variant("x", "N", {"N": 2.5}), "does not build"),
    ],
)
def test_13_3_malformed_variants_get_a_hint(variant, hint):
    with pytest.raises(AssertionError, match=hint):
        checks.check_13_3(lambda: variant)


# ------------------------------------------------------------------ round 4: the notebook
def test_exercise_1_is_not_given_away():
    """No cell above exercise 1 states Var[y] = x² p / (1 − p), or its x = 1 case p/(1 − p)
    (the sampling error √(p / (1 − p) / n) used to)."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    sources = ["".join(c["source"]) for c in nb["cells"]]
    above = sources[: next(i for i, s in enumerate(sources) if "1. Dropout's variance." in s)]
    formula = re.compile(r"(?<!\w)p\s*/\s*\(?\s*1\s*[-−]\s*p\s*\)?(?!\w)")
    assert len(above) > 20 and not [s for s in above if formula.search(s)]


def test_exercise_1_check_cell_predicts_the_measured_spread():
    out = io.StringIO()
    namespace = dict(checks=checks, np=np, mt=mt, n_draws=2000, measured_spread={0.1: 0.0075},
                     dropout_variance=s13.dropout_variance)  # fmt: skip
    with contextlib.redirect_stdout(out):
        exec(_code_cell("checks.check_13_1("), namespace)
    assert "p = 0.1: your Var[y] at x = 1 predicts a spread √(Var/n) = 0.0075" in out.getvalue()


def test_the_effects_figure_has_linear_axes_and_the_table_names_the_papers_row():
    assert "symlog" not in _code_cell("13_ablations.png")
    assert "paper[2]" in _code_cell("ablate.run_ablations(")


def _reading(directions: dict, pre_ln_faster: bool = True, no_warmup: list | None = None) -> str:
    """The "Reading the verdicts" text for made-up verdicts: {(variant, set): (verdict, PPL
    direction, BLEU direction)}; every other claim "holds"."""
    seeds, names = (0, 1, 2), ["base", "pre-ln", "no-warmup", "no-dropout"]
    keys = [(n, "test") for n in ("heads-1", "heads-8", "d_k-4", "no-scaling", *names[1:],
                                  "no-label-smoothing", "learned-positions")]  # fmt: skip
    found = {k: (*directions.get(k, ("holds", "higher", "lower")), [1.1] * 3, [-2.0] * 3)
             for k in [*keys, ("learned-positions", "long")]}  # fmt: skip
    loss = {n: [3.0] * 100 for n in names}
    loss["pre-ln"] = [2.5 if pre_ln_faster else 3.5] * 100
    loss["no-warmup"] = no_warmup or loss["base"]
    shown: list[str] = []
    namespace = dict(
        np=np, SEEDS=seeds, found=found, STUDY=ablate.AblationSettings(steps=100, warmup=40),
        sharp={n: np.array([[e, t]] * 3) for n, e, t in
               [("base", 0.8, 0.4), ("d_k-4", 0.7, 0.5), ("no-scaling", 0.4, 0.7)]},
        study_gap={"base": [0.2] * 3, "no-dropout": [0.3] * 3}, gaps={0.0: [2.5] * 3},
        runs={n: {s: {"train_ppl": 3.0, "train_loss": loss[n]} for s in seeds} for n in names},
        epochs=6.4, gap_epochs=20.0, DEPTHS=(2, 6),
        top_bottom={(False, 2): np.full(3, 1.4), (True, 2): np.full(3, 0.9),
                    (False, 6): np.full(3, 8.0), (True, 6): np.full(3, 0.7)},
        display=shown.append, Markdown=str,
    )  # fmt: skip
    exec(_code_cell("bullets = []"), namespace)
    return "\n".join(shown)


def test_reading_the_verdicts_follows_what_this_run_measured():
    same = _reading({("no-label-smoothing", "test"): ("does not hold", "same", "same")})
    assert "BLEU *worse*" not in same and "BLEU the same within the tolerance" in same
    worse = _reading({("no-label-smoothing", "test"): ("holds", "lower", "lower")})
    assert "BLEU *worse*" in worse and "perplexity came out *better*" in worse
    better = _reading({("pre-ln", "test"): ("does not hold", "lower", "higher")})
    assert (
        "**does not hold** (PPL ratio 1.100, BLEU -2.0), because pre-LN trained *better*" in better
    )
    assert "already lower" in better and "already lower" not in _reading({}, False)
    assert "**Pre-LN (our question).** Pre-LN against post-LN" in _reading({})
    assert "was *faster* at first" in _reading({}, no_warmup=[2.9] * 40 + [3.5] * 60)
    assert "behind by the ramp's end" in _reading({}, no_warmup=[3.1] * 100)
    assert "not behind on the loss" in _reading({})
    assert "also means row B's narrow keys" in same  # heads-8 "higher": d_k = 64 / 8
    assert "still learning, not memorising" in same  # gap 0.3 nats against section 4's 2.5
    assert "more peaked than the base's" in same  # d_k-4 at init: entropy 0.7 against 0.8
