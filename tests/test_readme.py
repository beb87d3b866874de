"""The README, and the pages under docs/ it sends readers to, work as written, for a new user
following them line by line on a fresh clone.

- every ```python block runs as written (in a subprocess, in an empty directory);
- every ``minitransformer ...`` / ``python -m minitransformer ...`` command, in ```bash
  blocks and in inline code, parses with the CLI's own parser (nothing is executed);
- the ```bash blocks, run top to bottom, never start a run in a directory an earlier line
  already filled (``train`` refuses it), and every ``--resume``, ``--checkpoint`` and
  ``--run`` names a run an earlier line made (or a file the repository holds); a docs page
  is read after the README, so the README's runs count as made;
- ``pip install`` lines name extras pyproject.toml declares, ``pytest`` lines name test
  files that exist, the install text names every dependency, and every relative link
  points to a file.

Each check runs on README.md and on every ``docs/*.md`` page that has what it checks.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from minitransformer.cli import build_parser
from minitransformer.tools.bench import options as bench_options

BENCH_MODULE = "minitransformer.tools.bench"

ROOT = Path(__file__).resolve().parents[1]
README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
PAGES = [README_PATH, *sorted((ROOT / "docs").glob("*.md"))]


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def read(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def blocks(language: str, text: str = README) -> list[str]:
    """The fenced code blocks of the README (or of ``text``) in this language, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.M | re.S)


def commands(text: str) -> list[list[str]]:
    """The simple commands of shell text: lines split into words (comments dropped), then
    at ``&&``, ``||``, ``;`` and ``|``; leading ``VAR=value`` words dropped."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        words, current = shlex.split(line, comments=True), []
        for word in [*words, ";"]:
            if word in ("&&", "||", ";", "|"):
                while current and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", current[0]):
                    current.pop(0)
                if current:
                    out.append(current)
                current = []
            else:
                current.append(word)
    return out


def minitransformer_args(words: list[str]) -> tuple[str, list[str]] | None:
    """("cli" or "bench", its arguments) when ``words`` runs minitransformer, else None.
    ``mpiexec`` and its options are skipped: what it starts is what is checked."""
    if words[0] in ("mpiexec", "mpirun"):
        for i, word in enumerate(words):
            if word == "minitransformer" or word.startswith("python"):
                words = words[i:]
                break
        else:
            return None
    if words[0] == "minitransformer":
        return "cli", words[1:]
    if words[0].startswith("python") and words[1:2] == ["-m"]:
        if words[2:3] == ["minitransformer"]:
            return "cli", words[3:]
        if words[2] == BENCH_MODULE:
            return "bench", words[3:]
    return None


def parse(kind: str, args: list[str]):
    """Parse ``args`` with the CLI's parser (or ``python -m minitransformer.tools.bench``'s);
    a failure raises AssertionError with argparse's message. A ``--help`` line parses when
    the help prints (exit status 0); it returns None, as it starts nothing."""
    if kind == "cli":
        parser = build_parser()
    else:
        parser = bench_options.add_arguments(bench_options.argparse.ArgumentParser())
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return parser.parse_args(args)
    except SystemExit as done:
        if done.code in (0, None) and ("--help" in args or "-h" in args):
            return None
        raise AssertionError(f"{shlex.join(args)!r} does not parse: {err.getvalue()}") from None


def bash_commands(text: str = README) -> list[list[str]]:
    return [words for block in blocks("bash", text) for words in commands(block)]


def inline_commands(text: str = README) -> list[list[str]]:
    """Inline code spans that are a minitransformer command line."""
    spans = re.findall(r"(?<!`)`([^`\n]+)`(?!`)", text)
    return [
        shlex.split(s)
        for s in spans
        if re.match(r"(minitransformer|python3? -m minitransformer(\.tools)?(\.bench)?) ", s)
    ]


def found_commands(text: str) -> list[list[str]]:
    return [c for c in [*bash_commands(text), *inline_commands(text)] if minitransformer_args(c)]


def pages_with(has) -> list:
    """The pages for which ``has(text)`` is true, as pytest parameters named by path."""
    return [pytest.param(p, id=page_id(p)) for p in PAGES if has(read(p))]


# ------------------------------------------------------------------------------ python

PYTHON_BLOCKS = [
    pytest.param(page, index, id=f"{page_id(page)}-{index + 1}")
    for page in PAGES
    for index in range(len(blocks("python", read(page))))
]


@pytest.mark.parametrize(("page", "index"), PYTHON_BLOCKS)
def test_every_python_block_runs_as_written(page, index, tmp_path):
    code = blocks("python", read(page))[index]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"{page_id(page)} python block {index + 1} fails:\n{code}\n{done.stderr}"
    )


def test_there_are_python_blocks():
    assert len(blocks("python")) >= 1


# ----------------------------------------------------------------------------- commands


def test_the_readme_has_its_commands():
    assert len(found_commands(README)) >= 10, "the README's commands were not found"


@pytest.mark.parametrize("page", pages_with(found_commands))
def test_every_minitransformer_command_parses(page):
    for words in found_commands(read(page)):
        kind, args = minitransformer_args(words)
        parse(kind, args)


def run_order_problems(lines: list[list[str]], made: dict[str, str] | None = None) -> list[str]:
    """What a new user meets running these command lines top to bottom: ``train`` (and
    ``ablate``) refuse an ``--out`` an earlier line filled; ``--resume``, ``--checkpoint``
    and ``--run`` need a run made earlier (or a path the repository ships). ``made`` (run
    directory -> the line that made it) holds the runs made before these lines, and is
    filled with theirs."""
    made = {} if made is None else made
    problems = []
    for words in lines:
        found = minitransformer_args(words)
        if found is None or found[0] != "cli":
            continue
        args = parse("cli", found[1])
        if args is None:  # --help: starts nothing
            continue
        line = shlex.join(words)
        if args.command in ("train", "ablate") and not getattr(args, "resume", None):
            out = args.out or f"runs/{args.task or 'copy'}"
            if out in made and not args.overwrite:
                problems.append(f"{line!r} is refused: {out} holds the run of {made[out]!r}")
            made[out] = line
        for needed in (getattr(args, "resume", None), getattr(args, "checkpoint", None),
                       getattr(args, "run", None)):  # fmt: skip
            if needed is None:
                continue
            run = str(Path(needed).parent if Path(needed).suffix else Path(needed))
            if run not in made and not (ROOT / needed).exists():
                problems.append(f"{line!r} needs {needed}, which no earlier line makes")
    return problems


def test_the_bash_blocks_run_top_to_bottom_never_reuse_a_run_directory():
    assert run_order_problems(bash_commands()) == []


@pytest.mark.parametrize("page", [p for p in pages_with(bash_commands) if p.id != "README.md"])
def test_a_pages_bash_blocks_run_after_the_readmes(page):
    """A docs page is read after the README: its lines may use the README's runs, and must
    not start a run in a directory the README's lines (or its own earlier lines) filled."""
    made: dict[str, str] = {}
    run_order_problems(bash_commands(), made)
    assert run_order_problems(bash_commands(read(page)), made) == []


