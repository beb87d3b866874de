"""The ``bench`` command: every preset's step benchmark, then decoding (or, with
``--data-parallel N``, the data-parallel benchmark), printed and optionally saved as JSON.

    python -m minitransformer bench                        # tiny, small, base (+ decoding)
    python -m minitransformer bench --preset tiny --compare torch --seconds 10
    python -m minitransformer.tools.bench --preset base --json results.json

Every ratio comes with its range over rounds, and a preset whose rounds disagree or that ran
beside other load gets warnings (spread.py); the JSON keeps every round and the warnings.

Its flags are declared in options.py, for the CLI's ``bench`` and for ``python -m
minitransformer.tools.bench`` alike.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any

from ... import backend
from ...backend import host
from ...errors import ConfigError, install_hint
from .data_parallel import data_parallel_main
from .decode import format_decode, run_decode
from .options import check_json, write_json
from .presets import DEFAULT_PRESETS
from .steps import format_report, run, threads_text, torch_available


def main(args: Any) -> int:
    """The ``bench`` command: args.preset (list or None), args.compare, args.device,
    args.seconds, args.json, args.overwrite, args.data_parallel (N, or None), args.gpu_only.

    A ``--compare`` without PyTorch installed, or a ``--json`` that cannot be written (see
    options.check_json), is a ConfigError before anything is timed (asked for by name, a
    comparison is not skipped quietly)."""
    check_json(args)
    if getattr(args, "data_parallel", None):
        return data_parallel_main(args)
    presets = args.preset or list(DEFAULT_PRESETS)
    device = backend.normalize_device(args.device)
    if device.startswith("cuda") and not backend.cuda_available():
        print(
            f"bench: --device {args.device} needs CuPy and an NVIDIA GPU, and this machine "
            "has none usable; run with --device cpu",
            file=sys.stderr,
        )
        return 2
    if args.compare == "torch-graph" and not device.startswith("cuda"):
        print(
            "bench: --compare torch-graph needs --device cuda (CUDA graphs run on an NVIDIA "
            "GPU only); on the CPU use --compare torch",
            file=sys.stderr,
        )
        return 2
    if args.compare and not torch_available():
        raise ConfigError(
            f"--compare {args.compare} needs PyTorch, which is not installed. Fix: "
            f"{install_hint('torch')}, or leave --compare out to time ours alone"
        )

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    started, load_start = time.perf_counter(), list(os.getloadavg())
    info = host.blas_info()
    print(
        f"minitransformer bench on {host.cpu_name()}: "
        f"python {platform.python_version()}, numpy {info['numpy']}, "
        f"{threads_text(info)}; {os.cpu_count()} CPUs, load average "
        f"{', '.join(f'{x:.2f}' for x in load_start)}"
    )
    results: dict[str, Any] = {"presets": {}, "blas": info, "cpu": host.cpu_model()}
    for name in presets:
        r = run(
            name, seconds=args.seconds, compare=args.compare, device=device, log=log,
            cpu_side=not getattr(args, "gpu_only", False),
        )  # fmt: skip
        results["presets"][name] = r
        print(format_report(r), flush=True)
    if "small" in presets:
        d = run_decode(seconds=max(2.0, args.seconds / 2), device=device)
        results["decode"] = d
        print(format_decode(d), flush=True)
    results["load_average_start"] = load_start
    results["load_average_end"] = list(os.getloadavg())
    results["warnings"] = {n: r["warnings"] for n, r in results["presets"].items() if r["warnings"]}
    results["wall_s"] = time.perf_counter() - started
    print(f"bench: {results['wall_s']:.0f} s in all", flush=True)
    if results["warnings"]:
        print(
            "bench: WARNING: the numbers of "
            + ", ".join(results["warnings"])
            + " are not reliable (see the warnings above); rerun on an idle machine",
            flush=True,
        )
    if args.json:
        write_json(args, results)
        print(f"results written to {args.json}")
    return 0
