"""Optimizers: SGD, Adam, AdamW, the paper's warm-up schedule (NoamSchedule), a cosine
schedule with warm-up (CosineSchedule) and gradient clipping.

- ``optimizer.py``  the base: parameters laid out in flat buffers, ``step``, clipping on
  the flat buffers, ``state_dict``/``load_state_dict``, ``to(device)``.
- ``flatbuffer.py`` ``FlatGroup``: parameters, gradients and state as views into one flat
  buffer per device and dtype.
- ``sgd.py``, ``adam.py``  the updates: the plain math, which is what runs (the fast tier,
  ``minitransformer/fast``, may register a fused twin; ``Optimizer.step`` picks it).
- ``adamw.py``      ``AdamW``: Adam with decoupled weight decay (matrices only by default).
- ``schedule.py``   ``Schedule`` (the step count every schedule shares) and
                    ``NoamSchedule``, the paper's learning-rate schedule.
- ``cosine.py``     ``CosineSchedule``: linear warm-up, then a cosine decay to a floor.
- ``clip.py``       ``clip_grad_norm`` (global-norm clipping), ``grads_finite`` and
                    ``step_ok`` (the device flag that lets a step's update be applied).
"""

from .adam import Adam
from .adamw import AdamW
from .clip import clip_grad_norm, grads_finite, step_ok
from .cosine import CosineSchedule
from .flatbuffer import FlatGroup
from .optimizer import Optimizer
from .schedule import NoamSchedule
from .sgd import SGD

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "CosineSchedule",
    "FlatGroup",
    "NoamSchedule",
    "Optimizer",
    "clip_grad_norm",
    "step_ok",
    "grads_finite",
]