def test_the_run_order_check_finds_what_a_new_user_would_meet():
    """The first hour's case: the data-parallel example right after ``train copy``."""
    lines = [
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && "
        "minitransformer train copy",
        "mpiexec -n 2 minitransformer train copy --data-parallel",
        "mpiexec -n 2 minitransformer train copy --data-parallel --out runs/copy-2ranks",
        "minitransformer train copy --overwrite",
        "minitransformer evaluate --checkpoint runs/copy-2ranks",
        "minitransformer translate --checkpoint runs/translate hello",
        "minitransformer train --resume runs/nowhere",
    ]
    problems = run_order_problems([w for line in lines for w in commands(line)])
    assert len(problems) == 3
    assert "'mpiexec -n 2 minitransformer train copy --data-parallel' is refused" in problems[0]
    assert "needs runs/translate" in problems[1] and "needs runs/nowhere" in problems[2]
    # a page read after those lines: their runs count as made, their directories as filled
    made: dict[str, str] = {}
    run_order_problems([w for line in lines for w in commands(line)], made)
    later = commands("minitransformer evaluate --checkpoint runs/copy-2ranks\n"
                     "minitransformer train copy --out runs/copy-2ranks")  # fmt: skip
    assert run_order_problems(later, made) == [
        "'minitransformer train copy --out runs/copy-2ranks' is refused: runs/copy-2ranks "
        "holds the run of 'mpiexec -n 2 minitransformer train copy --data-parallel --out "
        "runs/copy-2ranks'"
    ]


def test_commands_are_split_and_a_bad_flag_is_caught():
    assert commands("A=1 pip install -e . && minitransformer train copy  # note") == [
        ["pip", "install", "-e", "."], ["minitransformer", "train", "copy"]
    ]  # fmt: skip
    mpi = shlex.split("mpiexec -hosts a,b -n 8 minitransformer train --data-parallel")
    assert minitransformer_args(mpi) == ("cli", ["train", "--data-parallel"])
    module = BENCH_MODULE
    assert minitransformer_args(["python", "-m", module, "--seconds", "5"]) == (
        "bench", ["--seconds", "5"]
    )  # fmt: skip
    assert inline_commands(f"`python -m {module} --seconds 5`") == [
        ["python", "-m", module, "--seconds", "5"]
    ]
    with pytest.raises(AssertionError, match="--bogus"):
        parse("cli", ["train", "copy", "--bogus"])
    with pytest.raises(AssertionError, match="seconds"):
        parse("bench", ["--seconds", "-1"])
    assert parse("cli", ["train", "--help"]) is None
    with pytest.raises(AssertionError, match="steps"):
        parse("cli", ["train", "--steps", "-1", "--help"])  # an error before the help


