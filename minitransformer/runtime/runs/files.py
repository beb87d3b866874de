"""Writing inside a run directory without ever following a link out of it.

A run directory may have been prepared by anyone: a ``result.json`` that is a symbolic link
to ``~/.bashrc``, a ``plots/`` that links to another project. Every file a run writes goes
through this module, which never writes through, deletes through or walks into a link:

* **The run directory itself may be a link** (``--out runs/copy`` where ``runs`` or
  ``runs/copy`` links to ``/scratch``): where runs live is the user's choice. Inside it,
  nothing is followed: each entry (``plots``, ``plots/curves.png``) is opened with
  ``O_NOFOLLOW``, relative to an open descriptor of the directory above it (``dir_fd``), so
  a link swapped in between a check and a write is not followed either.
* **Files written whole** (``result.json``, ``plots/*.png``, a metrics log cut back on
  resume) go to a new temp file (``O_CREAT | O_EXCL | O_NOFOLLOW``, a random name) that is
  then ``os.replace``-d over the name: a link there is replaced, never written through, and
  a crash leaves the old file or the new one, never half of one.
* **Files written in place** (the lock ``.lock``, appends to ``metrics.jsonl``) are opened
  with ``O_NOFOLLOW``: a link there is refused with a RunDirectoryError naming it and the fix.
* **Removing** (``--overwrite``, stale temp files) unlinks the entry itself: a link is
  removed, never what it points to, and a directory that is a link is not entered.

``runs.open_run`` refuses a run whose entries are links before any training starts
(``linked_entries``), so a prepared link is met at the start, not after an hour of training.
Where the OS has no ``dir_fd``/``O_NOFOLLOW`` (Windows), each entry is checked with
``lstat`` before it is used.

A command's outputs outside a run (``bench --json``, ``scale --out``): ``outputs.py``.

**Reading** a file of a run the user names (``read_text_file``: the metrics log a resumed run
cuts back, the plots draw) is checked the way a checkpoint is (``checkpoint.open_regular``):
opened without waiting, then ``fstat``-ed, so a FIFO or a device there is refused with one
line instead of hanging the run or filling its memory.
"""

from __future__ import annotations

import io
import os
import secrets
import shlex
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, NoReturn

from ...errors import ConfigError
from ..checkpoint.reading import open_regular

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO in place of a file must not hang the run
_BINARY = getattr(os, "O_BINARY", 0)
_DIR_FD = bool(_NOFOLLOW and _DIRECTORY) and {
    os.open, os.stat, os.unlink, os.mkdir, os.rename
} <= os.supports_dir_fd  # fmt: skip


class RunDirectoryError(ConfigError):
    """A run directory that cannot be written: it holds another run, a process is in it, or
    an entry the run writes is a link or not a plain file."""


def link_message(run: str | os.PathLike[str], names: str | list[str]) -> str:
    """The refusal of entries ``names`` of ``run`` that are symbolic links, with the fix."""
    paths = [Path(run) / name for name in ([names] if isinstance(names, str) else names)]
    shown = []
    for path in paths:
        try:
            shown.append(f"{path} (a link to {os.readlink(path)})")
        except OSError:
            shown.append(f"{path} (a link)")
    links = " ".join(shlex.quote(str(path)) for path in paths)
    return (
        f"{', '.join(shown)}: a run writes only inside its own directory, never through a "
        f"symbolic link. Fix: remove the link (rm {links}) or pass another --out; a new run "
        "may also replace it with --overwrite, which deletes the link, not what it points to"
    )


