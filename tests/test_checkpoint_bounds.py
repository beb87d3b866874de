"""Memory and time that a small file controls (issue 17): every size a checkpoint declares is
checked against what the file may legitimately hold before anything is allocated.

Classes: the safetensors header (length, duplicates, padding, canonical metadata), array
ranges (overlap, gaps, outside the file, truncation), dtypes and shapes against the model
config (a config claiming gigabytes it does not hold), legacy .npz archives (unknown and
duplicate entries, deflate bombs, oversized metadata, zip flags and methods), format 1 and
its upgrade, and task knobs that would never finish or exhaust memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from minitransformer.config import TrainConfig, TransformerConfig
from minitransformer.errors import CheckpointError, ConfigError
from minitransformer.runtime import checkpoint
from minitransformer.runtime.checkpoint import (
    expect_model_arrays,
    load_checkpoint,
    model_layout,
    read_metadata,
    save_checkpoint,
)

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "lessons" / "checkpoints"
RESERVED = checkpoint.RESERVED_METADATA_KEYS


def _shipped() -> tuple[dict, dict]:
    """The translate-tiny model checkpoint: real weights, config and tokenizer."""
    arrays, meta = load_checkpoint(SHIPPED / "translate-tiny" / "checkpoint.safetensors")
    return arrays, {k: v for k, v in meta.items() if k not in RESERVED}


def _raw(path: Path, header: dict | bytes, data: bytes, length: int | None = None) -> Path:
    """A safetensors file with any header (a dict is dumped as is, duplicates impossible)."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    prefix = (len(text) if length is None else length).to_bytes(8, "little")
    path.write_bytes(prefix + text + data)
    return path


def _parts(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + length]), data[8 + length :]


