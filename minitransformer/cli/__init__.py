"""Command line: ``minitransformer`` or ``python -m minitransformer``.

    minitransformer train copy                      # the README's main job
    minitransformer train translate --steps 4000 --out runs/translate
    minitransformer train --resume runs/translate   # continue after Ctrl-C or a crash
    minitransformer translate --checkpoint runs/translate "the small dog sees a cat"
    minitransformer evaluate --checkpoint runs/translate --beam 4
    minitransformer plot --run runs/translate
    minitransformer bench --compare torch
    minitransformer ablate --out runs/ablate         # the paper's Table 3 at toy scale

A user's mistake (unknown task, bad value, unreadable or corrupted file) ends with exit
status 2, a one-line reason and the usage; a training run that diverges (NaN/Inf) ends with
status 1 and says where to resume; a missing optional package (sacrebleu, matplotlib) ends
with status 1 and the ``pip install`` to run. Ctrl-C ends with 130 and SIGTERM with 143
(128 + the signal's number, the shell's convention), both after saving a checkpoint and
printing the command that resumes. A traceback only with ``--debug`` (before or after the
command: ``minitransformer train copy --debug``).

``train`` never writes over another run: an ``--out`` that holds one is refused unless
``--overwrite`` is given, and a run directory has one writer at a time (see runs/).

The package, top to bottom: this file (``main``: parse, tune the host, run, turn errors
into one line and an exit status), commands.py (one function per command), parser.py
(the sub-parsers), flags.py (each flag's type: its text converted and checked on entry).
"""

from __future__ import annotations

import argparse
import sys
import warnings

from .. import backend, host
from ..errors import MiniTransformerError, TrainingError
from .commands import COMMANDS
from .parser import build_parser, subparser

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status (also for argparse's own errors)."""
    status = _main(argv)
    distributed = sys.modules.get("minitransformer.distributed")  # only with --data-parallel
    return status if distributed is None else distributed.leave(status)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help (0) or a usage error (2), already printed
        return done.code if isinstance(done.code, int) else 2
    if args.command is None:
        parser.print_usage(sys.stderr)
        print(
            "minitransformer: error: a COMMAND is needed: train, translate, evaluate, plot, "
            "bench or ablate (minitransformer --help lists them)",
            file=sys.stderr,
        )
        return 2
    host.tune_host()  # the CLI owns its process: allocator and BLAS-thread tuning
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = _show_warning  # restored when the block ends
            return _run(args, parser)
    except SystemExit as done:  # parser.error() inside a command: usage already printed
        return done.code if isinstance(done.code, int) else 2
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("minitransformer: interrupted", file=sys.stderr)
        return 130
    except ImportError as err:  # an optional package is missing
        if args.debug:
            raise
        print(f"minitransformer {args.command}: error: {_missing_package(err)}", file=sys.stderr)
        return 1
    except TrainingError as err:
        if args.debug:
            raise
        print(f"minitransformer: error: {_one_line(err)}", file=sys.stderr)
        return 1
    except (MiniTransformerError, OSError, ValueError) as err:
        if args.debug:
            raise
        subparser(parser, args.command).print_usage(sys.stderr)
        print(f"minitransformer {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (truncated input, unknown words) as one plain line, not a source excerpt."""
    del category, filename, lineno, file, line
    print(f"minitransformer: warning: {message}", file=sys.stderr)


def _missing_package(err: ImportError) -> str:
    """One line that names the package to install."""
    text = _one_line(err)
    name = (getattr(err, "name", None) or "").split(".")[0]
    if name and "pip install" not in text:
        text = f"this needs the package {name!r}, which is not installed. Fix: pip install {name}"
    return text


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        text = f"{err.filename}: {err.strerror}"  # not "[Errno 2] No such file ..."
    return text


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Check --device (every command that has one), then run the command."""
    if getattr(args, "device", None):
        backend.normalize_device(args.device)  # a clear error for a bad name
        if args.device != "cpu":
            backend.namespace_for_device(args.device)  # ... and for a missing GPU
    return COMMANDS[args.command](args, parser)
