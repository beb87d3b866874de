"""Configurations: what a model is (``TransformerConfig``) and what a training run is
(``TrainConfig``), each checked field by field when it is made.

    from minitransformer.config import TransformerConfig, TrainConfig

- ``model.py``: TransformerConfig, its presets (tiny, small, base, big) and size caps.
- ``attention.py``: the attention kinds a model may run (full, local, strided, linear).
- ``train.py``: TrainConfig, the task defaults, and RESUMABLE (what a resumed run may change).

This package stands on the ground: it imports nothing from the autograd core or the backend.
"""

from .attention import ATTENTION_KINDS
from .model import MAX_LEN, MAX_PARAMETER_GIB, PRESETS, TransformerConfig
from .train import RESUMABLE, SPLITS, TASK_DEFAULTS, TrainConfig

__all__ = [
    "ATTENTION_KINDS",
    "MAX_LEN",
    "MAX_PARAMETER_GIB",
    "PRESETS",
    "RESUMABLE",
    "SPLITS",
    "TASK_DEFAULTS",
    "TrainConfig",
    "TransformerConfig",
]
