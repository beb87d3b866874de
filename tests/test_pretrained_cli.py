"""translate / evaluate --pretrained DIR: a Marian folder (random weights, a SentencePiece
tokenizer trained here) translated by this library as transformers translates it; the Hub
download path with a stand-in huggingface_hub (never the network)."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest
from test_cli import assert_user_error, run_main
from tiny_runs import marian_config, verse_tokenizer

import minitransformer as mt
from minitransformer.errors import CheckpointError
from minitransformer.runtime.pretrained import FILES, pretrained_folder
from minitransformer.runtime.translator import Translator

pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module")
def opus(tmp_path_factory):
    """A folder in opus-mt-en-es's layout: tokenizer files, config.json, model.safetensors."""
    folder = tmp_path_factory.mktemp("opus")
    tok = verse_tokenizer(folder, pairs=2000, vocab_size=200)
    cfg = marian_config(len(tok), tok.pad_id, tok.eos_id)
    model = mt.nn.Transformer(cfg, seed=1)
    rng = np.random.default_rng(0)
    for p in model.parameters():  # a random model that does not emit EOS at once
        p.data = (p.data + 0.2 * rng.standard_normal(p.shape)).astype("float32")
    model.save_pretrained(folder)
    return folder


SENTENCES = ["In the beginning God created the heaven and the earth.", "and the earth was"]


def test_translate_pretrained_prints_what_the_translator_gives(opus, capsys):
    want = Translator.from_pretrained(opus).translate(SENTENCES)
    assert any(want)
    code, out, err = run_main(["translate", "--pretrained", str(opus), *SENTENCES], capsys)
    assert code == 0, err
    assert out.splitlines() == want
    argv = ["translate", "--pretrained", str(opus), "--beam", "3", SENTENCES[0]]
    code, out, _ = run_main(argv, capsys)
    assert code == 0 and len(out.splitlines()) == 1


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_the_pipeline_matches_transformers(opus):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tok = transformers.MarianTokenizer.from_pretrained(opus)
    model = transformers.MarianMTModel.from_pretrained(opus).eval()
    batch = tok(SENTENCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False)  # the folder's generation config
    want = tok.batch_decode(out, skip_special_tokens=True)  # its max_length, EOS forced: as ours
    ours = Translator.from_pretrained(opus)
    rows = [ours.tokenize(s) for s in SENTENCES]
    assert rows == tok(SENTENCES)["input_ids"]
    assert ours.translate(SENTENCES) == want


def test_evaluate_pretrained_on_english_spanish(opus, capsys):
    code, out, err = run_main(
        ["evaluate", "--pretrained", str(opus), "--samples", "4", "--json"], capsys
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["sentences"] == 4 and result["decoding"] == "greedy"
    assert 0 <= result["bleu"] <= 100


def test_evaluate_refuses_another_language_pair(opus, tmp_path, capsys):
    other = tmp_path / "fr-de"
    other.mkdir()
    for f in opus.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    config = json.loads((other / "tokenizer_config.json").read_text())
    config.update(source_lang="fr", target_lang="de")
    (other / "tokenizer_config.json").write_text(json.dumps(config))
    code, _, err = run_main(["evaluate", "--pretrained", str(other)], capsys)
    assert_user_error(code, err, "English -> Spanish", "translates fr -> de")


def test_mistakes_on_the_command_line(opus, tmp_path, capsys):
    code, _, err = run_main(["translate", "--pretrained", str(tmp_path / "a/b/c"), "x"], capsys)
    assert_user_error(code, err, "not a folder, nor a Hub id")
    code, _, err = run_main(["translate", "--pretrained", str(tmp_path), "x"], capsys)
    assert_user_error(code, err, "needs config.json")
    code, _, err = run_main(
        ["translate", "--pretrained", str(opus), "--checkpoint", str(opus), "x"], capsys
    )
    assert code == 2 and "not allowed with argument" in err


def test_a_hub_id_is_downloaded_with_huggingface_hub(opus, tmp_path, monkeypatch):
    calls = []

    def snapshot_download(repo_id, revision=None, allow_patterns=None):
        calls.append((repo_id, allow_patterns))
        return str(opus if repo_id == "Helsinki-NLP/opus-mt-en-es" else tmp_path)

    fake = types.ModuleType("huggingface_hub")
    fake.snapshot_download = snapshot_download
    monkeypatch.setitem(sys.modules, "huggingface_hub", fake)
    monkeypatch.chdir(tmp_path)  # no local folder of that name
    assert pretrained_folder("Helsinki-NLP/opus-mt-en-es") == opus
    assert calls == [("Helsinki-NLP/opus-mt-en-es", FILES)]
    assert "pytorch_model.bin" not in FILES  # a pickle is never fetched
    with pytest.raises(CheckpointError, match="no model.safetensors.*MarianTokenizer"):
        pretrained_folder("someone/old-model")  # the stand-in returns a folder without weights

    def offline(**_):
        raise OSError("no network")

    fake.snapshot_download = offline
    with pytest.raises(CheckpointError, match="the download failed .OSError: no network"):
        pretrained_folder("someone/model")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # not installed
    with pytest.raises(CheckpointError, match=r'pip install -e "\.\[hf\]"'):
        pretrained_folder("someone/model")
