"""Reporting a training run: what the person watching sees while it trains (a progress bar,
or one plain line per log step; one-time notes), and what a finished run leaves beside its
checkpoint (the result card ``result.json`` and the plots ``plots/*.png``).

Only the process that writes the run's files reports (rank 0 of a data-parallel job); the
others stay silent. Nothing here changes the training: a plot that cannot be drawn is a
warning, never a failed run.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import sys
import textwrap
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from .. import backend, fast
from ..backend import host
from ..config import TrainConfig
from ..data.batching import make_batch
from ..runtime.runs import files, note, read_metrics
from ..tensor import no_grad
from .evaluation import showcase, smoothed_loss_floor


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
        terminal; else plain lines, one per log interval (what a log file, a pipe or CI
        wants), with a one-time note saying why when the bar was asked for."""
        self.bar = None
        if not (self.cfg.progress and self.is_writer() and step < self.cfg.steps):
            return  # --no-progress asked for the plain lines (or none come): nothing to say
        if not _isatty(sys.stderr):
            every = self.cfg.log_every
            self.note("progress", f"progress comes as plain lines every {every} steps "
                      "(stderr is not a terminal: a pipe, a log file or mpiexec)")  # fmt: skip
            return
        try:
            from tqdm import tqdm  # the text bar: no widget warnings in notebooks
        except ImportError:
            self.note("tqdm", "tqdm is not installed, so progress comes as plain lines "
                      "(pip install tqdm for a progress bar)")  # fmt: skip
            return
        self.bar = tqdm(
            total=self.cfg.steps, initial=step, unit="step", desc=f"{self.cfg.task}",
            dynamic_ncols=True, file=sys.stderr,
        )  # fmt: skip

    def log_line(self, record: dict[str, Any]) -> None:
        """The bar's numbers, or a plain line: step, loss, learning rate, tokens per second."""
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}",
                                 tok_s=f"{record['tokens_per_s']:.0f}")  # fmt: skip
        self.say(
            f"step {record['step']}/{self.cfg.steps}  loss {record['loss']:.4f}  "
            f"lr {record['lr']:.2e}  {record['tokens_per_s']:.0f} tok/s"
        )

    def eval_line(
        self, step: int, split: str, metrics: dict[str, float], final: bool = False,
        scored: tuple[int, int] | None = None,
    ) -> None:  # fmt: skip
        """``valid at step 500:  loss 1.0200 (label-smoothed ε 0.1; floor 0.9625 at
        vocabulary 596)  token acc 81.0%  exact match 71.0%  BLEU 64.20  (on 200 of 1,000
        sentences)``, printed when an evaluation is made (above the bar, when there is one)
        as well as logged; the final one (``test at step 3000, final:``) too. ``scored``:
        (sentences scored, sentences in the split), said when it is a sample."""
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
        line = f"{split} at step {step}{', final' if final else ''}:  " + "  ".join(parts)
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


# ---------------------------------------------------------------------- after training


def result_card(trainer: Any, metrics: dict[str, float]) -> dict[str, Any]:
    """The summary of a finished run (``result.json``): task, steps, time, throughput, the
    final metrics, both configs, the parameter count and the machine.

    ``wall_time_s``: the seconds of the ``train()`` call that writes the card, from its start
    to the card: training, evaluations, checkpoints, final test (the plots come after it).
    A resumed run's card counts its last session and says ``resumed_at_step``; a card
    written outside ``train()`` has only the steps' time.
    ``train_time_s``: the training steps alone, over every session of the run."""
    cfg = trainer.cfg
    last = trainer.losses[-20:]
    records, _ = read_metrics(trainer.out / "metrics.jsonl")
    rates = [r["tokens_per_s"] for r in records if isinstance(r.get("tokens_per_s"), float)]
    wall = trainer.elapsed if trainer.started is None else time.perf_counter() - trainer.started
    result = dict(
        task=cfg.task,
        seed=cfg.seed,
        steps=trainer.step,
        wall_time_s=round(wall, 1),
        train_time_s=round(trainer.elapsed, 1),
        tokens_per_s=round(sum(rates) / len(rates) if rates else 0.0, 1),
        final_train_loss=round(sum(last) / max(len(last), 1), 4),
        eval_split=cfg.final_eval_split,
        metrics={k: round(v, 4) for k, v in metrics.items()},
        config=trainer.model_cfg.to_dict(),
        train_config=dataclasses.asdict(cfg),
        parameters=trainer.model.num_parameters(),
        ops=fast.describe(backend.normalize_device(cfg.device)),
        hardware=host.hardware(backend.normalize_device(cfg.device)),
    )
    if trainer.started_at_step:
        result["resumed_at_step"] = trainer.started_at_step
    if trainer.world is not None:
        result["data_parallel_ranks"] = trainer.world.size
    if trainer.model_cfg.decoder_only:  # what the language model writes, from nothing
        result["samples"] = lm_samples(trainer)
    return result


