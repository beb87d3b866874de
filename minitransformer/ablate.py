"""Ablations: the paper's Table 3 at toy scale — vary one thing, train briefly, measure.

    minitransformer ablate                        # every variant, a few minutes on 2 cores
    minitransformer ablate --fast --only base,no-dropout --out runs/ablate-fast

Task: the synthetic translation pair (``data/toylang.py``), because it needs what the paper's
task needs — alignment, reordering (verb-final), agreement — and has a real BLEU, while one
run is short enough to repeat eleven times. The copy task would not do: it saturates within
a few hundred steps whatever the variant. Training sentences have ``min_words..max_words``
words (3..10 by default); a second held-out set, **long**, has ``long_min_words..
long_max_words`` (12..15): longer than any sentence seen in training, which is where
learned and sinusoidal positions part ways.

Every variant starts from the same seed (same data, same batch order, same initial weights
where the shapes agree) and changes ONE thing of the base config (tiny sizes d_model 64, h 4,
N 2, d_ff 256, with the paper's P_drop 0.1, ε_ls 0.1, warm-up and post-LN):

    base                 the base config
    heads-1/2/8          h at fixed d_model (d_k = d_v = d_model / h)      (Table 3 row A)
    d_k-4                d_k = d_model/(4h) for queries and keys; d_v kept (row B)
    no-scaling           logits q kᵀ instead of q kᵀ/√d_k, in training and decoding
    no-warmup            lr starts at the peak, then the same 1/√step decay (§5.3 without
                         its ramp)
    no-label-smoothing   ε_ls = 0                                          (row D)
    no-dropout           P_drop = 0                                        (row D)
    learned-positions    a learned position table, randomly initialised    (row E)
    pre-ln               x + Sublayer(LN(x)) instead of LN(x + Sublayer(x))

Metrics, as the paper's: **perplexity** per target token, exp(cross-entropy WITHOUT label
smoothing) under teacher forcing, and corpus **BLEU** (sacreBLEU) of greedy translations, both
on the held-out test split; plus the same on the long set, and the perplexity of training
sentences (eval mode) so the train/held-out gap is visible.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import backend, runs
from . import functional as F
from .data.batching import make_batch
from .data.metrics import bleu, exact_match
from .data.tasks import Task, translate_task
from .data.toylang import ToyLanguage
from .errors import ConfigError, TrainingError
from .optim import NoamSchedule
from .tensor import no_grad

# The paper's Table 3 (newstest2013 dev set): (perplexity, BLEU) of the closest row.
PAPER: dict[str, tuple[float, float, str]] = {
    "base": (4.92, 25.8, "base (h 8, d_k 64)"),
    "heads-1": (5.29, 24.9, "h 1 (d_k 512)"),
    "heads-2": (5.00, 25.5, "h 4 = half the base's heads"),
    "heads-8": (4.91, 25.8, "h 16 = twice the base's heads"),
    "heads-16": (5.01, 25.4, "h 32 = four times the base's heads"),
    "d_k-4": (5.16, 25.1, "d_k 16 = a quarter of the base's"),
    "d_k-8": (5.01, 25.4, "d_k 32 = half the base's"),
    "no-dropout": (5.77, 24.6, "P_drop 0.0"),
    "dropout-0.2": (4.95, 25.5, "P_drop 0.2"),
    "no-label-smoothing": (4.67, 25.3, "ε_ls 0.0"),
    "label-smoothing-0.2": (5.47, 25.7, "ε_ls 0.2"),
    "learned-positions": (4.92, 25.7, "learned positional embedding"),
}


@dataclass(frozen=True)
class Variant:
    """One row of the table: a name, what it changes, and the changes themselves.

    ``model``: TransformerConfig fields; ``train``: dropout / label_smoothing; ``warmup``:
    False = no warm-up ramp; ``random_positions``: a learned table drawn at random (the
    library's learned table starts from the sinusoids, which would hide the difference).
    """

    name: str
    change: str
    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    warmup: bool = True
    random_positions: bool = False


def variants(base_h: int = 4, d_model: int = 64) -> list[Variant]:
    """Every variant, default ones first (see DEFAULT_VARIANTS)."""
    d_k = d_model // base_h
    out = [Variant("base", f"h {base_h}, d_k {d_k}, P_drop 0.1, ε_ls 0.1, post-LN")]
    for h in (1, 2, 8, 16):
        if d_model % h == 0 and h != base_h:
            out.append(Variant(f"heads-{h}", f"h {h} (d_k = d_v = {d_model // h})", {"h": h}))
    for div in (4, 2):
        if d_k // div >= 1:
            small = d_k // div
            out.append(Variant(f"d_k-{small}", f"d_k {small} (d_v {d_k})", {"key_dim": small}))
    out += [
        Variant("no-scaling", "logits q·k, not q·k/√d_k", {"scale_attention": False}),
        Variant("no-warmup", "no warm-up (lr starts at the peak)", warmup=False),
        Variant("no-label-smoothing", "ε_ls 0", train={"label_smoothing": 0.0}),
        Variant("label-smoothing-0.2", "ε_ls 0.2", train={"label_smoothing": 0.2}),
        Variant("no-dropout", "P_drop 0", train={"dropout": 0.0}),
        Variant("dropout-0.2", "P_drop 0.2", train={"dropout": 0.2}),
        Variant(
            "learned-positions",
            "learned positions (random init)",
            {"learned_positions": True},
            random_positions=True,
        ),
        Variant("pre-ln", "pre-LN: x + Sublayer(LN(x))", {"pre_norm": True}),
    ]
    return out


DEFAULT_VARIANTS = ("base", "heads-1", "heads-2", "heads-8", "d_k-4", "no-scaling",
                    "no-warmup", "no-label-smoothing", "no-dropout", "learned-positions",
                    "pre-ln")  # fmt: skip


@dataclass
class AblationSettings:
    """Sizes of one ablation study. ``fast()`` gives the lesson/test-sized one.

    The base model is the ``tiny`` preset's sizes (d_model 64, h 4, N 2, d_ff 256) with the
    paper's dropout 0.1 and label smoothing 0.1; ``model`` overrides its fields.
    """

    steps: int = 600
    seed: int = 0
    batch_size: int = 64
    warmup: int = 150
    peak_lr: float = 3e-3
    n_train: int = 4000
    min_words: int = 3
    max_words: int = 10
    long_min_words: int = 12
    long_max_words: int = 15
    eval_samples: int = 500  # test and train sentences scored at the end
    long_samples: int = 300
    curve_every: int = 100  # train/valid perplexity every this many steps (0: only at the end)
    curve_samples: int = 200
    dropout: float = 0.1
    label_smoothing: float = 0.1
    model: dict[str, Any] = field(
        default_factory=lambda: {"d_model": 64, "h": 4, "N": 2, "d_ff": 256}
    )

    @classmethod
    def fast(cls, **changes: Any) -> AblationSettings:
        """A study small enough for a lesson in fast mode or a test."""
        base = dict(steps=200, warmup=60, n_train=1500, eval_samples=150, long_samples=100,
                    curve_every=50, curve_samples=100)  # fmt: skip
        return cls(**{**base, **changes})

    def validate(self) -> AblationSettings:
        """Raise ConfigError naming each bad field; return self."""
        problems = []
        for name in ("steps", "batch_size", "warmup", "n_train", "eval_samples",
                     "long_samples", "curve_samples", "min_words"):  # fmt: skip
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                problems.append(f"{name} must be a positive integer, got {value!r}")
        if type(self.curve_every) is not int or self.curve_every < 0:
            problems.append(f"curve_every must be an integer >= 0, got {self.curve_every!r}")
        if type(self.seed) is not int:
            problems.append(f"seed must be an integer, got {self.seed!r}")
        if not 3 <= self.min_words <= self.max_words < self.long_min_words <= self.long_max_words:
            problems.append(
                "need 3 <= min_words <= max_words < long_min_words <= long_max_words (the long "
                f"set must be longer than any training sentence), got {self.min_words}, "
                f"{self.max_words}, {self.long_min_words}, {self.long_max_words}"
            )
        if not 0 < self.peak_lr < 1:
            problems.append(f"peak_lr must be in (0, 1), got {self.peak_lr!r}")
        if not 0 <= self.dropout < 1 or not 0 <= self.label_smoothing < 1:
            problems.append("dropout and label_smoothing must be in [0, 1)")
        if problems:
            raise ConfigError("invalid AblationSettings: " + "; ".join(problems))
        return self


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
    from .train import TrainConfig, Trainer

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
    from .decode import greedy_decode

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


def select(only: list[str] | None, settings: AblationSettings) -> list[Variant]:
    """The variants named in ``only`` (in the order given), or the default ones."""
    model = settings.model
    catalogue = {v.name: v for v in variants(model.get("h", 4), model.get("d_model", 64))}
    names = list(only) if only else [n for n in DEFAULT_VARIANTS if n in catalogue]
    unknown = [n for n in names if n not in catalogue]
    if unknown:
        raise ConfigError(
            f"--only: unknown variant(s) {unknown}; choose from {', '.join(catalogue)}"
        )
    if len(set(names)) != len(names):
        raise ConfigError(f"--only: a variant is named twice in {names}")
    return [catalogue[n] for n in names]


def run_ablations(
    settings: AblationSettings,
    chosen: list[Variant] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train and score every chosen variant (default: DEFAULT_VARIANTS); return the study
    as a JSON-friendly dict {"settings", "task", "results", "hardware"}. ``progress``: a tqdm
    bar on a terminal, else one line per finished variant on stderr."""
    settings.validate()
    chosen = chosen if chosen is not None else select(None, settings)
    data = make_data(settings)
    bar = _bar(settings.steps * len(chosen)) if progress else None
    results = []
    try:
        for variant in chosen:
            if bar is not None:
                bar.set_description(variant.name)
            result = run_variant(variant, settings, data, bar.update if bar else None)
            results.append(result)
            line = (f"{variant.name}: test PPL {result['test_ppl']:.2f}, BLEU "
                    f"{result['test_bleu']:.1f}, long BLEU {result['long_bleu']:.1f} "
                    f"({result['seconds']:.0f} s)")  # fmt: skip
            if bar is not None:
                bar.write(line, file=sys.stderr)
            elif progress:
                print(line, file=sys.stderr, flush=True)
    finally:
        if bar is not None:
            bar.close()
    from .train import _hardware

    return dict(
        settings=dataclasses.asdict(settings),
        task=data.task.summary() + f"; long set {len(data.long_pairs)} sentences of "
        f"{settings.long_min_words}-{settings.long_max_words} words",
        results=results,
        hardware=_hardware("cpu"),
    )


def _bar(total: int) -> Any:
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="step", dynamic_ncols=True, file=sys.stderr)


