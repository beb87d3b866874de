"""``python -m minitransformer.tools.efficient_attention.cost``: what one attention layer costs,
full against blocked, local, strided and linear, from T = 256 to 16,384.

    python -m minitransformer.tools.efficient_attention.cost             # about 3 minutes
    python -m minitransformer.tools.efficient_attention.cost --max-length 4096 --out runs/c
    python -m minitransformer.tools.efficient_attention.cost --kinds full,local --causal

For each kind and length it times forward + backward of one op (one head, d = 64, float32,
CPU; measure.py says exactly what a step is and what the memory counts), fits how the time
and the memory grow with T (fit.py) and finds the length from which each kind is faster
than full attention. It prints the machine and the tables, and writes cost.json, cost.md
and plots/cost.png into --out (new or empty, or --overwrite; report.py).

From Python (a lesson):

    from minitransformer.tools.efficient_attention.cost import measure, summarize
    rows = measure(["full", "linear"], [256, 1024, 4096])
    summarize(rows)["linear"]   # time_exponent, memory_exponent, crossover, growth_4x

Exit status: 0 done; 2 a bad flag, or an --out that cannot be used, before anything is
measured (one line ``PROG: error: ...`` and ``see: PROG --help``); 1 out of memory;
130 on Ctrl-C and 143 on SIGTERM, with one line.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from typing import Any

from ...backend import host
from ...runtime.runs.outputs import check_study_dir
from .command import Parser, bounded, kinds_flag, out_dir, run_command, whole
from .fit import crossover, fit_exponent, growth, summarize
from .measure import (
    BLOCK_SIZE,
    KINDS,
    MAX_HEAD_SIZE,
    MAX_LENGTH,
    MAX_REPEATS,
    full_attention_bytes,
    measure,
)
from .report import REPLACED, make_record, markdown, plot, write

PROG = "python -m minitransformer.tools.efficient_attention.cost"
DEFAULT_LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384)
MIN_LENGTH = 16
DESCRIPTION = (
    "Time and peak memory of one attention layer's forward + backward (one head, float32, "
    "CPU) for full, blocked, local, strided and linear attention at T = 256 ... 16,384; how "
    "fast each grows (the fitted exponent) and the length from which each is faster than "
    "full attention. Prints the machine and the tables; writes cost.json, cost.md and "
    "plots/cost.png into --out. About 3 minutes on a 2-core CPU with the defaults."
)
MEMORY_LIMIT_GIB = 8.0  # full attention at 16,384 needs about 4 GiB; 32,768 about 16


def machine_gib() -> float | None:
    """This machine's memory in GiB (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


# ----------------------------------------------------------------------------- the flags
def lengths(text: str) -> list[int]:
    """--lengths: comma-separated different whole numbers 16..65,536, at most 20."""
    what = f"lengths as whole numbers in {MIN_LENGTH}..{MAX_LENGTH}, e.g. 256,1024,4096"
    values = [whole(part, MIN_LENGTH, MAX_LENGTH, what) for part in text.split(",")]
    if len(set(values)) != len(values) or len(values) > 20:
        raise argparse.ArgumentTypeError(f"expected 1 to 20 different lengths, got {text!r}")
    return sorted(values)


def max_length(text: str) -> list[int]:
    """--max-length: the lengths 256, 512, ... doubling up to this one (256..65,536)."""
    longest = whole(text, 256, MAX_LENGTH, f"a length in 256..{MAX_LENGTH}, e.g. 4096")
    return [n for n in (256 * 2**i for i in range(9)) if n <= longest]


def memory_limit(text: str) -> float:
    """--memory-limit: GiB, above 0 and at most this machine's memory."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GiB, got {text!r}") from None
    total = machine_gib()
    if not 0 < value < float("inf") or (total is not None and value > total):
        most = f" and at most this machine's {total:.1f}" if total is not None else ""
        raise argparse.ArgumentTypeError(f"expected a number of GiB above 0{most}, got {text}")
    return value


def build_parser() -> Parser:
    """The command's flags, each checked where it enters by its ``type=``."""
    parser = Parser(prog=PROG, description=DESCRIPTION)
    add = parser.add_argument
    add("--kinds", type=kinds_flag(KINDS), default=list(KINDS), metavar="A,B",
        help=f"the kinds to measure (default {','.join(KINDS)})")  # fmt: skip
    add("--lengths", type=lengths, metavar="T,...",
        help="the sequence lengths T = S (default 256,512,...,16384)")  # fmt: skip
    add("--max-length", type=max_length, metavar="T",
        help="measure 256, 512, ... doubling up to T (instead of --lengths)")  # fmt: skip
    add("--window", type=bounded(1, MAX_LENGTH, "64"), default=64, metavar="W",
        help="local attention's window: keys within W of the query (default 64)")  # fmt: skip
    add("--stride", type=bounded(1, MAX_LENGTH, "128"), metavar="S",
        help="strided attention's stride (default round(sqrt(T)) at each T, Child et al.'s "
        "choice, which makes its time grow as T^1.5)")  # fmt: skip
    add("--causal", action="store_true", help="measure every kind causal (default: not)")
    add("--head-size", type=bounded(1, MAX_HEAD_SIZE, "64"), default=64, metavar="D",
        help="d, the size of a query, key and value (default 64)")  # fmt: skip
    add("--repeats", type=bounded(1, MAX_REPEATS, "3"), default=3, metavar="N",
        help="timed steps per kind and length, after one warm-up (default 3)")  # fmt: skip
    add("--threads", type=bounded(1, os.cpu_count() or 1, "1"), default=1, metavar="N",
        help="NumPy's BLAS threads while measuring (default 1: the algorithm's cost, not "
        "the machine's parallelism)")  # fmt: skip
    add("--memory-limit", type=memory_limit, default=MEMORY_LIMIT_GIB, metavar="GIB",
        help=f"refuse lengths at which full attention would need more than this many GiB "
        f"(default {MEMORY_LIMIT_GIB:g}; T = 16,384 needs about 4)")  # fmt: skip
    add("--out", type=out_dir, default="runs/attention-cost", metavar="DIR",
        help="the folder for cost.json, cost.md and plots/cost.png; new or empty unless "
        "--overwrite (default runs/attention-cost)")  # fmt: skip
    add("--overwrite", action="store_true", help="replace this tool's files in a non-empty --out")
    return parser


