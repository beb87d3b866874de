"""--pretrained names that no folder or Hub id can be, and a downloaded folder whose weights
hold NaN: each one line of the library's error naming the name (or file) and the fix."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_cli import assert_user_error, run_main
from tiny_runs import marian_config

import minitransformer as mt
from minitransformer.errors import ArgumentError, CheckpointError
from minitransformer.runtime.pretrained import pretrained_folder

NAMES = {  # name -> what the message says (raw RuntimeError, OSError, two lines before)
    "~nonexistentuser12345/model": "no user 'nonexistentuser12345' on this machine",
    "m" * 5000: "cannot be a path here (File name too long)",
    "some/" + "x" * 300: "(305 characters): not a folder, nor a Hub id",
    "Helsinki-NLP/opus-mt-en-es\n--beam 4": "control character",
    "a\tb": "control character",
}


@pytest.mark.parametrize("name", sorted(NAMES), ids=lambda n: repr(n)[:30])
def test_names_no_system_can_look_up_get_one_line(name, capsys):
    with pytest.raises((ArgumentError, CheckpointError), match=re.escape(NAMES[name])) as err:
        pretrained_folder(name)
    message = str(err.value)
    assert "\n" not in message and len(message) < 400, message
    code, _, out = run_main(["translate", "--pretrained", name, "x"], capsys)
    assert_user_error(code, out, NAMES[name])


def test_a_long_name_is_shown_cut_with_its_length():
    with pytest.raises(CheckpointError, match=r"m{100}\.\.\. \(5000 characters\)"):
        pretrained_folder("m" * 5000)


def _marian_folder(path):
    cfg = marian_config(30, d_model=8, d_ff=16, max_len=16)
    mt.nn.Transformer(cfg, seed=0).save_pretrained(path)
    return path


def test_nan_weights_in_a_downloaded_folder_name_a_few_and_count_the_rest(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = _marian_folder(tmp_path / "opus")
    weights = load_file(folder / "model.safetensors")
    poisoned = sorted(n for n, a in weights.items() if a.ndim == 2 and "positions" not in n)
    for name in poisoned:
        weights[name] = np.full_like(weights[name], np.nan)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError) as err:
        mt.nn.Transformer.from_pretrained(folder)
    message = str(err.value)
    assert f"{len(poisoned)} of its arrays hold NaN or Inf" in message, message
    assert f"and {len(poisoned) - 3} more" in message and poisoned[0] in message
    assert poisoned[-1] not in message  # a few named, the rest counted
    assert "Download it again" in message and "learning rate" not in message


def test_load_state_dict_names_a_few_nonfinite_arrays_and_counts_the_rest():
    model = mt.nn.Transformer(mt.TransformerConfig.preset("tiny", src_vocab=20, tgt_vocab=20))
    state = {k: np.full_like(v, np.nan) for k, v in model.state_dict().items()}
    with pytest.raises(ArgumentError, match=rf"and {len(state) - 3} more hold NaN") as err:
        model.load_state_dict(state)
    assert len(str(err.value)) < 400
