"""The command line's parser: one sub-parser per command, each flag with its type (flags.py)
and its default in its help.

``build_parser()`` is what ``main`` parses with; tests build it to inspect parsed values.
The ``bench`` flags come from tools/bench/options.py, shared with
``python -m minitransformer.tools.bench``.

A mistake on the command line is one line, ``minitransformer CMD: error: ...``, and a pointer
to ``minitransformer CMD --help`` (``Parser.error``; ``usage_error`` for the library's
errors), not argparse's usage block with the error at its end. A misspelled flag, command or
choice gets a "did you mean" when one is close (Python 3.11's argparse has no
``suggest_on_error``).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
from typing import Any

from ..config import TASK_DEFAULTS, TrainConfig
from ..config.model import PRESETS
from ..errors import install_hint
from ..tools.ablate import AblationSettings
from ..tools.bench import options as bench_options
from ..tools.explorer import command as explorer_command
from ..tools.scaling import command as scaling_command
from . import flags


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and a pointer to ``--help`` (its
    sub-parsers are Parsers too: argparse makes them of the parent's class)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        """Print the one-line error and exit with status 2 (argparse's contract)."""
        raise SystemExit(usage_error(self, message))

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        """argparse's, but unknown arguments are the error of the command they were given to
        (``minitransformer train: error: ...``), with the flag they were likely meant as."""
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            where = subparser(self, getattr(namespace, "command", None) or "")
            known = [o for a in where._actions for o in a.option_strings if o.startswith("--")]
            typed = [e.split("=", 1)[0] for e in extras if e.startswith("--")]
            guesses = [g for t in typed for g in _close(t, known)]
            where.error(f"unrecognized arguments: {' '.join(extras)}" + _did_you_mean(guesses))
        return namespace

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """An invalid choice (a command, a task) says the choice it was likely meant as."""
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(map(repr, action.choices))
            named = [c for c in action.choices if isinstance(c, str)]
            raise argparse.ArgumentError(
                action,
                f"invalid choice: {value!r} (choose from {choices})"
                + _did_you_mean([repr(g) for g in _close(str(value), named)]),
            )


def _close(typed: str, known: list[str]) -> list[str]:
    """The one name of ``known`` that ``typed`` most likely misspells (another case, a
    letter swapped or missing), or none."""
    same_case = [k for k in known if k.lower() == typed.lower()]
    return same_case[:1] or difflib.get_close_matches(typed, known, n=1, cutoff=0.75)


def _did_you_mean(guesses: list[str]) -> str:
    return f"; did you mean {' or '.join(guesses)}?" if guesses else ""


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    """Print ``PROG: error: MESSAGE`` and ``see: PROG --help`` on stderr; return 2."""
    print(f"{parser.prog}: error: {message}\nsee: {parser.prog} --help", file=sys.stderr)
    return 2


def _default(field: str) -> Any:
    """TrainConfig's default for ``field``."""
    return {f.name: f.default for f in dataclasses.fields(TrainConfig)}[field]


def _per_task(field: str) -> str:
    """``default: copy, reverse, sort 3000; translate 4000; ...`` from TASK_DEFAULTS."""
    groups: dict[Any, list[str]] = {}
    for task, defaults in TASK_DEFAULTS.items():
        groups.setdefault(defaults[field], []).append(task)
    shown = {value: f"{value:g}" if isinstance(value, float) else str(value) for value in groups}
    if len(groups) == 1:
        return f"default: {next(iter(shown.values()))}"
    return "default: " + "; ".join(f"{shown[v]} for {', '.join(t)}" for v, t in groups.items())


REFERENCE_HELP = (
    "run the reference ops (the math in minitransformer/ops, as the lessons run it) instead "
    "of the fast tier's NumPy twins, which the commands use by default on the CPU (same "
    "numbers; python -m minitransformer.fast lists the twins)"
)


def build_parser() -> argparse.ArgumentParser:
    """The ``minitransformer`` parser: train, translate, generate, evaluate, plot, bench,
    ablate, scale, attention."""
    # --debug works before the command and after it (SUPPRESS: a sub-command's default
    # must not overwrite the value given before the command).
    debug = Parser(add_help=False)
    debug.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    debug.add_argument("--reference", action="store_true", default=argparse.SUPPRESS,
                       help=REFERENCE_HELP)  # fmt: skip
    parser = Parser(
        prog="minitransformer",
        description="The Transformer of 'Attention Is All You Need', from scratch on NumPy.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--reference", action="store_true", help=REFERENCE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_train(sub, debug)
    _add_translate_and_evaluate(sub, debug)
    _add_generate(sub, debug)
    pl = sub.add_parser(
        "plot", help="draw the curves of a run into RUN/plots", parents=[debug],
        description="Draw a run's training curves (loss, accuracy, BLEU, learning rate) from "
        "its metrics.jsonl, during training or after it.",
    )  # fmt: skip
    pl.add_argument(
        "--run", required=True, type=flags.path_text,
        help="the run directory (train's --out) whose metrics.jsonl is drawn",
    )  # fmt: skip
    pl.add_argument(
        "--to",
        type=flags.path_text,
        help="write the curves to this file (.png added when it has no suffix) or into this "
        "existing directory, instead of RUN/plots/curves.png",
    )
    bench = sub.add_parser("bench", help="time training steps (and PyTorch's)", parents=[debug])
    bench_options.add_arguments(bench)
    _add_ablate(sub, debug)
    scale = sub.add_parser(
        "scale", parents=[debug], help="fit a scaling law to the language model at several sizes"
    )
    scaling_command.add_arguments(scale)
    attention = sub.add_parser(
        "attention", parents=[debug], help="draw a translation's attention heads (HTML page, PNG)"
    )
    explorer_command.add_arguments(attention)
    return parser


def _add_train(sub: Any, debug: argparse.ArgumentParser) -> None:
    """The ``train`` sub-parser; every flag's help says its default (TrainConfig's, or the
    task's from TASK_DEFAULTS, read from there so the two never disagree)."""
    train = sub.add_parser(
        "train", help="train a model on a task", parents=[debug],
        usage="%(prog)s TASK [options]\n       %(prog)s --resume RUN [options]",
        description="Train a Transformer on a task; a run writes its checkpoint, metrics log, "
        "result card and plots into --out. A flag left out takes the task's default "
        "(minitransformer/config/train.py, TASK_DEFAULTS) or, with --resume, the run's own.",
    )  # fmt: skip
    train.add_argument(
        "task", nargs="?", choices=flags.TASKS, metavar="TASK",
        help=f"what to learn: {', '.join(flags.TASKS)}",
    )  # fmt: skip
    train.add_argument(
        "--preset", choices=("tiny", "small", "base", "big"),
        help=f"model size ({_per_task('preset')})",
    )  # fmt: skip
    train.add_argument(
        "--device",
        help=f"cpu, cuda or cuda:N (default: {_default('device')}); with --data-parallel, "
        "cuda gives each rank its own GPU (local rank mod GPUs)",
    )
    train.add_argument(
        "--steps", type=flags.positive_int, metavar="N",
        help=f"training steps ({_per_task('steps')})",
    )  # fmt: skip
    train.add_argument("--batch-size", type=flags.batch_size,
                       help=f"sentences a step ({_per_task('batch_size')})")  # fmt: skip
    train.add_argument(
        "--warmup", type=flags.positive_int,
        help=f"warm-up steps of the schedule ({_per_task('warmup')})",
    )  # fmt: skip
    train.add_argument(
        "--lr", type=flags.positive_float, help=f"peak learning rate ({_per_task('peak_lr')})"
    )
    train.add_argument(
        "--dropout", type=flags.probability, help="default: the preset's ("
        + ", ".join(f"{name} {p['dropout']:g}" for name, p in PRESETS.items()) + ")",
    )  # fmt: skip
    train.add_argument(
        "--label-smoothing", type=flags.probability,
        help="default: 0.1, the paper's (lm: 0, the plain cross-entropy)",
    )  # fmt: skip
    train.add_argument(
        "--clip-norm", type=flags.positive_float,
        help=f"gradient clipping (default: {_default('clip_norm'):g})",
    )  # fmt: skip
    train.add_argument("--seed", type=flags.non_negative_int, help=f"default: {_default('seed')}")
    train.add_argument("--out", type=flags.path_text, help="run directory (default: runs/TASK)")
    train.add_argument("--overwrite", action="store_true",
                       help="replace the run in --out (its files are deleted)")  # fmt: skip
    for flag, what in (
        ("--log-every", "steps between log lines"),
        ("--eval-every", "steps between validation evaluations"),
        ("--eval-samples", "validation sentences decoded each time"),
        ("--checkpoint-every", "steps between checkpoints"),
        ("--final-eval-samples", "test sentences at the end"),
        ("--average-last", "checkpoints whose mean is the final model, --average-every steps "
         "apart back from the last step (the paper's §6.1; 1: the last step's weights alone)"),
        ("--average-every", "steps between the checkpoints --average-last averages"),
    ):  # fmt: skip
        field = flag[2:].replace("-", "_")  # the TrainConfig field: its default in the help
        train.add_argument(flag, type=flags.positive_int, help=f"{what} (default: "
                           f"{_default(field)})")  # fmt: skip
    train.add_argument(
        "--model", metavar="KEY=VALUE", type=flags.model_override, action="append", default=[],
        help="override a model size or switch, e.g. --model d_model=32 --model N=1, or take "
        "a block's switches at once, --model block=llama (paper, gpt2 or llama; the keys given "
        f"beside it win) (default: the preset's); keys: {', '.join(flags.MODEL_KEYS)}, and "
        "tokenizer (lm)",
    )  # fmt: skip
    train.add_argument(
        "--knob", metavar="KEY=VALUE", type=flags.key_value, action="append", default=[],
        help="a task knob, e.g. --knob n_train=2000 --knob max_len=8 (default: the task's); "
        f"keys: {flags.knobs_text()}",
    )  # fmt: skip
    train.add_argument("--resume", metavar="RUN", type=flags.path_text,
                       help="continue the run in this directory")  # fmt: skip
    train.add_argument("--no-progress", action="store_true", help="plain log lines, no bar")
    train.add_argument(
        "--json", action="store_true",
        help="also print the result (task, steps, times, test metrics) as one JSON line on stdout",
    )  # fmt: skip
    train.add_argument("--no-plots", action="store_true", help="skip plots/*.png at the end")
    graph = train.add_mutually_exclusive_group()  # dest cuda_graph: None when neither is given
    graph.add_argument(
        "--cuda-graph", action="store_const", const=True, dest="cuda_graph",
        help="the default on a GPU: each batch shape's step captured once as a CUDA graph and "
        "replayed, one launch a step (fast/gpu/cuda_graph.py). Batches are padded to a few shapes: "
        "a batch's loss is an eager step's, but dropout draws its masks over the padded shape, so "
        "with dropout the run differs from an eager one. A step that cannot be replayed "
        "(--data-parallel, MT_CUDA_KERNELS=0, a failed capture, too many shapes or bytes) runs "
        "eagerly, said in one line and counted in the result card. Kept by --resume; on the CPU "
        "(no graphs there) an error",
    )  # fmt: skip
    graph.add_argument("--no-cuda-graph", action="store_const", const=False, dest="cuda_graph",
                       help="every step eagerly on a GPU; kept by --resume")  # fmt: skip
    train.add_argument(
        "--data-parallel", action="store_true",
        help="one model, the batch split across MPI ranks: mpiexec -n N minitransformer train "
        f"TASK --data-parallel (needs: {install_hint('mpi')})",
    )  # fmt: skip


def _add_translate_and_evaluate(sub: Any, debug: argparse.ArgumentParser) -> None:
    """The ``translate`` and ``evaluate`` sub-parsers (both read a checkpoint)."""
    tr = sub.add_parser(
        "translate", help="translate sentences with a trained or pretrained model",
        parents=[debug],
        description="Translate each sentence (the arguments, or stdin's lines) with a run of "
        "`minitransformer train` or a Marian (opus-mt) model; one translation a line.",
    )  # fmt: skip
    _add_model_source(tr)
    _add_decoding(tr)
    tr.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    tr.add_argument("sentences", nargs="*", type=flags.argv_text,
                    help="sentences (default: one per line on stdin)")  # fmt: skip

    ev = sub.add_parser(
        "evaluate", help="BLEU / exact match on the held-out split", parents=[debug],
        description="Score a model on its task's held-out split: it decodes each source "
        "sentence and compares with the reference (exact match; BLEU for translation).",
    )  # fmt: skip
    _add_model_source(ev)
    ev.add_argument("--split", choices=("valid", "test"), default="test", help="default: test")
    ev.add_argument(
        "--samples", type=flags.positive_int, help="only the first N sentences (default: all)"
    )
    _add_decoding(ev)
    ev.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    ev.add_argument(
        "--json", action="store_true",
        help="print the result as JSON (split, decoding, sentences, metrics) instead of a line",
    )  # fmt: skip


def _add_generate(sub: Any, debug: argparse.ArgumentParser) -> None:
    """The ``generate`` sub-parser (a language model's checkpoint continues text)."""
    gen = sub.add_parser(
        "generate", help="continue text with a language model (a run of: train lm)",
        parents=[debug],
        description="Continue each prompt with a language model trained by `minitransformer "
        "train lm`, one token at a time, until it ends the verse or --max-new-tokens; one text "
        "a line (the prompt and its continuation).",
    )  # fmt: skip
    gen.add_argument(
        "--checkpoint", type=flags.path_text, required=True,
        help="a run directory of train lm, or its checkpoint file",
    )  # fmt: skip
    gen.add_argument("prompts", nargs="*", type=flags.argv_text,
                     help='texts to continue (default: one from nothing, "")')  # fmt: skip
    gen.add_argument(
        "--temperature", type=flags.temperature, default=1.0,
        help="0 = greedy, 1 = the model's own distribution (default: 1.0); lower is safer",
    )  # fmt: skip
    gen.add_argument(
        "--top-k", type=flags.positive_int, metavar="K",
        help="sample among the K most likely tokens (default: all)",
    )  # fmt: skip
    gen.add_argument(
        "--max-new-tokens", type=flags.max_new_tokens, metavar="N",
        help="the most tokens to add (default: up to the model's positions)",
    )  # fmt: skip
    gen.add_argument(
        "--samples", type=flags.samples, default=1, metavar="N",
        help=f"continuations per prompt (default: 1); at most {flags.MAX_TEXTS:,} texts in "
        "all (prompts × samples), written a batch at a time",
    )  # fmt: skip
    gen.add_argument(
        "--seed", type=flags.seed,
        help="the draws, for the same texts again however they are batched (default: new ones)",
    )  # fmt: skip
    gen.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")


def _add_decoding(command: argparse.ArgumentParser) -> None:
    """--beam, --alpha and --max-len of translate and evaluate; --beam and --max-len left out
    take the model's defaults (Translator.defaults)."""
    command.add_argument(
        "--beam", type=flags.beam, metavar="K",
        help="beam size, at most the model's target vocabulary (default: a Marian folder's "
        "num_beams, 1 = greedy when it sets none; a checkpoint: 1)",
    )  # fmt: skip
    command.add_argument(
        "--alpha", type=flags.alpha, default=0.6,
        help="length penalty of beam search (default: 0.6, the paper's)",
    )  # fmt: skip
    command.add_argument(
        "--max-len", type=flags.max_len, metavar="N",
        help="the most tokens to generate for a sentence, at most the model's positions "
        "(default: a Marian folder's max_length - 1, 19 when it sets none, at most 512, the "
        "last one forced to be EOS when it sets forced_eos_token_id; a checkpoint: its max_len)",
    )  # fmt: skip


def _add_model_source(command: argparse.ArgumentParser) -> None:
    """--checkpoint RUN (a model trained here) or --pretrained DIR (a Marian folder)."""
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--checkpoint", type=flags.path_text, help="a run directory or checkpoint file"
    )
    source.add_argument(
        "--pretrained", type=flags.path_text, metavar="DIR",
        help="a Hugging Face Marian folder (opus-mt: config.json, model.safetensors, "
        "source.spm, target.spm, vocab.json), or a Hub id such as Helsinki-NLP/opus-mt-en-es, "
        f"downloaded once (needs: {install_hint('hf')})",
    )  # fmt: skip


def _add_ablate(sub: Any, debug: argparse.ArgumentParser) -> None:
    """The ``ablate`` sub-parser."""
    ab = sub.add_parser(
        "ablate", help="the paper's Table 3 at toy scale (vary one thing)", parents=[debug],
        description="The paper's Table 3 at toy scale: train the base model and variants that "
        "each change one thing (heads, key size, dropout, label smoothing, positions, ...; "
        "--list names them) on the toy translation, and write their scores as a table and a "
        "figure into --out.",
    )  # fmt: skip
    ab.add_argument(
        "--steps", type=flags.positive_int,
        help=f"training steps per variant (default: {AblationSettings().steps}; with --fast "
        f"{AblationSettings.fast().steps})",
    )  # fmt: skip
    ab.add_argument(
        "--seed", type=flags.non_negative_int, default=0,
        help="data, weights, batch order, dropout masks (default 0)",
    )  # fmt: skip
    ab.add_argument(
        "--out", default="runs/ablate", type=flags.path_text,
        help="where the table and figure go (default: %(default)s)",
    )  # fmt: skip
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
