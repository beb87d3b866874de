"""``python -m minitransformer.gpucheck --out DIR [--quick] [--budget-s SECONDS]``.

Exit status 0 when the report is written (whatever it says: read its targets), 2 for a
bad flag or an ``--out`` that cannot be used, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import math
import sys

from ..errors import MiniTransformerError
from .check import STEPS, run_check

DESCRIPTION = (
    "Measure the GPU path in one command: the GPU tests (pytest -m gpu) with MT_CUDA_KERNELS=0 "
    "and =1, both logs kept; the kernels the GPU runs per tiny training step (CUPTI) and the "
    "host time per CuPy call; bench --device cuda --compare torch-graph at tiny, small, base "
    "and base at batch 64 x length 64, kernels off and on; cached vs recomputing greedy "
    "decoding; train copy and translate-en-es tokens/s on cuda vs this machine's CPU; the CPU "
    "call budget. Writes DIR/gpucheck.md and DIR/gpucheck.json (DIR must be new or empty). "
    "About 8 minutes on an H200 (392 s for all but the training runs and the CPU budget); "
    "without a GPU only the CPU-side steps run and every GPU step is reported as skipped."
)


def _budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (0 < value < math.inf):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value}")
    return value


def _steps(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown step {', '.join(unknown) or repr(text)}: name one or more of "
            f"{','.join(STEPS)}, separated by commas"
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m minitransformer.gpucheck", description=DESCRIPTION
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="a new or empty directory for the report"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes only (a smoke test of the check; not quotable)",
    )
    parser.add_argument(
        "--budget-s",
        type=_budget,
        default=480.0,
        metavar="SECONDS",
        help="time for all steps (default 480); what does not fit is reported as skipped",
    )
    parser.add_argument(
        "--steps",
        type=_steps,
        default=None,
        metavar="A,B",
        help=f"run only these steps (a rerun of what failed), of {','.join(STEPS)}; the others "
        "are reported as skipped",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        run_check(
            args.out,
            quick=args.quick,
            budget_s=args.budget_s,
            only=args.steps,
            argv=argv,
            log=lambda msg: print(msg, flush=True),
        )
    except KeyboardInterrupt:
        print("gpucheck: interrupted", file=sys.stderr)
        return 130
    except (MiniTransformerError, OSError) as err:
        print(f"gpucheck: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
