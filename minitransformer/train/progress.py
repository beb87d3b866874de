"""What the person watching a run sees while it trains: a progress bar, or one plain line per
log step, and one-time notes (:class:`Reporter`); and the progress of a study of many runs
(:class:`StudyProgress`, for ``ablate`` and ``scale``).

**The training loss shown is a running mean.** Batches are bucketed by length
(data/batching.py), so one batch's loss jumps up and down from step to step. The bar's
``loss_50=0.742`` and the plain line's ``loss (mean of last 50 steps) 0.7421`` are the mean of
the last :func:`loss_window` steps' losses (``max(--log-every, 50)``: at the default
``--log-every 50``, every step since the previous line), computed at the log step from the
losses read back from the device then (train/step.py ``read_back``: no extra wait per step).
``metrics.jsonl`` keeps the last batch's ``loss`` and adds ``loss_mean`` and ``loss_window``.

**Bar or plain lines.** A bar when stderr is a terminal at least :data:`MIN_BAR_COLUMNS` wide;
a terminal that reports no size (0×0: some CI and container pseudo-terminals, ``script -c``)
gets a bar :data:`FALLBACK_SIZE` wide. Everything else (a pipe, a log file, ``mpiexec``, a
narrow terminal) gets plain lines, with a one-time note saying why. The size tqdm is given is
ours (:func:`bar_shape`), never its own reading: tqdm takes a 0×0 terminal's size as
-1 columns and -1 rows and then hides its bar (and our lines with it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..config import TrainConfig
from ..runtime.runs import note
from .evaluation import smoothed_loss_floor

#: The least number of steps whose losses the shown training loss is the mean of.
LOSS_WINDOW = 50

#: (columns, rows) of a terminal that reports no size (0×0), as ``shutil.get_terminal_size``.
FALLBACK_SIZE = (80, 24)

#: A terminal narrower than this gets plain lines: the bar's loss would be cut off.
MIN_BAR_COLUMNS = 60


def loss_window(log_every: int) -> int:
    """The number of steps the shown training loss is the mean of: ``max(log_every, 50)``.

    Never fewer than the steps between two log lines, so every step's loss is counted."""
    return max(log_every, LOSS_WINDOW)


def running_mean(losses: Sequence[float], window: int) -> tuple[float, int]:
    """The mean of the last ``window`` values of ``losses`` (fewer at the start of a run), and
    how many it averaged. ``losses`` must not be empty."""
    recent = losses[-window:]
    return sum(recent) / len(recent), len(recent)


def window_words(steps: int) -> str:
    """``mean of last 50 steps`` (``last step`` for one): what the shown loss is."""
    return "last step" if steps == 1 else f"mean of last {steps} steps"


