"""Optimizers: SGD, Adam, the paper's warm-up schedule (NoamSchedule) and gradient clipping.

Every update works in place on the parameter arrays (``p.data``) and on the optimizer's own
state, on whatever device the parameters live: the code asks each array for its namespace
(``backend.namespace``) and never imports NumPy or CuPy. Gradients (``p.grad``) are read,
never written, except by :func:`clip_grad_norm`, whose job is to scale them.

State is made lazily, on the first step that sees a parameter's gradient, with
``zeros_like(p.data)``: it has the parameter's dtype (float32 parameters, float32 state) and
device. ``state_dict()`` gives ``(arrays, metadata)`` ready for ``checkpoint.save_checkpoint``:

    arrays   {"m.0": ..., "v.0": ..., "m.1": ...}   state arrays named ``<name>.<param index>``
    metadata {"type": "Adam", "step": 120, "num_params": 4, "lr": ..., "betas": [0.9, 0.98],
              "eps": 1e-09, "weight_decay": 0.0, "param_steps": [120, 120, 120, 120]}

``load_state_dict(arrays, metadata)`` restores all of it (hyperparameters included), so a
resumed run repeats the uninterrupted run's updates bit for bit.

Typical loop (PyTorch's order: the schedule is primed at construction, stepped after the
optimizer)::

    opt = Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    sched = NoamSchedule(opt, d_model=512, warmup=4000)   # opt.lr = lr_at(1)
    for batch in batches:
        opt.zero_grad()
        loss = ...; loss.backward()
        norm = clip_grad_norm(model.parameters(), 1.0)   # NaN/Inf -> stop training
        opt.step()                                       # update n uses lr_at(n)
        sched.step()                                     # opt.lr = lr_at(n + 1)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from . import backend
from .errors import ConfigError, DeviceError, ShapeError
from .tensor import Tensor

Array = backend.Array

__all__ = [
    "SGD",
    "Adam",
    "NoamSchedule",
    "Optimizer",
    "clip_grad_norm",
    "grads_finite",
]


def _has_out(xp: Any) -> bool:
    """True when ``xp``'s elementwise functions are ufuncs taking ``out=`` (NumPy, CuPy).

    The array API standard has no ``out=``; there (array-api-strict) the same arithmetic
    runs with a few temporaries instead of one reused buffer.
    """
    return type(getattr(xp, "multiply", None)).__name__ == "ufunc"


def _copy(a: Array, host: bool) -> Array:
    """An independent copy of ``a``: on its device, or (``host``) as a NumPy array."""
    if host:
        if backend.device_of(a) != "cpu":
            return backend.to_numpy(a)  # a transfer is already a copy
        return backend.to_numpy(a).copy()
    return backend.namespace(a).asarray(a, copy=True)


def _as_tensors(params: Iterable[Tensor]) -> list[Tensor]:
    params = list(params)
    for p in params:
        if not isinstance(p, Tensor):
            raise TypeError(
                f"optimizer params must be Tensors (e.g. model.parameters()), got "
                f"{type(p).__name__}"
            )
    return params


# ============================================================================ optimizers


class Optimizer:
    """Base class: a list of parameters, a learning rate and per-parameter state arrays.

    Subclasses name their state arrays in ``state_names`` (e.g. ``("m", "v")``), their JSON
    hyperparameters in ``hyperparameters``, and implement ``_update(i, p, g)``.

    Attributes:
        params: the parameters, in the order given (state is keyed by this index).
        lr: the learning rate of the next ``step()`` (a schedule may set it).
        step_count: how many times ``step()`` has run.
        state: ``state[name][i]`` is the array ``name`` of parameter ``i`` (None until the
            first step that sees parameter ``i``'s gradient).
    """

    state_names: tuple[str, ...] = ()
    hyperparameters: tuple[str, ...] = ("lr",)

    def __init__(self, params: Iterable[Tensor], lr: float):
        self.params: list[Tensor] = _as_tensors(params)
        if not self.params:
            raise ConfigError(f"{type(self).__name__}: got an empty parameter list")
        if len({id(p) for p in self.params}) != len(self.params):
            raise ConfigError(f"{type(self).__name__}: a parameter appears twice in params")
        if not lr >= 0.0:
            raise ConfigError(f"{type(self).__name__}: lr must be >= 0, got {lr}")
        self.lr = float(lr)
        self.step_count = 0
        self.state: dict[str, list[Array | None]] = {
            name: [None] * len(self.params) for name in self.state_names
        }

    # ------------------------------------------------------------------ the loop
    def zero_grad(self) -> None:
        """Forget every parameter's gradient (``p.grad = None``) before the next backward."""
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Update every parameter that has a gradient (parameters without one are skipped)."""
        self.step_count += 1
        for i, p in enumerate(self.params):
            if p.grad is not None:
                self._update(i, p, p.grad)

    def _update(self, i: int, p: Tensor, g: Array) -> None:
        raise NotImplementedError

    def _state(self, name: str, i: int, p: Tensor) -> Array:
        """State array ``name`` of parameter ``i``: zeros like ``p.data`` on first use."""
        a = self.state[name][i]
        if a is None:
            a = self.state[name][i] = backend.namespace(p.data).zeros_like(p.data)
        elif backend.device_of(a) != backend.device_of(p.data):
            raise DeviceError(
                f"{type(self).__name__}: parameter {i} is on {backend.device_of(p.data)} but its "
                f"optimizer state is on {backend.device_of(a)}; call optimizer.to(device) after "
                "moving the model"
            )
        return a

    # ------------------------------------------------------------------ devices
    def to(self, device: str) -> Optimizer:
        """Move every state array to ``device`` (do it together with ``model.to(device)``)."""
        for arrays in self.state.values():
            for i, a in enumerate(arrays):
                if a is not None:
                    arrays[i] = backend.to_device(a, device)
        return self

    # ------------------------------------------------------------------ saving and resuming
    def state_dict(self, host: bool = False) -> tuple[dict[str, Array], dict[str, Any]]:
        """``(arrays, metadata)``: copies of the state arrays and a JSON-ready dict.

        ``arrays`` maps ``"<state name>.<param index>"`` (``"m.0"``, ``"v.0"``, ``"momentum.3"``)
        to a copy of that array, on its device, or as a NumPy array when ``host=True`` (what
        ``checkpoint.save_checkpoint`` wants). Parameters that have never had a gradient have
        no entry. ``metadata`` holds ``type``, ``step``, ``num_params``, the hyperparameters and
        any per-optimizer extras (Adam: ``param_steps``).
        """
        arrays = {
            f"{name}.{i}": _copy(a, host)
            for name, per_param in self.state.items()
            for i, a in enumerate(per_param)
            if a is not None
        }
        meta: dict[str, Any] = {
            "type": type(self).__name__,
            "step": self.step_count,
            "num_params": len(self.params),
        }
        for key in self.hyperparameters:
            value = getattr(self, key)
            meta[key] = list(value) if isinstance(value, tuple) else value
        meta.update(self._extra_state())
        return arrays, meta

    def load_state_dict(self, arrays: Mapping[str, Any], metadata: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` gave (arrays may be NumPy or on any device).

        Each state array is copied onto its parameter's device with its parameter's dtype.
        Raises ConfigError for another optimizer type, another number of parameters or an
        unknown array name, and ShapeError when an array does not fit its parameter.
        """
        name = type(self).__name__
        if metadata.get("type") != name:
            raise ConfigError(f"{name}.load_state_dict: the state is from {metadata.get('type')!r}")
        if metadata.get("num_params") != len(self.params):
            raise ConfigError(
                f"{name}.load_state_dict: the state has {metadata.get('num_params')} parameters, "
                f"this optimizer has {len(self.params)}; build it from the same model"
            )
        state: dict[str, list[Array | None]] = {s: [None] * len(self.params) for s in self.state}
        for key, a in arrays.items():
            sname, _, index = key.rpartition(".")
            if sname not in state or not index.isdigit() or int(index) >= len(self.params):
                raise ConfigError(
                    f"{name}.load_state_dict: unexpected array {key!r}; expected names like "
                    f"{', '.join(s + '.0' for s in self.state)} (strip any checkpoint prefix)"
                )
            p = self.params[int(index)]
            if tuple(a.shape) != p.shape:
                raise ShapeError(
                    f"{name}.load_state_dict: {key!r} has shape {tuple(a.shape)}, but parameter "
                    f"{index} has shape {p.shape}"
                )
            moved = backend.asarray(a, dtype=backend.dtype_name(p.dtype), device=p.device)
            state[sname][int(index)] = backend.namespace(moved).asarray(moved, copy=True)
        self.state = state
        self.step_count = int(metadata["step"])
        for key in self.hyperparameters:
            value = metadata[key]
            setattr(self, key, tuple(value) if isinstance(value, list) else value)
        self._load_extra_state(metadata)

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra_state(self, metadata: Mapping[str, Any]) -> None:
        pass

    def __repr__(self) -> str:
        hyper = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.hyperparameters)
        return f"{type(self).__name__}({len(self.params)} params, {hyper})"


