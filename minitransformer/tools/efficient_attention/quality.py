"""``python -m minitransformer.tools.efficient_attention.quality``: what each attention kind
costs in quality, full against local, strided and linear at equal steps on a task that
needs long context.

    python -m minitransformer.tools.efficient_attention.quality          # 4 kinds × 2 seeds
    python -m minitransformer.tools.efficient_attention.quality --kinds full,local --seeds 0
    python -m minitransformer.tools.efficient_attention.quality --steps 300 --out runs/q

The task is recall.py's: facts stored at random positions far back in a sequence of T = 512
tokens, questions about them at the end; a window of 32 cannot see the fact it is asked
about, so the answers score what a kind can carry over a long distance. Every kind trains
the same model (the decoder-only TransformerLM; only its self-attention differs:
``TransformerConfig(attention=..., attention_window=...)``) for the same steps on the same
batches (a seed sets the weights and the batches; every kind of a seed reads the same ones),
with the library's Trainer step (forward, the loss at the answers, backward, clip, Adam with
the warm-up schedule), then answers the same held-out sequences. It prints a table (per
kind: accuracy and loss at the answers, mean and each seed's, the training time), and
writes quality.json, quality.md and plots/quality.png into --out.

From Python (a lesson, with smaller sizes):

    from minitransformer.tools.efficient_attention.quality import run_study, summarize
    rows = run_study(["full", "local"], seeds=[0], steps=40, length=256)
    summarize(rows)["local"]["accuracy"]      # the mean over the seeds

Exit status: 0 done; 2 a bad flag, or an --out that cannot be used, before anything is
trained (one line ``PROG: error: ...`` and ``see: PROG --help``); 130 on Ctrl-C and 143 on
SIGTERM, with one line.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import backend, checks
from ... import functional as F
from ...backend import host
from ...config import TrainConfig, TransformerConfig
from ...data.tasks import Task
from ...data.vocab import PAD
from ...errors import ConfigError
from ...runtime.runs.outputs import check_study_dir
from ...tensor import no_grad
from ...train import Trainer
from .command import Parser, bounded, kinds_flag, out_dir, run_command
from .quality_report import REPLACED, make_record, markdown, summarize, write
from .recall import MAX_LENGTH, RecallData, RecallTask, to_batch

KINDS = ("full", "local", "strided", "linear")
MAX_STEPS = 100_000
HELD_OUT_STREAM = 1  # the held-out sequences: numpy.random.default_rng([1]), every seed's
TRAIN_STREAM = 2  # seed s trains on the batches of numpy.random.default_rng([2, s])
MODEL = dict(d_model=64, h=4, N=2, d_ff=256, pre_norm=True)  # the tiny preset, pre-LN
PEAK_LR = 1e-2  # the warm-up schedule's peak (after a quarter of the steps)
TEST_SEQUENCES = 256  # held-out sequences every run answers
MIN_LENGTH = RecallTask().shortest_length  # the default task's facts, gap and questions fit


def attention_fields(kind: str, window: int, stride: int) -> dict[str, Any]:
    """The TransformerConfig fields that make a model's self-attention ``kind``: none for
    full (the default), the window for local, the stride for strided."""
    if kind == "local":
        return dict(attention="local", attention_window=window)
    if kind == "strided":
        return dict(attention="strided", attention_window=stride)
    if kind == "linear":
        return dict(attention="linear")
    return {}


def default_stride(length: int) -> int:
    """round(√T): Child et al.'s choice, which balances the band and the stride."""
    return max(1, round(math.sqrt(length)))


def _check_kinds(kinds: Any) -> tuple[str, ...]:
    if isinstance(kinds, str) or not isinstance(kinds, (list, tuple)) or not kinds:
        raise ConfigError(f"run_study: kinds must be a list of some of {list(KINDS)}, e.g. "
                          f"['full', 'local'], got {checks.short(kinds)}")  # fmt: skip
    bad = [k for k in kinds if k not in KINDS]
    if bad or len(set(kinds)) != len(kinds):
        raise ConfigError(f"run_study: kinds must be different names of {list(KINDS)}, got "
                          f"{checks.short(list(kinds))}")  # fmt: skip
    return tuple(kinds)


