"""The README's Results table is what ``python -m minitransformer.tools.results --readme``
wrote (docs/results.json), not a remembered number; and the command itself works.

Nothing here trains a default run (that takes 25 minutes): the tool is driven with a stand-in
for its runs, and one real run at a tiny size.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_runs import TINY

from minitransformer.tools import results

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "results.json"


# ----------------------------------------------------------------------------- the README
def test_readme_quotes_the_last_measurement():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    assert results.quoted_block(readme) == results.render(record), (
        "README.md's Results table differs from docs/results.json: run "
        "python -m minitransformer.tools.results --readme instead of editing the table"
    )


def test_the_measurement_covers_the_seeds_and_meets_the_bar():
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    assert record["tasks"] == list(results.TASKS)
    for task in ("copy", "translate"):
        seeds = [row["seed"] for row in record["runs"][task]]
        assert len(set(seeds)) >= 3, f"{task}: {seeds}"
    # the recipe the README promises: the copy task right on >= 99.5% at every seed
    assert min(row["exact_match"] for row in record["runs"]["copy"]) >= 0.995


# ----------------------------------------------------------------------------- the tool
def fake_row(task: str, seed: int) -> dict:
    row = dict(seed=seed, wall_time_s=50.0 + seed, tokens_per_s=20000 + 100 * seed,
               parameters=235008, preset="tiny", steps=3000, exact_match=0.99 + seed / 1000,
               bleu=None, test_size=1000)  # fmt: skip
    if task.startswith("translate"):
        row.update(bleu=99.0 + seed / 10, lookup_bleu=1.1, copy_bleu=0.0)
    if task == "translate-en-es":
        row.update(wall_time_s=760.0, preset="small", test_size=500, parameters=1_324_000)
    return row


@pytest.fixture
def stand_in(monkeypatch):
    made = []

    def run_one(task, seed, out, overwrite, extra=()):
        made.append((task, seed, out.name, overwrite))
        out.mkdir(parents=True, exist_ok=True)
        return fake_row(task, seed)

    monkeypatch.setattr(results, "run_one", run_one)
    return made


def test_every_seed_of_every_task_runs_and_the_table_shows_the_spread(tmp_path, stand_in, capsys):
    assert results.main(["--out", str(tmp_path / "r"), "--seeds", "0,1,2"]) == 0
    assert [m[:2] for m in stand_in] == [("copy", 0), ("copy", 1), ("copy", 2), ("translate", 0),
                                         ("translate", 1), ("translate", 2),
                                         ("translate-en-es", 0)]  # fmt: skip
    record = json.loads((tmp_path / "r" / "results.json").read_text())
    block = results.render(record)
    assert block in capsys.readouterr().out
    copy_row = next(line for line in block.splitlines() if "train copy`" in line)
    assert "99.1% (99.0–99.2%)" in copy_row and "| 0, 1, 2 |" in copy_row
    assert "235k params" in copy_row and "1.3M params" in block
    assert "51 s (50–52 s)" in copy_row
    en_es = next(line for line in block.splitlines() if "translate-en-es" in line)
    assert "12.7 min" in en_es and "| 0 |" in en_es and "(" not in en_es.split("|")[5]


def test_readme_block_is_replaced_and_nothing_else(tmp_path, stand_in, monkeypatch):
    root = tmp_path / "clone"
    (root / "docs").mkdir(parents=True)
    before, after = "# title\n\ntext before\n\n", "\n\ntext after\n"
    (root / "README.md").write_text(before + results.BEGIN + "\nold\n" + results.END + after)
    monkeypatch.setattr(results, "ROOT", root)
    assert results.main(["--out", str(tmp_path / "r"), "--readme"]) == 0
    text = (root / "README.md").read_text()
    record = json.loads((root / "docs" / "results.json").read_text())
    assert text == before + results.render(record) + after


def test_readme_without_markers_is_refused():
    with pytest.raises(ValueError, match="markers"):
        results.replace_block("no markers here", "block")


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--readme", "--tasks", "copy"], "leave --tasks out"),
        (["--readme", "--seeds", "0,1"], "3+ --seeds"),
        (["--seeds", "0,0"], "different seeds"),
        (["--seeds", "a"], "seeds like 0,1,2"),
        (["--seeds", "-1"], "different seeds >= 0"),
        (["--tasks", "lm"], "invalid choice"),
    ],
)
def test_bad_flags_are_one_line(tmp_path, stand_in, capsys, argv, words):
    with pytest.raises(SystemExit) as stop:
        results.main(["--out", str(tmp_path / "r"), *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert stand_in == []


def test_existing_runs_are_never_replaced_without_overwrite(tmp_path, stand_in, capsys):
    (tmp_path / "r" / "copy-seed1").mkdir(parents=True)
    with pytest.raises(SystemExit):
        results.main(["--out", str(tmp_path / "r"), "--tasks", "copy"])
    assert "already holds copy-seed1" in capsys.readouterr().err and stand_in == []
    assert results.main(["--out", str(tmp_path / "r"), "--tasks", "copy", "--overwrite"]) == 0
    assert all(m[3] for m in stand_in)


def test_an_out_that_is_a_file_is_refused_before_any_run(tmp_path, stand_in, capsys):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit):
        results.main(["--out", str(tmp_path / "file"), "--tasks", "copy"])
    assert "--out" in capsys.readouterr().err and stand_in == []


def test_a_failed_run_stops_the_table_and_names_its_log(tmp_path, monkeypatch, capsys):
    def failing(task, seed, out, overwrite, extra=()):
        raise RuntimeError(f"train {task} --seed {seed} exited 1; see {out}.log")

    monkeypatch.setattr(results, "run_one", failing)
    assert results.main(["--out", str(tmp_path / "r"), "--tasks", "copy"]) == 1
    assert "exited 1; see" in capsys.readouterr().err
    assert not (tmp_path / "r" / "results.json").exists()


@pytest.mark.parametrize("task", ["copy", "translate"])
def test_one_real_run_gives_its_card_numbers_and_baselines(tmp_path, task):
    small = ["--knob", "n_train=50", "--knob", "n_valid=8", "--knob", "n_test=8"]
    extra = TINY if task == "copy" else [*TINY[:8], *small, "--batch-size", "8", "--no-plots",
                                         "--final-eval-samples", "8"]  # fmt: skip
    row = results.run_one(task, 3, tmp_path / f"{task}-seed3", False, [*extra, "--steps", "4"])
    card = json.loads((tmp_path / f"{task}-seed3" / "result.json").read_text())
    assert row["exact_match"] == card["metrics"]["exact_match"] and row["steps"] == 4
    assert row["seed"] == 3 and row["test_size"] == 8 and row["wall_time_s"] > 0
    assert (tmp_path / f"{task}-seed3.log").read_text().count("test at step 4") == 1
    if task == "translate":
        assert row["bleu"] == card["metrics"]["bleu"] and 0 <= row["lookup_bleu"] <= 100
