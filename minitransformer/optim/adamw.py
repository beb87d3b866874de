"""AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, 2019), as ``torch.optim.AdamW``.

For each parameter θ with gradient ∇θ, at its t-th update::

    m ← β1 m + (1 − β1) ∇θ        (the mean of recent gradients)
    v ← β2 v + (1 − β2) ∇θ²       (the mean of their squares)
    m̂ = m / (1 − β1^t),  v̂ = v / (1 − β2^t)
    θ ← θ − lr · (m̂ / (√v̂ + ε) + λ θ)

Decoupled: the decay λθ is added to the *step*, not to the gradient. Adam's L2 term
(``Adam(weight_decay=λ)``: g ← ∇θ + λθ) passes through m and v, so √v̂ rescales it: a
parameter with large gradients is barely pulled toward zero, one with small gradients
strongly. AdamW shrinks every decayed parameter by the same fraction lr·λ per step,
whatever its gradients, which is what "weight decay" means for plain SGD. (PyTorch's
order, kept here: θ ← θ (1 − lr λ) first, then the Adam step; the same sum.)

Which parameters decay (``decay_only_matrices``, default True): the matrices (ndim ≥ 2:
the projections, the feed-forward layers, the embeddings) and not the vectors (ndim 1:
biases and the norms' gains). A norm's gain belongs near 1, not 0: decaying it shrinks
the activations the next layer sees; a bias shifts a unit and does not grow with the
number of inputs, so it is not what overfits. This is the common choice (BERT, GPT-2's
trainers exclude biases and LayerNorm weights). ``decay_only_matrices=False`` decays every
parameter, as ``torch.optim.AdamW`` does when given them all in one group.

``adamw_update`` is that math in array-API operators, and it is what runs on every backend
(there is no fast twin; ``Adam`` has them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .. import backend
from ..errors import ConfigError
from ..tensor import Tensor
from .hyperparameters import check_betas, check_number
from .optimizer import Array, Optimizer, assign


def adamw_update(p: Array, g: Array, m: Array, v: Array, decayed: Array, *, lr: float,
                 betas: tuple[float, float], eps: float, weight_decay: float, t: int,
                 ok: Any = None) -> None:  # fmt: skip
    """One AdamW update of ``p``, ``m`` and ``v`` (in place) with gradient ``g``, at the
    parameter's ``t``-th update (the module doc's formulas). ``decayed`` is laid out like
    ``p`` and holds 1 where an element decays, 0 where it does not. Nothing changes where
    ``ok`` (a 0-d bool on the device; None: always apply) is False, see ``assign``."""
    xp = backend.namespace(p)
    b1, b2 = betas
    m_new = m + (1 - b1) * (g - m)  # β1 m + (1 − β1) g
    v_new = v + (1 - b2) * (g * g - v)  # β2 v + (1 − β2) g²
    denom = xp.sqrt(v_new) / math.sqrt(1 - b2**t) + eps  # √v̂ + ε
    step = (lr / (1 - b1**t)) * (m_new / denom)  # lr · m̂ / (√v̂ + ε)
    shrunk = p * (1 - (lr * weight_decay) * decayed)  # θ − lr λ θ, where decayed
    assign(ok, (m, m_new), (v, v_new), (p, shrunk - step))


class AdamW(Optimizer):
    """AdamW (module doc). Defaults are PyTorch's: β1 = 0.9, β2 = 0.999, ε = 1e-8, λ = 0.01.

    State: ``m.<i>``, ``v.<i>`` and each parameter's count t, as ``Adam``'s (so
    ``state_dict``/``load_state_dict`` work the same way). ``decay_only_matrices``: decay the
    parameters with ndim ≥ 2 only (True) or every parameter (False); see the module doc.
    """

    state_names = ("m", "v")
    hyperparameters = ("lr", "betas", "eps", "weight_decay", "decay_only_matrices")

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        decay_only_matrices: bool = True,
    ):
        self.betas = check_betas("AdamW", betas)
        self.eps = check_number("AdamW", "eps", eps, 0.0)
        self.weight_decay = check_number("AdamW", "weight_decay", weight_decay, 0.0,
                                         high_open=True)  # fmt: skip
        if not isinstance(decay_only_matrices, bool):
            raise ConfigError(
                f"AdamW: decay_only_matrices must be True or False, got {decay_only_matrices!r}"
            )
        self.decay_only_matrices = decay_only_matrices
        super().__init__(params, lr)

    rule = staticmethod(adamw_update)

    def decays(self, param: Tensor) -> bool:
        """Whether ``param`` is pulled toward zero: a matrix (ndim ≥ 2), or any parameter
        when ``decay_only_matrices`` is False."""
        return param.ndim >= 2 or not self.decay_only_matrices

    def _layout(self) -> None:
        """The base's flat layout, then the 1/0 decay masks laid out like it."""
        super()._layout()
        self._make_decay_masks()

    def _make_decay_masks(self) -> None:
        """One flat mask per group (1.0 on the elements of decayed parameters, 0.0 else)
        and its per-parameter views, found by the array ``_update`` is handed: the
        group's flat buffer or one parameter's view into it."""
        self._mask_of: dict[int, Array] = {}
        for group in self.groups:
            xp = group.xp
            parts = [
                xp.full((p.size,), 1.0 if self.decays(p) else 0.0, dtype=group.dtype,
                        device=group.data.device)
                for p in group.params
            ]  # fmt: skip
            flat = xp.concat(parts)
            self._mask_of[id(group.data)] = flat
            for view, mask in zip(group.views, group.slices(flat), strict=True):
                self._mask_of[id(view)] = mask

    def _load_extra_state(self, metadata: Mapping[str, Any]) -> None:
        super()._load_extra_state(metadata)
        self._make_decay_masks()  # decay_only_matrices may have come with the state

    def _update(self, rule: Any, p: Array, g: Array, state: dict[str, Array], t: int,
                ok: Any) -> None:  # fmt: skip
        rule(p, g, state["m"], state["v"], self._mask_of[id(p)], lr=self.lr, betas=self.betas,
             eps=self.eps, weight_decay=self.weight_decay, t=t, ok=ok)  # fmt: skip