_PEAK = """
def peak_mb():  # VmHWM: this process's own high-water mark (ru_maxrss keeps the parent's
    try:        # from before exec on Linux, so a big pytest process would show through)
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""


def _peak_rss_mb(code: str) -> tuple[float, str]:
    """Run ``code`` in a fresh interpreter; its peak resident memory (MB) and its output."""
    script = (
        _PEAK + "try:\n" + "".join(f"    {line}\n" for line in code.splitlines()) + ""
        "except Exception as err:\n    print(type(err).__name__, err)\n"
        "print('PEAK', peak_mb())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    peak = float(out.stdout.rsplit("PEAK", 1)[1])
    return peak, out.stdout + out.stderr


# --- the closed-form layout is the built model's --------------------------------------------


# fmt: off
VARIANTS = [  # (preset, changed fields): tied/untied, pre-LN, learned positions, key_dim, ...
    ("tiny", {}),
    ("small", {}),
    ("tiny", dict(tie_embeddings=False, tgt_vocab=31)),
    ("tiny", dict(pre_norm=True, learned_positions=True, key_dim=8)),
    ("tiny", dict(N=3, d_model=32, h=8, d_ff=48, dtype="float64")),
    ("tiny", dict(logits_bias=True, decoder_N=3, decoder_h=2, decoder_d_ff=40,
                  activation="swish")),
    ("tiny", dict(logits_bias=True, tie_embeddings=False, tgt_vocab=31, decoder_N=1, key_dim=4)),
    ("small", dict(pre_norm=True, tie_embeddings=False, tgt_vocab=29, logits_bias=True,
                   learned_positions=True, max_len=40, decoder_h=8, key_dim=12)),
    ("tiny", dict(N=1, decoder_N=2, decoder_d_ff=8, scale_attention=False,
                  attention_block_size=4, position_layout="halves")),
]
# fmt: on


@pytest.mark.parametrize("preset, changes", VARIANTS)
def test_model_layout_is_the_state_dict_of_a_built_model(preset, changes):
    """The config's one shape table (parameter_shapes) is the built model's parameters,
    name for name and in order; num_parameters() sums it; model_layout() adds the dtype."""
    from minitransformer.nn.transformer import Transformer

    cfg = TransformerConfig.preset(preset, src_vocab=30, tgt_vocab=30).to_dict()
    cfg = TransformerConfig.from_dict({**cfg, **changes})
    model = Transformer(cfg)
    built = {k: (tuple(v.shape), str(v.dtype)) for k, v in model.state_dict().items()}
    assert model_layout(cfg) == built and list(model_layout(cfg)) == list(built)
    params = [(name, tuple(p.shape)) for name, p in model.named_parameters()]
    assert list(cfg.parameter_shapes().items()) == params  # the table, name for name
    # the optimizer's state index i is the i-th parameter: the layout's order
    assert [tuple(p.shape) for p in model.parameters()] == [s for s, _ in built.values()]
    assert cfg.num_parameters() == model.num_parameters()  # the closed form of the config
    assert cfg.num_parameters() == sum(int(np.prod(s)) for s in cfg.parameter_shapes().values())


@pytest.mark.parametrize("name", ["tiny", "small", "base", "big"])
def test_num_parameters_sums_the_shape_table_of_each_preset(name):
    """No model built: the count is the table's sum for every preset (the base model with
    a 37,000-token joint vocabulary has the 63,082,496 weights lesson 11 quotes)."""
    for vocab, tied in ((37000, True), (500, False)):
        sizes = dict(src_vocab=vocab, tgt_vocab=vocab, tie_embeddings=tied)
        cfg = TransformerConfig.preset(name, **sizes)
        shapes = cfg.parameter_shapes()
        assert cfg.num_parameters() == sum(int(np.prod(s)) for s in shapes.values())
        assert len(shapes) == (3 if not tied else 1) + 16 * cfg.N + 26 * cfg.N
    base = TransformerConfig.preset("base", src_vocab=37000, tgt_vocab=37000)
    assert base.num_parameters() == 63_082_496


def test_num_parameters_does_not_list_the_layers():
    """A config of a million tiny layers is sized per layer table (the check of a
    checkpoint's model_config must not loop over N), and one of a billion is refused."""
    cfg = TransformerConfig(src_vocab=4, tgt_vocab=4, d_model=1, h=1, N=10**6, d_ff=1)
    per_layer = 8 + 4 + 4, 16 + 4 + 6  # (attention(s), ffn, LayerNorms): encoder, decoder
    assert cfg.num_parameters() == 4 + 10**6 * sum(per_layer)
    with pytest.raises(ConfigError, match="parameters"):
        TransformerConfig(src_vocab=4, tgt_vocab=4, d_model=1, h=1, N=10**9, d_ff=1)


# --- the header --------------------------------------------------------------------------------


def test_header_length_above_the_cap_is_refused_before_reading(tmp_path):
    path = _raw(tmp_path / "a.safetensors", {}, b"", length=2**40)
    with pytest.raises(CheckpointError, match="header claims 1,099,511,627,776 bytes, above"):
        load_checkpoint(path)


@pytest.mark.parametrize("lie", [+1, +1000, -8])
def test_header_length_that_lies_is_refused(tmp_path, lie):
    good = save_checkpoint(tmp_path / "g.safetensors", {"w": np.zeros(3)}, {"step": 1})
    data = bytearray(good.read_bytes())
    length = int.from_bytes(data[:8], "little")
    data[:8] = (length + lie).to_bytes(8, "little")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="not valid JSON|truncated or corrupted") as info:
        load_checkpoint(bad)
    assert "\n" not in str(info.value) and "Fix:" in str(info.value)


def test_a_second_metadata_or_array_name_in_the_header_is_refused_by_name(tmp_path):
    good = save_checkpoint(tmp_path / "g.safetensors", {"w": np.zeros(3)}, {"step": 1})
    header, data = _parts(good)
    text = json.dumps(header)
    meta = json.dumps(header["__metadata__"])
    twice = text[:-1] + ', "__metadata__": ' + meta + "}"
    path = _raw(tmp_path / "meta2.safetensors", twice.encode(), data)
    with pytest.raises(CheckpointError, match="names '__metadata__' twice"):
        load_checkpoint(path)
    w = json.dumps(header["w"])
    path = _raw(tmp_path / "w2.safetensors", (text[:-1] + f', "w": {w}}}').encode(), data)
    with pytest.raises(CheckpointError, match="names 'w' twice"):
        read_metadata(path)


