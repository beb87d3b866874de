"""A Hugging Face model folder (config.json + model.safetensors), read and written with
checks: the part of ``from_pretrained`` and ``save_pretrained`` that does not depend on the
architecture. Marian (marian_weights.py) and GPT-2 / Llama (gpt2_llama_weights.py) use it.

    folder = model_folder(path, "a Marian model folder", hub)   an existing folder, or how
                                                                 to get one
    dtype = checked_dtype(dtype)                     from_pretrained's dtype argument
    config = read_config(folder, fix)                config.json: capped, no key given twice
    with open_safetensors(folder, "MarianMTModel") as (f, weights):
        check_headers(f, weights, expected)          names, shapes and dtypes, before any read
        arrays = read_finite(f, weights, names, dtype)    the arrays, NaN and Inf refused
    write_model_folder(folder, tensors, config, generation, overwrite)
                                                     the three files, config.json last

Only safetensors is read. A ``pytorch_model.bin`` is a pickle, which can run code when it is
loaded: it is never opened, and the message says how to convert a folder one trusts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .. import checks
from ..checks import listed
from ..data.folder_files import read_json, write_replacing
from ..errors import ArgumentError, CheckpointError

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KB
DTYPES = {"F16": "float16", "F32": "float32", "F64": "float64"}  # safetensors' names
NOT_SAFETENSORS = (  # other weight files, named when model.safetensors is missing
    "pytorch_model.bin",
    "model.safetensors.index.json",  # sharded: not read here
    "tf_model.h5",
    "flax_model.msgpack",
    "rust_model.ot",
)

Expected = dict[str, tuple[int, ...]]
"""A file's weight name -> the shape it must have."""


def model_folder(path: Any, what: str, hub: str) -> Path:
    """``path`` as an existing folder, or an error that says how to get one: ``what`` names
    the folder in a type error ("a Marian model folder"), ``hub`` is the advice for a name
    that looks like a Hub id (owner/name) but is no folder here ("{shown}" in it: the name)."""
    folder = checks.checked_path("from_pretrained", path, what)
    if not folder.is_dir():
        shown = checks.shown_name(str(path))
        looks_like_hub = not folder.exists() and str(path).count("/") == 1
        advice = f"; to download the Hugging Face model {shown}, " + hub.format(shown=shown)
        raise CheckpointError(
            f"from_pretrained: {shown} is not a folder{advice if looks_like_hub else ''}"
        )
    return folder


def checked_dtype(dtype: Any) -> str:
    """from_pretrained's ``dtype`` argument: "float32" or "float64" (the model's dtypes)."""
    if not isinstance(dtype, str) or dtype not in ("float32", "float64"):
        raise ArgumentError(
            f"from_pretrained: dtype must be 'float32' or 'float64' (the dtypes this library "
            f"computes in; the file's own dtype is converted), got {checks.short(dtype)}"
        )
    return dtype


def read_config(folder: Path, fix: str) -> Any:
    """The JSON value of ``folder``/config.json (at most MAX_CONFIG_BYTES)."""
    return read_json(folder / "config.json", MAX_CONFIG_BYTES, fix)


@contextmanager
def open_safetensors(folder: Path, model_class: str) -> Iterator[tuple[Any, Path]]:
    """``(f, path)``: ``folder``/model.safetensors open for reading (safetensors' NumPy
    view). A missing file names the other weight files there and how to convert them with
    transformers' ``model_class``; a damaged file is a CheckpointError."""
    weights = folder / "model.safetensors"
    if weights.exists() and not weights.is_file():  # a FIFO would make safe_open wait
        raise CheckpointError(
            f"{weights}: not a regular file (a FIFO, a device or a folder); put the model's "
            "model.safetensors file there"
        )
    if not weights.is_file():
        found = [n for n in NOT_SAFETENSORS if (folder / n).exists()]
        raise CheckpointError(
            f"{folder}: no model.safetensors (found {found or 'no weights file'}). This "
            "library reads only safetensors, never a pickle (pytorch_model.bin can run code "
            'when opened). Convert a folder you trust once with transformers: python -c "from '
            f"transformers import {model_class} as M; M.from_pretrained('{folder}')"
            f".save_pretrained('{folder}-safetensors')\", then load that folder"
        )
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(weights), framework="numpy") as f:
            yield f, weights
    except SafetensorError as err:
        raise CheckpointError(
            f"{weights}: not a valid safetensors file ({err}); download it again"
        ) from None


