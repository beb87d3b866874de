"""The flags of the ``bench`` command, declared once: ``add_arguments(parser)`` fills the
CLI's ``bench`` sub-parser and the parser of ``python -m minitransformer.tools.bench`` alike.

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


DESCRIPTION = (
    "Time full training steps (forward, loss, backward, Adam; float32) at the tiny, small "
    "and base sizes, each implementation in its own process, then greedy decoding at small "
    "(for --seconds / 2, at least 2 s). "
    "--seconds is the timed budget of each preset, shared by the implementations; on top "
    "come starting the workers, a warm-up of up to 3 s each, the GEMM ceiling between rounds "
    "and at least one step per implementation and round (a base step takes 1-2.5 s). "
    "On an idle 2-core machine the default run took about 2 minutes, 2.5 with --compare "
    "torch; --preset tiny --seconds 5 about 10 s (20 s with --compare torch); longer on a "
    "busy machine. Each ratio is printed "
    "with its range over rounds, and with a WARNING when a side's rounds disagree or other "
    "processes kept the cores busy: such numbers are not the code's alone."
)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``bench`` flags to ``parser`` and describe the command in its ``--help``;
    return it."""
    parser.description = DESCRIPTION
    parser.add_argument(
        "--preset", action="append", choices=tuple(PRESETS),
        help="time only this size (repeat for several; default: all three)",
    )  # fmt: skip
    parser.add_argument(
        "--compare", choices=("torch", "torch-graph"),
        help="also time PyTorch's step, alternating rounds: torch = eager (on the CPU on its "
        "default threads and on one thread); torch-graph = eager and, as the floor, the whole "
        "step replayed as one CUDA graph (needs --device cuda). On a GPU both sides compute "
        "in plain FP32 (TF32 off in PyTorch, as CuPy's default)",
    )  # fmt: skip
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument(
        "--gpu-only", action="store_true",
        help="on a GPU, do not also time our step on this machine's CPU",
    )  # fmt: skip
    parser.add_argument(
        "--seconds", type=positive_float, default=20.0,
        help="timed seconds per preset, shared by the implementations (default 20); more "
        "gives more rounds (up to 8) and steadier medians",
    )  # fmt: skip
    parser.add_argument("--json", type=json_file, help="also write the results to this file")
    parser.add_argument(
        "--data-parallel", metavar="N", type=positive_int,
        help="tokens/s of 1 and N MPI ranks (one BLAS thread each) against one process",
    )  # fmt: skip
    return parser
