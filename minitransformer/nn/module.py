"""Module: a tree of layers that owns Parameters, buffers and sub-Modules.

Assigning a ``Parameter`` or a ``Module`` to an attribute registers it::

    class Affine(Module):
        def __init__(self):
            super().__init__()
            self.w = Parameter(backend.asarray([[1.0, 2.0]]))   # a trainable leaf tensor
            self.inner = Linear(2, 3)                           # a sub-Module
            self.register_buffer("table", some_array)           # non-trainable state

``named_parameters()`` walks the tree in registration order and yields dotted names
("inner.weight"); a Parameter shared by two Modules (tied embeddings) is listed once, under
the first name it was reached by. ``state_dict()`` maps those names (plus *persistent*
buffers) to raw arrays; ``load_state_dict`` copies them back and reports every missing,
unexpected and mis-shaped key in one message. ``to(device, dtype)`` moves everything in
place, so Parameters keep their identity (an optimizer built before the move still holds
them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .. import backend, checks
from ..errors import ArgumentError, DTypeError, MiniTransformerError, ShapeError
from ..tensor import Tensor


def _numeric(value: Any) -> bool:
    """An array (any backend) of real numbers: what a state dict may hold."""
    if not backend.is_array(value):
        return False
    return backend.dtype_name(value.dtype).startswith(("float", "int", "uint", "bool"))


class StateDictKeyError(MiniTransformerError, KeyError):
    """``load_state_dict`` found missing or unexpected keys (the message lists them all)."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


class Parameter(Tensor):
    """A Tensor that is a trainable weight of a Module: a leaf with ``requires_grad=True``."""

    def __init__(self, data: Any, dtype: Any = None, device: Any = None):
        super().__init__(data, requires_grad=True, dtype=dtype, device=device)

    def __repr__(self) -> str:
        dtype = backend.dtype_name(self.dtype)
        return f"Parameter(shape={self.shape}, dtype={dtype}, device={self.device!r})"


