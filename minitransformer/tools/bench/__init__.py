"""Benchmarks: full training steps of the Transformer, side by side with PyTorch; greedy
decoding with and without the cache; data parallelism over MPI.

    minitransformer bench --compare torch          # or: python -m minitransformer.tools.bench ...

One concept per file, top to bottom:

    command.py        the ``bench`` command: every preset, then decoding; JSON output
    options.py        its flags (shared by the CLI and ``python -m minitransformer.tools.bench``)
    steps.py          ``run(preset)``: the interleaved step benchmark; ``format_report``
    spread.py         how far the numbers hold: ranges over rounds, other load, warnings
    decode.py         ``run_decode``: greedy tokens/s, cached vs recomputed
    data_parallel.py  ``bench --data-parallel N``: 1 process vs N MPI ranks
    worker.py         one implementation in its own subprocess (``_Runner``, ``_Remote``)
    models.py         the two steps timed: ours and PyTorch's
    memory.py         peak-memory meters (resident set on the CPU, allocator on a GPU)
    presets.py        the sizes (``PRESETS``) and the analytic FLOPs of a step

Machine facts (CPU, BLAS and its threads) come from ``host``; ``blas_info`` is re-exported
here for the callers that know it as ``bench.blas_info``.
"""

from ...backend.host import blas_info
from .command import main
from .data_parallel import data_parallel_main, data_parallel_worker
from .decode import format_decode, run_decode
from .memory import _DeviceMemory, _PeakMemory, memory_meter
from .options import add_arguments
from .presets import DECODE_BATCH, DECODE_LENGTH, DECODE_PRESET, PRESETS, BenchPreset, step_flops
from .steps import format_report, run, torch_available
from .worker import _Remote, _Runner, worker_main

__all__ = [
    "DECODE_BATCH", "DECODE_LENGTH", "DECODE_PRESET", "PRESETS", "BenchPreset",
    "_DeviceMemory", "_PeakMemory", "_Remote", "_Runner", "add_arguments", "blas_info",
    "data_parallel_main", "data_parallel_worker", "format_decode", "format_report", "main",
    "memory_meter", "run", "run_decode", "step_flops", "torch_available", "worker_main",
]  # fmt: skip
