"""The lessons as JupyterLab serves them, opened the way lessons/README.md says.

- A real JupyterLab server, started as ``jupyter lab`` from the repository root (its root is the
  repository, not ``lessons/``), answers 200 for every image a lesson's markdown embeds
  (``/files/<path>``, what the browser loads; today none: each figure is drawn by its cell)
  and for every relative link it makes
  (``/api/contents/<path>?content=0``, what Lab asks when a learner clicks it). Paths are
  resolved against the notebook's folder; one that climbs above the server's root is an error
  (that was the bug: started on ``lessons/``, every ``../plots`` and ``../minitransformer`` link
  answered 404).
- Every notebook is committed in the form JupyterLab 4 saves it (nbformat's JSON, the
  kernelspec ipykernel installs, the language_info its kernel reports), so that opening a
  lesson -- which starts the kernel, fills in that metadata and autosaves -- changes no byte.
  Only the Python version in language_info depends on the machine (lessons/README.md).

The server's runtime, config and data folders and IPYTHONDIR are in a temporary folder; it is
stopped by its PID. Skipped only when JupyterLab is not installed (the ``dev`` extra has it).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

pytest.importorskip("jupyterlab")
nbformat = pytest.importorskip("nbformat")
ipykernel_kernelspec = pytest.importorskip("ipykernel.kernelspec")
from ipykernel.ipkernel import IPythonKernel  # noqa: E402
from jupyter_server.services.contents.filemanager import FileContentsManager  # noqa: E402
from lesson_notebooks import IMAGE, references  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "lessons"
NOTEBOOKS = sorted(LESSONS.glob("*.ipynb"))
START_TIMEOUT_S = 60

# [text](target "title") that is not an image, and <a href="target">
_LINK = re.compile(
    r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?[^)]*\)|<a\s[^>]*href=[\"']([^\"']+)[\"']"
)


def resolve(notebook_dir: str, ref: str) -> str | None:
    """``ref``, a relative URL in a markdown cell of a notebook in ``notebook_dir`` (a path from
    the server's root, "" for the root itself), as the path from the root that Lab requests;
    None for a link to an anchor of the notebook itself. ValueError for a path above the root,
    which no server serves ("outside root contents directory")."""
    path = unquote(ref.split("#", 1)[0].split("?", 1)[0])
    if not path:
        return None
    if path.startswith("/"):
        raise ValueError(f"{ref!r}: an absolute path, not relative to the notebook")
    joined = posixpath.normpath(posixpath.join(notebook_dir, path))
    if joined == ".." or joined.startswith("../"):
        raise ValueError(f"{ref!r} from {notebook_dir or 'the root'!r} leaves the server's root")
    return "" if joined == "." else joined


def test_resolve_refuses_paths_above_the_root():
    assert resolve("lessons", "../plots/lessons/01_fd_error.png") == "plots/lessons/01_fd_error.png"
    assert resolve("lessons", "checks/lesson01.py#L3") == "lessons/checks/lesson01.py"
    assert resolve("lessons", "../minitransformer/") == "minitransformer"
    assert resolve("lessons", "#exercises") is None
    with pytest.raises(ValueError, match="leaves the server's root"):
        resolve("lessons", "../../etc/passwd")
    # started as `jupyter lab lessons/`, the notebooks sit at the root: their ../ links escape it
    with pytest.raises(ValueError, match="leaves the server's root"):
        resolve("", "../plots/lessons/01_fd_error.png")


# ------------------------------------------------ the server, as a learner starts it
def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


# the two commands lessons/README.md gives, run from the repository root: `jupyter lab`, and
# `jupyter lab --ServerApp.root_dir=. lessons/01_autograd.ipynb` (opens that lesson)
COMMANDS = {
    "jupyter lab": [],
    "one lesson": ["--ServerApp.root_dir=.", "lessons/01_autograd.ipynb"],
}


@pytest.fixture(scope="module", params=list(COMMANDS))
def lab(request, tmp_path_factory):
    """A README command, started in the repository root on a free port with a random token;
    yields (command, base URL, token, server info, its runtime folder); stopped by its PID."""
    home = tmp_path_factory.mktemp("jupyter")
    env = dict(os.environ)
    for var, sub in [
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_DATA_DIR", "data"),  # kernels are still found in sys.prefix/share/jupyter
        ("IPYTHONDIR", "ipython"),
    ]:
        env[var] = str(home / sub)
    env.pop("JUPYTER_PATH", None)
    token = secrets.token_hex(16)
    cmd = [sys.executable, "-m", "jupyterlab", *COMMANDS[request.param], "--no-browser"]
    cmd += ["--ip=127.0.0.1", "--port=0", f"--IdentityProvider.token={token}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log_path = home / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        # the server writes its port (port 0: the OS picks a free one) to jpserver-<pid>.json
        info_file = home / "runtime" / f"jpserver-{proc.pid}.json"
        deadline = time.monotonic() + START_TIMEOUT_S
        info = None
        while time.monotonic() < deadline and proc.poll() is None:
            if info is None and info_file.is_file():
                try:
                    info = json.loads(info_file.read_text(encoding="utf-8"))
                except json.JSONDecodeError:  # being written
                    pass
            if info is not None and _status(info["url"], token, "api/status") == 200:
                break
            time.sleep(0.2)
        else:
            log_text = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
            pytest.fail(
                f"jupyter lab did not answer within {START_TIMEOUT_S} s "
                f"(exit code {proc.poll()}); its log ends:\n{log_text}"
            )
        yield request.param, info["url"], token, info, home / "runtime"
    finally:
        _stop(proc)


def _status(base: str, token: str, path: str) -> int:
    req = urllib.request.Request(base + path, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def _get_json(base: str, token: str, path: str) -> dict:
    req = urllib.request.Request(base + path, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def test_lab_serves_the_repository_root(lab):
    command, base, token, info, runtime = lab
    assert Path(info["root_dir"]).resolve() == ROOT
    # the kernel every lesson names is the one the server starts, under the same display name
    specs = _get_json(base, token, "api/kernelspecs")["kernelspecs"]
    committed = {
        json.loads(p.read_text("utf-8"))["metadata"]["kernelspec"]["name"] for p in NOTEBOOKS
    }
    assert committed == {"python3"} and "python3" in specs, sorted(specs)
    assert (
        specs["python3"]["spec"]["display_name"]
        == ipykernel_kernelspec.get_kernel_dict()["display_name"]
    )
    # the page a browser opens: Lab, or (given a lesson) that lesson, in the repository's tree
    url = "lab/tree/lessons/01_autograd.ipynb"
    opens = [p.read_text("utf-8") for p in runtime.glob(f"jpserver-file-to-run-{info['pid']}-*")]
    assert len(opens) == (command == "one lesson") and all(url in page for page in opens)
    assert _status(base, token, url) == 200


def test_every_embedded_image_and_link_resolves(lab):
    _, base, token, _, _ = lab
    broken, images, links = [], 0, 0
    for nb in NOTEBOOKS:
        assert _status(base, token, f"api/contents/lessons/{quote(nb.name)}?content=0") == 200
        for ref in references(nb, IMAGE):
            path = resolve("lessons", ref)  # ValueError: a path above the root is a failure
            images += 1
            if (code := _status(base, token, f"files/{quote(path)}")) != 200:
                broken.append(f"{nb.name}: image {ref} -> /files/{path}: {code}")
        for ref in references(nb, _LINK):
            path = resolve("lessons", ref)
            if path is None:
                continue
            links += 1
            if (code := _status(base, token, f"api/contents/{quote(path)}?content=0")) != 200:
                broken.append(f"{nb.name}: link {ref} -> /api/contents/{path}: {code}")
    assert not broken, "\n".join(broken)
    # dozens of links: a pattern that matched nothing would pass vacuously (the lessons embed
    # no images: each figure is the one its cell draws, tests/test_lessons.py)
    assert images == 0 and links >= 80, (images, links)


# ------------------------------------------------ committed as Lab saves them
def _kernelspec() -> dict:
    spec = ipykernel_kernelspec.get_kernel_dict()
    return {
        "display_name": spec["display_name"],
        "language": spec["language"],
        "name": ipykernel_kernelspec.KERNEL_NAME,
    }


def _as_lab_sends(content: dict, language_info: dict) -> dict:
    """The notebook model JupyterLab 4 PUTs back on (auto)save of a notebook it opened and
    whose kernel started: each cell as its toJSON writes it (source one string), the
    kernelspec and the kernel's language_info set in the metadata (_updateSpec,
    _updateLanguage), nbformat_minor raised to at least 4."""
    content = json.loads(json.dumps(content))
    cells = []
    for c in content["cells"]:
        cell = {"id": c["id"], "cell_type": c["cell_type"], "source": c["source"]}
        cell["metadata"] = c["metadata"]
        if c["cell_type"] == "code":
            cell.update(outputs=c["outputs"], execution_count=c["execution_count"])
        elif "attachments" in c:
            cell["attachments"] = c["attachments"]
        cells.append(cell)
    metadata = dict(content["metadata"], kernelspec=_kernelspec(), language_info=language_info)
    return {
        "metadata": metadata,
        "nbformat_minor": max(content["nbformat_minor"], 4),
        "nbformat": content["nbformat"],
        "cells": cells,
    }


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_committed_as_jupyterlab_saves_it(path: Path, tmp_path: Path, monkeypatch):
    """Read and saved again by jupyter_server's own contents manager, with the metadata Lab
    sets when the kernel starts, the notebook is byte for byte what is committed."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))  # the notary's database
    committed = path.read_bytes()
    nb = json.loads(committed)
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5  # cell ids
    assert nb["metadata"]["kernelspec"] == _kernelspec()
    version = nb["metadata"]["language_info"].get("version")
    expected_info = dict(IPythonKernel.language_info, version=version)
    assert nb["metadata"]["language_info"] == expected_info, (
        f"{path.name}: language_info is not what ipykernel reports "
        "(only the Python version may differ; see lessons/README.md)"
    )
    assert isinstance(version, str) and re.fullmatch(r"3\.\d+\.\d+", version), version

    shutil.copy(path, tmp_path / path.name)
    assert _lab_round_trip(tmp_path / path.name, expected_info) == committed, (
        f"{path.name}: JupyterLab would rewrite it on save; write it with nbformat.write "
        "(see lessons/README.md)"
    )
    # and that is nbformat's own form, what `nbformat.write` gives
    again = nbformat.writes(nbformat.reads(committed.decode("utf-8"), as_version=4)) + "\n"
    assert again.encode("utf-8") == committed


