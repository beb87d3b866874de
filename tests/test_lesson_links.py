"""The lessons' links look like links in JupyterLab: no link text is a code span.

JupyterLab draws code inside a link (`` [`ops/attention.py`](...) ``) black on grey, with no
link colour, so a learner does not see that it can be clicked (the 2026-12-06 review, F10).
Link texts are plain: ``[minitransformer/ops/attention.py](../minitransformer/ops/attention.py)``.
This holds for every markdown cell of every lesson and for the READMEs under ``lessons/``,
which Lab also renders.
"""

from __future__ import annotations

import re

import pytest
from lesson_notebooks import LESSONS, markdown_cells

# a link (not an image) whose text holds a code span: [ ... `code` ... ](target)
CODE_IN_LINK = re.compile(r"(?<!!)\[([^\[\]]*`[^\[\]]*)\]\(")

PAGES = sorted(LESSONS.glob("*.ipynb")) + sorted(LESSONS.glob("**/README.md"))


def code_in_links(text: str) -> list[str]:
    """The link texts in markdown ``text`` that contain a code span."""
    return [m.group(1) for m in CODE_IN_LINK.finditer(text)]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(LESSONS)) for p in PAGES])
def test_no_link_text_is_code(page):
    if page.suffix == ".ipynb":
        texts = markdown_cells(page)
    else:
        texts = [page.read_text(encoding="utf-8")]
    found = [text for cell in texts for text in code_in_links(cell)]
    assert not found, f"{page.name}: link texts written as code (drop the backticks): {found}"


@pytest.mark.parametrize(
    "markdown",
    [
        "see [`../minitransformer/ops/attention.py`](../minitransformer/ops/attention.py)",
        "the class [`mt.nn.Transformer`](../minitransformer/nn/transformer.py).",
        "in [the `Trainer` class](../minitransformer/train/trainer.py)",
        "[`checks/`](checks/__init__.py) and [solutions/](solutions/README.md)",
    ],
)
def test_a_code_span_in_a_link_is_found(markdown):
    assert code_in_links(markdown)


@pytest.mark.parametrize(
    "markdown",
    [
        "see [minitransformer/ops/attention.py](../minitransformer/ops/attention.py)",
        "`x[0]` and (`y`)",
        "![the `mask` figure](figure.png)",
        "[mt.nn.Transformer](../minitransformer/nn/transformer.py) `(B, T)`",
    ],
)
def test_a_plain_link_or_code_outside_a_link_is_not_flagged(markdown):
    assert not code_in_links(markdown)
