"""The scaling study (minitransformer/tools/scaling/, `minitransformer scale`): the power-law fit,
the compute frontier, a tiny study end to end, the checks of every argument, and the token
budget's fairness (every size of a seed trains on the same tokens)."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

from minitransformer.errors import ArgumentError, ConfigError
from minitransformer.runtime.runs import RunDirectoryError
from minitransformer.tools import scaling
from minitransformer.tools.scaling import command

TINY_SIZES = (scaling.Size(8, 1), scaling.Size(16, 1), scaling.Size(24, 1))


def tiny(**changes) -> scaling.ScalingSettings:
    """A study that trains in well under a second per run."""
    base = dict(sizes=TINY_SIZES, tokens=2500, eval_verses=16, curve_points=3, n_train=400)
    return scaling.ScalingSettings(**{**base, **changes}).validate()


@pytest.fixture(scope="module")
def study():
    return scaling.run_study(tiny(), progress=False)


# ------------------------------------------------------------------ the fit
@pytest.mark.parametrize("alpha, a, floor", [(0.076, 11.0, 0.0), (0.5, 3.0, 0.0), (0.3, 2.0, 1.2)])
def test_fit_recovers_a_known_exponent(alpha, a, floor):
    n = np.geomspace(1e3, 1e6, 6)
    law = scaling.fit_power_law(n, floor + a * n**-alpha, floor=floor)
    assert law.alpha == pytest.approx(alpha, rel=1e-9)
    assert law.a == pytest.approx(a, rel=1e-9)
    assert law.rms < 1e-12 and law.points == 6
    np.testing.assert_allclose(law(n), floor + a * n**-alpha, rtol=1e-9)


def test_fit_is_least_squares_in_log_space_on_noisy_points():
    rng = np.random.default_rng(0)
    n = np.geomspace(3e3, 3e5, 5)
    loss = 9.0 * n**-0.08 * np.exp(rng.normal(0, 0.01, n.size))
    law = scaling.fit_power_law(n, loss)
    slope, intercept = np.polyfit(np.log(n), np.log(loss), 1)
    assert law.alpha == pytest.approx(-slope, rel=1e-9)
    assert math.log(law.a) == pytest.approx(intercept, rel=1e-9)
    assert abs(law.alpha - 0.08) < 0.02 and 0.001 < law.rms < 0.03


@pytest.mark.parametrize(
    "x, y, floor, match",
    [
        ([1e3, 1e4], [2.0, 1.8], 0.0, "at least 3"),
        ([1e3, 1e4, 1e5], [2.0, 0.0, 1.5], 0.0, "above floor"),
        ([1e3, -1e4, 1e5], [2.0, 1.8, 1.5], 0.0, "x must be > 0"),
        ([1e3, 1e4, 1e5], [2.0, float("nan"), 1.5], 0.0, "NaN"),
        ([1e3, 1e4, 1e5], [2.0, 1.8], 0.0, "one y per x"),
        ([1e3, 1e3, 1e3], [2.0, 1.8, 1.5], 0.0, "two different x"),
        ([1e3, 1e4, 1e5], [2.0, 1.8, 1.5], 1.6, "lower the floor"),
        ([1e3, 1e4, 1e5], [2.0, 1.8, 1.5], -1.0, "floor"),
        ([[1e3, 1e4, 1e5]], [[2.0, 1.8, 1.5]], 0.0, "1-D"),
        (["a", "b", "c"], [2.0, 1.8, 1.5], 0.0, "list of numbers"),
    ],
)
def test_fit_refuses_what_it_cannot_fit(x, y, floor, match):
    with pytest.raises(ArgumentError, match=match):
        scaling.fit_power_law(x, y, floor=floor)


def test_local_exponents_and_frontier():
    n = np.geomspace(1e3, 1e5, 4)
    assert scaling.local_exponents(n, 5 * n**-0.1) == pytest.approx([0.1] * 3)
    points = [(1.0, 3.0), (2.0, 2.5), (2.0, 2.9), (4.0, 2.6), (8.0, 2.0), (16.0, float("nan"))]
    assert scaling.frontier(points) == [(1.0, 3.0), (2.0, 2.5), (8.0, 2.0)]


# ------------------------------------------------------------------ the study
def test_every_size_of_a_seed_trains_on_the_same_tokens(study):
    """Fairness: the same batches for every size of a seed, stopped at the same step."""
    s = tiny()
    for seed in s.seeds:
        runs = [r for r in study["results"] if r["seed"] == seed]
        assert [r["size"] for r in runs] == [size.name for size in s.sizes]
        assert len({r["tokens"] for r in runs}) == 1 and len({r["steps"] for r in runs}) == 1
        longest = max(len(t) + 1 for _, t in scaling.make_lm_task(s).splits["train"])
        assert s.tokens <= runs[0]["tokens"] < s.tokens + s.batch_size * longest  # < 1 batch over
        marks = [[c["tokens"] for c in r["curve"]] for r in runs]
        assert all(m == marks[0] for m in marks) and marks[0][-1] == runs[0]["tokens"]
        for r in runs:
            assert r["compute"] == 6.0 * r["non_embedding"] * r["tokens"]
            assert r["non_embedding"] < r["parameters"] and math.isfinite(r["valid_loss"])
            assert r["valid_loss"] == r["curve"][-1]["valid_loss"]


def test_the_study_counts_parameters_as_the_model_does(study):
    task = scaling.make_lm_task(tiny())
    trainer = scaling.build_trainer(TINY_SIZES[1], tiny(), task, seed=0)
    r = next(r for r in study["results"] if r["size"] == "d16-L1")
    assert r["parameters"] == trainer.model.num_parameters()
    embed = trainer.model.embed.weight.data.size
    assert r["non_embedding"] == r["parameters"] - embed == 3280  # one layer, d 16, d_ff 64


def test_the_peak_learning_rate_follows_the_papers_schedule():
    s = tiny()
    assert scaling.peak_lr(s, scaling.Size(64, 1)) == pytest.approx(s.peak_lr)
    assert scaling.peak_lr(s, scaling.Size(16, 1)) == pytest.approx(2 * s.peak_lr)  # d^-1/2


def test_fit_study_fits_each_seed(study):
    fits = scaling.fit_study(study)
    assert [f["seed"] for f in fits["seeds"]] == [0, 1]
    for f in fits["seeds"]:
        assert f["params"].points == 3 and f["total"].points == 3
        assert f["compute"] is None or f["compute"].points >= 3
    assert len(fits["alpha"]["params"]["values"]) == 2
    json.dumps(scaling.fits_to_json(fits))  # JSON-friendly


def test_a_diverged_run_is_left_out_of_the_fit(study):
    broken = {**study, "results": [dict(r) for r in study["results"]]}
    broken["results"][0].update(diverged="NaN loss at step 3", valid_loss=float("nan"))
    fits = scaling.fit_study(broken)
    assert fits["seeds"][0]["params"] is None  # 2 of 3 sizes left: no fit, no exception
    assert fits["seeds"][1]["params"].points == 3
    assert "(1 diverged)" in scaling.markdown_table(broken, fits)


def _args(out, *flags):
    parser = command.add_arguments(argparse.ArgumentParser(prog="scale"))
    return parser.parse_args(["--out", str(out), "--no-progress", *flags])


def test_the_command_writes_its_files_into_out_only(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(scaling.ScalingSettings, "fast", classmethod(lambda cls: tiny()))
    out = tmp_path / "study"
    assert command.run(_args(out, "--fast")) == 0
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "study", "study/plots", "study/plots/scaling.png", "study/scaling.json",
        "study/scaling.md",
    ]  # fmt: skip
    assert (out / "plots/scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((out / "scaling.json").read_text())
    assert len(record["results"]) == 6 and record["fits"]["alpha"]["params"]["values"]
    table = (out / "scaling.md").read_text()
    assert "| d24-L1 |" in table and "α =" in table
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(RunDirectoryError, match="not empty"):  # refused before training
        command.run(_args(out, "--fast"))
    assert command.run(_args(out, "--fast", "--overwrite", "--seeds", "3")) == 0
    assert [r["seed"] for r in json.loads((out / "scaling.json").read_text())["results"]] == [3] * 3


def test_out_is_checked_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr(command, "run_study", lambda *a, **k: pytest.fail("trained"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirectoryError, match="is a file"):
        command.run(_args(tmp_path / "file"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(RunDirectoryError, match="notes.txt"):
        command.run(_args(tmp_path / "full"))
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------------ argument checks
@pytest.mark.parametrize(
    "flags, words",
    [
        (["--tokens", "0"], "--tokens"),
        (["--tokens", "1e6"], "whole number"),
        (["--tokens", str(10**10)], "1..1,000,000,000"),
        (["--seeds", "-1"], "--seeds"),
        (["--seeds", "0,0"], "different seeds"),
        (["--seeds", "a"], "e.g. 0,1"),
        (["--sizes", "16"], "DxL"),
        (["--sizes", "16x0"], "layers"),
        (["--sizes", "2x1"], "d_model in 4..1024"),
        (["--sizes", "50x1"], "heads"),
        (["--sizes", "16x1,16x1"], "different sizes"),
        (["--sizes", "16x1,32x1"], "3 to 20 different sizes"),
        (["--out", " "], "folder name"),
    ],
)
def test_flags_are_checked_where_they_enter(flags, words, capsys):
    parser = command.add_arguments(argparse.ArgumentParser(prog="scale"))
    with pytest.raises(SystemExit) as done:
        parser.parse_args(flags)
    assert done.value.code == 2
    assert words in capsys.readouterr().err


def test_flags_reach_the_settings():
    args = _args("x", "--fast", "--tokens", "1_000", "--seeds", "4,5", "--sizes", "8x1,16x2,24x1")
    s = command.settings_from(args)
    assert (s.tokens, s.seeds) == (1000, (4, 5))
    assert [x.name for x in s.sizes] == ["d8-L1", "d16-L2", "d24-L1"]
    assert s.eval_verses == scaling.ScalingSettings.fast().eval_verses


@pytest.mark.parametrize(
    "changes, words",
    [
        (dict(tokens=0), "tokens"),
        (dict(tokens=2.5), "tokens"),
        (dict(seeds=()), "seeds"),
        (dict(seeds=(1, 1)), "twice"),
        (dict(seeds=(-1,)), "seeds"),
        (dict(sizes=(scaling.Size(16, 1), "big")), "not a Size"),
        (dict(sizes=(scaling.Size(48, 1, heads=5),)), "d48-L1"),
        (dict(peak_lr=float("nan")), "peak_lr"),
        (dict(warmup_share=0), "warmup_share"),
        (dict(eval_verses=501), "eval_verses"),
        (dict(n_train=0), "n_train"),
        (dict(batch_size=True), "batch_size"),
    ],
)
def test_settings_are_checked(changes, words):
    with pytest.raises(ConfigError, match=words):
        scaling.ScalingSettings(**changes).validate()


def test_the_minitransformer_scale_command(tmp_path, monkeypatch, capsys):
    """Wired into the CLI: a study into --out (exit 0), then the same --out refused in one
    line (exit 2) before anything trains."""
    from test_cli import assert_user_error, run_main

    monkeypatch.setattr(scaling.ScalingSettings, "fast", classmethod(lambda cls: tiny()))
    out = tmp_path / "study"
    code, text, err = run_main(["scale", "--fast", "--no-progress", "--out", str(out)], capsys)
    assert code == 0, err
    assert "α =" in text and (out / "scaling.json").exists()
    monkeypatch.setattr(command, "run_study", lambda *a, **k: pytest.fail("trained"))
    code, _, err = run_main(["scale", "--fast", "--out", str(out)], capsys)
    assert_user_error(code, err, "not empty")
