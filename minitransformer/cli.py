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
``--overwrite`` is given, and a run directory has one writer at a time (see runs.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import math
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

from .errors import ConfigError, MiniTransformerError, TrainingError

TASKS = ("copy", "reverse", "sort", "translate", "translate-en-es")


def _checked(convert: Any, ok: Any, expected: str) -> Any:
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


MAX_BATCH = 100_000  # sentences per batch; far above what fits in memory at any preset
MAX_KNOB = 10_000_000  # sentences or symbols a task knob may ask for

_positive_int = _checked(int, lambda v: v > 0, "a positive integer")
_non_negative_int = _checked(int, lambda v: v >= 0, "a non-negative integer")
_batch_size = _checked(int, lambda v: 0 < v <= MAX_BATCH, f"a positive integer <= {MAX_BATCH:,}")
_probability = _checked(float, lambda v: 0 <= v < 1, "a number in [0, 1)")
_positive_float = _checked(float, lambda v: 0 < v < math.inf, "a positive number (finite)")
_alpha = _checked(
    float, lambda v: 0 <= v < math.inf, "a finite number >= 0 (0 = no length penalty; paper 0.6)"
)
_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _bool_text(text: str) -> bool:
    """true/false, 1/0, yes/no (any case); anything else is an error, not True."""
    value = _BOOLS.get(text.strip().lower())
    if value is None:
        raise ValueError(f"expected true/false, 1/0 or yes/no, got {text!r}")
    return value


def _int_text(text: str) -> int:
    """A whole number written as one ("8", "-3"), not "8.5", "1e3" or "abc"."""
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"expected a whole number, got {text!r}") from None


def _model_override(text: str) -> tuple[str, Any]:
    """--model KEY=VALUE for a TransformerConfig field, converted to the field's type and
    range-checked here, before any task or model is built."""
    from .config import MAX_LEN, TransformerConfig

    key, value = _key_value(text)
    raw = text.partition("=")[2].strip()
    kinds = {f.name: str(f.type) for f in dataclasses.fields(TransformerConfig)}
    if key not in kinds:
        raise argparse.ArgumentTypeError(
            f"{text!r}: unknown key {key!r}; valid keys: {', '.join(sorted(kinds))}"
        )
    try:
        if kinds[key] == "bool":
            return key, _bool_text(raw)
        if kinds[key] == "int":
            value = _int_text(raw)
            low = 0 if key.endswith("_id") else 1
            if value < low:
                raise ValueError(f"{key} must be >= {low}, got {value}")
            if key == "max_len" and value > MAX_LEN:
                raise ValueError(
                    f"max_len {value:,} is above the cap of {MAX_LEN:,} positions; use a "
                    "little more than the longest sentence, e.g. max_len=256"
                )
            return key, value
        if kinds[key] == "float":
            value = float(raw)
            if not 0 <= value < 1:  # dropout, label_smoothing; NaN fails too
                raise ValueError(f"{key} must be a number in [0, 1), got {raw!r}")
            return key, value
        if key == "dtype" and raw not in ("float32", "float64"):
            raise ValueError(f"dtype must be float32 or float64, got {raw!r}")
        return key, raw
    except ValueError as err:
        message = str(err)
        if message.startswith("could not convert"):
            message = f"expected a number, got {raw!r}"
        raise argparse.ArgumentTypeError(f"{text!r}: {message}") from None


