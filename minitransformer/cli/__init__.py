"""Command line: ``minitransformer`` or ``python -m minitransformer``.

    minitransformer train copy                      # the README's main job
    minitransformer train translate --steps 4000 --out runs/translate
    minitransformer train --resume runs/translate   # continue after Ctrl-C or a crash
    minitransformer translate --checkpoint runs/translate "the small dog sees a cat"
    minitransformer evaluate --checkpoint runs/translate --beam 4
    minitransformer plot --run runs/translate
    minitransformer bench --compare torch
    minitransformer ablate --out runs/ablate         # the paper's Table 3 at toy scale
    minitransformer train lm                        # a decoder-only language model
    minitransformer generate --checkpoint runs/lm "In the beginning" --temperature 0.8
    minitransformer scale --fast                    # the language model's loss against its size
    minitransformer attention --checkpoint runs/translate "the small dog"  # in runs/attention/

How it ends (the exit status, and what it prints on stderr):

- 2, a user's mistake (unknown task, bad value, unreadable or corrupted file): one line
  ``minitransformer CMD: error: ...`` and a pointer to ``minitransformer CMD --help``; the
  library's messages are worded for the command line (``--device cpu``, ``--lr``), not for
  Python (``device='cpu'``, ``peak_lr``).
- 1, a run that diverges (NaN/Inf; it says where to resume) or a missing optional package
  (sacrebleu, matplotlib; it gives the ``pip install``).
- 130 for Ctrl-C and 143 for SIGTERM (128 + the signal's number, the shell's convention).
  ``train`` saves a checkpoint first and prints the command that resumes, wherever it was
  stopped (in the loop, the final evaluation, the result card or the plots); elsewhere one
  line says what was stopped. Never a KeyboardInterrupt traceback, not even while Python is
  still importing the package (the console script's entry point, ``minitransformer_entry``,
  imports nothing before it catches Ctrl-C).
- 141 (128 + SIGPIPE) when the reader of stdout or stderr goes away, as in
  ``minitransformer translate ... | head -1``: quietly, like ``cat`` or ``grep`` in a pipe.

A traceback only with ``--debug`` (before or after the command:
``minitransformer train copy --debug``).

``train`` never writes over another run: an ``--out`` that holds one is refused unless
``--overwrite`` is given, and a run directory has one writer at a time (see runs/).

The package, top to bottom: this file (``main``: parse, tune the host, run, turn errors
into one line and an exit status), commands.py (one function per command), parser.py
(the sub-parsers), flags.py (each flag's type: its text converted and checked on entry).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import warnings
from typing import Any

from .. import backend, fast
from ..backend import devices, host
from ..errors import MiniTransformerError, Terminated, TrainingError, raise_terminated
from ..fast.numpy import compiled
from .commands import COMMANDS, TRAIN_FIELDS
from .parser import build_parser, subparser, usage_error

__all__ = ["build_parser", "cli_wording", "main"]

SIGPIPE_STATUS = 128 + 13  # what a shell reports for a filter stopped by a closed pipe


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status (also for argparse's own errors).

    The process is the CLI's own: SIGTERM unwinds the stack (exit 143) while a command runs;
    the handler in place before is restored on return (tests call ``main`` in-process).
    """
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, raise_terminated) if on_main_thread else None
    try:
        try:
            status = _main(argv)
            _flush_output()  # a closed pipe shows up here, not in Python's exit handler
        except KeyboardInterrupt:  # before a command runs (building the parser, parsing)
            status = _stopped(None, "interrupted (Ctrl-C)", 128 + signal.SIGINT)
        except Terminated:
            status = _stopped(None, "stopped by SIGTERM", 128 + signal.SIGTERM)
        except BrokenPipeError:
            if not _reader_gone():
                raise
            status = SIGPIPE_STATUS
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    # loaded only with --data-parallel
    distributed = sys.modules.get("minitransformer.runtime.distributed")
    return status if distributed is None else distributed.leave(status)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help (0) or a usage error (2), already printed
        return done.code if isinstance(done.code, int) else 2
    if args.command is None:
        return usage_error(
            parser,
            "a COMMAND is needed: train, translate, generate, evaluate, plot, bench, ablate, "
            "scale or attention",
        )
    host.tune_host()  # the CLI owns its process: allocator and BLAS-thread tuning
    if not args.reference:
        fast.enable()  # ... and the fast tier's NumPy twins (--reference: the ops as written)
        compiled.enable()  # with numba's kernels where numba is installed (the [fast] extra)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = _show_warning  # restored when the block ends
            return _run(args, parser)
    except SystemExit as done:  # parser.error() inside a command: already printed
        return done.code if isinstance(done.code, int) else 2
    except KeyboardInterrupt:
        if args.debug:
            raise
        return _stopped(args.command, "interrupted (Ctrl-C)", 128 + signal.SIGINT)
    except Terminated:
        if args.debug:
            raise
        return _stopped(args.command, "stopped by SIGTERM", 128 + signal.SIGTERM)
    except BrokenPipeError as err:
        if _reader_gone():  # `| head`: quiet, like a Unix filter
            return SIGPIPE_STATUS
        if args.debug:
            raise
        return usage_error(subparser(parser, args.command), cli_wording(_one_line(err)))
    except ImportError as err:  # an optional package is missing
        if args.debug:
            raise
        print(
            f"minitransformer {args.command}: error: {cli_wording(_missing_package(err))}",
            file=sys.stderr,
        )
        return 1
    except TrainingError as err:
        if args.debug:
            raise
        print(f"minitransformer {args.command}: error: {cli_wording(_one_line(err))}",
              file=sys.stderr)  # fmt: skip
        return 1
    except (MiniTransformerError, OSError, ValueError) as err:
        if args.debug:
            raise
        return usage_error(subparser(parser, args.command), cli_wording(_one_line(err)))


