"""Run directories write only inside themselves (runs/files.py), runs stay resumable, odd
--out names come back as commands that parse, and huge logged values still plot.

Every link test points a run's entry at a file or directory outside the run and checks that
what lies outside is unchanged afterwards (symbolic links: POSIX only).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from tiny_runs import KNOBS, SIZE, TINY

from minitransformer.cli import build_parser, flags, main
from minitransformer.errors import ConfigError
from minitransformer.runtime import checkpoint, runs
from minitransformer.runtime.runs import RunDirectoryError, files
from minitransformer.tools import viz
from minitransformer.train import TrainConfig, Trainer

posix_only = pytest.mark.skipif(os.name != "posix", reason="symbolic links, O_NOFOLLOW")


def tiny(out, **changes) -> TrainConfig:
    fields = dict(
        task="copy", steps=2, batch_size=8, warmup=10, peak_lr=3e-3, out=str(out),
        progress=False, plots=False, log_every=1, eval_every=1000, eval_samples=8,
        checkpoint_every=1000, final_eval_samples=8, task_knobs=dict(KNOBS),
        model_overrides=dict(SIZE),
    )  # fmt: skip
    fields.update(changes)
    return TrainConfig(**fields)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished 2-step run (copied per test by ``run``)."""
    out = tmp_path_factory.mktemp("trained") / "R"
    Trainer(tiny(out)).train()
    return out


@pytest.fixture
def run(trained, tmp_path) -> Path:
    out = tmp_path / "R"
    shutil.copytree(trained, out, symlinks=True)
    return out


@pytest.fixture(params=["dir_fd", "lstat"])
def walk(request, monkeypatch) -> None:
    """Each link test twice: entries opened relative to directory descriptors (Linux, macOS),
    and the fallback that checks each entry with lstat first (where there is no dir_fd)."""
    monkeypatch.setattr(files, "_DIR_FD", request.param == "dir_fd" and files._DIR_FD)


@pytest.fixture
def outside(tmp_path, walk) -> Path:
    """A directory outside the run with a precious file in it."""
    place = tmp_path / "elsewhere"
    place.mkdir()
    (place / "precious.txt").write_text("precious")
    (place / "curves.png").write_text("someone else's figure")
    return place


def snapshot(directory: Path) -> dict[str, tuple[bytes | str, int]]:
    """Every entry under ``directory``: bytes (or a link's target) and modification time."""
    seen = {}
    for path in sorted(directory.rglob("*")):
        info = path.lstat()
        body = (
            os.readlink(path)
            if path.is_symlink()
            else (b"" if path.is_dir() else path.read_bytes())
        )
        seen[str(path.relative_to(directory))] = (body, info.st_mtime_ns)
    return seen


# ------------------------------------------------------------------ links into and out of a run


@posix_only
@pytest.mark.parametrize(
    "entry", [".lock", "result.json", "metrics.jsonl", "checkpoint.safetensors"]
)
def test_a_linked_entry_is_refused_before_training(run, outside, entry):
    before = snapshot(outside)
    (run / entry).unlink(missing_ok=True)
    (run / entry).symlink_to(outside / "precious.txt")
    with pytest.raises(RunDirectoryError, match="symbolic link") as caught:
        if entry == "checkpoint.safetensors":  # nothing to resume from: a new run there
            Trainer(tiny(run)).train()
        else:
            Trainer.resume(run, steps=4).train()
    message = str(caught.value)
    assert entry in message and "Fix: remove the link" in message and "\n" not in message
    assert snapshot(outside) == before and (run / entry).is_symlink()


@posix_only
def test_a_linked_plots_directory_is_refused_and_overwrite_removes_only_the_link(run, outside):
    before = snapshot(outside)
    shutil.rmtree(run / "plots", ignore_errors=True)
    (run / "plots").symlink_to(outside, target_is_directory=True)
    with pytest.raises(RunDirectoryError, match="plots"):
        Trainer.resume(run, steps=4).train()
    with pytest.raises(RunDirectoryError, match="plots"):  # a new run there, same
        Trainer(tiny(run)).train()
    Trainer(tiny(run, plots=True)).train(overwrite=True)
    assert snapshot(outside) == before  # curves.png out there is still someone else's
    assert (run / "plots").is_dir() and not (run / "plots").is_symlink()
    assert (run / "plots" / "curves.png").read_bytes()[:4] == b"\x89PNG"


@posix_only
def test_overwrite_deletes_linked_files_not_their_targets(run, outside):
    before = snapshot(outside)
    (run / "plots").mkdir(exist_ok=True)
    for name in ("result.json", "plots/curves.png", "checkpoint.safetensors"):
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(outside / "precious.txt")
    assert main(["train", "copy", "--steps", "2", "--out", str(run), "--overwrite", *TINY]) == 0
    assert snapshot(outside) == before
    assert not (run / "plots" / "curves.png").exists()
    assert (
        not (run / "checkpoint.safetensors").is_symlink() and not (run / "result.json").is_symlink()
    )