def test_whitespace_bloated_metadata_and_header_are_refused(tmp_path):
    good = save_checkpoint(tmp_path / "g.safetensors", {"w": np.zeros(3)}, {"step": 1})
    header, data = _parts(good)
    bloated = dict(header)
    meta = json.loads(header["__metadata__"]["metadata"])
    bloated["__metadata__"] = {**header["__metadata__"], "metadata": json.dumps(meta, indent=4000)}
    path = _raw(tmp_path / "m.safetensors", bloated, data)
    with pytest.raises(CheckpointError, match="not in the canonical form"):
        load_checkpoint(path)
    padded = json.dumps(header).encode() + b" " * 1_000_000
    path = _raw(tmp_path / "h.safetensors", padded, data)
    with pytest.raises(CheckpointError, match="padded with more than 7 spaces"):
        load_checkpoint(path)


def test_unknown_metadata_keys_and_foreign_files_are_refused(tmp_path):
    good = save_checkpoint(tmp_path / "g.safetensors", {"w": np.zeros(3)}, {"step": 1})
    header, data = _parts(good)
    header["__metadata__"]["extra"] = "x"
    with pytest.raises(CheckpointError, match="unknown or non-text entries"):
        load_checkpoint(_raw(tmp_path / "x.safetensors", header, data))
    from safetensors.numpy import save_file

    save_file({"w": np.zeros(3)}, tmp_path / "foreign.safetensors")
    with pytest.raises(CheckpointError, match="not a minitransformer checkpoint"):
        load_checkpoint(tmp_path / "foreign.safetensors")
    header["__metadata__"] = {**header["__metadata__"], "format_version": "4"}
    del header["__metadata__"]["extra"]
    with pytest.raises(CheckpointError, match="format version 4.*upgrade minitransformer"):
        load_checkpoint(_raw(tmp_path / "v4.safetensors", header, data))


# --- array ranges ------------------------------------------------------------------------------


def _two(tmp_path: Path) -> tuple[dict, bytes]:
    good = save_checkpoint(tmp_path / "g.safetensors", {"a": np.zeros(4), "b": np.ones(4)}, {})
    return _parts(good)


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda h: h["b"].update(data_offsets=[16, 48]), "'b' overlaps the array before it"),
        (lambda h: h["b"].update(data_offsets=[40, 72]), "'b' leaves a gap"),
        (lambda h: h["b"].update(data_offsets=[32, 2**60]), "declares shape"),
        (lambda h: h["b"].update(shape=[10**6], data_offsets=[32, 32 + 8 * 10**6]), "past the end"),
        (lambda h: h["b"].update(shape=[2**40, 2**40]), "declares shape"),
        (lambda h: h["b"].update(shape=[-1]), "malformed shape"),
        (lambda h: h["b"].update(dtype="F8_E4M3"), "unsupported dtype 'F8_E4M3'"),
        (lambda h: h["b"].update(dtype="F32"), "declares shape"),
        (lambda h: h["b"].update(shape=[2, 2]), "checksum mismatch"),
        (lambda h: h["b"].update(extra=1), "malformed header entry"),
    ],
)
def test_array_ranges_are_checked_before_reading(tmp_path, edit, words):
    header, data = _two(tmp_path)
    edit(header)
    with pytest.raises(CheckpointError, match=words):
        load_checkpoint(_raw(tmp_path / "bad.safetensors", header, data))


@pytest.mark.parametrize("keep", [0, 5, 8, 20, 0.5, 0.9, -1])
def test_truncated_safetensors_is_refused(tmp_path, keep):
    arrays, meta = _shipped()
    path = save_checkpoint(tmp_path / "t.safetensors", arrays, meta)
    data = path.read_bytes()
    cut = keep if isinstance(keep, int) and keep >= 0 else int(len(data) * keep) if keep > 0 else -1
    path.write_bytes(data[:cut])
    with pytest.raises(CheckpointError, match="truncated or corrupted|empty") as info:
        load_checkpoint(path, expect=expect_model_arrays)
    assert "\n" not in str(info.value)
    path.write_bytes(data + b"\0" * 8)  # appended bytes are refused too
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        load_checkpoint(path)


