"""The CUDA graph as train's default, from the user's side: --cuda-graph / --no-cuda-graph,
the mode saved in the run and kept by --resume (a run saved before the field: eager), a
resume that switches the mode (allowed, one warning), the start line, the end-of-run line
and the result card's ``cuda_graphs``.

There is no GPU here: the CPU branches run for real (tiny runs, tests/tiny_runs.py); the GPU
branches read a stand-in ``Trainer.graph_report`` (what the Trainer says about its mode), and
the resume checks take ``device="cuda"``, which reading a checkpoint never touches.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from test_cli import PYTHON_WORDS, assert_user_error, run_main
from tiny_runs import TINY

from minitransformer.cli import build_parser, cli_wording
from minitransformer.config.train import RESUMABLE, TrainConfig
from minitransformer.runtime import checkpoint, runs
from minitransformer.runtime.checkpoint import schema
from minitransformer.train import Trainer, report

CKPT = "checkpoint.safetensors"


def _train(out: Path, *flags: str, steps: int = 4) -> list[str]:
    return ["train", "copy", "--steps", str(steps), "--out", str(out), *TINY, *flags]


def _saved_mode(run: Path):
    return checkpoint.read_metadata(run / CKPT)["train_config"].get("cuda_graph", "absent")


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory) -> dict[str, Path]:
    """Two 4-step CPU runs through the CLI: the default, and --no-cuda-graph."""
    from minitransformer.cli import main

    home = tmp_path_factory.mktemp("graph")
    made = {}
    for name, flags in (("default", []), ("no-graph", ["--no-cuda-graph"])):
        made[name] = home / name
        assert main(_train(made[name], *flags)) == 0
    return made


def _without_mode(run: Path, into: Path) -> Path:
    """A copy of ``run``'s checkpoint as a version before TrainConfig.cuda_graph wrote it: no
    ``cuda_graph`` key (re-saved, so its checksum is valid)."""
    arrays, meta = checkpoint.load_checkpoint(run / CKPT)
    for key in checkpoint.RESERVED_METADATA_KEYS:
        meta.pop(key)
    del meta["train_config"]["cuda_graph"]
    into.mkdir(parents=True, exist_ok=True)
    checkpoint.save_checkpoint(into / CKPT, arrays, meta)
    return into


# ------------------------------------------------------------------ the flags


@pytest.mark.parametrize(
    ("flags", "value"), [([], None), (["--cuda-graph"], True), (["--no-cuda-graph"], False)]
)
def test_the_flags_set_cuda_graph_and_leaving_both_out_keeps_the_runs_own(flags, value):
    args = build_parser().parse_args(["train", "copy", *flags])
    assert args.cuda_graph is value


def test_the_default_is_the_graph_and_the_help_says_what_differs_from_eager():
    assert TrainConfig().cuda_graph is True
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    helps = {a.option_strings[0]: a.help for a in train._actions if a.option_strings}
    text = helps["--cuda-graph"]
    assert "the default on a GPU" in text and "same numbers" not in text
    assert "a batch's loss is an eager step's" in text and "dropout" in text, text
    assert "every step eagerly" in helps["--no-cuda-graph"]


@pytest.mark.parametrize(
    ("flags", "patterns"),
    [
        (["--cuda-graph", "--no-cuda-graph"], ["--no-cuda-graph", "not allowed with"]),
        (["--no-cuda-graph", "--cuda-graph"], ["--cuda-graph: not allowed with"]),
        (["--cuda-graph=yes"], ["--cuda-graph", "'yes'"]),
        (["--no-cuda-graph=0"], ["--no-cuda-graph", "'0'"]),
    ],
)  # fmt: skip
def test_contradicting_or_valued_graph_flags_are_one_line(flags, patterns, tmp_path, capsys):
    code, _, err = run_main(_train(tmp_path / "r", *flags), capsys)
    assert_user_error(code, err, *patterns)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("device", [[], ["--device", "cpu"], ["--device", "cpu "]])
def test_an_explicit_cuda_graph_on_the_cpu_is_a_user_error(device, tmp_path, capsys):
    """The user asked for what a CPU cannot do: one line with the fix, before anything is
    built or written (left out, the default is silent on the CPU)."""
    out = tmp_path / "r"
    code, _, err = run_main(_train(out, "--cuda-graph", *device), capsys)
    assert_user_error(code, err, "--cuda-graph needs a GPU", "on cpu", "--device cuda",
                      "leave --cuda-graph out")  # fmt: skip
    assert not out.exists()


def test_an_explicit_cuda_graph_resuming_a_cpu_run_is_a_user_error(cpu_runs, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / CKPT).write_bytes((cpu_runs["default"] / CKPT).read_bytes())
    code, _, err = run_main(["train", "--resume", str(run), "--steps", "5", "--cuda-graph"], capsys)
    assert_user_error(code, err, "--cuda-graph needs a GPU", "--device cuda")
    assert checkpoint.read_metadata(run / CKPT)["step"] == 4  # nothing trained


# ------------------------------------------------------------------ on the CPU, for real


def test_a_cpu_run_says_nothing_of_graphs_and_its_card_says_off(cpu_runs, capsys):
    for name, requested in (("default", True), ("no-graph", False)):
        card = json.loads((cpu_runs[name] / "result.json").read_text())
        graphs = card["cuda_graphs"]
        assert graphs["mode"] == "off" and graphs["requested"] is requested, graphs
        assert set(graphs) == {"requested", "mode", "why"}  # briefly: nothing to count
        assert card["train_config"]["cuda_graph"] is requested
        assert _saved_mode(cpu_runs[name]) is requested
    code, _, err = run_main(_train(cpu_runs["default"].parent / "again"), capsys)
    assert code == 0, err
    assert "graph" not in err.lower() and "eager" not in err, err


@pytest.mark.parametrize(("name", "flags", "saved"), [
    ("default", [], True), ("no-graph", [], False),
    ("default", ["--no-cuda-graph"], False), ("no-graph", ["--device", "cpu"], False),
])  # fmt: skip
def test_resume_keeps_the_runs_mode_unless_a_flag_changes_it(
    cpu_runs, name, flags, saved, tmp_path, capsys
):
    run = tmp_path / "run"
    run.mkdir()
    (run / CKPT).write_bytes((cpu_runs[name] / CKPT).read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the CPU: a change of mode warns of nothing
        code, _, err = run_main(["train", "--resume", str(run), "--steps", "6", *flags], capsys)
    assert code == 0, err
    assert _saved_mode(run) is saved
    assert json.loads((run / "result.json").read_text())["cuda_graphs"]["requested"] is saved


# ------------------------------------------------------------------ a run saved before the field


def test_a_run_saved_before_the_field_resumes_eager(cpu_runs, tmp_path, capsys):
    """Before TrainConfig.cuda_graph a run was eager unless --cuda-graph was given, which was
    never recorded: read as False, and saved as False from then on."""
    run = _without_mode(cpu_runs["default"], tmp_path / "old")
    assert _saved_mode(run) == "absent"
    meta = checkpoint.read_metadata(run / CKPT)
    assert schema.check_train_config(run / CKPT, meta["train_config"]).cuda_graph is False
    assert runs.read_resume_point(run).config.cuda_graph is False
    code, _, err = run_main(["train", "--resume", str(run), "--steps", "5"], capsys)
    assert code == 0, err
    assert _saved_mode(run) is False


@pytest.mark.parametrize("gpu", ["cuda", "cuda:1"])  # not "device": conftest drops cuda ones
def test_an_old_run_resumed_on_a_gpu_stays_eager_without_a_warning(cpu_runs, gpu, tmp_path):
    run = _without_mode(cpu_runs["default"], tmp_path / "old")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert runs.read_resume_point(run, device=gpu).config.cuda_graph is False


# ------------------------------------------------------------------ switching the mode on resume


@pytest.mark.parametrize("gpu", ["cuda", "cuda:0", "cuda:3"])
@pytest.mark.parametrize(("name", "given", "now", "before"), [
    ("default", False, "off", "on"), ("no-graph", True, "on", "off"),
])  # fmt: skip
def test_switching_the_mode_on_a_gpu_is_allowed_with_one_warning(
    cpu_runs, name, given, now, before, gpu
):
    """The masks of the two modes differ, so the run goes on unlike an unbroken one: said
    once, in words that need no translating for the command line."""
    assert "cuda_graph" in RESUMABLE
    with pytest.warns(UserWarning) as caught:
        point = runs.read_resume_point(cpu_runs[name], device=gpu, cuda_graph=given)
    assert point.config.cuda_graph is given
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert f"with CUDA graphs {now}; it was saved with them {before}" in message
    assert "at step 4" in message and "Dropout" in message and "loss" in message
    assert cli_wording(message) == message
    assert not any(word in message for word in PYTHON_WORDS), message


@pytest.mark.parametrize(("name", "changes"), [
    ("default", dict(device="cuda")), ("default", dict(device="cuda", cuda_graph=True)),
    ("no-graph", dict(device="cuda:1", cuda_graph=False)), ("default", dict(cuda_graph=False)),
    ("no-graph", dict(device="cpu", cuda_graph=True)),
])  # fmt: skip
def test_keeping_the_mode_or_switching_it_on_the_cpu_warns_of_nothing(cpu_runs, name, changes):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runs.read_resume_point(cpu_runs[name], **changes)


# ------------------------------------------------------------------ what a GPU run says (stand-ins)

GRAPH = dict(requested=True, mode="graph", why=None, graphs=2, replays=10, eager_steps=4,
             fallbacks={"too many shapes": 1}, pool_bytes=3 * 2**19,
             max_bytes=64 * 2**20)  # fmt: skip
EAGER = dict(requested=True, mode="eager", why="data-parallel steps are not captured")
ASKED_EAGER = dict(requested=False, mode="eager", why="--no-cuda-graph")


@pytest.mark.parametrize(("graph_report", "start", "end"), [
    (GRAPH, ", steps replayed from CUDA graphs (one a batch shape, once it is captured)",
     "CUDA graphs: 2 batch shapes captured, 10 steps replayed, 4 eager (fallbacks: too many "
     "shapes 1 steps); memory pool 1.5 MiB of 64.0 MiB"),
    (EAGER, ", every step eager",
     "CUDA graphs: none, every step eager: data-parallel steps are not captured"),
    (ASKED_EAGER, ", every step eager", "CUDA graphs: none, every step eager: --no-cuda-graph"),
])  # fmt: skip
def test_the_start_line_end_line_and_card_say_the_trainers_mode(
    graph_report, start, end, monkeypatch, tmp_path, capsys
):
    monkeypatch.setattr(Trainer, "graph_report", lambda self: dict(graph_report))
    out = tmp_path / "r"
    code, stdout, err = run_main(_train(out, steps=2), capsys)
    assert code == 0, err
    model_line = next(line for line in err.splitlines() if line.startswith("model: "))
    assert model_line.endswith(start), model_line
    assert end in err.splitlines(), err
    assert "CUDA" not in stdout  # stdout: the result card's path (and --json) for scripts
    card = json.loads((out / "result.json").read_text())["cuda_graphs"]
    assert card == report.graph_record(graph_report)
    if graph_report["mode"] == "graph":
        assert card["pool_mib"] == 1.5 and card["max_mib"] == 64.0 and "pool_bytes" not in card


# ------------------------------------------------------------------ the card's record and line


@pytest.mark.parametrize(("graph_report", "record", "line"), [
    (dict(requested=True, mode="off", why="the CPU has no CUDA graphs"),
     dict(requested=True, mode="off", why="the CPU has no CUDA graphs"), None),
    (dict(requested=False, mode="off", why=None), dict(requested=False, mode="off", why=None),
     None),
    (dict(requested=True, mode="eager", why="MT_CUDA_KERNELS=0"),
     dict(requested=True, mode="eager", why="MT_CUDA_KERNELS=0"),
     "CUDA graphs: none, every step eager: MT_CUDA_KERNELS=0"),
    (dict(requested=True, mode="eager", why=None), dict(requested=True, mode="eager", why=None),
     "CUDA graphs: none, every step eager"),
    (dict(requested=True, mode="graph", why=None, graphs=1, replays=1234, eager_steps=2,
          fallbacks={}, pool_bytes=0, max_bytes=None),
     dict(requested=True, mode="graph", why=None, graphs=1, replays=1234, eager_steps=2,
          fallbacks={}, pool_mib=0.0),
     "CUDA graphs: 1 batch shape captured, 1,234 steps replayed, 2 eager; memory pool 0.0 MiB"),
    (dict(requested=True, mode="graph", why=None, graphs=16, replays=0, eager_steps=40,
          fallbacks={"capture failed": 30, "memory budget": 4},
          pool_bytes=5 * 2**30, max_bytes=5 * 2**30),
     dict(requested=True, mode="graph", why=None, graphs=16, replays=0, eager_steps=40,
          fallbacks={"capture failed": 30, "memory budget": 4},
          pool_mib=5120.0, max_mib=5120.0),
     "CUDA graphs: 16 batch shapes captured, 0 steps replayed, 40 eager (fallbacks: capture "
     "failed 30 steps, memory budget 4 steps); memory pool 5,120.0 MiB of 5,120.0 MiB"),
])  # fmt: skip
def test_the_cards_record_and_the_end_line(graph_report, record, line):
    assert report.graph_record(graph_report) == record
    assert json.loads(json.dumps(record)) == record  # result.json holds it as it is
    assert report.graph_line(record) == line