def _check_seeds(seeds: Any) -> tuple[int, ...]:
    if isinstance(seeds, str) or not isinstance(seeds, (list, tuple)) or not 1 <= len(seeds) <= 10:
        raise ConfigError(f"run_study: seeds must be a list of 1 to 10 seeds, e.g. [0, 1], "
                          f"got {checks.short(seeds)}")  # fmt: skip
    if not all(checks.is_int(s) and 0 <= s < 2**32 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"run_study: seeds must be different whole numbers in 0..2**32-1, "
                          f"got {checks.short(list(seeds))}")  # fmt: skip
    return tuple(int(s) for s in seeds)


def held_out(task: RecallTask, n: int) -> RecallData:
    """The ``n`` held-out sequences every kind and seed answers (their own stream)."""
    return task.sample(n, np.random.default_rng([HELD_OUT_STREAM]))


def build_trainer(
    task: RecallTask,
    kind: str,
    seed: int,
    *,
    steps: int,
    batch_size: int,
    window: int,
    stride: int,
    peak_lr: float,
    model: dict[str, Any],
) -> Trainer:
    """A Trainer of the decoder-only model with self-attention ``kind`` (dropout 0, plain
    cross-entropy, the warm-up schedule peaking at ``peak_lr`` after a quarter of the steps).

    The Trainer is given the task as a ``Task`` named "lm" (a decoder-only model of the
    task's vocabulary, T positions); its own batch stream is never read: the study feeds it
    ``to_batch`` batches, whose targets are the answers alone."""
    first = task.sample(1, np.random.default_rng([TRAIN_STREAM, seed]))
    sequence = first.tokens[0, :-1].tolist()  # BOS + these: the T positions the model reads
    splits = {"train": [([], sequence)], "valid": [], "test": []}
    as_task = Task("lm", task.vocab, splits, task.length, texts={}, knobs={})
    fields = {**model, **attention_fields(kind, window, stride)}
    cfg = TrainConfig(task="lm", preset="tiny", steps=steps, batch_size=batch_size,
                      warmup=max(1, steps // 4), peak_lr=peak_lr, seed=seed, dropout=0.0,
                      label_smoothing=0.0, progress=False, plots=False, out="unused",
                      model_overrides=fields)  # fmt: skip
    return Trainer(cfg, task=as_task)


def score(model: Any, data: RecallData, rows: int = 32) -> tuple[float, float]:
    """(accuracy, loss) at the answers of ``data``: the share of answers that are the
    model's most likely next token, and the cross-entropy there (nats per answer). Eval
    mode, no gradients; the model's mode is put back."""
    was_training = model.training
    model.eval()
    right, loss, count = 0, 0.0, 0
    try:
        with no_grad():
            for start in range(0, len(data), rows):
                batch = to_batch(data.rows(start, start + rows))
                logits = model(backend.asarray(batch.tgt_in, device=model.device))
                target = backend.asarray(batch.tgt_out, device=model.device)
                loss += F.cross_entropy(logits, target, ignore_index=PAD, reduction="sum").item()
                answers = batch.tgt_out != PAD
                guess = backend.to_numpy(logits.data).argmax(axis=-1)
                right += int((guess[answers] == batch.tgt_out[answers]).sum())
                count += int(answers.sum())
    finally:
        model.train(was_training)
    return right / count, loss / count


def run_one(task: RecallTask, kind: str, seed: int, test: RecallData, *, steps: int,
            batch_size: int, window: int, stride: int, peak_lr: float = PEAK_LR,
            model: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """Train one model of ``kind`` at ``seed`` for ``steps`` steps of ``batch_size``
    sequences; return its row: accuracy and loss on ``test``, the training losses (one per
    step, at the answers), the training seconds."""
    trainer = build_trainer(task, kind, seed, steps=steps, batch_size=batch_size,
                            window=window, stride=stride, peak_lr=peak_lr,
                            model=model or MODEL)  # fmt: skip
    rng = np.random.default_rng([TRAIN_STREAM, seed])
    started = time.perf_counter()
    for step in range(1, steps + 1):
        trainer.train_step(to_batch(task.sample(batch_size, rng)))
        trainer.step = step
        if step % 25 == 0 or step == steps:
            trainer.read_back()  # TrainingError at a NaN/Inf step
    seconds = time.perf_counter() - started
    accuracy, loss = score(trainer.model, test)
    size = window if kind == "local" else stride if kind == "strided" else None
    return dict(kind=kind, seed=seed, window=size, steps=steps, batch_size=batch_size,
                accuracy=accuracy, loss=loss, seconds=round(seconds, 2),
                train_losses=[round(v, 4) for v in trainer.losses],
                parameters=trainer.model.num_parameters())  # fmt: skip


def run_study(kinds: Sequence[str] = KINDS, seeds: Sequence[int] = (0, 1), steps: int = 150,
              length: int = 512, *, batch_size: int = 8, window: int = 32,
              stride: int | None = None, test_sequences: int = TEST_SEQUENCES,
              peak_lr: float = PEAK_LR,
              task: RecallTask | None = None, model: dict[str, Any] | None = None,
              log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Every kind at every seed (seeds outer, kinds inner), the same steps, batches and
    held-out sequences for all; returns one row per run (``run_one``). ``task``: the
    recall task's sizes (default ``RecallTask(length)``); ``model``: TransformerConfig
    fields of the model (default ``MODEL``); ``log``: called with one line per run."""
    kinds, seeds = _check_kinds(kinds), _check_seeds(seeds)
    steps = checks.positive_int("run_study", "steps", steps, "pass e.g. steps=150")
    if steps > MAX_STEPS:
        raise ConfigError(f"run_study: steps must be at most {MAX_STEPS:,}, got {steps:,}")
    batch_size = checks.positive_int("run_study", "batch_size", batch_size, "e.g. batch_size=8")
    window = checks.positive_int("run_study", "window", window, "pass e.g. window=32")
    test_sequences = checks.positive_int("run_study", "test_sequences", test_sequences,
                                         "pass e.g. test_sequences=256")  # fmt: skip
    peak_lr = checks.real("run_study", "peak_lr", peak_lr, low=0.0, high=1.0, low_open=True)
    if task is None:
        task = RecallTask(length=length)
    elif not isinstance(task, RecallTask) or task.length != length:
        raise ConfigError(f"run_study: task must be a RecallTask of length={length}, got "
                          f"{checks.short(task)}")  # fmt: skip
    if model is not None and not isinstance(model, dict):
        raise ConfigError(f"run_study: model must be a dict of TransformerConfig fields, e.g. "
                          f"dict(d_model=32, N=2), or None, got {checks.short(model)}")  # fmt: skip
    stride = default_stride(length) if stride is None else stride
    stride = checks.positive_int("run_study", "stride", stride, "pass e.g. stride=23")
    for kind in kinds:  # every model's config checked before the first step
        fields = {**(model or MODEL), **attention_fields(kind, window, stride)}
        try:
            vocab = task.vocab_size
            TransformerConfig(src_vocab=vocab, tgt_vocab=vocab, decoder_only=True,
                              max_len=length + 2, **fields).validate()  # fmt: skip
        except TypeError as err:  # a field TransformerConfig does not have
            raise ConfigError(f"run_study: model: {err}") from None
    test = held_out(task, test_sequences)
    rows = []
    for seed in seeds:
        for kind in kinds:
            row = run_one(task, kind, seed, test, steps=steps, batch_size=batch_size,
                          window=window, stride=stride, peak_lr=peak_lr, model=model)  # fmt: skip
            rows.append(row)
            if log is not None:
                log(f"{kind} seed {seed}: accuracy {row['accuracy']:.3f}, loss "
                    f"{row['loss']:.3f} at the answers ({row['seconds']:.0f} s)")  # fmt: skip
    return rows


# ----------------------------------------------------------------------------- the command
PROG = "python -m minitransformer.tools.efficient_attention.quality"
DESCRIPTION = (
    "Train the decoder-only model with full, local, strided and linear self-attention for the "
    "same steps on the same batches of a recall task at T = 512 (facts at least 128 positions "
    "before the question about them, out of a window of 32), at two seeds; score each on the "
    "same held-out sequences (accuracy and loss at the answers). Prints the table; writes "
    "quality.json, quality.md and plots/quality.png into --out. About 10 to 20 minutes on a "
    "2-core CPU with the defaults."
)


def seeds_flag(text: str) -> tuple[int, ...]:
    """--seeds: comma-separated different whole numbers >= 0, at most 10 (``0,1``)."""
    values = tuple(bounded(0, 2**32 - 1, "0,1")(part) for part in text.split(","))
    if len(set(values)) != len(values) or len(values) > 10:
        raise argparse.ArgumentTypeError(f"expected 1 to 10 different seeds, got {text!r}")
    return values


def build_parser() -> Parser:
    """The study's flags, each checked where it enters by its ``type=``."""
    parser = Parser(prog=PROG, description=DESCRIPTION)
    add = parser.add_argument
    add("--kinds", type=kinds_flag(KINDS), default=KINDS, metavar="A,B",
        help=f"the attention kinds to train (default {','.join(KINDS)})")  # fmt: skip
    add(
        "--seeds",
        type=seeds_flag,
        default=(0, 1),
        metavar="S,...",
        help="the seeds (weights and batches); every kind trains at each (default 0,1)",
    )
    add("--steps", type=bounded(1, MAX_STEPS, "150"), default=150, metavar="N",
        help="training steps of every run (default 150)")  # fmt: skip
    add("--batch-size", type=bounded(1, 1024, "8"), default=8, metavar="B",
        help="sequences a step (default 8)")  # fmt: skip
    add("--length", type=bounded(MIN_LENGTH, MAX_LENGTH, "512"), default=512, metavar="T",
        help=f"tokens a sequence, {MIN_LENGTH}..{MAX_LENGTH} (default 512)")  # fmt: skip
    add("--window", type=bounded(1, MAX_LENGTH, "32"), default=32, metavar="W",
        help="local attention's window (default 32)")  # fmt: skip
    add("--stride", type=bounded(1, MAX_LENGTH, "23"), metavar="S",
        help="strided attention's stride (default round(sqrt(T)): 23 at T = 512)")  # fmt: skip
    add("--out", type=out_dir, default="runs/attention-quality", metavar="DIR",
        help="the folder for quality.json, quality.md and plots/quality.png; new or empty "
        "unless --overwrite (default runs/attention-quality)")  # fmt: skip
    add("--overwrite", action="store_true", help="replace this study's files in a non-empty --out")
    return parser


def run(args: argparse.Namespace) -> int:
    """Check --out, run the study, print its table, write its files; return 0."""
    task = RecallTask(length=args.length)  # ConfigError (exit 2) for a length too short
    check_study_dir(args.out, args.overwrite, REPLACED)  # before minutes of training, not after
    stride = args.stride or default_stride(args.length)
    load_start = os.getloadavg()[0]
    started = time.perf_counter()
    print(f"Training {', '.join(args.kinds)} at seeds {', '.join(map(str, args.seeds))}: "
          f"{args.steps} steps of {args.batch_size} sequences of {args.length} tokens ...",
          flush=True)  # fmt: skip
    rows = run_study(args.kinds, args.seeds, args.steps, args.length, batch_size=args.batch_size,
                     window=args.window, stride=stride, task=task, model=MODEL,
                     test_sequences=TEST_SEQUENCES, log=_progress)  # fmt: skip
    settings = dict(kinds=list(args.kinds), seeds=list(args.seeds), steps=args.steps,
                    batch_size=args.batch_size, window=args.window, stride=stride,
                    test_sequences=TEST_SEQUENCES, peak_lr=PEAK_LR, model=MODEL)  # fmt: skip
    record = make_record(rows, summarize(rows), settings, dataclasses.asdict(task), task.chance,
                         host.hardware("cpu"), round(time.perf_counter() - started, 1),
                         [load_start, os.getloadavg()[0]])  # fmt: skip
    print(markdown(record), flush=True)
    paths = write(record, args.out, overwrite=args.overwrite)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (see the module doc)."""
    return run_command(build_parser(), argv, run)


__all__ = ["KINDS", "MODEL", "attention_fields", "build_parser", "build_trainer", "default_stride",
           "held_out", "main", "run_one", "run_study", "score", "summarize"]  # fmt: skip

if __name__ == "__main__":
    sys.exit(main())
