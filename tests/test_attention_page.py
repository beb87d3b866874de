"""``minitransformer attention``: the explorer's data (every kind, layer and head, of the
right sizes), its self-contained page (the JSON round-trips, no URL, no token can close the
script tag), the command (its default files under runs/) and a user's mistakes with it, and
the page in a real headless browser (Debian's ``chromium``): no console message, every head
drawn, clicks and hovers, a word's pieces grouped, a viridis colour key, the layout at 500,
800 and 1,400 px, a screenshot not blank. The grouping rule: test_attention_words.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import warnings
from html import unescape
from pathlib import Path

import numpy as np
import pytest
from test_cli import assert_user_error, run_main

from minitransformer.data.batching import pad
from minitransformer.decode import greedy_decode
from minitransformer.runtime.translator import Translator
from minitransformer.tools import explorer, heads

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "lessons" / "checkpoints" / "en-es-tiny"
SENTENCE = "In the beginning God created the heaven and the earth."
N, H = 2, 4  # en-es-tiny: the tiny preset's layers and heads
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)",
)
DATA_TAG = re.compile(r'<script type="application/json" id="data">(.*?)</script>', re.S)


@pytest.fixture(scope="module")
def translator():
    return Translator.from_checkpoint(CHECKPOINT)


@pytest.fixture(scope="module")
def data(translator):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "In", "God": the tiny model read lowercased verses
        return explorer.attention_data(translator, SENTENCE, "en-es-tiny")


@pytest.fixture(scope="module")
def page(data, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("page") / "attention.html"
    path.write_text(explorer.render_page(data), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------- data


def test_every_kind_layer_and_head_has_its_sizes(data, translator):
    S, T = len(data["source"]), len(data["target"])
    assert data["target"][0] == "<bos>" and S == len(translator.tokenize(SENTENCE))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert data["translation"] == translator.translate(data["sentence"])
    shapes = {"encoder self": (S, S), "decoder self": (T, T), "cross": (T, S)}
    assert [k["name"] for k in data["kinds"]] == list(heads.KINDS)
    for kind in data["kinds"]:
        w = np.asarray(kind["layers"])
        assert w.shape == (N, H, *shapes[kind["name"]]), kind["name"]
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-3)
        assert explorer.heads_of(data, kind["name"]) == N * H
    assert len(data["stats"]) == 3 * N * H
    assert set(data["stats"][0]) == {"kind", "layer", "head", *heads.STATS}


def test_the_weights_are_the_models(data, translator):
    src = pad([translator.tokenize(SENTENCE)])
    ids = [translator.model.cfg.bos_id] + greedy_decode(translator.model, src)[0]
    maps = heads.attention_maps(translator.model, src, pad([ids]))
    cross = np.asarray(data["kinds"][2]["layers"][1])
    np.testing.assert_allclose(cross, maps["cross", 1][0], atol=1e-4)


def test_a_blank_sentence_is_refused(translator):
    with pytest.raises(ValueError, match="the sentence is empty"):
        explorer.attention_data(translator, "  \n")


# --------------------------------------------------------------------------------- page


def test_the_page_embeds_the_data_as_json_and_names_no_url(data, page):
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert json.loads(DATA_TAG.search(text).group(1)) == data
    assert "http://" not in text and "https://" not in text
    assert "<link" not in text and " src=" not in text  # nothing fetched
    assert text.count("<script") == 2 and text.count("</script>") == 2


def test_no_token_can_close_the_script_tag(translator):
    sentence = "the </script><script>alert(1)</script> <!-- & earth"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = explorer.attention_data(translator, sentence)
    text = explorer.render_page(data)
    assert text.count("</script") == 2 and "<!--" not in text
    assert json.loads(DATA_TAG.search(text).group(1))["sentence"] == sentence
    embedded = explorer.embed_json({"a": "</script> <!-- & >"})
    assert not set("<>&") & set(embedded)
    assert json.loads(embedded) == {"a": "</script> <!-- & >"}


# ------------------------------------------------------------------------------ command


def test_the_command_writes_the_page_and_the_grid(tmp_path, capsys):
    html, png = tmp_path / "attention.html", tmp_path / "grid.png"
    argv = ["attention", "--checkpoint", str(CHECKPOINT), SENTENCE, "--html", str(html),
            "--png", str(png)]  # fmt: skip
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    assert out == f"wrote {html}, {png}\n"
    assert "error" not in err and "<unk>" in err  # the unknown words, one warning line
    assert DATA_TAG.search(html.read_text(encoding="utf-8"))
    import matplotlib.image

    image = matplotlib.image.imread(png)
    assert image.shape[0] > 1000 and image.shape[1] > 1000  # 6 rows x 4 heads of panels
    assert distinct_colours(image) > 100


def distinct_colours(image: np.ndarray) -> int:
    """How many colours an image has (every third pixel each way: enough, and quick)."""
    return len(np.unique(image[::3, ::3].reshape(-1, image.shape[-1]), axis=0))


def test_an_existing_output_is_refused_unless_overwrite(tmp_path, capsys):
    mine = tmp_path / "mine.html"
    mine.write_text("my own file")
    argv = ["attention", "--checkpoint", str(CHECKPOINT), "the earth", "--html", str(mine)]
    code, out, err = run_main(argv, capsys)
    assert_user_error(code, err, f"--html {mine} already exists", "--overwrite")
    assert mine.read_text() == "my own file" and out == ""
    code, out, err = run_main([*argv, "--overwrite"], capsys)
    assert code == 0, err
    assert "application/json" in mine.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> Path:
    """A 2-step language model (train lm, characters): not a translation checkpoint."""
    from minitransformer.cli import main

    out = tmp_path_factory.mktemp("lm") / "lm"
    flags = ["--model", "d_model=16", "--model", "N=1", "--model", "d_ff=32", "--model", "h=2",
             "--knob", "n_train=50", "--knob", "n_valid=5", "--knob", "n_test=5",
             "--knob", "tokenizer=char", "--batch-size", "4", "--warmup", "1", "--no-progress",
             "--no-plots", "--eval-samples", "5", "--final-eval-samples", "5"]  # fmt: skip
    assert main(["train", "lm", "--steps", "2", "--out", str(out), *flags]) == 0
    return out


@pytest.mark.parametrize(
    ("args", "patterns"),
    [
        (["--checkpoint", "no/such/run", "x", "--html", "a.html"],
         ["--checkpoint no/such/run: no such run directory", "Fix:"]),
        (["--checkpoint", str(CHECKPOINT), "   ", "--html", "a.html"],
         ["the sentence is empty", "Fix: give a sentence"]),
        (["--checkpoint", str(CHECKPOINT), "x", "--html", "a.png"],
         ["--html a.png: the file needs the suffix .html", "Fix: --html a.html"]),
        (["--checkpoint", str(CHECKPOINT), "x", "--html", "a.html", "--png", "./a.html"],
         ["both name a.html", "its own file"]),
        (["--checkpoint", str(CHECKPOINT), "x", "--png", "."], ["--png . is a folder", "Fix:"]),
        (["--checkpoint", "", "x", "--html", "a.html"], ["expected a file name"]),
    ],
)  # fmt: skip
def test_user_mistakes_are_one_line(args, patterns, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["attention", *args], capsys)
    assert_user_error(code, err, *patterns)
    assert out == "" and not list(tmp_path.iterdir())


def test_without_html_or_png_both_go_under_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["attention", "--checkpoint", str(CHECKPOINT), "the earth"]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    assert out == "wrote runs/attention/attention.html, runs/attention/attention.png\n"
    assert sorted(p.name for p in (tmp_path / "runs" / "attention").iterdir()) == [
        "attention.html", "attention.png"]  # fmt: skip
    page = (tmp_path / "runs" / "attention" / "attention.html").read_bytes()
    code, out, err = run_main(argv, capsys)  # again: refused, nothing replaced
    assert_user_error(code, err, "runs/attention/attention.html (written when neither --html "
                      "nor --png is given) already exists", "--html FILE and --png FILE",
                      "--overwrite")  # fmt: skip
    assert (tmp_path / "runs" / "attention" / "attention.html").read_bytes() == page


@pytest.mark.parametrize("in_the_way", ["file", "link to nothing"])
def test_a_file_in_the_way_of_the_folder_is_refused(in_the_way, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if in_the_way == "file":
        Path("runs").write_text("mine")
    else:
        Path("runs").symlink_to(tmp_path / "nowhere")
    for flags in ([], ["--png", "runs/attention/grid.png"]):
        code, out, err = run_main(["attention", "--checkpoint", str(CHECKPOINT), "x", *flags],
                                  capsys)  # fmt: skip
        assert_user_error(code, err, "runs is not a folder", "Fix: name a file in a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_a_language_model_is_refused(lm_run, tmp_path, capsys):
    html = tmp_path / "a.html"
    code, _, err = run_main(["attention", "--checkpoint", str(lm_run), "x", "--html", str(html)],
                            capsys)  # fmt: skip
    assert_user_error(code, err, "language model", "does not translate")
    assert not html.exists()


# ------------------------------------------------------------------------------ browser


def browse(page: Path, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    """Headless chromium on ``page`` with its console on stderr (own profile: parallel
    tests do not share one); 60 s at most."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    command = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", "--no-first-run", f"--user-data-dir={profile}",
               "--enable-logging=stderr", "--v=0", *flags, page.as_uri()]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def console_messages(stderr: str) -> list[str]:
    """The page's console lines in chromium's log (``INFO:CONSOLE...] "Uncaught Error: ..."``):
    the page writes none itself, so any one is a problem (an error, a warning)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def body_attributes(dom: str) -> dict[str, str]:
    body = re.search(r"<body([^>]*)>", dom)
    assert body, dom[:500]
    return dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))


@needs_browser
def test_the_console_check_catches_an_error(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><body><script>throw new Error('deliberate');</script></body>")
    done = browse(bad, tmp_path, "--dump-dom")
    found = console_messages(done.stderr)
    assert found and "deliberate" in found[0], done.stderr[-2000:]


@needs_browser
def test_the_page_loads_with_no_console_message_and_draws_every_head(page, tmp_path):
    done = browse(page, tmp_path, "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    assert console_messages(done.stderr) == []
    body = body_attributes(done.stdout)
    assert body.get("data-ready") == "1" and body.get("data-heads-drawn") == str(N * H), body


CLICKS = """<script>
const out = [], $ = (q) => document.querySelectorAll(q);
const hover = (e) => e.dispatchEvent(new MouseEvent("mouseenter"));
$("#kinds button")[2].click(); $("#view-matrix")[0].click();       // cross attention, matrix
hover($("#view rect.cell")[3]);
out.push($("#view rect.cell").length, $("#view rect.cell.on").length,
         document.body.dataset.headsDrawn);
