"""``scale --out`` (and ``ablate --out``) that cannot be written is refused at the start
(issue 47, cause 3): exit 2 and one line, before any training, instead of after a study of
about five minutes. The check tries the folder for real and leaves nothing behind.

Read-only places: as root, a ``chmod`` read-only folder is still writable, so the members
here are places no process may write (``/proc``, ``/sys``); the ``chmod`` member runs only
as another user.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from test_cli import assert_user_error, run_main

from minitransformer.runtime.runs import RunDirectoryError
from minitransformer.runtime.runs.outputs import check_output_dir
from minitransformer.tools import ablate
from minitransformer.tools.scaling import command


def _file(tmp: Path) -> tuple[str, str]:
    (tmp / "file").write_text("x")
    return str(tmp / "file"), "is a file"


def _under_a_file(tmp: Path) -> tuple[str, str]:
    (tmp / "file").write_text("x")
    return str(tmp / "file" / "study"), f"{tmp / 'file'} is a file"


def _deep_under_a_file(tmp: Path) -> tuple[str, str]:
    (tmp / "file").write_text("x")
    return str(tmp / "file" / "a" / "b"), f"{tmp / 'file'} is a file"


def _dangling_link(tmp: Path) -> tuple[str, str]:
    (tmp / "link").symlink_to(tmp / "gone" / "study")
    return str(tmp / "link"), "is a symbolic link to"


def _under_a_dangling_link(tmp: Path) -> tuple[str, str]:
    (tmp / "link").symlink_to(tmp / "gone")
    return str(tmp / "link" / "study"), "which does not exist"


def _fifo(tmp: Path) -> tuple[str, str]:
    os.mkfifo(tmp / "fifo")
    return str(tmp / "fifo"), "is a FIFO"


def _under_a_device(tmp: Path) -> tuple[str, str]:
    return "/dev/null/study", "/dev/null is a device"


def _under_proc(tmp: Path) -> tuple[str, str]:
    return f"/proc/{os.getpid()}/study", "cannot make the folder"


def _proc_folder(tmp: Path) -> tuple[str, str]:
    return "/proc/sys/kernel", "cannot create a file"  # with --overwrite: it is not empty


def _empty_sys_folder(tmp: Path) -> tuple[str, str]:
    for folder in ("/sys/kernel/software_nodes", "/sys/kernel/iommu_groups", "/sys/kernel/debug"):
        if os.path.isdir(folder) and not os.listdir(folder):
            return folder, "cannot create a file"
    pytest.skip("no empty folder in /sys here")


def _read_only_folder(tmp: Path) -> tuple[str, str]:
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder: the /proc and /sys members test it")
    (tmp / "ro").mkdir()
    (tmp / "ro").chmod(0o555)
    return str(tmp / "ro" / "study"), "Permission denied"


def _existing_study(tmp: Path) -> tuple[str, str]:
    (tmp / "study").mkdir()
    (tmp / "study" / "scaling.md").write_text("an earlier study")
    return str(tmp / "study"), "is not empty"


UNWRITABLE = [_file, _under_a_file, _deep_under_a_file, _dangling_link, _under_a_dangling_link,
              _fifo, _under_a_device, _under_proc, _proc_folder, _empty_sys_folder,
              _read_only_folder]  # fmt: skip


@pytest.fixture
def never_trains(monkeypatch):
    """The study's training fails the test: every refusal must come before it."""
    monkeypatch.setattr(command, "run_study", lambda *a, **k: pytest.fail("trained"))
    monkeypatch.setattr(ablate, "run_ablations", lambda *a, **k: pytest.fail("trained"))


def _listing(tmp: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*"))


REFUSED = [(case, flags) for case in UNWRITABLE for flags in ([], ["--overwrite"])]
REFUSED.append((_existing_study, []))  # with --overwrite an earlier study is replaced
REFUSED_IDS = [f"{case.__name__[1:]}{'-overwrite' * bool(flags)}" for case, flags in REFUSED]


@pytest.mark.parametrize(("case", "overwrite"), REFUSED, ids=REFUSED_IDS)
def test_an_out_that_cannot_be_written_is_refused_before_training(
    tmp_path, capsys, never_trains, case, overwrite
):
    out, problem = case(tmp_path)
    before = _listing(tmp_path)
    started = time.perf_counter()
    code, _, err = run_main(["scale", "--fast", "--no-progress", "--out", out, *overwrite], capsys)
    assert time.perf_counter() - started < 5
    assert_user_error(code, err, problem, "--out")
    assert _listing(tmp_path) == before  # nothing made, nothing left behind


@pytest.mark.parametrize("case", [_under_a_file, _dangling_link, _under_proc, _empty_sys_folder])
def test_ablate_shares_the_check(tmp_path, capsys, never_trains, case):
    out, problem = case(tmp_path)
    code, _, err = run_main(["ablate", "--fast", "--only", "base", "--out", out], capsys)
    assert_user_error(code, err, problem, "--out")


@pytest.mark.parametrize(
    "out", ["new", "new/a/b", "link-to-folder", "link-to-folder/new", "empty"], ids=str
)
def test_a_writable_out_passes_and_the_check_leaves_nothing(tmp_path, out):
    (tmp_path / "folder").mkdir()
    (tmp_path / "empty").mkdir()
    (tmp_path / "link-to-folder").symlink_to(tmp_path / "folder")
    before = _listing(tmp_path)
    check_output_dir(tmp_path / out)
    assert _listing(tmp_path) == before


def test_the_message_is_one_library_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirectoryError, match=r"^--out \S+/file/study: \S+/file is a file\. Fix"):
        check_output_dir(tmp_path / "file" / "study")