def lm_samples(trainer: Any, n: int = 3, temperature: float = 0.8) -> list[str]:
    """``n`` verses a language model writes from the start token alone, at ``temperature``,
    drawn with the run's seed (the result card's ``samples``)."""
    model, task = trainer.model, trainer.task
    prompts = [[task.vocab.bos_id]] * n
    out = model.generate(prompts, task.max_len, temperature, seed=trainer.cfg.seed)
    return [task.detokenize(ids) for ids in out]


def write_result(trainer: Any, result: dict[str, Any]) -> None:
    """``result.json`` in the run directory, then the plots when the run asked for them.

    Written whole, then renamed over the name (runs/files.py): a ``result.json`` that is a
    symbolic link is replaced, never written through."""
    files.write_text(trainer.out, "result.json", json.dumps(result, indent=2) + "\n")
    if trainer.cfg.plots:
        trainer.plot()


def draw_plots(trainer: Any) -> None:
    """Loss/accuracy curves, the learning-rate schedule and the attention of one held-out
    example (a language model's self-attention, else the cross-attention), into
    ``out/plots``. A figure that cannot be drawn gives a warning.

    Each figure is saved through runs/files.py: a ``plots/`` that is a symbolic link is
    refused (a warning), a link at a figure's name is replaced, never written through."""
    try:
        import matplotlib  # noqa: F401  (optional)
    except ImportError:
        trainer.reporter.note(
            "matplotlib",
            "matplotlib is not installed, so no plots were drawn (pip install matplotlib;"
            " then: minitransformer plot --run RUN)",
        )
        return
    from ..tools import viz

    out, plots = trainer.out, trainer.out / "plots"
    try:
        with files.replacing(out, "plots/curves.png") as file:
            title = f"{trainer.cfg.task}: training curves of the run in {out}"
            viz.plot_training_curves(out / "metrics.jsonl", title=title, path=file)
        steps = list(range(1, trainer.cfg.steps + 1))
        with files.replacing(out, "plots/lr_schedule.png") as file:
            viz.plot_lr_schedule(steps, [trainer.schedule.lr_at(s) for s in steps], path=file)
        with files.replacing(out, "plots/attention.png") as file:
            trainer.plot_attention(file)
    except Exception as err:  # noqa: BLE001 - the run's result is already written
        warnings.warn(f"could not draw the plots in {plots}: {err}", stacklevel=3)


