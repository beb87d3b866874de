"""The ``attention`` command: a sentence translated, its attention written as a page and a grid.

    minitransformer attention --checkpoint lessons/checkpoints/en-es-tiny \\
        "in the beginning god created the heaven and the earth."
    # -> wrote runs/attention/attention.html, runs/attention/attention.png

With neither ``--html`` nor ``--png`` it writes both under ``runs/`` (``DEFAULT_HTML``,
``DEFAULT_PNG``: git ignores ``runs/``, where every command writes); ``--html FILE`` or
``--png FILE`` writes only what is named.

``add_arguments(parser)`` declares the flags on a parser (the CLI's ``attention``
sub-parser); ``check_request`` refuses a mistake before any model is loaded; ``explore``
translates, gathers (collect.py) and writes the page (page.py) and the grid (grid.py).

It never writes over a file it did not make: an existing ``--html`` or ``--png`` (a default
one too) is refused unless ``--overwrite``, and a file is written whole to a temp file and
renamed over the name (``runs.files.replacing``): a link there is replaced, never written
through.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ...data.text import readable_text
from ...errors import ConfigError
from ...runtime.runs import files
from .collect import attention_data, check_sentence
from .grid import plot_grid
from .page import render_page

DESCRIPTION = (
    "Translate one sentence with a translation checkpoint and show every layer and head of "
    "its three kinds of attention (encoder self, decoder self, cross): --html writes one "
    "self-contained page (no network, no server; open it in a browser) where you choose the "
    "layer and head, see the weights as lines between the tokens or as a matrix, hover a "
    "token to see what it attends to, with each head's statistics beside it; --png writes a "
    "static grid of every head. With neither, both go under runs/attention/."
)

DEFAULT_HTML = str(Path("runs", "attention", "attention.html"))
"""Where the page goes when neither --html nor --png is given (beside ``DEFAULT_PNG``)."""

DEFAULT_PNG = str(Path("runs", "attention", "attention.png"))
"""Where the grid goes when neither --html nor --png is given."""

SUFFIXES = {"--html": (".html", ".htm"), "--png": (".png",)}


def file_name(text: str) -> str:
    """--html, --png, --checkpoint: a name, not empty or blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a file name, got {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``attention`` flags to ``parser`` and describe the command in its ``--help``;
    return it."""
    parser.description = DESCRIPTION
    parser.add_argument("--checkpoint", type=file_name, required=True, metavar="RUN",
                        help="a run directory or checkpoint file of a translation task "
                        "(train translate, translate-en-es, copy, ...)")  # fmt: skip
    parser.add_argument("sentence", type=readable_text,
                        help="the source sentence; its translation is the model's (bytes that "
                        "are not UTF-8 are read as U+FFFD, as translate reads them)")  # fmt: skip
    parser.add_argument("--html", type=file_name, metavar="FILE",
                        help="write the explorer page here (.html); with neither --html nor "
                        f"--png: {DEFAULT_HTML} and {DEFAULT_PNG}")  # fmt: skip
    parser.add_argument("--png", type=file_name, metavar="FILE",
                        help="write the grid of every head here (.png)")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --html or --png file")  # fmt: skip
    return parser


def outputs(html: str | None, png: str | None) -> dict[str, str]:
    """The files to write, by flag: those named, or with neither named, both defaults
    (``DEFAULT_HTML``, ``DEFAULT_PNG``)."""
    if not html and not png:
        return {"--html": DEFAULT_HTML, "--png": DEFAULT_PNG}
    return {flag: name for flag, name in (("--html", html), ("--png", png)) if name}


def check_request(sentence: Any, html: str | None, png: str | None, overwrite: bool) -> None:
    """Refuse, before any model is loaded: a blank sentence, a name without its suffix, one
    name for both files, a folder, a file in the way of its folder, or a file that exists
    (unless ``overwrite``; a default one too, see ``outputs``). Each refusal is one line
    naming the flag and the fix."""
    check_sentence(sentence)
    named = outputs(html, png)
    default = not html and not png
    if html and png and Path(html).resolve() == Path(png).resolve():
        raise ConfigError(f"--html and --png both name {html}. Fix: give each its own file")
    for flag, name in named.items():
        path, suffixes = Path(name), SUFFIXES[flag]
        if path.is_dir():
            raise ConfigError(
                f"{flag} {name} is a folder. Fix: give a file in it, e.g. {flag} "
                f"{path / ('attention' + suffixes[0])}"
            )
        if path.suffix.lower() not in suffixes:
            raise ConfigError(
                f"{flag} {name}: the file needs the suffix {suffixes[0]}. Fix: "
                f"{flag} {path.with_suffix(suffixes[0])}"
            )
        folder = path.parent
        while not os.path.lexists(folder) and folder != folder.parent:
            folder = folder.parent  # the nearest part of the path that is there
        if not folder.is_dir():
            raise ConfigError(
                f"{flag} {name}: {folder} is not a folder. Fix: name a file in a folder, e.g. "
                f"{flag} {Path('runs', 'attention', 'attention' + suffixes[0])}"
            )
        if os.path.lexists(path) and not overwrite:
            shown = f"{name} (written when neither --html nor --png is given)" if default else (
                f"{flag} {name}")  # fmt: skip
            fix = "name other files with --html FILE and --png FILE" if default else (
                "give another name")  # fmt: skip
            raise ConfigError(
                f"{shown} already exists, and attention writes only new files. Fix: "
                f"{fix}, or --overwrite to replace it"
            )


def explore(translator: Any, sentence: str, html: str | None = None, png: str | None = None,
            overwrite: bool = False, checkpoint: str = "") -> list[Path]:  # fmt: skip
    """Translate ``sentence`` with ``translator`` (a ``translator.Translator``), then write
    the page to ``html`` and the grid to ``png`` (either may be None; both None: the
    defaults, ``outputs``); return the files written. ``checkpoint``: the name the page
    shows for the model."""
    check_request(sentence, html, png, overwrite)
    named = outputs(html, png)
    html, png = named.get("--html"), named.get("--png")
    data = attention_data(translator, sentence, checkpoint)
    written = []
    if html:
        check_request(sentence, html, None, overwrite)  # again: it may have appeared since
        path = Path(html)
        path.parent.mkdir(parents=True, exist_ok=True)
        with files.replacing(path.parent, path.name) as file:
            file.write(render_page(data).encode("utf-8"))
        written.append(path)
    if png:
        check_request(sentence, None, png, overwrite)
        plot_grid(data, png)
        written.append(Path(png))
    return written
