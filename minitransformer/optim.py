"""Optimizers: SGD, Adam, the paper's warm-up schedule (NoamSchedule) and gradient clipping.

The multi-tensor design. An optimizer lays its parameters end to end in one flat buffer per
device and dtype (``flatbuffer.FlatGroup``): each ``p.data`` becomes a view into it, each
gradient is copied into a twin buffer by ONE concatenation, and the state (Adam's m and v)
has the same layout. A step is then a handful of array calls whatever the number of
parameters (tiny has 85, base 253), where a loop over parameters makes ~10 per parameter;
on a GPU each call costs ~12 µs of launch overhead, more than the arithmetic. The math is
written once (``_adam_update``) and applied to the whole flat buffer, or to one parameter's
views when parameters must be treated apart (some lack a gradient, or their step counts
differ), so both give the same numbers as PyTorch's ``torch.optim.Adam``.

No host synchronisation: ``clip_grad_norm`` returns the norm as a 0-d array on the device,
and ``step(apply_if=ok)`` applies the update only where the 0-d bool ``ok`` is True
(decided on the device, as mixed-precision loss scalers do), so a training step never waits
for the GPU. On NumPy, where reading a value costs nothing, ``ok`` is simply read.

Typical loop (PyTorch's order: the schedule is primed at construction, stepped after the
optimizer)::

    opt = Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    sched = NoamSchedule(opt, d_model=512, warmup=4000)   # opt.lr = lr_at(1)
    for batch in batches:
        opt.zero_grad()
        loss = ...; loss.backward()
        norm = opt.clip_grad_norm(1.0)                   # 0-d array: gather + norm + scale
        ok = xp.isfinite(norm) & xp.isfinite(loss.data)
        opt.step(apply_if=ok)                            # update n uses lr_at(n)
        sched.step()                                     # opt.lr = lr_at(n + 1)

``state_dict()`` gives ``(arrays, metadata)`` ready for ``checkpoint.save_checkpoint``, one
array per parameter and state (the flat layout is an implementation detail, not a format):

    arrays   {"m.0": ..., "v.0": ..., "m.1": ...}   state arrays named ``<name>.<param index>``
    metadata {"type": "Adam", "step": 120, "num_params": 4, "lr": ..., "betas": [0.9, 0.98],
              "eps": 1e-09, "weight_decay": 0.0, "param_steps": [120, 120, 120, 120]}

``load_state_dict(arrays, metadata)`` restores all of it, so a resumed run repeats the
uninterrupted run's updates bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from . import backend
from .errors import ConfigError, DeviceError, ShapeError
from .flatbuffer import FlatGroup, _has_out
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


def _number(owner: str, name: str, value: Any, low: float, high: float = math.inf,
            low_open: bool = False, high_open: bool = False) -> float:  # fmt: skip
    """``value`` as a float inside the range, else ConfigError naming it and the range."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    x = float(value) if ok else math.nan
    inside = (x > low if low_open else x >= low) and (x < high if high_open else x <= high)
    if not (ok and inside):
        lo, hi = "(" if low_open else "[", ")" if high_open else "]"
        raise ConfigError(
            f"{owner}: {name} must be a number in {lo}{low}, {high}{hi}, got {value!r}"
        )
    return x


def _host_flag(ok: Any) -> bool | None:
    """The value of a 0-d bool ``ok`` when reading it costs nothing (NumPy, or a Python
    bool); None when it lives on a device and must stay there."""
    if ok is None or isinstance(ok, bool):
        return True if ok is None else ok
    if type(ok).__module__ == "numpy" or type(ok).__module__.startswith("numpy."):
        return bool(ok)
    return None


# ============================================================================ optimizers


