"""Running the scaling study: the sizes, the settings, one training run per size and seed at
one token budget, and the whole study.

Every run of one seed reads the SAME batches in the same order (the batch stream is seeded by
the run's seed, not by its size) and stops after the batch that reaches ``tokens`` target
tokens, so every size of a seed is trained on exactly the same tokens; its loss is then a
function of its size alone. Along the way each run measures its validation loss at
``curve_points`` budgets spaced by factors of 2 (…, D/4, D/2, D): the loss-against-compute
curves that report.py draws and fit.py's compute frontier reads.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

from ... import backend, checks
from ... import functional as F
from ...backend import host
from ...config import TransformerConfig
from ...data.batching import make_batch
from ...data.ngram import task_baselines
from ...data.tasks import Task, make_task
from ...errors import ConfigError, TrainingError
from ...tensor import no_grad
from ...train import TrainConfig, Trainer
from ...train.progress import StudyProgress

LR_D_MODEL = 64  # settings.peak_lr is the peak at this width; see ScalingSettings
MAX_TOKENS = 10**9  # a budget beyond this would train for days on a CPU


@dataclass(frozen=True)
class Size:
    """One model size of the study: width ``d_model``, ``layers`` blocks, ``heads`` (default
    d_model // 16: every head 16 wide), feed-forward width ``d_ff`` (default 4·d_model)."""

    d_model: int
    layers: int
    heads: int | None = None
    d_ff: int | None = None

    @property
    def name(self) -> str:
        return f"d{self.d_model}-L{self.layers}"

    def fields(self) -> dict[str, int]:
        """The TransformerConfig fields this size sets."""
        heads = self.heads if self.heads is not None else max(1, self.d_model // 16)
        d_ff = self.d_ff if self.d_ff is not None else 4 * self.d_model
        return dict(d_model=self.d_model, N=self.layers, h=heads, d_ff=d_ff)


# Non-embedding parameters (post-LN, d_ff = 4·d_model): 3,280; 12,704; 56,544; 149,952;
# 335,520 — a factor of about 100 from the smallest to the largest.
DEFAULT_SIZES = (Size(16, 1), Size(32, 1), Size(48, 2), Size(64, 3), Size(96, 3))
FAST_SIZES = (Size(16, 1), Size(32, 1), Size(48, 2), Size(64, 3))


@dataclass
class ScalingSettings:
    """Sizes of one scaling study; ``fast()`` gives the minute-long one.

    The task is the ``lm`` task at the character level (data/tasks.py: the English verses,
    a vocabulary of about 70 characters, so the embedding is a small part of every model).
    ``tokens``: the budget D, target tokens each run trains on. ``batch_size``: verses a step
    (small, so that a small budget still makes many updates). ``peak_lr``: the warm-up
    schedule's peak at d_model = 64; a size of width d peaks at peak_lr·√(64/d), which is
    the paper's own schedule (lr ∝ d_model^-0.5) with one factor for every size.
    ``warmup_share``: warm-up steps as a share of the (estimated) steps. ``curve_points``:
    validation losses along each run, at D/2^k. ``eval_verses``: the validation verses (and
    as many training verses, for the train/validation gap).
    """

    sizes: tuple[Size, ...] = DEFAULT_SIZES
    tokens: int = 1_000_000
    seeds: tuple[int, ...] = (0, 1)
    batch_size: int = 8
    peak_lr: float = 7e-3
    warmup_share: float = 0.1
    curve_points: int = 5
    eval_verses: int = 500
    n_train: int | None = None  # cap on the training verses (None: all of them)

    @classmethod
    def fast(cls, **changes: Any) -> ScalingSettings:
        """Four sizes (about 46× in non-embedding parameters), 400,000 tokens each."""
        base = dict(sizes=FAST_SIZES, tokens=400_000, eval_verses=200, curve_points=4)
        return cls(**{**base, **changes})

    def validate(self) -> ScalingSettings:
        """Raise ConfigError naming every field that is out of range (and its fix); else
        return self (with sizes and seeds made tuples)."""
        problems: list[str] = []
        for name, low, high in (("tokens", 1, MAX_TOKENS), ("batch_size", 1, 4096),
                                ("curve_points", 1, 20), ("eval_verses", 1, 500)):  # fmt: skip
            value = getattr(self, name)
            if not checks.is_int(value) or not low <= value <= high:
                problems.append(f"{name} must be a whole number in {low:,}..{high:,}, "
                                f"got {checks.short(value)}")  # fmt: skip
        if self.n_train is not None and (not checks.is_int(self.n_train) or self.n_train < 1):
            problems.append(f"n_train must be None or a positive int, got {self.n_train!r}")
        for name, high in (("peak_lr", 1.0), ("warmup_share", 1.0)):
            value = getattr(self, name)
            if not checks.is_real(value) or not 0 < value <= high:
                problems.append(f"{name} must be a number in (0, {high:g}], got {value!r}")
        problems += _seed_problems(self.seeds) + _size_problems(self.sizes)
        if problems:
            raise ConfigError("invalid ScalingSettings: " + "; ".join(problems))
        self.sizes, self.seeds = tuple(self.sizes), tuple(int(s) for s in self.seeds)
        return self


def _seed_problems(seeds: Any) -> list[str]:
    if not isinstance(seeds, (list, tuple)) or not 1 <= len(seeds) <= 10:
        return [f"seeds must be a list of 1 to 10 seeds, e.g. (0, 1), got {checks.short(seeds)}"]
    if not all(checks.is_int(s) and 0 <= s < 2**32 for s in seeds):
        return [f"seeds must be whole numbers in 0..2**32-1, got {checks.short(seeds)}"]
    if len(set(seeds)) != len(seeds):
        return [f"seeds {list(seeds)} name a seed twice; give each once"]
    return []


def _size_problems(sizes: Any) -> list[str]:
    if not isinstance(sizes, (list, tuple)) or not 1 <= len(sizes) <= 20:
        return [f"sizes must be a list of 1 to 20 Size(d_model, layers), got {checks.short(sizes)}"]
    problems = []
    for s in sizes:
        if not isinstance(s, Size):
            problems.append(f"sizes: {checks.short(s)} is not a Size(d_model, layers)")
            continue
        try:
            TransformerConfig(src_vocab=8, tgt_vocab=8, decoder_only=True, **s.fields()).validate()
        except (ConfigError, TypeError) as err:
            problems.append(f"size {s.name}: {err}")
    names = [s.name for s in sizes if isinstance(s, Size)]
    if len(set(names)) != len(names):
        problems.append(f"sizes name one size twice: {names}")
    return problems


def make_lm_task(settings: ScalingSettings) -> Task:
    """The character-level ``lm`` task with its default splits (500 validation verses, task
    seed 0 for every study seed); ``validation(task, settings)`` picks the verses scored."""
    return make_task("lm", seed=0, tokenizer="char", n_train=settings.n_train)


def validation(task: Task, settings: ScalingSettings) -> list:
    """The first ``settings.eval_verses`` validation verses: every run is scored on these."""
    return task.splits["valid"][: settings.eval_verses]


def estimated_steps(settings: ScalingSettings, task: Task) -> int:
    """Steps a budget takes at the training verses' mean length (+1 for EOS): what sets the
    warm-up, the same for every size and seed."""
    train = task.splits["train"]
    per_verse = sum(len(t) + 1 for _, t in train) / len(train)
    return max(1, math.ceil(settings.tokens / (settings.batch_size * per_verse)))


def peak_lr(settings: ScalingSettings, size: Size) -> float:
    """The schedule's peak for ``size``: peak_lr · √(64 / d_model)."""
    return settings.peak_lr * math.sqrt(LR_D_MODEL / size.d_model)


def build_trainer(size: Size, settings: ScalingSettings, task: Task, seed: int) -> Trainer:
    """A Trainer of ``size`` on ``task`` (dropout 0, plain cross-entropy, the warm-up
    schedule with its peak from ``peak_lr``); its batch stream is seeded by ``seed`` alone."""
    steps = estimated_steps(settings, task)
    cfg = TrainConfig(task="lm", preset="tiny", steps=steps, batch_size=settings.batch_size,
                      warmup=max(1, round(settings.warmup_share * steps)),
                      peak_lr=peak_lr(settings, size), seed=seed, dropout=0.0,
                      label_smoothing=0.0, progress=False, plots=False, out="unused",
                      model_overrides=size.fields())  # fmt: skip
    return Trainer(cfg, task=task)


def non_embedding_parameters(model: Any) -> int:
    """Parameters of the layer stack: everything but the token embedding (tied with the
    output projection) — the N of Kaplan et al. (positions are sinusoids: no parameters)."""
    return sum(int(p.data.size) for p in model.decoder.parameters())


def held_out_loss(model: Any, pairs: list) -> float:
    """Cross-entropy per target token (nats; teacher forcing, eval mode, pads ignored) of
    ``pairs``; the model's mode is put back."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with no_grad():
            for start in range(0, len(pairs), 100):
                batch = make_batch(pairs[start : start + 100])
                logits = model(backend.asarray(batch.tgt_in, device=model.device))
                target = backend.asarray(batch.tgt_out, device=model.device)
                total += F.cross_entropy(logits, target, ignore_index=model.cfg.pad_id,
                                         reduction="sum").item()  # fmt: skip
                count += batch.n_tokens
    finally:
        model.train(was_training)
    return total / count


def curve_marks(tokens: int, points: int) -> list[int]:
    """The budgets at which a run measures its validation loss: D/2^(points-1), ..., D/2, D."""
    return [max(1, tokens >> k) for k in range(points - 1, -1, -1)]


def run_size(size: Size, settings: ScalingSettings, task: Task, seed: int,
             on_step: Any = None) -> dict[str, Any]:  # fmt: skip
    """Train ``size`` on seed ``seed`` until it has seen ``settings.tokens`` target tokens;
    return its record: sizes, parameters (total and non-embedding), tokens, steps, compute
    C = 6·N·D (N non-embedding), the validation loss along the way (``curve``) and at the
    end, the loss on as many training verses (the gap), seconds. A run whose loss turns
    NaN/Inf is returned with ``diverged`` set and NaN losses, not raised."""
    trainer = build_trainer(size, settings, task, seed)
    model, valid = trainer.model, validation(task, settings)
    marks, curve = curve_marks(settings.tokens, settings.curve_points), []
    tokens = steps = 0
    diverged, t0 = None, time.perf_counter()
    try:
        while tokens < settings.tokens:
            batch = next(trainer.stream)
            trainer.train_step(batch)
            tokens += batch.n_tokens
            steps += 1
            trainer.step = steps
            if steps % 50 == 0:
                trainer.read_back()  # raises TrainingError at a NaN/Inf step
            if marks and tokens >= marks[0]:
                while marks and tokens >= marks[0]:
                    marks.pop(0)
                trainer.read_back()
                curve.append(dict(tokens=tokens, valid_loss=held_out_loss(model, valid)))
            if on_step is not None:
                on_step(batch.n_tokens)
        trainer.read_back()
    except TrainingError as err:
        diverged = str(err)
    n_embed = non_embedding_parameters(model)
    nan = float("nan")
    final = curve[-1]["valid_loss"] if curve and not diverged else nan
    train_loss = held_out_loss(model, task.splits["train"][: len(valid)]) if not diverged else nan
    return dict(size=size.name, **size.fields(), seed=seed, parameters=model.num_parameters(),
                non_embedding=n_embed, tokens=tokens, steps=steps, compute=6.0 * n_embed * tokens,
                peak_lr=peak_lr(settings, size), warmup=trainer.cfg.warmup, valid_loss=final,
                train_loss=train_loss, curve=curve, diverged=diverged,
                seconds=round(time.perf_counter() - t0, 1))  # fmt: skip


def run_study(settings: ScalingSettings, progress: bool = True, bar: bool = True) -> dict[str, Any]:
    """Every size on every seed; return the study as a JSON-friendly dict {"settings",
    "task", "baselines" (unigram and bigram loss on the validation verses), "results" (one
    record per run, seeds outer, sizes inner), "hardware", "seconds"}. ``progress``: one
    line per finished run on stderr, or (``bar`` and a terminal) a progress bar."""
    settings.validate()
    task = make_lm_task(settings)
    total = settings.tokens * len(settings.sizes) * len(settings.seeds)
    shown = StudyProgress(total, unit="tok", bar=progress and bar, lines=progress)
    results, t0 = [], time.perf_counter()
    try:
        for seed in settings.seeds:
            for size in settings.sizes:
                shown.describe(f"{size.name} seed {seed}")
                r = run_size(size, settings, task, seed, shown.update)
                results.append(r)
                shown.finished(f"{r['size']} seed {seed}: {r['non_embedding']:,} parameters, "
                               f"validation loss {r['valid_loss']:.4f} after {r['tokens']:,} "
                               f"tokens ({r['seconds']:.0f} s)")  # fmt: skip
    finally:
        shown.close()
    as_dict = dataclasses.asdict(settings)
    as_dict["sizes"] = [dataclasses.asdict(s) for s in settings.sizes]
    return dict(settings=as_dict, task=task.summary() + " (characters)",
                baselines=task_baselines(task, "valid", settings.eval_verses), results=results,
                hardware=host.hardware("cpu"),
                seconds=round(time.perf_counter() - t0, 1))  # fmt: skip


__all__ = [
    "DEFAULT_SIZES", "FAST_SIZES", "ScalingSettings", "Size", "build_trainer", "curve_marks",
    "estimated_steps", "held_out_loss", "make_lm_task", "non_embedding_parameters", "peak_lr",
    "run_size", "run_study", "validation",
]  # fmt: skip
