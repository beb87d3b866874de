"""Tests for minitransformer.runtime.checkpoint: round trips, atomicity, corruption and hostile
files."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import minitransformer
from minitransformer.errors import CheckpointError
from minitransformer.runtime import checkpoint as ckpt
from minitransformer.runtime.checkpoint import (
    check_config,
    latest_checkpoint,
    load_checkpoint,
    read_metadata,
    save_checkpoint,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def _arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "model.encoder.layers.0.attn.w_q.weight": rng.standard_normal((4, 3)).astype(np.float32),
        "model.encoder.layers.0.attn.w_q.bias": rng.standard_normal(3),  # float64
        "optim.m.model.encoder.layers.0.attn.w_q.weight": np.zeros((4, 3), np.float32),
        "optim.step": np.array(7, dtype=np.int64),  # 0-d
        "data.mask": np.array([True, False, True]),
        "data.ids": np.arange(6, dtype=np.int64).reshape(2, 3),
        "half": np.linspace(0, 1, 5, dtype=np.float16),
        "empty": np.zeros((0, 4), np.float32),
        "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    }


def _assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert set(a) == set(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].shape == b[name].shape, name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _rewrite_archive(src: Path, dst: Path, replace: dict[str, bytes]) -> None:
    """Copy a zip archive, swapping the bytes of some members (keeps CRCs consistent)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, replace.get(info.filename, zin.read(info.filename)))


def _legacy_npz(
    path: Path, arrays: dict, meta: dict | None = None, version: int = 2, compress: bool = False
) -> Path:
    """A checkpoint as formats 1 and 2 wrote it: a zip of .npy entries plus __metadata__."""
    meta = {**(meta or {}), "format_version": version, "library_version": "0.1.0"}
    meta = json.loads(json.dumps(meta))
    meta["checksum"] = ckpt.format.checksum(arrays, meta if version >= 2 else None)
    entries = {"__metadata__": np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays}
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        for name, array in entries.items():
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
    return path


