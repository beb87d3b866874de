"""SGD: stochastic gradient descent with optional (heavy-ball) momentum, as ``torch.optim.SGD``.

For each parameter θ with gradient ∇θ, at its t-th update::

    g ← ∇θ + λ θ                  (only when weight_decay λ > 0)
    b ← g  on the first step, then  b ← μ b + g      (momentum μ > 0)
    θ ← θ − lr · b                (b = g when μ = 0)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..tensor import Tensor
from .hyperparameters import check_number
from .optimizer import Array, Optimizer, assign


def sgd_update(p: Array, g: Array, b: Array | None, *, lr: float, momentum: float,
               weight_decay: float, t: int, ok: Any = None) -> None:  # fmt: skip
    """One SGD update of parameter ``p`` (in place) with gradient ``g`` and momentum buffer
    ``b`` (None without momentum), at the parameter's ``t``-th update (the module doc's
    formulas). Nothing changes where ``ok`` (a 0-d bool on the device; None: always apply)
    is False, see ``assign``."""
    if weight_decay:
        g = g + weight_decay * p
    if momentum:
        b_new = momentum * b + g if t > 1 else g  # the first step: b = g
        assign(ok, (b, b_new), (p, p - lr * b_new))
    else:
        assign(ok, (p, p - lr * g))


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum (see the module doc).

    State: ``momentum.<i>`` (the buffer b) when momentum > 0.
    """

    state_names = ("momentum",)
    hyperparameters = ("lr", "momentum", "weight_decay")

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ):
        self.momentum = check_number("SGD", "momentum", momentum, 0.0, 1.0, high_open=True)
        self.weight_decay = check_number("SGD", "weight_decay", weight_decay, 0.0)
        super().__init__(params, lr)
        if not self.momentum:
            self.state_names = ()
            self.state = {}

    rule = staticmethod(sgd_update)

    def _update(self, rule: Any, p: Array, g: Array, state: dict[str, Array], t: int,
                ok: Any) -> None:  # fmt: skip
        rule(p, g, state.get("momentum"), lr=self.lr, momentum=self.momentum,
             weight_decay=self.weight_decay, t=t, ok=ok)  # fmt: skip
