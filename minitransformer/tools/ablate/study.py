"""Running the ablation study: the data (short sentences to train on, a long held-out set),
one Trainer per variant, its training and scoring (perplexity and BLEU), the whole study.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

from ... import backend
from ... import functional as F
from ...backend import host
from ...data.batching import make_batch
from ...data.metrics import bleu, exact_match
from ...data.tasks import Task, translate_task
from ...data.toylang import ToyLanguage
from ...decode import greedy_decode
from ...errors import TrainingError
from ...optim import NoamSchedule
from ...tensor import no_grad
from ...train import TrainConfig, Trainer
from ...train.progress import StudyProgress
from .variants import AblationSettings, Variant, select


@dataclass
class AblationData:
    """The task (train/valid/test of short sentences) and the long held-out set."""

    task: Task
    long_pairs: list[tuple[list[int], list[int]]]
    long_refs: list[str]

    @property
    def max_len(self) -> int:
        """Positions the model needs, long set included."""
        longest = max(max(len(s), len(t) + 1) for s, t in self.long_pairs)
        return max(self.task.max_len, longest) + 1


def make_data(settings: AblationSettings) -> AblationData:
    """The translation task at the settings' lengths, and the long set (same language,
    sentences of long_min_words..long_max_words words, never seen in training)."""
    s = settings
    n_held = max(s.eval_samples, s.curve_samples)
    task = translate_task(seed=s.seed, n_train=s.n_train, n_valid=n_held, n_test=n_held,
                          min_words=s.min_words, max_words=s.max_words)  # fmt: skip
    texts = ToyLanguage(0).sample(s.long_samples, [s.seed, 7919], s.long_min_words,
                                  s.long_max_words)  # fmt: skip
    vocab = task.vocab
    pairs = [(vocab.tokenize(src), vocab.tokenize(tgt)) for src, tgt in texts]
    return AblationData(task, pairs, [tgt for _, tgt in texts])


class WarmupFreeSchedule(NoamSchedule):
    """The paper's schedule without its ramp: lr = peak · min(1, √(warmup / step)).

    Equal to NoamSchedule from step ``warmup`` on; before it, the peak instead of the
    linear rise — so the only difference from the base run is the warm-up itself.
    """

    def __init__(self, optimizer: Any, d_model: int, warmup: int, peak_lr: float):
        self.peak = float(peak_lr)
        super().__init__(optimizer, d_model, warmup, NoamSchedule.factor_for_peak(
            peak_lr, d_model, warmup))  # fmt: skip

    def lr_at(self, step: int) -> float:
        if step <= 0:
            return 0.0
        return self.peak * min(1.0, math.sqrt(self.warmup / step))


def build_trainer(variant: Variant, settings: AblationSettings, data: AblationData):
    """A Trainer for ``variant``: the base config with the variant's one change applied."""
    s = settings
    model = {**s.model, "max_len": data.max_len, **variant.model}
    train = {"dropout": s.dropout, "label_smoothing": s.label_smoothing, **variant.train}
    cfg = TrainConfig(task="translate", preset="tiny", steps=s.steps, batch_size=s.batch_size,
                      warmup=s.warmup, peak_lr=s.peak_lr, seed=s.seed, progress=False,
                      plots=False, out="unused", model_overrides=model, **train)  # fmt: skip
    trainer = Trainer(cfg, task=data.task)
    if not variant.warmup:
        trainer.schedule = WarmupFreeSchedule(
            trainer.optimizer, trainer.model_cfg.d_model, s.warmup, s.peak_lr
        )
    if variant.random_positions:
        table = trainer.model.positions.table
        gen = backend.Generator(s.seed + 1, "cpu")
        values = gen.normal(tuple(table.shape), std=math.sqrt(0.5), dtype="float32")
        table.data[...] = backend.asarray(values, device=table.device)  # in place: the
        # optimizer's flat buffer holds the parameter as a view
    return trainer


def score(model: Any, pairs: list, refs: list[str] | None, detokenize: Any) -> dict[str, float]:
    """Perplexity (teacher forcing, no label smoothing) and, given ``refs``, greedy BLEU and
    exact match of ``pairs``; the model is left in the mode it was in."""
    was_training = model.training
    model.eval()
    total, count, hyps = 0.0, 0, []
    device = model.device
    try:
        with no_grad():
            for start in range(0, len(pairs), 100):
                chunk = pairs[start : start + 100]
                batch = make_batch(chunk)
                logits = model(batch.src, batch.tgt_in)
                target = backend.asarray(batch.tgt_out, device=device)
                loss = F.cross_entropy(logits, target, ignore_index=model.cfg.pad_id,
                                       reduction="sum")  # fmt: skip
                total += loss.item()
                count += batch.n_tokens
                if refs is not None:
                    longest = max(len(t) for _, t in chunk) + 1
                    hyps += [detokenize(ids) for ids in greedy_decode(model, batch.src, longest)]
    finally:
        model.train(was_training)
    out = {"ppl": math.exp(min(total / max(count, 1), 50.0))}
    if refs is not None:
        out["bleu"] = bleu(hyps, refs)
        out["exact"] = exact_match(hyps, refs)
    return out


