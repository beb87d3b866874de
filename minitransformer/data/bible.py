"""English-Spanish verse pairs from two public-domain SWORD Bible modules.

The Debian packages `sword-text-kjv` (module engKJV2006eb, King James Version) and
`sword-text-sparv` (module spaRV1909eb, Reina-Valera 1909) store their text in SWORD's
"ztext" format. Both use the KJV versification, so verse slot i of one is verse slot i of
the other. This module reads that format in pure Python, strips the OSIS markup, pairs the
slots and writes the pairs as a gzip-compressed TSV (`english<TAB>spanish` per line).

Regenerate the shipped file (no installation needed, only the .deb contents):

    apt-get download sword-text-kjv sword-text-sparv
    dpkg -x sword-text-kjv_*.deb kjv && dpkg -x sword-text-sparv_*.deb rv
    python -m minitransformer.data.bible --kjv kjv --rv rv \\
        --out minitransformer/data/files/bible_en_es.tsv.gz --max-words 20

The ztext layout, per testament (`ot`, then `nt`):
    .bzv  10-byte little-endian records (uint32 block, uint32 offset, uint16 size),
          one per verse slot
    .bzs  12-byte records (uint32 offset, uint32 compressed size, uint32 size), one per block
    .bzz  the blocks, each zlib-compressed; a verse is block[offset:offset+size] (UTF-8)
"""

from __future__ import annotations

import argparse
import gzip
import html
import re
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path

from minitransformer.errors import ConfigError

TESTAMENTS = ("ot", "nt")
KJV_MODULE = "engKJV2006eb"
RV_MODULE = "spaRV1909eb"
_VERSE = struct.Struct("<IIH")
_BLOCK = struct.Struct("<III")

_DROP_WITH_CONTENT = re.compile(r"<(note|title)\b[^>]*(?<!/)>.*?</\1\s*>", re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_USFM = re.compile(r"\\[a-z]+\d*\*?")  # leftover USFM markers such as "\\nd " (27 in the KJV)
_SPACE = re.compile(r"\s+")


def strip_markup(raw: str) -> str:
    """OSIS verse text -> plain text.

    Drops notes and titles with their content, every other tag (keeping its content), ¶
    and stray USFM markers (`\\nd`); unescapes entities and collapses whitespace.
    """
    text = _DROP_WITH_CONTENT.sub(" ", raw)
    text = _USFM.sub("", _TAG.sub("", text)).replace("¶", " ")
    text = html.unescape(text)
    return _SPACE.sub(" ", text).strip()


def read_testament(module_dir: str | Path, testament: str) -> list[str]:
    """Raw (markup-included) text of every verse slot of one testament; "" for empty slots."""
    module_dir = Path(module_dir)
    paths = [module_dir / f"{testament}.{ext}" for ext in ("bzv", "bzs", "bzz")]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"ztext module files not found: {missing}. Pass the module directory that holds "
            "ot.bzv/ot.bzs/ot.bzz (e.g. .../modules/texts/ztext/engKJV2006eb)."
        )
    bzv, bzs, bzz = (p.read_bytes() for p in paths)
    blocks: dict[int, bytes] = {}
    verses: list[str] = []
    for block, offset, size in _VERSE.iter_unpack(bzv[: len(bzv) - len(bzv) % _VERSE.size]):
        if size == 0:
            verses.append("")
            continue
        if block not in blocks:
            start, csize, _ = _BLOCK.unpack_from(bzs, block * _BLOCK.size)
            blocks[block] = zlib.decompress(bzz[start : start + csize])
        verses.append(blocks[block][offset : offset + size].decode("utf-8", errors="replace"))
    return verses


def read_module(module_dir: str | Path) -> list[str]:
    """Plain text of every verse slot, Old then New Testament (markup stripped)."""
    return [strip_markup(v) for t in TESTAMENTS for v in read_testament(module_dir, t)]


def find_module_dir(root: str | Path, module: str) -> Path:
    """Locate `<module>` under `root`: the module dir itself, a SWORD root, or a dpkg -x dir."""
    root = Path(root)
    for candidate in (
        root,
        root / module.lower(),
        root / "modules/texts/ztext" / module.lower(),
        root / "usr/share/sword/modules/texts/ztext" / module.lower(),
        root / "modules/texts/ztext" / module,
        root / "usr/share/sword/modules/texts/ztext" / module,
    ):
        if (candidate / "ot.bzv").is_file():
            return candidate
    raise FileNotFoundError(
        f"no ztext module {module!r} under {root}. Extract the Debian package with "
        "`dpkg -x PACKAGE.deb DIR` and pass DIR (or the module directory itself)."
    )


def pair_verses(english: list[str], spanish: list[str]) -> list[tuple[str, str]]:
    """Pair slot i with slot i, keeping pairs where both sides are non-empty."""
    if len(english) != len(spanish):
        raise ConfigError(
            f"the modules have {len(english)} and {len(spanish)} verse slots; both must use "
            "the same versification (KJV) for slot-by-slot pairing."
        )
    return [(e, s) for e, s in zip(english, spanish, strict=True) if e and s]


def filter_max_words(pairs: Iterable[tuple[str, str]], max_words: int) -> list[tuple[str, str]]:
    """Keep pairs with at most `max_words` whitespace-separated words on both sides."""
    return [(e, s) for e, s in pairs if len(e.split()) <= max_words and len(s.split()) <= max_words]


def write_tsv_gz(pairs: Iterable[tuple[str, str]], path: str | Path) -> None:
    """Write `english<TAB>spanish` lines, gzip-compressed with no name and a fixed mtime in
    the header, so the same pairs always give the same bytes."""
    data = "".join(f"{e}\t{s}\n" for e, s in pairs).encode("utf-8")
    with open(path, "wb") as raw, gzip.GzipFile("", "wb", fileobj=raw, mtime=0) as gz:
        gz.write(data)


def read_tsv_gz(path: str | Path) -> list[tuple[str, str]]:
    """Read pairs written by `write_tsv_gz`."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    bad = [i for i, r in enumerate(rows) if len(r) != 2]
    if bad:
        raise ConfigError(
            f"{path}: line {bad[0] + 1} does not have exactly two tab-separated fields."
        )
    return [(e, s) for e, s in rows]


def extract_pairs(kjv: str | Path, rv: str | Path) -> list[tuple[str, str]]:
    """All non-empty aligned verse pairs (English KJV, Spanish RV1909)."""
    english = read_module(find_module_dir(kjv, KJV_MODULE))
    spanish = read_module(find_module_dir(rv, RV_MODULE))
    return pair_verses(english, spanish)


def main(argv: list[str] | None = None) -> None:
    """Command line: extract, filter by length, write the TSV, print counts."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kjv", required=True, help="dir with the extracted sword-text-kjv package")
    ap.add_argument("--rv", required=True, help="dir with the extracted sword-text-sparv package")
    ap.add_argument("--out", required=True, help="output .tsv.gz path")
    ap.add_argument("--max-words", type=int, default=20, help="max words per side (default 20)")
    args = ap.parse_args(argv)
    pairs = extract_pairs(args.kjv, args.rv)
    kept = filter_max_words(pairs, args.max_words)
    write_tsv_gz(kept, args.out)
    size = Path(args.out).stat().st_size
    print(f"{len(pairs)} aligned pairs, {len(kept)} with <= {args.max_words} words on both sides")
    print(f"wrote {args.out} ({size:,} bytes)")


if __name__ == "__main__":
    main()