def pip_and_pytest_lines(text: str) -> list[list[str]]:
    return [w for w in bash_commands(text) if w[:2] == ["pip", "install"] or w[0] == "pytest"]


def pip_and_pytest_problems(text: str) -> list[str]:
    """Extras pyproject.toml does not declare, and test paths that do not exist."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    problems = []
    for words in pip_and_pytest_lines(text):
        if words[:2] == ["pip", "install"]:
            for word in words[2:]:
                for named in re.findall(r"\[([^\]]+)\]", word):
                    if not set(named.split(",")) <= extras:
                        problems.append(f"{shlex.join(words)}: [{named}] is not in {extras}")
        else:
            for word in words[1:]:
                if not word.startswith("-") and "::" not in word and re.match(r"tests\b", word):
                    if not (ROOT / word).exists():
                        problems.append(f"{shlex.join(words)}: no {word}")
    return problems


def test_the_readme_has_pip_and_pytest_lines():
    lines = pip_and_pytest_lines(README)
    assert any(w[0] == "pip" for w in lines) and any(w[0] == "pytest" for w in lines)


@pytest.mark.parametrize("page", pages_with(pip_and_pytest_lines))
def test_pip_lines_name_declared_extras_and_pytest_lines_existing_tests(page):
    assert pip_and_pytest_problems(read(page)) == []


def test_the_pip_and_pytest_check_catches_a_bad_line():
    text = '```bash\npip install -e ".[dev,nosuch]"\npytest tests/no_such_test.py\n```\n'
    problems = pip_and_pytest_problems(text)
    assert len(problems) == 2 and "[dev,nosuch]" in problems[0]
    assert "no tests/no_such_test.py" in problems[1]


def test_the_install_text_names_every_dependency_and_extra():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    text = README.lower()
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
        assert name in text, f"README does not say that the install brings {name}"
    for extra in project["optional-dependencies"]:
        assert f"[{extra}]" in text, f"README does not name the [{extra}] extra"


# -------------------------------------------------------------------------------- links


def relative_links(text: str) -> list[str]:
    links = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text)
    return [link for link in links if not re.match(r"[a-z]+:|#", link)]


def test_the_readme_has_relative_links():
    assert relative_links(README), "no relative links found"


@pytest.mark.parametrize("page", pages_with(relative_links))
def test_every_relative_link_points_to_a_file(page):
    """Links resolve from the page's own folder (docs/ pages link ``../minitransformer/``)."""
    missing = [link for link in relative_links(read(page))
               if not (page.parent / link.split("#")[0]).exists()]  # fmt: skip
    assert not missing, f"{page_id(page)} links to files that do not exist: {missing}"


def test_the_readme_links_every_page_it_moved_text_to():
    for name in ("speed", "gpu", "data-parallel", "reading", "ablations", "language-model"):
        assert f"](docs/{name}.md)" in README, f"README does not link docs/{name}.md"


# ------------------------------------------------------------------- facts the code holds


def test_environment_variables_and_their_defaults_are_the_codes():
    """Every ``MINITRANSFORMER_*`` variable the README and the docs pages name is read by
    the package, and the collective timeout's default and range are the code's."""
    from minitransformer.runtime.checkpoint import MAX_HEADER_BYTES
    from minitransformer.runtime.distributed import waiting

    source = "\n".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "minitransformer").rglob("*.py")
    )
    pages = "\n".join(read(p) for p in PAGES)
    named = set(re.findall(r"MINITRANSFORMER_[A-Z_]+", pages))
    assert named and all(name in source for name in named), named
    text = " ".join(pages.split())  # line breaks do not matter
    timeout = f"`{waiting.TIMEOUT_ENV}` seconds (default {waiting.DEFAULT_TIMEOUT_S:.0f}, "
    assert f"{timeout}from 1 to {waiting.MAX_TIMEOUT_S:.0f};" in text
    runs_page = " ".join((ROOT / "docs" / "runs.md").read_text(encoding="utf-8").split())
    assert f"bounded ({MAX_HEADER_BYTES // 2**20} MiB)" in runs_page