@posix_only
def test_every_writer_refuses_or_replaces_a_link_never_writes_through_it(run, outside):
    """What each writer does once training runs (a link made after open_run's check)."""
    before = snapshot(outside)
    secret = outside / "precious.txt"
    trainer = Trainer.resume(run, steps=2, plots=True)
    (run / ".lock").symlink_to(secret)
    with pytest.raises(RunDirectoryError, match=r"\.lock"):
        runs.RunLock.acquire(run)
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(secret)
    with pytest.raises(RunDirectoryError, match="metrics.jsonl"):
        runs.MetricsLog(run / "metrics.jsonl")
    runs.truncate_metrics(run / "metrics.jsonl", 1)  # replaces the link with the cut log
    assert not (run / "metrics.jsonl").is_symlink()
    (run / "result.json").unlink()
    (run / "result.json").symlink_to(secret)
    (run / "plots").mkdir(exist_ok=True)
    for name in ("curves.png", "lr_schedule.png", "attention.png"):
        (run / "plots" / name).unlink(missing_ok=True)
        (run / "plots" / name).symlink_to(secret)
    trainer.finish()  # the result card and the three figures: links replaced
    assert snapshot(outside) == before
    assert json.loads((run / "result.json").read_text())["steps"] == 2
    for name in ("curves.png", "lr_schedule.png", "attention.png"):
        path = run / "plots" / name
        assert not path.is_symlink() and path.read_bytes()[:4] == b"\x89PNG", name
    shutil.rmtree(run / "plots")
    (run / "plots").symlink_to(outside, target_is_directory=True)
    with pytest.warns(UserWarning, match="could not draw the plots.*symbolic link"):
        trainer.plot()
    assert snapshot(outside) == before
    assert not [p for p in run.rglob(".*.tmp")]  # no temp file left behind


@posix_only
def test_stale_temp_files_that_are_links_are_removed_not_followed(run, outside):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for place in (run, run / "plots"):
        place.mkdir(exist_ok=True)
        (place / f".checkpoint.safetensors.{dead.pid}-0a1b.tmp").symlink_to(
            outside / "precious.txt"
        )
    (run / f".x.{dead.pid}-0a1b.tmp").symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)
    removed = runs.remove_stale_temp_files(run)
    assert len(removed) == 3 and not [p for p in run.rglob("*.tmp")]
    assert snapshot(outside) == before


@posix_only
def test_a_fifo_or_directory_in_place_of_a_run_file_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "metrics.jsonl")
    with pytest.raises(RunDirectoryError, match="not a plain file"):
        runs.MetricsLog(tmp_path / "metrics.jsonl")
    (tmp_path / "result.json").mkdir()
    with pytest.raises(RunDirectoryError, match="not a plain file"):
        files.write_text(tmp_path, "result.json", "{}")


@posix_only
def test_an_out_that_is_itself_a_link_is_the_users_choice(tmp_path):
    target = tmp_path / "scratch"
    target.mkdir()
    (tmp_path / "runs").symlink_to(target, target_is_directory=True)
    Trainer(tiny(tmp_path / "runs" / "copy", plots=True)).train()
    assert (target / "copy" / "result.json").is_file()
    assert (target / "copy" / "plots" / "curves.png").is_file()


@posix_only
def test_a_figure_saved_over_a_link_replaces_the_link(run, tmp_path, outside):
    """``viz`` and ``plot --to`` never write through a link at the figure's name."""
    before = snapshot(outside)
    (tmp_path / "fig.png").symlink_to(outside / "curves.png")
    viz.plot_lines([0, 1], {"a": [1.0, 2.0]}, "x", "y", "t", path=tmp_path / "fig.png")
    assert snapshot(outside) == before
    assert (tmp_path / "fig.png").read_bytes()[:4] == b"\x89PNG"
    (tmp_path / "to.png").symlink_to(outside / "precious.txt")
    assert main(["plot", "--run", str(run), "--to", str(tmp_path / "to.png")]) == 0
    assert snapshot(outside) == before and not (tmp_path / "to.png").is_symlink()


# ------------------------------------------------------------------ a run stays resumable


def test_resume_with_steps_below_the_runs_step_is_refused_before_anything_is_written(run, capsys):
    Trainer.resume(run, steps=4).train()  # the run is at step 4 now
    before = snapshot(run)
    with pytest.raises(ConfigError, match=r"already at step 4.*--steps above 4"):
        Trainer.resume(run, steps=3)
    assert main(["train", "--resume", str(run), "--steps", "2", "--no-progress"]) == 2
    line = [x for x in capsys.readouterr().err.splitlines() if "error:" in x][0]
    assert "already at step 4" in line and "--steps 6 trains 2 more" in line
    assert snapshot(run) == before
    assert Trainer.resume(run, steps=5).train()["steps"] == 5  # what the message offers works
    assert checkpoint.read_metadata(run / "checkpoint.safetensors")["step"] == 5


# ------------------------------------------------------------------ odd --out names


ODD_NAMES = ["-oops", "--resume", "-", "-n 2", "a b", "it's", 'say "hi"', "ünï cødé", "$HOME",
             "~user", "a\nb", "*", "x;rm -rf y"]  # fmt: skip