# --- dtypes and shapes against the model config -----------------------------------------------


def test_wrong_dtype_or_shape_of_a_weight_is_refused_before_reading(tmp_path):
    arrays, meta = _shipped()
    name = "model.encoder.layers.0.ffn.w_1.weight"
    for value, words in [
        (arrays[name].astype(np.float64), f"{name} has dtype float64, expected float32"),
        (arrays[name].T.copy(), f"{name}: checkpoint \\(256, 64\\) vs model \\(64, 256\\)"),
    ]:
        path = save_checkpoint(tmp_path / "w.safetensors", {**arrays, name: value}, meta)
        with pytest.raises(CheckpointError, match=words):
            load_checkpoint(path, expect=expect_model_arrays)
    path = save_checkpoint(tmp_path / "x.safetensors", {**arrays, "extra": np.zeros(1)}, meta)
    with pytest.raises(CheckpointError, match=r"unexpected keys: \['extra'\]"):
        load_checkpoint(path, expect=expect_model_arrays)
    bad_optim = {**arrays, "optim.m.0": np.zeros(3, np.float32), "optim.m.999": np.zeros(1)}
    path = save_checkpoint(tmp_path / "o.safetensors", bad_optim, meta)
    with pytest.raises(CheckpointError, match="2 mis-shaped|1 mis-shaped, 0 missing, 1 unexp"):
        load_checkpoint(path, expect=expect_model_arrays)


_HUGE = dict(d_model=1024, h=16, N=16, d_ff=8192, max_len=256)  # about 2.75 GiB of float32


def _huge_model_checkpoint(tmp_path: Path, kind: str = "minitransformer-model") -> Path:
    arrays, meta = _shipped()
    meta = {**meta, "kind": kind, "model_config": {**meta["model_config"], **_HUGE}}
    cfg = TransformerConfig.from_dict(meta["model_config"])
    assert cfg.num_parameters() * 4 > 2.5 * 2**30
    return save_checkpoint(tmp_path / "checkpoint.safetensors", arrays, meta)  # checksummed


def test_a_model_config_claiming_gigabytes_is_refused_with_little_memory(tmp_path):
    path = _huge_model_checkpoint(tmp_path)
    for code in [
        "from minitransformer.runtime.translator import Translator\n"
        f"Translator.from_checkpoint({str(path)!r})",
        "from minitransformer.runtime import checkpoint as c\n"
        f"c.load_checkpoint({str(path)!r}, expect=c.expect_model_arrays)",
    ]:
        peak, out = _peak_rss_mb(code)
        assert "CheckpointError" in out and "model_config implies" in out, out
        assert peak < 300, f"peak {peak:.0f} MB: {out}"


def test_a_model_config_claiming_millions_of_layers_is_refused_without_listing_them(tmp_path):
    """A forged model_config with d_model 2 and N = 2,000,000 stays under the size cap but
    implies 84 million weight arrays: refused by their count, before any layout is listed."""
    import time

    arrays, meta = _shipped()
    forged = dict(d_model=2, h=1, N=2_000_000, d_ff=2, key_dim=None, decoder_N=None)
    meta = {**meta, "model_config": {**meta["model_config"], **forged}}
    path = save_checkpoint(tmp_path / "forged.safetensors", arrays, meta)
    t = time.perf_counter()
    with pytest.raises(CheckpointError, match="implies 84,000,001 weight arrays") as info:
        load_checkpoint(path, expect=expect_model_arrays)
    assert time.perf_counter() - t < 5 and "N (checkpoint 2000000, expected 2)" in str(info.value)


# --- legacy .npz archives --------------------------------------------------------------------


