"""Adam (Kingma & Ba, 2015) with bias correction, computed as ``torch.optim.Adam``.

For each parameter θ with gradient ∇θ, at its t-th update::

    g ← ∇θ + λ θ                  (only when weight_decay λ > 0: L2, as in PyTorch's Adam)
    m ← β1 m + (1 − β1) g         (the mean of recent gradients)
    v ← β2 v + (1 − β2) g²        (the mean of their squares)
    θ ← θ − lr / (1 − β1^t) · m / (√v / √(1 − β2^t) + ε)

``adam_update`` is that math in array-API operators, and it is what runs (on every backend;
``Optimizer.step`` hands it the fast tier's twin where one is switched on, see ``fast/``).
Twins: ``fast/numpy/adam.py``, ``fast/cupy/adam.py`` (``fast/cuda/adam.cu``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .. import backend
from ..tensor import Tensor
from .hyperparameters import check_betas, check_number
from .optimizer import Array, Optimizer, assign


def adam_update(p: Array, g: Array, m: Array, v: Array, *, lr: float,
                betas: tuple[float, float], eps: float, weight_decay: float, t: int,
                ok: Any = None) -> None:  # fmt: skip
    """One Adam update of ``p``, ``m`` and ``v`` (in place) with gradient ``g``, at the
    parameter's ``t``-th update: the module doc's formulas (m moves a fraction 1 − β1 of
    the way to g, as PyTorch's ``lerp`` does: β1 m + (1 − β1) g). Nothing changes where
    ``ok`` (a 0-d bool on the device; None: always apply) is False, see ``assign``.

    Each line makes a new array as large as ``p`` (often every parameter of the model, an
    optimizer's flat buffer): fine for reading and for the models of the lessons. The fast
    tier's twins (``fast/``) do the same update in place, in chunks, or in one CUDA kernel."""
    xp = backend.namespace(p)
    b1, b2 = betas
    if weight_decay:
        g = g + weight_decay * p  # L2, as in PyTorch's Adam
    m_new = m + (1 - b1) * (g - m)  # β1 m + (1 − β1) g
    v_new = v + (1 - b2) * (g * g - v)  # β2 v + (1 − β2) g²
    denom = xp.sqrt(v_new) / math.sqrt(1 - b2**t) + eps  # √v / √(1 − β2^t) + ε
    step = (lr / (1 - b1**t)) * (m_new / denom)  # lr / (1 − β1^t) · m / denom
    assign(ok, (m, m_new), (v, v_new), (p, p - step))


class Adam(Optimizer):
    """Adam with the paper's defaults (§5.3): β1 = 0.9, β2 = 0.98, ε = 1e-9 (module doc).

    State: ``m.<i>``, ``v.<i>`` (same dtype and device as the parameter) and the count t of
    each parameter (``param_steps`` in the metadata; parameters skipped for lack of a
    gradient do not advance, as in PyTorch). Applied to a whole flat group at once.
    """

    state_names = ("m", "v")
    hyperparameters = ("lr", "betas", "eps", "weight_decay")

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9,
        weight_decay: float = 0.0,
    ):
        self.betas = check_betas("Adam", betas)
        self.eps = check_number("Adam", "eps", eps, 0.0)
        self.weight_decay = check_number("Adam", "weight_decay", weight_decay, 0.0)
        super().__init__(params, lr)

    rule = staticmethod(adam_update)

    def _update(self, rule: Any, p: Array, g: Array, state: dict[str, Array], t: int,
                ok: Any) -> None:  # fmt: skip
        rule(p, g, state["m"], state["v"], lr=self.lr, betas=self.betas, eps=self.eps,
             weight_decay=self.weight_decay, t=t, ok=ok)  # fmt: skip
