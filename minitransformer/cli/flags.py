"""The command line's flag types: each converts a flag's text and checks its value where it
enters (an argparse ``type=``), so a mistake is a usage error naming the flag, what was
expected and what was given, before any task or model is built.

``checked(convert, ok, expected)`` (from bench/options.py, which the ``bench`` flags need
below the CLI) builds the simple ones; ``model_override`` checks ``--model KEY=VALUE``
against TransformerConfig's fields, ``checked_knobs`` the ``--knob`` values against the
task's own defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
from typing import Any

from ..config import MAX_LEN, TransformerConfig
from ..config.blocks import BLOCKS
from ..config.train import CHOICE_KNOBS, MAX_BATCH, MAX_SEED, knob_problem, task_size_problem
from ..data import tasks
from ..data.text import readable_text
from ..errors import ConfigError
from ..runtime.sampler import MAX_TEXTS
from ..tools.bench.options import checked, positive_float, positive_int

TASKS = ("copy", "reverse", "sort", "translate", "translate-en-es", "lm")

non_negative_int = checked(int, lambda v: v >= 0, "a non-negative integer")
batch_size = checked(int, lambda v: 0 < v <= MAX_BATCH, f"a positive integer <= {MAX_BATCH:,}")
probability = checked(float, lambda v: 0 <= v < 1, "a number in [0, 1)")
alpha = checked(
    float, lambda v: 0 <= v < math.inf, "a finite number >= 0 (0 = no length penalty; paper 0.6)"
)
beam = checked(int, lambda v: v > 0, "a positive integer (1 = greedy; 4 is the paper's)")
temperature = checked(
    float, lambda v: 0 <= v < math.inf, "a finite number >= 0 (0 = greedy, 1 = the model's own)"
)
max_len = checked(
    int, lambda v: 0 < v <= MAX_LEN, f"a positive integer <= {MAX_LEN:,} (the model's positions)"
)
max_new_tokens = checked(
    int, lambda v: 0 < v <= MAX_LEN, f"a positive integer <= {MAX_LEN:,} (a model's most positions)"
)
samples = checked(
    int, lambda v: 0 < v <= MAX_TEXTS, f"a positive integer <= {MAX_TEXTS:,} (texts in all)"
)
seed = checked(int, lambda v: 0 <= v <= MAX_SEED, f"a whole number in 0..{MAX_SEED:,}")
BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
MODEL_KEYS = tuple(f.name for f in dataclasses.fields(TransformerConfig))
"""The keys of ``--model KEY=VALUE``: TransformerConfig's fields (and block, the paper's,
GPT-2's or Llama's switches at once, config/blocks.py; and the lm's tokenizer)."""

__all__ = [
    "BOOLS", "MAX_BATCH", "MODEL_KEYS", "TASKS", "alpha", "argv_text", "batch_size", "beam",
    "bool_text", "check_text_count", "checked", "checked_knobs", "int_text", "key_value",
    "knobs_text", "max_len", "max_new_tokens", "model_override", "name_list",
    "non_negative_int", "path_text", "positive_float", "positive_int", "probability",
    "samples", "seed", "temperature",
]  # fmt: skip


def bool_text(text: str) -> bool:
    """true/false, 1/0, yes/no (any case); anything else is an error, not True."""
    value = BOOLS.get(text.strip().lower())
    if value is None:
        raise ValueError(f"expected true/false, 1/0 or yes/no, got {text!r}")
    return value


def argv_text(text: str) -> str:
    """A sentence or prompt from the command line (translate's sentences, generate's
    prompts), decoded once by the project's rule (data/text.py ``readable_text``): bytes
    that are not UTF-8 become U+FFFD, as on translate's stdin."""
    return readable_text(text)


def check_text_count(prompts: int, samples: int) -> None:
    """generate's prompts × --samples: at most MAX_TEXTS texts a command (a stream needs one
    batch's memory, but its time grows with the count)."""
    if prompts > MAX_TEXTS:
        raise ConfigError(
            f"{prompts:,} prompts are more than the {MAX_TEXTS:,} texts one command writes; "
            f"give at most {MAX_TEXTS:,} prompts (run the command again for more)"
        )
    if prompts * samples > MAX_TEXTS:
        raise ConfigError(
            f"--samples {samples:,} for {prompts:,} prompts is {prompts * samples:,} texts, more "
            f"than the {MAX_TEXTS:,} one command writes; give --samples {MAX_TEXTS // prompts:,} "
            "or less, or fewer prompts (run the command again for more)"
        )