def run_variant(
    variant: Variant,
    settings: AblationSettings,
    data: AblationData,
    on_step: Any = None,
) -> dict[str, Any]:
    """Train ``variant`` for settings.steps and score it; ``on_step()`` after each step.

    Returns a dict: name, change, parameters, seconds, final_train_loss, the train-loss
    curve (one value per step), the train/valid perplexity curve, and the held-out metrics
    (test_ppl, test_bleu, long_ppl, long_bleu, train_ppl, ...). A run whose loss turns
    NaN/Inf is reported with ``diverged`` set and NaN metrics, not raised.
    """
    s = settings
    trainer = build_trainer(variant, s, data)
    task, model = data.task, trainer.model
    train_sub = task.splits["train"][: s.eval_samples]
    curve: list[dict[str, float]] = []

    def point(step: int) -> None:
        n = s.curve_samples
        train_ppl = score(model, task.splits["train"][:n], None, None)["ppl"]
        valid_ppl = score(model, task.splits["valid"][:n], None, None)["ppl"]
        curve.append(dict(step=step, train_ppl=train_ppl, valid_ppl=valid_ppl))

    t0 = time.perf_counter()
    diverged = None
    try:
        if s.curve_every:
            point(0)
        for step in range(1, s.steps + 1):
            trainer.train_step(next(trainer.stream))
            trainer.step = step
            if step % 50 == 0 or step == s.steps:
                trainer.read_back()  # raises TrainingError at a NaN/Inf step
            if s.curve_every and (step % s.curve_every == 0 or step == s.steps):
                if not curve or curve[-1]["step"] != step:
                    point(step)
            if on_step is not None:
                on_step()
    except TrainingError as err:
        diverged = str(err)
    seconds = time.perf_counter() - t0
    result: dict[str, Any] = dict(
        name=variant.name,
        change=variant.change,
        parameters=model.num_parameters(),
        seconds=round(seconds, 1),
        steps=trainer.step,
        diverged=diverged,
        train_loss=[round(x, 4) for x in trainer.losses],
        curve=curve,
    )
    if diverged:
        nan = float("nan")
        result.update(test_ppl=nan, test_bleu=nan, long_ppl=nan, long_bleu=nan, train_ppl=nan)
        return result
    test = score(model, task.splits["test"][: s.eval_samples],
                 task.references("test")[: s.eval_samples], task.detokenize)  # fmt: skip
    long = score(model, data.long_pairs, data.long_refs, task.detokenize)
    train_ppl = score(model, train_sub, None, None)["ppl"]
    result.update(
        test_ppl=test["ppl"], test_bleu=test["bleu"], test_exact=test["exact"],
        long_ppl=long["ppl"], long_bleu=long["bleu"], long_exact=long["exact"],
        train_ppl=train_ppl,
    )  # fmt: skip
    return result


def run_ablations(
    settings: AblationSettings,
    chosen: list[Variant] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train and score every chosen variant (default: DEFAULT_VARIANTS); return the study
    as a JSON-friendly dict {"settings", "task", "results", "hardware"}. ``progress``: a tqdm
    bar on a terminal; without it (or off a terminal) one line per finished variant on stderr."""
    settings.validate()
    chosen = chosen if chosen is not None else select(None, settings)
    data = make_data(settings)
    shown = StudyProgress(settings.steps * len(chosen), bar=progress)
    results = []
    try:
        for variant in chosen:
            shown.describe(variant.name)
            result = run_variant(variant, settings, data, shown.update)
            results.append(result)
            shown.finished(f"{variant.name}: test PPL {result['test_ppl']:.2f}, BLEU "
                           f"{result['test_bleu']:.1f}, long BLEU {result['long_bleu']:.1f} "
                           f"({result['seconds']:.0f} s)")  # fmt: skip
    finally:
        shown.close()
    return dict(
        settings=dataclasses.asdict(settings),
        task=data.task.summary() + f"; long set {len(data.long_pairs)} sentences of "
        f"{settings.long_min_words}-{settings.long_max_words} words",
        results=results,
        hardware=host.hardware("cpu"),
    )
