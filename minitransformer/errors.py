"""Exception types, one per family of mistake (and the warning and install hint that go
with them).

Each subclasses the built-in exception a Python user would expect (ValueError, TypeError,
RuntimeError), so `except ValueError` still works, while tests and tools can catch the
precise family. Messages name the op or argument, what was expected, what was given,
and how to fix it.
"""


class MiniTransformerError(Exception):
    """Base class of every error this library raises on purpose."""


class ShapeError(MiniTransformerError, ValueError):
    """Shapes or ranks that do not fit together (matmul, attention, masks, layers)."""


class DTypeError(MiniTransformerError, TypeError):
    """An array of the wrong dtype (for example float token ids)."""


class TokenIdError(MiniTransformerError, ValueError):
    """Token ids outside the vocabulary, negative ids, or sequences too long for the model."""


class DeviceError(MiniTransformerError, RuntimeError):
    """Arrays on different devices in one op, or a device that cannot be used here."""


class ConfigError(MiniTransformerError, ValueError):
    """A model or training configuration that is inconsistent (d_model % h != 0, ...)."""


class CheckpointError(MiniTransformerError, RuntimeError):
    """A checkpoint that is missing, truncated, corrupted, unsafe, or from another config."""


class TrainingError(MiniTransformerError, RuntimeError):
    """Training cannot go on (a NaN/Inf loss or gradient, for example)."""


class ArgumentError(MiniTransformerError, ValueError, TypeError):
    """An argument of the wrong kind or outside its range (a negative size, a NaN tolerance,
    beam=0, a string where a number belongs). Both a ValueError and a TypeError, so either
    ``except`` a Python user would write catches it."""


class UnfinishedRunWarning(UserWarning):
    """A model loaded from a run that stopped before its planned steps (Ctrl-C, a crash):
    what it outputs is an unfinished model's. ``warnings.simplefilter("ignore",
    UnfinishedRunWarning)`` silences it where that is meant (a checkpoint saved at step 0)."""


def install_hint(extra: str) -> str:
    """The command that installs the optional dependencies ``extra`` (gpu, torch, mpi, hf,
    lessons, dev): ``pip install -e ".[gpu]"``, run in a clone of the repository, where the
    project is installed from (there is no minitransformer on PyPI, so
    ``pip install 'minitransformer[gpu]'`` works only beside an editable install)."""
    return f'pip install -e ".[{extra}]"'


class Terminated(BaseException):
    """SIGTERM while a command runs (the CLI's and gpucheck's handler, ``raise_terminated``,
    is installed by their ``main`` only): unwinds the stack like Ctrl-C does, so files,
    locks and child processes are closed on the way out. Not an ``Exception``: no
    ``except Exception`` on the way swallows it."""


def raise_terminated(signum: int, frame: object) -> None:  # noqa: ARG001
    """A SIGTERM handler: raise ``Terminated``."""
    raise Terminated
