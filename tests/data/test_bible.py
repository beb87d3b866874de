import gzip
import struct
import zlib

import pytest

from minitransformer.data.bible import (
    extract_pairs,
    filter_max_words,
    main,
    read_module,
    read_tsv_gz,
    strip_markup,
)
from minitransformer.data.tasks import load_bible_pairs


def write_fake_ztext(module_dir, testaments):
    """A tiny module in SWORD ztext layout: {"ot": [[verse, ...] per block], "nt": ...}."""
    module_dir.mkdir(parents=True)
    for name, blocks in testaments.items():
        bzv, bzs, bzz = b"", b"", b""
        for b, verses in enumerate(blocks):
            data, offsets = b"", []
            for v in verses:
                raw = v.encode("utf-8")
                offsets.append((len(data), len(raw)))
                data += raw
            packed = zlib.compress(data)
            bzs += struct.pack("<III", len(bzz), len(packed), len(data))
            bzz += packed
            bzv += b"".join(struct.pack("<IIH", b, o, n) for o, n in offsets)
        for ext, content in (("bzv", bzv), ("bzs", bzs), ("bzz", bzz)):
            (module_dir / f"{name}.{ext}").write_bytes(content)


ENGLISH = {
    "ot": [
        ["", '<title type="main">Genesis</title>', "In the <w>beginning</w> God ¶ made it."],
        ["<note>a note</note>And \\nd LORD said &amp; did.", "Only English here."],
    ],
    "nt": [["In the beginning was the Word."]],
}
SPANISH = {
    "ot": [
        ["", "<title>Génesis</title>", "EN el principio Dios lo hizo."],
        ['Y dijo <note n="a">nota <i>x</i></note>Jehová.', ""],
    ],
    "nt": [["En el principio era el Verbo."]],
}


@pytest.fixture
def fake_packages(tmp_path):
    kjv = tmp_path / "kjv/usr/share/sword/modules/texts/ztext/engkjv2006eb"
    rv = tmp_path / "rv/usr/share/sword/modules/texts/ztext/sparv1909eb"
    write_fake_ztext(kjv, ENGLISH)
    write_fake_ztext(rv, SPANISH)
    return tmp_path / "kjv", tmp_path / "rv"


def test_strip_markup():
    raw = '<note n="1">gone <b>too</b></note>Keep <w lemma="x">this</w> ¶ <title>T</title>text.'
    assert strip_markup(raw) == "Keep this text."
    assert strip_markup("A &amp; B <milestone/>") == "A & B"
    assert strip_markup("<chapter n='1'/> ") == ""


def test_ztext_reader_on_fake_module(fake_packages):
    kjv, _ = fake_packages
    verses = read_module(kjv / "usr/share/sword/modules/texts/ztext/engkjv2006eb")
    assert verses == [
        "",
        "",
        "In the beginning God made it.",
        "And LORD said & did.",
        "Only English here.",
        "In the beginning was the Word.",
    ]


def test_pairs_keep_both_non_empty_and_cli_writes_tsv(fake_packages, tmp_path, capsys):
    kjv, rv = fake_packages
    pairs = extract_pairs(kjv, rv)
    assert pairs == [
        ("In the beginning God made it.", "EN el principio Dios lo hizo."),
        ("And LORD said & did.", "Y dijo Jehová."),
        ("In the beginning was the Word.", "En el principio era el Verbo."),
    ]
    assert filter_max_words(pairs, 5) == [("And LORD said & did.", "Y dijo Jehová.")]
    out = tmp_path / "pairs.tsv.gz"
    main(["--kjv", str(kjv), "--rv", str(rv), "--out", str(out), "--max-words", "5"])
    assert "3 aligned pairs, 1 with <= 5 words" in capsys.readouterr().out
    assert read_tsv_gz(out) == [pairs[1]]
    assert gzip.decompress(out.read_bytes()).decode() == "And LORD said & did.\tY dijo Jehová.\n"


def test_missing_module_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="dpkg -x"):
        extract_pairs(tmp_path, tmp_path)


def test_shipped_file():
    pairs = load_bible_pairs()
    assert len(pairs) == 11_741
    assert pairs[0] == (
        "In the beginning God created the heaven and the earth.",
        "EN el principio crió Dios los cielos y la tierra.",
    )
    assert all(len(e.split()) <= 20 and len(s.split()) <= 20 for e, s in pairs)
    assert not any("<" in e + s or "¶" in e + s or "\\" in e + s for e, s in pairs)