class SGD(Optimizer):
    """Stochastic gradient descent with optional (heavy-ball) momentum, as ``torch.optim.SGD``.

    For each parameter θ with gradient ∇θ::

        g ← ∇θ + λ θ                  (only when weight_decay λ > 0)
        b ← g                         on the first step, then  b ← μ b + g   (momentum μ > 0)
        θ ← θ − lr · b                (b = g when μ = 0)

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
        super().__init__(params, lr)
        if not 0.0 <= momentum < 1.0:
            raise ConfigError(f"SGD: momentum must be in [0, 1), got {momentum}")
        if not weight_decay >= 0.0:
            raise ConfigError(f"SGD: weight_decay must be >= 0, got {weight_decay}")
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)

    def _update(self, i: int, p: Tensor, g: Array) -> None:
        if self.weight_decay:
            g = g + self.weight_decay * p.data
        if self.momentum:
            b = self.state["momentum"][i]
            if b is None:
                xp = backend.namespace(g)
                b = self.state["momentum"][i] = xp.asarray(g, copy=True)
            else:
                b = self._state("momentum", i, p)
                b *= self.momentum
                b += g
            g = b
        p.data -= self.lr * g


class Adam(Optimizer):
    """Adam (Kingma & Ba, 2015) with bias correction, computed as ``torch.optim.Adam``.

    The defaults are the paper's (§5.3): β1 = 0.9, β2 = 0.98, ε = 1e-9. For each parameter θ
    with gradient ∇θ, at its t-th update::

        g ← ∇θ + λ θ                  (only when weight_decay λ > 0: L2, as in PyTorch's Adam)
        m ← β1 m + (1 − β1) g
        v ← β2 v + (1 − β2) g²
        θ ← θ − lr / (1 − β1^t) · m / (√v / √(1 − β2^t) + ε)

    State: ``m.<i>``, ``v.<i>`` (same dtype and device as the parameter) and the count t of
    each parameter (``param_steps`` in the metadata; parameters skipped for lack of a
    gradient do not advance, as in PyTorch). On NumPy and CuPy the update reuses one
    temporary per parameter per step (ufuncs with ``out=``); on the strict array API, which
    has no ``out=``, the same arithmetic makes a few temporaries.
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
        super().__init__(params, lr)
        b1, b2 = (float(b) for b in betas)
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ConfigError(f"Adam: betas must lie in [0, 1), got {tuple(betas)}")
        if not eps >= 0.0:
            raise ConfigError(f"Adam: eps must be >= 0, got {eps}")
        if not weight_decay >= 0.0:
            raise ConfigError(f"Adam: weight_decay must be >= 0, got {weight_decay}")
        self.betas = (b1, b2)
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.param_steps = [0] * len(self.params)

    def _update(self, i: int, p: Tensor, g: Array) -> None:
        b1, b2 = self.betas
        xp = backend.namespace(p.data)
        m, v = self._state("m", i, p), self._state("v", i, p)
        self.param_steps[i] += 1
        t = self.param_steps[i]
        step_size = self.lr / (1 - b1**t)
        bc2_sqrt = (1 - b2**t) ** 0.5
        if self.weight_decay:
            g = g + self.weight_decay * p.data
        if _has_out(xp):  # NumPy / CuPy: one buffer, reused
            buf = xp.multiply(g, 1 - b1)
            m *= b1
            m += buf  # m = β1 m + (1-β1) g
            xp.multiply(g, g, out=buf)
            buf *= 1 - b2
            v *= b2
            v += buf  # v = β2 v + (1-β2) g²
            xp.sqrt(v, out=buf)
            buf /= bc2_sqrt
            buf += self.eps  # √v/√(1-β2^t) + ε
            xp.divide(m, buf, out=buf)
            buf *= -step_size
            p.data += buf
        else:  # the same arithmetic, in the standard's operators
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (g * g) * (1 - b2)
            denom = xp.sqrt(v)
            denom /= bc2_sqrt
            denom += self.eps
            update = m / denom
            update *= -step_size
            p.data += update

    def _extra_state(self) -> dict[str, Any]:
        return {"param_steps": list(self.param_steps)}

    def _load_extra_state(self, metadata: Mapping[str, Any]) -> None:
        steps = metadata.get("param_steps")
        if steps is None:  # a state written without per-parameter counts
            steps = [self.step_count if m is not None else 0 for m in self.state["m"]]
        self.param_steps = [int(s) for s in steps]


# ============================================================================ schedule


class NoamSchedule:
    """The paper's learning-rate schedule (§5.3): linear warm-up, then inverse square root.

        lrate(step) = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5),  step ≥ 1

    It rises linearly for ``warmup`` steps, peaks at step = warmup with
    ``factor · (d_model · warmup)^-0.5``, then decays as step^-0.5. (For the base model,
    d_model = 512, warmup = 4000: peak ≈ 7.0e-4.)

    Steps count optimizer updates from 1. Construction sets ``optimizer.lr = lr_at(1)``; each
    ``step()``, called *after* ``optimizer.step()``, sets the rate of the next update, so the
    n-th update always runs with ``lr_at(n)``. ``step_num`` is the number of updates done.
    """

    def __init__(self, optimizer: Optimizer, d_model: int, warmup: int = 4000, factor: float = 1.0):
        if d_model <= 0 or warmup <= 0 or not factor > 0:
            raise ConfigError(
                f"NoamSchedule: need d_model > 0, warmup > 0, factor > 0; got d_model={d_model}, "
                f"warmup={warmup}, factor={factor}"
            )
        self.optimizer = optimizer
        self.d_model = int(d_model)
        self.warmup = int(warmup)
        self.factor = float(factor)
        self.step_num = 0
        optimizer.lr = self.lr_at(1)

    @staticmethod
    def rate(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
        """The formula above as a pure function; 0.0 at step 0."""
        if step < 0:
            raise ValueError(f"NoamSchedule: step must be >= 0, got {step}")
        if step == 0:
            return 0.0
        return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    def lr_at(self, step: int) -> float:
        """The learning rate of update number ``step`` (counting from 1) under this schedule."""
        return self.rate(step, self.d_model, self.warmup, self.factor)

    @staticmethod
    def factor_for_peak(peak_lr: float, d_model: int, warmup: int) -> float:
        """The ``factor`` whose schedule peaks (at step = warmup) at ``peak_lr``:
        factor = peak_lr · √d_model · √warmup."""
        return float(peak_lr) * math.sqrt(d_model) * math.sqrt(warmup)

    @property
    def peak_lr(self) -> float:
        return self.lr_at(self.warmup)

    @property
    def lr(self) -> float:
        """The rate the next update will use (what ``optimizer.lr`` holds)."""
        return self.lr_at(self.step_num + 1)

    def step(self) -> float:
        """Count one finished update and set ``optimizer.lr`` for the next; return it."""
        self.step_num += 1
        self.optimizer.lr = self.lr
        return self.optimizer.lr

    def state_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"type", "step", "d_model", "warmup", "factor"}``."""
        return {
            "type": "NoamSchedule",
            "step": self.step_num,
            "d_model": self.d_model,
            "warmup": self.warmup,
            "factor": self.factor,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the step and settings, and set ``optimizer.lr`` for the next update."""
        if state.get("type", "NoamSchedule") != "NoamSchedule":
            raise ConfigError(f"NoamSchedule.load_state_dict: the state is from {state['type']!r}")
        self.d_model = int(state["d_model"])
        self.warmup = int(state["warmup"])
        self.factor = float(state["factor"])
        self.step_num = int(state["step"])
        self.optimizer.lr = self.lr

    def __repr__(self) -> str:
        return (
            f"NoamSchedule(d_model={self.d_model}, warmup={self.warmup}, factor={self.factor}, "
            f"step={self.step_num}, lr={self.lr:.3e})"
        )


# ============================================================================ gradients


def _grads(params: Iterable[Tensor]) -> list[Tensor]:
    return [p for p in params if p.grad is not None]


def clip_grad_norm(params: Iterable[Tensor], max_norm: float) -> float:
    """Scale all gradients together so that their total L2 norm is at most ``max_norm``.

        total = √(Σ_p ‖∇p‖²);  if total > max_norm:  ∇p ← ∇p · max_norm / (total + 1e-6)

    as ``torch.nn.utils.clip_grad_norm_``. Returns ``total`` *before* clipping, as a Python
    float. A NaN or Inf total is returned as is and the gradients are left untouched, so the
    caller can stop (see :func:`grads_finite`). Gradients are scaled in place when the
    tensor owns its gradient array; a gradient array that autograd may share with another
    tensor (an unowned one) is replaced by a scaled copy instead, so nothing is scaled twice.
    """
    with_grad = _grads(params)
    if not with_grad:
        return 0.0
    by_device: dict[str, list[Array]] = {}
    for p in with_grad:
        by_device.setdefault(backend.device_of(p.grad), []).append(p.grad)
    device_norms = []
    for grads in by_device.values():
        xp = backend.namespace(grads[0])
        norms = [xp.linalg.vector_norm(g) for g in grads]
        if len({n.dtype for n in norms}) > 1:
            norms = [xp.astype(n, xp.float64) for n in norms]
        device_norms.append(float(xp.linalg.vector_norm(xp.stack(norms))))  # one sync each
    total = math.hypot(*device_norms)
    if not math.isfinite(total) or total <= max_norm:
        return total
    coef = max_norm / (total + 1e-6)
    owned = [p for p in with_grad if getattr(p, "_grad_owned", False)]
    for p in with_grad:  # unowned first: they may alias an owned array not yet scaled
        if not getattr(p, "_grad_owned", False):
            p.grad = p.grad * coef
            if hasattr(p, "_grad_owned"):
                p._grad_owned = True
    done: set[int] = set()
    for p in owned:
        if id(p.grad) not in done:
            done.add(id(p.grad))
            p.grad *= coef
    return total


def grads_finite(params: Iterable[Tensor]) -> bool:
    """True when every gradient that exists is free of NaN and Inf (one sync per device)."""
    by_device: dict[str, list[Array]] = {}
    for p in _grads(params):
        by_device.setdefault(backend.device_of(p.grad), []).append(p.grad)
    for grads in by_device.values():
        xp = backend.namespace(grads[0])
        if not bool(xp.all(xp.stack([xp.all(xp.isfinite(g)) for g in grads]))):
            return False
    return True
