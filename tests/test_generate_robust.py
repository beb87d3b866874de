"""``generate`` against hostile sizes and values (issue 47, causes 2, 7 and 10).

- Cause 2: ``--samples`` and prompts × samples are capped at MAX_TEXTS where they enter; the
  texts are generated and printed a batch at a time (memory one batch's), the library's
  ``generate`` refuses more than MAX_PROMPTS prompts before any allocation, and one seed
  gives the same texts however the rows are batched.
- Cause 7: a positive temperature too small for z / τ (1e-300, subnormals, float32's own
  tiny values) is greedy's limit, never NaN, never a NumPy warning; top-k changes nothing.
- Cause 10: every generate flag's mistake is one line in command-line words (--max-new-tokens,
  --top-k), never the library's Python names (max_new_tokens =, top_k, None).
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from test_cli import assert_user_error, run_main
from test_lm_cli import SMALL

from minitransformer.config.train import MAX_SEED
from minitransformer.errors import ArgumentError
from minitransformer.nn import language_model, lm_arguments
from minitransformer.nn.sampling import next_tokens, temperature_softmax
from minitransformer.runtime import sampler as sampler_module
from minitransformer.runtime.sampler import MAX_TEXTS, TextSampler

TINY_TEMPERATURES = [1e-300, 1e-307, 1e-308, 2.2250738585072014e-308, 1e-310, 5e-324, 1e-320]
FLOAT32_TINY = [1e-40, 1e-45, 1e-38]  # float32 subnormals and the smallest normal


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """One small run of train lm (tests/test_lm_cli.py's flags), shared by this module."""
    out = tmp_path_factory.mktemp("runs") / "lm"
    from minitransformer.cli import main

    assert main(["train", "lm", "--steps", "20", "--out", str(out), *SMALL]) == 0
    return out


@pytest.fixture(scope="module")
def sampler(lm_run):
    return TextSampler.from_checkpoint(lm_run)


def _batch_rows(monkeypatch, rows):
    """Decode ``rows`` prompts at a time (the library's and the stream's batch size)."""
    monkeypatch.setattr(language_model, "BATCH_ROWS", rows)
    monkeypatch.setattr(sampler_module, "BATCH_ROWS", rows)


# ------------------------------------------------------------------ cause 2: bounded sizes
@pytest.mark.parametrize(
    "argv",
    [
        ["--samples", str(MAX_TEXTS + 1)],
        ["--samples", "20000"],
        ["--samples", str(MAX_TEXTS // 2 + 1), "a", "b"],
        ["--samples", "2", *["x"] * (MAX_TEXTS // 2 + 1)],
        ["--samples", "1", *["y"] * (MAX_TEXTS + 1)],
    ],
    ids=["cap+1", "20000", "two-prompts", "many-prompts", "too-many-prompts"],
)
def test_samples_times_prompts_is_capped_before_the_model_loads(lm_run, argv, capsys):
    code, out, err = run_main(["generate", "--checkpoint", str(lm_run), *argv], capsys)
    assert_user_error(code, err, f"{MAX_TEXTS:,}")
    assert out == ""


def test_texts_are_made_and_printed_a_batch_at_a_time(lm_run, sampler, monkeypatch, capsys):
    """The rows of one call are BATCH_ROWS at most, and the stream is lazy: its first text
    comes before the second batch is decoded."""
    _batch_rows(monkeypatch, 3)
    sizes = []
    original = language_model.TransformerLM.continue_prompts

    def spy(self, prompts, how, first_row=0):
        sizes.append(len(prompts))
        return original(self, prompts, how, first_row)

    monkeypatch.setattr(language_model.TransformerLM, "continue_prompts", spy)
    texts = sampler.stream(["In the", "And"], samples=5, max_new_tokens=2, seed=1)
    assert sizes == []  # checked, nothing decoded yet
    next(texts)
    assert sizes == [3]
    assert len([next(texts) for _ in range(9)]) == 9
    assert sizes == [3, 3, 3, 1]
    code, out, err = run_main(["generate", "--checkpoint", str(lm_run), "--samples", "7",
                               "--max-new-tokens", "2", "--seed", "0"], capsys)  # fmt: skip
    assert code == 0, err
    assert len(out.splitlines()) == 7 and max(sizes[4:]) <= 3


def test_the_command_prints_each_batch_before_the_next(lm_run, monkeypatch, capsys):
    """Ctrl-C during the second batch: the first batch's texts are already out."""
    _batch_rows(monkeypatch, 3)
    original = language_model.TransformerLM.continue_prompts
    calls = []

    def stop_at_the_second(self, prompts, how, first_row=0):
        calls.append(first_row)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, prompts, how, first_row)

    monkeypatch.setattr(language_model.TransformerLM, "continue_prompts", stop_at_the_second)
    code, out, err = run_main(["generate", "--checkpoint", str(lm_run), "--samples", "9",
                               "--max-new-tokens", "2", "--seed", "0"], capsys)  # fmt: skip
    assert code == 130 and "interrupted" in err, err
    assert calls == [0, 3] and len(out.splitlines()) == 3


@pytest.mark.parametrize("rows", [1, 2, 5])
def test_one_seed_gives_the_same_texts_however_they_are_batched(lm_run, rows, monkeypatch,
                                                                capsys):  # fmt: skip
    argv = ["generate", "--checkpoint", str(lm_run), "In the", "And God", "",
            "--samples", "4", "--max-new-tokens", "5", "--seed", "11", "--top-k", "50"]  # fmt: skip
    code, whole, err = run_main(argv, capsys)
    assert code == 0, err
    _batch_rows(monkeypatch, rows)
    code, batched, err = run_main(argv, capsys)
    assert code == 0, err
    assert batched == whole and len(whole.splitlines()) == 12
    assert len(set(whole.splitlines())) > 3  # the samples differ from one another


def test_a_prompts_text_does_not_depend_on_the_other_prompts(sampler, monkeypatch):
    model = sampler.model
    a, b, c = (sampler.prompt_ids(t) for t in ("In the", "And God said", "the"))
    first = model.generate([a, b], 6, temperature=1.0, seed=4)
    other = model.generate([c, b], 6, temperature=1.0, seed=4)
    assert first[1] == other[1]  # row 1's draws are (seed, 1)'s whatever row 0 is
    _batch_rows(monkeypatch, 1)
    assert model.generate([a, b], 6, temperature=1.0, seed=4) == first
    texts = sampler.generate(["In the", "And God said"], 6, 1.0, None, 4)
    assert texts == [sampler.tokenizer.detokenize(ids) for ids in first]


@pytest.mark.parametrize("count", [lm_arguments.MAX_PROMPTS + 1, 25_000])
def test_the_library_refuses_more_prompts_than_one_call_holds(sampler, count):
    bos = sampler.model.cfg.bos_id
    with pytest.raises(ArgumentError, match=f"{lm_arguments.MAX_PROMPTS:,} one call"):
        sampler.model.generate([[bos]] * count, 2)
    with pytest.raises(ArgumentError, match=f"{lm_arguments.MAX_PROMPTS:,} one call"):
        sampler.model.generate(np.full((count, 1), bos), 2)
    with pytest.raises(ArgumentError, match=f"{lm_arguments.MAX_PROMPTS:,} one call"):
        sampler.generate([""] * count, 2)


# ------------------------------------------------------------------ cause 7: tiny temperature
@pytest.mark.parametrize(
    ("dtype", "tau"),
    [(np.float64, t) for t in TINY_TEMPERATURES + FLOAT32_TINY]
    + [(np.float32, t) for t in FLOAT32_TINY],  # logits and τ in float32
)
@pytest.mark.parametrize("top_k", [None, 1, 3])
def test_a_tiny_temperature_is_greedy_without_nan_or_warnings(dtype, tau, top_k):
    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(6, 40)) * 4).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NumPy RuntimeWarning fails the test
        p = temperature_softmax(logits, dtype(tau))
        ids = next_tokens(logits, float(dtype(tau)), top_k, np.random.default_rng(1))
    assert np.isfinite(p).all()
    np.testing.assert_array_equal(p.argmax(axis=-1), logits.argmax(axis=-1))
    np.testing.assert_allclose(p.max(axis=-1), 1.0)
    np.testing.assert_array_equal(ids, logits.argmax(axis=-1))


@pytest.mark.parametrize("tau", ["1e-300", "1e-308", "5e-324", "1e-320", "1e-40"])
def test_generate_at_a_tiny_temperature_writes_greedys_text(lm_run, tau, capsys):
    base = ["generate", "--checkpoint", str(lm_run), "In the", "And",
            "--max-new-tokens", "8", "--seed", "2"]  # fmt: skip
    code, greedy, err = run_main([*base, "--temperature", "0"], capsys)
    assert code == 0, err
    for extra in ([], ["--top-k", "5"]):
        code, out, err = run_main([*base, "--temperature", tau, *extra], capsys)
        assert code == 0 and err == "", err
        assert out == greedy


# ------------------------------------------------------------------ cause 10: flag words
PYTHON_NAMES = ("None", "TransformerLM", "TextSampler", "generate(")
SNAKE_CASE = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")  # max_new_tokens, top_k: Python's names


@pytest.mark.parametrize(
    ("argv", "patterns"),
    [
        (["--max-new-tokens", "1000000000"], ["--max-new-tokens", "65,536"]),
        (["--max-new-tokens", "65536"], ["--max-new-tokens 65536 is too many", "or less"]),
        (["--max-new-tokens", "40", "a b c"], ["--max-new-tokens 40", "or less"]),
        (["--max-new-tokens", "0"], ["--max-new-tokens"]),
        (["--max-new-tokens", "-3"], ["--max-new-tokens"]),
        (["--max-new-tokens", "2.5"], ["--max-new-tokens"]),
        (["--top-k", "99999"], ["--top-k 99999", "leave --top-k out"]),
        (["--top-k", "100000000000000000000"], ["--top-k", "leave --top-k out"]),
        (["--top-k", "0"], ["--top-k"]),
        (["--top-k", "many"], ["--top-k"]),
        (["--temperature", "nan"], ["--temperature"]),
        (["--temperature", "inf"], ["--temperature"]),
        (["--temperature", "-1e-300"], ["--temperature"]),
        (["--seed", "-1"], ["--seed"]),
        (["--seed", str(MAX_SEED + 1)], ["--seed"]),
        (["--seed", "1.5"], ["--seed"]),
        (["--samples", "0"], ["--samples"]),
        (["--samples", "1000000000"], ["--samples", f"{MAX_TEXTS:,}"]),
        (["word " * 400], ["the prompt is", "shorten it"]),
    ],
    ids=lambda v: " ".join(v)[:40] if isinstance(v, list) else str(v),
)
def test_each_generate_flag_mistake_is_worded_for_the_command_line(lm_run, argv, patterns,
                                                                   capsys):  # fmt: skip
    code, out, err = run_main(["generate", "--checkpoint", str(lm_run), *argv], capsys)
    assert_user_error(code, err, *patterns)
    line = err.splitlines()[-2]
    for word in PYTHON_NAMES:
        assert word not in line, (word, line)
    assert not SNAKE_CASE.search(line), line
    assert out == ""
