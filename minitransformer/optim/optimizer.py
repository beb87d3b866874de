"""Optimizer: the base of SGD and Adam. Parameters in flat buffers, a step, saving and resuming.

The multi-tensor design. An optimizer lays its parameters end to end in one flat buffer per
device and dtype (``flatbuffer.FlatGroup``): each ``p.data`` becomes a view into it, backward
writes each gradient straight into a twin buffer, and the state (Adam's m and v) has the
same layout. A step is then a handful of array calls whatever the number of parameters
(tiny has 85, base 253), where a loop over parameters makes ~10 per parameter; on a GPU
each call costs ~12 µs of launch overhead, more than the arithmetic. A subclass writes its
update once (its ``rule``, the plain math, and ``_update``, which hands the rule its
hyperparameters); the base applies it to the whole flat buffer, or to one
parameter's views when parameters must be treated apart (some lack a gradient, or their
step counts differ), so both give the same numbers as PyTorch.

The one place an optimizer meets the fast tier is ``step``: ``implementation(rule, data)``
gives the registered twin of the rule for the buffer's array type (``fast/``), else the
rule itself (the default on the CPU).

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
        norm = opt.clip_grad_norm(1.0)                   # 0-d array: norm + scale
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

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .. import backend
from ..errors import ConfigError, DeviceError, ShapeError
from ..function import implementation
from ..tensor import Tensor
from .clip import clip_flat
from .flatbuffer import FlatGroup
from .hyperparameters import check_number

Array = backend.Array


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


def _host_flag(ok: Any) -> bool | None:
    """The value of a 0-d bool ``ok`` when reading it costs nothing (NumPy, or a Python
    bool); None when it lives on a device and must stay there."""
    if ok is None or isinstance(ok, bool):
        return True if ok is None else ok
    if backend.library_of(ok) == "numpy":
        return bool(ok)
    return None


class Optimizer:
    """Base class: parameters in flat groups, a learning rate, per-element state.

    Subclasses name their state arrays in ``state_names`` (e.g. ``("m", "v")``), their JSON
    hyperparameters in ``hyperparameters``, give their update's math as ``rule`` (a plain
    function) and implement ``_update(rule, p, g, state, t, ok)``: one update by ``rule`` (or
    its fast twin) of the array ``p`` (a parameter, or a whole flat group) with gradient
    ``g``, state arrays ``state`` of the same layout, step count ``t`` and device flag ``ok``.

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
        self.lr = check_number(type(self).__name__, "lr", lr, 0.0)
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
                views = group.state_views[name] = group.slices(flat)
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
        """Parameter j of group gi: its state views (recorded on first use; every
        parameter's views of a flat state are made in one pass, once per layout)."""
        group, i = self.groups[gi], self._members[gi][j]
        out = {}
        for name in self.state_names:
            a = self.state[name][i]
            if a is None:
                views = group.state_views.get(name)
                if views is None:
                    views = group.state_views[name] = group.slices(self._flat_state(gi, name))
                a = self.state[name][i] = views[j]
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
        return self._norm_and_clip(math.inf)

    def clip_grad_norm(self, max_norm: float) -> Array:
        """Scale all gradients together so that their norm is at most ``max_norm``, as
        ``torch.nn.utils.clip_grad_norm_``: ∇ ← ∇ · min(1, max_norm / (total + 1e-6)).
        Returns ``total`` before clipping as a 0-d array on the device (no sync). A NaN/Inf
        total leaves the gradients unscaled (pair it with ``step(apply_if=...)``). The math
        is ``clip.py``'s, applied to the flat gradient buffers (a few calls in all)."""
        max_norm = check_number("clip_grad_norm", "max_norm", max_norm, 0.0, low_open=True)
        self.gather_grads()
        return self._norm_and_clip(max_norm)

    def _norm_and_clip(self, max_norm: float) -> Array:
        """The total norm of the gathered gradients (0-d, on their device); unless
        ``max_norm`` is inf, the gradients scaled by ``clip_coefficient`` (clip.py's
        ``clip_flat``, or its fused twin on a GPU)."""
        devices = {g.device for g in self.groups}
        if len(devices) > 1:
            raise DeviceError(
                f"{type(self).__name__}: parameters on several devices {sorted(devices)}; "
                "one optimizer serves the parameters of one device"
            )
        grads = [g.grad for g in self.groups]
        return implementation(clip_flat, grads[0])(grads, max_norm)

    # ------------------------------------------------------------------ the step
    def step(self, apply_if: Any = None) -> None:
        """Update every parameter that has a gradient (parameters without one are skipped).

        ``apply_if``: a 0-d bool array; where it is False nothing changes (parameters,
        state), decided on the device without a host read. The step counts advance either
        way (``advance``; on a device the host cannot know).
        """
        self.gather_grads()
        self.advance(self._has_grad)
        flag = _host_flag(apply_if)
        if flag is False:  # counted; nothing changes
            return
        ok = None if flag else apply_if  # a device flag stays on the device
        for gi, (group, has) in enumerate(zip(self.groups, self._has_grad, strict=True)):
            rule = implementation(self.rule, group.data)  # the math, or its fast twin
            members = self._members[gi]
            if not all(has) or len({self.param_steps[i] for i in members}) > 1:
                for j, i in enumerate(members):  # one parameter at a time, the same math
                    if has[j]:
                        views, grad = self._state_views(gi, j), group.grad_views[j]
                        self._update(rule, group.views[j], grad, views, self.param_steps[i], ok)
                continue  # else the fast path: the whole group at once
            flat = {name: self._flat_state(gi, name) for name in self.state_names}
            if self.state_names and self.state[self.state_names[0]][members[-1]] is None:
                for j in range(len(members)):  # the per-parameter views, made once
                    self._state_views(gi, j)
            self._update(rule, group.data, group.grad, flat, self.param_steps[members[0]], ok)

    def advance(self, has_grad: list[list[bool]] | None = None) -> list[int]:
        """Count one step as ``step`` does: ``step_count`` + 1, and + 1 for each parameter
        with a gradient (``has_grad`` per group, from ``gather_grads``; None: all). Returns
        each group's count t. A CUDA graph's replay counts its step so (fast/gpu/cuda_graph.py)."""
        self.step_count += 1
        for gi, members in enumerate(self._members):
            for j, i in enumerate(members):
                if has_grad is None or has_grad[gi][j]:
                    self.param_steps[i] += 1
        return [self.param_steps[members[0]] for members in self._members]

    @contextlib.contextmanager
    def uncounted(self) -> Iterator[None]:
        """Steps inside this block are not counted (the counts are put back after it): a
        step's Python run without its arithmetic, a CUDA graph's capture (fast/gpu/)."""
        saved = self.step_count, list(self.param_steps)
        try:
            yield
        finally:
            self.step_count, self.param_steps = saved

    rule: Any = None  # the update's math, a plain function (adam_update, sgd_update)

    def _update(self, rule: Any, p: Array, g: Array, state: dict[str, Array], t: int,
                ok: Any) -> None:  # fmt: skip
        raise NotImplementedError

    # ------------------------------------------------------------------ devices
    def to(self, device: str) -> Optimizer:
        """Move every state array to ``device`` (do it together with ``model.to(device)``)."""
        device = backend.normalize_device(device)
        for arrays in self.state.values():
            for i, a in enumerate(arrays):
                if a is not None:
                    arrays[i] = backend.move(a, device)
        if all(p.device == device for p in self.params):
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


def assign(ok: Any, *updates: tuple[Array, Array]) -> None:
    """Write each ``(array, new value)`` pair in place, ``array[...] = new``: an update's
    last line. ``ok`` is the step's guard, a 0-d bool on the device (decided there, no host
    read): where it is False every array keeps its value, so a step with a NaN/Inf gradient
    changes nothing. ``ok`` None (no guard, or one already read on the host): always write."""
    for array, new in updates:
        if ok is not None:
            new = backend.namespace(array).where(ok, new, array)
        array[...] = new