class Reporter:
    """The progress bar or plain lines on stderr, and notes said once per key.

    ``is_writer()`` tells whether this process reports (asked each time: a data-parallel
    world is attached to a Trainer after it is built).
    """

    def __init__(self, cfg: TrainConfig, is_writer: Callable[[], bool], vocab: int = 0):
        self.cfg = cfg
        self.is_writer = is_writer
        self.bar: Any = None  # the tqdm bar while training, or None for plain lines
        self._noted: set[str] = set()
        self.vocab = vocab  # the output vocabulary, V of the smoothed loss's floor
        #: What an evaluation record of the metrics log adds under label smoothing (ε > 0):
        #: ε and the least loss it allows at V (the curves' loss panel draws it); else {}.
        self.smoothing: dict[str, float] = {}
        eps = cfg.label_smoothing or 0.0
        if eps > 0 and vocab > 1:
            floor = round(smoothed_loss_floor(eps, vocab), 4)
            self.smoothing = {"label_smoothing": eps, "loss_floor": floor}

    # ------------------------------------------------------------------ while training
    def open(self, step: int) -> None:
        """Start showing progress at ``step``: a tqdm bar when asked for and stderr is a
        terminal wide enough (or one of no reported size); else plain lines, one per log
        interval (what a log file, a pipe or CI wants), with a one-time note saying why when
        the bar was asked for."""
        self.bar = None
        if not (self.cfg.progress and self.is_writer() and step < self.cfg.steps):
            return  # --no-progress asked for the plain lines (or none come): nothing to say
        every = self.cfg.log_every
        shape = bar_shape(sys.stderr)
        if shape is None:
            self.note("progress", f"progress comes as plain lines every {every} steps "
                      f"({why_no_bar(sys.stderr)})")  # fmt: skip
            return
        try:
            from tqdm import tqdm  # the text bar: no widget warnings in notebooks
        except ImportError:
            self.note("tqdm", "tqdm is not installed, so progress comes as plain lines "
                      "(pip install tqdm for a progress bar)")  # fmt: skip
            return
        window = loss_window(every)
        self.note("loss-window", f"the bar's loss_N is the mean training loss of the last N "
                  f"steps (N up to {window}; one batch's loss jumps: batches differ in "
                  "length)")  # fmt: skip
        self.bar = new_bar(tqdm, shape, total=self.cfg.steps, initial=step, unit="step",
                           desc=f"{self.cfg.task}")  # fmt: skip

    def log_line(self, record: dict[str, Any]) -> None:
        """The bar's numbers, or a plain line: step, the loss's running mean (``loss_mean``
        over ``loss_window`` steps), learning rate, tokens per second."""
        mean, steps = record["loss_mean"], record["loss_window"]
        if self.bar is not None:
            self.bar.set_postfix({f"loss_{steps}": f"{mean:.3f}", "lr": f"{record['lr']:.2e}",
                                  "tok_s": f"{record['tokens_per_s']:.0f}"})  # fmt: skip
        self.say(
            f"step {record['step']}/{self.cfg.steps}  loss ({window_words(steps)}) {mean:.4f}  "
            f"lr {record['lr']:.2e}  {record['tokens_per_s']:.0f} tok/s"
        )

    def eval_line(
        self, step: int, split: str, metrics: dict[str, float], final: bool = False,
        scored: tuple[int, int] | None = None, averaged: str = "",
    ) -> None:  # fmt: skip
        """``valid at step 500:  loss 1.0200 (label-smoothed ε 0.1; floor 0.9625 at
        vocabulary 596)  token acc 81.0%  exact match 71.0%  BLEU 64.20  (on 200 of 1,000
        sentences)``, printed when an evaluation is made (above the bar, when there is one)
        as well as logged; the final one (``test at step 3000, final:``) too. ``scored``:
        (sentences scored, sentences in the split), said when it is a sample. ``averaged``:
        what the final model is, after "final" (`` (average of 5 checkpoints, steps
        2600–3000)``, averaging.py's ``describe``)."""
        shown = {"loss": "loss {:.4f}", "token_acc": "token acc {:.1%}",
                 "exact_match": "exact match {:.1%}", "bleu": "BLEU {:.2f}",
                 "perplexity": "perplexity {:.1f}", "unigram_loss": "(baselines: unigram {:.4f}",
                 "bigram_loss": "bigram {:.4f})"}  # fmt: skip
        if self.smoothing:  # a learner seeing 100% next to loss 0.62 is told why
            eps, floor = self.smoothing["label_smoothing"], self.smoothing["loss_floor"]
            shown["loss"] += (
                f" (label-smoothed ε {eps:g}; floor {floor:.4f} at vocabulary {self.vocab:,})"
            )
        parts = [shown.get(k, k + " {:.4f}").format(v) for k, v in metrics.items()]
        if scored is not None and scored[0] < scored[1]:
            unit = "verses" if self.cfg.task == "lm" else "sentences"
            parts.append(f"(on {scored[0]:,} of {scored[1]:,} {unit})")
        head = f"{split} at step {step}{', final' if final else ''}{averaged}:  "
        line = head + "  ".join(parts)
        if self.bar is not None and self.is_writer():
            self.bar.write(line, file=sys.stderr)  # above the bar, which stays in place
        self.say(line)

    def signal_received(self, name: str, again: str, ranks: int | None) -> None:
        """Say what happens after a first Ctrl-C / SIGTERM (the bar, if any, stays quiet)."""
        if self.bar is not None or not self.is_writer():
            return
        if ranks is not None:
            print(f"\n{name}: the ranks stop together at the next log line, after a "
                  "checkpoint", file=sys.stderr, flush=True)  # fmt: skip
            return
        print(f"\n{name}: finishing this step, then saving a checkpoint ({again} again to "
              "stop at once)", file=sys.stderr, flush=True)  # fmt: skip

    def stopped(self, step: int, stop: str, resume: str, after_loop: bool = False) -> None:
        """Close the bar and print the command that continues the run (``after_loop``: it
        was stopped in the final evaluation, result card or plots, which a resume redoes)."""
        self.close()
        if not self.is_writer():
            return
        where = f"after step {step}, in the final evaluation or plots" if after_loop else (
            f"at step {step}")  # fmt: skip
        redo = " (it finishes them)" if after_loop else ""
        print(f"\nInterrupted ({stop}) {where}; checkpoint saved. Resume with{redo}:\n"
              f"  {resume}", file=sys.stderr, flush=True)  # fmt: skip

    def close(self) -> None:
        """Close the bar (if any); plain lines from now on."""
        if self.bar is not None:
            self.bar.close()
        self.bar = None

    # ------------------------------------------------------------------ lines and notes
    def say(self, line: str) -> None:
        """A plain progress line on stderr when there is no progress bar (logs, CI, pipes)."""
        if self.bar is None and self.is_writer():
            print(line, file=sys.stderr, flush=True)

    def note(self, key: str, text: str) -> None:
        """A one-line note on stderr, once per run and key."""
        if key not in self._noted and self.is_writer():
            self._noted.add(key)
            note(text)

    def check_bleu(self) -> None:
        """Say, once, when BLEU cannot be computed (sacrebleu missing)."""
        try:
            import sacrebleu  # noqa: F401
        except ImportError:
            self.note("sacrebleu", "sacrebleu is not installed, so BLEU is left out of the "
                      "evaluations (pip install sacrebleu)")  # fmt: skip


