"""Text as it enters and as it is shown: one rule for bytes that are not UTF-8, and a bound
on how much of a text a figure or a page shows.

**The decoding rule** (``readable_text``): text is decoded once, where it enters, and a byte
sequence that is not valid UTF-8 becomes U+FFFD (the replacement character, which every
tokenizer of this library reads as unknown), the same rule as ``bytes.decode("utf-8",
"replace")`` and as ``translate``'s stdin. On the command line, Python hands over such bytes
as lone surrogates (U+DC80..U+DCFF, its "surrogateescape"): they are turned back into their
bytes and decoded by that rule, so ``caf\\xe9`` reads as ``caf\\ufffd`` on the command line
and on stdin alike. Any other lone surrogate (U+D800..U+DFFF, which only Python code can
put in a text) is not a character either: it becomes U+FFFD too. The result is always
encodable as UTF-8, so it can be written to a page, drawn in a figure or printed.

    readable_text("caf\\udce9")        # -> "caf\\ufffd"   (the byte 0xE9 on the command line)
    readable_text("\\udce2\\udc82 x")  # -> "\\ufffd x"    (a truncated 3-byte sequence: one)
    readable_text("a\\ud800b")        # -> "a\\ufffdb"    (a lone surrogate from Python)

**The display bound** (``shorten``): a text cut to a number of characters with "…", so a
100,000-character sentence makes a title of a line, not a figure of a kilometre.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
"""U+FFFD, what an undecodable byte sequence or a lone surrogate becomes."""

_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_OTHER_SURROGATE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def readable_text(text: str) -> str:
    """``text`` with every undecodable byte (a surrogate escape, U+DC80..U+DCFF) decoded by
    the rule of the module doc, and every other lone surrogate replaced by U+FFFD. A text
    without surrogates (the usual case) is returned as it is."""
    if not _ESCAPED_BYTE.search(text) and not _OTHER_SURROGATE.search(text):
        return text
    text = _OTHER_SURROGATE.sub(REPLACEMENT, text)
    raw = text.encode("utf-8", "surrogateescape")  # the escapes back to their bytes
    return raw.decode("utf-8", "replace")


TOKEN_CHARS = 24
"""The most characters of one token a figure or a page shows."""


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, the last one "…" when it was cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"