class Module:
    """Base class of every layer. Subclasses call ``super().__init__()`` first and define
    ``forward``; calling the module calls ``forward``."""

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_persistent", set())
        object.__setattr__(self, "_builders", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    # ------------------------------------------------------------------ registration
    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}: call super().__init__() before assigning attributes"
            )
        for table in (self._parameters, self._modules, self._buffers):
            table.pop(name, None)
        self.__dict__.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)  # also a plain attribute: fast to read

    def __getattr__(self, name: str) -> Any:  # called only when normal lookup fails
        for table in ("_parameters", "_modules", "_buffers"):
            entries = self.__dict__.get(table, {})
            if name in entries:
                return entries[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def register_buffer(
        self,
        name: str,
        value: Any,
        persistent: bool = True,
        build: Callable[[], Any] | None = None,
    ) -> None:
        """Keep a non-trainable array (as a Tensor without grad) that ``to()`` moves.

        Persistent buffers are part of ``state_dict()``; non-persistent ones (such as the
        sinusoidal position table, which the config fully determines) are not. ``build``
        (no arguments -> a float64 host array) makes the buffer a computed constant:
        ``to(dtype=...)`` recomputes it from float64 instead of casting the stored values,
        so a float32 model cast to float64 holds the float64 table, not a widened float32
        one.
        """
        for table in (self._parameters, self._modules):
            table.pop(name, None)
        self.__dict__.pop(name, None)
        self._buffers[name] = value if isinstance(value, Tensor) else Tensor(value)
        object.__setattr__(self, name, self._buffers[name])
        if build is None:
            self._builders.pop(name, None)
        else:
            self._builders[name] = build
        if persistent:
            self._persistent.add(name)
        else:
            self._persistent.discard(name)

    # ------------------------------------------------------------------ walking the tree
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """(dotted name, module) for this module and every descendant, each once."""
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            children = [(f"{name}.{k}" if name else k, m) for k, m in module._modules.items()]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        for _, module in self.named_modules():
            yield module

    def children(self) -> Iterator[Module]:
        yield from self._modules.values()

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) in registration order; shared Parameters once."""
        seen: set[int] = set()
        for prefix, module in self.named_modules():
            for name, p in module._parameters.items():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{prefix}.{name}" if prefix else name), p

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def named_buffers(self, persistent_only: bool = False) -> Iterator[tuple[str, Tensor]]:
        for prefix, module in self.named_modules():
            for name, b in module._buffers.items():
                if not persistent_only or name in module._persistent:
                    yield (f"{prefix}.{name}" if prefix else name), b

    def num_parameters(self) -> int:
        """Number of trainable scalars (shared Parameters counted once)."""
        return sum(p.size for p in self.parameters())

    @property
    def device(self) -> str | None:
        """Device of the first parameter (or buffer); None for a module with neither."""
        for _, t in self.named_parameters():
            return t.device
        for _, t in self.named_buffers():
            return t.device
        return None

    # ------------------------------------------------------------------ modes and grads
    def train(self, mode: bool = True) -> Module:
        """Training mode (dropout active) for this module and all descendants."""
        for module in self.modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self) -> Module:
        """Evaluation mode: dropout off."""
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    # ------------------------------------------------------------------ moves
    def to(self, device: Any = None, dtype: Any = None) -> Module:
        """Move (and/or cast floating) parameters, their grads and buffers, in place.

        ``device``: "cpu", "cuda", "cuda:N", "strict:NAME"; ``dtype``: "float32"/"float64".
        Integer buffers keep their dtype. Returns self. ``cuda:N`` becomes the process's
        current GPU (``backend.make_current``: the fused kernels launch on the current one).
        """
        if device is not None:
            device = backend.normalize_device(device)
            backend.make_current(device)
        if dtype is not None:
            name = dtype if isinstance(dtype, str) else backend.dtype_name(dtype)
            if name not in ("float32", "float64"):
                raise DTypeError(
                    f"{type(self).__name__}.to: dtype must be 'float32' or 'float64', got "
                    f"{dtype!r}; use float32 to train and float64 for gradient checks"
                )

        def move(a: Any) -> Any:
            if device is not None:
                a = backend.move(a, device)  # normalized once, above
            if dtype is not None and backend.dtype_name(a.dtype).startswith("float"):
                xp = backend.namespace(a)
                target = backend.resolve_dtype(xp, dtype)
                if a.dtype != target:
                    a = xp.astype(a, target)
            return a

        for _, p in self.named_parameters():
            p.data = move(p.data)
            if p.grad is not None:
                p.grad = move(p.grad)
        for _, module in self.named_modules():
            for name, b in module._buffers.items():
                build = module._builders.get(name)
                if build is not None and dtype is not None:  # recompute, do not cast
                    target = device if device is not None else b.device
                    b.data = backend.asarray(build(), dtype=dtype, device=target)
                else:
                    b.data = move(b.data)
        return self

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """{dotted name: a copy of the raw array} for every Parameter and persistent buffer.

        Arrays stay on the module's device; ``backend.to_numpy`` them to save.
        """
        out = {}
        for name, t in [*self.named_parameters(), *self.named_buffers(persistent_only=True)]:
            out[name] = backend.namespace(t.data).asarray(t.data, copy=True)
        return out

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> dict[str, list]:
        """Copy arrays (any backend, any float dtype) into the parameters and buffers.

        Values are cast to each parameter's dtype and moved to its device. Every problem is
        reported at once: mis-shaped entries raise ShapeError (always); with ``strict``,
        missing or unexpected keys raise StateDictKeyError (a KeyError). Returns
        ``{"missing": [...], "unexpected": [...]}``.
        """
        where = f"load_state_dict into {type(self).__name__}"
        if not isinstance(state, Mapping):
            raise ArgumentError(
                f"{where}: state must be a dict {{name: array}}, got {type(state).__name__}; "
                "pass model.state_dict() of a model built from the same config (a "
                "checkpoint's arrays, not the checkpoint path)"
            )
        strict = checks.flag(where, "strict", strict)
        own = dict([*self.named_parameters(), *self.named_buffers(persistent_only=True)])
        state = {k: (v.data if isinstance(v, Tensor) else v) for k, v in state.items()}
        bad = [f"{k} ({type(v).__name__})" for k, v in state.items() if not _numeric(v)]
        if bad:
            raise DTypeError(
                f"{where}: values must be numeric arrays, got {', '.join(bad)}; pass the "
                "arrays of model.state_dict() (NumPy, CuPy or Tensors)"
            )
        nonfinite = [k for k, v in state.items() if k in own and not backend.all_finite(v)]
        if nonfinite:
            raise ArgumentError(
                f"{where}: {checks.listed(nonfinite)} hold NaN or Inf values; the saved model had "
                "diverged: load an earlier checkpoint, or train again with a lower learning rate"
            )
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        misshaped = [
            f"{k}: checkpoint {tuple(state[k].shape)} vs model {own[k].shape}"
            for k in own
            if k in state and tuple(state[k].shape) != own[k].shape
        ]
        if misshaped or (strict and (missing or unexpected)):
            parts = []
            if misshaped:
                parts.append("mis-shaped: " + "; ".join(misshaped))
            if missing:
                parts.append(f"missing keys: {missing}")
            if unexpected:
                parts.append(f"unexpected keys: {unexpected}")
            fix = "build the model from the same config as the saved one"
            if not misshaped:
                fix += ", or pass strict=False to skip missing/unexpected keys"
            message = f"load_state_dict into {type(self).__name__}: {' | '.join(parts)}. Fix: {fix}"
            raise (ShapeError if misshaped else StateDictKeyError)(message)
        for name, t in own.items():
            if name in state:
                value = backend.asarray(state[name], dtype=t.dtype, device=t.device)
                t.data = backend.namespace(value).asarray(value, copy=True)
        return {"missing": missing, "unexpected": unexpected}

    # ------------------------------------------------------------------ calling and printing
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, module in self._modules.items():
            child = repr(module).replace("\n", "\n  ")
            lines.append(f"  ({name}): {child}")
        return "\n".join(lines) + (")" if len(lines) == 1 else "\n)")


class ModuleList(Module):
    """A list of sub-Modules, registered under "0", "1", ... (the layers of a stack)."""

    def __init__(self, modules: list[Module] | None = None):
        super().__init__()
        for m in modules or []:
            self.append(m)

    def append(self, module: Module) -> ModuleList:
        self._modules[str(len(self._modules))] = module
        return self

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())