def _npz(path: Path, arrays: dict, meta: dict, version: int = 2, extra: dict | None = None):
    """A checkpoint as format 1/2 wrote it, plus ``extra`` raw entries (name -> (bytes, method))."""
    meta = json.loads(json.dumps({**meta, "format_version": version}))
    meta["checksum"] = checkpoint.format.checksum(arrays, meta if version >= 2 else None)
    entries = {"__metadata__": np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays}
    with zipfile.ZipFile(path, "w") as archive:
        for name, array in entries.items():
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
        for name, (payload, method) in (extra or {}).items():
            archive.writestr(zipfile.ZipInfo(name), payload, compress_type=method)
    return path


def _deflated_npy(nbytes: int) -> bytes:
    """A .npy entry of ``nbytes`` zeros, as raw bytes (deflated by writestr)."""
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": "|u1", "fortran_order": False, "shape": (nbytes,)}
    )
    return buffer.getvalue() + bytes(nbytes)


def test_an_extra_deflated_entry_is_refused_by_name_without_inflating(tmp_path):
    arrays, meta = _shipped()
    bomb = {"extra.npy": (_deflated_npy(400 * 2**20), zipfile.ZIP_DEFLATED)}  # ~400 KB on disk
    path = _npz(tmp_path / "checkpoint.npz", arrays, meta, extra=bomb)
    assert path.stat().st_size < 3 * 2**20
    code = (
        "from minitransformer.runtime.translator import Translator\n"
        f"Translator.from_checkpoint({str(path)!r})"
    )
    peak, out = _peak_rss_mb(code)
    assert "unexpected keys: ['extra']" in out and peak < 300, (peak, out)
    load = f"checkpoint.load_checkpoint({str(path)!r})"
    code = f"from minitransformer.runtime import checkpoint\n{load}"
    peak, out = _peak_rss_mb(code)  # a model checkpoint: its model's arrays are expected
    assert "unexpected keys: ['extra']" in out and peak < 300, (peak, out)
    # without a model to compare with, the checksum (streamed: one chunk in memory) refuses it
    path = _npz(tmp_path / "plain.npz", {"w": np.zeros(3)}, {"step": 1}, extra=bomb)
    peak, out = _peak_rss_mb(code.replace("checkpoint.npz", "plain.npz"))
    assert "entries were added" in out and peak < 300, (peak, out)


def test_duplicate_and_oversized_metadata_entries_are_refused_before_inflating(tmp_path):
    arrays, meta = _shipped()
    twice = {"__metadata__.npy": (_deflated_npy(10), zipfile.ZIP_STORED)}
    with pytest.warns(UserWarning, match="Duplicate name"):
        path = _npz(tmp_path / "dup.npz", arrays, meta, extra=twice)
    with pytest.raises(CheckpointError, match="'__metadata__.npy' occurs twice"):
        load_checkpoint(path)
    path = _npz(tmp_path / "big.npz", {"w": np.zeros(2)}, {})
    spaces = b"{" + b" " * (100 * 2**20) + b"}"  # 100 MB of whitespace, 100 KB deflated
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(tmp_path / "ws.npz", "w") as zout:
        zout.writestr("w.npy", zin.read("w.npy"))
        payload = _deflated_npy(len(spaces))[: -len(spaces)] + spaces
        zout.writestr("__metadata__.npy", payload, compress_type=zipfile.ZIP_DEFLATED)
    code = "from minitransformer.runtime import checkpoint\ncheckpoint.load_checkpoint({!r})"
    peak, out = _peak_rss_mb(code.format(str(tmp_path / "ws.npz")))
    assert "above the cap of 67,108,864" in out and peak < 200, (peak, out)


