"""Every count of the lessons written in the project's pages agrees with ``lessons/``.

The pages (README.md, lessons/README.md and the other READMEs under lessons/, docs/*.md,
the package docstring, the checks' docstring) say how many lessons there are in a few ways:
"all 19 together", "19 lessons", "lessons 01-19", "every lesson (01-19)",
"01_autograd.ipynb ... 19_what_the_heads_do.ipynb", and the README's table of lessons. When a
lesson is added, each of them must follow (the 2026-12-06 review found "all 18" and
"... 18_the_curve_kept_bending.ipynb" with 19 lessons in the tree). ``stale_counts`` finds
them; the tests run it on the pages and, to show it finds each form, on stale sentences.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import minitransformer

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "lessons"
NOTEBOOKS = sorted(p.stem for p in LESSONS.glob("[0-9][0-9]_*.ipynb"))

_WORDS = "two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
_WORDS += "sixteen seventeen eighteen nineteen twenty"
WORDS = {word: n for n, word in enumerate(_WORDS.split(), start=2)}
NUMBER = r"(\d+|" + "|".join(WORDS) + r")"
TO = r"\s*(?:-|–|—|\.\.\.?|…|to|through)\s*"

# each form of a count; group 1 is the number of lessons it claims
COUNTS = [
    # "all 22 together", "all 22 lessons", in a sentence about lessons (checked below)
    re.compile(r"\ball " + NUMBER + r"\b(?! ?(?:%|s\b|min|seconds|steps|runs))", re.I),
    # "22 lessons", "the 22 notebooks", "22 lesson notebooks"
    re.compile(r"\b" + NUMBER + r" (?:lesson )?(?:lessons|notebooks)\b", re.I),
]
# each form of a range of lessons; groups 1 and 2 are the first and the last lesson's numbers
RANGES = [
    # "lessons 00-21", "every lesson (00-21)", "lessons 0 to 21"
    re.compile(r"\blessons?\s*\(?(0?[01])" + TO + r"(\d{1,2})\b", re.I),
    # "(00-21)" after other words
    re.compile(r"\((0[01])" + TO + r"(\d\d)\)"),
]
LAST_NAME = re.compile(r"\b0[01]_\w+\.ipynb" + TO + r"(?:lessons/)?(\d\d_\w+)\.ipynb")
NAMED = re.compile(r"\b(\d\d_[a-z0-9_]+)\.ipynb")


def _number(text: str) -> int:
    return int(text) if text.isdigit() else WORDS[text.lower()]


def _sentence(text: str, at: int) -> str:
    """The sentence (or table cell, or line pair) around position ``at`` of ``text``."""
    start = max(text.rfind(". ", 0, at), text.rfind("\n\n", 0, at), text.rfind("|", 0, at))
    ends = [i for i in (text.find(". ", at), text.find("\n\n", at), text.find("|", at)) if i >= 0]
    return text[start + 1 : min(ends, default=len(text))]


def stale_counts(text: str, lessons: list[str] = NOTEBOOKS) -> list[str]:
    """The lesson counts and last-lesson names in ``text`` that disagree with ``lessons`` (the
    notebooks' stems, in order), and the lessons it names that do not exist, each quoted."""
    wrong = []
    for pattern in COUNTS:
        for m in pattern.finditer(text):
            if "lesson" in _sentence(text, m.start()).lower():
                if _number(m.group(1)) != len(lessons):
                    wrong.append(f"{m.group(0)!r} (there are {len(lessons)} lessons)")
    first, last = int(lessons[0][:2]), int(lessons[-1][:2])
    for pattern in RANGES:
        for m in pattern.finditer(text):
            if "lesson" in _sentence(text, m.start()).lower():
                if (int(m.group(1)), int(m.group(2))) != (first, last):
                    wrong.append(f"{m.group(0)!r} (the lessons are {first:02d} to {last:02d})")
    for m in LAST_NAME.finditer(text):
        if m.group(1) != lessons[-1]:
            wrong.append(f"{m.group(0)!r} (the last lesson is {lessons[-1]}.ipynb)")
    for m in NAMED.finditer(text):
        if m.group(1) not in lessons:
            wrong.append(f"{m.group(0)!r} (no such lesson)")
    return wrong


def _pages() -> dict[str, str]:
    """Each page that may count the lessons, by its name, with its text."""
    paths = [ROOT / "README.md", *sorted(LESSONS.glob("**/README.md"))]
    paths += sorted(ROOT.glob("docs/*.md"))
    pages = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in paths}
    pages["help(minitransformer)"] = minitransformer.__doc__ or ""
    checks = (LESSONS / "checks" / "__init__.py").read_text(encoding="utf-8")
    pages["lessons/checks/__init__.py"] = checks
    return pages


