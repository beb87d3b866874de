"""--model overrides that contradict the task (issue 47, cause 8): the task decides the
vocabulary sizes and the kind of model (lm: the decoder-only TransformerLM; every other task:
an encoder-decoder), and a max_len shorter than its sequences would fail only when a long
batch came. Each is refused before any model is built: TrainConfig at once, the Trainer
once the task (which knows its sequence lengths) is made; the CLI says it in one line with
--model, exit 2.
"""

from __future__ import annotations

import pytest
from test_cli import assert_user_error, run_main
from tiny_runs import KNOBS, SIZE, TINY

from minitransformer.errors import ConfigError
from minitransformer.train import TrainConfig, Trainer

CONTRADICTIONS = [
    ("lm", {"decoder_only": False}, "decoder_only to false"),
    ("copy", {"decoder_only": True}, "decoder_only to true"),
    ("reverse", {"decoder_only": True}, "decoder_only to true"),
    ("translate", {"decoder_only": True}, "decoder_only to true"),
    ("copy", {"src_vocab": 30}, "sets src_vocab"),
    ("copy", {"tgt_vocab": 30}, "sets tgt_vocab"),
    ("lm", {"src_vocab": 100}, "sets src_vocab"),
    ("lm", {"tgt_vocab": 100, "decoder_only": True}, "sets tgt_vocab"),
]


@pytest.mark.parametrize(("task", "overrides", "words"), CONTRADICTIONS)
def test_config_refuses_what_the_task_decides(task, overrides, words):
    with pytest.raises(ConfigError, match=words):
        TrainConfig(task=task, model_overrides=overrides)


@pytest.mark.parametrize(("task", "overrides"), [("lm", {"decoder_only": True}),
                                                  ("copy", {"decoder_only": False}),
                                                  ("sort", {"decoder_only": False})])  # fmt: skip
def test_overrides_that_agree_with_the_task_are_accepted(task, overrides):
    assert TrainConfig(task=task, model_overrides=overrides).model_overrides == overrides


@pytest.mark.parametrize(("task", "overrides", "words"), CONTRADICTIONS[:5])
def test_cli_says_it_with_the_flag(task, overrides, words, capsys, tmp_path):
    (key, value), *_ = overrides.items()
    flag = f"{key}={str(value).lower()}"
    code, _, err = run_main(["train", task, "--out", str(tmp_path / "r"), "--model", flag, *TINY],
                            capsys)  # fmt: skip
    assert_user_error(code, err, "--model", words, "leave")
    assert not (tmp_path / "r").exists()  # refused before the run directory is made


@pytest.mark.parametrize("max_len", [1, 2, 6])  # the copy knob max_len=6 is 7 with EOS
def test_a_max_len_shorter_than_the_tasks_sequences_is_refused_before_the_model(max_len):
    sizes = dict(SIZE, max_len=max_len)
    cfg = TrainConfig(task="copy", task_knobs=dict(KNOBS), model_overrides=sizes, out="unused")
    with pytest.raises(
        ConfigError, match=f"max_len to {max_len}, but task 'copy' has sequences of up to 7"
    ):
        Trainer(cfg)


def test_the_shortest_max_len_that_fits_trains(tmp_path):
    cfg = TrainConfig(task="copy", task_knobs=dict(KNOBS), model_overrides=dict(SIZE, max_len=7),
                      steps=2, out=str(tmp_path / "r"), progress=False, plots=False,
                      eval_samples=4, final_eval_samples=4)  # fmt: skip
    assert Trainer(cfg).train()["steps"] == 2


def test_cli_max_len_too_short(capsys, tmp_path):
    argv = ["train", "copy", "--out", str(tmp_path / "r"), "--model", "max_len=4", *TINY]
    code, _, err = run_main(argv, capsys)
    assert_user_error(code, err, "--model sets max_len to 4", "at least 7")