def _set_entry_bits(path: Path, name: bytes, flag: int = 0, method: int | None = None) -> None:
    """Patch the general-purpose flags (and method) of entry ``name`` in both its headers."""
    data = bytearray(path.read_bytes())
    for sig, flag_at, method_at, name_len_at, name_at in [
        (b"PK\x03\x04", 6, 8, 26, 30),
        (b"PK\x01\x02", 8, 10, 28, 46),
    ]:
        at = data.find(sig)
        while at >= 0:
            n = int.from_bytes(data[at + name_len_at : at + name_len_at + 2], "little")
            if data[at + name_at : at + name_at + n] == name:
                old = int.from_bytes(data[at + flag_at : at + flag_at + 2], "little")
                data[at + flag_at : at + flag_at + 2] = (old | flag).to_bytes(2, "little")
                if method is not None:
                    data[at + method_at : at + method_at + 2] = method.to_bytes(2, "little")
            at = data.find(sig, at + 4)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("flag", "method", "words"),
    [
        (0x1, None, "is encrypted \\(zip flag bit 0\\)"),
        (0x20, None, "is patched data \\(zip flag bit 5\\)"),
        (0x40, None, "strongly encrypted"),
        (0, 12, "compression method 12"),
        (0, 99, "compression method 99"),
    ],
)
def test_zip_flags_and_methods_the_reader_cannot_honour_are_refused(tmp_path, flag, method, words):
    for target in (b"w.npy", b"__metadata__.npy"):
        path = _npz(tmp_path / "f.npz", {"w": np.zeros(4)}, {"step": 1})
        _set_entry_bits(path, target, flag, method)
        for read in (load_checkpoint, read_metadata):
            with pytest.raises(CheckpointError, match=words) as info:
                read(path)
            assert "\n" not in str(info.value) and "Fix:" in str(info.value)


# --- format 1 and the upgrade ------------------------------------------------------------------


def test_format_1_is_refused_with_the_upgrade_command_and_upgrade_works(tmp_path):
    arrays, meta = _shipped()
    old = _npz(tmp_path / "checkpoint.npz", arrays, meta, version=1)
    with pytest.raises(CheckpointError, match="format-1.*checkpoint upgrade .*checkpoint.npz"):
        load_checkpoint(old)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "minitransformer.runtime.checkpoint", "upgrade", str(tmp_path)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "checkpoint.safetensors" in done.stdout, done.stderr
    assert checkpoint.checkpoint_file(tmp_path) == tmp_path / "checkpoint.safetensors"
    loaded, new_meta = load_checkpoint(
        tmp_path / "checkpoint.safetensors", expect=expect_model_arrays
    )
    assert new_meta["tokenizer"] == meta["tokenizer"] and new_meta["format_version"] == 3
    assert new_meta["upgraded_from"] == {"format_version": 1, "file": "checkpoint.npz"}
    assert all(np.array_equal(loaded[k], arrays[k]) for k in arrays)
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert "Traceback" not in again.stderr and len(again.stderr.strip().splitlines()) == 1


def test_upgrade_verifies_what_the_old_checksum_covers(tmp_path):
    arrays, meta = _shipped()
    path = _npz(tmp_path / "a.npz", arrays, meta, version=2)
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(tmp_path / "b.npz", "w") as zout:
        for info in zin.infolist():
            raw = zin.read(info.filename)
            if info.filename == "__metadata__.npy":
                raw = raw.replace(b'"step": 4000', b'"step": 4001')
            zout.writestr(info.filename, raw)
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        checkpoint.upgrade_checkpoint(tmp_path / "b.npz")
    assert not (tmp_path / "b.safetensors").exists()


def test_shipped_checkpoints_are_format_3_and_cover_their_tokenizer(tmp_path):
    for name in ("translate-tiny", "en-es-tiny"):
        assert sorted(p.name for p in (SHIPPED / name).iterdir()) == ["checkpoint.safetensors"]
        path = SHIPPED / name / "checkpoint.safetensors"
        assert read_metadata(path)["format_version"] == 3
        load_checkpoint(path, expect=expect_model_arrays)
    # swapping two tokens of the tokenizer is caught (format 1 translated silently differently)
    src = SHIPPED / "translate-tiny" / "checkpoint.safetensors"
    header, data = _parts(src)
    inner = json.loads(header["__metadata__"]["metadata"])
    tokens = inner["tokenizer"]["tokens"]
    tokens[5], tokens[6] = tokens[6], tokens[5]
    header["__metadata__"]["metadata"] = checkpoint.format.canonical_json(inner)
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        load_checkpoint(_raw(tmp_path / "swap.safetensors", header, data))