def test_there_are_lessons_numbered_from_00_without_gaps():
    """Lesson 00 (tokens) comes first: text becomes ids before anything else happens."""
    assert NOTEBOOKS and [name[:2] for name in NOTEBOOKS] == [
        f"{n:02d}" for n in range(len(NOTEBOOKS))
    ]


@pytest.mark.parametrize("page", list(_pages()))
def test_every_lesson_count_agrees_with_the_lessons_folder(page):
    wrong = stale_counts(_pages()[page])
    assert not wrong, f"{page} counts the lessons wrong: {'; '.join(wrong)}"


def test_the_pages_do_count_the_lessons():
    """The forms above are in use (else the test would pass on nothing): the README, the
    package docstring and the checks count the lessons, each in its own way."""
    pages = _pages()
    found = {
        name
        for name, text in pages.items()
        for pattern in [*COUNTS, *RANGES, LAST_NAME]
        for m in pattern.finditer(text)
        if "lesson" in _sentence(text, m.start()).lower() or pattern is LAST_NAME
    }
    assert {"README.md", "help(minitransformer)", "lessons/checks/__init__.py"} <= found


def test_the_readme_table_lists_every_lesson_in_order():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \[(\d\d) [^\]]+\]\(lessons/(\1_\w+)\.ipynb\) \|", text, re.M)
    assert [stem for _, stem in rows] == NOTEBOOKS


STALE = [
    "On an idle CPU the lessons take about 16 minutes, all 18 together.",
    "The 18 lessons build the model.",
    "There are eighteen lessons.",
    "every lesson (01-18), one function per exercise",
    "the lessons 01–20 in order",
    "lessons/00_tokens.ipynb ... 18_the_curve_kept_bending.ipynb build it up",
    "lessons/01_autograd.ipynb ... 18_the_curve_kept_bending.ipynb build it up",
    "open 20_the_next_one.ipynb in the lessons",
]
RIGHT = [
    "On an idle CPU the lessons take about 17 minutes, all 19 together.",
    "The 19 lessons build the model.",
    "There are nineteen lessons.",
    "every lesson (01-19), one function per exercise",
    "lessons/01_autograd.ipynb ... 19_what_the_heads_do.ipynb build it up",
    # not counts of the lessons
    "lessons 12, 13, 17 and 18 take 2 to 4½ minutes; the first 18 took 16 minutes",
    "lesson 12 takes 1 to 4 minutes, lesson 09 1-3",
    "all 18 runs of the study agree, as lesson 13 shows",
    "Lessons 01, 02, 04-06 watch the library",
]


# 19 lessons, the first and the last two named as in the tree of 2026-12-06
NINETEEN = ["01_autograd", *(f"{n:02d}_lesson" for n in range(2, 18))]
NINETEEN += ["18_the_curve_kept_bending", "19_what_the_heads_do"]


@pytest.mark.parametrize("text", STALE)
def test_a_stale_count_is_found(text):
    assert stale_counts(text, NINETEEN), text


@pytest.mark.parametrize("text", RIGHT)
def test_a_right_count_or_another_number_is_not_flagged(text):
    assert not stale_counts(text, NINETEEN), text


# 22 lessons from 00, as in the tree since lesson 00 (tokens) was added
FROM_00 = ["00_tokens_from_scratch", "01_autograd", *(f"{n:02d}_lesson" for n in range(2, 21))]
FROM_00 += ["21_block_since_2017"]


@pytest.mark.parametrize(
    ("text", "stale"),
    [
        ("every lesson (01-21), one function per exercise", True),  # lesson 00 left out
        ("the lessons 01 to 21 in order", True),
        ("all 21 lessons together", True),
        ("lessons/01_autograd.ipynb ... 21_block_since_2017.ipynb", False),  # a name, not a count
        ("every lesson (00-21), one function per exercise", False),
        ("lessons 00-21, all 22 together", False),
        ("lessons/00_tokens_from_scratch.ipynb ... 21_block_since_2017.ipynb", False),
        ("lessons/00_tokens_from_scratch.ipynb ... 20_below_n_squared.ipynb", True),
    ],
)
def test_counts_of_lessons_from_00(text, stale):
    assert bool(stale_counts(text, FROM_00)) == stale, text
