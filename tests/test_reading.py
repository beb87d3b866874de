"""docs/reading.md, the reading path, stays true: every link points to a file, every line
count is the file's (``len(text.splitlines())``), the core of the model is on it, and the
README links it right after "Start here".

When a listed file changes length, the failure names the file and its true count: fix the
page's number (the files are refactored often; the page must follow).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reading.md"

# a table row: | # | [`path`](link) | lines | lesson | what to look for |
ROW = re.compile(r"^\|\s*\d+\s*\|\s*\[`?([^`\]]+)`?\]\(([^)\s]+)\)\s*\|\s*([\d,]+)\s*\|", re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def rows(text: str) -> list[tuple[str, str, int]]:
    """(the name shown, the link, the line count the page gives) for every file row."""
    return [(name, link, int(count.replace(",", ""))) for name, link, count in ROW.findall(text)]


def line_count_problems(text: str, page: Path = PAGE) -> list[str]:
    """One message per row whose line count is not its file's, saying the true count (and
    per row whose file is missing)."""
    problems = []
    for name, link, said in rows(text):
        path = (page.parent / link).resolve()
        if not path.is_file():
            problems.append(f"{name}: {link} is not a file")
            continue
        true = len(path.read_text(encoding="utf-8").splitlines())
        if true != said:
            problems.append(
                f"{name}: docs/reading.md says {said} lines, the file has {true}; "
                f"write {true} in its row"
            )
    return problems


def test_every_link_points_to_an_existing_file():
    links = [link for link in LINK.findall(PAGE.read_text(encoding="utf-8"))
             if not re.match(r"[a-z]+:|#", link)]  # fmt: skip
    assert len(links) >= 20, "the reading path's links were not found"
    missing = [link for link in links if not (PAGE.parent / link.split("#")[0]).exists()]
    assert not missing, f"docs/reading.md links to files that do not exist: {missing}"


def test_every_line_count_is_the_files():
    assert len(rows(PAGE.read_text(encoding="utf-8"))) >= 15, "no file rows found"
    problems = line_count_problems(PAGE.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


def test_the_line_count_check_catches_a_wrong_count():
    """Not vacuous: a count off by one is caught, and the message gives the true number."""
    text = PAGE.read_text(encoding="utf-8")
    name, link, said = next(row for row in rows(text) if row[0].endswith("tensor.py"))
    true = len((PAGE.parent / link).read_text(encoding="utf-8").splitlines())
    wrong = re.sub(
        rf"(\]\({re.escape(link)}\)\s*\|\s*){said}(\s*\|)", rf"\g<1>{true + 1}\g<2>", text
    )
    assert wrong != text
    problems = line_count_problems(wrong)
    assert len(problems) == 1 + len(line_count_problems(text))
    assert f"says {true + 1} lines, the file has {true}" in " ".join(problems)
    assert line_count_problems("| 1 | [`x.py`](../nowhere/x.py) | 3 | l | w |") == [
        "x.py: ../nowhere/x.py is not a file"
    ]


def test_the_core_of_the_model_is_listed():
    listed = {
        (PAGE.parent / link).resolve().relative_to(ROOT).as_posix()
        for _, link, _ in rows(PAGE.read_text(encoding="utf-8"))
    }
    core = {
        "minitransformer/tensor.py",
        "minitransformer/function.py",
        "minitransformer/gradcheck.py",
        "minitransformer/optim/adam.py",
        "minitransformer/train/step.py",
    }
    assert core <= listed, f"docs/reading.md does not list {sorted(core - listed)}"


def test_the_readme_links_it_right_after_start_here():
    head = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:40]
    assert any("](docs/reading.md)" in line for line in head), (
        "README.md must link docs/reading.md within its first 40 lines (after Start here)"
    )
