"""Where a pretrained model's folder comes from: a local folder, or the Hugging Face Hub.

    folder = pretrained_folder("Helsinki-NLP/opus-mt-en-es")   # downloads once (cached)
    folder = pretrained_folder("models/opus-mt-en-es")          # a local folder: as it is

A name that is not a local folder but reads as a Hub id (``owner/name``) is downloaded with
``huggingface_hub.snapshot_download`` (its progress bars on stderr), only the files this
library reads: the config, the safetensors weights and the tokenizer's files. It needs the
optional ``huggingface_hub`` (``pip install -e ".[hf]"``) and the network; the tests never
call it.

A loader's path (``Translator.from_checkpoint`` and ``from_pretrained``,
``TextSampler.from_checkpoint``) is checked by ``checks.checked_path`` before the file system
sees it: its type, a control character, a length no path can have.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..checks import PATH_MAX, shown_name
from ..errors import ArgumentError, CheckpointError, install_hint

FILES = [  # what Transformer.from_pretrained and SentencePieceTokenizer read
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "source.spm",
    "target.spm",
    "vocab.json",
    "target_vocab.json",
    "tokenizer_config.json",
]
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")


def pretrained_folder(name: str, revision: str | None = None) -> Path:
    """The folder of ``name``: itself when it is a local folder, else the Hub download."""
    if not isinstance(name, str) or not name.strip():
        raise ArgumentError(
            f"--pretrained: expected a folder or a Hugging Face model id such as "
            f"Helsinki-NLP/opus-mt-en-es, got {name!r:.80}"
        )
    shown = shown_name(name)
    if not name.isprintable():
        raise ArgumentError(
            f"--pretrained {shown}: the name holds a control character (a newline or tab?); "
            "pass the folder's path or the Hub id on its own"
        )
    if len(name.encode("utf-8", "surrogateescape")) > PATH_MAX:  # before the file system
        raise CheckpointError(
            f"--pretrained {shown}: cannot be a path here (File name too long); a path holds "
            f"at most {PATH_MAX:,} bytes: pass the folder's path or a Hub id such as "
            "Helsinki-NLP/opus-mt-en-es"
        )
    path = _local(name, shown)
    if path.is_dir():
        return path
    if path.exists() or not _HUB_ID.fullmatch(name):
        raise CheckpointError(
            f"--pretrained {shown}: not a folder{' (a file)' if path.exists() else ''}, nor a "
            "Hub id of the form owner/name; pass the folder that holds config.json and "
            "model.safetensors"
        )
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(
            f"--pretrained {shown}: no such folder here, and downloading it from the Hugging "
            f"Face Hub needs huggingface_hub: {install_hint('hf')} (or pass a folder you "
            "downloaded)"
        ) from None
    try:
        folder = snapshot_download(repo_id=name, revision=revision, allow_patterns=FILES)
    except Exception as err:  # network, unknown repo, disk: the library's own message
        raise CheckpointError(
            f"--pretrained {shown}: the download failed ({type(err).__name__}: "
            f"{' '.join(str(err).split())[:300]}); check the name on huggingface.co and the "
            "network, or pass a local folder"
        ) from None
    folder = Path(folder)
    if not (folder / "model.safetensors").is_file():
        raise CheckpointError(
            f"--pretrained {shown}: the Hub repository has no model.safetensors (older repos "
            "hold only pytorch_model.bin, a pickle this library never opens). Convert it once "
            'with transformers: python -c "from transformers import MarianMTModel as M, '
            f"MarianTokenizer as T; n = '{name}'; M.from_pretrained(n).save_pretrained("
            "'opus-local'); T.from_pretrained(n).save_pretrained('opus-local')\" and pass "
            "--pretrained opus-local"
        )
    return folder


def _local(name: str, shown: str) -> Path:
    """``name`` as a local path, ``~`` and ``~user`` expanded; the library's error for a
    name no file system can hold (too long) or a ``~user`` with no such user."""
    try:
        path = Path(name).expanduser()
        path.exists()  # raises only for a name the system cannot look up
    except RuntimeError:  # Path.expanduser: "Could not determine home directory."
        user = name[1:].split("/", 1)[0]
        raise CheckpointError(
            f"--pretrained {shown}: no user {user!r} on this machine to expand ~{user}; give "
            "the folder's full path"
        ) from None
    except OSError as err:  # ENAMETOOLONG and the like
        raise CheckpointError(
            f"--pretrained {shown}: cannot be a path here ({err.strerror or err}); pass the "
            "folder's path or a Hub id such as Helsinki-NLP/opus-mt-en-es"
        ) from None
    return path
