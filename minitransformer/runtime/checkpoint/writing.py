"""Putting a checkpoint's bytes on disk (``save_checkpoint``'s file-system half): the folder
made, a temp file written and published in one step, every OS error one line.

* The bytes go to a temp file beside the target (``.NAME.PID-HEX.tmp``, opened with
  ``O_CREAT | O_EXCL | O_NOFOLLOW``: never through a link, never over another file), are
  flushed and ``fsync``-ed, then published:

  - ``overwrite=True`` (a run saving its checkpoint again): ``os.replace`` over the target,
    so a crash at any moment leaves either the old file or the new one;
  - ``overwrite=False`` (``checkpoint upgrade``, which never overwrites): ``os.link`` to the
    target, which fails when anything (a file, a link, even a dangling one) has the name, so
    of two writers started together exactly one wins and the other is refused; the target
    is always one writer's complete file. (A file system without hard links: the name is
    claimed with ``O_CREAT | O_EXCL``, then replaced.)

  The folder is then ``fsync``-ed where the OS allows.
* Any OS error (a read-only folder, a full disk, a file or a dangling link where a folder
  belongs, a target that is a folder) is one CheckpointError naming the path and the fix;
  the temp file is removed, and a failure to remove it never hides that error.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ...errors import CheckpointError

_NO_LINKS = {errno.EPERM, errno.ENOSYS, errno.EXDEV, errno.EMLINK, errno.EOPNOTSUPP}
_READ_ONLY = {errno.EACCES, errno.EPERM, errno.EROFS}
_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG}


class TargetExists(CheckpointError):
    """``write_atomically(..., overwrite=False)`` found its target's name taken."""


def write_atomically(
    path: Path, write: Callable[[BinaryIO], None], *, overwrite: bool = True
) -> None:
    """Make ``path``'s folder (and those above it), then write ``write(file)``'s bytes to
    ``path`` in one step (see the module's docstring).

    Raises:
        TargetExists: ``overwrite`` is False and ``path`` exists (a CheckpointError).
        CheckpointError: any OS error, worded with the path and the fix.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _error(path, exc) from exc
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    made = False
    try:
        # O_EXCL: never clobber an existing file; O_NOFOLLOW: never write through a link.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        fd = os.open(tmp, flags | getattr(os, "O_NOFOLLOW", 0), 0o666)  # the umask decides
        made = True
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        if overwrite:
            os.replace(tmp, path)
            made = False
        else:
            _claim(tmp, path)
    except BaseException as exc:  # also KeyboardInterrupt: never leave the temp file behind
        if made:
            _discard(tmp)
        if isinstance(exc, OSError):
            raise _error(path, exc, claim=not overwrite) from exc
        raise
    if made:
        _discard(tmp)  # the file has its name now: the temp name goes
    _fsync_directory(path.parent)


def _claim(tmp: Path, path: Path) -> None:
    """Give the complete file ``tmp`` the name ``path`` unless something already has it."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        os.close(os.open(path, flags, 0o666))  # no hard links here: claim the name ...
        os.replace(tmp, path)  # ... then fill it in one step


def _discard(tmp: Path) -> None:
    """Remove a temp file; a failure here never hides the error that led to it."""
    try:
        tmp.unlink(missing_ok=True)
    except OSError:
        pass


def _error(path: Path, exc: OSError, claim: bool = False) -> CheckpointError:
    """The one-line CheckpointError for an OS error while saving ``path``: what, and the fix."""
    folder, kept = path.parent, "; the previous file, if any, is untouched"
    if isinstance(exc, FileExistsError) and claim and os.path.lexists(path):
        return TargetExists(
            f"cannot save checkpoint {path}: it already exists (written before, or by another "
            "process a moment ago) and is left as it is. Fix: remove it, or write elsewhere."
        )
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        blocker = next((p for p in (folder, *folder.parents) if os.path.lexists(p)), folder)
        if os.path.islink(blocker):
            problem = f"{blocker} is a link to a folder that does not exist"
            fix = "create that folder, remove the link, or choose another folder"
        else:
            problem = f"{blocker} is a file, not a folder"
            fix = "choose another folder, or move that file away"
    elif isinstance(exc, IsADirectoryError):
        problem, fix = "it is a folder", "name a file (for example DIR/checkpoint.safetensors)"
    elif exc.errno in _READ_ONLY:
        where = next((p for p in (folder, *folder.parents) if os.path.isdir(p)), folder)
        how = "a read-only file system" if exc.errno == errno.EROFS else "permission denied"
        problem = f"cannot write in {where} ({how}){kept}"
        fix = "choose a folder you can write to"
    elif exc.errno in _FULL:
        problem = f"the disk is full ({exc.strerror}){kept}"
        fix = f"free disk space on {folder} or choose another folder"
    else:
        problem = f"writing failed ({' '.join(str(exc.strerror or exc).split())}){kept}"
        fix = f"check free disk space and write permission on {folder}"
    return CheckpointError(f"cannot save checkpoint {path}: {problem}. Fix: {fix}.")


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable where the OS supports fsync on a directory (POSIX)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse; the data itself is already fsync-ed
    finally:
        os.close(fd)
