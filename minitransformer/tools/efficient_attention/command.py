"""What the two commands of this folder share (cost.py and quality.py): the parser whose
errors are one line, the flag types, the --out folder checked and written, and ``main``'s
frame (exit statuses, Ctrl-C and SIGTERM).

- ``Parser``: argparse's, but a mistake is ``PROG: error: ...`` and ``see: PROG --help``.
- ``whole``, ``bounded``, ``kinds_flag``, ``out_dir``: the flags' ``type=`` checks; a bad
  value is an ``argparse.ArgumentTypeError`` naming what was expected and what was given.
- the --out folder (new or empty unless --overwrite) and its three files are
  ``runtime/runs/outputs.py``'s ``check_study_dir`` and ``write_study_files``, which the
  scaling study uses too.
- ``run_command``: parse, run, and turn what stops a command into its exit status: 2 and
  one line for a mistake, 130 on Ctrl-C, 143 on SIGTERM (raised as ``Terminated``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence

from ...errors import MiniTransformerError, Terminated, raise_terminated


# ----------------------------------------------------------------------------- the parser
class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and a pointer to ``--help``."""

    def error(self, message: str) -> None:  # type: ignore[override]
        """Print ``PROG: error: MESSAGE`` and ``see: PROG --help``; exit with status 2."""
        print(f"{self.prog}: error: {message}\nsee: {self.prog} --help", file=sys.stderr)
        raise SystemExit(2)


def whole(text: str, low: int, high: int, expected: str) -> int:
    """``text`` as a whole number in ``low..high`` (``1000`` or ``1_000``); otherwise an
    ArgumentTypeError ``expected EXPECTED, got ...``."""
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
    return value


def bounded(low: int, high: int, example: str) -> Callable[[str], int]:
    """A flag type: a whole number in ``low..high``, ``example`` shown in its error."""

    def parse(text: str) -> int:
        return whole(text, low, high, f"a whole number in {low:,}..{high:,}, e.g. {example}")

    return parse


def kinds_flag(known: Sequence[str]) -> Callable[[str], list[str]]:
    """A flag type (--kinds): comma-separated different names of ``known``."""

    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",")]
        if any(n not in known for n in names) or len(set(names)) != len(names):
            raise argparse.ArgumentTypeError(
                f"expected different kinds of {','.join(known)}, separated by commas; got {text!r}"
            )
        return names

    return parse


def out_dir(text: str) -> str:
    """--out: a folder name, not empty or blank (an empty name would be the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a folder name, got {text!r}")
    return text


# ----------------------------------------------------------------------------- main
def run_command(
    parser: Parser,
    argv: list[str] | None,
    run: Callable[[argparse.Namespace], int],
    *,
    check_together: Callable[[argparse.Namespace], str | None] | None = None,
    out_of_memory: str | None = None,
) -> int:
    """Parse ``argv`` (``sys.argv[1:]`` when None), then ``run(args)``; return the exit
    status. ``check_together(args)``: a message for flags wrong together (exit 2), or None.
    ``out_of_memory``: the line for a MemoryError (exit 1); None lets it through. SIGTERM
    raises ``Terminated`` while it runs (on the main thread); the handler before comes back.
    """
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, raise_terminated) if on_main_thread else None
    try:
        try:
            args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        except SystemExit as done:  # --help (0) or a usage error (2), already printed
            return done.code if isinstance(done.code, int) else 2
        problem = check_together(args) if check_together is not None else None
        if problem:
            return error(parser, problem, 2)
        return run(args)
    except KeyboardInterrupt:
        return error(parser, "interrupted (Ctrl-C); nothing was written", 128 + signal.SIGINT)
    except Terminated:
        return error(parser, "stopped by SIGTERM; nothing was written", 128 + signal.SIGTERM)
    except MemoryError:
        if out_of_memory is None:
            raise
        return error(parser, out_of_memory, 1)
    except (MiniTransformerError, OSError) as err:
        return error(parser, " ".join(str(err).split()), 2)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def error(parser: argparse.ArgumentParser, message: str, status: int) -> int:
    """One line on stderr (and, for a mistake, the pointer to --help); return ``status``."""
    try:
        if status == 2:
            print(f"{parser.prog}: error: {message}\nsee: {parser.prog} --help", file=sys.stderr)
        else:
            print(f"{parser.prog}: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed or gone
        pass
    return status


__all__ = ["Parser", "bounded", "error", "kinds_flag", "out_dir", "run_command", "whole"]
