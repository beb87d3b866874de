"""Checkpoints: named NumPy arrays plus JSON metadata in one atomically written
``.safetensors`` file, read within bounds the file cannot move, and checked field by field
before a run resumes from one.

    from minitransformer.runtime import checkpoint
    checkpoint.save_checkpoint("run/checkpoint.safetensors", {"w": array}, {"step": 10})
    arrays, meta = checkpoint.load_checkpoint("run/checkpoint.safetensors")

- ``format.py``: the file layout (format 3, safetensors), ``save_checkpoint``, its checksum.
- ``writing.py``: a file written atomically (replaced, or claimed when it must not exist), its
  OS errors as one CheckpointError.
- ``reading.py``: loading a file that may be truncated, edited or hostile, every size checked
  before anything is allocated; ``open_regular``, the one way a checkpoint file is opened (a
  FIFO or a device is refused before a byte is read).
- ``legacy.py``: the ``.npz`` files of formats 1 and 2 (a hardened reader).
- ``upgrade.py``: ``upgrade_checkpoint``, an ``.npz`` file converted to the current format.
- ``layout.py``: the arrays a model checkpoint must hold, from its model config alone (the
  config's shape table, ``TransformerConfig.parameter_shapes()``, with its dtype).
- ``schema.py``: the checks of a training checkpoint, each problem one CheckpointError that
  names the field.
- ``locate.py``: a run's checkpoint (``checkpoint_file``, ``latest_checkpoint``), ``section``.
- ``__main__.py``: ``python -m minitransformer.runtime.checkpoint upgrade OLD.npz``.

This package works on host NumPy arrays only: convert device arrays before saving.
"""

from .format import (
    CHECKPOINT_NAME,
    FORMAT_VERSION,
    LEGACY_CHECKPOINT_NAME,
    MAX_HEADER_BYTES,
    METADATA_KEY,
    RESERVED_METADATA_KEYS,
    save_checkpoint,
)
from .layout import expect_model_arrays, expect_training_arrays, model_layout
from .locate import checkpoint_file, latest_checkpoint, section
from .reading import load_checkpoint, read_entries, read_metadata
from .schema import (
    check_array,
    check_arrays_like,
    check_config,
    check_dataclass_fields,
    check_like,
    check_model_config,
    check_tokenizer,
    check_train_config,
    check_training_metadata,
)
from .upgrade import upgrade_checkpoint

__all__ = [
    "CHECKPOINT_NAME",
    "FORMAT_VERSION",
    "LEGACY_CHECKPOINT_NAME",
    "MAX_HEADER_BYTES",
    "METADATA_KEY",
    "RESERVED_METADATA_KEYS",
    "check_array",
    "check_arrays_like",
    "check_config",
    "check_dataclass_fields",
    "check_like",
    "check_model_config",
    "check_tokenizer",
    "check_train_config",
    "check_training_metadata",
    "checkpoint_file",
    "expect_model_arrays",
    "expect_training_arrays",
    "latest_checkpoint",
    "load_checkpoint",
    "model_layout",
    "read_entries",
    "read_metadata",
    "save_checkpoint",
    "section",
    "upgrade_checkpoint",
]
