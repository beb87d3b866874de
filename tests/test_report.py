"""What a training run tells the person watching it and leaves behind (train/report.py): the
label-smoothed loss's floor, the sampled validation line, the plain-lines note, the result
card's times and the attention figure's example.

Every run here is the tiny copy task of tests/test_train.py (a step takes milliseconds).
"""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pytest
from test_runs import tiny  # copy, 6 steps of a tiny model, no plots

from minitransformer import functional as F
from minitransformer import tensor
from minitransformer.train import Trainer, evaluation, progress, report

# ------------------------------------------------------------------ the smoothed loss's floor


@pytest.mark.parametrize("eps", [0.1, 0.2])
@pytest.mark.parametrize("vocab", [2, 24, 596])
def test_the_floor_is_the_least_loss_the_op_reaches(eps, vocab):
    """A model that predicts the smoothed target q itself (logits = log q) gets exactly the
    floor from the loss op, pad rows ignored; every other prediction gets more."""
    rng = np.random.default_rng(vocab)
    target = rng.integers(1, vocab, size=12)
    target[:3] = 0  # pad targets: ignored rows
    q = np.full((12, vocab), eps / vocab)
    q[np.arange(12), target] += 1 - eps
    floor = evaluation.smoothed_loss_floor(eps, vocab)

    def loss(logits):
        return F.cross_entropy(
            tensor(logits, dtype="float64"), target, label_smoothing=eps, ignore_index=0
        ).item()

    assert loss(np.log(q)) == pytest.approx(floor, rel=1e-12, abs=1e-12)
    for _ in range(5):
        assert loss(np.log(q) + rng.normal(scale=0.05, size=q.shape)) > floor
    assert loss(np.log(q) * 3) > floor  # over-confident: 100% right, and a higher loss


def test_the_floor_of_the_runs_that_print_it():
    assert evaluation.smoothed_loss_floor(0.1, 24) == pytest.approx(0.6163, abs=5e-5)  # copy
    assert evaluation.smoothed_loss_floor(0.1, 596) == pytest.approx(0.9625, abs=5e-5)
    assert evaluation.smoothed_loss_floor(0.0, 24) == 0.0


# ------------------------------------------------------------------ the evaluation lines


def _line(capsys, cfg, vocab, **kw) -> str:
    reporter = progress.Reporter(cfg.resolved(), lambda: True, vocab)
    metrics = dict(loss=0.6165, token_acc=1.0, exact_match=0.67)
    reporter.eval_line(500, "valid", metrics, **kw)
    return capsys.readouterr().err.strip()


def test_the_validation_line_says_the_loss_is_smoothed_and_scored_on_a_sample(tmp_path, capsys):
    line = _line(capsys, tiny(tmp_path), 24, scored=(200, 1000))
    assert line == (
        "valid at step 500:  loss 0.6165 (label-smoothed ε 0.1; floor 0.6163 at vocabulary "
        "24)  token acc 100.0%  exact match 67.0%  (on 200 of 1,000 sentences)"
    )
    whole = _line(capsys, tiny(tmp_path, label_smoothing=0.0), 24, scored=(1000, 1000))
    assert whole == "valid at step 500:  loss 0.6165  token acc 100.0%  exact match 67.0%"


