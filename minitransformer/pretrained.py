"""Where a pretrained model's folder comes from: a local folder, or the Hugging Face Hub.

    folder = pretrained_folder("Helsinki-NLP/opus-mt-en-es")   # downloads once (cached)
    folder = pretrained_folder("models/opus-mt-en-es")          # a local folder: as it is

A name that is not a local folder but reads as a Hub id (``owner/name``) is downloaded with
``huggingface_hub.snapshot_download`` (its progress bars on stderr), only the files this
library reads: the config, the safetensors weights and the tokenizer's files. It needs the
optional ``huggingface_hub`` (``pip install "minitransformer[hf]"``) and the network; the
tests never call it.
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import ArgumentError, CheckpointError

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
            f"Helsinki-NLP/opus-mt-en-es, got {name!r}"
        )
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists() or not _HUB_ID.fullmatch(name):
        raise CheckpointError(
            f"--pretrained {name}: not a folder{' (a file)' if path.exists() else ''}, nor a "
            "Hub id of the form owner/name; pass the folder that holds config.json and "
            "model.safetensors"
        )
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(
            f"--pretrained {name}: no such folder here, and downloading it from the Hugging "
            'Face Hub needs huggingface_hub: pip install "minitransformer[hf]" (or pass a '
            "folder you downloaded)"
        ) from None
    try:
        folder = snapshot_download(repo_id=name, revision=revision, allow_patterns=FILES)
    except Exception as err:  # network, unknown repo, disk: the library's own message
        raise CheckpointError(
            f"--pretrained {name}: the download failed ({type(err).__name__}: "
            f"{' '.join(str(err).split())[:300]}); check the name on huggingface.co and the "
            "network, or pass a local folder"
        ) from None
    folder = Path(folder)
    if not (folder / "model.safetensors").is_file():
        raise CheckpointError(
            f"--pretrained {name}: the Hub repository has no model.safetensors (older repos "
            "hold only pytorch_model.bin, a pickle this library never opens). Convert it once "
            'with transformers: python -c "from transformers import MarianMTModel as M, '
            f"MarianTokenizer as T; n = '{name}'; M.from_pretrained(n).save_pretrained("
            "'opus-local'); T.from_pretrained(n).save_pretrained('opus-local')\" and pass "
            "--pretrained opus-local"
        )
    return folder