def _key_value(text: str) -> tuple[str, Any]:
    """KEY=VALUE with VALUE read as int, float, true/false/none, or else a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    low = raw.strip().lower()
    value: Any = {"true": True, "false": False, "none": None}.get(low, raw.strip())
    if isinstance(value, str):
        for kind in (int, float):
            try:
                value = kind(raw)
                break
            except ValueError:
                pass
    return key.strip().replace("-", "_"), value


def build_parser() -> argparse.ArgumentParser:
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

    train = sub.add_parser("train", help="train a model on a task", parents=[debug])
    train.add_argument("task", nargs="?", choices=TASKS, help="what to learn")
    train.add_argument("--preset", choices=("tiny", "small", "base", "big"))
    train.add_argument("--device", help="cpu (default), cuda or cuda:N")
    train.add_argument("--steps", type=_positive_int)
    train.add_argument("--batch-size", type=_batch_size)
    train.add_argument("--warmup", type=_positive_int, help="warm-up steps of the schedule")
    train.add_argument("--lr", type=_positive_float, help="peak learning rate")
    train.add_argument("--dropout", type=_probability)
    train.add_argument("--label-smoothing", type=_probability, help="default 0.1")
    train.add_argument("--clip-norm", type=_positive_float, help="gradient clipping (default 1)")
    train.add_argument("--seed", type=_non_negative_int, help="default 0")
    train.add_argument("--out", help="run directory (default runs/TASK)")
    train.add_argument(
        "--overwrite", action="store_true", help="replace the run in --out (its files are deleted)"
    )
    train.add_argument("--log-every", type=_positive_int, help="default 50")
    train.add_argument("--eval-every", type=_positive_int, help="default 500")
    train.add_argument("--eval-samples", type=_positive_int, help="default 200")
    train.add_argument("--checkpoint-every", type=_positive_int, help="default 500")
    train.add_argument(
        "--final-eval-samples", type=_positive_int, help="test sentences at the end (1000)"
    )
    train.add_argument(
        "--model", metavar="KEY=VALUE", type=_model_override, action="append", default=[],
        help="override a model size, e.g. --model d_model=32 --model N=1",
    )  # fmt: skip
    train.add_argument(
        "--knob", metavar="KEY=VALUE", type=_key_value, action="append", default=[],
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

    tr = sub.add_parser(
        "translate", help="translate sentences with a trained checkpoint", parents=[debug]
    )
    tr.add_argument("--checkpoint", required=True, help="a run directory or checkpoint .npz")
    tr.add_argument("--beam", type=_positive_int, default=1, help="beam size (1 = greedy)")
    tr.add_argument("--alpha", type=_alpha, default=0.6, help="length penalty (beam search)")
    tr.add_argument("--device", default="cpu")
    tr.add_argument("sentences", nargs="*", help="sentences (default: one per line on stdin)")

    ev = sub.add_parser(
        "evaluate", help="BLEU / exact match on the held-out split", parents=[debug]
    )
    ev.add_argument("--checkpoint", required=True)
    ev.add_argument("--split", choices=("valid", "test"), default="test")
    ev.add_argument("--samples", type=_positive_int, help="only the first N sentences")
    ev.add_argument("--beam", type=_positive_int, default=1)
    ev.add_argument("--alpha", type=_alpha, default=0.6)
    ev.add_argument("--device", default="cpu")

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
    bench.add_argument("--preset", action="append", choices=("tiny", "small", "base"))
    bench.add_argument("--compare", choices=("torch",))
    bench.add_argument("--device", default="cpu")
    bench.add_argument("--seconds", type=_positive_float, default=20.0, help="time per preset")
    bench.add_argument("--json", help="also write the results to this file")
    bench.add_argument(
        "--data-parallel", metavar="N", type=_positive_int,
        help="tokens/s of 1 and N MPI ranks (one BLAS thread each) against one process",
    )  # fmt: skip
    _add_ablate(sub, debug)
    return parser


def _names(text: str) -> list[str]:
    """NAME,NAME,... -> the names (none empty)."""
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"expected NAME,NAME,... without empty names, got {text!r}"
        )
    return names


def _add_ablate(sub: Any, debug: argparse.ArgumentParser) -> None:
    ab = sub.add_parser(
        "ablate", help="the paper's Table 3 at toy scale: vary one thing, train, measure",
        parents=[debug],
    )  # fmt: skip
    ab.add_argument("--steps", type=_positive_int, help="training steps per variant")
    ab.add_argument(
        "--seed", type=_checked(int, lambda v: v >= 0, "an integer >= 0"), default=0,
        help="data, weights, batch order, dropout masks (default 0)",
    )  # fmt: skip
    ab.add_argument("--out", default="runs/ablate", help="where the table and figure go")
    ab.add_argument("--overwrite", action="store_true", help="replace a study in --out")
    ab.add_argument("--fast", action="store_true", help="a small study (about a minute)")
    ab.add_argument("--only", type=_names, metavar="NAME,...", help="these variants only")
    ab.add_argument("--list", action="store_true", help="list the variants and exit")
    ab.add_argument("--no-progress", action="store_true", help="plain lines, no bar")


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
    from . import backend

    backend.tune_host()  # the CLI owns its process: allocator and BLAS-thread tuning
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
        _subparser(parser, args.command).print_usage(sys.stderr)
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


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        if command in getattr(action, "choices", {}):
            return action.choices[command]
    return parser


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
        if args.data_parallel:
            from .bench import data_parallel_main

            return data_parallel_main(args)
        from .bench import main as bench_main

        if args.json:
            _json_target("--json", args.json)
        return bench_main(args)
    if args.command == "ablate":
        return _ablate(args)
    raise AssertionError(args.command)


# train options -> TrainConfig fields (None: not given on the command line)
_TRAIN_FIELDS = {
    "preset": "preset", "steps": "steps", "batch_size": "batch_size", "warmup": "warmup",
    "lr": "peak_lr", "dropout": "dropout", "label_smoothing": "label_smoothing",
    "clip_norm": "clip_norm", "seed": "seed", "device": "device", "out": "out",
    "log_every": "log_every", "eval_every": "eval_every", "eval_samples": "eval_samples",
    "checkpoint_every": "checkpoint_every", "final_eval_samples": "final_eval_samples",
}  # fmt: skip


def _train(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .train import TrainConfig, Trainer

    world = None
    if args.data_parallel:
        from . import backend, distributed

        world = distributed.World.from_mpi()
        backend.set_blas_threads(distributed.blas_threads_per_rank(distributed.local_size(world)))

    given = {
        field: getattr(args, name)
        for name, field in _TRAIN_FIELDS.items()
        if getattr(args, name) is not None
    }
    given["progress"] = not args.no_progress
    if args.no_plots:
        given["plots"] = False
    if args.model:
        given["model_overrides"] = dict(args.model)
    if args.knob:
        given["task_knobs"] = dict(args.knob)
        if args.task is not None:
            given["task_knobs"] = _checked_knobs(args.task, args.knob)
    if args.resume:
        run = _checkpoint_path("--resume", args.resume)
        if args.task is not None:
            given["task"] = args.task
        trainer = Trainer.resume(run, **given)
        if trainer.step >= trainer.cfg.steps:
            print(
                f"the run is already at step {trainer.step} of {trainer.cfg.steps}; pass "
                "--steps N to train longer (re-running the final evaluation now)",
                file=sys.stderr,
            )
    else:
        if args.task is None:
            _subparser(parser, "train").error("train needs a TASK (or --resume RUN)")
        given.setdefault("out", f"runs/{args.task}")
        trainer = Trainer(TrainConfig(task=args.task, **given))
    if world is not None:
        world.attach(trainer)
    if world is None or world.is_writer:
        print(trainer.task.summary(), file=sys.stderr)
        print(
            f"model: {trainer.model.extra_repr()}, {trainer.model.num_parameters():,} "
            f"parameters, device {trainer.cfg.device}"
            + (f", resuming at step {trainer.step}" if args.resume else "")
            + (f", data-parallel over {world.size} ranks" if world is not None else ""),
            file=sys.stderr,
            flush=True,
        )
    result = trainer.train(overwrite=args.overwrite)
    if result.get("interrupted"):
        return 128 + (signal.SIGTERM if result.get("signal") == "SIGTERM" else signal.SIGINT)
    if world is not None and not world.is_writer:
        return 0
    print(json.dumps({k: result[k] for k in ("task", "steps", "wall_time_s", "metrics")}))
    print(f"result card: {trainer.out / 'result.json'}; plots: {trainer.out / 'plots'}")
    return 0


def _checked_knobs(task: str, knobs: list[tuple[str, Any]]) -> dict[str, Any]:
    """--knob values converted to the type of the task's default for that knob (int or
    bool) and range-checked; an unknown knob is left for make_task to name."""
    from .data import tasks

    fn = tasks.TASKS[task]
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        fn = tasks._sequence_task  # copy/reverse/sort pass their knobs through to it
        params = inspect.signature(fn).parameters
    out = {}
    for key, value in knobs:
        p = params.get(key)
        if p is None or key in ("name", "seed"):
            out[key] = value
            continue
        shown = f"--knob {key}={value}"
        if isinstance(p.default, bool):
            text = str(value).lower()
            if text not in _BOOLS:
                raise ConfigError(f"{shown}: expected true/false, 1/0 or yes/no")
            out[key] = _BOOLS[text]
            continue
        low = 0 if key.endswith("seed") else 1
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{shown}: expected a whole number >= {low}, e.g. {key}=100")
        if not low <= value <= MAX_KNOB:
            raise ConfigError(
                f"{shown}: expected a whole number in [{low}, {MAX_KNOB:,}], e.g. {key}=100"
            )
        out[key] = value
    return out


def _ablate(args: argparse.Namespace) -> int:
    from . import ablate

    settings = ablate.AblationSettings.fast() if args.fast else ablate.AblationSettings()
    if args.steps is not None:
        settings.steps = args.steps
        settings.warmup = min(settings.warmup, args.steps)
    settings.seed = args.seed
    settings.validate()
    chosen = ablate.select(args.only, settings)
    if args.list:
        for v in ablate.select([v.name for v in ablate.variants()], settings):
            print(f"{v.name:22s}{v.change}")
        return 0
    ablate.check_out(args.out, args.overwrite)  # before minutes of training, not after
    study = ablate.run_ablations(settings, chosen, progress=not args.no_progress)
    paths = ablate.write_study(study, args.out, overwrite=args.overwrite)
    print(ablate.markdown_table(study))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _checkpoint_path(flag: str, text: str) -> Path:
    """A run directory or a checkpoint file given on the command line, checked for the
    mistakes a user makes (a typo, a run that has not saved yet) before anything loads."""
    path = Path(text)
    if not path.exists():
        raise FileNotFoundError(f"{flag} {text}: no such run directory or checkpoint file")
    if path.is_dir() and not (path / "checkpoint.npz").exists():
        raise FileNotFoundError(
            f"{flag} {text}: this directory holds no checkpoint.npz (is it the --out "
            "directory of `minitransformer train`, and did the run save a checkpoint?)"
        )
    return path


def _sentences(args: argparse.Namespace) -> list[str]:
    """The sentences to translate: the arguments, else one per line on stdin."""
    if args.sentences:
        return list(args.sentences)
    if hasattr(sys.stdin, "reconfigure"):
        sys.stdin.reconfigure(errors="replace")  # undecodable bytes become U+FFFD (-> UNK)
    if sys.stdin.isatty():
        print("reading sentences from stdin, one per line (Ctrl-D ends)", file=sys.stderr)
    return [line.rstrip("\r\n") for line in sys.stdin]


def _translate(args: argparse.Namespace) -> int:
    from .translator import Translator

    path = _checkpoint_path("--checkpoint", args.checkpoint)
    translator = Translator.from_checkpoint(path, device=args.device)
    sentences = _sentences(args)
    for line in translator.translate(sentences, beam_size=args.beam, alpha=args.alpha):
        print(line)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from .translator import Translator

    path = _checkpoint_path("--checkpoint", args.checkpoint)
    translator = Translator.from_checkpoint(path, device=args.device)
    metrics = translator.evaluate(args.split, args.samples, beam_size=args.beam, alpha=args.alpha)
    print(json.dumps(metrics, indent=2))
    return 0


def _plot(args: argparse.Namespace) -> int:
    from . import viz

    run = Path(args.run)
    log = run / "metrics.jsonl"
    if not log.exists():
        raise FileNotFoundError(f"--run {run}: no metrics.jsonl there (is it a run directory?)")
    target = _plot_target(Path(args.to)) if args.to else run / "plots" / "curves.png"
    viz.plot_training_curves(log, path=target)
    print(f"wrote {target}")
    return 0


def _plot_target(to: Path) -> Path:
    """The file --to names: DIR/curves.png for an existing directory, TO.png for a name
    without a suffix (what matplotlib would write), TO itself for .png/.pdf/.svg."""
    if to.is_dir():
        return to / "curves.png"
    if to.suffix == "":
        return to.with_name(to.name + ".png")
    if to.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ConfigError(f"--to {to}: unknown image suffix {to.suffix!r}; use .png, .pdf or .svg")
    if to.parent.exists() and not to.parent.is_dir():
        raise ConfigError(f"--to {to}: {to.parent} is a file, not a directory")
    return to


def _json_target(flag: str, text: str) -> None:
    """Refuse a --json path that cannot be written, before the work that fills it."""
    path = Path(text)
    if path.is_dir():
        raise ConfigError(f"{flag} {text}: is a directory; name a file, e.g. {path / 'bench.json'}")
    if not path.parent.is_dir():
        raise ConfigError(
            f"{flag} {text}: the directory {path.parent} does not exist; create it first"
        )


if __name__ == "__main__":
    sys.exit(main())
