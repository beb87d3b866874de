"""One implementation timed in its own process: ``_Runner`` (builds and times the steps),
``_Remote`` (the parent's handle on a worker subprocess) and ``worker_main`` (the worker).

Each implementation runs in its own subprocess, ``python -m minitransformer.tools.bench --worker
IMPL PRESET DEVICE``, never two in one: calling PyTorch and NumPy alternately in ONE process
on 2 vCPUs made both 2-2.6x slower (PyTorch's OpenMP workers spin while NumPy's BLAS threads
run). The protocol is one JSON line per command, ``{"cmd": NAME, **kwargs}``, answered by one
JSON line: the result of ``_Runner.NAME(**kwargs)``, or ``{"error": ...}``. ``ready`` builds
the runner, ``quit`` ends the worker.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

import numpy as np  # the fixed random batch and the GEMM ceiling's operands (host side)

from ... import backend, fast
from ...backend import host
from ...fast.numpy import compiled
from .memory import memory_meter
from .models import ours_graph_step, ours_step, torch_graph_step, torch_step
from .presets import PRESETS


class _Runner:
    """Builds one implementation at one preset and times its steps: "ours" (the fast tier
    on, as the CLI runs), "ours-ref" (the reference ops), "torch"
    (PyTorch on its default threads), "torch1" (PyTorch on one thread) or "torch-graph"
    (PyTorch's step replayed as one CUDA graph; a GPU only).

    The parent talks to it through ``_Remote`` (a subprocess); tests may use it directly.
    """

    def __init__(self, impl: str, preset: str, device: str = "cpu"):
        if impl.startswith("torch"):
            import torch  # imported before the memory baseline, as ours is

            if impl == "torch1":
                torch.set_num_threads(1)
        self.memory = memory_meter(impl, device)
        self.memory.start()  # after imports: what the model and the steps add comes next
        self.impl, self.preset, self.device = impl, PRESETS[preset], device
        p = self.preset
        rng = np.random.default_rng(0)
        ids = rng.integers(3, p.vocab, size=(p.batch, 2 * p.length + 1))  # no pad/bos/eos
        self.src, self.tgt = ids[:, : p.length], ids[:, p.length :]
        self.cfg = p.config()
        build = {"torch": torch_step, "torch1": torch_step, "torch-graph": torch_graph_step,
                 "ours-graph": ours_graph_step}  # fmt: skip
        build = build.get(impl, ours_step)
        self.step, self.threads = build(self.cfg, self.src, self.tgt, device)

    def warmup(self, seconds: float, min_steps: int = 2) -> dict:
        """Run steps for ``seconds`` (at least ``min_steps``); return how many ran."""
        n, t0 = 0, time.perf_counter()
        while n < min_steps or time.perf_counter() - t0 < seconds:
            self.step()
            n += 1
        return {"steps": n, "seconds": time.perf_counter() - t0}

    def time(self, seconds: float, min_steps: int = 1) -> dict:
        """Time single steps for about ``seconds`` (at least ``min_steps``): seconds each,
        the last loss, and ``cpu_s``, the CPU time this process spent (all its threads; the
        parent subtracts it from the machine's busy time to see other processes' load)."""
        times, t_end = [], time.perf_counter() + seconds
        loss, cpu0 = float("nan"), time.process_time()
        while len(times) < min_steps or time.perf_counter() < t_end:
            t = time.perf_counter()
            loss = self.step()
            times.append(time.perf_counter() - t)
        return {"times": times, "loss": loss, "cpu_s": time.process_time() - cpu0}

    def ceiling(self, seconds: float, n: int = 1024) -> dict:
        """float32 GEMM (n x n) @ (n x n) GFLOP/s on this implementation's device: the
        median of repeated products (NumPy on the CPU, CuPy on a GPU). On the CPU it is
        measured on the configured BLAS threads and on one thread, and the better counts
        (on a busy machine one thread wins; see host.SMALL_GEMM)."""
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

        threads = host.blas_threads() if self.device == "cpu" else None
        if not threads or threads == 1:
            g = gflops(seconds)
            return {"gflops": g, "gflops_threads": g, "gflops_1thread": g}
        many = gflops(seconds / 2)
        host.set_blas_threads(1)
        try:
            one = gflops(seconds / 2)
        finally:
            host.set_blas_threads(threads)
        return {"gflops": max(many, one), "gflops_threads": many, "gflops_1thread": one}

    def info(self) -> dict:
        return {
            "impl": self.impl,
            "threads": self.threads,
            "peak_mb": self.memory.added(),
            "memory_method": self.memory.method,
            "python": platform.python_version(),
        }


QUIT_WAIT_S = 30.0
"""How long ``_Remote.close`` waits for a worker that was asked to quit before killing it."""


class _Remote:
    """A ``_Runner`` in a subprocess, driven by one JSON line per command.

    The worker runs in a session of its own, so a terminal's Ctrl-C or a SIGTERM to the
    process group reaches the parent only: the parent alone decides when a worker ends, and
    on a stop it kills them (``close_workers(kill=True)``) before it reports the stop. A
    worker whose parent is gone (killed with SIGKILL) ends itself (see ``worker_main``).
    """

    def __init__(self, impl: str, preset: str, device: str):
        module = "minitransformer.tools.bench"
        cmd = [sys.executable, "-m", module, "--worker", impl, preset, device]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            start_new_session=True,
        )  # fmt: skip
        try:
            self.call("ready")
        except BaseException:
            self.close(kill=True)  # a worker that could not build its step must not outlive this
            raise

    def call(self, command: str, **kw: Any) -> dict:
        self.proc.stdin.write(json.dumps({"cmd": command, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            raise RuntimeError(f"bench worker {how} during {command!r}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"bench worker failed in {command!r}: {reply['error']}")
        return reply

    def __getattr__(self, command: str):
        return lambda **kw: self.call(command, **kw)

    def kill(self) -> None:
        """Kill the worker now (SIGKILL), whatever it is doing; ``close`` then reaps it."""
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:  # ended in between
                pass

    def close(self, kill: bool = False) -> None:
        """End the worker and reap it: asked to quit (killed after ``QUIT_WAIT_S``), or
        with ``kill`` killed at once (a stop or an error: it may be in the middle of a long
        command). Never raises for a worker that is already gone: writing to it, or flushing
        its closed pipe, would raise BrokenPipeError over the exception that is unwinding."""
        if kill:
            self.kill()
        elif self.proc.poll() is None:
            try:
                self.call("quit")
            except (RuntimeError, OSError, ValueError):  # gone, or a garbled reply
                pass
        try:
            self.proc.wait(timeout=QUIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:  # a broken pipe: unflushed bytes for a worker that is gone
                pass


def close_workers(workers: Iterable[Any], kill: bool = False) -> None:
    """Close every ``_Remote`` among ``workers`` (a ``_Runner`` in this process needs
    nothing). With ``kill``, all are killed first, then reaped: a second Ctrl-C while one is
    reaped leaves none of them running."""
    remotes = [w for w in workers if isinstance(w, _Remote)]
    if kill:
        for remote in remotes:
            remote.kill()
    for remote in remotes:
        remote.close(kill=kill)


def _end_with_parent(parent: int) -> None:
    """A worker's watchdog thread: end the process once its parent is gone (killed with
    SIGKILL, say), not only after the command it is running. Its own session shields it
    from the signals that stop the parent, so nothing else would end it at once."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def worker_main(impl: str, preset: str, device: str) -> int:
    """The subprocess side of ``_Remote``: read commands, answer with JSON lines."""
    out = sys.stdout
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    threading.Thread(target=_end_with_parent, args=(os.getppid(),), daemon=True).start()
    if impl.startswith("ours"):
        host.tune_host()  # as the CLI runs it (this worker owns its process)
        if impl in ("ours", "ours-graph"):
            fast.enable()  # the fast tier, as the CLI runs it
            compiled.enable()  # and numba's row kernels where numba is installed
        else:  # "ours-ref": the reference ops, what a notebook runs (the default)
            fast.disable()
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
