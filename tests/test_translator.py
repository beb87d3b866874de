"""Translator: text in, text out, whatever the text. Empty and blank strings, unknown
words and characters, inputs longer than the model's max_len, odd argument types;
checkpoints that cannot make a Translator give a CheckpointError, not a crash; and a run
that stopped before its planned steps says so once (Python, translate, evaluate)."""

from __future__ import annotations

import signal
import warnings

import numpy as np
import pytest
from test_cli import run_main

from minitransformer.errors import CheckpointError, UnfinishedRunWarning
from minitransformer.runtime import checkpoint
from minitransformer.runtime.translator import Translator
from minitransformer.train import TrainConfig, Trainer


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """An untrained tiny copy model saved as a training checkpoint (max_len 16)."""
    out = tmp_path_factory.mktemp("translator")
    trainer = Trainer(
        TrainConfig(
            task="copy", out=str(out), progress=False, plots=False,
            task_knobs=dict(n_train=50, n_valid=8, n_test=8, max_len=6),
            model_overrides=dict(d_model=16, h=2, N=1, d_ff=32),
        )
    )  # fmt: skip
    trainer.save()
    return out


@pytest.fixture(scope="module")
def translator(run):
    with pytest.warns(UnfinishedRunWarning, match="stopped at step 0 of 3000"):
        return Translator.from_checkpoint(run)


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning expected
        return fn(*args, **kwargs)


@pytest.mark.parametrize("beam", [1, 3])
def test_plain_inputs(translator, beam):
    out = quiet(translator.translate, ["1 2 3", "4 5"], beam_size=beam)
    assert len(out) == 2 and all(isinstance(x, str) for x in out)


@pytest.mark.parametrize("beam", [1, 3])
def test_empty_and_blank_inputs_give_empty_outputs(translator, beam):
    out = quiet(translator.translate, ["", "   ", "\t\n", "1 2"], beam_size=beam)
    assert out[:3] == ["", "", ""] and isinstance(out[3], str)
    assert quiet(translator.translate, ["", ""], beam_size=beam) == ["", ""]  # nothing decoded
    assert quiet(translator.translate, []) == []


def test_unknown_words_and_characters_become_unk_with_a_warning(translator):
    with pytest.warns(UserWarning, match=r"4 token\(s\) .* not in the model's vocabulary"):
        out = translator.translate(["1 zebra 2", "你好 🙂", "\x00"])
    assert len(out) == 3 and all(isinstance(x, str) for x in out)


@pytest.mark.parametrize("beam", [1, 2])
def test_very_long_input_is_truncated_with_a_warning(translator, beam):
    long = " ".join(["7"] * 5000)
    with pytest.warns(
        UserWarning, match="input of 5000 tokens is longer than the model's max_len 16"
    ):
        out = translator.translate([long, "1"], beam_size=beam)
    assert len(out) == 2
    assert len(out[0].split()) <= translator.model.cfg.max_len


def test_one_string_in_one_string_out(translator):
    assert isinstance(quiet(translator.translate, "1 2 3"), str)
    assert quiet(translator.translate, "") == ""


def test_non_text_inputs_are_a_type_error(translator):
    with pytest.raises(TypeError, match="sentences must be str, got NoneType"):
        translator.translate(["1 2", None])
    with pytest.raises(TypeError, match="got int"):
        translator.translate([3])
    with pytest.raises(ValueError, match="beam_size"):
        translator.translate(["1"], beam_size=0)


def test_evaluate(translator):
    metrics = translator.evaluate("test", samples=3)
    assert metrics["sentences"] == 3 and 0 <= metrics["exact_match"] <= 1


def test_evaluate_needs_the_task(translator):
    bare = Translator(translator.model, translator.tokenizer, meta={})
    with pytest.raises(CheckpointError, match="does not say which task"):
        bare.evaluate()


# ------------------------------------------------------------------ bad checkpoints


def _resave(src, dst, edit_arrays=None, edit_meta=None):
    arrays, meta = checkpoint.load_checkpoint(src / "checkpoint.safetensors")
    for key in checkpoint.RESERVED_METADATA_KEYS:
        meta.pop(key)
    if edit_arrays:
        edit_arrays(arrays)
    if edit_meta:
        edit_meta(meta)
    checkpoint.save_checkpoint(dst / "checkpoint.safetensors", arrays, meta)


