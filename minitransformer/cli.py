"""Command line: ``minitransformer`` or ``python -m minitransformer``.

    minitransformer train copy                      # the README's main job
    minitransformer train translate --steps 4000 --out runs/translate
    minitransformer train --resume runs/translate   # continue after Ctrl-C or a crash
    minitransformer translate --checkpoint runs/translate "the small dog sees a cat"
    minitransformer evaluate --checkpoint runs/translate --beam 4
    minitransformer plot --run runs/translate
    minitransformer bench --compare torch

A user's mistake (unknown task, bad value, unreadable file) ends with exit status 2, a
one-line reason and the usage; a traceback only with ``--debug``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import MiniTransformerError

TASKS = ("copy", "reverse", "sort", "translate", "translate-en-es")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minitransformer",
        description="The Transformer of 'Attention Is All You Need', from scratch on NumPy.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = sub.add_parser("train", help="train a model on a task")
    train.add_argument("task", nargs="?", choices=TASKS, help="what to learn")
    train.add_argument("--preset", choices=("tiny", "small", "base", "big"))
    train.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    train.add_argument("--steps", type=_positive_int)
    train.add_argument("--batch-size", type=_positive_int)
    train.add_argument("--warmup", type=_positive_int, help="warm-up steps of the schedule")
    train.add_argument("--lr", type=_positive_float, help="peak learning rate")
    train.add_argument("--dropout", type=_probability)
    train.add_argument("--label-smoothing", type=_probability, default=0.1)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--out", help="run directory (default runs/TASK)")
    train.add_argument("--eval-every", type=_positive_int, default=500)
    train.add_argument("--checkpoint-every", type=_positive_int, default=500)
    train.add_argument("--resume", metavar="RUN", help="continue the run in this directory")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")

    tr = sub.add_parser("translate", help="translate sentences with a trained checkpoint")
    tr.add_argument("--checkpoint", required=True, help="a run directory or checkpoint .npz")
    tr.add_argument("--beam", type=_positive_int, default=1, help="beam size (1 = greedy)")
    tr.add_argument("--alpha", type=float, default=0.6, help="length penalty (beam search)")
    tr.add_argument("--device", default="cpu")
    tr.add_argument("sentences", nargs="*", help="sentences (default: one per line on stdin)")

    ev = sub.add_parser("evaluate", help="BLEU / exact match on the held-out split")
    ev.add_argument("--checkpoint", required=True)
    ev.add_argument("--split", choices=("valid", "test"), default="test")
    ev.add_argument("--samples", type=_positive_int, help="only the first N sentences")
    ev.add_argument("--beam", type=_positive_int, default=1)
    ev.add_argument("--alpha", type=float, default=0.6)
    ev.add_argument("--device", default="cpu")

    pl = sub.add_parser("plot", help="draw the curves of a run into RUN/plots")
    pl.add_argument("--run", required=True)

    bench = sub.add_parser("bench", help="time training steps (and PyTorch side by side)")
    bench.add_argument("--preset", action="append", choices=("tiny", "small", "base"))
    bench.add_argument("--compare", choices=("torch",))
    bench.add_argument("--device", default="cpu")
    bench.add_argument("--seconds", type=_positive_float, default=20.0, help="time per preset")
    bench.add_argument("--json", help="also write the results to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return _run(args, parser)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (MiniTransformerError, OSError, ValueError) as err:
        if args.debug:
            raise
        parser.print_usage(sys.stderr)
        print(f"minitransformer: error: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from . import backend

    if getattr(args, "device", None):
        backend.normalize_device(args.device)  # a clear error for a bad name
        if args.device != "cpu":
            backend.namespace_for_device(args.device)  # ... and for a missing GPU
    if args.command == "train":
        return _train(args, parser)
    if args.command == "translate":
        return _translate(args)
    if args.command == "evaluate":
        return _evaluate(args)
    if args.command == "plot":
        return _plot(args)
    if args.command == "bench":
        from .bench import main as bench_main

        return bench_main(args)
    raise AssertionError(args.command)


def _train(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .train import TrainConfig, Trainer

    if args.resume:
        run = Path(args.resume)
        if not run.exists():
            raise FileNotFoundError(f"--resume {run}: no such run directory or checkpoint")
        changes = {"progress": not args.no_progress}
        if args.steps:
            changes["steps"] = args.steps
        trainer = Trainer.resume(run, **changes)
    else:
        if args.task is None:
            parser.error("train needs a TASK (or --resume RUN)")
        cfg = TrainConfig(
            task=args.task,
            preset=args.preset,
            steps=args.steps,
            batch_size=args.batch_size,
            warmup=args.warmup,
            peak_lr=args.lr,
            dropout=args.dropout,
            label_smoothing=args.label_smoothing,
            seed=args.seed,
            device=args.device,
            out=args.out or f"runs/{args.task}",
            eval_every=args.eval_every,
            checkpoint_every=args.checkpoint_every,
            progress=not args.no_progress,
        )
        trainer = Trainer(cfg)
    print(trainer.task.summary(), file=sys.stderr)
    print(
        f"model: {trainer.model.extra_repr()}, {trainer.model.num_parameters():,} parameters,"
        f" device {trainer.cfg.device}",
        file=sys.stderr,
    )
    result = trainer.train()
    if result.get("interrupted"):
        return 130
    print(json.dumps({k: result[k] for k in ("task", "steps", "wall_time_s", "metrics")}))
    print(f"result card: {trainer.out / 'result.json'}; plots: {trainer.out / 'plots'}")
    return 0


def _translate(args: argparse.Namespace) -> int:
    from .translator import Translator

    translator = Translator.from_checkpoint(args.checkpoint, device=args.device)
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    for line in translator.translate(sentences, beam_size=args.beam, alpha=args.alpha):
        print(line)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from .translator import Translator

    translator = Translator.from_checkpoint(args.checkpoint, device=args.device)
    metrics = translator.evaluate(args.split, args.samples, beam_size=args.beam, alpha=args.alpha)
    print(json.dumps(metrics, indent=2))
    return 0


def _plot(args: argparse.Namespace) -> int:
    from . import viz

    run = Path(args.run)
    log = run / "metrics.jsonl"
    if not log.exists():
        raise FileNotFoundError(f"--run {run}: no metrics.jsonl there (is it a run directory?)")
    path = viz.plot_training_curves(log, path=run / "plots" / "curves.png")
    del path
    print(f"wrote {run / 'plots' / 'curves.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