def _lab_round_trip(path: Path, language_info: dict) -> bytes:
    """Open ``path`` as Lab does (jupyter_server's contents manager reads it), then save what
    Lab sends back; the bytes written."""
    manager = FileContentsManager(root_dir=str(path.parent))
    model = manager.get(path.name, content=True, type="notebook")
    content = _as_lab_sends(model["content"], language_info)
    manager.save({"type": "notebook", "content": content}, path.name)
    return path.read_bytes()


@pytest.mark.parametrize("old_form", ["old metadata", "keys out of order"])
def test_the_lab_round_trip_sees_a_change(old_form: str, tmp_path: Path, monkeypatch):
    """The round trip is not vacuous: the forms the notebooks had before (kernelspec "Python
    3" and language_info with only its name; cell keys in another order) come back changed."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    nb = json.loads(NOTEBOOKS[0].read_text("utf-8"))
    if old_form == "old metadata":
        nb["metadata"]["kernelspec"]["display_name"] = "Python 3"
        nb["metadata"]["language_info"] = {"name": "python"}
        text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False)
    else:
        nb["cells"] = [dict(reversed(c.items())) for c in nb["cells"]]
        text = json.dumps(nb, indent=1, ensure_ascii=False)
    old = tmp_path / "old.ipynb"
    old.write_text(text + "\n", "utf-8")
    before = old.read_bytes()
    language_info = nb["metadata"]["language_info"]
    if old_form == "old metadata":
        language_info = dict(IPythonKernel.language_info)
    assert _lab_round_trip(old, language_info) != before
