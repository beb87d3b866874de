"""``python -m minitransformer.tools.gpucheck --out DIR [--quick] [--budget-s SECONDS]
[--steps A,B] [--allow-no-gpu]``.

Exit status, and what it prints on stderr:

- 0: the report is written (whatever it says: read its targets).
- 1: no GPU here and no ``--allow-no-gpu``: one line ``gpucheck: error: no GPU here
  (why) ...``, before any step runs and before anything is written (``--out`` is not even
  made): a report of skipped GPU steps is not a success a script should read as one.
- 2: a bad flag, an ``--out`` that cannot be used (a file, a link, a folder that holds
  anything), or another error: one line ``gpucheck: error: ...`` saying the fix.
- 130 on Ctrl-C, 143 on SIGTERM (128 + the signal's number): the running step's child and
  what it started are ended (``run_child``), a training run's temporary folder is removed,
  and one line says what was stopped, whether the report was written and how to rerun (the
  same command when ``--out`` is left empty, else into a new folder). SIGTERM is turned
  into an exception (``Terminated``) only while ``main`` runs; the handler before it comes
  back on return (tests call ``main`` in-process).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
from pathlib import Path

from ...checks import listed
from ...errors import DeviceError, MiniTransformerError, Terminated, raise_terminated
from .check import STEPS, run_check, stopped_during

DESCRIPTION = (
    "Measure the GPU path in one command: the GPU tests (pytest -m gpu) with MT_CUDA_KERNELS=0 "
    "and =1, both logs kept; the kernels the GPU runs per tiny training step (CUPTI) and the "
    "host time per CuPy call; bench --device cuda --compare torch-graph at tiny, small, base "
    "and base at batch 64 x length 64, kernels off and on; cached vs recomputing greedy "
    "decoding; train copy and translate-en-es tokens/s on cuda vs this machine's CPU; the CPU "
    "call budget. Writes DIR/gpucheck.md and DIR/gpucheck.json (DIR must be new or empty). "
    "About 8 minutes on an H200 (392 s for all but the training runs and the CPU budget). "
    "Without a GPU it refuses (exit status 1) unless --allow-no-gpu: then only the CPU-side "
    "steps run and every GPU step is reported as skipped."
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
        prog="python -m minitransformer.tools.gpucheck", description=DESCRIPTION
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
    parser.add_argument(
        "--allow-no-gpu",
        action="store_true",
        help="without a GPU, write a report of the CPU-side steps alone (exit status 0) "
        "instead of refusing (exit status 1)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the check from the command line; return the exit status (see the module's
    docstring). SIGTERM raises ``Terminated`` while it runs (on the main thread)."""
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, raise_terminated) if on_main_thread else None
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str]) -> int:
    out: str | None = None  # known once the flags are read
    try:
        args = build_parser().parse_args(argv)
        out = args.out
        run_check(
            args.out,
            quick=args.quick,
            budget_s=args.budget_s,
            only=args.steps,
            argv=argv,
            log=lambda msg: print(msg, flush=True),
            allow_no_gpu=args.allow_no_gpu,
        )
    except KeyboardInterrupt as stop:
        return _stopped(stop, "interrupted (Ctrl-C)", 128 + signal.SIGINT, out)
    except Terminated as stop:
        return _stopped(stop, "stopped by SIGTERM", 128 + signal.SIGTERM, out)
    except (MiniTransformerError, OSError) as err:
        print(f"gpucheck: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 1 if isinstance(err, DeviceError) else 2  # 1: no GPU, and no --allow-no-gpu
    return 0


def _stopped(stop: BaseException, what: str, status: int, out: str | None) -> int:
    """One line for a check stopped by a signal: what was running (its child is ended by
    now), whether the report was written, and how to rerun given what ``out`` holds."""
    doing = stopped_during(stop)
    line = f"gpucheck: {what} " + (f"during {doing}" if doing else "before the first step")
    if doing and doing.startswith("step "):
        line += ": stopped it and every process it started"
    folder = Path(out) if out is not None else None
    if folder is not None and (folder / "gpucheck.md").is_file():
        line += f"; the report is in {folder / 'gpucheck.md'}"
    else:
        line += "; no report was written"
        held = _entries(folder)
        if held:
            line += (
                f"; {out} keeps what finished ({listed(held)}): rerun into a new folder, "
                f"e.g. --out {out}-2"
            )
        else:
            empty = folder is not None and folder.is_dir()
            line += "; rerun the same command" + (f" ({out} is empty)" if empty else "")
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed or gone
        pass
    return status


def _entries(folder: Path | None) -> list[str]:
    """The names in ``folder``, sorted; none for a folder that is not there (or a link)."""
    if folder is None or folder.is_symlink() or not folder.is_dir():
        return []
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


if __name__ == "__main__":
    sys.exit(main())