@pytest.mark.parametrize("name", ODD_NAMES)
def test_the_printed_resume_command_parses_back_to_the_same_path(name, tmp_path):
    for out in (name, tmp_path / name):
        words = shlex.split(runs.resume_command(out))
        assert words[:3] == ["minitransformer", "train", "--resume"]
        args = build_parser().parse_args(words[1:])
        assert Path(args.resume) == Path(out) and args.command == "train"


def test_a_run_in_a_dash_directory_prints_commands_that_parse(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "copy", "--steps", "2", "--out=-oops", *TINY]) == 0
    assert main(["train", "copy", "--steps", "2", "--out=-oops", *TINY]) == 2
    line = [x for x in capsys.readouterr().err.splitlines() if "error:" in x][0]
    resume = line.split("`")[1]
    assert resume == "minitransformer train --resume ./-oops"
    args = build_parser().parse_args(shlex.split(resume)[1:])
    assert main(["train", "--resume", args.resume, "--steps", "3", "--no-progress"]) == 0
    shown = line.split("--out ", 1)[1].split(" already holds")[0]  # --out ./-oops already ...
    overwrite = ["train", "copy", "--out", *shlex.split(shown), "--overwrite"]
    assert build_parser().parse_args(overwrite).out == "./-oops" and "add --overwrite" in line


@pytest.mark.parametrize("text", ["", " ", "\t"])
def test_an_empty_path_flag_is_refused(text):
    with pytest.raises(Exception, match="expected a file or directory name"):
        flags.path_text(text)
    assert flags.path_text("-oops") == "-oops"


# ------------------------------------------------------------------ huge values still plot

HUGE = {
    "plus-minus 1e308": [1e308, -1e308, 2.0],
    "the float maximum": [sys.float_info.max, -sys.float_info.max],
    "a single huge point": [1e308],
    "a constant huge curve": [1e308, 1e308],
    "a single point": [2.0],
    "NaN and inf among them": [1.0, math.nan, math.inf, 3.0],
}


@pytest.mark.parametrize("values", HUGE.values(), ids=HUGE.keys())
def test_every_figure_draws_huge_and_non_finite_values(values, tmp_path):
    steps = list(range(1, len(values) + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no NumPy overflow either
        warnings.filterwarnings("ignore", "plot_training_curves: left out")
        figures = {
            "curves": lambda p: viz.plot_training_curves(
                [{"step": s, "loss": v} for s, v in zip(steps, values, strict=True)], path=p
            ),
            "huge steps": lambda p: viz.plot_training_curves(
                [{"step": int(1e308) + s, "loss": 1.0} for s in steps], path=p
            ),
            "lines": lambda p: viz.plot_lines(steps, {"a": values}, "x", "y", "t", path=p),
            "bars": lambda p: viz.plot_bars([str(s) for s in steps], values, "y", "t", path=p),
            "schedule": lambda p: viz.plot_lr_schedule(steps, values, path=p),
            "attention": lambda p: viz.plot_attention(np.array([values]), None, None, path=p),
        }
        for name, draw in figures.items():
            path = tmp_path / f"{name}.png"
            draw(path)
            assert path.read_bytes()[:4] == b"\x89PNG", name


def test_points_beyond_the_float_range_are_left_out_with_a_warning():
    records = [
        {"step": 1, "loss": 2.0},
        {"step": 10**400, "loss": 1.0},
        {"step": 3, "loss": math.nan},
    ]
    with pytest.warns(UserWarning, match="left out 2 point"):
        viz.plot_training_curves(records)
    with pytest.raises(ValueError, match="within the float range"):
        viz.plot_lines([10**400], {"a": [1.0]}, "x", "y", "t")


@pytest.mark.parametrize("loss", ["1e308", "-1e308", "1.7976931348623157e308"])
def test_plot_command_on_a_log_with_huge_losses(tmp_path, capsys, loss):
    lines = [f'{{"step": {s}, "split": "train", "loss": {v}}}' for s, v in
             [(1, loss), (2, "-" + loss.lstrip("-")), (3, "2.5")]]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["plot", "--run", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "arange" not in err and "overflow" not in err
    assert (tmp_path / "plots" / "curves.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("flag", [["train", "copy", "--out"], ["train", "--resume"],
                                  ["plot", "--run"], ["evaluate", "--checkpoint"],
                                  ["translate", "--checkpoint"], ["ablate", "--out"]])  # fmt: skip
@pytest.mark.parametrize("name", ["", "   "])
def test_an_empty_or_blank_path_flag_is_refused_and_nothing_is_written(
    flag, name, tmp_path, monkeypatch, capsys
):
    from minitransformer.cli import main

    monkeypatch.chdir(tmp_path)
    assert main([*flag, name, "--steps", "1"] if flag[0] == "train" else [*flag, name]) == 2
    err = capsys.readouterr().err
    assert "expected a file or directory name" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # not a run among the user's files


@pytest.mark.parametrize("out", ["", " ", "\t"])
def test_trainconfig_refuses_an_empty_out(out):
    from minitransformer.config import TrainConfig
    from minitransformer.errors import ConfigError

    with pytest.raises(ConfigError, match="out must be a directory name"):
        TrainConfig(task="copy", out=out)
