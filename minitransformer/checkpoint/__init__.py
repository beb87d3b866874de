"""Checkpoints: named NumPy arrays plus JSON metadata in one atomically written ``.npz`` file,
read without ever unpickling, and checked field by field before a run resumes from one.

    from minitransformer import checkpoint
    checkpoint.save_checkpoint("run/checkpoint.npz", {"w": array}, {"step": 10})
    arrays, meta = checkpoint.load_checkpoint("run/checkpoint.npz")

- ``format.py``: the file layout, writing it atomically, and its checksum.
- ``reading.py``: loading a file that may be truncated, edited or hostile; finding a run's
  checkpoint (``checkpoint_file``, ``latest_checkpoint``) and a section of its arrays.
- ``schema.py``: the checks of a training checkpoint, each problem one CheckpointError that
  names the field.

This package works on host NumPy arrays only: convert device arrays before saving.
"""

from .format import FORMAT_VERSION, METADATA_KEY, RESERVED_METADATA_KEYS, save_checkpoint
from .reading import checkpoint_file, latest_checkpoint, load_checkpoint, read_metadata, section
from .schema import (
    check_array,
    check_arrays_like,
    check_config,
    check_dataclass_fields,
    check_like,
    check_model_config,
    check_tokenizer,
    check_training_metadata,
)

__all__ = [
    "FORMAT_VERSION",
    "METADATA_KEY",
    "RESERVED_METADATA_KEYS",
    "check_array",
    "check_arrays_like",
    "check_config",
    "check_dataclass_fields",
    "check_like",
    "check_model_config",
    "check_tokenizer",
    "check_training_metadata",
    "checkpoint_file",
    "latest_checkpoint",
    "load_checkpoint",
    "read_metadata",
    "save_checkpoint",
    "section",
]
