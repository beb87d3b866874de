"""Benchmarks: full training steps of the Transformer, side by side with PyTorch.

    python -m minitransformer bench                        # tiny, small, base (+ decoding)
    python -m minitransformer bench --preset tiny --compare torch --seconds 10
    python -m minitransformer.bench --preset base --json results.json

What is timed: one training step = forward, label-smoothed cross-entropy, backward, Adam
update and ``loss.item()``, float32, on a fixed random batch (no padding). Steps are timed
one by one after a warm-up of a few *seconds* (not a step count: the first steps allocate,
page in and let BLAS spin up its threads). The report gives the median/min/max ms per
step, target tokens/s, the analytic matmul FLOPs of a step (forward x 3; elementwise ops
not counted) and the achieved GFLOP/s as a fraction of a float32 GEMM ceiling measured in
the same run, between the same rounds.

Each implementation runs in its own subprocess (``--worker``), and the parent drives them
in alternating rounds, ours, torch, ours, torch, ..., so drift of a shared machine hits both
alike; the ratio is the median over rounds of (our median / torch's median) in the round.
PyTorch runs twice: on its default threads, and on one thread (``torch.set_num_threads(1)``)
because on a busy shared machine its multi-threaded kernels stall waiting for descheduled
threads (measured here: 3.1 s per tiny step vs 69 ms on an idle machine), which would make
any ratio flatter us; the report gives ours over each, and over the faster of the two.
Two processes, never one: calling PyTorch and NumPy alternately in ONE process on 2 vCPUs
made both 2-2.6x slower (PyTorch's OpenMP workers spin while NumPy's BLAS threads run).

Peak memory: how much the worker's peak resident set grew from right after its imports to
the end of the timed steps (Linux: VmHWM reset through /proc/self/clear_refs; elsewhere
the growth of ``ru_maxrss``): the model, the optimizer state, gradients and the largest
step's activations and BLAS buffers, as the OS saw them. (tracemalloc would miss the BLAS
buffers and anything not allocated through Python's allocator.)

On a GPU, peak memory is *device* memory (host RSS says nothing there): what the array
library's caching allocator holds, CuPy's default memory pool (``total_bytes()``; the pool
keeps freed blocks, so what it holds after the steps is the most the steps needed) and
PyTorch's ``torch.cuda.max_memory_reserved()`` after a reset (the same notion). A GPU run
also times our step on the CPU of the same machine, interleaved, and reports train tokens/s
on both: the GPU is worth switching to only if that line says so.

Decoding: greedy tokens/s at ``small``, 64 tokens, with and without the key/value cache
(``decode.greedy_decode(..., use_cache=...)``), the two alternating in one process.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np  # host-side timing statistics and the GEMM ceiling (a CPU yardstick)

# --------------------------------------------------------------------------- what is measured


@dataclasses.dataclass(frozen=True)
class BenchPreset:
    """One benchmark size: the model preset plus vocabulary, sequence length and batch."""

    name: str
    vocab: int
    length: int  # source and target length
    batch: int

    def config(self, **overrides: Any):
        from .config import TransformerConfig

        V = self.vocab
        fields = {"max_len": max(256, self.length + 1), **overrides}
        return TransformerConfig.preset(self.name, src_vocab=V, tgt_vocab=V, **fields)


PRESETS = {
    "tiny": BenchPreset("tiny", vocab=32, length=16, batch=64),
    "small": BenchPreset("small", vocab=1000, length=32, batch=32),
    "base": BenchPreset("base", vocab=8000, length=32, batch=16),
}
DECODE_PRESET, DECODE_LENGTH, DECODE_BATCH = "small", 64, 32


def step_flops(cfg: Any, B: int, S: int, T: int) -> int:
    """Matmul FLOPs of one training step: 3 x forward (backward = 2 x forward for every
    product: dX and dW of each linear, two products per attention product).

    Forward, with D = d_model, per encoder layer: Q, K, V, O projections 4 * 2BSD^2,
    scores and P V 2 * 2BS^2D, feed-forward 2 * 2BSD d_ff. Per decoder layer: self-attention
    as above over T, cross-attention 2 * 2BTD^2 (Q, O) + 2 * 2BSD^2 (K, V of memory) +
    2 * 2BTSD, feed-forward 2 * 2BTD d_ff. Output projection 2BTDV.
    """
    D, F, V = cfg.d_model, cfg.d_ff, cfg.tgt_vocab
    enc = 8 * B * S * D * D + 4 * B * S * S * D + 4 * B * S * D * F
    dec = (8 * B * T * D * D + 4 * B * T * T * D) + (
        4 * B * T * D * D + 4 * B * S * D * D + 4 * B * T * S * D
    )
    dec += 4 * B * T * D * F
    forward = cfg.N * (enc + dec) + 2 * B * T * D * V
    return 3 * forward


# --------------------------------------------------------------------------- environment facts


def blas_info() -> dict[str, Any]:
    """NumPy's BLAS and its thread count: threadpoolctl when installed, else NumPy's build
    config plus the thread count OpenBLAS reports (or the environment's)."""
    info: dict[str, Any] = {"numpy": np.__version__}
    try:
        from threadpoolctl import threadpool_info

        pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        if pools:
            p = pools[0]
            info.update(
                blas=f"{p.get('internal_api')} {p.get('version')}",
                threads=p.get("num_threads"),
                source="threadpoolctl",
                arch=p.get("architecture"),
            )
            return info
    except ImportError:
        pass
    try:
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        info["blas"] = f"{cfg.get('name')} {cfg.get('version')}"
        info["blas_config"] = cfg.get("openblas configuration", "")
    except Exception:  # noqa: BLE001 - show_config's layout differs across NumPy versions
        info["blas"] = "unknown"
    info["threads"] = _openblas_threads()
    info["source"] = "numpy.show_config + openblas_get_num_threads"
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if var in os.environ:
            info.setdefault("env", {})[var] = os.environ[var]
    return info


def _openblas_threads() -> int | None:
    """Ask the OpenBLAS that NumPy loaded for its thread count (None if that fails)."""
    import ctypes
    import glob

    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in glob.glob(os.path.join(libs, "*openblas*.so*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                     "openblas_get_num_threads"):  # fmt: skip
            fn = getattr(lib, name, None)
            if fn is not None:
                return int(fn())
    env = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    if env and env.isdigit():
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _status_mb(field: str) -> float | None:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in MiB; None off Linux."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class _PeakMemory:
    """Peak resident memory added since ``start()``, in MiB.

    On Linux, writing 5 to /proc/self/clear_refs resets the peak (VmHWM) to the current
    resident set, so the peak afterwards minus the resident set at the reset is exactly
    what the model and the steps added at their worst. Elsewhere: the growth of
    ``ru_maxrss``, which underestimates when the new peak stays below an older one.
    """

    def start(self) -> None:
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                f.write("5")
            self.method = "VmHWM after a reset (/proc/self/clear_refs) minus VmRSS at the reset"
            self.base = _status_mb("VmRSS")
        except OSError:
            self.base = None
        if self.base is None:
            self.method = "growth of ru_maxrss (a lower bound)"
            self.base = self._maxrss()

    @staticmethod
    def _maxrss() -> float:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, B on macOS
        return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024

    def added(self) -> float:
        peak = _status_mb("VmHWM") if self.method.startswith("VmHWM") else None
        return (peak if peak is not None else self._maxrss()) - self.base


class _DeviceMemory:
    """Peak memory held on a GPU by the caching allocator since ``start()``, in MiB:
    CuPy's default pool (``total_bytes()``) for ours, ``torch.cuda.max_memory_reserved()``
    for PyTorch."""

    def __init__(self, impl: str) -> None:
        self.impl = impl

    def start(self) -> None:
        if self.impl.startswith("torch"):
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_reserved()
            self.method = "torch.cuda.max_memory_reserved() growth (device memory)"
        else:
            import cupy

            self.pool = cupy.get_default_memory_pool()
            self.base = self.pool.total_bytes()
            self.method = "CuPy default memory pool total_bytes() growth (device memory)"

    def added(self) -> float:
        if self.impl.startswith("torch"):
            import torch

            peak = torch.cuda.max_memory_reserved()
        else:
            peak = self.pool.total_bytes()
        return (peak - self.base) / 2**20


def memory_meter(impl: str, device: str) -> _PeakMemory | _DeviceMemory:
    """The right peak-memory meter for ``impl`` on ``device``: device memory on a GPU,
    the process's resident set elsewhere (NumPy, and the strict test device, live in host
    memory)."""
    return _DeviceMemory(impl) if device.startswith("cuda") else _PeakMemory()


# --------------------------------------------------------------------------- one implementation


class _Runner:
    """Builds one implementation at one preset and times its steps: "ours", "torch"
    (PyTorch on its default threads) or "torch1" (PyTorch on one thread).

    The parent talks to it through ``_Remote`` (a subprocess); tests may use it directly.
    """

    def __init__(self, impl: str, preset: str, device: str = "cpu"):
        if impl.startswith("torch"):
            import torch  # imported before the memory baseline, as ours is

            if impl == "torch1":
                torch.set_num_threads(1)
        else:
            import minitransformer.optim  # noqa: F401
        self.memory = memory_meter(impl, device)
        self.memory.start()  # after imports: what the model and the steps add comes next
        self.impl, self.preset, self.device = impl, PRESETS[preset], device
        p = self.preset
        rng = np.random.default_rng(0)
        ids = rng.integers(3, p.vocab, size=(p.batch, 2 * p.length + 1))  # no pad/bos/eos
        self.src, self.tgt = ids[:, : p.length], ids[:, p.length :]
        self.cfg = p.config()
        self.step = self._build_torch() if impl.startswith("torch") else self._build_ours()

    # ------------------------------------------------------------------ ours
    def _build_ours(self):
        import minitransformer as mt
        from minitransformer import backend
        from minitransformer.optim import Adam

        cfg, device = self.cfg, self.device
        model = mt.nn.Transformer(cfg, seed=0).to(device)
        model.train()
        opt = Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        src = backend.asarray(self.src, device=device)
        tgt_in = backend.asarray(self.tgt[:, :-1], device=device)
        tgt_out = backend.asarray(self.tgt[:, 1:], device=device)
        self.threads = blas_info()

        def step() -> float:
            logits = model(src, tgt_in)
            loss = model.loss(logits, tgt_out)
            opt.zero_grad()
            loss.backward()
            value = loss.item()
            opt.step()
            backend.synchronize(device)
            return value

        self.model = model
        return step

    # ------------------------------------------------------------------ torch
    def _build_torch(self):
        import torch

        from .nn.positional import sinusoid_table

        cfg = self.cfg
        dev = torch.device("cuda" if self.device.startswith("cuda") else "cpu")
        torch.manual_seed(0)
        D = cfg.d_model

        def enc_layer():
            return torch.nn.TransformerEncoderLayer(
                D, cfg.h, cfg.d_ff, cfg.dropout, batch_first=True, norm_first=False
            )

        def dec_layer():
            return torch.nn.TransformerDecoderLayer(
                D, cfg.h, cfg.d_ff, cfg.dropout, batch_first=True, norm_first=False
            )

        class Model(torch.nn.Module):  # post-LN, tied embeddings, as ours
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(cfg.src_vocab, D)
                torch.nn.init.normal_(self.embed.weight, std=D**-0.5)
                table = torch.tensor(sinusoid_table(cfg.max_len, D), dtype=torch.float32)
                self.register_buffer("pe", table)
                self.drop = torch.nn.Dropout(cfg.dropout)
                self.encoder = torch.nn.TransformerEncoder(
                    enc_layer(), cfg.N, enable_nested_tensor=False
                )
                self.decoder = torch.nn.TransformerDecoder(dec_layer(), cfg.N)

            def embed_at(self, ids):
                x = self.embed(ids) * math.sqrt(D)
                return self.drop(x + self.pe[: ids.shape[1]])

            def forward(self, src, tgt_in):
                T = tgt_in.shape[1]
                src_pad, tgt_pad = src == cfg.pad_id, tgt_in == cfg.pad_id
                causal = torch.triu(
                    torch.ones(T, T, dtype=torch.bool, device=src.device), diagonal=1
                )  # True = may NOT attend (torch's convention)
                memory = self.encoder(self.embed_at(src), src_key_padding_mask=src_pad)
                x = self.decoder(
                    self.embed_at(tgt_in),
                    memory,
                    tgt_mask=causal,
                    tgt_key_padding_mask=tgt_pad,
                    memory_key_padding_mask=src_pad,
                )
                return x @ self.embed.weight.T

        model = Model().to(dev)
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        src = torch.tensor(self.src, device=dev)
        tgt_in = torch.tensor(self.tgt[:, :-1], device=dev)
        tgt_out = torch.tensor(self.tgt[:, 1:], device=dev)
        loss_fn = torch.nn.CrossEntropyLoss(
            label_smoothing=cfg.label_smoothing, ignore_index=cfg.pad_id
        )
        par = torch.__config__.parallel_info().splitlines()
        blas = [x.strip() for x in par if "Math Kernel" in x or "backend" in x]
        self.threads = {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "blas": "; ".join(
                b.replace(" for Intel(R) 64 architecture applications", "") for b in blas
            ),  # fmt: skip
        }
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

        def step() -> float:
            logits = model(src, tgt_in)
            loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            value = loss.item()
            opt.step()
            sync()
            return value

        return step

    # ------------------------------------------------------------------ commands
    def warmup(self, seconds: float, min_steps: int = 2) -> dict:
        """Run steps for ``seconds`` (at least ``min_steps``); return how many ran."""
        n, t0 = 0, time.perf_counter()
        while n < min_steps or time.perf_counter() - t0 < seconds:
            self.step()
            n += 1
        return {"steps": n, "seconds": time.perf_counter() - t0}

    def time(self, seconds: float, min_steps: int = 1) -> dict:
        """Time single steps for about ``seconds`` (at least ``min_steps``); seconds each."""
        times, t_end = [], time.perf_counter() + seconds
        loss = float("nan")
        while len(times) < min_steps or time.perf_counter() < t_end:
            t = time.perf_counter()
            loss = self.step()
            times.append(time.perf_counter() - t)
        return {"times": times, "loss": loss}

    def ceiling(self, seconds: float, n: int = 1024) -> dict:
        """float32 GEMM (n x n) @ (n x n) GFLOP/s on this implementation's device: the
        median of repeated products (NumPy on the CPU, CuPy on a GPU). On the CPU it is
        measured on the configured BLAS threads and on one thread, and the better counts
        (on a busy machine one thread wins; see backend.SMALL_GEMM)."""
        from minitransformer import backend

        xp = backend.namespace_for_device(self.device)
        a = backend.asarray(np.ones((n, n), dtype=np.float32), device=self.device)
        b = xp.asarray(a, copy=True)

        def gflops(budget: float) -> float:
            out = xp.matmul(a, b)
            times, t_end = [], time.perf_counter() + budget
            while len(times) < 3 or time.perf_counter() < t_end:
                t = time.perf_counter()
                out = xp.matmul(a, b)
                backend.synchronize(self.device)
                times.append(time.perf_counter() - t)
            del out
            return 2 * n**3 / statistics.median(times) / 1e9

        threads = backend.blas_threads() if self.device == "cpu" else None
        if not threads or threads == 1:
            g = gflops(seconds)
            return {"gflops": g, "gflops_threads": g, "gflops_1thread": g}
        many = gflops(seconds / 2)
        backend.set_blas_threads(1)
        try:
            one = gflops(seconds / 2)
        finally:
            backend.set_blas_threads(threads)
        return {"gflops": max(many, one), "gflops_threads": many, "gflops_1thread": one}

    def info(self) -> dict:
        return {
            "impl": self.impl,
            "threads": self.threads,
            "peak_mb": self.memory.added(),
            "memory_method": self.memory.method,
            "python": platform.python_version(),
        }


class _Remote:
    """A ``_Runner`` in a subprocess, driven by one JSON line per command."""

    def __init__(self, impl: str, preset: str, device: str):
        cmd = [sys.executable, "-m", "minitransformer.bench", "--worker", impl, preset, device]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.call("ready")

    def call(self, command: str, **kw: Any) -> dict:
        self.proc.stdin.write(json.dumps({"cmd": command, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise RuntimeError(f"bench worker exited with status {code} during {command!r}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"bench worker failed in {command!r}: {reply['error']}")
        return reply

    def __getattr__(self, command: str):
        return lambda **kw: self.call(command, **kw)

    def close(self) -> None:
        try:
            self.call("quit")
        except (RuntimeError, BrokenPipeError, OSError):
            pass
        self.proc.wait(timeout=30)
        self.proc.stdin.close()
        self.proc.stdout.close()


def _worker_main(impl: str, preset: str, device: str) -> int:
    """The subprocess side of ``_Remote``: read commands, answer with JSON lines."""
    out = sys.stdout
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    if impl == "ours":
        from . import backend

        backend.tune_host()  # as the CLI runs it (this worker owns its process)
    runner = None
    for line in sys.stdin:
        msg = json.loads(line)
        cmd = msg.pop("cmd")
        try:
            if cmd == "quit":
                reply: dict = {}
            elif cmd == "ready":
                runner = _Runner(impl, preset, device)
                reply = {}
            else:
                reply = getattr(runner, cmd)(**msg)
        except Exception as err:  # noqa: BLE001 - reported to the parent, which raises
            reply = {"error": f"{type(err).__name__}: {err}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
        if cmd == "quit":
            break
    return 0


# --------------------------------------------------------------------------- driving a preset


_NO_TORCH = "PyTorch is not installed (pip install 'minitransformer[torch]')"


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def run(
    preset: str = "tiny",
    seconds: float = 20.0,
    compare: str | None = None,
    device: str = "cpu",
    warmup: float | None = None,
    rounds: int | None = None,
    in_process: bool = False,
    log: Any = None,
) -> dict[str, Any]:
    """Benchmark one preset; return the report as a dict (see ``format_report``).

    ``seconds`` is the timed budget of the preset (shared by the implementations);
    ``warmup`` defaults to min(3 s, seconds / 4) per implementation. ``compare="torch"``
    adds PyTorch, alternating with ours round by round. ``in_process=True`` runs ours in
    this process (for tests; PyTorch is then not compared).
    """
    if preset not in PRESETS:
        raise ValueError(f"bench: unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    p = PRESETS[preset]
    cfg = p.config()
    warmup = min(3.0, seconds / 4) if warmup is None else warmup
    # worker name -> (implementation, device); run round by round in this order
    plan = {"ours": ("ours", device)}
    skipped = None
    if compare == "torch":
        if in_process:
            skipped = "in-process run: PyTorch is compared only in subprocesses"
        elif not torch_available():
            skipped = _NO_TORCH
        else:
            plan["torch"] = ("torch", device)
            if device == "cpu":  # one CPU thread is a fair rival on a busy machine only
                plan["torch1"] = ("torch1", device)
    elif compare is not None:
        raise ValueError(f"bench: --compare {compare!r} is not supported; use 'torch'")
    if device != "cpu":  # is the device worth switching to? our step on this CPU too
        plan["ours_cpu"] = ("ours", "cpu")
    impls = list(plan)
    rounds = rounds or max(2, min(8, int(seconds / 1.5)))
    per_round = seconds / (rounds * len(impls))
    say = log or (lambda msg: None)

    workers: dict[str, Any] = {}
    try:
        for name, (impl, dev) in plan.items():
            say(f"  starting {impl} on {dev} ({preset}) ...")
            workers[name] = _Runner(impl, preset, dev) if in_process else _Remote(impl, preset, dev)
        warm = {impl: w.warmup(seconds=warmup) for impl, w in workers.items()}
        ceiling_s = min(0.6, max(0.2, per_round / 2))
        times: dict[str, list[list[float]]] = {impl: [] for impl in impls}
        ceilings, ceiling_detail, losses = [], [], {}
        for _ in range(rounds):
            c = workers["ours"].ceiling(seconds=ceiling_s)
            ceilings.append(c["gflops"])
            ceiling_detail.append(c)
            for impl, w in workers.items():  # ours, torch, ours, torch, ...
                r = w.time(seconds=per_round)
                times[impl].append(r["times"])
                losses[impl] = r["loss"]
        infos = {impl: w.info() for impl, w in workers.items()}
    finally:
        for w in workers.values():
            if isinstance(w, _Remote):
                w.close()

    flops = step_flops(cfg, p.batch, p.length, p.length)
    tokens = p.batch * p.length
    report: dict[str, Any] = {
        "preset": preset,
        "device": device,
        "config": {
            "vocab": p.vocab,
            "d_model": cfg.d_model,
            "h": cfg.h,
            "N": cfg.N,
            "d_ff": cfg.d_ff,
            "dropout": cfg.dropout,
            "length": p.length,
            "batch": p.batch,
            "label_smoothing": cfg.label_smoothing,
            "dtype": "float32",
        },
        "flops_per_step": flops,
        "tokens_per_step": tokens,
        "gemm_ceiling_gflops": max(ceilings),
        "gemm_ceiling_median_gflops": statistics.median(ceilings),
        "gemm_ceiling_threads_gflops": statistics.median(
            c["gflops_threads"] for c in ceiling_detail
        ),
        "gemm_ceiling_1thread_gflops": statistics.median(
            c["gflops_1thread"] for c in ceiling_detail
        ),
        "rounds": rounds,
        "memory_method": infos["ours"]["memory_method"]
        + (
            ": the worker process's peak resident memory from after its imports to the end"
            " of the timed steps (model, optimizer state, gradients, activations, BLAS buffers)"
            if not device.startswith("cuda")
            else ": what the steps made the allocator hold on the GPU"
        )
        + (" [in-process run]" if in_process else ""),
    }
    for impl in impls:
        flat = [t for r in times[impl] for t in r]
        med = statistics.median(flat)
        report[impl] = {
            "ms_median": 1e3 * med,
            "ms_min": 1e3 * min(flat),
            "ms_max": 1e3 * max(flat),
            "steps": len(flat),
            "warmup_steps": warm[impl]["steps"],
            "warmup_s": warm[impl]["seconds"],
            "tokens_per_s": tokens / med,
            "gflops": flops / med / 1e9,
            "peak_mb": infos[impl]["peak_mb"],
            "threads": infos[impl]["threads"],
            "final_loss": losses[impl],
            "device": plan[impl][1],
            "memory_method": infos[impl]["memory_method"],
        }
    for impl in impls:  # against the best ceiling seen: busy moments only lower it
        report[impl]["fraction_of_ceiling"] = report[impl]["gflops"] / max(ceilings)
    if "torch" in impls:
        ours = [statistics.median(t) for t in times["ours"]]
        torch_default = [statistics.median(t) for t in times["torch"]]
        torch_one = [statistics.median(t) for t in times.get("torch1", times["torch"])]
        ratios = [a / b for a, b in zip(ours, torch_default, strict=True)]
        report["ratio_ours_over_torch"] = statistics.median(ratios)
        report["ratio_per_round"] = ratios
        if "torch1" in impls:
            report["ratio_ours_over_torch_1thread"] = statistics.median(
                a / b for a, b in zip(ours, torch_one, strict=True)
            )
        torch_best = [min(b, c) for b, c in zip(torch_default, torch_one, strict=True)]
        report["ratio_ours_over_best_torch"] = statistics.median(
            a / b for a, b in zip(ours, torch_best, strict=True)
        )
        report["memory_ratio_ours_over_torch"] = report["ours"]["peak_mb"] / max(
            report["torch"]["peak_mb"], 1e-9
        )
    if "ours_cpu" in impls:  # speed-up of the device over the CPU, round by round
        report["speedup_device_over_cpu"] = statistics.median(
            statistics.median(c) / statistics.median(d)
            for c, d in zip(times["ours_cpu"], times["ours"], strict=True)
        )
    if skipped:
        report["compare_skipped"] = skipped
    return report


def run_decode(
    preset: str = DECODE_PRESET,
    length: int = DECODE_LENGTH,
    batch: int = DECODE_BATCH,
    seconds: float = 10.0,
    device: str = "cpu",
) -> dict[str, Any]:
    """Greedy decoding tokens/s, cached vs recomputed, alternating in this process.

    An untrained model may emit EOS at any step and stop early; so that every call decodes
    exactly ``length`` tokens, the benchmark's model gets a config whose EOS id is -1 (an
    id no argmax returns).
    """
    import minitransformer as mt
    from minitransformer import backend
    from minitransformer.decode import greedy_decode

    p = PRESETS[preset]
    cfg = p.config(max_len=max(256, length + 1))
    model = mt.nn.Transformer(cfg, seed=0).to(device)
    model.cfg = dataclasses.replace(cfg)
    model.cfg.eos_id = -1  # never stop early (see above); not a valid config, set after it
    rng = np.random.default_rng(1)
    src = backend.asarray(rng.integers(3, p.vocab, size=(batch, length)), device=device)
    greedy_decode(model, src, max_len=4, use_cache=True)  # warm-up
    greedy_decode(model, src, max_len=4, use_cache=False)
    times: dict[bool, list[float]] = {True: [], False: []}
    t_end = time.perf_counter() + seconds
    while len(times[False]) < 2 or time.perf_counter() < t_end:
        for cached in (True, False):
            t = time.perf_counter()
            out = greedy_decode(model, src, max_len=length, use_cache=cached)
            backend.synchronize(device)
            times[cached].append(time.perf_counter() - t)
            assert len(out[0]) == length, "decoding stopped early"
    tok = {c: batch * length / statistics.median(ts) for c, ts in times.items()}
    return {
        "preset": preset,
        "length": length,
        "batch": batch,
        "device": device,
        "cached_tokens_per_s": tok[True],
        "recompute_tokens_per_s": tok[False],
        "speedup": tok[True] / tok[False],
        "calls": len(times[False]),
        "cached_ms_median": 1e3 * statistics.median(times[True]),
        "recompute_ms_median": 1e3 * statistics.median(times[False]),
    }


# --------------------------------------------------------------------------- printing


def format_report(r: dict[str, Any]) -> str:
    c = r["config"]
    lines = [
        f"== {r['preset']}  (vocab {c['vocab']}, d_model {c['d_model']}, h {c['h']}, "
        f"N {c['N']}, d_ff {c['d_ff']}, length {c['length']}, batch {c['batch']}, "
        f"dropout {c['dropout']}, label smoothing {c['label_smoothing']}, {c['dtype']}, "
        f"device {r['device']})",
        f"   analytic matmul FLOPs per step {r['flops_per_step'] / 1e9:.3f} GFLOP; "
        f"{r['tokens_per_step']} target tokens per step; {r['rounds']} alternating rounds",
        f"   GEMM ceiling (float32 1024^3, between rounds): best {r['gemm_ceiling_gflops']:.1f} "
        f"GFLOP/s, median {r['gemm_ceiling_median_gflops']:.1f} (medians: all BLAS threads "
        f"{r['gemm_ceiling_threads_gflops']:.1f}, one thread "
        f"{r['gemm_ceiling_1thread_gflops']:.1f}); % of ceiling is of the best",
    ]
    names = {
        "ours": "minitransformer",
        "torch": "pytorch eager",
        "torch1": "pytorch 1 thread",
        "ours_cpu": "ours on the cpu",
    }
    for impl, name in names.items():
        if impl not in r:
            continue
        s = r[impl]
        lines.append(
            f"   {name:16s} {s['ms_median']:9.1f} ms/step (min {s['ms_min']:.1f}, max "
            f"{s['ms_max']:.1f}; {s['steps']} steps after {s['warmup_steps']} warm-up in "
            f"{s['warmup_s']:.1f} s)  {s['tokens_per_s']:,.0f} tok/s  "
            f"{s['gflops']:.1f} GFLOP/s = {100 * s['fraction_of_ceiling']:.0f}% of ceiling  "
            f"peak +{s['peak_mb']:.0f} MiB"
            + (" of GPU memory" if s.get("device", "cpu").startswith("cuda") else "")
        )
        lines.append(f"   {'':16s} threads: {_threads_text(s['threads'])}")
    if "ratio_ours_over_torch" in r:
        per = ", ".join(f"{x:.2f}" for x in r["ratio_per_round"])
        lines.append(
            f"   ratio ours/torch: {r['ratio_ours_over_torch']:.2f}x time per step "
            f"(rounds: {per}); peak memory {r['memory_ratio_ours_over_torch']:.2f}x"
        )
        if "ratio_ours_over_torch_1thread" in r:
            lines.append(
                f"   ratio ours/torch on 1 thread: {r['ratio_ours_over_torch_1thread']:.2f}x; "
                f"ours/(the faster torch in each round): {r['ratio_ours_over_best_torch']:.2f}x"
            )
    if "speedup_device_over_cpu" in r:
        lines.append(
            f"   train on {r['device']} vs cpu: {r['ours']['tokens_per_s']:,.0f} vs "
            f"{r['ours_cpu']['tokens_per_s']:,.0f} tok/s = {r['speedup_device_over_cpu']:.2f}x "
            f"({'worth switching' if r['speedup_device_over_cpu'] > 1 else 'the CPU is faster'})"
        )
    if "compare_skipped" in r:
        lines.append(f"   compare torch: skipped: {r['compare_skipped']}")
    return "\n".join(lines)


def _threads_text(t: dict[str, Any]) -> str:
    if "torch" in t:
        return f"torch {t['torch']}, {t['threads']} threads, {t['blas']}"
    text = f"{t.get('blas')}, {t.get('threads')} threads (via {t.get('source')})"
    if t.get("env"):
        text += ", env " + " ".join(f"{k}={v}" for k, v in t["env"].items())
    return text


def format_decode(d: dict[str, Any]) -> str:
    return (
        f"== greedy decoding at {d['preset']}, {d['length']} tokens, batch {d['batch']} "
        f"(device {d['device']}, {d['calls']} calls each)\n"
        f"   with cache    {d['cached_tokens_per_s']:10,.0f} tok/s ({d['cached_ms_median']:.0f} "
        f"ms/call)\n"
        f"   recomputing   {d['recompute_tokens_per_s']:10,.0f} tok/s "
        f"({d['recompute_ms_median']:.0f} ms/call)\n"
        f"   cache speed-up {d['speedup']:.1f}x"
    )


def main(args: Any) -> int:
    """The ``bench`` subcommand: args.preset (list or None), args.compare, args.device,
    args.seconds, args.json."""
    from minitransformer import backend

    presets = args.preset or list(PRESETS)
    device = backend.normalize_device(args.device)
    if device.startswith("cuda") and not backend.cuda_available():
        print(
            f"bench: --device {args.device} needs CuPy and an NVIDIA GPU, and this machine "
            "has none usable; run with --device cpu",
            file=sys.stderr,
        )
        return 2

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    info = blas_info()
    print(
        f"minitransformer bench on {backend.cpu_model() or platform.machine()}: "
        f"python {platform.python_version()}, numpy {info['numpy']}, "
        f"{_threads_text(info)}; {os.cpu_count()} CPUs, load average "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    if args.compare == "torch" and not torch_available():
        print("compare torch: skipped: " + _NO_TORCH)
    results: dict[str, Any] = {"presets": {}, "blas": info, "cpu": backend.cpu_model()}
    for name in presets:
        r = run(name, seconds=args.seconds, compare=args.compare, device=device, log=log)
        results["presets"][name] = r
        print(format_report(r), flush=True)
    if "small" in presets:
        d = run_decode(seconds=max(2.0, args.seconds / 2), device=device)
        results["decode"] = d
        print(format_decode(d), flush=True)
    results["load_average_end"] = list(os.getloadavg())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
        print(f"results written to {args.json}")
    return 0


# --------------------------------------------------------------------------- data parallelism


def data_parallel_worker(preset: str, batch_size: int, seconds: float, threads: int,
                         parallel: bool) -> dict[str, Any] | None:  # fmt: skip
    """Time training steps of ``preset`` on the copy task with the global ``batch_size``:
    one process, or (``parallel``) this rank of an MPI job, with ``threads`` BLAS threads.

    Returns (on rank 0; None elsewhere) tokens/s of the global batch, the step time, the
    seconds per step spent in the gradient all-reduce (waiting for the slowest rank
    included) and those of the all-reduce alone (the same buffer, ranks already in step).
    """
    from . import backend
    from .train import TrainConfig, Trainer

    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # the library's own OpenBLAS switch
        threadpool_limits = None
        backend.set_blas_threads(threads)
    limits = threadpool_limits(threads, user_api="blas") if threadpool_limits else None
    world = None
    if parallel:
        from .distributed import World

        world = World.from_mpi()
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
    if limits is not None:
        limits.restore_original_limits()
    return result if world is None or world.is_writer else None


def data_parallel_main(args: Any) -> int:
    """``bench --data-parallel N``: tokens/s of one process with 1 and with N BLAS threads
    against N MPI ranks with one thread each (the same global batch), the scaling
    efficiency, and the all-reduce's share of a step."""
    from pathlib import Path

    ranks = args.data_parallel
    mpiexec = Path(sys.executable).with_name("mpiexec")
    if not mpiexec.exists() or importlib.util.find_spec("mpi4py") is None:
        print('bench --data-parallel needs mpi4py and MPICH\'s mpiexec; pip install -e ".[mpi]"',
              file=sys.stderr)  # fmt: skip
        return 1
    seconds = args.seconds / 3
    print(f"minitransformer bench --data-parallel {ranks}: {_cpu_name()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}; copy task, global batch 64")  # fmt: skip
    results = []
    for preset in args.preset or ["tiny"]:
        rows = []
        for n, threads in ((1, 1), (1, ranks), (ranks, 1)):
            cmd = [sys.executable, "-m", "minitransformer.bench", "--dp-worker", preset, "64",
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
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0


def _cpu_name() -> str:
    from . import backend

    return backend.cpu_model() or platform.processor() or platform.machine()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        sys.exit(_worker_main(*sys.argv[2:5]))
    if len(sys.argv) > 1 and sys.argv[1] == "--dp-worker":
        p, b, sec, th, par = sys.argv[2:7]
        from minitransformer import backend as _backend

        _backend.tune_host()  # as the CLI runs it (this worker owns its process)
        found = data_parallel_worker(p, int(b), float(sec), int(th), par == "1")
        if found is not None:
            print(json.dumps(found), flush=True)
        sys.exit(0)
    from minitransformer.cli import main as cli_main

    sys.exit(cli_main(["bench", *sys.argv[1:]]))
