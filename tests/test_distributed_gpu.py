"""Data parallelism on GPUs (distributed/transport.py, distributed/gpu.py).

On the CPU: the choice of the transport on made-up clusters, the rank -> GPU rule, the NCCL
path driven by a fake ``nccl`` module (in one process, then in a real 2-rank MPI job where
the fake's allReduce sums the buffer at the pointer it is given, so a wrong pointer, count
or dtype code changes the losses), and the host-staged path over real MPI with NumPy
arrays standing in for the device's: both give the losses of one process with the whole
batch (dropout 0). On a GPU (skipped here): 2 ranks on one GPU go host-staged, 2 ranks on
2 GPUs go over NCCL, and both match one process (rtol 1e-4 there: cuBLAS sums a 7-row
batch and its 4- and 3-row shards in other orders).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_runs import MPIEXEC, needs_mpi

import minitransformer as mt
from minitransformer.runtime import checkpoint
from minitransformer.runtime.distributed import gpu, transport
from minitransformer.runtime.distributed.transport import Placement, choose_transport
from minitransformer.runtime.distributed.waiting import CollectiveTimeout

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the choice
def _gpu(host: str, device: str, bus: str | None, nccl: bool = True) -> Placement:
    return Placement(host, device, bus, nccl)


CLUSTERS = {
    "all CPU": ([Placement("a", "cpu"), Placement("a", "cpu")], "mpi"),
    "two GPUs, one host": (
        [_gpu("a", "cuda:0", "0000:3B:00.0"), _gpu("a", "cuda:1", "0000:5E:00.0")], "nccl"),
    "two ranks, one GPU": (
        [_gpu("a", "cuda:0", "0000:3B:00.0"), _gpu("a", "cuda:0", "0000:3B:00.0")],
        "host-staged"),
    # CUDA_VISIBLE_DEVICES set per rank: both see their GPU as cuda:0, but they differ
    "cuda:0 twice, two GPUs": (
        [_gpu("a", "cuda:0", "0000:3B:00.0"), _gpu("a", "cuda:0", "0000:5E:00.0")], "nccl"),
    # the same bus id on two hosts: two GPUs
    "two hosts, one GPU each": (
        [_gpu("a", "cuda:0", "0000:3B:00.0"), _gpu("b", "cuda:0", "0000:3B:00.0")], "nccl"),
    "two hosts, one shared GPU": (
        [_gpu("a", "cuda:0", "0000:3B:00.0"), _gpu("b", "cuda:0", "0000:3B:00.0"),
         _gpu("b", "cuda:1", "0000:3B:00.0")], "host-staged"),
    "no bus id, same device": (
        [_gpu("a", "cuda:0", None), _gpu("a", "cuda:0", None)], "host-staged"),
    "no bus id, other devices": ([_gpu("a", "cuda:0", None), _gpu("a", "cuda:1", None)], "nccl"),
    "CPU and GPU mixed": ([Placement("a", "cpu"), _gpu("a", "cuda:0", "0:1")], "host-staged"),
    "NCCL missing on one rank": (
        [_gpu("a", "cuda:0", "0:1"), _gpu("a", "cuda:1", "0:2", nccl=False)], "host-staged"),
}  # fmt: skip


@pytest.mark.parametrize("name", CLUSTERS)
def test_the_transport_follows_where_the_ranks_are(name):
    placements, expected = CLUSTERS[name]
    chosen, reason = choose_transport(placements)
    assert chosen == expected, reason
    assert "\n" not in reason and reason


def test_the_reasons_name_the_ranks_and_the_fix():
    _, shared = choose_transport(CLUSTERS["two ranks, one GPU"][0])
    assert "ranks 0, 1 share one GPU (0000:3B:00.0 on a)" in shared and "NCCL" in shared
    _, missing = choose_transport(CLUSTERS["NCCL missing on one rank"][0])
    assert missing.startswith("NCCL is not available in CuPy on rank 1")
    assert "pip install nvidia-nccl-cu13" in missing
    _, fine = choose_transport(CLUSTERS["two hosts, one GPU each"][0])
    assert fine == "2 ranks, each on its own GPU (2 hosts): NCCL"


def test_a_bare_cuda_gives_each_rank_of_a_host_its_own_gpu_round_robin():
    hosts = ["a", "a", "b", "a", "b"]
    local = [transport.local_rank(hosts, r) for r in range(len(hosts))]
    assert local == [0, 1, 0, 2, 1]
    assert [transport.rank_device("cuda", lr, 2) for lr in local] == [
        "cuda:0", "cuda:1", "cuda:0", "cuda:0", "cuda:1"]  # fmt: skip
    assert transport.rank_device("GPU", 3, 4) == "cuda:3"
    for given in ("cpu", "cuda:1", None, "strict:device1"):
        assert transport.rank_device(given, 1, 2) == given  # taken as given
    assert transport.rank_device("cuda", 1, 0) == "cuda"  # no GPU: the Trainer says why


def test_without_cupy_nccl_is_absent_and_a_cpu_rank_needs_no_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert transport.load_nccl() is None
    assert transport.visible_gpus() == 0
    assert transport.placement("cpu", "h") == Placement("h", "cpu")


def test_nccl_built_without_the_library_counts_as_absent(monkeypatch):
    import types

    fake_nccl = types.SimpleNamespace(available=False)
    cuda = types.ModuleType("cupy.cuda")
    cuda.nccl = fake_nccl
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", fake_nccl)
    assert transport.load_nccl() is None
    fake_nccl.available = True
    assert transport.load_nccl() is fake_nccl


# ------------------------------------------------------------------ the World's hook
def _world(rank: int, everyone: list):
    """A World of ``len(everyone)`` ranks without MPI: its allgather answers ``everyone``
    (this rank's own entry replaced by what it sends)."""
    import types

    from minitransformer.runtime.distributed import World

    world = World.__new__(World)
    world.rank, world.size, world.is_writer = rank, len(everyone), rank == 0
    world.transport, world.reduce = transport.MPI, None
    world.MPI = types.SimpleNamespace(Get_processor_name=lambda: "a")
    world._hosts = None  # not gathered yet (World.host_names)
    world.waiter = types.SimpleNamespace(
        allgather=lambda mine, what: [mine if r == rank else e for r, e in enumerate(everyone)]
    )
    return world


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("other_bus, expected", [("0:2", "nccl"), ("0:1", "host-staged")])
def test_the_world_takes_the_transport_once_and_rank_0_logs_it(
    monkeypatch, capsys, rank, other_bus, expected
):
    used = []
    monkeypatch.setattr(transport, "placement", lambda d, host: Placement(host, d, "0:1", True))
    monkeypatch.setattr(transport, "use_gpu", used.append)
    monkeypatch.setattr(transport, "load_nccl", lambda: "NCCL MODULE")
    monkeypatch.setattr(gpu, "cupy_nccl", lambda waiter, device, nccl: ("NCCL", device, nccl))
    monkeypatch.setattr(gpu, "cupy_host_staged", lambda waiter: "HOST")
    other = Placement("a", "cuda:1", other_bus, True)
    world = _world(rank, [other, other])
    assert world.choose_transport("cuda:0") == world.transport == expected
    assert used == ["cuda:0"]  # this rank's GPU made current
    if expected == "nccl":
        assert world.reduce == ("NCCL", "cuda:0", "NCCL MODULE")
    else:
        assert world.reduce == "HOST"
    err = capsys.readouterr().err
    if rank == 0:
        assert err.startswith(f"gradient all-reduce: {expected} (") and err.count("\n") == 1
    else:
        assert err == ""  # rank 0 alone prints


def test_a_cpu_world_keeps_the_mpi_path_and_says_nothing(monkeypatch, capsys):
    world = _world(0, [None, Placement("a", "cpu")])
    assert world.choose_transport("cpu") == "mpi" and world.reduce is None
    assert capsys.readouterr().err == ""


def test_device_of_rank_counts_the_ranks_of_its_host(monkeypatch):
    from minitransformer.runtime.distributed import device_of_rank

    monkeypatch.setattr(transport, "visible_gpus", lambda: 2)
    world = _world(2, ["a", "b", "a"])  # rank 2 is the second rank on host a
    world.MPI.Get_processor_name = lambda: "a"
    assert device_of_rank(world, "cuda") == "cuda:1"
    assert device_of_rank(world, "cuda:0") == "cuda:0"
    monkeypatch.setattr(transport, "visible_gpus", lambda: pytest.fail("no GPU asked for"))
    assert device_of_rank(world, "cpu") == "cpu"


# ------------------------------------------------------------------ fakes of NCCL and MPI
class FakeNccl:
    """The part of ``cupy.cuda.nccl`` that gpu.NcclAllreduce uses. ``sum_over`` (a
    function of a NumPy array, summing it in place over the ranks) makes allReduce real."""

    NCCL_SUM, NCCL_FLOAT16, NCCL_FLOAT32, NCCL_FLOAT64 = 0, 6, 7, 8
    CTYPES = {7: ctypes.c_float, 8: ctypes.c_double}

    def __init__(self, sum_over=None):
        self.sum_over = sum_over
        self.ids_made = 0
        self.comms: list[tuple[int, object, int]] = []
        self.calls: list[tuple] = []

    def get_unique_id(self):
        self.ids_made += 1
        return tuple(range(7, 135))  # 128 numbers, like NCCL's

    def NcclCommunicator(self, size, uid, rank):  # noqa: N802 - CuPy's name
        self.comms.append((size, uid, rank))
        return self

    def allReduce(self, send, recv, count, dtype, op, stream):  # noqa: N802 - CuPy's name
        self.calls.append((send, recv, count, dtype, op, stream))
        if self.sum_over is not None:
            assert send == recv  # in place
            array = np.ctypeslib.as_array((self.CTYPES[dtype] * count).from_address(recv))
            self.sum_over(array)


class FakeEvent:
    """A CUDA event that is done once recorded (``hang``: never done)."""

    hang = False

    def __init__(self):
        self.records = 0

    def record(self):
        self.records += 1

    @property
    def done(self):
        return not self.hang


class FakeWaiter:
    """Rank ``rank`` of ``size``: bcast hands out ``uid`` (what rank 0 sent); allreduce adds
    ``others`` (the other ranks' sum) to each buffer."""

    def __init__(self, rank, size=2, uid=None, others=1.0):
        self.rank, self.size, self.timeout = rank, size, 0.05
        self.uid, self.others, self.sent, self.reduced = uid, others, [], []

    def bcast(self, value, what):
        self.sent.append(value)
        return value if self.rank == 0 else self.uid

    def allreduce(self, buffers, what):
        self.reduced.append([id(b) for b in buffers])
        for b in buffers:
            b += self.others

    def after(self):
        return "resume advice"


def _fake_nccl_reducer(waiter, nccl, event=FakeEvent):
    return gpu.NcclAllreduce(waiter, nccl, contextlib.nullcontext(),
                             pointer=lambda a: a.ctypes.data, stream=lambda: 4321,
                             event=event)  # fmt: skip


# ------------------------------------------------------------------ NCCL, one process
def test_rank_0_alone_makes_the_unique_id_and_every_rank_gets_it():
    zero, one = FakeNccl(), FakeNccl()
    _fake_nccl_reducer(FakeWaiter(0), zero)
    uid = zero.comms[0][1]
    _fake_nccl_reducer(FakeWaiter(1, uid=uid), one)
    assert (zero.ids_made, one.ids_made) == (1, 0)
    assert zero.comms == [(2, uid, 0)] and one.comms == [(2, uid, 1)]


@pytest.mark.parametrize("dtype, code", [("float32", 7), ("float64", 8), ("float16", 6)])
def test_allreduce_sums_the_flat_buffer_in_place_by_its_pointer(dtype, code):
    nccl = FakeNccl(sum_over=None)
    reducer = _fake_nccl_reducer(FakeWaiter(0), nccl)
    flat = np.arange(10, dtype=dtype)
    reducer([flat], "gradient all-reduce of step 1")
    ((send, recv, count, dtype_code, op, stream),) = nccl.calls
    assert send == recv == flat.ctypes.data
    assert (count, dtype_code, op, stream) == (10, code, FakeNccl.NCCL_SUM, 4321)
    assert reducer.done.records == 1


def test_the_sum_is_not_divided_by_the_number_of_ranks():
    # the loss scale n_r/n already made the sum the whole batch's gradient (package doc)
    nccl = FakeNccl(sum_over=lambda a: a.__iadd__(np.full_like(a, 2.0)))  # the other rank's
    reducer = _fake_nccl_reducer(FakeWaiter(0), nccl)
    flat = np.ones(6, dtype=np.float32)
    reducer([flat], "gradient all-reduce of step 1")
    np.testing.assert_array_equal(flat, np.full(6, 3.0, np.float32))


def test_a_gradient_dtype_without_nccl_code_is_refused():
    reducer = _fake_nccl_reducer(FakeWaiter(0), FakeNccl())
    with pytest.raises(TypeError, match="int32"):
        reducer([np.zeros(3, np.int32)], "gradient all-reduce of step 1")


def test_a_stuck_nccl_allreduce_times_out_at_the_next_step():
    class Stuck(FakeEvent):
        hang = True

    reducer = _fake_nccl_reducer(FakeWaiter(1, uid=(1,)), FakeNccl(), event=Stuck)
    flat = np.zeros(4, np.float32)
    reducer([flat], "gradient all-reduce of step 1")  # queued: nothing waits yet
    with pytest.raises(CollectiveTimeout, match=r"rank 1: the NCCL gradient all-reduce of "
                       r"step 1 did not complete.*resume advice"):  # fmt: skip
        reducer([flat], "gradient all-reduce of step 2")


# ------------------------------------------------------------------ host-staged, one process
def test_host_staged_copies_out_sums_on_the_host_and_copies_back():
    waiter = FakeWaiter(0, others=10.0)
    moves = []

    def download(a, host):
        moves.append("down")
        np.copyto(host, a)

    def upload(host, a):
        moves.append("up")
        np.copyto(a, host)

    reducer = gpu.HostStagedAllreduce(waiter, download=download, upload=upload)
    flat = np.arange(5, dtype=np.float32)
    reducer([flat], "step 1")
    np.testing.assert_array_equal(flat, np.arange(5, dtype=np.float32) + 10)
    host = reducer.hosts[0]
    assert host is not flat and moves == ["down", "up"]
    reducer([flat], "step 2")
    assert reducer.hosts[0] is host  # one host buffer, reused
    assert waiter.reduced == [[id(host)], [id(host)]]  # MPI sums the host copy


# ------------------------------------------------------------------ real MPI jobs, on the CPU
SCRIPT = """
import contextlib, json, sys
sys.path.insert(0, sys.argv[4])
from minitransformer.runtime import checkpoint, distributed
from minitransformer.runtime.distributed import gpu
from minitransformer.train import TrainConfig, Trainer

out, mode, device = sys.argv[1:4]
world = None if mode == "one" else distributed.World.from_mpi()
if world is not None:
    device = distributed.device_of_rank(world, device)
trainer = Trainer(TrainConfig(
    task="copy", steps=12, batch_size=7, dropout=0.0, out=out, log_every=4,
    checkpoint_every=12, eval_every=1000, eval_samples=4, final_eval_samples=4,
    progress=False, plots=False, device=device, task_knobs=dict(n_train=100),
    model_overrides=dict(d_model=16, N=1, d_ff=32, h=2)))
report = {"device": device}
if world is not None:
    world.attach(trainer)
    report["transport"] = world.transport
    if mode == "fake-nccl":
        from mpi4py import MPI
        from test_distributed_gpu import FakeNccl, FakeEvent
        fake = FakeNccl(sum_over=lambda a: MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, a))
        world.reduce = gpu.NcclAllreduce(
            world.waiter, fake, contextlib.nullcontext(), pointer=lambda a: a.ctypes.data,
            stream=lambda: 0, event=FakeEvent)
        flat = trainer.optimizer.groups[0].grad
        report.update(ids_made=fake.ids_made, comms=fake.comms, buffer=flat.ctypes.data,
                      size=int(flat.size))
    elif mode == "host-staged":
        world.reduce = gpu.HostStagedAllreduce(world.waiter)
trainer.train()
if world is not None and mode == "fake-nccl":
    report["calls"] = len(fake.calls)
    report["pointers"] = sorted({c[0] for c in fake.calls})
    report["counts"] = sorted({c[2] for c in fake.calls})
print("REPORT", json.dumps(report), flush=True)
"""


def _run(tmp_path: Path, name: str, mode: str, device: str = "cpu", ranks: int | None = None):
    """The script as one process (``ranks`` None) or under mpiexec; its losses, reports."""
    script = tmp_path / "dp_gpu.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, str(script), str(tmp_path / name), mode, device, str(ROOT / "tests")]
    if ranks is not None:
        cmd = [str(MPIEXEC), "-n", str(ranks), *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    reports = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines()
               if line.startswith("REPORT ")]  # fmt: skip
    losses = checkpoint.load_checkpoint(tmp_path / name / "checkpoint.safetensors")[1]["losses"]
    return losses, reports, done.stderr


@needs_mpi
def test_the_nccl_path_with_a_fake_nccl_matches_one_process(tmp_path):
    one, _, _ = _run(tmp_path, "one", "one")
    two, reports, _ = _run(tmp_path, "two", "fake-nccl", ranks=2)
    assert len(one) == len(two) == 12
    np.testing.assert_allclose(two, one, rtol=2e-5, atol=1e-6)
    assert [r["ids_made"] for r in reports] in ([1, 0], [0, 1])  # rank 0 alone, any order
    uids = {json.dumps(r["comms"][0][1]) for r in reports}
    assert len(uids) == 1  # every rank joined with rank 0's id
    assert sorted(r["comms"][0][2] for r in reports) == [0, 1]
    for r in reports:
        assert r["transport"] == "mpi"  # the CPU's choice; the test swapped the reducer
        assert r["calls"] == 12  # one allReduce a step, on the flat buffer, all of it
        assert r["pointers"] == [r["buffer"]] and r["counts"] == [r["size"]]


@needs_mpi
def test_host_staged_over_mpi_with_numpy_as_the_device_matches_one_process(tmp_path):
    one, _, _ = _run(tmp_path, "one", "one")
    two, reports, err = _run(tmp_path, "two", "host-staged", ranks=2)
    np.testing.assert_allclose(two, one, rtol=2e-5, atol=1e-6)
    assert [r["transport"] for r in reports] == ["mpi", "mpi"]
    assert "gradient all-reduce:" not in err  # CPU jobs log nothing new


# ------------------------------------------------------------------ on a GPU (skipped here)
def _gpus() -> int:
    return transport.visible_gpus() if mt.cuda_available() else 0


@needs_mpi
@pytest.mark.gpu
def test_two_ranks_on_one_gpu_go_host_staged_and_match_one_process(tmp_path):
    one, _, _ = _run(tmp_path, "one", "one", device="cuda:0")
    two, reports, err = _run(tmp_path, "two", "gpu", device="cuda:0", ranks=2)
    assert [r["transport"] for r in reports] == ["host-staged", "host-staged"]
    assert "gradient all-reduce: host-staged (ranks 0, 1 share one GPU" in err
    np.testing.assert_allclose(two, one, rtol=1e-4, atol=1e-6)


@needs_mpi
@pytest.mark.gpu
@pytest.mark.skipif(_gpus() < 2, reason="needs 2 GPUs (NCCL refuses 2 ranks on one GPU)")
def test_two_ranks_on_two_gpus_go_over_nccl_and_match_one_process(tmp_path):
    if transport.load_nccl() is None:
        pytest.skip("CuPy has no NCCL here (pip install nvidia-nccl-cu13)")
    one, _, _ = _run(tmp_path, "one", "one", device="cuda:0")
    two, reports, err = _run(tmp_path, "two", "gpu", device="cuda", ranks=2)
    assert sorted(r["device"] for r in reports) == ["cuda:0", "cuda:1"]  # local rank mod GPUs
    assert [r["transport"] for r in reports] == ["nccl", "nccl"]
    assert "gradient all-reduce: nccl (2 ranks, each on its own GPU (1 host): NCCL)" in err
    np.testing.assert_allclose(two, one, rtol=1e-4, atol=1e-6)


def test_the_host_names_are_gathered_once_for_the_device_and_the_blas_threads(monkeypatch):
    """The CLI asks device_of_rank, then local_size: one collective between them."""
    from minitransformer.runtime.distributed import device_of_rank, local_size

    monkeypatch.setattr(transport, "visible_gpus", lambda: 2)
    world = _world(1, ["a", "a", "b"])
    gathers = []
    gather = world.waiter.allgather
    world.waiter.allgather = lambda mine, what: gathers.append(what) or gather(mine, what)
    assert device_of_rank(world, "cuda") == "cuda:1" and local_size(world) == 2
    assert gathers == ["start (the host names)"]
