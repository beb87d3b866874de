"""The attention explorer: a translation's attention, every layer and head, drawn.

- ``collect.attention_data``: a sentence translated by a ``Translator``, and the weights of
  its three kinds of attention (encoder self, decoder self, cross) per layer and head, with
  each head's statistics (``heads``), as JSON-ready data; ``collect.words``: which of its
  tokens make one word (a BPE's pieces ``beg``, ``in``, ``ning``: "beginning").
- ``page.render_page``: that data as one self-contained HTML page (the data embedded as
  JSON, a small plain script in script.py; no network, no server).
- ``grid.plot_grid``: the static figure of every head (PNG).
- ``command``: the ``minitransformer attention`` command's flags and ``explore``, which
  checks the request, then writes the page and the grid.

Floors: beside ``translator`` (the CLI hands it a Translator), above ``heads``, ``decode``
and ``viz``; nothing below imports it.
"""

from .collect import attention_data, check_sentence, heads_of, pieces, words
from .command import DEFAULT_HTML, DEFAULT_PNG, DESCRIPTION, add_arguments, check_request, explore
from .grid import plot_grid
from .page import embed_json, render_page

__all__ = [
    "DEFAULT_HTML",
    "DEFAULT_PNG",
    "DESCRIPTION",
    "add_arguments",
    "attention_data",
    "check_request",
    "check_sentence",
    "embed_json",
    "explore",
    "heads_of",
    "pieces",
    "plot_grid",
    "render_page",
    "words",
]
