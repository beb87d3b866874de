"""The language model from the command line: ``train lm`` (BPE or characters), its
evaluation with perplexity and the n-gram baselines, its result card with samples, resume,
``generate``, and the mistakes a user makes with them."""

from __future__ import annotations

import json
import math
import signal

import numpy as np
import pytest
from test_cli import assert_user_error, run_main

from minitransformer.data.ngram import LAMBDAS, NGramBaselines, pairs_of
from minitransformer.data.tasks import make_task
from minitransformer.data.vocab import CharVocab
from minitransformer.errors import UnfinishedRunWarning
from minitransformer.runtime.runs import read_metrics
from minitransformer.runtime.sampler import TextSampler

SMALL = ["--model", "d_model=16", "--model", "N=1", "--model", "d_ff=32", "--model", "h=2",
         "--knob", "n_train=300", "--knob", "n_valid=20", "--knob", "n_test=20",
         "--batch-size", "8", "--warmup", "5", "--log-every", "5", "--eval-every", "10",
         "--eval-samples", "20", "--no-progress", "--no-plots"]  # fmt: skip


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """One small run of train lm (BPE), shared by the tests that read it."""
    out = tmp_path_factory.mktemp("runs") / "lm"
    from minitransformer.cli import main

    assert main(["train", "lm", "--steps", "20", "--out", str(out), *SMALL]) == 0
    return out


def test_train_lm_logs_perplexity_and_both_baselines(lm_run):
    records, _ = read_metrics(lm_run / "metrics.jsonl")
    evals = [r for r in records if r["split"] != "train"]
    assert evals, records
    for r in evals:
        assert math.isclose(r["perplexity"], math.exp(r["loss"]), rel_tol=1e-6)
        assert r["bigram_loss"] < r["unigram_loss"] < math.log(2_000)
    card = json.loads((lm_run / "result.json").read_text())
    assert card["task"] == "lm" and card["config"]["decoder_only"] is True
    assert card["train_config"]["label_smoothing"] == 0.0
    assert len(card["samples"]) == 3 and all(isinstance(s, str) for s in card["samples"])
    assert {"unigram_loss", "bigram_loss", "perplexity"} <= set(card["metrics"])


def test_generate_continues_the_prompt(lm_run, capsys):
    argv = ["generate", "--checkpoint", str(lm_run), "In the beginning", "And God",
            "--max-new-tokens", "6", "--seed", "3", "--samples", "2"]  # fmt: skip
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("In the beginning") and lines[2].startswith("And God")
    code, again, _ = run_main(argv, capsys)
    assert again == out  # the same seed, the same texts
    code, greedy, _ = run_main(["generate", "--checkpoint", str(lm_run), "--temperature", "0",
                                "--max-new-tokens", "5"], capsys)  # fmt: skip
    assert code == 0 and len(greedy.splitlines()) == 1


def test_generate_equals_the_library_and_the_cache_changes_nothing(lm_run):
    sampler = TextSampler.from_checkpoint(lm_run)
    ids = sampler.prompt_ids("In the beginning")
    model = sampler.model
    a = model.generate([ids], 8, temperature=0.9, top_k=20, seed=1)
    b = model.generate([ids], 8, temperature=0.9, top_k=20, seed=1, use_cache=False)
    assert a == b
    text = sampler.generate("In the beginning", 8, 0.9, 20, 1)
    assert text == sampler.tokenizer.detokenize(a[0])


