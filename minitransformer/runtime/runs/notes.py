"""Notes: one line on stderr that tells the user what a run did for them without stopping
(a stale lock taken over, temp files removed, log lines left out, a package missing)."""

from __future__ import annotations

import sys


def note(text: str) -> None:
    """Print ``minitransformer: note: <text>`` on stderr, flushed."""
    print(f"minitransformer: note: {text}", file=sys.stderr, flush=True)
