"""What ``minitransformer attention`` (and ``translate``, ``generate``) make of hostile text.

- Undecodable bytes (issue 47, cause 5): text is decoded once, where it enters, by one rule
  (``data.text.readable_text``): bytes that are not UTF-8 become U+FFFD, on the command line
  (where Python hands them over as lone surrogates) as on translate's stdin, and a lone
  surrogate given from Python becomes U+FFFD too. ``attention`` and ``translate`` then read
  the same tokens and agree, and the page and the grid are written.
- Long sentences (cause 6): the model reads its first max_len tokens; the page and the grid
  show those, with one warning line, and their sizes are bounded whatever the input.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from test_attention_page import body_attributes, browse, console_messages, needs_browser
from test_cli import run_main

from minitransformer.cli.parser import build_parser
from minitransformer.data.text import readable_text, shorten
from minitransformer.runtime.translator import Translator
from minitransformer.tools import explorer, viz

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "lessons" / "checkpoints" / "en-es-tiny"
DATA_TAG = re.compile(r'<script type="application/json" id="data">(.*?)</script>', re.S)

UNDECODABLE = [
    b"caf\xe9 the earth",  # Latin-1
    b"\xff",  # a byte UTF-8 never uses
    b"the \xe2\x82 earth",  # a 3-byte sequence cut short
    b"heaven \xed\xa0\x80 and earth",  # an encoded surrogate (not UTF-8)
    b"the earth \xc3",  # a 2-byte sequence cut at the end
    b"\x80\x80 in the beginning \xf0\x9f",  # stray continuation bytes, a cut 4-byte start
]
"""Members of the class: byte strings that are not UTF-8, as argv may hold them."""

LONE_SURROGATES = ["caf\ud800 the earth", "the \udfff earth", "\ud83d\ude00 heaven", "\udce9"]
"""Lone surrogates a Python caller may put in a str (U+DC80..U+DCFF read as the bytes they
escape, any other as U+FFFD)."""


@pytest.fixture(scope="module")
def translator():
    return Translator.from_checkpoint(CHECKPOINT)


def page_data(path: Path) -> dict:
    """The data a page written by ``attention --html`` embeds."""
    return json.loads(DATA_TAG.search(path.read_text(encoding="utf-8")).group(1))


def png_size(path: Path) -> tuple[int, int]:
    """(height, width) in pixels of a PNG, read back."""
    import matplotlib.image

    return matplotlib.image.imread(path).shape[:2]


# ------------------------------------------------------------------------ the rule


@pytest.mark.parametrize("raw", UNDECODABLE)
def test_argv_bytes_decode_as_stdin_does(raw):
    """The command line's escapes (os.fsdecode: what Python does to argv) decode to what
    ``bytes.decode("utf-8", "replace")`` (translate's stdin) gives."""
    text = readable_text(os.fsdecode(raw))
    assert text == raw.decode("utf-8", "replace") and "\ufffd" in text
    text.encode("utf-8")  # writable


@pytest.mark.parametrize("text", LONE_SURROGATES)
def test_a_lone_surrogate_from_python_becomes_a_replacement(text):
    out = readable_text(text)
    out.encode("utf-8")
    assert "\ufffd" in out and len(out) <= len(text)
    assert readable_text(out) == out  # decoded once: a second time changes nothing


def test_text_without_surrogates_is_unchanged():
    for text in ("in the beginning", "café ñandú 日本 🙂", ""):
        assert readable_text(text) == text
    assert shorten("abcdef", 4) == "abc…" and shorten("abc", 4) == "abc"


@pytest.mark.parametrize("raw", UNDECODABLE[:3])
def test_the_commands_read_their_texts_by_the_rule(raw):
    """translate's sentences, generate's prompts and attention's sentence: one type."""
    arg, want = os.fsdecode(raw), raw.decode("utf-8", "replace")
    parser = build_parser()
    assert parser.parse_args(["translate", "--checkpoint", "R", arg]).sentences == [want]
    assert parser.parse_args(["generate", "--checkpoint", "R", arg, arg]).prompts == [want, want]
    args = parser.parse_args(["attention", "--checkpoint", "R", arg, "--html", "a.html"])
    assert args.sentence == want


# ------------------------------------------------------------------ the commands agree


def _translate_stdin(raw: bytes, capsys, monkeypatch) -> tuple[int, str, str]:
    """``translate --checkpoint CHECKPOINT`` with ``raw`` as stdin's one line."""
    stdin = io.TextIOWrapper(io.BytesIO(raw + b"\n"), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    return run_main(["translate", "--checkpoint", str(CHECKPOINT)], capsys)


@pytest.mark.parametrize("raw", UNDECODABLE)
def test_attention_and_translate_agree_on_undecodable_bytes(raw, translator, tmp_path, capsys,
                                                            monkeypatch):  # fmt: skip
    html, png = tmp_path / "a.html", tmp_path / "a.png"
    arg = os.fsdecode(raw)  # the str Python makes of these argv bytes
    argv = ["attention", "--checkpoint", str(CHECKPOINT), arg, "--html", str(html), "--png",
            str(png)]  # fmt: skip
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    assert out == f"wrote {html}, {png}\n" and "error" not in err
    data = page_data(html)
    want = raw.decode("utf-8", "replace").strip()
    assert data["sentence"] == want
    assert data["source"] == explorer.pieces(translator.tokenizer, translator.tokenize(want))
    assert min(png_size(png)) > 500
    code, out, err = run_main(["translate", "--checkpoint", str(CHECKPOINT), arg], capsys)
    assert code == 0, err
    assert out == data["translation"] + "\n"
    code, from_stdin, err = _translate_stdin(raw, capsys, monkeypatch)
    assert code == 0, err
    assert from_stdin == out


def test_real_argv_bytes_in_a_subprocess(tmp_path):
    """The bytes as a shell passes them: both commands exit 0, agree, no traceback."""
    raw = b"caf\xe9 the \xe2\x82 earth"
    html, png = tmp_path / "a.html", tmp_path / "a.png"
    run = [sys.executable, "-m", "minitransformer"]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run([*run, "attention", "--checkpoint", str(CHECKPOINT), raw, "--html",
                           str(html), "--png", str(png)], capture_output=True, env=env,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr and png_size(png)[0] > 500
    data = page_data(html)
    assert data["sentence"] == "caf\ufffd the \ufffd earth"
    done = subprocess.run([*run, "translate", "--checkpoint", str(CHECKPOINT), raw],
                          capture_output=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("utf-8") == data["translation"] + "\n"


@pytest.mark.parametrize("text", LONE_SURROGATES)
def test_the_library_reads_lone_surrogates_by_the_rule(text, translator, tmp_path):
    """explore writes the page and the grid; translate and the explorer read the text as
    its readable form, so they agree."""
    want = readable_text(text).strip()
    html, png = tmp_path / "a.html", tmp_path / "a.png"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unknown tokens
        written = explorer.explore(translator, text, str(html), str(png))
        assert translator.translate(text) == translator.translate(want)
    assert written == [html, png] and min(png_size(png)) > 500
    data = page_data(html)
    assert data["sentence"] == want
    assert data["source"] == explorer.pieces(translator.tokenizer, translator.tokenize(want))
    assert translator.tokenize(text) == translator.tokenize(want)


# ------------------------------------------------------------------ long sentences

MAX_SIDE = 2500
"""The most pixels a side of the grid may have (en-es-tiny: 6 rows of 4 heads, about
1,430 x 1,910 for any sentence)."""

MAX_PAGE = 600_000
"""The most bytes of the page (the weights of 56 tokens, every head: about 300 kB)."""

LONG = {
    "1k characters": ("the earth " * 100)[:1000],
    "10k characters": ("in the beginning god created " * 400)[:10_000],
    "100k characters": ("and the earth was without form " * 4000)[:100_000],
    "one 100k-character word": "a" * 100_000,
    "100k unknown characters": "語" * 100_000,
}


@pytest.mark.parametrize("name", LONG)
def test_a_long_sentence_makes_a_bounded_page_and_grid(name, translator, tmp_path, capsys):
    sentence = LONG[name]
    html, png = tmp_path / "a.html", tmp_path / "a.png"
    argv = ["attention", "--checkpoint", str(CHECKPOINT), sentence, "--html", str(html),
            "--png", str(png)]  # fmt: skip
    code, out, err = run_main(argv, capsys)
    assert code == 0, err[:2000]
    max_len = translator.model.cfg.max_len
    cut = [line for line in err.splitlines() if "truncated" in line]
    assert len(cut) == 1, err[:2000]  # one warning, one line
    assert f"truncated to its first {max_len} tokens" in cut[0]
    height, width = png_size(png)
    assert height < MAX_SIDE and width < MAX_SIDE, (height, width)
    assert html.stat().st_size < MAX_PAGE
    data = page_data(html)
    assert len(data["source"]) == max_len < data["sentence_tokens"]
    assert len(data["sentence"]) <= explorer.collect.SENTENCE_CHARS
    assert data["sentence"].endswith("…") and sentence.startswith(data["sentence"][:-1])


def test_a_short_sentence_is_not_cut(translator, tmp_path, capsys):
    html = tmp_path / "a.html"
    code, _, err = run_main(["attention", "--checkpoint", str(CHECKPOINT), "the earth",
                             "--html", str(html)], capsys)  # fmt: skip
    assert code == 0 and "truncated" not in err
    data = page_data(html)
    assert data["sentence"] == "the earth" and data["sentence_tokens"] == len(data["source"])


@pytest.mark.parametrize("length", [1_000, 100_000])
def test_plot_attention_is_bounded_by_its_texts(length, tmp_path):
    """viz.plot_attention: a title and tokens of any length (and lone surrogates) make a
    figure of bounded size."""
    rng = np.random.default_rng(0)
    w = rng.random((2, 5, 6))
    w /= w.sum(-1, keepdims=True)
    word = "x\udce9" * (length // 2)
    path = tmp_path / "a.png"
    title = "\n".join([word] * 50)
    fig = viz.plot_attention(w, [word] * 6, [word] * 5, title=title, head_labels=[word, "b"],
                             ylabel=word, path=path)  # fmt: skip
    height, width = png_size(path)
    assert height < 4000 and width < 4000, (height, width)
    shown = fig._suptitle.get_text()
    assert len(shown.splitlines()) <= 6 and "\ufffd" in shown


@needs_browser
def test_the_page_of_a_cut_sentence_loads_and_says_so(translator, tmp_path):
    """In a real browser: no console message, every head drawn, and the source line says
    how many tokens the sentence had and how many the model read."""
    html = tmp_path / "a.html"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explorer.explore(translator, "caf\udce9 " + LONG["10k characters"], str(html))
    done = browse(html, tmp_path, "--dump-dom")
    assert done.returncode == 0 and console_messages(done.stderr) == [], done.stderr[-2000:]
    assert body_attributes(done.stdout).get("data-ready") == "1"
    max_len = translator.model.cfg.max_len
    line = re.search(r'<p id="sentence">(.*?)</p>', done.stdout).group(1)
    assert line.startswith("source: caf\ufffd in the beginning") and "…" in line
    assert f"the model read the first {max_len})" in line
