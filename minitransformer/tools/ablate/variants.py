"""The ablation study's rows and sizes: each ``Variant`` changes ONE thing of the base
config; ``AblationSettings`` sizes the study; ``select`` picks the variants to run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError


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