def check_together(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags taken together (a message in flag words), or None."""
    if args.lengths is not None and args.max_length is not None:
        return "give --lengths or --max-length, not both"
    chosen = args.lengths or args.max_length or list(DEFAULT_LENGTHS)
    flag = "--lengths" if args.lengths else "--max-length"
    limit = args.memory_limit * 2**30
    over = [n for n in chosen if full_attention_bytes(n, args.causal) > limit]
    if "full" in args.kinds and over:
        fits = [n for n in chosen if n not in over]
        total = machine_gib()
        has = f" (this machine has {total:.0f} GiB)" if total is not None else ""
        return (
            f"{flag}: full attention at T = {over[0]:,} needs about "
            f"{full_attention_bytes(over[0], args.causal) / 2**30:.1f} GiB (four T x T float32 "
            f"arrays), over --memory-limit {args.memory_limit:g}. Fix: "
            + (f"--max-length {max(fits)}, " if fits else "shorter --lengths, ")
            + f"a larger --memory-limit{has}, or --kinds without full"
        )
    return None


# ----------------------------------------------------------------------------- the command
def machine() -> tuple[dict[str, Any], str]:
    """The machine's facts (``host.hardware`` and ``host.blas_info``) and one line of them."""
    facts = {**host.hardware("cpu"), "blas": host.blas_info().get("blas")}
    line = (f"Machine: {facts['processor']}, {facts['cpu_count']} CPUs; NumPy {facts['numpy']} "
            f"({facts['blas']}), Python {facts['python']}.")  # fmt: skip
    return facts, line


def run(args: argparse.Namespace) -> int:
    """Check --out, measure, print the tables, write the files; return 0."""
    chosen = args.lengths or args.max_length or list(DEFAULT_LENGTHS)
    check_study_dir(args.out, args.overwrite, REPLACED)  # before minutes of measuring, not after
    facts, line = machine()
    threads_set = host.openblas_threads_api() is not None
    facts["blas_threads"] = args.threads if threads_set else host.blas_threads()
    line = line[:-1] + (f", {args.threads} BLAS thread(s) (--threads)." if threads_set
                        else "; its BLAS threads could not be set (not OpenBLAS).")  # fmt: skip
    load_start = os.getloadavg()[0]
    print(line, flush=True)
    print(f"Measuring {', '.join(args.kinds)} at T = {', '.join(f'{n:,}' for n in chosen)} "
          f"({args.repeats} timed steps each, after a warm-up) ...", flush=True)  # fmt: skip
    started = time.perf_counter()
    rows = measure(
        args.kinds, chosen, d=args.head_size, window=args.window, stride=args.stride,
        causal=args.causal, repeats=args.repeats, threads=args.threads,
        memory_limit_gib=args.memory_limit, log=lambda text: print(text, file=sys.stderr,
                                                                   flush=True),
    )  # fmt: skip
    wall = time.perf_counter() - started
    settings = dict(kinds=args.kinds, lengths=chosen, d=args.head_size, window=args.window,
                    stride=args.stride, causal=args.causal, repeats=args.repeats,
                    threads=args.threads, block_size=BLOCK_SIZE, dtype="float32",
                    memory_limit_gib=args.memory_limit)  # fmt: skip
    record = make_record(rows, settings, facts, line, [load_start, os.getloadavg()[0]],
                         wall, datetime.date.today().isoformat())  # fmt: skip
    print(markdown(record), flush=True)
    paths = write(record, args.out, overwrite=args.overwrite)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (see the module doc)."""
    return run_command(
        build_parser(),
        argv,
        run,
        check_together=check_together,
        out_of_memory="out of memory while measuring. Fix: a smaller --max-length or "
        "--memory-limit, or fewer --kinds",
    )


__all__ = ["DEFAULT_LENGTHS", "KINDS", "build_parser", "crossover", "fit_exponent", "growth",
           "main", "measure", "plot", "summarize"]  # fmt: skip

if __name__ == "__main__":
    sys.exit(main())