def _npy_bytes(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


# --- round trip -------------------------------------------------------------------------------


def test_round_trip_dtypes_shapes_and_metadata(tmp_path):
    arrays = _arrays()
    meta = {"step": 120, "config": {"d_model": 8, "betas": (0.9, 0.98)}, "loss": np.float32(1.5)}
    path = save_checkpoint(tmp_path / "run" / "ckpt.safetensors", arrays, meta)
    assert path == tmp_path / "run" / "ckpt.safetensors" and path.is_file()

    loaded, loaded_meta = load_checkpoint(path)
    _assert_same(arrays, loaded)
    assert loaded["optim.step"].shape == ()
    assert loaded_meta["step"] == 120
    assert loaded_meta["config"] == {"d_model": 8, "betas": [0.9, 0.98]}
    assert loaded_meta["loss"] == 1.5
    assert loaded_meta["format_version"] == ckpt.FORMAT_VERSION
    assert loaded_meta["library_version"] == minitransformer.__version__
    assert loaded_meta["checksum"].startswith("sha256:")
    assert "T" in loaded_meta["created_at"]
    assert read_metadata(path) == loaded_meta


def test_round_trip_empty_dict_and_no_metadata(tmp_path):
    path = save_checkpoint(tmp_path / "empty.safetensors", {})
    arrays, meta = load_checkpoint(path)
    assert arrays == {}
    assert meta["format_version"] == ckpt.FORMAT_VERSION


def test_round_trip_names_numpy_savez_cannot_take_and_big_endian(tmp_path):
    arrays = {"file": np.ones(3), "allow_pickle": np.zeros(2, np.int32), "a/b.c": np.eye(2)}
    path = save_checkpoint(tmp_path / "c.safetensors", arrays, {})
    loaded, _ = load_checkpoint(path)
    _assert_same(arrays, loaded)
    path = save_checkpoint(tmp_path / "be.safetensors", {"w": np.arange(3, dtype=">i4")}, {})
    assert load_checkpoint(path)[0]["w"].tolist() == [0, 1, 2]


def test_file_is_a_plain_safetensors_file_that_safetensors_reads(tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import load_file

    arrays = _arrays()
    path = save_checkpoint(tmp_path / "plain.safetensors", arrays, {"step": 1})
    _assert_same(arrays, load_file(path))
    with safe_open(path, framework="np") as f:
        stored = f.metadata()
    assert stored["format"] == "minitransformer" and stored["format_version"] == "3"
    assert json.loads(stored["metadata"])["step"] == 1
    assert stored["checksum"] == read_metadata(path)["checksum"]


def test_checksum_is_independent_of_insertion_order(tmp_path):
    arrays = _arrays()
    reversed_arrays = dict(reversed(list(arrays.items())))
    a = read_metadata(save_checkpoint(tmp_path / "a.safetensors", arrays))["checksum"]
    b = read_metadata(save_checkpoint(tmp_path / "b.safetensors", reversed_arrays))["checksum"]
    assert a == b


def test_overwrite_replaces_previous_checkpoint(tmp_path):
    path = tmp_path / "last.safetensors"
    save_checkpoint(path, {"w": np.zeros(2)}, {"step": 1})
    save_checkpoint(path, {"w": np.ones(2)}, {"step": 2})
    arrays, meta = load_checkpoint(path)
    assert meta["step"] == 2 and arrays["w"].tolist() == [1.0, 1.0]
    assert [p.name for p in tmp_path.iterdir()] == ["last.safetensors"]  # no temp files left


# --- what save refuses ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, words",
    [
        (np.array([{"a": 1}], dtype=object), "dtype object"),
        (np.array(["a", "b"]), "dtype <U1"),
        ([1.0, 2.0], "is a list"),
    ],
)
def test_save_rejects_non_numeric_arrays(tmp_path, value, words):
    with pytest.raises(CheckpointError, match=words) as info:
        save_checkpoint(tmp_path / "x.safetensors", {"bad": value}, {})
    assert "'bad'" in str(info.value) and "Fix:" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_save_rejects_reserved_name_and_bad_metadata(tmp_path):
    with pytest.raises(CheckpointError, match="reserved"):
        save_checkpoint(tmp_path / "x.safetensors", {ckpt.METADATA_KEY: np.zeros(1)}, {})
    with pytest.raises(CheckpointError, match="JSON-serializable"):
        save_checkpoint(tmp_path / "x.safetensors", {}, {"fn": print})
    assert list(tmp_path.iterdir()) == []


# --- atomicity --------------------------------------------------------------------------------


def test_crash_in_os_replace_keeps_previous_and_cleans_temp(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, {"w": np.zeros(3)}, {"step": 1})

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt.format.os, "replace", boom)
    with pytest.raises(CheckpointError, match="previous file, if any, is untouched"):
        save_checkpoint(path, {"w": np.ones(3)}, {"step": 2})
    monkeypatch.undo()

    arrays, meta = load_checkpoint(path)
    assert meta["step"] == 1 and arrays["w"].tolist() == [0.0, 0.0, 0.0]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.safetensors"]


