"""The command line's parser: one sub-parser per command, each flag with its type (flags.py).

``build_parser()`` is what ``main`` parses with; tests build it to inspect parsed values.
The ``bench`` flags come from bench/options.py, shared with ``python -m minitransformer.bench``.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..bench import options as bench_options
from . import flags


def build_parser() -> argparse.ArgumentParser:
    """The ``minitransformer`` parser: train, translate, evaluate, plot, bench, ablate."""
    # --debug works before the command and after it (SUPPRESS: a sub-command's default
    # must not overwrite the value given before the command).
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    parser = argparse.ArgumentParser(
        prog="minitransformer",
        description="The Transformer of 'Attention Is All You Need', from scratch on NumPy.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_train(sub, debug)
    _add_translate_and_evaluate(sub, debug)
    pl = sub.add_parser("plot", help="draw the curves of a run into RUN/plots", parents=[debug])
    pl.add_argument("--run", required=True)
    pl.add_argument(
        "--to",
        help="write the curves to this file (.png added when it has no suffix) or into this "
        "existing directory, instead of RUN/plots/curves.png",
    )
    bench = sub.add_parser(
        "bench", help="time training steps (and PyTorch side by side)", parents=[debug]
    )
    bench_options.add_arguments(bench)
    _add_ablate(sub, debug)
    return parser


def _add_train(sub: Any, debug: argparse.ArgumentParser) -> None:
    """The ``train`` sub-parser."""
    train = sub.add_parser("train", help="train a model on a task", parents=[debug])
    train.add_argument("task", nargs="?", choices=flags.TASKS, help="what to learn")
    train.add_argument("--preset", choices=("tiny", "small", "base", "big"))
    train.add_argument("--device", help="cpu (default), cuda or cuda:N")
    train.add_argument("--steps", type=flags.positive_int)
    train.add_argument("--batch-size", type=flags.batch_size)
    train.add_argument("--warmup", type=flags.positive_int, help="warm-up steps of the schedule")
    train.add_argument("--lr", type=flags.positive_float, help="peak learning rate")
    train.add_argument("--dropout", type=flags.probability)
    train.add_argument("--label-smoothing", type=flags.probability, help="default 0.1")
    train.add_argument(
        "--clip-norm", type=flags.positive_float, help="gradient clipping (default 1)"
    )
    train.add_argument("--seed", type=flags.non_negative_int, help="default 0")
    train.add_argument("--out", help="run directory (default runs/TASK)")
    train.add_argument(
        "--overwrite", action="store_true", help="replace the run in --out (its files are deleted)"
    )
    train.add_argument("--log-every", type=flags.positive_int, help="default 50")
    train.add_argument("--eval-every", type=flags.positive_int, help="default 500")
    train.add_argument("--eval-samples", type=flags.positive_int, help="default 200")
    train.add_argument("--checkpoint-every", type=flags.positive_int, help="default 500")
    train.add_argument(
        "--final-eval-samples", type=flags.positive_int, help="test sentences at the end (1000)"
    )
    train.add_argument(
        "--model", metavar="KEY=VALUE", type=flags.model_override, action="append", default=[],
        help="override a model size, e.g. --model d_model=32 --model N=1",
    )  # fmt: skip
    train.add_argument(
        "--knob", metavar="KEY=VALUE", type=flags.key_value, action="append", default=[],
        help="a task knob, e.g. --knob n_train=2000 --knob max_len=8",
    )  # fmt: skip
    train.add_argument("--resume", metavar="RUN", help="continue the run in this directory")
    train.add_argument("--no-progress", action="store_true", help="plain log lines, no bar")
    train.add_argument("--no-plots", action="store_true", help="skip plots/*.png at the end")
    train.add_argument(
        "--data-parallel", action="store_true",
        help="one model, the batch split across MPI ranks: mpiexec -n N minitransformer train "
        "TASK --data-parallel (needs: pip install -e '.[mpi]')",
    )  # fmt: skip


def _add_translate_and_evaluate(sub: Any, debug: argparse.ArgumentParser) -> None:
    """The ``translate`` and ``evaluate`` sub-parsers (both read a checkpoint)."""
    tr = sub.add_parser(
        "translate", help="translate sentences with a trained checkpoint", parents=[debug]
    )
    tr.add_argument("--checkpoint", required=True, help="a run directory or checkpoint file")
    tr.add_argument("--beam", type=flags.positive_int, default=1, help="beam size (1 = greedy)")
    tr.add_argument("--alpha", type=flags.alpha, default=0.6, help="length penalty (beam search)")
    tr.add_argument("--device", default="cpu")
    tr.add_argument("sentences", nargs="*", help="sentences (default: one per line on stdin)")

    ev = sub.add_parser(
        "evaluate", help="BLEU / exact match on the held-out split", parents=[debug]
    )
    ev.add_argument("--checkpoint", required=True)
    ev.add_argument("--split", choices=("valid", "test"), default="test")
    ev.add_argument("--samples", type=flags.positive_int, help="only the first N sentences")
    ev.add_argument("--beam", type=flags.positive_int, default=1)
    ev.add_argument("--alpha", type=flags.alpha, default=0.6)
    ev.add_argument("--device", default="cpu")


def _add_ablate(sub: Any, debug: argparse.ArgumentParser) -> None:
    """The ``ablate`` sub-parser."""
    ab = sub.add_parser(
        "ablate", help="the paper's Table 3 at toy scale: vary one thing, train, measure",
        parents=[debug],
    )  # fmt: skip
    ab.add_argument("--steps", type=flags.positive_int, help="training steps per variant")
    ab.add_argument(
        "--seed", type=flags.non_negative_int, default=0,
        help="data, weights, batch order, dropout masks (default 0)",
    )  # fmt: skip
    ab.add_argument("--out", default="runs/ablate", help="where the table and figure go")
    ab.add_argument("--overwrite", action="store_true", help="replace a study in --out")
    ab.add_argument("--fast", action="store_true", help="a small study (about a minute)")
    ab.add_argument("--only", type=flags.name_list, metavar="NAME,...", help="these variants only")
    ab.add_argument("--list", action="store_true", help="list the variants and exit")
    ab.add_argument("--no-progress", action="store_true", help="plain lines, no bar")


def subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The sub-parser of ``command`` (for its usage line), else ``parser`` itself."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        if command in getattr(action, "choices", {}):
            return action.choices[command]
    return parser