def plot_attention(
    trainer: Any, path: Path | IO[bytes], split: str | None = None, index: int | None = None
) -> Any:
    """Heatmaps of the last decoder layer's cross-attention (one panel per head) while the
    model decodes a held-out example: which source token each output looks at (a language
    model: its last layer's self-attention over held-out verse ``index``, default 0).
    ``path``: a file name or a binary file (a PNG), as every ``viz`` function takes.

    ``index`` None: the first of the first ``evaluation.SHOWCASE`` examples whose greedy
    output is the reference (evaluation.showcase, one batched decode); when none is, example
    0, and the title says so and gives the reference, the output's tokens that are not in
    it marked red. The rows are always the model's own output, whose weights these are."""
    from ..tools import viz

    cfg, model, model_cfg, task = trainer.cfg, trainer.model, trainer.model_cfg, trainer.task
    split = split or cfg.final_eval_split
    if model_cfg.decoder_only:
        return _plot_self_attention(trainer, path, split, index or 0)
    index, output, right, looked = showcase(model, task, split, index, device=cfg.device)
    (source, target), eos = task.splits[split][index], model_cfg.eos_id
    src = backend.asarray(make_batch([(source, [])]).src, device=cfg.device)
    tgt_in = backend.asarray([[model_cfg.bos_id, *output]], device=cfg.device)
    weights = _stored_weights(model, model.decoder.layers[-1].cross_attn, src, tgt_in)
    label = _token_labeller(task.vocab)
    title = f"{cfg.task}: cross-attention of the last decoder layer, {split} example {index}"
    among = f"{split} examples 0-{looked - 1}"
    rows, marked = "target position (queries)", None
    if right and looked > 1:
        title += f"\n(the first of {among} whose greedy output is the reference)"
    elif right:
        title += " (greedy output = the reference)"
    else:  # the rows are a wrong output: say so, give the reference, mark what it adds
        matcher = difflib.SequenceMatcher(None, [*output, eos], [*target, eos], autojunk=False)
        kept = {i for a, _, n in matcher.get_matching_blocks() for i in range(a, a + n)}
        marked = [i for i in range(len(output) + 1) if i not in kept]
        how = "red: output tokens not in it" if marked else "it leaves out part of it"
        none = f"none of {among} is right; " if looked > 1 else ""
        title += f"\nmodel output differs from the reference ({none}{how})\nreference: "
        title += textwrap.shorten(task.references(split)[index], 160)
        rows = "model output (differs from the reference)"
    tokens = [label(i) for i in [*output, eos]]
    return viz.plot_attention(weights, [label(i) for i in source], tokens, title=title,
                              ylabel=rows, marked_rows=marked, path=path)  # fmt: skip


def _plot_self_attention(trainer: Any, path: Path | IO[bytes], split: str, index: int) -> Any:
    """A language model's last-layer self-attention over held-out verse ``index``: which
    earlier token each position looks at (the upper triangle is the causal mask's zeros)."""
    from ..tools import viz

    model, bos = trainer.model, trainer.model_cfg.bos_id
    _, verse = trainer.task.splits[split][index]
    ids = [bos, *verse]
    attention = model.decoder.layers[-1].self_attn
    weights = _stored_weights(model, attention, backend.asarray([ids], device=trainer.cfg.device))
    label = _token_labeller(trainer.task.vocab)
    tokens = [label(i) for i in ids]
    return viz.plot_attention(
        weights, tokens, tokens,
        title=f"lm: self-attention of the last layer, {split} verse {index}", path=path,
    )  # fmt: skip


def _stored_weights(model: Any, attention: Any, *inputs: Any) -> Any:
    """The weights (H, T, S) of one ``attention`` layer while ``model(*inputs)`` runs once, a
    batch of one, in eval mode without a graph (host NumPy)."""
    model.eval()
    model.attention_weights(True)
    try:
        with no_grad():
            model(*inputs)
        return backend.to_numpy(attention.last_weights)[0]  # (1, H, T, S) -> (H, T, S)
    finally:
        model.attention_weights(False)


def _token_labeller(tokenizer: Any) -> Callable[[int], str]:
    """id -> a short string for plot ticks (a word, or a BPE piece without its end mark)."""
    vocab = getattr(tokenizer, "vocab", tokenizer)  # a BPE keeps its pieces in a Vocab
    return lambda i: vocab.id_to_token(int(i)).replace("</w>", "")


class StudyProgress:
    """The progress of a study of many runs (``ablate``, ``scale``): a tqdm bar over all its
    steps when ``bar`` and stderr is a terminal, else one plain line per finished run on
    stderr (nothing at all when ``lines`` is False)."""

    def __init__(self, total: int, unit: str = "step", bar: bool = True, lines: bool = True):
        self.bar: Any = None
        self.lines = lines
        if bar and _isatty(sys.stderr):
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                scale = unit != "step"
                self.bar = tqdm(total=total, unit=unit, unit_scale=scale, dynamic_ncols=True,
                                file=sys.stderr)  # fmt: skip

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


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