def check_headers(
    f: Any, weights: Path, expected: Expected, also: Expected | None = None,
    optional: Iterable[str] = (),
) -> None:  # fmt: skip
    """Every name of the open file ``f`` is one of ``expected`` or ``also`` (stored copies
    that are checked, not loaded), every ``expected`` name but the ``optional`` ones is
    there, and each has its shape and a float dtype: one CheckpointError listing the first
    problems, read from the headers alone (no array is read)."""
    also = also or {}
    names = set(f.keys())
    problems = [f"unexpected {n}" for n in sorted(names - set(expected) - set(also))]
    problems += [f"missing {n}" for n in sorted(set(expected) - names - set(optional))]
    for name in sorted(names & (set(expected) | set(also))):
        piece = f.get_slice(name)
        shape, kind = tuple(piece.get_shape()), piece.get_dtype()
        want = expected[name] if name in expected else also[name]
        if shape != want or kind not in DTYPES:
            problems.append(f"{name} is {kind}{list(shape)}, expected F32{list(want)}")
    if problems:
        more = " ..." if len(problems) > 8 else ""
        bf16 = any(" is BF16[" in p for p in problems)
        hint = (
            " (bfloat16 has no NumPy type: save the model once in float32 with transformers, "
            "M.from_pretrained(folder, dtype=torch.float32).save_pretrained(new_folder))"
            if bf16 else ""
        )  # fmt: skip
        raise CheckpointError(
            f"{weights}: the weights do not fit its config.json: {'; '.join(problems[:8])}"
            f"{more}{hint}. Use the config.json saved with them"
        )


def read_finite(f: Any, weights: Path, names: Iterable[str], dtype: str) -> dict[str, Any]:
    """{name: array in ``dtype``} of the open file ``f``; a CheckpointError naming the
    arrays that hold NaN or Inf (a few named, the rest counted)."""
    arrays, bad = {}, []
    for name in sorted(names):
        a = f.get_tensor(name).astype(dtype, copy=False)
        if not np.isfinite(a).all():
            bad.append(name)
        arrays[name] = a
    if bad:
        raise CheckpointError(
            f"{weights}: {len(bad)} of its arrays hold NaN or Inf values ({listed(bad)}): the "
            "file is damaged or was saved from a model that diverged. Download it again (for a "
            "Hub model, delete it from the cache first: huggingface-cli delete-cache), or ask "
            "whoever published it"
        )
    return arrays


def write_model_folder(
    path: Any, tensors: dict[str, Any], config: dict[str, Any], generation: dict[str, Any],
    overwrite: bool,
) -> Path:  # fmt: skip
    """Write a model folder into ``path``, created if needed: model.safetensors holding
    ``tensors`` (contiguous NumPy arrays, with the metadata transformers writes,
    ``{"format": "pt"}``), generation_config.json and config.json (last, so a folder with a
    config.json is complete). A file of one of these names already there is a
    CheckpointError unless ``overwrite``. Each file is written beside its place and renamed
    over it (never through a link)."""
    from safetensors.numpy import save

    folder = Path(os.fspath(path))
    names = ("model.safetensors", "generation_config.json", "config.json")  # config.json last
    taken = sorted(n for n in names if (folder / n).exists() or (folder / n).is_symlink())
    if taken and not overwrite:
        raise CheckpointError(
            f"save_pretrained: {folder} already holds {taken}; choose a new folder, or pass "
            "overwrite=True to replace them"
        )
    folder.mkdir(parents=True, exist_ok=True)
    write_replacing(folder / names[0], save(tensors, metadata={"format": "pt"}))
    write_replacing(folder / names[1], json.dumps(generation, indent=2).encode())
    write_replacing(folder / names[2], json.dumps(config, indent=2).encode())
    return folder
