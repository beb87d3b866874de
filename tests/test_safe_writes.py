"""The writers outside the training loop never write through a symbolic link in their run:
``minitransformer plot --run R`` (R/plots/curves.png) and the ablation study's files
(ablations.json, ablations.md, plots/ablations.png). A link at a file or at ``plots/`` that
points outside is refused with one line (exit 2) or replaced; what it points to is never
touched. (runs/files.py and tests/test_run_dirs.py cover the training run itself.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minitransformer.cli import main
from minitransformer.runtime import runs
from minitransformer.tools import ablate
from minitransformer.tools.ablate import report

PRECIOUS = b"someone else's bytes\n"


def snapshot(place: Path) -> dict[str, bytes]:
    """Every file under ``place`` (or ``place`` itself) with its bytes."""
    if place.is_file():
        return {"": place.read_bytes()}
    return {str(p.relative_to(place)): p.read_bytes() for p in place.rglob("*") if p.is_file()}


def outside(tmp_path: Path, kind: str) -> Path:
    """A file or a directory (holding a file) outside any run, to link to."""
    if kind == "file":
        target = tmp_path / "elsewhere.bin"
        target.write_bytes(PRECIOUS)
    else:
        target = tmp_path / "elsewhere"
        target.mkdir()
        (target / "curves.png").write_bytes(PRECIOUS)
        (target / "ablations.png").write_bytes(PRECIOUS)
    return target


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------ plot --run
@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run directory with a small metrics log."""
    run = tmp_path / "run"
    run.mkdir()
    records = [{"step": s, "split": "train", "loss": 3.0 / s, "lr": 1e-3} for s in (1, 2, 3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


def test_plot_refuses_a_linked_plots_directory(run, tmp_path, capsys):
    target = outside(tmp_path, "dir")
    before = snapshot(target)
    (run / "plots").symlink_to(target, target_is_directory=True)
    assert main(["plot", "--run", str(run)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "plots" in line and "link" in line and "Fix:" in line and "--to" in line, line
    assert snapshot(target) == before
    assert (run / "plots").is_symlink()  # refused, not removed: plot did not make it


def test_plot_replaces_a_linked_curves_file(run, tmp_path, capsys):
    target = outside(tmp_path, "file")
    (run / "plots").mkdir()
    (run / "plots" / "curves.png").symlink_to(target)
    assert main(["plot", "--run", str(run)]) == 0
    assert target.read_bytes() == PRECIOUS
    curves = run / "plots" / "curves.png"
    assert not curves.is_symlink() and curves.read_bytes().startswith(b"\x89PNG")
    assert str(curves) in capsys.readouterr().out


def test_plot_without_plots_directory_makes_it(run, capsys):
    assert main(["plot", "--run", str(run)]) == 0
    curves = run / "plots" / "curves.png"
    assert curves.read_bytes().startswith(b"\x89PNG") and not (run / "plots").is_symlink()
    assert capsys.readouterr().out.strip() == f"wrote {curves}"


# ------------------------------------------------------------------ the ablation study
def tiny_study() -> dict:
    """What run_ablations returns, by hand: two variants, a few steps."""
    row = dict(change="nothing", parameters=1234, train_ppl=3.0, test_ppl=3.5, test_bleu=10.0,
               long_ppl=9.0, long_bleu=1.0, train_loss=[3.0, 2.5, 2.0], seconds=0.1)  # fmt: skip
    return {
        "task": "copy",
        "settings": {"steps": 4, "batch_size": 2, "seed": 0},
        "results": [{**row, "name": "base"}, {**row, "name": "heads-1", "test_bleu": 9.0}],
    }


# (the link's place in --out, the study file it stands for, what it points to)
LINKS = [
    ("ablations.json", "file"),
    ("ablations.md", "file"),
    ("plots/ablations.png", "file"),
    ("plots", "dir"),
]


def place_link(out: Path, name: str, target: Path) -> Path:
    link = out / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=target.is_dir())
    return link


@pytest.mark.parametrize(("name", "kind"), LINKS)
def test_check_out_refuses_a_link(tmp_path, name, kind):
    out = tmp_path / "study"
    out.mkdir()
    target = outside(tmp_path, kind)
    place_link(out, name, target)
    with pytest.raises(runs.RunDirectoryError, match="link") as caught:
        ablate.check_out(out)
    message = str(caught.value)
    assert str(out / name) in message and "Fix:" in message and "\n" not in message
    ablate.check_out(out, overwrite=True)  # --overwrite: the link goes, at write time


@pytest.mark.parametrize(("name", "kind"), LINKS)
def test_write_study_never_writes_through_a_link(tmp_path, name, kind):
    out = tmp_path / "study"
    out.mkdir()
    target = outside(tmp_path, kind)
    before = snapshot(target)
    place_link(out, name, target)
    with pytest.raises(runs.RunDirectoryError, match="link"):
        ablate.write_study(tiny_study(), out)
    assert snapshot(target) == before
    assert not (out / "ablations.json").exists() or (out / "ablations.json").is_symlink()
    paths = ablate.write_study(tiny_study(), out, overwrite=True)  # the link goes, not its target
    assert snapshot(target) == before
    for path in paths:
        assert path.is_file() and not path.is_symlink() and not path.parent.is_symlink(), path
    assert json.loads((out / "ablations.json").read_text())["task"] == "copy"
    assert (out / "plots" / "ablations.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(("name", "kind"), LINKS)
def test_write_study_writes_never_follow_a_link_made_after_the_check(tmp_path, monkeypatch,
                                                                     name, kind):  # fmt: skip
    """A link swapped in after check_out: the writes themselves replace a linked file and
    refuse a linked directory, and what the link points to stays as it was."""
    out = tmp_path / "study"
    out.mkdir()
    target = outside(tmp_path, kind)
    before = snapshot(target)
    place_link(out, name, target)
    monkeypatch.setattr(report, "check_out", lambda out, overwrite=False: None)
    try:
        ablate.write_study(tiny_study(), out)
    except runs.RunDirectoryError as err:
        assert name == "plots" and "link" in str(err)
    else:
        assert not (out / name).is_symlink()
    assert snapshot(target) == before


def test_ablate_command_refuses_a_link_before_training(tmp_path, monkeypatch, capsys):
    out = tmp_path / "study"
    out.mkdir()
    target = outside(tmp_path, "dir")
    before = snapshot(target)
    place_link(out, "plots", target)

    def no_training(*args, **kwargs):
        raise AssertionError("trained before refusing the link")

    monkeypatch.setattr(ablate, "run_ablations", no_training)
    assert main(["ablate", "--fast", "--only", "base", "--no-progress", "--out", str(out)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(out / "plots") in line and "link" in line and "Fix:" in line, line
    assert snapshot(target) == before