def test_resume_goes_on_where_it_stopped(lm_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "lm"
    shutil.copytree(lm_run, run)
    code, _, err = run_main(["train", "--resume", str(run), "--steps", "25", "--no-plots"],
                            capsys)  # fmt: skip
    assert code == 0, err
    card = json.loads((run / "result.json").read_text())
    assert card["steps"] == 25 and card["config"]["decoder_only"] is True


def test_generate_says_once_that_a_run_stopped_early(lm_run, tmp_path, capsys):
    """Continued to 40 steps into another directory and stopped by Ctrl-C at step 21 (the
    loop's own handler, called from inside the step): generate warns; the finished run not."""
    from minitransformer.train import Trainer

    more = tmp_path / "more"
    trainer = Trainer.resume(lm_run, out=str(more), steps=40)
    step = trainer.train_step

    def stop(batch):
        step(batch)
        trainer._on_signal(signal.SIGINT, None)

    trainer.train_step = stop
    assert trainer.train()["step"] == 21
    capsys.readouterr()
    code, text, err = run_main(["generate", "--checkpoint", str(more), "--max-new-tokens", "3"],
                               capsys)  # fmt: skip
    assert code == 0 and text, err
    assert err.splitlines() == [
        f"minitransformer: warning: {more} stopped at step 21 of 40; its outputs are those of "
        f"an unfinished model. Resume it: minitransformer train --resume {more}"
    ]
    with pytest.warns(UnfinishedRunWarning, match="stopped at step 21 of 40"):
        TextSampler.from_checkpoint(more)
    code, _, err = run_main(["generate", "--checkpoint", str(lm_run), "--max-new-tokens", "3"],
                            capsys)  # fmt: skip
    assert code == 0 and "warning" not in err, err


def test_char_tokenizer_through_model_flag(tmp_path, capsys):
    out = tmp_path / "chars"
    argv = ["train", "lm", "--model", "tokenizer=char", "--steps", "5", "--out", str(out), *SMALL]
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    card = json.loads((out / "result.json").read_text())
    assert card["train_config"]["task_knobs"]["tokenizer"] == "char"
    sampler = TextSampler.from_checkpoint(out)
    assert isinstance(sampler.tokenizer, CharVocab) and len(sampler.tokenizer) < 100
    code, text, err = run_main(["generate", "--checkpoint", str(out), "Abc", "--seed", "0",
                                "--max-new-tokens", "4"], capsys)  # fmt: skip
    assert code == 0 and text.startswith("Abc"), err


@pytest.mark.parametrize(
    ("argv", "patterns"),
    [
        (["generate"], ["--checkpoint"]),
        (
            ["generate", "--checkpoint", "nowhere"],
            ["no such run directory", "(minitransformer train lm)"],
        ),
        (["generate", "--checkpoint", "RUN", "--temperature", "-1"], ["--temperature", ">= 0"]),
        (["generate", "--checkpoint", "RUN", "--temperature", "nan"], ["--temperature"]),
        (["generate", "--checkpoint", "RUN", "--top-k", "0"], ["--top-k"]),
        (["generate", "--checkpoint", "RUN", "--max-new-tokens", "0"], ["--max-new-tokens"]),
        (["generate", "--checkpoint", "RUN", "--samples", "x"], ["--samples"]),
        (["generate", "--checkpoint", "RUN", "--top-k", "999999"], ["--top-k", "vocabulary"]),
        (["generate", "--checkpoint", "RUN", "word " * 80], ["the prompt is", "shorten"]),
        (["train", "lm", "--model", "tokenizer=words"], ["tokenizer", "bpe or char"]),
        (["train", "copy", "--model", "tokenizer=char"], ["lm task's tokenizer"]),
        (["train", "lm", "--knob", "tokenizer=words"], ["tokenizer", "'bpe', 'char'"]),
    ],
)
def test_user_mistakes_are_one_line(lm_run, argv, patterns, capsys):
    argv = [str(lm_run) if a == "RUN" else a for a in argv]
    code, _, err = run_main(argv, capsys)
    assert_user_error(code, err, *patterns)


def test_translation_commands_refuse_a_language_model_and_back(lm_run, tmp_path, capsys):
    code, _, err = run_main(["translate", "--checkpoint", str(lm_run), "a b"], capsys)
    assert_user_error(code, err, "language model", "minitransformer generate")
    from minitransformer.cli import main

    copy = tmp_path / "copy"
    argv = ["train", "copy", "--steps", "2", "--out", str(copy), "--no-progress", "--no-plots",
            "--knob", "n_train=50", "--knob", "n_valid=10", "--knob", "n_test=10",
            "--final-eval-samples", "5"]  # fmt: skip
    assert main(argv) == 0
    code, _, err = run_main(["generate", "--checkpoint", str(copy)], capsys)
    assert_user_error(code, err, "encoder-decoder", "minitransformer translate")


def test_lm_task_splits_and_tokenizers():
    task = make_task("lm", n_train=200, n_valid=30, n_test=30)
    assert all(src == [] for src, _ in task.splits["train"])
    held = {task.detokenize(t) for _, t in task.splits["valid"] + task.splits["test"]}
    assert not held & {task.detokenize(t) for _, t in task.splits["train"]}
    chars = make_task("lm", tokenizer="char", n_train=200, n_valid=30, n_test=30)
    for (_, ids), (_, text) in zip(chars.splits["valid"], chars.texts["valid"], strict=True):
        assert chars.detokenize(ids) == text and len(ids) == len(text)
    again = CharVocab.from_dict(chars.vocab.to_dict())
    assert again.tokens == chars.vocab.tokens


def test_ngram_baselines_against_counting_by_hand():
    train = [[4, 5, 4], [5, 5]]
    b = NGramBaselines(train, vocab_size=6, bos=1, eos=2)
    prev, nxt = pairs_of([[4, 5]], 1, 2)
    assert prev.tolist() == [1, 4, 5] and nxt.tolist() == [4, 5, 2]
    # unigram: targets 4,5,4,2 and 5,5,2 -> c = {2: 2, 4: 2, 5: 3}, C = 7, add-one over V = 6
    uni = np.array([1, 1, 3, 1, 3, 4]) / 13
    expected = -np.log(uni[[4, 5, 2]]).mean()
    got = b.losses([[4, 5]], tuned_on=[[4, 5]])
    # bigram ML: p(4|BOS) = 1/2, p(5|4) = 1/2 (4 is followed by 5 and EOS), p(EOS|5) = 1/3
    ml = np.array([1 / 2, 1 / 2, 1 / 3])

    def bigram(lam: float) -> float:
        return float(-np.log(lam * ml + (1 - lam) * uni[[4, 5, 2]]).mean())

    assert math.isclose(got["unigram"], expected)
    assert math.isclose(got["bigram"], bigram(got["bigram_lambda"]))
    assert got["bigram"] <= min(bigram(lam) for lam in LAMBDAS) + 1e-12


def test_loss_curve_draws_the_baselines():
    pytest.importorskip("matplotlib")
    from minitransformer.tools.viz import plot_training_curves

    records = [
        {"step": 10, "split": "train", "loss": 5.0},
        {"step": 10, "split": "valid", "loss": 4.5, "unigram_loss": 6.0, "bigram_loss": 4.2},
        {"step": 20, "split": "valid", "loss": 4.0, "unigram_loss": 6.0, "bigram_loss": 4.2},
    ]
    fig = plot_training_curves(records)
    labels = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert labels["unigram (valid)"].get_ydata()[0] == 6.0
    assert labels["bigram (valid)"].get_ydata()[0] == 4.2
    plain = plot_training_curves(records[:1])
    assert not any("unigram" in line.get_label() for line in plain.axes[0].get_lines())


def test_attention_plot_of_a_language_model_is_causal(lm_run, tmp_path):
    pytest.importorskip("matplotlib")
    import io

    from minitransformer.train import Trainer

    trainer = Trainer.resume(lm_run, out=str(tmp_path / "again"))
    fig = trainer.plot_attention(io.BytesIO())
    images = [ax.get_images()[0].get_array() for ax in fig.axes if ax.get_images()]
    assert len(images) == trainer.model_cfg.h  # one panel per head
    for weights in images:
        assert np.allclose(np.triu(np.asarray(weights), k=1), 0.0)  # nothing after a position
        assert np.allclose(np.asarray(weights).sum(axis=-1), 1.0)
