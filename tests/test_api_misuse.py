"""The library's entry points against misuse (issue 47, cause 11): each mistake is the
library's own error, one line, naming the argument and the fix; never a raw TypeError,
AttributeError or OSError from deep inside.

- TransformerLM(vocab=V, d_modle=16): a ConfigError naming the unknown field, the closest
  valid one and the list of valid fields (as TransformerConfig.preset names unknown ones).
- TransformerLM.forward's second argument (the cache) and ``checked``.
- TextSampler.from_checkpoint, Translator.from_checkpoint and Translator.from_pretrained
  with a path that is not one: another type, blank, a control character or line separator,
  longer than a path can be; checked before the file system is touched.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_lm_cli import SMALL

import minitransformer as mt
from minitransformer import checks
from minitransformer.checks import PATH_MAX
from minitransformer.errors import (
    ArgumentError,
    CheckpointError,
    ConfigError,
    MiniTransformerError,
    ShapeError,
)
from minitransformer.nn.attention import KVCache
from minitransformer.nn.language_model import TransformerLM
from minitransformer.nn.lm_arguments import FIELDS
from minitransformer.nn.transformer import DecoderCache, Transformer
from minitransformer.runtime.sampler import TextSampler
from minitransformer.runtime.translator import Translator

SIZES = dict(d_model=16, h=2, N=1, d_ff=32, max_len=20)


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """One small run of train lm (tests/test_lm_cli.py's flags), shared by this module."""
    out = tmp_path_factory.mktemp("runs") / "lm"
    from minitransformer.cli import main

    assert main(["train", "lm", "--steps", "20", "--out", str(out), *SMALL]) == 0
    return out


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message and "\r" not in message and len(message) < 600, message
    return message


# ------------------------------------------------------------------ TransformerLM's fields
@pytest.mark.parametrize(
    ("typo", "guess"),
    [("d_modle", "d_model"), ("dropuot", "dropout"), ("maxlen", "max_len"),
     ("n_heads", None), ("tie_embedding", "tie_embeddings"), ("layers", None)],
)  # fmt: skip
def test_an_unknown_field_is_named_with_the_closest_and_the_valid_ones(typo, guess):
    with pytest.raises(ConfigError, match="unknown field") as err:
        TransformerLM(vocab=50, **{typo: 16})
    message = _one_line(err)
    assert repr(typo) in message and "valid fields" in message
    assert all(repr(name) in message for name in FIELDS)
    if guess is not None:
        assert f"did you mean {guess!r}?" in message


def test_the_valid_fields_still_build_a_model():
    lm = TransformerLM(vocab=50, **SIZES, dropout=0.0, tie_embeddings=False)
    assert lm.cfg.d_model == 16 and not lm.cfg.tie_embeddings


# ------------------------------------------------------------------ forward's arguments
def _lm():
    return TransformerLM(vocab=50, **SIZES)


@pytest.mark.parametrize(
    "cache",
    ["x", 3, [1, 2], np.zeros(3), {"offset": 0},
     DecoderCache(self_attn=[KVCache(), KVCache()]),  # another model's (N = 2)
     DecoderCache(self_attn=[KVCache()], cross_attn=[KVCache(static=True)]),  # a Transformer's
     DecoderCache(self_attn=[KVCache()], offset=-1)],
    ids=["str", "int", "list", "array", "dict", "two-layers", "cross", "negative-offset"],
)  # fmt: skip
def test_forward_refuses_what_is_not_its_cache(cache):
    with pytest.raises(ArgumentError, match="cache") as err:
        _lm()(np.array([[1, 2, 3]]), cache)
    _one_line(err)


@pytest.mark.parametrize("checked", ["yes", 1, None, np.zeros(1)])
def test_forward_refuses_a_checked_that_is_not_a_bool(checked):
    with pytest.raises(ArgumentError, match="checked must be True or False"):
        _lm()(np.array([[1, 2, 3]]), checked=checked)


def test_a_cache_belongs_to_one_batch():
    lm = _lm()
    cache = lm.new_cache()
    lm(np.array([[1, 2], [3, 4]]), cache)
    with pytest.raises(ShapeError, match="ids have 3 rows but the cache holds 2"):
        lm(np.array([[5], [6], [7]]), cache)
    assert lm(np.array([[5], [6]]), cache).shape == (2, 1, 50)  # the right batch goes on


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [(dict(max_new_tokens="3"), "max_new_tokens"), (dict(temperature=None), "temperature"),
     (dict(top_k=2.5), "top_k"), (dict(seed="0"), "seed"), (dict(use_cache=1), "use_cache"),
     (dict(prompt_ids=[[1, "a"]]), "integer token ids"), (dict(prompt_ids=None), "prompt_ids")],
)  # fmt: skip
def test_generate_names_each_bad_argument(kwargs, words):
    args = {"prompt_ids": [[1, 2]], "max_new_tokens": 3, **kwargs}
    with pytest.raises(MiniTransformerError, match=words) as err:
        _lm().generate(**args)
    _one_line(err)