def _stopped(command: str | None, what: str, status: int) -> int:
    """One line for a command stopped by a signal outside the training loop (``train``'s
    loop says more: where it saved and how to resume)."""
    where = f"minitransformer {command}" if command else "minitransformer"
    try:
        print(f"\n{where}: {what}", file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):  # stderr closed or gone
        pass
    return status


def _flush_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()


def _reader_gone() -> bool:
    """After a BrokenPipeError: True when stdout or stderr lost its reader (``| head``);
    those streams are pointed at /dev/null, so Python's exit flush stays quiet too (what the
    Python docs advise instead of restoring SIGPIPE). False when the broken pipe was another
    one (a worker process), which is then a real error."""
    gone = False
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            continue
        if _pipe_closed(fd):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
            gone = True
    return gone


def _pipe_closed(fd: int) -> bool:
    """Whether writing to ``fd`` would fail with EPIPE (its reader has closed)."""
    try:
        import select

        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll() here: assume it was this one
        return True


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (truncated input, unknown words) as one plain line, not a source excerpt."""
    del category, filename, lineno, file, line
    print(f"minitransformer: warning: {cli_wording(str(message))}", file=sys.stderr)


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


# ------------------------------------------------------------------ Python words -> flags

_FLAG_OF_FIELD = {
    **{field: "--" + name.replace("_", "-") for name, field in TRAIN_FIELDS.items()},
    "model_overrides": "--model", "task_knobs": "--knob",
}  # fmt: skip
_FIELDS = "|".join(sorted(_FLAG_OF_FIELD, key=len, reverse=True))
_PYTHON_WORDS: list[tuple[re.Pattern[str], Any]] = [
    # "use device='cpu'" -> "use --device cpu"
    (re.compile(r"\bdevice=(['\"])(.*?)\1"), lambda m: f"--device {m.group(2)}"),
    # "TrainConfig: peak_lr must be in (0, 1)" -> "--lr must be in (0, 1)"
    (re.compile(rf"\bTrainConfig: ({_FIELDS}) "), lambda m: _FLAG_OF_FIELD[m.group(1)] + " "),
    # a resume refused: "peak_lr (checkpoint 0.002, given 0.005)" -> "--lr (checkpoint ..."
    (
        re.compile(rf"\b({_FIELDS}) \(checkpoint "),
        lambda m: f"{_FLAG_OF_FIELD[m.group(1)]} (checkpoint ",
    ),  # fmt: skip
    # "TransformerLM.generate: top_k = 9 is ..." -> "--top-k 9 is ..." (generate's flags)
    (
        re.compile(r"\bTransformerLM\.generate: (top_k|max_new_tokens|temperature|seed)( =)? "),
        lambda m: "--" + m.group(1).replace("_", "-") + " ",
    ),
    (re.compile(r", or None to keep every token"), lambda m: ", or leave --top-k out"),
    # "give max_new_tokens <= 39" -> "give --max-new-tokens 39 or less"
    (re.compile(r"\bmax_new_tokens <= (\d+)"), lambda m: f"--max-new-tokens {m.group(1)} or less"),
    # the Python half of a message that gives both ways on (it comes last)
    (re.compile(r"\s*From Python: .*$"), lambda m: ""),
]


def cli_wording(text: str) -> str:
    """A library message as a command-line user needs it: the Python spellings it may give
    for a fix (``device='cpu'``, TrainConfig's field names, ``Trainer.resume(out)``) turned
    into flags; the library keeps its Python wording for Python users."""
    for pattern, flag in _PYTHON_WORDS:
        text = pattern.sub(flag, text)
    return text


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Check --device (every command that has one), then run the command."""
    if getattr(args, "device", None):
        devices.check_device(args.device, "--device")  # a bad name, no CuPy, no GPU
        if args.device != "cpu":
            backend.namespace_for_device(args.device)
    return COMMANDS[args.command](args, parser)
