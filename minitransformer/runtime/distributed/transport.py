"""Which way the gradients travel between the ranks, decided once at start from where each
rank's parameters live, and which GPU a rank takes.

Three transports of the flat gradient buffer's all-reduce (``Σ_r g_r``, in place):

* ``mpi``: every rank on the CPU. ``MPI_Allreduce`` on the NumPy buffer (waiting.py).
* ``nccl``: every rank on a GPU of its own. NCCL's ``ncclAllReduce`` on the device buffer,
  queued on the current CUDA stream like any kernel: no host copy, no host sync (gpu.py).
* ``host-staged``: ranks on GPUs that are not all distinct (two ranks on one GPU: NCCL
  refuses to build a communicator with two ranks on one device), or NCCL missing on a rank,
  or CPU and GPU ranks mixed. Each rank copies its buffer to the host, MPI sums the host
  copies, and each copies the sum back (gpu.py). Correct everywhere, but a round trip
  through host memory and a sync each step.

The choice is a pure function of every rank's ``Placement`` (host name, device, the GPU's
PCI bus id, whether NCCL loads), gathered over MPI, so every rank takes the same decision
and a test can feed it any cluster. Two ranks share a GPU when they have the same host and
the same PCI bus id: device ids alone do not tell (with ``CUDA_VISIBLE_DEVICES`` set per
rank, each rank's ``cuda:0`` is another GPU).

Which GPU: ``--device cuda`` (no number) with ``--data-parallel`` gives the rank with local
rank ``l`` (its position among the ranks on its host) ``cuda:{l mod G}``, G the GPUs it sees;
more ranks than GPUs on a host share them round-robin (and the job goes host-staged).
``--device cuda:N`` is taken as given.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

from ...checks import listed

MPI, NCCL, HOST_STAGED = "mpi", "nccl", "host-staged"
NCCL_MISSING = (
    "NCCL is not available in CuPy on {ranks}, so the gradient all-reduce goes through host "
    "memory (MPI). Fix, for the fast path: pip install nvidia-nccl-cu13 (or -cu12, as CuPy)"
)


@dataclass(frozen=True)
class Placement:
    """Where one rank's parameters live: ``host`` (its name), ``device`` ("cpu" or
    "cuda:N"), the GPU's ``pci_bus_id`` (None on the CPU) and whether NCCL loads there."""

    host: str
    device: str
    pci_bus_id: str | None = None
    nccl: bool = False

    @property
    def gpu(self) -> tuple[str, str] | None:
        """The physical GPU (host, PCI bus id, or the device name if no id is known)."""
        if not self.device.startswith("cuda"):
            return None
        return (self.host, self.pci_bus_id or self.device)


def choose_transport(placements: list[Placement]) -> tuple[str, str]:
    """The transport for these ranks (``mpi``, ``nccl`` or ``host-staged``) and the reason,
    one sentence (logged at start). The same answer on every rank: it sees the same list."""
    n = len(placements)
    gpus = [p.gpu for p in placements]
    on_gpu = [r for r, g in enumerate(gpus) if g is not None]
    if not on_gpu:
        return MPI, f"{n} ranks on the CPU: MPI all-reduce"
    if len(on_gpu) < n:
        cpu = [r for r in range(n) if gpus[r] is None]
        return HOST_STAGED, f"ranks {_ranks(cpu)} on the CPU, the others on GPUs: via the host"
    shared = {}
    for r, g in enumerate(gpus):
        shared.setdefault(g, []).append(r)
    crowded = [ranks for ranks in shared.values() if len(ranks) > 1]
    if crowded:
        host, bus = gpus[crowded[0][0]]
        return HOST_STAGED, (
            f"ranks {_ranks(crowded[0])} share one GPU ({bus} on {host}), which NCCL refuses: "
            "via the host"
        )
    without = [r for r, p in enumerate(placements) if not p.nccl]
    if without:
        return HOST_STAGED, NCCL_MISSING.format(ranks=f"rank{'s' * (len(without) > 1)} "
                                                f"{_ranks(without)}")  # fmt: skip
    hosts = len({p.host for p in placements})
    return NCCL, f"{n} ranks, each on its own GPU ({hosts} host{'s' * (hosts > 1)}): NCCL"


def rank_device(requested: str | None, local_rank: int, visible: int) -> str | None:
    """The device of the rank with ``local_rank`` among the ranks of its host, when it sees
    ``visible`` GPUs: a bare ``cuda`` (or ``gpu``) becomes ``cuda:{local_rank mod visible}``;
    anything else (``cpu``, ``cuda:N``, None) is returned unchanged, as is ``cuda`` when no
    GPU is visible (the Trainer then says why)."""
    if not wants_gpu(requested) or visible < 1:
        return requested
    return f"cuda:{local_rank % visible}"


def wants_gpu(requested: str | None) -> bool:
    """Whether ``requested`` is a GPU without a number (``cuda``, ``gpu``): one per rank."""
    return requested is not None and requested.strip().lower() in ("cuda", "gpu")


def local_rank(hosts: list[str], rank: int) -> int:
    """The position of ``rank`` among the ranks that run on its host (``hosts``: every
    rank's host name, in rank order)."""
    return hosts[:rank].count(hosts[rank])


def visible_gpus() -> int:
    """How many GPUs CuPy sees here (0 without CuPy or without a GPU)."""
    try:
        import cupy
    except ImportError:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no driver, no device: no GPU to hand out
        return 0


def use_gpu(device: str) -> None:
    """Make GPU ``device`` ("cuda:N") this process's current CUDA device."""
    from ... import backend

    backend.make_current(device)


def load_nccl() -> Any:
    """``cupy.cuda.nccl`` if CuPy is installed and built with NCCL, else None."""
    try:
        from cupy.cuda import nccl
    except ImportError:
        return None
    return nccl if getattr(nccl, "available", True) else None


def placement(device: str, host: str | None = None) -> Placement:
    """This rank's ``Placement`` for a normalized ``device`` ("cpu", "cuda:N")."""
    host = host or platform.node()
    if not device.startswith("cuda"):
        return Placement(host, device)
    import cupy

    bus = str(cupy.cuda.Device(int(device.split(":")[1])).pci_bus_id)
    return Placement(host, device, bus, load_nccl() is not None)


def _ranks(ranks: list[int]) -> str:
    """``0, 1`` (at most 4 named, then how many more)."""
    return listed([str(r) for r in ranks], most=4)