$(".thumb")[6].click(); $("#view-lines")[0].click();                // layer 1, head 2, lines
hover($("#view text")[2]);                                       // the first query token
out.push(document.getElementById("layer").value, document.getElementById("head").value,
         $("tbody tr.on td")[1].textContent, $("#view line.on").length > 0,
         [...$("#view text.muted")].filter((e) => e.textContent !== "").length);
document.body.dataset.check = out.join(" ");
</script></body>"""


@needs_browser
def test_clicks_and_hovers_select_and_highlight(page, data, tmp_path):
    clicked = tmp_path / "clicked.html"
    clicked.write_text(page.read_text(encoding="utf-8").replace("</body>", CLICKS, 1))
    done = browse(clicked, tmp_path, "--dump-dom")
    assert console_messages(done.stderr) == []
    S, T = len(data["source"]), len(data["target"])
    # matrix: T x S cells, one query's row of S lit; lines: the hovered query's weights
    # beside the S keys (plus the two column titles)
    expected = f"{T * S} {S} {N * H} 1 2 2 true {S + 2}"
    assert body_attributes(done.stdout).get("data-check") == expected


@needs_browser
def test_the_screenshot_is_not_blank(page, tmp_path):
    shot = tmp_path / "shot.png"
    done = browse(page, tmp_path, f"--screenshot={shot}", "--window-size=1200,900")
    assert shot.exists(), done.stderr[-2000:]
    assert console_messages(done.stderr) == []
    import matplotlib.image

    image = matplotlib.image.imread(shot)
    assert image.shape[:2] == (900, 1200)
    colours = distinct_colours(image)
    assert colours > 100, f"{colours} colours: a blank or unstyled page"


def run_in_page(page: Path, tmp_path: Path, code: str, width: int = 1200) -> str:
    """``code`` (JavaScript that sets ``document.body.dataset.check``) run after the page's
    own script in a ``width`` px wide window; the check's value, the console silent."""
    checked = tmp_path / f"check-{len(list(tmp_path.glob('check-*')))}.html"
    text = page.read_text(encoding="utf-8")
    checked.write_text(text.replace("</body>", f"<script>{code}</script></body>", 1))
    done = browse(checked, tmp_path, "--dump-dom", f"--window-size={width},900")
    assert console_messages(done.stderr) == [], done.stderr[-2000:]
    return unescape(body_attributes(done.stdout).get("data-check", ""))


