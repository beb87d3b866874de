"""The output folder of a study (``scale --out``, ``ablate --out``), checked before any work.

A study trains for minutes, then writes its files into a folder. A folder that cannot be
written (a path through a file, a link to nothing, a read-only place, ``/proc``) must be
found at the start, not when the minutes are spent: :func:`check_output_dir` tries it for
real, the way the files will be written (``files.py``), and leaves nothing behind.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from .files import RunDirectoryError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

_KINDS = (
    (stat.S_ISREG, "a file"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISSOCK, "a socket"),
)


def check_output_dir(out: str | os.PathLike[str], flag: str = "--out") -> None:
    """Raise RunDirectoryError (one line naming ``flag`` and the fix) unless files can be
    written into folder ``out``.

    Refused: something at ``out``, or on the way to it, that is not a folder (a file, a
    FIFO, a device, a socket); a symbolic link to nothing; a place where this process cannot
    make a folder or create a file (a read-only mount, no permission, ``/proc``, ``/sys``).
    The test is the real thing: the missing folders are made, a probe file is created and
    deleted in ``out``, and the folders this check made are removed again. ``out`` may be a
    link to a folder: where outputs live is the user's choice.
    """
    out = Path(out)
    shown = f"{flag} {out}"
    missing, here = [], out
    while not os.path.lexists(here) and here != here.parent:  # the folders to make
        missing.append(here)
        here = here.parent
    if os.path.islink(here) and not os.path.exists(here):
        raise RunDirectoryError(
            f"{shown}: {here} is a symbolic link to {os.readlink(here)}, which does not "
            f"exist. Fix: create the folder it points to, or pass another {flag}"
        )
    if os.path.lexists(here) and not here.is_dir():
        mode = os.stat(here).st_mode
        kind = next((name for is_kind, name in _KINDS if is_kind(mode)), "not a folder")
        on_the_way = "" if here == out else f": {here}"
        raise RunDirectoryError(f"{shown}{on_the_way} is {kind}. Fix: pass a folder as {flag}")
    made: list[Path] = []
    doing = ""
    try:
        for folder in reversed(missing):  # from the top down
            doing = f"make the folder {folder}"
            try:
                folder.mkdir()
            except FileExistsError:
                continue  # made by someone else meanwhile: not ours to remove
            made.append(folder)
        doing = f"create a file in {out}"
        probe = out / f".probe.{os.getpid()}-{secrets.token_hex(4)}.tmp"
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600))
        os.unlink(probe)
    except OSError as err:
        raise RunDirectoryError(
            f"{shown}: cannot {doing} ({err.strerror}). Fix: pass a {flag} folder that you "
            "can write to"
        ) from None
    finally:
        for folder in reversed(made):  # from the bottom up; one filled meanwhile stays
            try:
                folder.rmdir()
            except OSError:
                pass
