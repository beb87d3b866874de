"""Count what one training step costs in calls: Python calls, and array-library calls.

On a GPU every array call is a kernel launch (~12 µs for CuPy), and on any device every
Python call is interpreter time, so at small sizes a step's speed is set by these counts,
not by its arithmetic. Two counts for one step of the Trainer (the copy task, ``tiny``):

- ``python_calls``: every call cProfile sees (Python functions and C builtins), on NumPy.
- ``array_calls``: calls from outside the array library into it, on the array-api-strict
  stand-in, where every array operation (functions and operators such as ``a * b``) is a
  visible Python call. Attribute reads (``.shape``, ``.dtype``, ``.device``) and the
  library's own internal calls are not counted: on CuPy they launch nothing.

    python -m minitransformer.callcount          # prints both counts for one tiny step

``tests/test_callcount.py`` pins a budget for both, so a regression fails CI. A tool on
the commands' floor, above the Trainer it measures.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
from collections import Counter
from typing import Any

from .train import TrainConfig, Trainer

# Reads of array attributes and the strict library's Device objects: free on a GPU.
_NOT_CALLS = {
    "shape",
    "ndim",
    "dtype",
    "device",
    "size",
    "T",
    "mT",
    "__repr__",
    "__hash__",
    "__len__",
    "__init__",
    "_new",
}


def _trainer(device: str, tmp: str, dropout: float) -> Trainer:
    """A Trainer of the copy task on ``device``, writing (nothing it keeps) under ``tmp``."""
    cfg = TrainConfig(
        task="copy",
        device=device,
        out=tmp,
        progress=False,
        plots=False,
        dropout=dropout,
        task_knobs=dict(n_train=256, n_valid=8, n_test=8),
    )
    return Trainer(cfg)


def count_step_calls(dropout: float = 0.1, warmup_steps: int = 3) -> dict[str, Any]:
    """Python calls (NumPy) and array calls (strict stand-in) of one tiny training step."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = _trainer("cpu", tmp, dropout)
        batches = [next(trainer.stream) for _ in range(warmup_steps + 1)]
        for b in batches[:-1]:
            trainer.train_step(b)
        profile = cProfile.Profile()
        profile.enable()
        trainer.train_step(batches[-1])
        profile.disable()
        out["python_calls"] = pstats.Stats(profile).total_calls
        try:
            import array_api_strict  # noqa: F401
        except ImportError:
            return out
        trainer = _trainer("strict:device1", tmp, dropout)
        for b in batches[:-1]:
            trainer.train_step(b)
        counts: Counter[str] = Counter()

        def hook(frame: Any, event: str, arg: Any) -> None:  # noqa: ARG001
            if event != "call" or not frame.f_globals.get("__name__", "").startswith(
                "array_api_strict"
            ):
                return
            caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
            name = frame.f_code.co_name
            if caller.startswith("array_api_strict") or name in _NOT_CALLS:
                return
            if frame.f_code.co_qualname.startswith(("Device.", "_DType.", "DType.")):
                return
            counts[name] += 1

        sys.setprofile(hook)
        try:
            trainer.train_step(batches[-1])
        finally:
            sys.setprofile(None)
        out["array_calls"] = sum(counts.values())
        out["array_calls_by_name"] = dict(counts.most_common())
    return out


def main() -> int:
    """``python -m minitransformer.callcount``: print both counts of one tiny step."""
    counts = count_step_calls()
    print(
        f"one tiny training step (copy task, dropout 0.1): {counts['python_calls']} Python "
        f"calls (NumPy), {counts.get('array_calls', 'n/a')} array calls (strict stand-in)"
    )
    top = list(counts.get("array_calls_by_name", {}).items())[:12]
    if top:
        print("most frequent array calls: " + ", ".join(f"{k} {v}" for k, v in top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