def test_checkpoint_without_a_model(tmp_path):
    checkpoint.save_checkpoint(tmp_path / "checkpoint.safetensors", {"w": np.zeros(3)}, {})
    with pytest.raises(CheckpointError, match="no model config or tokenizer"):
        Translator.from_checkpoint(tmp_path)


def test_weights_that_do_not_fit_the_config(run, tmp_path):
    _resave(run, tmp_path, edit_meta=lambda m: m["model_config"].update(d_model=32))
    with pytest.raises(CheckpointError, match="do not fit together.*mis-shaped"):
        Translator.from_checkpoint(tmp_path)


def test_missing_weights(run, tmp_path):
    def drop(arrays):
        del arrays[next(k for k in arrays if k.startswith("model."))]

    _resave(run, tmp_path, edit_arrays=drop)
    with pytest.raises(CheckpointError, match="missing keys"):
        Translator.from_checkpoint(tmp_path)


def test_tokenizer_larger_than_the_model(run, tmp_path):
    def grow(meta):
        meta["tokenizer"]["tokens"] = meta["tokenizer"]["tokens"] + ["x", "y", "z"] * 10

    _resave(run, tmp_path, edit_meta=grow)
    with pytest.raises(CheckpointError, match="tokenizer has .* tokens but the model only"):
        Translator.from_checkpoint(tmp_path)


def test_unknown_tokenizer(run, tmp_path):
    _resave(run, tmp_path, edit_meta=lambda m: m["tokenizer"].update(type="sentencepiece"))
    with pytest.raises(CheckpointError, match="unknown tokenizer type 'sentencepiece'"):
        Translator.from_checkpoint(tmp_path)


def test_truncated_checkpoint(run, tmp_path):
    data = (run / "checkpoint.safetensors").read_bytes()
    (tmp_path / "checkpoint.safetensors").write_bytes(data[:-100])
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        Translator.from_checkpoint(tmp_path)


# ------------------------------------------------------------------ a run stopped early


def stopped_run(out, steps=40, at=3):
    """A tiny copy run stopped by Ctrl-C at step ``at`` of ``steps``: the loop's own
    handler, called from inside a step, as the signal would call it."""
    trainer = Trainer(
        TrainConfig(
            task="copy", steps=steps, batch_size=8, warmup=10, out=str(out), progress=False,
            plots=False, log_every=1000, eval_every=1000, checkpoint_every=1000,
            task_knobs=dict(n_train=50, n_valid=8, n_test=8, max_len=6),
            model_overrides=dict(d_model=16, h=2, N=1, d_ff=32),
        )
    )  # fmt: skip
    step = trainer.train_step

    def stop_at(batch):
        step(batch)
        if trainer.step + 1 == at:
            trainer._on_signal(signal.SIGINT, None)

    trainer.train_step = stop_at
    assert trainer.train() == {"interrupted": True, "step": at, "signal": "SIGINT"}
    return out


def test_a_run_stopped_early_says_so_once(tmp_path, capsys):
    out = stopped_run(tmp_path / "x")
    note = (
        f"{out} stopped at step 3 of 40; its outputs are those of an unfinished model. "
        f"Resume it: minitransformer train --resume {out}"
    )
    with pytest.warns(UnfinishedRunWarning) as seen:
        Translator.from_checkpoint(out / "checkpoint.safetensors")  # the file names its run
    assert [str(w.message) for w in seen] == [note]
    capsys.readouterr()
    for argv in (["translate", "--checkpoint", str(out), "1 2 3", "4 5"],
                 ["evaluate", "--checkpoint", str(out), "--samples", "2"]):  # fmt: skip
        code, printed, err = run_main(argv, capsys)
        assert code == 0 and printed, err
        assert err.splitlines() == [f"minitransformer: warning: {note}"], err


def test_a_finished_run_says_nothing(tmp_path, capsys):
    out = stopped_run(tmp_path / "x", steps=3, at=3)  # stopped at its last step: finished
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Translator.from_checkpoint(out)
    code, _, err = run_main(["translate", "--checkpoint", str(out), "1 2"], capsys)
    assert code == 0 and "warning" not in err, err
