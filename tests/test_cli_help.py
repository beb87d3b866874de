"""The command line's help and its answers to a typo: every command has a description and
every option a help text (with its default where it has one), ``train``'s usage fits on two
lines, ``--model`` and ``--knob`` list their keys from the config's own tables, the command
list keeps one line a command, and a misspelled flag, command or task gets the subcommand's
own error and a "did you mean"."""

from __future__ import annotations

import dataclasses

import pytest
from test_cli import assert_user_error, run_main

from minitransformer.cli import build_parser
from minitransformer.config import TransformerConfig
from minitransformer.data import tasks
from minitransformer.tools.ablate import AblationSettings


def subparsers() -> dict:
    return dict(build_parser()._subparsers._group_actions[0].choices)


# ------------------------------------------------------------------ typos


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["train", "copy", "--stesp", "100"],
            "minitransformer train: error: unrecognized arguments: --stesp 100; did you mean "
            "--steps?",
        ),
        (
            ["evaluate", "--checkpoint", "r", "--bem=4"],
            "minitransformer evaluate: error: unrecognized arguments: --bem=4; did you mean "
            "--beam?",
        ),
        (
            ["train", "copy", "--bogus"],
            "minitransformer train: error: unrecognized arguments: --bogus",
        ),
        (["trian", "copy"], "minitransformer: error: argument COMMAND: invalid choice: 'trian'"),
        (["train", "cpy"], "minitransformer train: error: argument TASK: invalid choice: 'cpy'"),
    ],
)
def test_a_typo_is_the_subcommands_error_with_the_likely_flag(argv, line, capsys):
    code, _, err = run_main(argv, capsys)
    assert_user_error(code, err)
    assert err.splitlines()[0].startswith(line), err
    assert ("did you mean" in err) == ("bogus" not in line), err


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["trian", "copy"], "'train'"),
        (["train", "cpy"], "'copy'"),
        (["train", "Copy"], "'copy'"),
        (["train", "translate_en_es"], "'translate-en-es'"),
        (["evaluate", "--checkpoint", "r", "--split", "tset"], "'test'"),
    ],
)
def test_a_misspelled_choice_gets_a_did_you_mean(argv, meant, capsys):
    code, _, err = run_main(argv, capsys)
    assert_user_error(code, err, "invalid choice", f"; did you mean {meant}?")


# ------------------------------------------------------------------ help pages


def test_every_command_has_a_description_and_every_option_a_help_text():
    for name, parser in subparsers().items():
        assert parser.description, f"{name} has no description line"
        for action in parser._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"


def test_the_command_list_keeps_one_line_a_command(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0
    listed = out.split("COMMAND\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[0] for line in listed] == list(subparsers()), out


def test_train_usage_is_two_short_lines(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_main(["train", "--help"], capsys)
    assert code == 0
    assert out.startswith(
        "usage: minitransformer train TASK [options]\n"
        "       minitransformer train --resume RUN [options]\n\n"
    ), out[:300]
    text = " ".join(out.split())
    assert "TASK what to learn: copy, reverse, sort, translate, translate-en-es, lm" in text


def test_model_and_knob_list_their_keys():
    train = subparsers()["train"]
    helps = {a.option_strings[0]: a.help for a in train._actions if a.option_strings}
    model_keys = helps["--model"].split("keys: ", 1)[1]
    assert [k.strip() for k in model_keys.split(",")][:-1] == [
        f.name for f in dataclasses.fields(TransformerConfig)
    ]
    knobs = helps["--knob"].split("keys: ", 1)[1].split("; ")
    for task in tasks.TASKS:
        group = next(g for g in knobs if task in g.split(": ")[0].split(", "))
        assert group.split(": ", 1)[1].split(", ") == tasks._knob_names(task), group


def test_ablate_and_plot_say_their_defaults_and_what_run_is(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_main(["ablate", "--help"], capsys)
    text = " ".join(out.split())
    assert code == 0
    steps, fast = AblationSettings().steps, AblationSettings.fast().steps
    assert (
        f"--steps STEPS training steps per variant (default: {steps}; with --fast {fast})" in text
    )
    assert "--out OUT where the table and figure go (default: runs/ablate)" in text
    code, out, _ = run_main(["plot", "--help"], capsys)
    assert "--run RUN the run directory" in " ".join(out.split())