class StudyProgress:
    """The progress of a study of many runs (``ablate``, ``scale``): a tqdm bar over all its
    steps when ``bar`` and stderr is a terminal that can show one (:func:`bar_shape`), else
    one plain line per finished run on stderr (nothing at all when ``lines`` is False)."""

    def __init__(self, total: int, unit: str = "step", bar: bool = True, lines: bool = True):
        self.bar: Any = None
        self.lines = lines
        shape = bar_shape(sys.stderr) if bar else None
        if shape is not None:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                scale = unit != "step"
                self.bar = new_bar(tqdm, shape, total=total, unit=unit, unit_scale=scale)

    @property
    def update(self) -> Callable[[int], Any] | None:
        """What a run calls with the steps (or tokens) it has done, or None without a bar."""
        return self.bar.update if self.bar is not None else None

    def describe(self, text: str) -> None:
        """Name the run now going (on the bar)."""
        if self.bar is not None:
            self.bar.set_description(text)

    def finished(self, line: str) -> None:
        """One line for a finished run: above the bar, or plain on stderr."""
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
        elif self.lines:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------------- bar or lines


def bar_shape(stream: Any) -> tuple[int, int] | None:
    """The (columns, rows) to draw a tqdm bar with on ``stream``, or None when progress must
    come as plain lines there: it is not a terminal, or one narrower than MIN_BAR_COLUMNS.
    A terminal that reports no size (0×0) counts as FALLBACK_SIZE."""
    if not _isatty(stream):
        return None
    columns, rows = terminal_size(stream)
    if columns < MIN_BAR_COLUMNS:
        return None
    return _tqdm_shape(columns, rows)


def why_no_bar(stream: Any) -> str:
    """Why :func:`bar_shape` gave None for ``stream``, in words for the note."""
    if not _isatty(stream):
        return "stderr is not a terminal: a pipe, a log file or mpiexec"
    columns, _ = terminal_size(stream)
    return f"the terminal is {columns} columns wide; the bar needs {MIN_BAR_COLUMNS}"


def terminal_size(stream: Any) -> tuple[int, int]:
    """(columns, rows) of the terminal ``stream`` writes to; a size it reports as 0, or cannot
    report, is FALLBACK_SIZE's."""
    try:
        columns, rows = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):  # no fileno, not a terminal, closed
        columns, rows = 0, 0
    return (columns if columns > 0 else FALLBACK_SIZE[0], rows if rows > 0 else FALLBACK_SIZE[1])


def new_bar(tqdm: Any, shape: tuple[int, int], **options: Any) -> Any:
    """A tqdm bar on stderr drawn at ``shape`` (bar_shape's), following the terminal's later
    resizes through :func:`terminal_size` (tqdm asks ``bar.dynamic_ncols`` before each
    redraw), so a size of 0 never reaches tqdm."""
    bar = tqdm(file=sys.stderr, ncols=shape[0], nrows=shape[1], dynamic_ncols=False, **options)
    bar.dynamic_ncols = _resized_shape
    return bar


def _resized_shape(stream: Any) -> tuple[int, int]:
    return _tqdm_shape(*terminal_size(stream))


def _tqdm_shape(columns: int, rows: int) -> tuple[int, int]:
    """tqdm's (ncols, nrows) for a terminal of (columns, rows), both at least 1: the last
    column left free (a full line would wrap), and at least 2 rows (with fewer, tqdm hides
    its only bar as "more hidden")."""
    return columns - 1, max(rows - 1, 2)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
