"""The README works as written, for a new user following it line by line on a fresh clone.

- every ```python block runs as written (in a subprocess, in an empty directory);
- every ``minitransformer ...`` / ``python -m minitransformer ...`` command, in ```bash
  blocks and in inline code, parses with the CLI's own parser (nothing is executed);
- the ```bash blocks, run top to bottom, never start a run in a directory an earlier line
  already filled (``train`` refuses it), and every ``--resume``, ``--checkpoint`` and
  ``--run`` names a run an earlier line made (or a file the repository holds);
- ``pip install`` lines name extras pyproject.toml declares, ``pytest`` lines name test
  files that exist, the install text names every dependency, and every relative link
  points to a file.
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

from minitransformer.bench import options as bench_options
from minitransformer.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    """The fenced code blocks of the README in this language, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.M | re.S)


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
        if words[2:3] == ["minitransformer.bench"]:
            return "bench", words[3:]
    return None


def parse(kind: str, args: list[str]):
    """Parse ``args`` with the CLI's parser (or ``python -m minitransformer.bench``'s); a
    failure raises AssertionError with argparse's message. A ``--help`` line parses when
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


def bash_commands() -> list[list[str]]:
    return [words for block in blocks("bash") for words in commands(block)]


def inline_commands() -> list[list[str]]:
    """Inline code spans that are a minitransformer command line."""
    spans = re.findall(r"(?<!`)`([^`\n]+)`(?!`)", README)
    return [
        shlex.split(s)
        for s in spans
        if re.match(r"(minitransformer|python3? -m minitransformer(\.bench)?) ", s)
    ]


# ------------------------------------------------------------------------------ python


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_every_python_block_runs_as_written(index, tmp_path):
    code = blocks("python")[index]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"README python block {index + 1} fails:\n{code}\n{done.stderr}"


def test_there_are_python_blocks():
    assert len(blocks("python")) >= 1


# ----------------------------------------------------------------------------- commands


def test_every_minitransformer_command_parses():
    found = [c for c in [*bash_commands(), *inline_commands()] if minitransformer_args(c)]
    assert len(found) >= 10, "the README's commands were not found"
    for words in found:
        kind, args = minitransformer_args(words)
        parse(kind, args)


def run_order_problems(lines: list[list[str]]) -> list[str]:
    """What a new user meets running these command lines top to bottom: ``train`` (and
    ``ablate``) refuse an ``--out`` an earlier line filled; ``--resume``, ``--checkpoint``
    and ``--run`` need a run made earlier (or a path the repository ships)."""
    made: dict[str, str] = {}  # run directory -> the line that made it
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


def test_commands_are_split_and_a_bad_flag_is_caught():
    assert commands("A=1 pip install -e . && minitransformer train copy  # note") == [
        ["pip", "install", "-e", "."], ["minitransformer", "train", "copy"]
    ]  # fmt: skip
    mpi = shlex.split("mpiexec -hosts a,b -n 8 minitransformer train --data-parallel")
    assert minitransformer_args(mpi) == ("cli", ["train", "--data-parallel"])
    assert minitransformer_args(["python", "-m", "minitransformer.bench", "--seconds", "5"]) == (
        "bench", ["--seconds", "5"]
    )  # fmt: skip
    with pytest.raises(AssertionError, match="--bogus"):
        parse("cli", ["train", "copy", "--bogus"])
    with pytest.raises(AssertionError, match="seconds"):
        parse("bench", ["--seconds", "-1"])
    assert parse("cli", ["train", "--help"]) is None
    with pytest.raises(AssertionError, match="steps"):
        parse("cli", ["train", "--steps", "-1", "--help"])  # an error before the help


def test_pip_lines_name_declared_extras_and_pytest_lines_existing_tests():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    pip_lines = pytest_lines = 0
    for words in bash_commands():
        if words[:2] == ["pip", "install"]:
            pip_lines += 1
            for word in words[2:]:
                for named in re.findall(r"\[([^\]]+)\]", word):
                    assert set(named.split(",")) <= extras, f"{shlex.join(words)}: {extras}"
        if words[0] == "pytest":
            pytest_lines += 1
            for word in words[1:]:
                if not word.startswith("-") and "::" not in word and re.match(r"tests\b", word):
                    assert (ROOT / word).exists(), f"{shlex.join(words)}: no {word}"
    assert pip_lines and pytest_lines


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


def test_every_relative_link_points_to_a_file():
    links = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", README)
    relative = [link for link in links if not re.match(r"[a-z]+:|#", link)]
    assert relative, "no relative links found"
    missing = [link for link in relative if not (ROOT / link.split("#")[0]).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


# ------------------------------------------------------------------- facts the code holds


def test_environment_variables_and_their_defaults_are_the_codes():
    """Every ``MINITRANSFORMER_*`` variable the README names is read by the package, and
    the collective timeout's default and range are the code's."""
    from minitransformer.checkpoint import MAX_HEADER_BYTES
    from minitransformer.distributed import waiting

    source = "\n".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "minitransformer").rglob("*.py")
    )
    named = set(re.findall(r"MINITRANSFORMER_[A-Z_]+", README))
    assert named and all(name in source for name in named), named
    text = " ".join(README.split())  # line breaks do not matter
    timeout = f"`{waiting.TIMEOUT_ENV}` seconds (default {waiting.DEFAULT_TIMEOUT_S:.0f}, "
    assert f"{timeout}from 1 to {waiting.MAX_TIMEOUT_S:.0f};" in text
    runs_page = " ".join((ROOT / "docs" / "runs.md").read_text(encoding="utf-8").split())
    assert f"bounded ({MAX_HEADER_BYTES // 2**20} MiB)" in runs_page