LAYOUT = """
const d = document.documentElement, box = (e) => e.getBoundingClientRect();
const heads = box(document.querySelector("main section")), svg = document.getElementById("view");
const view = box(svg.parentElement);
const out = () => [d.scrollWidth <= d.clientWidth,        // no sideways scroll
  box(document.querySelector("header")).width >= d.scrollWidth - 0.5,  // to the right edge
  box(document.querySelector("nav")).width >= d.scrollWidth - 0.5,
  heads.bottom <= view.top ? "stacked" : view.left >= heads.right ? "side by side" : "overlap",
  box(svg).right <= view.right + 0.5].join(" ");
const lines = out();
document.querySelectorAll("#kinds button")[2].click();   // cross attention, as a matrix
document.getElementById("view-matrix").click();
document.body.dataset.check = lines + " | " + out();
"""


@needs_browser
@pytest.mark.parametrize(("width", "layout"), [(500, "stacked"), (800, "stacked"),
                                               (1400, "side by side")])  # fmt: skip
def test_the_page_reflows_to_the_window(page, tmp_path, width, layout):
    # no sideways scroll, the header and the nav as wide as the page, the view inside its
    # panel: below 1,100 px the thumbnails' panel stacks above the view
    expected = f"true true true {layout} true"
    assert run_in_page(page, tmp_path, LAYOUT, width) == f"{expected} | {expected}"