class Optimizer:
    """Base class: parameters in flat groups, a learning rate, per-element state.

    Subclasses name their state arrays in ``state_names`` (e.g. ``("m", "v")``), their JSON
    hyperparameters in ``hyperparameters``, and implement ``_update(group, sel, flat)``.

    Attributes:
        params: the parameters, in the order given (state is keyed by this index).
        lr: the learning rate of the next ``step()`` (a schedule may set it).
        step_count: how many times ``step()`` has run.
        groups: the FlatGroups (one per device and dtype, normally one).
        state: ``state[name][i]`` is the array ``name`` of parameter ``i`` (a view into the
            group's flat state; None until the first step that updates parameter ``i``).
    """

    state_names: tuple[str, ...] = ()
    hyperparameters: tuple[str, ...] = ("lr",)

    def __init__(self, params: Iterable[Tensor], lr: float):
        self.params: list[Tensor] = _as_tensors(params)
        if not self.params:
            raise ConfigError(f"{type(self).__name__}: got an empty parameter list")
        if len({id(p) for p in self.params}) != len(self.params):
            raise ConfigError(f"{type(self).__name__}: a parameter appears twice in params")
        self.lr = _number(type(self).__name__, "lr", lr, 0.0)
        self.step_count = 0
        self.state: dict[str, list[Array | None]] = {
            name: [None] * len(self.params) for name in self.state_names
        }
        self.param_steps = [0] * len(self.params)
        self._layout()

    # ------------------------------------------------------------------ the flat layout
    def _layout(self) -> None:
        """Group the parameters by device and dtype into FlatGroups; carry existing state
        (which must sit on its parameter's device: else DeviceError) into the new layout."""
        by_key: dict[tuple[str, str], list[int]] = {}
        for i, p in enumerate(self.params):
            key = (p.device, backend.dtype_name(p.dtype))
            by_key.setdefault(key, []).append(i)
        self.groups: list[FlatGroup] = []
        self._members: list[list[int]] = []
        for indices in by_key.values():
            group = FlatGroup([self.params[i] for i in indices])
            for name in self.state_names:
                old = [self.state[name][i] for i in indices]
                if all(a is None for a in old):
                    continue
                flat = group.state[name] = group.xp.zeros_like(group.data)
                views = group.slices(flat)
                for j, (i, a) in enumerate(zip(indices, old, strict=True)):
                    if a is None:
                        continue
                    if backend.device_of(a) != group.device:
                        raise DeviceError(
                            f"{type(self).__name__}: parameter {i} is on {group.device} but "
                            f"its optimizer state is on {backend.device_of(a)}; call "
                            "optimizer.to(device) after moving the model"
                        )
                    views[j][...] = a
                    self.state[name][i] = views[j]
            self.groups.append(group)
            self._members.append(indices)

    def _ensure_layout(self) -> None:
        """Re-adopt parameters whose arrays were replaced (see FlatGroup.readopt)."""
        for group in self.groups:
            if not group.intact() and not group.readopt():
                self._layout()
                return

    def _flat_state(self, gi: int, name: str) -> Array:
        """The flat state ``name`` of group ``gi`` (zeros on first use)."""
        group = self.groups[gi]
        flat = group.state.get(name)
        if flat is None:
            flat = group.state[name] = group.xp.zeros_like(group.data)
        return flat

    def _state_views(self, gi: int, j: int) -> dict[str, Array]:
        """Parameter j of group gi: its state views (made and recorded on first use)."""
        group, i = self.groups[gi], self._members[gi][j]
        out = {}
        for name in self.state_names:
            a = self.state[name][i]
            if a is None:
                a = self.state[name][i] = group.slices(self._flat_state(gi, name))[j]
            out[name] = a
        return out

    # ------------------------------------------------------------------ gradients
    def zero_grad(self) -> None:
        """Forget every parameter's gradient (``p.grad = None``) before the next backward."""
        for p in self.params:
            p.grad = None

    def gather_grads(self) -> list[Array]:
        """Copy every gradient into the flat gradient buffers (one per group) and return
        them. Changing them in place (an all-reduce, a scale) is what the following
        ``clip_grad_norm`` and ``step`` see. A parameter without a gradient gets zeros
        there, and ``step`` skips it."""
        self._ensure_layout()
        self._has_grad = [g.gather() for g in self.groups]
        return [g.grad for g in self.groups]

    def grad_norm(self) -> Array:
        """√(Σ ‖∇p‖²) over every gradient: a 0-d array on the parameters' device (no sync)."""
        self.gather_grads()
        xp = self.groups[0].xp
        norms = [xp.linalg.vector_norm(g.grad) for g in self.groups]
        if len(norms) == 1:
            return norms[0]
        devices = {g.device for g in self.groups}
        if len(devices) > 1:
            raise DeviceError(
                f"{type(self).__name__}: parameters on several devices {sorted(devices)}; "
                "one optimizer serves the parameters of one device"
            )
        wide = [xp.astype(n, xp.float64) for n in norms]
        return xp.linalg.vector_norm(xp.stack(wide))

    def clip_grad_norm(self, max_norm: float) -> Array:
        """Scale all gradients together so that their norm is at most ``max_norm``, as
        ``torch.nn.utils.clip_grad_norm_``: ∇ ← ∇ · min(1, max_norm / (total + 1e-6)).
        Returns ``total`` before clipping as a 0-d array on the device (no sync). A NaN/Inf
        total leaves the gradients unscaled (pair it with ``step(apply_if=...)``)."""
        max_norm = _number("clip_grad_norm", "max_norm", max_norm, 0.0, low_open=True)
        total = self.grad_norm()
        if max_norm == math.inf:
            return total
        xp = self.groups[0].xp
        coef = xp.clip(max_norm / (total + 1e-6), max=1.0)
        coef = xp.where(xp.isfinite(coef), coef, xp.ones_like(coef))
        for g in self.groups:
            g.grad *= xp.astype(coef, g.grad.dtype)
        return total

    # ------------------------------------------------------------------ the step
    def step(self, apply_if: Any = None) -> None:
        """Update every parameter that has a gradient (parameters without one are skipped).

        ``apply_if``: a 0-d bool array; where it is False nothing changes (parameters,
        state), decided on the device without a host read. ``step_count`` and the
        per-parameter step counts advance either way (on a device the host cannot know).
        """
        self.step_count += 1
        self.gather_grads()
        flag = _host_flag(apply_if)
        ok = None if flag else apply_if  # a device flag stays on the device
        for gi, (group, has) in enumerate(zip(self.groups, self._has_grad, strict=True)):
            members = self._members[gi]
            steps = {self.param_steps[i] for i in members}
            whole = all(has) and len(steps) == 1  # the fast path: the whole group at once
            for j, i in enumerate(members):
                if has[j]:
                    self.param_steps[i] += 1
                    if not whole and flag is not False:  # one parameter at a time, same math
                        views = self._state_views(gi, j)
                        data, grad = group.views[j], group.grad_views[j]
                        self._update(data, grad, views, self.param_steps[i], ok)
            if whole and flag is not False:
                flat = {name: self._flat_state(gi, name) for name in self.state_names}
                if self.state_names and self.state[self.state_names[0]][members[-1]] is None:
                    for j in range(len(members)):  # the per-parameter views, made once
                        self._state_views(gi, j)
                self._update(group.data, group.grad, flat, self.param_steps[members[0]], ok)

    def _update(self, p: Array, g: Array, state: dict[str, Array], t: int, ok: Any) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ devices
    def to(self, device: str) -> Optimizer:
        """Move every state array to ``device`` (do it together with ``model.to(device)``)."""
        for arrays in self.state.values():
            for i, a in enumerate(arrays):
                if a is not None:
                    arrays[i] = backend.to_device(a, device)
        if all(p.device == backend.normalize_device(device) for p in self.params):
            self._layout()
        return self

    # ------------------------------------------------------------------ saving and resuming
    def state_dict(self, host: bool = False) -> tuple[dict[str, Array], dict[str, Any]]:
        """``(arrays, metadata)``: copies of the state arrays and a JSON-ready dict.

        ``arrays`` maps ``"<state name>.<param index>"`` (``"m.0"``, ``"v.0"``, ``"momentum.3"``)
        to a copy of that array, on its device, or as a NumPy array when ``host=True`` (what
        ``checkpoint.save_checkpoint`` wants). Parameters that have never been updated have
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

        Each state array is copied into the flat state on its parameter's device, in its
        parameter's dtype. Raises ConfigError for another optimizer type, another number of
        parameters or an unknown array name, and ShapeError when an array does not fit.
        """
        name = type(self).__name__
        if not isinstance(metadata, Mapping) or not isinstance(arrays, Mapping):
            raise ConfigError(f"{name}.load_state_dict: expected (arrays, metadata) mappings")
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
            state[sname][int(index)] = backend.asarray(
                a, dtype=backend.dtype_name(p.dtype), device=p.device
            )
        hyper = {key: metadata[key] for key in self.hyperparameters}
        extra = dict(metadata)
        step = int(metadata["step"])
        self.state = state
        self._layout()  # copies the loaded arrays into fresh flat state: the caller's stay apart
        self.step_count = step
        for key, value in hyper.items():
            setattr(self, key, tuple(value) if isinstance(value, list) else value)
        self._load_extra_state(extra)

    def _extra_state(self) -> dict[str, Any]:
        return {"param_steps": list(self.param_steps)}

    def _load_extra_state(self, metadata: Mapping[str, Any]) -> None:
        steps = metadata.get("param_steps")
        if steps is None:  # a state written without per-parameter counts
            first = self.state_names[0] if self.state_names else None
            steps = [
                self.step_count if first and self.state[first][i] is not None else 0
                for i in range(len(self.params))
            ]
        self.param_steps = [int(s) for s in steps]

    def __repr__(self) -> str:
        hyper = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.hyperparameters)
        return f"{type(self).__name__}({len(self.params)} params, {hyper})"


