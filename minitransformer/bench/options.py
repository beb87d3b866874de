"""The flags of the ``bench`` command, declared once: ``add_arguments(parser)`` fills the
CLI's ``bench`` sub-parser and the parser of ``python -m minitransformer.bench`` alike.

Each flag's value is checked where it enters, by its argparse ``type=``: a bad value is a
usage error (exit status 2) naming the flag, what was expected and what was given.
``checked`` builds such a type; the CLI's other flags use it too.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .presets import PRESETS


def checked(convert: Callable[[str], Any], ok: Callable[[Any], bool], expected: str) -> Any:
    """An argparse ``type=``: convert the text, then check it; both failures say what was
    expected and what was given."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
        return value

    return parse


positive_int = checked(int, lambda v: v > 0, "a positive integer")
positive_float = checked(float, lambda v: 0 < v < math.inf, "a positive number (finite)")


def json_file(text: str) -> str:
    """A --json path that can be written: refused now, not after minutes of timing."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text}: is a directory; name a file, e.g. {path / 'bench.json'}"
        )
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text}: the directory {path.parent} does not exist; create it first"
        )
    return text


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``bench`` flags to ``parser``; return it."""
    parser.add_argument("--preset", action="append", choices=tuple(PRESETS))
    parser.add_argument("--compare", choices=("torch",))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=positive_float, default=20.0, help="time per preset")
    parser.add_argument("--json", type=json_file, help="also write the results to this file")
    parser.add_argument(
        "--data-parallel", metavar="N", type=positive_int,
        help="tokens/s of 1 and N MPI ranks (one BLAS thread each) against one process",
    )  # fmt: skip
    return parser