def test_a_run_logs_and_prints_the_floor_and_the_sample(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    trainer = Trainer(tiny(out, eval_every=3, plots=True))
    trainer.train()
    err = capsys.readouterr().err
    vocab = trainer.model_cfg.tgt_vocab
    floor = round(evaluation.smoothed_loss_floor(0.1, vocab), 4)
    valid = next(line for line in err.splitlines() if line.startswith("valid at step 3:"))
    assert f"(label-smoothed ε 0.1; floor {floor:.4f} at vocabulary {vocab})" in valid
    assert valid.endswith("(on 8 of 16 sentences)")
    test = next(line for line in err.splitlines() if line.startswith("test at step 6, final:"))
    assert "(on 8 of 16 sentences)" in test
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    evaluations = [r for r in records if r["split"] != "train"]
    assert [r["split"] for r in evaluations] == ["valid", "test"]
    assert all(r["label_smoothing"] == 0.1 and r["loss_floor"] == floor for r in evaluations)
    assert all(r["loss"] >= floor for r in evaluations)
    assert not any("loss_floor" in r for r in records if r["split"] == "train")


# ------------------------------------------------------------------ progress


def test_plain_lines_say_once_why_there_is_no_bar(tmp_path, capsys):
    Trainer(tiny(tmp_path / "a", progress=True)).train()  # capsys: stderr is no terminal
    err = capsys.readouterr().err
    assert err.count("note: progress comes as plain lines every 2 steps (stderr is not a "
                     "terminal: a pipe, a log file or mpiexec)") == 1  # fmt: skip
    assert err.index("plain lines") < err.index("step 2/6")
    Trainer(tiny(tmp_path / "b", progress=False)).train()  # --no-progress: asked for
    assert "plain lines" not in capsys.readouterr().err


# ------------------------------------------------------------------ the result card's times


def test_wall_time_is_the_whole_call_and_train_time_the_steps(tmp_path, monkeypatch):
    real = evaluation.evaluate

    def slow_evaluation(*args, **kw):
        time.sleep(0.4)
        return real(*args, **kw)

    monkeypatch.setattr(evaluation, "evaluate", slow_evaluation)
    trainer = Trainer(tiny(tmp_path, eval_every=3))  # two evaluations: 0.8 s beyond the steps
    card = trainer.train()
    assert card["train_time_s"] == round(trainer.elapsed, 1)
    assert card["wall_time_s"] >= card["train_time_s"] + 0.8 - 0.1  # card values are rounded
    assert "resumed_at_step" not in card
    resumed = Trainer.resume(tmp_path, steps=8).train()
    assert resumed["resumed_at_step"] == 6 and resumed["wall_time_s"] >= 0.4 - 0.05
    assert resumed["train_time_s"] >= card["train_time_s"]  # the steps of both sessions


# ------------------------------------------------------------------ the attention figure


@pytest.fixture
def trained(tmp_path):
    pytest.importorskip("matplotlib")
    trainer = Trainer(tiny(tmp_path, steps=2))
    trainer.train()
    return trainer


def _stand_in(monkeypatch, trainer, right: set[int], wrong_0: list[int]):
    """greedy_decode that outputs the reference for the test examples in ``right`` and
    ``wrong_0`` (ids) for the others; records each batch it is given."""
    pairs, calls = trainer.task.splits["test"], []

    def decode(model, src, max_len=None):
        calls.append(len(src))
        return [list(pairs[i][1]) if i in right else list(wrong_0) for i in range(len(src))]

    monkeypatch.setattr(evaluation, "greedy_decode", decode)
    return calls


def _rows(fig):
    ax = fig.axes[0]
    return [(t.get_text(), t.get_color()) for t in ax.get_yticklabels()], ax.get_ylabel()


def test_the_attention_figure_shows_the_first_example_the_model_gets_right(trained, monkeypatch):
    calls = _stand_in(monkeypatch, trained, right={3, 5}, wrong_0=[5])
    fig = trained.plot_attention(io.BytesIO())
    assert calls == [16]  # one batched decode of the first 16
    title = fig._suptitle.get_text()
    assert "test example 3\n(the first of test examples 0-15 whose greedy output is the " in title
    label = report._token_labeller(trained.task.vocab)
    rows, ylabel = _rows(fig)
    want = [label(i) for i in trained.task.splits["test"][3][1]] + ["<eos>"]
    assert rows == [(token, "black") for token in want]
    assert ylabel == "target position (queries)" and "differs" not in title


def test_with_no_example_right_the_figure_gives_the_reference_and_marks_the_rows(
    trained, monkeypatch
):
    source, target = trained.task.splits["test"][0]
    extra = next(i for i in range(3, 9) if i not in target[:2])
    wrong = [*target[:2], extra, *target[2:]]  # one token added after the second
    _stand_in(monkeypatch, trained, right=set(), wrong_0=wrong)
    fig = trained.plot_attention(io.BytesIO())
    title = fig._suptitle.get_text()
    assert "test example 0\nmodel output differs from the reference (none of test examples " \
        "0-15 is right; red: output tokens not in it)\nreference: " in title  # fmt: skip
    assert title.endswith("reference: " + trained.task.references("test")[0])
    rows, ylabel = _rows(fig)
    assert ylabel == "model output (differs from the reference)"
    assert len(rows) == len(wrong) + 1  # the output's tokens and its end mark
    assert [color for _, color in rows] == ["black"] * 2 + ["red"] + ["black"] * (len(rows) - 3)

    _stand_in(monkeypatch, trained, right=set(), wrong_0=target[:-1])  # one token left out
    title = trained.plot_attention(io.BytesIO(), index=0)._suptitle.get_text()
    assert "(it leaves out part of it)" in title and "none of" not in title