# --- task knobs and numeric fields: one range table --------------------------------------------


@pytest.mark.parametrize(
    ("knobs", "words"),
    [
        (dict(n_test=10**12), r"task_knobs\['n_test'\] must be a whole number in \[1, 100,000\]"),
        (dict(max_len=10**8), r"task_knobs\['max_len'\] must be a whole number in \[1, 1,000\]"),
        (dict(n_symbols=10**9), r"task_knobs\['n_symbols'\] must be a whole number in \[2,"),
        (dict(n_train=10**6, max_len=1000), "tokens, above the cap of 20,000,000"),
        (dict(n_valid=True), r"task_knobs\['n_valid'\]"),
        (dict(n_test=2.5), r"task_knobs\['n_test'\]"),
    ],
)
def test_task_knobs_out_of_range_are_refused(knobs, words):
    with pytest.raises(ConfigError, match=words):
        TrainConfig(task="copy", task_knobs=knobs)


def test_numeric_fields_out_of_range_are_refused():
    for changes, words in [
        (dict(steps=10**12), "steps must be a positive integer of at most 1,000,000"),
        (dict(warmup=10**9), "warmup must be a positive integer of at most"),
        (dict(batch_size=10**6), "batch_size must be a positive integer of at most 100,000"),
        (dict(seed=2**64), "seed must be a non-negative integer of at most"),
        (dict(task="translate", task_knobs=dict(min_words=40)), r"min_words'\] must be"),
        (dict(task="translate-en-es", task_knobs=dict(n_merges=10**7)), r"n_merges'\] must"),
    ]:
        with pytest.raises(ConfigError, match=words):
            TrainConfig(**changes)
    TrainConfig(task="translate-en-es", task_knobs=dict(n_train=None, lowercase=False))
    TrainConfig(checkpoint_every=10**9)  # periods allocate nothing


def test_the_cli_uses_the_same_ranges():
    from minitransformer.cli import flags
    from minitransformer.config.train import KNOB_RANGES

    for task, ranges in KNOB_RANGES.items():
        for key, (low, high) in ranges.items():
            small = [("n_train", 100)] if key != "n_train" and "n_train" in ranges else []
            assert flags.checked_knobs(task, [*small, (key, high)])[key] == high
            TrainConfig(task=task, task_knobs=dict([*small, (key, high)]))
            for bad in (low - 1, high + 1):
                with pytest.raises(ConfigError, match=f"--knob {key}={bad}: expected"):
                    flags.checked_knobs(task, [(key, bad)])
                with pytest.raises(ConfigError, match=f"task_knobs\\['{key}'\\] must be"):
                    TrainConfig(task=task, task_knobs={key: bad})


def test_a_checkpoint_with_knobs_out_of_range_is_refused_by_evaluate_and_resume(tmp_path):
    from minitransformer.runtime.translator import Translator

    arrays, meta = _shipped()
    train_config = {**meta["train_config"], "task_knobs": {"n_test": 10**12}}
    path = save_checkpoint(
        tmp_path / "checkpoint.safetensors", arrays, {**meta, "train_config": train_config}
    )
    with pytest.raises(CheckpointError, match=r"train_config.*n_test"):
        Translator.from_checkpoint(path)  # evaluate's first step: before, it ran forever
    with pytest.raises(CheckpointError, match=r"train_config.*n_test"):
        checkpoint.check_train_config(path, train_config)  # what --resume checks it with


def test_the_cli_evaluate_refuses_a_forged_checkpoint_in_one_line(tmp_path, capsys):
    from minitransformer.cli import main

    path = _huge_model_checkpoint(tmp_path)
    assert main(["evaluate", "--checkpoint", str(path.parent)]) != 0
    err = capsys.readouterr().err
    assert "implies" in err and "Traceback" not in err