def path_text(text: str) -> str:
    """A file or directory name (--out, --run, --to, --resume): not empty, not blank.

    An empty --out would be the current directory (Path("") is "."): a run written among
    the user's own files. A name may start with a dash (``--out=-oops``); the commands that
    print it back write ``./-oops``, which a shell and this parser read as the same path.
    """
    if not text.strip():
        hint = "for the current directory, give ." if text == "" else "a name is not blank"
        raise argparse.ArgumentTypeError(f"expected a file or directory name, got {text!r}; {hint}")
    return text


def int_text(text: str) -> int:
    """A whole number written as one ("8", "-3"), not "8.5", "1e3" or "abc"."""
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"expected a whole number, got {text!r}") from None


def model_override(text: str) -> tuple[str, Any]:
    """--model KEY=VALUE for a TransformerConfig field, converted to the field's type and
    range-checked here, before any task or model is built."""
    key, value = key_value(text)
    raw = text.partition("=")[2].strip()
    if key == "tokenizer":  # the lm task's knob, accepted here too (train_command moves it)
        if raw not in CHOICE_KNOBS["tokenizer"]:
            choices = " or ".join(CHOICE_KNOBS["tokenizer"])
            raise argparse.ArgumentTypeError(f"{text!r}: the tokenizer is {choices}")
        return key, raw
    kinds = {f.name: str(f.type) for f in dataclasses.fields(TransformerConfig)}
    if key == "block":  # the layer's switches at once (config/blocks.py); --model KEY wins
        if raw not in BLOCKS:
            raise argparse.ArgumentTypeError(
                f"{text!r}: the block is one of {', '.join(BLOCKS)} (the paper's layer, "
                "GPT-2's or Llama's)"
            )
        return key, raw
    if key not in MODEL_KEYS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: unknown key {key!r}; valid keys: {', '.join(sorted(MODEL_KEYS))}, "
            "block (paper, gpt2 or llama)"
        )
    try:
        if kinds[key] == "bool":
            return key, bool_text(raw)
        if kinds[key] in ("int | None", "str | None") and raw.lower() == "none":
            return key, None  # key_dim, kv_heads, rotary...: None = the default behaviour
        if kinds[key] in ("int", "int | None"):
            value = int_text(raw)
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
            if key == "rotary_base" and not 1 < value < math.inf:  # NaN fails too
                raise ValueError(f"rotary_base must be a finite number > 1, got {raw!r}")
            if key == "norm_eps" and not 0 < value < 1:
                raise ValueError(f"norm_eps must be a number in (0, 1), e.g. 1e-5, got {raw!r}")
            if key != "rotary_base" and not 0 <= value < 1:  # dropout, label_smoothing
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


def key_value(text: str) -> tuple[str, Any]:
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


def name_list(text: str) -> list[str]:
    """NAME,NAME,... -> the names (none empty)."""
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"expected NAME,NAME,... without empty names, got {text!r}"
        )
    return names


def knobs_text() -> str:
    """Each task's ``--knob`` keys, as ``make_task`` checks them (tasks with the same keys
    together): ``copy, reverse, sort: n_symbols, ...; translate: ...``."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for task in tasks.TASKS:
        groups.setdefault(tuple(tasks._knob_names(task)), []).append(task)
    return "; ".join(f"{', '.join(t)}: {', '.join(keys)}" for keys, t in groups.items())


def checked_knobs(task: str, knobs: list[tuple[str, Any]]) -> dict[str, Any]:
    """--knob values converted to the type of the task's default for that knob (int or
    bool) and range-checked with the ranges TrainConfig uses (config/train.py KNOB_RANGES);
    an unknown knob is left for make_task to name."""
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
            if text not in BOOLS:
                raise ConfigError(f"{shown}: expected true/false, 1/0 or yes/no")
            value = BOOLS[text]
        problem = knob_problem(task, key, value)
        if problem:
            raise ConfigError(f"{shown}: expected {problem}, e.g. {key}={p.default or 100}")
        out[key] = value
    size = task_size_problem(task, out)
    if size:
        raise ConfigError(f"--knob: {size}")
    return out
