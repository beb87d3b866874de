"""A command's outputs outside a run directory, checked before any work (``files.py``
writes inside a run).

- ``check_output_dir``: the folder of a study (``scale --out``, ``ablate --out``). A study
  trains for minutes, then writes its files; a folder that cannot be written (a path
  through a file, a link to nothing, a read-only place, ``/proc``) must be found at the
  start, not when the minutes are spent: it is tried for real, and nothing is left behind.
- ``check_study_dir`` / ``write_study_files``: a study's folder (``scale``, the attention
  cost and quality tools) new or empty unless ``--overwrite``, checked before any work;
  then its record (JSON), its Markdown and its figure, each written whole, never through a
  link.
- ``check_new_file`` / ``write_new_file``: one output file (``bench --json FILE``): a FIFO,
  device or directory refused, a link or an existing file replaced only with
  ``--overwrite``, written through a temp file, never through a link.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...checks import listed
from ...errors import ConfigError
from . import files
from .files import _NOFOLLOW, RunDirectoryError, _open_dir, replacing

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
        probe(out)
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


def check_study_dir(out: str | os.PathLike[str], overwrite: bool, replaced: str) -> None:
    """Refuse an ``out`` that cannot be written (``check_output_dir``), or a folder that
    holds anything unless ``overwrite`` (then only the command's own files, named
    ``replaced`` in the message, e.g. "the study's files", are replaced). Called before the
    work, so a refusal comes at the start, not after minutes."""
    out = Path(out)
    check_output_dir(out)
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if held and not overwrite:
        raise RunDirectoryError(
            f"--out {str(out)!r} is not empty (it holds {listed(held)}); pass an empty "
            f"or new folder, or --overwrite to replace {replaced} there"
        )


def write_study_files(
    out: str | os.PathLike[str],
    record: dict[str, Any],
    names: tuple[str, str, str],
    markdown: Callable[[dict[str, Any]], str],
    plot: Callable[[dict[str, Any], Any], Any],
    *,
    overwrite: bool,
    replaced: str,
) -> list[Path]:
    """Write ``names`` (the JSON record's, its Markdown's and its figure's, in that order)
    into ``out`` (made when missing): the record, ``markdown(record)`` and ``plot(record,
    file)``. Refuses what ``check_study_dir`` refuses; with ``overwrite`` a link among the
    names is removed, never written through. Returns the paths."""
    out = Path(out)
    check_study_dir(out, overwrite, replaced)
    out.mkdir(parents=True, exist_ok=True)
    for link in files.linked_entries(out, names):  # only with overwrite (check_study_dir)
        files.remove(out, link)
    json_name, markdown_name, figure_name = names
    files.write_text(out, json_name, json.dumps(record, indent=1) + "\n")
    files.write_text(out, markdown_name, markdown(record))
    with replacing(out, figure_name) as file:
        plot(record, file)
    return [out / name for name in names]


def probe(folder: Path) -> None:
    """Create and delete a file in ``folder`` (OSError where none can be made: a read-only
    mount, no permission, ``/proc``): the test no reading of modes can stand in for."""
    name = folder / f".probe.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600))
    os.unlink(name)


# ------------------------------------------------------------------ an output file (bench --json)


def check_new_file(
    path: str | os.PathLike[str], flag: str, *, overwrite: bool = False, example: str = ""
) -> None:
    """Refuse (ConfigError, naming ``flag``), before any work, an output file outside a run
    (``bench --json FILE``): a directory (``example``: a name to suggest in it), FIFO, device
    or socket; a folder missing or where no file can be made; unless ``overwrite``, a file or
    a link (``write_new_file`` then replaces the link itself, not what it points to)."""
    path = Path(path)
    shown, folder = f"{flag} {path}", path.parent
    if os.path.lexists(folder) and not folder.is_dir():
        raise ConfigError(f"{shown}: {folder} is not a directory. Fix: name a file in one")
    if not folder.is_dir():
        mkdir = f"mkdir -p {shlex.quote(str(folder))}"
        raise ConfigError(f"{shown}: {folder} does not exist. Fix: create it first ({mkdir})")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as err:  # a name too long, a folder that cannot be searched
        raise ConfigError(f"{shown}: {err.strerror}. Fix: name another file") from None
    if mode is not None and stat.S_ISDIR(mode):
        fix = f", e.g. {flag} {path / example}" if example else ""
        raise ConfigError(f"{shown} is a directory. Fix: name a file in it{fix}")
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        kind = (
            "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        )
        raise ConfigError(f"{shown} is {kind}, not a plain file. Fix: name a new file")
    if mode is not None and stat.S_ISLNK(mode) and not overwrite:
        raise ConfigError(f"{shown} is a symbolic link (to {os.readlink(path)}), which an output "
                          "never goes through. Fix: name another file, or add --overwrite to "
                          "replace the link itself (not what it points to)")  # fmt: skip
    if mode is not None and not overwrite:
        raise ConfigError(f"{shown} already exists. Fix: name another file, or add --overwrite "
                          "to replace it")  # fmt: skip
    try:  # can a file be made there? (a read-only mount, no permission, /proc)
        probe(folder)
    except OSError as err:
        raise ConfigError(f"{shown}: cannot create a file in {folder} ({err.strerror}). Fix: "
                          "name a file in a directory you can write") from None  # fmt: skip


def write_new_file(
    path: str | os.PathLike[str], data: bytes, flag: str, *, overwrite: bool = False
) -> None:
    """``data`` as the file ``path``, checked again (``check_new_file``), via a temp file beside
    it: renamed over the name with ``overwrite`` (a link is replaced, not written through),
    else hard-linked to it, which fails if anything appeared there meanwhile (never replacing
    what the command did not make). A crash leaves no half-written file."""
    check_new_file(path, flag, overwrite=overwrite)
    path = Path(path)
    if overwrite:
        with replacing(path.parent, path.name) as file:
            file.write(data)
        return
    where = _open_dir(path.parent, (), create=True)
    assert where is not None  # made when missing
    temp = f".{path.name[:100]}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    appeared = ConfigError(f"{flag} {path} appeared meanwhile. Fix: another name, or --overwrite")
    try:
        with os.fdopen(where.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(where._at(temp), where._at(path.name), src_dir_fd=where.fd,
                    dst_dir_fd=where.fd)  # fmt: skip
        except FileExistsError:
            raise appeared from None
        except OSError:  # a file system without hard links: look once more, then rename
            if where.lstat(path.name) is not None:
                raise appeared from None
            where.replace(temp, path.name)
    finally:
        try:
            where.unlink(temp)
        except OSError:
            pass  # renamed, or never made
        where.close()
