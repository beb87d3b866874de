"""The data-parallel benchmark, ``bench --data-parallel N``: tokens/s of one process with 1
and with N BLAS threads against N MPI ranks with one thread each, on the same global batch.

``data_parallel_main`` (the parent) runs each configuration as ``python -m
minitransformer.tools.bench --dp-worker PRESET BATCH SECONDS THREADS PARALLEL``, under ``mpiexec
-n N`` for the ranks; ``data_parallel_worker`` is what such a worker times.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...backend import host
from ...errors import install_hint
from .options import write_json


def data_parallel_worker(preset: str, batch_size: int, seconds: float, threads: int,
                         parallel: bool) -> dict[str, Any] | None:  # fmt: skip
    """Time training steps of ``preset`` on the copy task with the global ``batch_size``:
    one process, or (``parallel``) this rank of an MPI job, with ``threads`` BLAS threads.

    Returns (on rank 0; None elsewhere) tokens/s of the global batch, the step time, the
    seconds per step spent in the gradient all-reduce (waiting for the slowest rank
    included) and those of the all-reduce alone (the same buffer, ranks already in step).
    """
    from ...runtime.distributed import World  # here: only a worker process trains (and needs MPI)
    from ...train import TrainConfig, Trainer

    previous = host.set_blas_threads(threads)
    world = World.from_mpi() if parallel else None
    cfg = TrainConfig(task="copy", preset=preset, batch_size=batch_size, out="unused")
    trainer = Trainer(cfg)
    if world is not None:
        world.attach(trainer)

    def step() -> int:
        batch = next(trainer.stream)
        if world is not None:
            shard, trainer.loss_scale = world.shard(batch)
            trainer.train_step(shard)
        else:
            trainer.train_step(batch)
        return batch.n_tokens

    for _ in range(3):  # warm-up: allocator, BLAS buffers
        step()
    trainer.read_back()
    t = time.perf_counter()
    step()
    trainer.read_back()
    n = max(3, int(seconds / max(time.perf_counter() - t, 1e-6)))
    if world is not None:
        n = world.bcast(n)  # every rank takes the same number of steps
        world.allreduce_time.seconds, world.allreduce_time.calls = 0.0, 0
    tokens, t0 = 0, time.perf_counter()
    for _ in range(n):
        tokens += step()
    trainer.read_back()
    elapsed = time.perf_counter() - t0
    grad = trainer.optimizer.groups[0].grad
    result = dict(preset=preset, ranks=world.size if world else 1, threads=threads,
                  batch_size=batch_size, steps=n, tokens_per_s=tokens / elapsed,
                  step_ms=1e3 * elapsed / n, grad_mb=grad.nbytes / 2**20)  # fmt: skip
    if world is not None:
        result["allreduce_ms"] = 1e3 * world.allreduce_time.seconds / n
        world.comm.Barrier()
        t = time.perf_counter()
        for _ in range(20):
            world.allreduce_grads([grad], 0.0)
        result["allreduce_alone_ms"] = 1e3 * (time.perf_counter() - t) / 20
    if previous is not None:
        host.set_blas_threads(previous)
    return result if world is None or world.is_writer else None


def data_parallel_main(args: Any) -> int:
    """``bench --data-parallel N``: tokens/s of one process with 1 and with N BLAS threads
    against N MPI ranks with one thread each (the same global batch), the scaling
    efficiency, and the all-reduce's share of a step."""
    ranks = args.data_parallel
    mpiexec = Path(sys.executable).with_name("mpiexec")
    if not mpiexec.exists() or importlib.util.find_spec("mpi4py") is None:
        print(f"bench --data-parallel needs mpi4py and MPICH's mpiexec; {install_hint('mpi')}",
              file=sys.stderr)  # fmt: skip
        return 1
    seconds = args.seconds / 3
    print(f"minitransformer bench --data-parallel {ranks}: {host.cpu_name()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; copy task, "
          "global batch 64")  # fmt: skip
    results = []
    for preset in args.preset or ["tiny"]:
        rows = []
        for n, threads in ((1, 1), (1, ranks), (ranks, 1)):
            cmd = [sys.executable, "-m", "minitransformer.tools.bench", "--dp-worker", preset, "64",
                   str(seconds), str(threads), str(int(n > 1))]  # fmt: skip
            if n > 1:
                cmd = [str(mpiexec), "-n", str(n), *cmd]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"bench worker failed ({' '.join(cmd)}):\n{done.stderr[-2000:]}",
                      file=sys.stderr)  # fmt: skip
                return 1
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        base = rows[0]["tokens_per_s"]
        print(f"\npreset {preset} (gradient {rows[0]['grad_mb']:.2f} MB float32)")
        print(f"  {'how':<28} {'tokens/s':>9} {'step ms':>8} {'speed-up':>8} {'allreduce ms':>13}")
        for r in rows:
            how = (f"{r['ranks']} ranks x 1 BLAS thread" if r["ranks"] > 1
                   else f"1 process, {r['threads']} BLAS thread(s)")  # fmt: skip
            ar = (f"{r['allreduce_ms']:.2f} ({r['allreduce_alone_ms']:.2f})"
                  if "allreduce_ms" in r else "-")  # fmt: skip
            r["speedup"] = r["tokens_per_s"] / base
            print(f"  {how:<28} {r['tokens_per_s']:>9.0f} {r['step_ms']:>8.1f} "
                  f"{r['speedup']:>7.2f}x {ar:>13}")  # fmt: skip
        eff = rows[2]["speedup"] / ranks
        print(f"  scaling efficiency of {ranks} ranks: {eff:.0%} (tokens/s / ({ranks} x 1 rank));"
              " all-reduce ms: per step (alone)")  # fmt: skip
        results.append(dict(preset=preset, rows=rows, efficiency=eff))
    if args.json:
        write_json(args, results)
    return 0
