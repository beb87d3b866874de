"""Training: the Trainer (``trainer.py``: the loop, evaluation, checkpoints, resuming) and
its reporting (``progress.py``: progress bar or plain lines; ``report.py``: result card,
plots).

    from minitransformer.train import TrainConfig, Trainer
    Trainer(TrainConfig(task="copy", out="runs/copy")).train()

TrainConfig, the task defaults and RESUMABLE live in :mod:`minitransformer.config`; they are
importable from here too.
"""

from ..config import RESUMABLE, TASK_DEFAULTS, TrainConfig
from .trainer import Trainer

__all__ = ["RESUMABLE", "TASK_DEFAULTS", "TrainConfig", "Trainer"]