def test_interrupt_halfway_through_writing_keeps_previous_and_cleans_temp(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, {"a": np.zeros(3), "b": np.zeros(3)}, {"step": 1})
    real_write_array = ckpt.format._write_array
    calls = []

    def write_then_interrupt(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # header and one array written, then the user hits Ctrl-C
            raise KeyboardInterrupt
        return real_write_array(*args, **kwargs)

    monkeypatch.setattr(ckpt.format, "_write_array", write_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"a": np.ones(3), "b": np.ones(3)}, {"step": 2})
    monkeypatch.undo()

    assert read_metadata(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.safetensors"]


_KILLED_WRITER = """
import sys, time
from pathlib import Path
import numpy as np
from minitransformer.runtime.checkpoint import format, save_checkpoint

target, ready = Path(sys.argv[1]), Path(sys.argv[2])
real_write_array = format._write_array
calls = []

def slow_write_array(*args, **kwargs):
    real_write_array(*args, **kwargs)
    calls.append(1)
    if len(calls) == 2:          # mid-write: the header and two big arrays are on disk
        ready.write_text("mid-write")
        time.sleep(60)           # the test SIGKILLs us here

format._write_array = slow_write_array
big = {f"w{i}": np.full(2_000_000, i, np.float32) for i in range(3)}
save_checkpoint(target, big, {"step": 2})
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
def test_sigkill_mid_write_leaves_previous_checkpoint_intact(tmp_path):
    target, ready = tmp_path / "ckpt.safetensors", tmp_path / "ready.txt"
    previous = {"w0": np.arange(5, dtype=np.float32)}
    save_checkpoint(target, previous, {"step": 1})

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *sys.path])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(target), str(ready)], env=env
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, "the writer subprocess exited early"
            assert time.monotonic() < deadline, "the writer never reached mid-write"
            time.sleep(0.02)
        temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        assert len(temps) == 1 and temps[0].stat().st_size > 4_000_000  # really mid-write
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    arrays, meta = load_checkpoint(target)  # the old checkpoint, whole and verified
    assert meta["step"] == 1
    _assert_same(previous, arrays)
    assert latest_checkpoint(tmp_path) == target  # the orphaned hidden temp file is ignored


# --- damaged and hostile files ----------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match=r"nope\.safetensors: file not found\. Fix:"):
        load_checkpoint(tmp_path / "nope.safetensors")


@pytest.mark.parametrize("keep", [0.0, 0.3, 0.7, 0.999])
def test_truncated_file(tmp_path, keep):
    path = save_checkpoint(tmp_path / "t.safetensors", _arrays(), {"step": 3})
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match="t.safetensors") as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value) and "Fix:" in str(info.value)


def test_flipped_byte_in_array_data_is_detected(tmp_path):
    arrays = {"w": np.zeros(1000, np.float32)}
    path = save_checkpoint(tmp_path / "f.safetensors", arrays, {})
    data = bytearray(path.read_bytes())
    offset = data.index(b"\x00" * 64, len(data) // 3)  # inside the zero-filled array payload
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="f.safetensors"):
        load_checkpoint(path)


def test_checksum_mismatch_on_edited_array(tmp_path):
    """An archive rebuilt with a changed array (valid zip CRCs) fails only our checksum."""
    path = _legacy_npz(tmp_path / "orig.npz", {"w": np.zeros(4)}, {"step": 1})
    edited = tmp_path / "edited.npz"
    _rewrite_archive(path, edited, {"w.npy": _npy_bytes(np.ones(4))})
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        load_checkpoint(edited)
    arrays, _ = load_checkpoint(edited, verify=False)  # an explicit opt-out still reads it
    assert arrays["w"].tolist() == [1.0] * 4


def test_missing_or_bad_metadata(tmp_path):
    plain = tmp_path / "plain.npz"
    np.savez(plain, w=np.zeros(2))
    with pytest.raises(CheckpointError, match="no __metadata__ entry"):
        load_checkpoint(plain)

    path = _legacy_npz(tmp_path / "ok.npz", {"w": np.zeros(2)}, {})
    for name, payload, words in [
        ("json.npz", np.frombuffer(b"{not json", np.uint8), "not valid JSON"),
        ("list.npz", np.frombuffer(b"[1, 2]", np.uint8), "not a JSON object"),
        ("dtype.npz", np.zeros(3, np.float32), "malformed __metadata__"),
    ]:
        bad = tmp_path / name
        _rewrite_archive(path, bad, {"__metadata__.npy": _npy_bytes(payload)})
        with pytest.raises(CheckpointError, match=words):
            load_checkpoint(bad)


def test_unknown_format_version(tmp_path):
    path = _legacy_npz(tmp_path / "ok.npz", {"w": np.zeros(2)}, {})
    meta = read_metadata(path)
    meta["format_version"] = ckpt.FORMAT_VERSION + 1
    newer = tmp_path / "newer.npz"
    raw = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    _rewrite_archive(path, newer, {"__metadata__.npy": _npy_bytes(raw)})
    with pytest.raises(
        CheckpointError,
        match=f"unknown checkpoint format version {ckpt.FORMAT_VERSION + 1}.*upgrade",
    ):
        load_checkpoint(newer)


def test_not_an_archive(tmp_path):
    for name, content, words in [
        ("text.safetensors", b"hello, world", "not a .safetensors checkpoint"),
        ("zero.safetensors", b"", "empty"),
    ]:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(CheckpointError, match=words):
            load_checkpoint(tmp_path / name)
    np.save(tmp_path / "single.npy", np.zeros(3))
    with pytest.raises(CheckpointError, match="single .npy array"):
        load_checkpoint(tmp_path / "single.npy")
    with pytest.raises(CheckpointError, match="not a regular file"):
        load_checkpoint(tmp_path)


class _Payload:
    """Unpickling this object creates the marker file: proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


class _ShellPayload:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _object_array(payload) -> np.ndarray:
    array = np.empty(1, dtype=object)
    array[0] = payload
    return array


@pytest.mark.parametrize("payload_type", [_Payload, _ShellPayload])
def test_malicious_pickle_entry_is_never_executed(tmp_path, payload_type):
    marker = tmp_path / "pwned"
    evil = _npy_bytes(_object_array(payload_type(marker)), allow_pickle=True)

    # Control: the payload really does run when unpickled, so the test below means something.
    control = tmp_path / "control.npy"
    control.write_bytes(evil)
    if payload_type is _ShellPayload and os.name != "posix":
        pytest.skip("shell payload needs POSIX `touch`")
    np.load(control, allow_pickle=True)
    assert marker.exists()
    marker.unlink()

    good = _legacy_npz(tmp_path / "good.npz", {"w": np.zeros(2)}, {})
    path = tmp_path / "evil.npz"
    _rewrite_archive(good, path, {"w.npy": evil})
    with pytest.raises(CheckpointError, match="'w' has dtype object.*pickle") as info:
        load_checkpoint(path)
    assert "evil.npz" in str(info.value)
    assert not marker.exists()

    # Also as the metadata entry, which is read first.
    path2 = tmp_path / "evil_meta.npz"
    _rewrite_archive(good, path2, {"__metadata__.npy": evil})
    with pytest.raises(CheckpointError, match="pickle"):
        load_checkpoint(path2)
    with pytest.raises(CheckpointError, match="pickle"):
        read_metadata(path2)
    latest_checkpoint(tmp_path)  # reads every candidate's metadata, safely
    assert not marker.exists()


def test_raw_pickle_renamed_to_npz_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "model.npz"
    path.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(CheckpointError, match="Python pickle, which is never loaded"):
        load_checkpoint(path)
    assert not marker.exists()


def test_object_array_npy_renamed_to_npz_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "model.npz"
    path.write_bytes(_npy_bytes(_object_array(_Payload(marker)), allow_pickle=True))
    with pytest.raises(CheckpointError, match="single .npy array"):
        load_checkpoint(path)
    assert not marker.exists()


# --- trainer helpers --------------------------------------------------------------------------


def test_check_config_accepts_equal_configs_after_json_round_trip():
    expected = {"d_model": 8, "h": 2, "betas": (0.9, 0.98), "optim": {"lr": 1e-3}}
    stored = json.loads(json.dumps(expected))
    check_config(stored, expected)  # tuple vs list is not a difference


def test_check_config_lists_every_differing_key(tmp_path):
    stored = {"d_model": 512, "h": 8, "N": 6, "optim": {"lr": 1e-3}, "old": 1}
    expected = {"d_model": 256, "h": 8, "N": 6, "optim": {"lr": 2e-3}, "new": 2}
    with pytest.raises(CheckpointError) as info:
        check_config(stored, expected, path=tmp_path / "c.npz")
    message = str(info.value)
    assert "c.npz" in message and "Fix:" in message and "\n" not in message
    assert "d_model (checkpoint 512, expected 256)" in message
    assert "optim.lr (checkpoint 0.001, expected 0.002)" in message
    assert "old (checkpoint 1, expected <missing>)" in message
    assert "new (checkpoint <missing>, expected 2)" in message
    assert " h (" not in message and "N (" not in message

    with pytest.raises(CheckpointError, match="d_model") as info:
        check_config(stored, expected, ignore=["optim.lr", "old", "new"])
    assert "optim.lr" not in str(info.value)


def test_latest_checkpoint(tmp_path):
    assert latest_checkpoint(tmp_path / "missing") is None
    assert latest_checkpoint(tmp_path) is None

    save_checkpoint(tmp_path / "step_000900.safetensors", {}, {"step": 900})
    save_checkpoint(tmp_path / "step_001000.safetensors", {}, {"step": 1000})
    save_checkpoint(tmp_path / "step_000200.safetensors", {}, {"step": 200})  # newest mtime
    _legacy_npz(tmp_path / "old.npz", {}, {"step": 950})  # a legacy file is a candidate too
    (tmp_path / ".step_005000.safetensors.123-abcd.tmp").write_bytes(b"partial")
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    assert latest_checkpoint(tmp_path) == tmp_path / "step_001000.safetensors"

    # The step in metadata wins over the file name; names are the fallback.
    save_checkpoint(tmp_path / "last.safetensors", {}, {"step": 1500})
    assert latest_checkpoint(tmp_path) == tmp_path / "last.safetensors"
    (tmp_path / "ckpt_2000.npz").write_bytes(b"garbage")  # unreadable: ranked by its name
    assert latest_checkpoint(tmp_path) == tmp_path / "ckpt_2000.npz"


def test_section_and_checkpoint_file(tmp_path):
    from minitransformer.runtime.checkpoint import checkpoint_file, section

    arrays = {"model.a.w": np.ones(2), "optim.m.0": np.zeros(1), "modelx.b": np.ones(1)}
    assert list(section(arrays, "model")) == ["a.w"]
    assert list(section(arrays, "optim")) == ["m.0"]
    assert checkpoint_file(tmp_path) == tmp_path / "checkpoint.safetensors"
    assert checkpoint_file(tmp_path / "x.npz") == tmp_path / "x.npz"
    (tmp_path / "checkpoint.npz").write_bytes(b"")  # only a legacy file: that one
    assert checkpoint_file(tmp_path) == tmp_path / "checkpoint.npz"
    (tmp_path / "checkpoint.safetensors").write_bytes(b"")  # both: the current one
    assert checkpoint_file(tmp_path) == tmp_path / "checkpoint.safetensors"


# --- the metadata is covered, sizes are checked before allocation ------------------------------


def _with_metadata(src: Path, dst: Path, meta: dict) -> Path:
    raw = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    _rewrite_archive(src, dst, {"__metadata__.npy": _npy_bytes(raw)})
    return dst


def test_an_edited_metadata_field_fails_the_checksum(tmp_path):
    path = _legacy_npz(tmp_path / "ok.npz", {"w": np.zeros(2)}, {"step": 200, "kind": "x"})
    meta = read_metadata(path)
    for key, value in [("step", 10), ("kind", "y"), ("extra", 1)]:
        edited = _with_metadata(path, tmp_path / f"{key}.npz", {**meta, key: value})
        with pytest.raises(CheckpointError, match="checksum mismatch: the arrays or the metadata"):
            load_checkpoint(edited)
    load_checkpoint(_with_metadata(path, tmp_path / "same.npz", dict(reversed(meta.items()))))


def test_a_version_2_file_still_loads(tmp_path):
    """Format 2 (.npz, checksum over arrays and metadata) loads through the legacy reader."""
    arrays = _arrays()
    for compress in (False, True):
        path = _legacy_npz(tmp_path / f"v2{compress}.npz", arrays, {"step": 3}, compress=compress)
        loaded, meta = load_checkpoint(path)
        assert meta["step"] == 3 and meta["format_version"] == 2
        _assert_same(arrays, loaded)


def _npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    import io

    buffer = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


@pytest.mark.parametrize("shape", [(10**8,), (10**12,), (2**40, 2**40), (0, 10**18)])
def test_declared_sizes_are_checked_before_allocating(tmp_path, shape):
    import tracemalloc

    path = _legacy_npz(tmp_path / "ok.npz", {"w": np.zeros(2)}, {})
    bad = tmp_path / "bad.npz"
    _rewrite_archive(path, bad, {"w.npy": _npy_header(shape) + b"\0" * 16})
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(
            CheckpointError, match=r"entry 'w' declares shape .* but holds 16 bytes"
        ):
            load_checkpoint(bad, verify=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6 and time.perf_counter() - started < 5


def test_an_entry_that_claims_to_inflate_beyond_deflate_is_refused(tmp_path):
    path = _legacy_npz(tmp_path / "z.npz", {"w": np.zeros(1000)}, {}, compress=True)
    data = bytearray(path.read_bytes())
    central = data.index(b"PK\x01\x02")
    while True:  # the central-directory record of w.npy: make it claim 4 GB uncompressed
        name_len = int.from_bytes(data[central + 28 : central + 30], "little")
        if data[central + 46 : central + 46 + name_len] == b"w.npy":
            data[central + 24 : central + 28] = (2**32 - 2).to_bytes(4, "little")
            break
        central = data.index(b"PK\x01\x02", central + 4)
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="claims 4,294,967,294 bytes from"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"[" * 100_000, "not valid JSON"),  # nesting: a RecursionError without the check
        (b'{"step": 1' + b"0" * 5000 + b"}", "not valid JSON"),  # an int too long to parse
        (b"\xff\xfe{}", "not valid JSON"),
        (b'{"format_version": true}', "unknown checkpoint format version True"),
        (b'{"format_version": 2.0}', "unknown checkpoint format version 2.0"),
    ],
)
def test_hostile_metadata_is_one_clear_error(tmp_path, payload, words):
    path = _legacy_npz(tmp_path / "ok.npz", {"w": np.zeros(2)}, {})
    bad = tmp_path / "bad.npz"
    _rewrite_archive(path, bad, {"__metadata__.npy": _npy_bytes(np.frombuffer(payload, np.uint8))})
    with pytest.raises(CheckpointError, match=words):
        load_checkpoint(bad)
