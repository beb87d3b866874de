"""TrainConfig: everything a training run needs, with the per-task defaults, checked when
it is made.

    cfg = TrainConfig(task="copy", out="runs/copy")      # None fields: the task's default
    cfg.resolved()                                       # a copy with the defaults filled in

A TrainConfig is stored in every training checkpoint, so ``--resume`` needs nothing else;
RESUMABLE names the fields a resumed run may change (the others make the run what it is).

Every number has one range, here: FIELD_RANGES for the TrainConfig fields and KNOB_RANGES for
the task knobs (``--knob n_test=...``). The command-line flags (cli/flags.py) and TrainConfig's
own checks read the same tables, so a checkpoint's ``train_config`` or an API caller cannot ask
for what the command line refuses (``n_test=10**12`` would never finish, ``max_len=10**8``
would allocate gigabytes, ``n_symbols=10**9`` would build a billion-word vocabulary).

This module stands on the ground: the device name is checked by the backend, where a
Trainer puts the model on it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass, field
from typing import Any

from ..checks import is_int, is_real
from ..data import tasks
from ..data.tasks import SPLITS
from ..errors import ConfigError
from .blocks import block_fields
from .model import PRESETS, TransformerConfig

# Defaults per task, chosen (and measured, see the README) so each reaches its target on a
# 2-core CPU: steps, batch size, warm-up, peak learning rate, and task knobs.
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "copy": dict(preset="tiny", steps=3000, batch_size=64, warmup=400, peak_lr=2e-3),
    "reverse": dict(preset="tiny", steps=3000, batch_size=64, warmup=400, peak_lr=2e-3),
    "sort": dict(preset="tiny", steps=3000, batch_size=64, warmup=400, peak_lr=2e-3),
    "translate": dict(preset="tiny", steps=4000, batch_size=64, warmup=800, peak_lr=3e-3),
    "translate-en-es": dict(preset="small", steps=4500, batch_size=64, warmup=1000, peak_lr=2e-3),
    "lm": dict(preset="small", steps=3000, batch_size=32, warmup=300, peak_lr=2e-3,
               label_smoothing=0.0),
}  # fmt: skip
LABEL_SMOOTHING = 0.1  # the paper's, every task's but the language model's (whose loss is
# the plain cross-entropy: its exponential is the perplexity, and the n-gram baselines compare)

MAX_STEPS = (
    1_000_000  # the paper's big model trained 300k steps; bounds the losses a checkpoint holds
)
MAX_BATCH = 100_000  # sentences per batch; far above what fits in memory at any preset
MAX_SEED = 2**64 - 1  # what a NumPy/CuPy generator takes
MAX_COUNT = 2**63 - 1  # periods and sample counts: they allocate nothing, any int64 will do

FIELD_RANGES: dict[str, tuple[int, int]] = {
    "steps": (1, MAX_STEPS),
    "warmup": (1, MAX_STEPS),
    "batch_size": (1, MAX_BATCH),
    "seed": (0, MAX_SEED),
    "log_every": (1, MAX_COUNT),
    "eval_every": (1, MAX_COUNT),
    "eval_samples": (1, MAX_COUNT),  # decoding stops at the split's end
    "checkpoint_every": (1, MAX_COUNT),
    "final_eval_samples": (1, MAX_COUNT),
    "average_last": (1, MAX_STEPS),  # a running sum: any count costs one copy of the weights
    "average_every": (1, MAX_STEPS),
}
"""The whole-number fields of TrainConfig: name -> (lowest, highest) allowed value."""

_SEQUENCE_KNOBS = {"n_symbols": (2, 100_000), "min_len": (1, 1_000), "max_len": (1, 1_000),
                   "n_train": (1, 1_000_000), "n_valid": (1, 100_000),
                   "n_test": (1, 100_000)}  # fmt: skip
KNOB_RANGES: dict[str, dict[str, tuple[int, int]]] = {
    "copy": _SEQUENCE_KNOBS,
    "reverse": _SEQUENCE_KNOBS,
    "sort": _SEQUENCE_KNOBS,
    # toy sentences have 2..17 words: a min_words above 12 would make sampling crawl or loop
    "translate": {"n_train": (1, 1_000_000), "n_valid": (1, 100_000), "n_test": (1, 100_000),
                  "lang_seed": (0, MAX_SEED), "min_words": (3, 12), "max_words": (3, 30)},
    # the shipped file holds verses of at most 20 words, about 13,000 of them
    "translate-en-es": {"max_words": (1, 20), "n_valid": (1, 100_000), "n_test": (1, 100_000),
                        "n_merges": (1, 50_000), "n_train": (1, 1_000_000)},
    "lm": {"max_words": (1, 20), "n_valid": (1, 100_000), "n_test": (1, 100_000),
           "n_merges": (1, 50_000), "n_train": (1, 1_000_000)},
}  # fmt: skip
"""The whole-number task knobs of each task: knob -> (lowest, highest) allowed value. The
highest values keep a task's data within seconds and a few hundred MB to build; with
MAX_TASK_TOKENS below they are what ``--knob`` and ``TrainConfig(task_knobs=...)`` accept."""

BOOL_KNOBS = frozenset({"lowercase"})
"""Task knobs that are True or False."""

CHOICE_KNOBS = {"tokenizer": tasks.LM_TOKENIZERS}
"""Task knobs that are one of a few words."""

NONE_KNOBS = frozenset({("translate-en-es", "n_train"), ("lm", "n_train")})
"""(task, knob) pairs where None means "the task's default" (all the data)."""

MAX_TASK_TOKENS = 20_000_000
"""Sentences times their longest length, over all splits, for the copy/reverse/sort and
translate tasks: the data is built in Python lists, about 40 bytes a token at worst."""


def knob_problem(task: str, key: str, value: Any) -> str | None:
    """What is wrong with task knob ``key = value`` of ``task`` (the expected range, as
    "a whole number in [1, 100,000]"), or None when it is fine. Unknown knobs are left to
    ``make_task`` (which names the valid ones)."""
    if key in BOOL_KNOBS:
        return None if isinstance(value, bool) else "True or False"
    if key in CHOICE_KNOBS:
        choices = CHOICE_KNOBS[key]
        return None if value in choices else "one of " + ", ".join(map(repr, choices))
    limits = KNOB_RANGES.get(task, {}).get(key)
    if limits is None:
        return None
    if value is None and (task, key) in NONE_KNOBS:
        return None
    low, high = limits
    if not is_int(value) or not low <= value <= high:
        return f"a whole number in [{low:,}, {high:,}]" + (
            " or None" if (task, key) in NONE_KNOBS else ""
        )
    return None


def task_size_problem(task: str, knobs: dict[str, Any]) -> str | None:
    """Sentences x longest length above MAX_TASK_TOKENS (knobs each within range can still
    ask for too much together), or None. Knobs not given count with the task's defaults."""
    length_key = {"translate": "max_words"}.get(task, "max_len")
    if length_key not in KNOB_RANGES.get(task, {}):
        return None
    value = {**_knob_defaults(task), **knobs}
    try:
        sentences = value["n_train"] + value["n_valid"] + value["n_test"]
        tokens = sentences * value[length_key]
    except (KeyError, TypeError):
        return None  # a bad knob: knob_problem names it
    if tokens > MAX_TASK_TOKENS:
        return (
            f"n_train + n_valid + n_test ({sentences:,}) times {length_key} "
            f"({value[length_key]:,}) is {tokens:,} tokens, above the cap of "
            f"{MAX_TASK_TOKENS:,}; lower them"
        )
    return None


