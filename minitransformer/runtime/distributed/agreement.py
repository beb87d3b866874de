"""The ranks agree on the run before the first batch: every rank gathers every rank's
arguments and compares them with rank 0's.

Why. ``mpiexec`` can start ranks with different commands (MPMD: ``mpiexec -n 1 CMD1 : -n 1
CMD2``), and a typo there is silent: with another ``--batch-size`` the ranks shard
different batches and the all-reduce adds gradients of unrelated rows; with another
``--steps``, ``--log-every`` or ``--checkpoint-every`` one rank waits for a collective the
others never make. So the fields that define the run (the TrainConfig, the resume point's
step, the collective timeout) must be equal on every rank. Not compared: what only rank 0
acts on or what a rank may choose for itself (``device``: each rank its own GPU;
``progress``, ``plots``: only rank 0 prints and draws).
"""

from __future__ import annotations

import dataclasses
from typing import Any

PER_RANK = frozenset({"device", "progress", "plots"})  # may differ from rank to rank


def run_arguments(trainer: Any, timeout: float) -> dict[str, Any]:
    """What must be equal on every rank: the TrainConfig's fields (but PER_RANK), the step
    the run starts from, and the collective timeout."""
    fields = {
        name: value
        for name, value in dataclasses.asdict(trainer.cfg).items()
        if name not in PER_RANK
    }
    fields["start step"] = trainer.step
    fields["collective timeout"] = timeout
    return fields


def differences(everyone: list[dict[str, Any]]) -> str | None:
    """One line naming each field whose value differs from rank 0's, with the ranks, or
    None when every rank agrees. The same answer on every rank (it sees the same list)."""
    reference = everyone[0]
    parts = []
    order = {name: k for k, name in enumerate(reference)}
    for name in sorted(set().union(*everyone), key=lambda n: (order.get(n, len(order)), n)):
        others = [r for r, args in enumerate(everyone) if args.get(name) != reference.get(name)]
        if others:
            values = ", ".join(f"{everyone[r].get(name)!r} on rank {r}" for r in others[:3])
            parts.append(f"{name} is {reference.get(name)!r} on rank 0 but {values}")
    if not parts:
        return None
    return (
        f"the ranks were started with different arguments ({'; '.join(parts)}), so they "
        "would not train one model. Fix: start "
        "every rank with the same command, e.g. mpiexec -n N minitransformer train TASK "
        "... --data-parallel (no `:` parts that differ)"
    )