# ------------------------------------------------------------------ paths of the loaders
LOADERS = {
    "TextSampler.from_checkpoint": TextSampler.from_checkpoint,
    "Translator.from_checkpoint": Translator.from_checkpoint,
    "Translator.from_pretrained": Translator.from_pretrained,
    "from_pretrained": Transformer.from_pretrained,  # the model's own loader
}
NOT_PATHS = [None, 3, 1.5, b"runs/lm", ["runs/lm"], object()]
LINE_BREAKING = ["a\nb", "runs/lm\n", "owner/na\nme", "x\ry", "a\x00b", "tab\there", "a\u2028b"]


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("path", NOT_PATHS, ids=lambda p: type(p).__name__)
def test_a_loader_refuses_what_is_not_a_path(loader, path):
    with pytest.raises(ArgumentError, match=f"{loader}: the path must be") as err:
        LOADERS[loader](path)
    assert type(path).__name__ in _one_line(err)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("path", ["", "   "])
def test_a_loader_refuses_a_blank_path(loader, path):
    with pytest.raises(ArgumentError, match="blank") as err:
        LOADERS[loader](path)
    _one_line(err)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("path", LINE_BREAKING, ids=repr)
def test_a_loader_refuses_a_control_character_in_one_line(loader, path):
    with pytest.raises(ArgumentError, match="control character") as err:
        LOADERS[loader](path)
    assert repr(path) in _one_line(err)  # shown escaped, never raw


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("length", [PATH_MAX + 1, 5_000, 100_000])
def test_a_loader_refuses_a_name_too_long_for_any_path(loader, length, monkeypatch):
    def guarded(method):
        def call(self, *args, **kwargs):
            if len(str(self)) > PATH_MAX:
                raise AssertionError("the file system was asked about a name no path can be")
            return method(self, *args, **kwargs)

        return call

    for name in ("exists", "is_dir", "is_file", "stat"):
        monkeypatch.setattr(Path, name, guarded(getattr(Path, name)))
    with pytest.raises(CheckpointError, match=r"File name too long") as err:
        LOADERS[loader]("n" * length)
    assert f"({length} characters)" in _one_line(err)


def test_a_pathlike_path_still_loads(lm_run):
    """pathlib.Path and str both work; the loader of the other kind of model says so."""
    sampler = TextSampler.from_checkpoint(Path(lm_run))
    assert sampler.model.cfg.decoder_only
    with pytest.raises(CheckpointError, match="language model") as err:
        Translator.from_checkpoint(str(lm_run))
    _one_line(err)


# ------------------------------------------------------------------ values too big to write out
HUGE = 10**5000  # past Python's 4,300 digits of int repr (and a float's range)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: checks.positive_int("w", "n", [HUGE]), "a list holding a number too long"),
        (lambda: checks.positive_int("w", "n", -HUGE), "a negative int of 16,610 bits"),
        (lambda: checks.non_negative_int("w", "n", -(10**50)), "a negative int of 167 bits"),
        (lambda: checks.real("w", "x", HUGE), "an int of 16,610 bits"),
        (lambda: mt.nn.Linear([HUGE], 3), "d_in must be a positive int, got a list"),
        (lambda: mt.nn.Linear(list(range(100)), 3), "got [0, 1, 2"),
    ],
)
def test_a_value_too_big_to_write_out_is_still_one_library_error(call, words):
    """checks.short (what every check's message shows of the value) never raises itself:
    an int of more than 40 digits is shown by its bits, a value whose repr Python refuses by
    its type, and a long repr is cut, so the message is the library's one line."""
    with pytest.raises(ArgumentError) as err:
        call()
    line = _one_line(err)
    assert words in line and len(line) < 300, line