def task_decides_problem(task: str, overrides: dict[str, Any]) -> str | None:
    """What is wrong with model overrides that contradict the task, or None. The task
    decides the vocabulary sizes (its tokenizer's) and the kind of model: the lm task trains
    the decoder-only TransformerLM, every other task an encoder-decoder that reads a source.
    (A max_len too short for the task's sequences is found by the Trainer, which knows them.)
    """
    for key in ("src_vocab", "tgt_vocab"):
        if key in overrides:
            return (
                f"sets {key}, which task {task!r} decides (its tokenizer's vocabulary); "
                "leave it out"
            )
    if "decoder_only" in overrides and overrides["decoder_only"] is not (task == "lm"):
        kind = (
            "trains a decoder-only language model"
            if task == "lm"
            else "trains an encoder-decoder that reads a source (the decoder-only model is "
            "the lm task's)"
        )
        value = str(overrides["decoder_only"]).lower()
        return f"sets decoder_only to {value}, but task {task!r} {kind}; leave decoder_only out"
    return None


def _knob_defaults(task: str) -> dict[str, Any]:
    """The task's own default for each knob (copy/reverse/sort pass theirs through)."""
    fn = tasks._sequence_task if task in ("copy", "reverse", "sort") else tasks.TASKS[task]
    return {
        k: p.default
        for k, p in inspect.signature(fn).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


# Options a resumed run may change; every other one is part of what the checkpoint is.
RESUMABLE = frozenset(
    {"steps", "progress", "plots", "device", "out", "log_every", "eval_every", "eval_samples",
     "checkpoint_every", "final_eval_split", "final_eval_samples", "average_last",
     "average_every", "cuda_graph"}
)  # fmt: skip
# (average_last and average_every change only the final model: a resume keeps the sum of the
# weights so far when all its steps are in the new schedule, train/averaging.py. cuda_graph
# may change, as device may, for a run that must go on another way (a GPU short of memory for
# the graphs); the dropout masks of the two modes differ, so resuming warns: runs/resume.py)

SAVED_BEFORE_THE_FIELD: dict[str, Any] = {"cuda_graph": False}
"""Fields added after runs were saved without them, with the value such a run had: before
``cuda_graph`` a run was eager unless ``--cuda-graph`` was given, which was never recorded.
A stored train config (a checkpoint's) is read with these under it."""


@dataclass
class TrainConfig:
    """Everything a run needs; stored in its checkpoint so ``--resume`` needs nothing else.

    ``None`` means "the task's default" (TASK_DEFAULTS).
    """

    task: str = "copy"
    preset: str | None = None
    steps: int | None = None
    batch_size: int | None = None
    warmup: int | None = None
    peak_lr: float | None = None
    label_smoothing: float | None = None  # None: the task's (LABEL_SMOOTHING; lm: 0)
    dropout: float | None = None  # None: the preset's
    clip_norm: float | None = 1.0
    seed: int = 0
    device: str = "cpu"
    # on a CUDA device: replay each batch shape's step from a CUDA graph (fast/gpu/
    # cuda_graph.py), else every step eagerly; ignored on the CPU. Kept by --resume (a run
    # saved before this field has none: SAVED_BEFORE_THE_FIELD, False).
    cuda_graph: bool = True
    out: str = "runs/copy"
    log_every: int = 50
    eval_every: int = 500
    eval_samples: int = 200  # sentences decoded at each periodic evaluation
    checkpoint_every: int = 500
    final_eval_split: str = "test"
    final_eval_samples: int | None = 1000  # None: the whole split
    average_last: int = 5  # the final model: the mean of the weights at the last 5 steps ...
    average_every: int = 100  # ... 100 apart (the paper's §6.1; 1: the last step's weights)
    task_knobs: dict[str, Any] = field(default_factory=dict)
    model_overrides: dict[str, Any] = field(default_factory=dict)
    progress: bool = True  # a tqdm bar; without it, one plain line per log step on stderr
    plots: bool = True  # draw plots/*.png at the end (matplotlib; a few seconds)

    def __post_init__(self) -> None:
        """Every field given is checked here, at construction (not after training)."""
        _check_fields(self)

    def resolved(self) -> TrainConfig:
        """A copy with every ``None`` replaced by the task's default (checked again, as every
        TrainConfig is when it is made: a field set after construction is caught here)."""
        defaults = {"label_smoothing": LABEL_SMOOTHING, **TASK_DEFAULTS.get(self.task, {})}
        return dataclasses.replace(
            self, **{k: v for k, v in defaults.items() if getattr(self, k) is None}
        )


_NONE_FIELDS = frozenset(
    {"steps", "batch_size", "warmup", "final_eval_samples", "label_smoothing"}
)  # None: the task's default (final_eval_samples: the whole split)


def _check_fields(cfg: TrainConfig) -> None:
    """ConfigError naming the first bad field of ``cfg`` (``None``s are the task's defaults)."""

    def bad(name: str, expected: str) -> ConfigError:
        value = getattr(cfg, name)
        return ConfigError(f"TrainConfig: {name} must be {expected}, got {value!r}")

    if not isinstance(cfg.task, str) or cfg.task not in TASK_DEFAULTS:
        raise ConfigError(
            f"TrainConfig: unknown task {cfg.task!r}; choose one of {', '.join(TASK_DEFAULTS)}"
        )
    for key, (low, high) in FIELD_RANGES.items():
        value = getattr(cfg, key)
        if value is None and key in _NONE_FIELDS:
            continue
        kind = "a positive integer" if low == 1 else "a non-negative integer"
        if not is_int(value) or value < low:
            raise bad(key, kind + (" or None" if key == "final_eval_samples" else ""))
        if value > high:
            raise bad(key, f"{kind} of at most {high:,}")
    if cfg.peak_lr is not None and not (is_real(cfg.peak_lr) and 0 < cfg.peak_lr < 1):
        raise bad("peak_lr", "in (0, 1) (a number, e.g. 1e-3)")
    ls = cfg.label_smoothing
    if ls is not None and not (is_real(ls) and 0 <= ls < 1):
        raise bad("label_smoothing", "a number in [0, 1) or None (the task's; the paper: 0.1)")
    if cfg.dropout is not None and not (is_real(cfg.dropout) and 0 <= cfg.dropout < 1):
        raise bad("dropout", "a number in [0, 1) or None (the preset's)")
    if cfg.clip_norm is not None and not (is_real(cfg.clip_norm) and 0 < cfg.clip_norm < math.inf):
        raise bad("clip_norm", "positive and finite (or None: no clipping)")
    if cfg.preset is not None and cfg.preset not in PRESETS:
        raise bad("preset", f"None or one of {', '.join(PRESETS)}")
    if cfg.final_eval_split not in SPLITS:
        raise bad("final_eval_split", f"one of {', '.join(SPLITS)}")
    for key in ("task_knobs", "model_overrides"):
        if not isinstance(getattr(cfg, key), dict):
            raise bad(key, "a dict {name: value}")
    for key, value in cfg.task_knobs.items():
        problem = knob_problem(cfg.task, key, value)
        if problem:
            raise ConfigError(
                f"TrainConfig: task_knobs[{key!r}] must be {problem} for task {cfg.task!r}, "
                f"got {value!r}"
            )
    size = task_size_problem(cfg.task, cfg.task_knobs)
    if size:
        raise ConfigError(f"TrainConfig: task_knobs of task {cfg.task!r}: {size}")
    unknown = sorted(
        set(cfg.model_overrides) - {f.name for f in dataclasses.fields(TransformerConfig)}
        - {"block"}
    )  # fmt: skip
    if unknown:
        raise bad("model_overrides", f"a dict of TransformerConfig fields (and block); "
                  f"unknown: {unknown}")  # fmt: skip
    if "block" in cfg.model_overrides:  # the layer's switches at once (config/blocks.py)
        block_fields("TrainConfig: model_overrides", cfg.model_overrides["block"])
    problem = task_decides_problem(cfg.task, cfg.model_overrides)
    if problem:
        raise ConfigError(f"TrainConfig: model_overrides {problem}")
    for key in ("progress", "plots", "cuda_graph"):
        if not isinstance(getattr(cfg, key), bool):
            raise bad(key, "True or False")
    if not isinstance(cfg.device, str) or not isinstance(cfg.out, str):
        raise bad("device" if not isinstance(cfg.device, str) else "out", "a string")
    if not cfg.out.strip():  # Path("") is the current directory: a run among the user's files
        raise bad("out", "a directory name, not empty or blank (for the current directory: '.')")