# ------------------------------------------------------------------ reporting
def _num(x: float, fmt: str) -> str:
    return "diverged" if x != x else format(x, fmt)  # NaN -> diverged


def markdown_table(study: dict[str, Any]) -> str:
    """The study as a Markdown table, ours next to the paper's closest row."""
    lines = [
        "| variant | what changes | params | train PPL | test PPL | test BLEU | long PPL "
        "| long BLEU | paper PPL / BLEU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in study["results"]:
        paper = PAPER.get(r["name"])
        ref = f"{paper[0]:.2f} / {paper[1]:.1f}" if paper else "—"
        lines.append(
            f"| {r['name']} | {r['change']} | {r['parameters']:,} | "
            f"{_num(r['train_ppl'], '.2f')} | {_num(r['test_ppl'], '.2f')} | "
            f"{_num(r['test_bleu'], '.1f')} | {_num(r['long_ppl'], '.2f')} | "
            f"{_num(r['long_bleu'], '.1f')} | {ref} |"
        )
    s = study["settings"]
    lines.append("")
    lines.append(
        f"{s['steps']} steps of batch {s['batch_size']} per variant, seed {s['seed']}; "
        f"{study['task']}. PPL: per target token, no label smoothing, teacher forcing; BLEU: "
        "sacreBLEU of greedy output. Paper: Table 3, newstest2013 (base h 8, d_k 64)."
    )
    return "\n".join(lines) + "\n"


def plot(study: dict[str, Any], path: str | Path) -> Path:
    """Four panels: test BLEU, test perplexity, long-sentence BLEU, training-loss curves."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    results = study["results"]
    names = [r["name"] for r in results]
    fig = Figure(figsize=(14, 8.5))
    axes = fig.subplots(2, 2)
    base = next((r for r in results if r["name"] == "base"), None)
    panels = (
        ("test_bleu", "test BLEU (higher is better)", axes[0, 0]),
        ("test_ppl", "test perplexity (lower is better)", axes[0, 1]),
        ("long_bleu", "BLEU on sentences longer than any in training", axes[1, 0]),
    )
    for key, title, ax in panels:
        values = [r[key] for r in results]
        colors = ["C0" if n == "base" else "C1" for n in names]
        ax.barh(range(len(names)), [0 if v != v else v for v in values], color=colors)
        ax.set_yticks(range(len(names)), names)
        ax.invert_yaxis()
        for i, v in enumerate(values):
            ax.text(0 if v != v else v, i, " " + _num(v, ".2f" if "ppl" in key else ".1f"),
                    va="center", fontsize=8)  # fmt: skip
        if base is not None and base[key] == base[key]:
            ax.axvline(base[key], color="C0", ls=":", lw=1)
        ax.set_title(title)
    ax = axes[1, 1]
    for i, r in enumerate(results):
        losses = r["train_loss"]
        k = max(1, len(losses) // 40)
        smooth = [sum(losses[j : j + k]) / k for j in range(0, len(losses) - k + 1, k)]
        ax.plot([j + k for j in range(0, len(losses) - k + 1, k)], smooth, label=r["name"],
                color=f"C{i % 10}", ls="-" if i < 10 else "--")  # fmt: skip
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (label-smoothed where ε_ls > 0)")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("training loss")
    s = study["settings"]
    fig.suptitle(f"Ablations at toy scale: {s['steps']} steps each, seed {s['seed']}")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


OUTPUTS = ("ablations.json", "ablations.md", "plots/ablations.png")


def write_study(study: dict[str, Any], out: str | Path, overwrite: bool = False) -> list[Path]:
    """ablations.json, ablations.md and plots/ablations.png into ``out``; refuses (a
    RunDirectoryError) when ``out`` already holds a study, unless ``overwrite``."""
    out = Path(out)
    check_out(out, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ablations.json").write_text(json.dumps(study, indent=1, allow_nan=True) + "\n")
    (out / "ablations.md").write_text(markdown_table(study))
    return [out / "ablations.json", out / "ablations.md", plot(study, out / "plots/ablations.png")]


def check_out(out: str | Path, overwrite: bool = False) -> None:
    """Refuse an ``out`` that is a file, or holds a study (unless ``overwrite``)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise runs.RunDirectoryError(f"--out {str(out)!r} is a file; pass a directory")
    held = [name for name in OUTPUTS if (out / name).exists()]
    if held and not overwrite:
        raise runs.RunDirectoryError(
            f"--out {str(out)!r} already holds an ablation study ({', '.join(held)}); pass "
            "another --out, or --overwrite to replace it"
        )
