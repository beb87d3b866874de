# ruff: noqa: E501 - one row per bad command line reads best on one line
"""The attention quality study (``python -m minitransformer.tools.efficient_attention.quality``):
the recall task's data (shapes, every fact out of a window's reach, the answer determined by
the context, seeded), its batches, the flags and arguments refused in one line before
anything is trained, and a tiny real study of every kind (and of the command, with its
files)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_attention_cost import assert_tool_error, run_tool

from minitransformer.data.vocab import BOS, PAD
from minitransformer.errors import ArgumentError, ConfigError
from minitransformer.tools.efficient_attention import quality
from minitransformer.tools.efficient_attention.quality import (
    KINDS,
    main,
    run_study,
    summarize,
)
from minitransformer.tools.efficient_attention.recall import RecallTask, to_batch

PROG = quality.PROG
TASKS = [
    RecallTask(),
    RecallTask(length=1000, keys=12, values=5, facts=10, questions=4, fillers=3, gap=300),
    RecallTask(length=256, keys=4, values=2, facts=4, questions=4, fillers=1, gap=65),
]
TINY_MODEL = dict(d_model=16, h=2, N=2, d_ff=32, pre_norm=True)


def run_main(argv, capsys):
    return run_tool(main, argv, capsys)


def assert_user_error(code, err, *patterns):
    words = ("='", "=True", "batch_size", "kinds=", "length=")
    assert_tool_error(PROG, words, code, err, *patterns)


# ------------------------------------------------------------------ the task's data
@pytest.mark.parametrize("task", TASKS, ids=lambda t: f"T{t.length}")
def test_the_data_has_its_shapes_and_tokens(task):
    data = task.sample(20, np.random.default_rng(3))
    assert data.tokens.shape == data.answers.shape == data.facts.shape == (20, task.length)
    assert data.tokens.dtype == np.int64 and data.answers.dtype == bool
    assert (data.answers.sum(axis=1) == task.questions).all()
    assert (data.facts.sum(axis=1) == task.facts).all()
    assert data.tokens.min() >= 4 and data.tokens.max() < task.vocab_size == len(task.vocab)
    is_fact = (data.tokens >= task.first_fact) & (data.tokens < task.first_filler)
    store = np.arange(task.length) < task.store
    assert (is_fact[:, store] == data.facts[:, store]).all()  # fillers elsewhere in the store
    assert not data.facts[:, ~store].any()


@pytest.mark.parametrize("task", TASKS, ids=lambda t: f"T{t.length}")
def test_every_answer_is_one_fact_out_of_a_windows_reach(task):
    """Each answer is the one fact of its key in the store (so the context determines it),
    the question's key is right before it, no other token of the sequence carries its key's
    value, and the fact is at least ``gap`` positions back, at positions that vary."""
    data = task.sample(30, np.random.default_rng(5))
    distances = []
    for tokens, answers in zip(data.tokens, data.answers, strict=True):
        keys_of = (tokens - task.first_fact) // task.values  # a fact token's key
        for t in np.flatnonzero(answers):
            answer = tokens[t]
            key = keys_of[t]
            assert tokens[t - 1] == task.first_key + key  # the question
            same_key = np.flatnonzero(
                (tokens[:t] >= task.first_fact)
                & (tokens[:t] < task.first_filler)
                & (keys_of[:t] == key)
            )
            assert len(same_key) == 1, "the key's fact appears once before its answer"
            p = same_key[0]
            assert tokens[p] == answer
            assert t - p >= task.gap
            distances.append(t - p)
    # The model reads BOS + tokens: the fact is t - p - 1 input positions before the
    # prediction, beyond 2 layers × window 32 for the study's task (gap 128).
    assert min(distances) - 1 > 2 * 32 or task.gap < 66
    assert len(set(distances)) > 10  # the positions vary


def test_the_default_task_is_beyond_two_layers_of_window_32():
    task = RecallTask()
    assert task.length >= 512 and task.gap - 1 > 3 * 32
    assert task.chance == 1 / task.values


def test_the_data_is_seeded():
    task = RecallTask(length=300)
    a = task.sample(8, np.random.default_rng([2, 0]))
    b = task.sample(8, np.random.default_rng([2, 0]))
    c = task.sample(8, np.random.default_rng([2, 1]))
    assert (a.tokens == b.tokens).all() and (a.answers == b.answers).all()
    assert (a.tokens != c.tokens).any()
    first = quality.held_out(task, 4)
    assert (first.tokens == quality.held_out(task, 4).tokens).all()


def test_a_batch_reads_the_sequence_and_scores_only_the_answers():
    task = RecallTask(length=200)
    data = task.sample(3, np.random.default_rng(0))
    batch = to_batch(data)
    assert batch.tgt_in.shape == batch.tgt_out.shape == (3, 200)
    assert (batch.tgt_in[:, 0] == BOS).all() and (batch.tgt_in[:, 1:] == data.tokens[:, :-1]).all()
    assert (batch.tgt_out[data.answers] == data.tokens[data.answers]).all()
    assert (batch.tgt_out[~data.answers] == PAD).all()
    assert batch.n_tokens == 3 * task.questions
    assert "k" in task.describe(data.tokens[0]) and "f" in task.describe(data.tokens[0])


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        (dict(length=0), ["length", "positive int"]),
        (dict(length=True), ["length"]),
        (dict(length=100), ["length=100", "raise length"]),
        (dict(values=1), ["values", "2..256"]),
        (dict(facts=9), ["facts=9", "keys=8"]),
        (dict(questions=9, facts=8), ["questions=9"]),
        (dict(gap=2.5), ["gap"]),
        (dict(fillers=-1), ["fillers"]),
    ],
)
def test_a_bad_task_is_refused_naming_its_field(fields, words):
    with pytest.raises((ArgumentError, ConfigError)) as err:
        RecallTask(**fields)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    ("argv", "patterns"),
    [
        (["--kinds", "full,sparse"], ["--kinds", "full,local,strided,linear", "'full,sparse'"]),
        (["--kinds", "local,local"], ["--kinds", "different kinds"]),
        (["--kinds", ""], ["--kinds"]),
        (["--seeds", "0,0"], ["--seeds", "different seeds"]),
        (["--seeds", "-1"], ["--seeds", "got -1"]),
        (["--steps", "0"], ["--steps", "got 0"]),
        (["--steps", "1.5"], ["--steps", "'1.5'"]),
        (["--batch-size", "0"], ["--batch-size"]),
        (["--length", "100"], ["--length", f"{quality.MIN_LENGTH}..", "got 100"]),
        (["--length", "100000"], ["--length", "got 100000"]),
        (["--window", "0"], ["--window", "got 0"]),
        (["--stride", "x"], ["--stride", "'x'"]),
        (["--out", " "], ["--out", "a folder name"]),
        (["--fast"], ["unrecognized arguments: --fast"]),
    ],
)
def test_a_bad_flag_is_one_line_before_any_training(argv, patterns, capsys, monkeypatch):
    monkeypatch.setattr(quality, "run_study", lambda *a, **k: pytest.fail("trained"))
    code, _, err = run_main(argv, capsys)
    assert_user_error(code, err, *patterns)


def test_an_out_that_holds_files_or_is_a_file_is_refused_first(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(quality, "run_study", lambda *a, **k: pytest.fail("trained"))
    (tmp_path / "held").write_text("mine")
    code, _, err = run_main(["--out", str(tmp_path)], capsys)
    assert_user_error(code, err, "--out", "not empty", "--overwrite")
    code, _, err = run_main(["--out", str(tmp_path / "held")], capsys)
    assert_user_error(code, err, "--out", "a file")
    assert (tmp_path / "held").read_text() == "mine"


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (dict(kinds="full"), ["kinds", "list"]),
        (dict(kinds=["full", "sparse"]), ["kinds", "sparse"]),
        (dict(seeds=[0, 0]), ["seeds", "different"]),
        (dict(seeds=[]), ["seeds"]),
        (dict(steps=0), ["steps"]),
        (dict(steps=10**6), ["steps", "at most"]),
        (dict(window=0), ["window"]),
        (dict(stride=-2), ["stride"]),
        (dict(peak_lr=0.0), ["peak_lr"]),
        (dict(model=[("d_model", 32)]), ["model", "dict"]),
        (dict(model={"d_model": 30, "h": 4}), ["d_model", "30"]),
        (dict(model={"layers": 2}), ["model", "layers"]),
        (dict(length=512, task=RecallTask(length=300)), ["task", "length=512"]),
    ],
)
def test_run_study_refuses_bad_arguments_before_training(arguments, words, monkeypatch):
    monkeypatch.setattr(quality, "run_one", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises((ArgumentError, ConfigError)) as err:
        run_study(**{"kinds": ["full"], "seeds": [0], "steps": 2, "length": 200, **arguments})
    for word in words:
        assert word in str(err.value), (word, str(err.value))


# ------------------------------------------------------------------ a tiny real study
def test_a_tiny_study_trains_every_kind_on_the_same_batches():
    task = RecallTask(length=160, keys=4, values=4, facts=4, questions=4, gap=70)
    lines = []
    rows = run_study(KINDS, [0], steps=3, length=160, batch_size=2, window=8, test_sequences=4,
                     task=task, model=TINY_MODEL, log=lines.append)  # fmt: skip
    assert [r["kind"] for r in rows] == list(KINDS) and len(lines) == 4
    for row in rows:
        assert 0.0 <= row["accuracy"] <= 1.0 and np.isfinite(row["loss"])
        assert len(row["train_losses"]) == 3 and row["seconds"] > 0
    assert [r["window"] for r in rows] == [None, 8, quality.default_stride(160), None]
    again = run_study(["full"], [0], steps=3, length=160, batch_size=2, test_sequences=4,
                      task=task, model=TINY_MODEL)  # fmt: skip
    assert again[0]["train_losses"] == rows[0]["train_losses"]  # seeded: weights and batches
    assert again[0]["accuracy"] == rows[0]["accuracy"]
    summary = summarize(rows)
    assert list(summary) == list(KINDS) and summary["local"]["accuracies"] == [rows[1]["accuracy"]]


def test_the_command_writes_its_table_json_and_figure(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(quality, "MODEL", TINY_MODEL)
    monkeypatch.setattr(quality, "TEST_SEQUENCES", 4)
    out = tmp_path / "q"
    argv = ["--kinds", "full,local", "--seeds", "0,1", "--steps", "2", "--batch-size", "2",
            "--length", str(quality.MIN_LENGTH), "--out", str(out)]  # fmt: skip
    code, printed, err = run_main(argv, capsys)
    assert code == 0, err
    assert (
        "| full |" in printed
        and "| local | 32 |" in printed
        and "Chance: accuracy 0.125" in printed
    )
    record = json.loads((out / "quality.json").read_text())
    assert [r["kind"] for r in record["rows"]] == ["full", "local", "full", "local"]
    assert record["summary"]["full"]["seeds"] == [0, 1] and record["chance"] == 0.125
    assert (out / "quality.md").read_text().startswith("| attention |")
    assert (out / "plots" / "quality.png").stat().st_size > 1000
    code, _, err = run_main(argv, capsys)  # the same --out again: refused, not overwritten
    assert_user_error(code, err, "--out", "not empty")