class _Dir:
    """A directory inside a run, reached without following links: an open descriptor where
    the OS has ``dir_fd``, else its path (each entry ``lstat``-ed before use)."""

    def __init__(self, run: Path, parts: tuple[str, ...], fd: int | None):
        self.run, self.parts, self.fd = run, parts, fd
        self.path = run.joinpath(*parts)

    def name(self, leaf: str) -> str:
        """``leaf`` as the run names it (``plots/curves.png``), for messages."""
        return "/".join((*self.parts, leaf))

    def _at(self, leaf: str) -> str | Path:
        return leaf if self.fd is not None else self.path / leaf

    def lstat(self, leaf: str) -> os.stat_result | None:
        try:
            return os.stat(self._at(leaf), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open(self, leaf: str, flags: int, mode: int = 0o644) -> int:
        """Open ``leaf`` (never through a link), a regular file only."""
        if self.fd is None:
            self._refuse_link(leaf)
        try:
            fd = os.open(self._at(leaf), flags | _NOFOLLOW | _NONBLOCK | _BINARY, mode,
                         dir_fd=self.fd)  # fmt: skip
        except OSError:
            self._refuse_link(leaf)
            self._refuse_other(leaf, self.lstat(leaf), "a plain file", stat.S_ISREG)
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            self._refuse_other(leaf, self.lstat(leaf), "a plain file", stat.S_ISREG)
        return fd

    def unlink(self, leaf: str) -> None:
        os.unlink(self._at(leaf), dir_fd=self.fd)

    def replace(self, source: str, leaf: str) -> None:
        os.replace(self._at(source), self._at(leaf), src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _refuse_link(self, leaf: str) -> None:
        info = self.lstat(leaf)
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise RunDirectoryError(link_message(self.run, self.name(leaf)))

    def _refuse_other(
        self, leaf: str, info: os.stat_result | None, kind: str, ok: Callable[[int], bool]
    ) -> None:
        if info is not None and not ok(info.st_mode):
            raise RunDirectoryError(
                f"{self.run / self.name(leaf)} is not {kind}, so the run cannot write there. "
                "Fix: move it away, or pass another --out"
            )


def _open_dir(run: Path, parts: tuple[str, ...], *, create: bool) -> _Dir | None:
    """The directory ``run/parts...``: ``run`` itself may be a link, nothing below it may.
    Missing directories are made when ``create``, else None is returned."""
    if not _DIR_FD:
        here = _Dir(run, (), None)
        for i, part in enumerate(parts):
            here._refuse_link(part)
            info = here.lstat(part)
            if info is None:
                if not create:
                    return None
                (here.path / part).mkdir()
            else:
                here._refuse_other(part, info, "a directory", stat.S_ISDIR)
            here = _Dir(run, parts[: i + 1], None)
        return here
    try:
        fd = os.open(run, os.O_RDONLY | _DIRECTORY)
    except FileNotFoundError:
        if not create:
            return None
        run.mkdir(parents=True, exist_ok=True)
        fd = os.open(run, os.O_RDONLY | _DIRECTORY)
    here = _Dir(run, (), fd)
    for i, part in enumerate(parts):
        try:
            if create and here.lstat(part) is None:
                try:
                    os.mkdir(part, 0o777, dir_fd=here.fd)
                except FileExistsError:
                    pass  # made in between: opened (and checked) below
            try:
                fd = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=here.fd)
            except FileNotFoundError:
                if create:
                    raise
                here.close()
                return None
            except OSError:
                here._refuse_link(part)
                here._refuse_other(part, here.lstat(part), "a directory", stat.S_ISDIR)
                raise
        except BaseException:
            here.close()
            raise
        here.close()
        here = _Dir(run, parts[: i + 1], fd)
    return here


def _split(name: str) -> tuple[tuple[str, ...], str]:
    parts = tuple(Path(name).parts)
    if not parts or Path(name).is_absolute() or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{name!r} is not a name inside a run directory")
    return parts[:-1], parts[-1]


def open_file(run: str | os.PathLike[str], name: str, flags: int, mode: int = 0o644) -> int:
    """Open ``run/name`` as a raw descriptor with ``flags`` (``O_NOFOLLOW`` added): a link,
    a linked directory on the way or something that is not a plain file is refused
    (RunDirectoryError). Missing directories on the way are made when ``flags`` creates."""
    parents, leaf = _split(name)
    where = _open_dir(Path(run), parents, create=bool(flags & os.O_CREAT))
    if where is None:
        raise FileNotFoundError(f"{Path(run) / name}: no such file")
    try:
        return where.open(leaf, flags, mode)
    finally:
        where.close()


def read_text_file(path: str | os.PathLike[str]) -> IO[str]:
    """``path``, a file of a run, opened to read UTF-8 text (undecodable bytes replaced): a
    regular file only, its type checked on the open descriptor before a byte is read, so a
    FIFO or a device there is refused (RunDirectoryError) instead of hanging the reader."""
    path = Path(path)

    def refuse(problem: str, fix: str) -> NoReturn:
        raise RunDirectoryError(f"cannot read {path}: {problem}. Fix: {fix}")

    file = open_regular(path, refuse, _RUN_FILE_FIXES)
    return io.TextIOWrapper(file, encoding="utf-8", errors="replace")


_RUN_FILE_FIXES = {  # what read_text_file's refusals advise
    "missing": "check the path",
    "not regular": "move it away: a run keeps its own files there, which it writes itself",
    "unreadable": "check the file's permissions",
}


def open_append(run: str | os.PathLike[str], name: str) -> IO[str]:
    """``run/name`` opened to append text (created when missing), never through a link."""
    fd = open_file(run, name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    return os.fdopen(fd, "a", encoding="utf-8")


@contextmanager
def replacing(run: str | os.PathLike[str], name: str) -> Iterator[IO[bytes]]:
    """A binary file whose bytes become ``run/name`` when the block ends without an error.

    They go to a new temp file beside it (``.NAME.PID-HEX.tmp``, which runs.lock's cleanup
    knows), then one ``os.replace`` publishes them: a link at ``name`` is replaced, never
    written through; a failed block leaves ``name`` as it was.
    """
    parents, leaf = _split(name)
    where = _open_dir(Path(run), parents, create=True)
    assert where is not None  # made when missing
    try:
        where._refuse_other(leaf, where.lstat(leaf), "a plain file", lambda m: not stat.S_ISDIR(m))
        temp = f".{leaf}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
        fd = where.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            with os.fdopen(fd, "wb") as file:
                yield file
                file.flush()
                os.fsync(file.fileno())
            where.replace(temp, leaf)
        except BaseException:
            try:
                where.unlink(temp)
            except OSError:
                pass
            raise
    finally:
        where.close()


def write_text(run: str | os.PathLike[str], name: str, text: str) -> None:
    """``run/name`` replaced by ``text`` (UTF-8) as one atomic step (see ``replacing``)."""
    with replacing(run, name) as file:
        file.write(text.encode("utf-8"))


def remove(run: str | os.PathLike[str], name: str) -> bool:
    """Delete entry ``run/name`` itself (a link is removed, not what it points to); nothing
    under a directory that is a link is touched. True when something was removed."""
    parents, leaf = _split(name)
    try:
        where = _open_dir(Path(run), parents, create=False)
    except RunDirectoryError:
        return False  # under a linked directory: not the run's, left alone
    if where is None:
        return False
    try:
        info = where.lstat(leaf)
        if info is None or stat.S_ISDIR(info.st_mode):
            return False
        where.unlink(leaf)
        return True
    except FileNotFoundError:
        return False
    finally:
        where.close()


def linked_entries(run: str | os.PathLike[str], names: Iterable[str]) -> list[str]:
    """The entries among ``names`` (and the directories on their way) that are symbolic
    links, as the run names them (``plots``, ``result.json``), each once, in order."""
    found: list[str] = []
    for name in names:
        parents, leaf = _split(name)
        parts = (*parents, leaf)
        for i in range(len(parts)):
            entry = "/".join(parts[: i + 1])
            if os.path.islink(Path(run, *parts[: i + 1])):
                if entry not in found:
                    found.append(entry)
                break
    return found
