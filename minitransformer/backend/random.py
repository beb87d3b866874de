"""Random numbers on every device: a seeded Generator, counter-based draws, default generators.

- ``Generator.normal``/``uniform`` (weight initialisation, done once) come from one seeded
  PCG64 stream on the host, moved to the device.
- ``Generator.random``/``keep_mask`` (dropout masks, drawn every step) are *counter-based*:
  draw number c of a generator with seed s depends on (s, c) alone, so a resumed run needs
  only two integers to repeat its masks exactly. On NumPy a PCG64 keyed by (s, c) makes the
  samples (``keep_mask``: its raw 32-bit halves); elsewhere an integer hash of (element
  index, s, c) computed with array-API operations makes them where they are used, with no
  host transfer (``counter_bits``).
- ``manual_seed(s)`` / ``default_generator(device)``: the generators ops use when none is
  passed; ``set_default_generator(g)`` makes an owned one the default (a Trainer's).
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from .arrays import asarray
from .devices import native_device, normalize_device
from .namespaces import Array, namespace_for_device


class Generator:
    """A seeded random generator for a device: a host stream for initialisation, and
    counter-based draws for dropout (see the module doc).

    The whole state that matters for a resumed run is ``{"seed", "counter"}`` (plus the host
    stream's position, for initialisations made after resuming): ``state()``/``set_state``.
    """

    def __init__(self, seed: int = 0, device: str | None = None):
        self.device = normalize_device(device)
        self.seed = int(seed)
        self.counter = 0
        self._stream = np.random.Generator(np.random.PCG64(self.seed))

    def _out(self, a: Array) -> Array:
        return a if self.device == "cpu" else asarray(a, device=self.device)

    def random(self, shape: tuple[int, ...], dtype: str = "float32") -> Array:
        """Uniform samples in [0, 1), draw number ``counter`` of this seed (then counter+1)."""
        c, self.counter = self.counter, self.counter + 1
        if self.device == "cpu":
            keyed = np.random.Generator(np.random.PCG64([self.seed, c]))
            return keyed.random(shape, dtype=np.dtype(dtype))
        return counter_uniform(namespace_for_device(self.device), self.device, shape,
                               self.seed, c, dtype)  # fmt: skip

    def normal(self, shape: tuple[int, ...], std: float = 1.0, dtype: str = "float32") -> Array:
        """Normal samples with mean 0 and standard deviation ``std`` (the host stream)."""
        a = self._stream.standard_normal(shape, dtype=np.dtype(dtype))
        if std != 1.0:
            a *= std
        return self._out(a)

    def uniform(self, shape: tuple[int, ...], low: float, high: float, dtype: str = "float32"):
        """Uniform samples in [low, high) (the host stream)."""
        a = self._stream.random(shape, dtype=np.dtype(dtype)) * (high - low) + low
        return self._out(a)

    def keep_mask(self, shape: tuple[int, ...], p: float) -> Array:
        """Dropout's mask: bool, True (keep) with probability 1 - p; draw ``counter``.

        32 random bits per element, compared with an integer threshold: bits >=
        round(p * 2^32) (P = 1 - p to 2^-32; no conversion to floats). On NumPy the bits are
        PCG64's raw output keyed by (seed, counter), each 64-bit word read as two 32-bit
        halves, low half first (half the time of float32 uniforms); elsewhere the hash
        ``counter_bits``, made on the device."""
        c, self.counter = self.counter, self.counter + 1
        if self.device == "cpu":
            n = 1
            for d in shape:
                n *= int(d)
            keyed = np.random.PCG64([self.seed, c])
            words = np.asarray(keyed.random_raw((n + 1) // 2), dtype="<u8")  # little-endian
            bits = words.view("<u4")[:n].reshape(shape)  # the same bits on every machine
        else:
            bits = counter_bits(namespace_for_device(self.device), self.device, shape, self.seed, c)
        return bits >= keep_threshold(p)

    def dropout_keys(self, p: float) -> tuple[int, int, int]:
        """The draw ``keep_mask`` would make next, as the three integers a GPU kernel needs
        to make the same mask itself: ``(k1, k2, threshold)`` with keep[i] =
        hash(hash(i ^ k1) ^ k2) >= threshold (``counter_bits``); advances ``counter`` as
        ``keep_mask`` does. Bit-exact with ``keep_mask`` on every device but the CPU (whose
        masks come from PCG64, not from the hash)."""
        c, self.counter = self.counter, self.counter + 1
        k1, k2 = counter_keys(self.seed, c)
        return k1, k2, keep_threshold(p)

    def advance(self, draws: int) -> None:
        """Move the draw counter by ``draws`` (negative: back), as that many draws would
        move it, without drawing: for a step whose draws are made elsewhere. A CUDA graph's
        replay (``fast/gpu/cuda_graph.py``) writes the keys of draws ``counter + k`` into its
        dropout kernels' slots, then advances past them; its capture, which ran the step's
        Python but not its kernels, takes its draws back."""
        self.counter += int(draws)

    def state(self) -> dict:
        """A JSON-serialisable snapshot: device, seed, the draw counter and the host
        stream's state."""
        st = self._stream.bit_generator.state
        return {
            "device": self.device,
            "seed": self.seed,
            "counter": self.counter,
            "bit_generator": {
                "state": {k: str(v) for k, v in st["state"].items()},
                "has_uint32": st["has_uint32"],
                "uinteger": st["uinteger"],
            },
        }

    def set_state(self, state: dict) -> None:
        """Restore ``state()``. A snapshot of an older version (no counter) restarts the
        counter at 0: its masks cannot be repeated exactly."""
        self.seed = int(state["seed"])
        self.counter = int(state.get("counter", 0))
        self._stream = np.random.Generator(np.random.PCG64(self.seed))
        bg = state.get("bit_generator")
        if isinstance(bg, dict):
            self._stream.bit_generator.state = {
                "bit_generator": "PCG64",
                "state": {k: int(v) for k, v in bg["state"].items()},
                "has_uint32": bg["has_uint32"],
                "uinteger": bg["uinteger"],
            }


# ----------------------------------------------------------------------------- counter-based bits


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a well-mixed 64-bit integer of ``x`` (host arithmetic)."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def _hash32(x: Array) -> Array:
    """lowbias32 (C. Wellons): an invertible uint32 -> uint32 hash with strong avalanche."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


def counter_keys(seed: int, counter: int) -> tuple[int, int]:
    """The two 32-bit keys (k1, k2) of draw ``counter`` of ``seed``: SplitMix64 of the pair
    (seed, counter) packed in 64 bits, cut in two (host arithmetic)."""
    key = _mix64((seed & 0xFFFFFFFF) << 32 | (counter & 0xFFFFFFFF))
    return key & 0xFFFFFFFF, key >> 32


def keep_threshold(p: float) -> int:
    """Dropout's integer threshold: 32 random bits are kept (>=) with probability 1 - p to
    2^-32. round(p 2^32), capped at 2^32 - 1 so that it fits in 32 bits."""
    return min(round(p * 2**32), 2**32 - 1)


def counter_bits(xp, device: str, shape: tuple[int, ...], seed: int, counter: int) -> Array:
    """32 random bits per element on ``device`` from (seed, counter), counter-based:

        k1, k2 = two 32-bit keys mixed from (seed, counter) on the host (``counter_keys``)
        bits[i] = hash(hash(i ^ k1) ^ k2)        i = 0 .. n-1 (uint32 math)

    i is the flat C-order index as uint32 (past 2^32 elements it wraps, as a uint32
    ``arange`` does). The GPU kernel ``fast/cuda/dropout.cu`` computes the same bits
    from the same keys inside the kernel.

    Array-API operations only, so it runs on any backend, makes the bits where they are
    used (no host transfer), and repeats exactly from (seed, counter).
    """
    n = 1
    for d in shape:
        n *= int(d)
    k1, k2 = counter_keys(seed, counter)
    idx = xp.arange(n, dtype=xp.uint32, device=native_device(device))
    return xp.reshape(_hash32(_hash32(idx ^ k1) ^ k2), shape)


def counter_uniform(xp, device: str, shape: tuple[int, ...], seed: int, counter: int,
                    dtype: str = "float32") -> Array:  # fmt: skip
    """Uniform samples in [0, 1) from ``counter_bits``: u = (bits >> 8) / 2^24. 24 bits per
    sample: the resolution of float32 in [0, 1)."""
    bits = counter_bits(xp, device, shape, seed, counter) >> 8
    return xp.astype(bits, getattr(xp, dtype)) * (1.0 / (1 << 24))


# ----------------------------------------------------------------------------- default generators

_generators: dict[str, Generator] = {}
_base_seed = 0


def manual_seed(seed: int) -> None:
    """Seed the default generator of every device (dropout, initialisation)."""
    global _base_seed
    _base_seed = int(seed)
    _generators.clear()


def set_default_generator(generator: Generator) -> None:
    """Make ``generator`` the one ops use on its device when none is passed, until the next
    ``manual_seed`` (or call of this) replaces it. Each Trainer owns a generator and makes it
    the default before each of its steps and evaluations (train/trainer.py): a second
    Trainer built in the same process (``manual_seed``) then leaves the first drawing from
    its own, as do the first's CUDA graphs, which keep the generator object they saw."""
    if not isinstance(generator, Generator):
        raise ArgumentError(
            f"set_default_generator: generator must be a backend.Generator, "
            f"got {type(generator).__name__}"
        )
    _generators[generator.device] = generator


def default_generator(device: str) -> Generator:
    """The generator ops use on ``device`` when none is passed (see ``manual_seed``)."""
    device = normalize_device(device)
    if device not in _generators:
        _generators[device] = Generator(_base_seed, device)
    return _generators[device]