WORDS = """
const $ = (q) => [...document.querySelectorAll(q)], text = (e) => e.textContent;
const S = $("#source-tokens .piece").length;
$("#source-tokens .piece")[2].dispatchEvent(new MouseEvent("mouseenter"));  // "beg"
document.body.dataset.check = JSON.stringify({
  source: $("#source-tokens .word").map(text), target: $("#target-tokens .word").map(text),
  split: $(".tokens .word.split").length, pieces: S, bands: $("#view rect.word").length,
  labels: $("#view text").slice(2, 2 + S).map(text), lit: $("#view text.on").map(text)});
"""


@pytest.fixture(scope="module")
def lower_page(translator, tmp_path_factory) -> tuple[Path, dict]:
    """The README's sentence (lower case, every word known) as a page, and its data."""
    data = explorer.attention_data(translator, SENTENCE.lower())
    path = tmp_path_factory.mktemp("lower") / "attention.html"
    path.write_text(explorer.render_page(data), encoding="utf-8")
    return path, data


@needs_browser
def test_the_page_shows_the_pieces_of_a_word_together(lower_page, tmp_path):
    page, data = lower_page
    found = json.loads(run_in_page(page, tmp_path, WORDS))
    assert found["source"] == ["in", "the", "beg·in·ning", "god", "cre·a·ted", "the", "heaven",
                               "and", "the", "earth", "."]  # fmt: skip
    translated = data["translation"].replace(",", " ,").replace(".", " .").split()
    assert [w.replace("·", "") for w in found["target"]] == ["<bos>", *translated]
    assert found["pieces"] == len(data["source"]) == 15  # each piece its own token
    split = sum(n > 1 for side in ("source", "target") for n in data[side + "_words"])
    assert found["split"] == split >= 4  # beg·in·ning, cre·a·ted, and the translation's
    assert found["bands"] == 4  # encoder self: two words of pieces, queries and keys
    assert found["labels"][2:5] == ["beg·", "·in·", "·ning"]
    assert found["lit"] == ["beg·"]  # hovering "beg" above lights its query in the view


KEY = """
const $ = (q) => document.querySelector(q), shown = (e) => e.getBoundingClientRect().height > 0;
const canvas = $(".thumb canvas"), w = canvas.width;
const pixels = canvas.getContext("2d").getImageData(0, 0, w, canvas.height).data;
const lines = [shown($("#thumbs-key .bar")), shown($("#view-key"))];
$("#view-matrix").click();
document.body.dataset.check = JSON.stringify({ lines: lines, matrix: shown($("#view-key .bar")),
  mark: $("#view-key .max").style.left, text: $("#view-key").textContent,
  pixels: [...pixels].filter((v, i) => i % 4 !== 3), width: w });
"""


@needs_browser
def test_the_colours_are_viridis_with_a_key(page, data, tmp_path):
    import matplotlib

    found = json.loads(run_in_page(page, tmp_path, KEY))
    assert found["lines"] == [True, False]  # the thumbnails' key; none for the lines' opacity
    weights = np.asarray(data["kinds"][0]["layers"][0][0])  # encoder self, layer 0, head 0
    largest = weights.max()
    assert found["matrix"] and float(found["mark"].rstrip("%")) == pytest.approx(100 * largest)
    shown = re.search(r"largest: (\d\.\d\d)", found["text"])
    assert shown and float(shown.group(1)) == pytest.approx(largest, abs=0.0051)
    # the first thumbnail: each cell the colour of its weight on matplotlib's viridis
    pixels = np.asarray(found["pixels"], dtype=np.float64).reshape(*weights.shape, 3)
    viridis = matplotlib.colormaps["viridis"](weights)[..., :3] * 255
    assert np.abs(pixels - viridis).max() <= 6