def _gated(xp: Any, ok: Any, g: Array) -> tuple[Array, Array]:
    """(g with NaN/Inf replaced by 0 where not ok, ok as a 0-d float): for device-side skips."""
    okf = xp.astype(ok, g.dtype)
    return xp.where(ok, g, xp.zeros_like(okf)), okf


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
        self.momentum = _number("SGD", "momentum", momentum, 0.0, 1.0, high_open=True)
        self.weight_decay = _number("SGD", "weight_decay", weight_decay, 0.0)
        super().__init__(params, lr)
        if not self.momentum:
            self.state_names = ()
            self.state = {}

    def _update(self, p: Array, g: Array, state: dict[str, Array], t: int, ok: Any) -> None:
        xp = backend.namespace(p)
        okf = None
        if ok is not None:
            g, okf = _gated(xp, ok, g)
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            b = state["momentum"]
            if okf is None:
                if t > 1:
                    b *= self.momentum
                    b += g
                else:
                    b[...] = g  # the first step: b = g
            else:
                keep = self.momentum if t > 1 else 0.0  # b <- b + ok (keep b + g - b)
                b += okf * (keep * b + g - b)
            g = b
        p -= (self.lr if okf is None else self.lr * okf) * g


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
    gradient do not advance, as in PyTorch). Applied to a whole flat group at once; on
    NumPy and CuPy with one reused temporary (ufuncs with ``out=``).
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
        if not isinstance(betas, tuple | list) or len(betas) != 2:
            raise ConfigError(f"Adam: betas must be a pair (β1, β2), got {betas!r}")
        b1 = _number("Adam", "betas[0]", betas[0], 0.0, 1.0, high_open=True)
        b2 = _number("Adam", "betas[1]", betas[1], 0.0, 1.0, high_open=True)
        self.betas = (b1, b2)
        self.eps = _number("Adam", "eps", eps, 0.0)
        self.weight_decay = _number("Adam", "weight_decay", weight_decay, 0.0)
        super().__init__(params, lr)

    def _update(self, p: Array, g: Array, state: dict[str, Array], t: int, ok: Any) -> None:
        b1, b2 = self.betas
        xp = backend.namespace(p)
        m, v = state["m"], state["v"]
        step_size = self.lr / (1 - b1**t)
        bc2_sqrt = (1 - b2**t) ** 0.5
        if ok is not None:  # on the device: every change is multiplied by ok (0 or 1)
            g, okf = _gated(xp, ok, g)
            if self.weight_decay:
                g = g + self.weight_decay * p
            m += (okf * (1 - b1)) * (g - m)  # m = β1 m + (1-β1) g where ok
            v += (okf * (1 - b2)) * (g * g - v)  # v = β2 v + (1-β2) g² where ok
            p -= (okf * step_size) * (m / (xp.sqrt(v) / bc2_sqrt + self.eps))
            return
        if self.weight_decay:
            g = g + self.weight_decay * p
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
            p += buf
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
            p += update


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

    This is the reference, one parameter at a time, with one host read of the norm; a
    training loop uses ``Optimizer.clip_grad_norm`` (flat buffers, no host read).
    ``max_norm`` must be a positive number (``math.inf``: measure only).
    """
    max_norm = _number("clip_grad_norm", "max_norm", max_norm, 0.0, low_open=True)
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
