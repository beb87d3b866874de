"""The flags of the ``bench`` command, declared once: ``add_arguments(parser)`` fills the
CLI's ``bench`` sub-parser and the parser of ``python -m minitransformer.tools.bench`` alike;
``check_json`` and ``write_json``, the ``--json`` file (through runs/outputs.py).

Each flag's value is checked where it enters, by its argparse ``type=``: a bad value is a
usage error (exit status 2) naming the flag, what was expected and what was given.
``checked`` builds such a type; the CLI's other flags use it too.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any

from ...runtime.runs import outputs
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

MAX_SECONDS = 3600.0
"""The cap of --seconds, the timed budget of each preset: an hour. A budget beyond it (1e308)
would time for ever; the rounds are capped at 8, so more seconds only lengthen each."""
MAX_RANKS = 64
"""The cap of --data-parallel N: MPI ranks, each a Python process with its own model."""

seconds = checked(
    float, lambda v: 0 < v <= MAX_SECONDS,
    f"a positive number (finite), at most {MAX_SECONDS:,.0f} seconds (an hour per preset)",
)  # fmt: skip
ranks = checked(int, lambda v: 0 < v <= MAX_RANKS, f"a number of MPI ranks in 1..{MAX_RANKS}")


def json_file(text: str) -> str:
    """A --json name: not empty or blank. What is there (a file, a FIFO, a link) is checked
    by the command before any timing, where --overwrite is known (``outputs.check_new_file``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a file name, e.g. bench.json; got {text!r}")
    return text


def check_json(args: Any) -> None:
    """Refuse a ``--json`` target before any timing: a directory, a FIFO, a device, a missing
    or read-only folder; a file or a symbolic link unless ``--overwrite`` (ConfigError)."""
    if args.json:
        overwrite = getattr(args, "overwrite", False)
        outputs.check_new_file(args.json, "--json", overwrite=overwrite, example="bench.json")


def write_json(args: Any, results: Any) -> None:
    """The results as the ``--json`` file, written whole through runs/outputs.py: never through
    a link, never over a file that appeared since the start unless ``--overwrite``."""
    text = json.dumps(results, indent=2) + "\n"
    overwrite = getattr(args, "overwrite", False)
    outputs.write_new_file(args.json, text.encode("utf-8"), "--json", overwrite=overwrite)


class PresetOnce(argparse.Action):
    """``--preset NAME``, repeatable, but each name once: a name given twice would time that
    preset twice (the run's length grows with every repeat)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        value: Any,
        option_string: str | None = None,
    ) -> None:
        chosen = list(getattr(namespace, self.dest) or [])
        if value in chosen:
            raise argparse.ArgumentError(self, f"{value} is given twice; give each preset once")
        setattr(namespace, self.dest, [*chosen, value])


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
        "--preset", action=PresetOnce, choices=tuple(PRESETS),
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
        "--seconds", type=seconds, default=20.0,
        help="timed seconds per preset, shared by the implementations (default 20, at most "
        f"{MAX_SECONDS:,.0f}); more gives more rounds (up to 8) and steadier medians",
    )  # fmt: skip
    parser.add_argument(
        "--json", type=json_file, metavar="FILE",
        help="also write the results to this new file (checked before any timing)",
    )  # fmt: skip
    parser.add_argument(
        "--overwrite", action="store_true", help="let --json replace a file that exists",
    )  # fmt: skip
    parser.add_argument(
        "--data-parallel", metavar="N", type=ranks,
        help="tokens/s of 1 and N MPI ranks (one BLAS thread each) against one process "
        f"(N at most {MAX_RANKS})",
    )  # fmt: skip
    return parser
