"""The ``scale`` command: the scaling study, its table printed, its files written to --out.

    minitransformer scale                            # 5 sizes × 2 seeds, 1M tokens each
    minitransformer scale --fast --out runs/scale-fast
    minitransformer scale --sizes 16x1,32x2,64x2 --tokens 300000 --seeds 0,1,2

``add_arguments(parser)`` declares the flags on a parser (the CLI's ``scale`` sub-parser);
``run(args)`` runs the study and returns the exit status. Every flag's value is checked
where it enters, by its argparse ``type=``: a bad value is a usage error naming the flag,
what was expected and what was given, before anything is trained; --out is checked before
the first step too (report.check_out).
"""

from __future__ import annotations

import argparse
from typing import Any

from .fit import fit_study
from .report import check_out, markdown_table, write_study
from .study import MAX_TOKENS, ScalingSettings, Size, run_study

DESCRIPTION = (
    "Train the decoder-only language model at several sizes on one token budget (every size "
    "reads the same batches), on the English verses at the character level, and fit power "
    "laws L = a·N^(−α) to the validation loss against the non-embedding parameters N and "
    "against compute C = 6·N·tokens, once per seed. Writes scaling.md (the table and the "
    "exponents with their spread over the seeds), scaling.json and plots/scaling.png into "
    "--out. The default study (5 sizes, 2 seeds, 1,000,000 tokens each) takes about 5 "
    "minutes on a 2-core CPU; --fast about one."
)


def _whole(text: str, low: int, high: int, expected: str) -> int:
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
    return value


def tokens(text: str) -> int:
    """--tokens: a whole number of tokens, 1 .. 10^9 (``1000000`` or ``1_000_000``)."""
    return _whole(text, 1, MAX_TOKENS, f"a whole number of tokens in 1..{MAX_TOKENS:,}")


def seeds(text: str) -> tuple[int, ...]:
    """--seeds: comma-separated distinct whole numbers >= 0, at most 10 (``0,1``)."""
    expected = "comma-separated seeds, each a whole number >= 0, e.g. 0,1"
    values = tuple(_whole(p, 0, 2**32 - 1, expected) for p in text.split(","))
    if len(set(values)) != len(values) or len(values) > 10:
        raise argparse.ArgumentTypeError(f"expected 1 to 10 different seeds, got {text!r}")
    return values


def sizes(text: str) -> tuple[Size, ...]:
    """--sizes: comma-separated DxL (d_model x layers; heads d_model/16, at least 1), e.g.
    ``16x1,32x1,64x2``; d_model 4..1024, layers 1..12, 3 to 20 sizes, none twice."""
    out = []
    for part in text.split(","):
        d, sep, layers = part.strip().lower().partition("x")
        if not sep:
            raise argparse.ArgumentTypeError(
                f"expected sizes as DxL (d_model x layers), e.g. 16x1,32x1,64x2; got {part!r}"
            )
        size = Size(_whole(d, 4, 1024, "a d_model in 4..1024"),
                    _whole(layers, 1, 12, "a number of layers in 1..12"))  # fmt: skip
        heads = size.fields()["h"]
        if size.d_model % heads:
            raise argparse.ArgumentTypeError(
                f"d_model {size.d_model} in {part!r}: its {heads} heads (d_model // 16) "
                "do not divide it; give a d_model below 32 or a multiple of 16"
            )
        out.append(size)
    if len({s.name for s in out}) != len(out) or not 3 <= len(out) <= 20:
        raise argparse.ArgumentTypeError(
            f"expected 3 to 20 different sizes (a power law through fewer points tests "
            f"nothing), got {text!r}"
        )
    return tuple(out)


def out_dir(text: str) -> str:
    """--out: a folder name, not empty or blank (an empty name would be the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a folder name, got {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``scale`` flags to ``parser`` and describe the command in its ``--help``;
    return it."""
    parser.description = DESCRIPTION
    parser.add_argument("--out", type=out_dir, default="runs/scale", metavar="DIR",
                        help="the folder for the table, JSON and figure; must be empty or new "
                        "unless --overwrite (default runs/scale)")  # fmt: skip
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a non-empty --out, replacing the study's files there",
    )
    parser.add_argument("--seeds", type=seeds, metavar="S,...",
                        help="the seeds (weights and batch order); each trains every size, and "
                        "the exponents' spread is over them (default 0,1)")  # fmt: skip
    parser.add_argument("--tokens", type=tokens, metavar="N",
                        help="the token budget every size trains on (default 1,000,000; "
                        "--fast 400,000)")  # fmt: skip
    parser.add_argument("--sizes", type=sizes, metavar="DxL,...",
                        help="the model sizes, d_model x layers (default 16x1,32x1,48x2,64x3,"
                        "96x3; --fast the first four)")  # fmt: skip
    parser.add_argument(
        "--fast",
        action="store_true",
        help="a small study: 4 sizes, 400,000 tokens (about a minute)",
    )
    parser.add_argument("--no-progress", action="store_true", help="plain lines, no bar")
    return parser


def settings_from(args: argparse.Namespace) -> ScalingSettings:
    """The study's settings from the parsed flags (validated)."""
    changes: dict[str, Any] = {}
    for name in ("seeds", "tokens", "sizes"):
        if getattr(args, name, None) is not None:
            changes[name] = getattr(args, name)
    base = ScalingSettings.fast() if getattr(args, "fast", False) else ScalingSettings()
    for name, value in changes.items():
        setattr(base, name, value)
    return base.validate()


def run(args: argparse.Namespace) -> int:
    """The ``scale`` command: check --out, run the study, print its table, write its files
    into --out; return 0. Library errors (ConfigError, RunDirectoryError) propagate."""
    settings = settings_from(args)
    check_out(args.out, args.overwrite)  # before minutes of training, not after
    study = run_study(settings, progress=True, bar=not args.no_progress)
    fits = fit_study(study)
    paths = write_study(study, args.out, overwrite=args.overwrite, fits=fits)
    print(markdown_table(study, fits))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


__all__ = ["DESCRIPTION", "add_arguments", "out_dir", "run", "seeds", "settings_from", "sizes",
           "tokens"]  # fmt: skip
