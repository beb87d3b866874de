"""The ablation study (minitransformer/tools/ablate.py, `minitransformer ablate`) and the model
switches it needs (TransformerConfig.key_dim, .scale_attention)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer.cli import main
from minitransformer.decode import greedy_decode
from minitransformer.errors import ConfigError
from minitransformer.nn.positional import sinusoid_table
from minitransformer.tools import ablate


def micro(**changes) -> ablate.AblationSettings:
    """A study that trains in well under a second per variant."""
    base = dict(steps=3, warmup=2, n_train=200, eval_samples=16, long_samples=8,
                curve_every=2, curve_samples=8, batch_size=16,
                model={"d_model": 16, "h": 4, "N": 1, "d_ff": 32})  # fmt: skip
    return ablate.AblationSettings(**{**base, **changes}).validate()


@pytest.fixture(autouse=True)
def _micro_fast(monkeypatch):
    """The CLI's --fast study shrunk to the micro one, so end-to-end runs take seconds."""
    monkeypatch.setattr(ablate.AblationSettings, "fast", classmethod(lambda cls: micro()))


# ------------------------------------------------------------------ the model switches
@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "8"])
def test_key_dim_validated(bad):
    with pytest.raises(ConfigError, match="key_dim"):
        mt.TransformerConfig(src_vocab=10, tgt_vocab=10, key_dim=bad).validate()


@pytest.mark.parametrize("bad", [0, 1, "no", None])
def test_scale_attention_validated(bad):
    with pytest.raises(ConfigError, match="scale_attention"):
        mt.TransformerConfig(src_vocab=10, tgt_vocab=10, scale_attention=bad).validate()


def test_defaults_are_the_papers():
    cfg = mt.TransformerConfig(src_vocab=10, tgt_vocab=10)
    assert cfg.key_dim is None and cfg.d_k == 512 // 8 and cfg.scale_attention is True
    assert mt.TransformerConfig.from_dict(cfg.to_dict()) == cfg


def _head_logits(mha, x):
    """q kᵀ per head (B, H, T, T), recomputed from the layer's own projections."""
    B, T, _ = x.shape
    q = (x @ mha.w_q.weight.numpy() + mha.w_q.bias.numpy()).reshape(B, T, mha.h, mha.d_k)
    k = (x @ mha.w_k.weight.numpy() + mha.w_k.bias.numpy()).reshape(B, T, mha.h, mha.d_k)
    return np.einsum("bthd,bshd->bhts", q, k)


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("scale", [True, False])
def test_scale_switch_changes_the_logits(scale):
    mha = mt.nn.MultiHeadAttention(16, 2, backend_gen(), d_k=8, scale=scale).to(dtype="float64")
    x = np.random.default_rng(0).normal(size=(2, 5, 16)) * 3
    mha.store_weights = True
    mha(mt.tensor(x), mt.tensor(x), mt.tensor(x))
    logits = _head_logits(mha, x)
    want = _softmax(logits / math.sqrt(8) if scale else logits)
    np.testing.assert_allclose(mha.last_weights, want, rtol=1e-10, atol=1e-12)
    other = _softmax(logits if scale else logits / math.sqrt(8))
    assert not np.allclose(mha.last_weights, other, atol=1e-3)  # the switch matters


def backend_gen():
    return backend.Generator(0, "cpu")


@pytest.mark.parametrize("scale", [True, False])
def test_key_dim_and_no_scaling_gradcheck(scale):
    mha = mt.nn.MultiHeadAttention(8, 2, backend_gen(), d_k=3, scale=scale).to(dtype="float64")
    assert mha.w_q.weight.shape == (8, 6) and mha.w_k.weight.shape == (8, 6)
    assert mha.w_v.weight.shape == (8, 8) and mha.w_o.weight.shape == (8, 8)  # d_v kept
    rng = np.random.default_rng(1)
    q = mt.tensor(rng.normal(size=(2, 3, 8)), requires_grad=True, dtype="float64")
    kv = mt.tensor(rng.normal(size=(2, 4, 8)), requires_grad=True, dtype="float64")
    assert mt.gradcheck(lambda a, b: mha(a, b, b), q, kv)


def test_key_dim_model_caches_like_it_recomputes():
    cfg = mt.TransformerConfig.preset(
        "tiny", src_vocab=20, tgt_vocab=20, d_model=16, h=4, N=1, d_ff=32, key_dim=2,
        scale_attention=False,
    )  # fmt: skip
    model = mt.nn.Transformer(cfg, seed=0)
    src = np.random.default_rng(0).integers(3, 20, size=(3, 6))
    assert greedy_decode(model, src, 7, use_cache=True) == greedy_decode(
        model, src, 7, use_cache=False
    )


# ------------------------------------------------------------------ the variants
def _fingerprint(trainer):
    """Everything a variant may change: the model config (sizes, switches, P_drop, ε_ls,
    which the loss reads too), the learning-rate schedule and the position table."""
    lrs = tuple(round(trainer.schedule.lr_at(s), 12) for s in (1, 2, 5, 50))
    table = trainer.model.positions.table.numpy().round(6).tobytes()
    return trainer.model_cfg.to_dict(), lrs, table


def test_every_variant_changes_exactly_what_it_names():
    settings = micro()
    data = ablate.make_data(settings)
    base = _fingerprint(ablate.build_trainer(ablate.select(["base"], settings)[0], settings, data))
    seen = []
    for variant in ablate.select([v.name for v in ablate.variants(4, 16)], settings):
        trainer = ablate.build_trainer(variant, settings, data)
        cfg, lrs, table = fp = _fingerprint(trainer)
        assert trainer.cfg.label_smoothing == cfg["label_smoothing"]  # the loss uses it
        changed = {k for k in cfg if cfg[k] != base[0][k]} | (
            {"schedule"} if lrs != base[1] else set()
        )
        if variant.name == "base":
            assert not changed and table == base[2]
            continue
        assert len(changed) == 1, f"{variant.name} changes {sorted(changed)}"
        assert (table != base[2]) == (variant.name == "learned-positions")
        assert fp not in seen, f"{variant.name} is the same run as another variant"
        seen.append(fp)


def test_learned_positions_are_parameters_drawn_at_random_and_trained():
    settings = micro()
    data = ablate.make_data(settings)
    base = ablate.build_trainer(ablate.select(["base"], settings)[0], settings, data)
    assert "positions.table" not in dict(base.model.named_parameters())
    trainer = ablate.build_trainer(ablate.select(["learned-positions"], settings)[0], settings,
                                   data)  # fmt: skip
    params = dict(trainer.model.named_parameters())
    assert "positions.table" in params
    table = params["positions.table"]
    before = table.numpy().copy()
    sinus = sinusoid_table(*before.shape)
    assert np.abs(before - sinus).max() > 0.5  # random, not the sinusoids
    trainer.train_step(next(trainer.stream))
    assert not np.allclose(table.numpy(), before)  # the optimizer updates it


def test_no_warmup_starts_at_the_peak_and_then_matches_the_paper():
    settings = micro(warmup=10, steps=40)
    data = ablate.make_data(settings)
    base, flat = (ablate.build_trainer(v, settings, data)
                  for v in ablate.select(["base", "no-warmup"], settings))  # fmt: skip
    assert base.schedule.lr_at(1) < settings.peak_lr / 5
    assert flat.schedule.lr_at(1) == pytest.approx(settings.peak_lr)
    for step in (10, 20, 40):
        assert flat.schedule.lr_at(step) == pytest.approx(base.schedule.lr_at(step))


def test_run_variant_reports_metrics_and_curves():
    settings = micro()
    data = ablate.make_data(settings)
    r = ablate.run_variant(ablate.select(["no-dropout"], settings)[0], settings, data)
    assert r["diverged"] is None and r["steps"] == 3 and len(r["train_loss"]) == 3
    assert [p["step"] for p in r["curve"]] == [0, 2, 3]
    for key in ("test_ppl", "long_ppl", "train_ppl"):
        assert 1.0 < r[key] < 10 * len(data.task.vocab), key
    assert 0.0 <= r["test_bleu"] <= 100.0 and 0.0 <= r["long_bleu"] <= 100.0


def test_settings_validated():
    with pytest.raises(ConfigError, match="long set"):
        micro(max_words=12, long_min_words=12)
    with pytest.raises(ConfigError, match="steps"):
        micro(steps=0)


# ------------------------------------------------------------------ the command
def test_ablate_command_end_to_end_and_reproducible(tmp_path, capsys):
    args = ["ablate", "--fast", "--only", "base,learned-positions", "--no-progress", "--seed", "3"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    for name in ablate.OUTPUTS:
        assert (tmp_path / "a" / name).is_file(), name
    captured = capsys.readouterr()
    out = captured.out
    assert "| learned-positions |" in out and "4.92 / 25.7" in out
    lines = [line for line in captured.err.splitlines() if ": test PPL " in line]
    assert [line.split(":")[0] for line in lines] == ["base", "learned-positions"]  # no bar
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / d / "ablations.json").read_text()) for d in "ab")
    assert [r["name"] for r in a["results"]] == ["base", "learned-positions"]
    for ra, rb in zip(a["results"], b["results"], strict=True):
        ra.pop("seconds"), rb.pop("seconds")
        assert ra == rb  # the same seed gives the same study
    md = (tmp_path / "a" / "ablations.md").read_text()
    assert md.count("\n| ") == 2  # one row per variant (the header starts the file)


def test_ablate_refuses_to_overwrite(tmp_path, capsys):
    args = ["ablate", "--fast", "--only", "base", "--no-progress", "--out", str(tmp_path)]
    assert main(args) == 0
    before = (tmp_path / "ablations.json").read_text()
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "already holds an ablation study" in err and "--overwrite" in err
    assert (tmp_path / "ablations.json").read_text() == before
    assert main([*args, "--overwrite", "--seed", "1"]) == 0
    assert (tmp_path / "ablations.json").read_text() != before


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--steps", "0"], "--steps"),
        (["--steps", "many"], "--steps"),
        (["--seed", "-1"], "--seed"),
        (["--only", "base,,pre-ln"], "--only"),
        (["--only", "base,no-such-thing"], "no-such-thing"),
        (["--only", "base,base"], "twice"),
        (["--fats"], "--fats"),
    ],
)
def test_bad_flags_exit_2_with_one_line(tmp_path, capsys, argv, says):
    assert main(["ablate", "--out", str(tmp_path / "x"), *argv]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and says in errors[0], err
    assert "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_out_that_is_a_file_exits_2(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("not a directory")
    assert main(["ablate", "--fast", "--only", "base", "--out", str(target)]) == 2
    assert "is a file" in capsys.readouterr().err


def test_switches_survive_a_checkpoint(tmp_path):
    from minitransformer.runtime.translator import Translator
    from minitransformer.train import TrainConfig, Trainer

    cfg = TrainConfig(
        task="copy", steps=2, batch_size=8, warmup=1, out=str(tmp_path / "run"), progress=False,
        plots=False, eval_every=10, checkpoint_every=10, final_eval_samples=4,
        task_knobs=dict(n_symbols=6, max_len=4, n_train=50, n_valid=8, n_test=8),
        model_overrides=dict(d_model=16, h=2, N=1, d_ff=16, key_dim=3, scale_attention=False),
    )  # fmt: skip
    trainer = Trainer(cfg)
    trainer.train()
    loaded = Translator.from_checkpoint(tmp_path / "run")
    assert loaded.model.cfg.key_dim == 3 and loaded.model.cfg.scale_attention is False
    assert loaded.model.encoder.layers[0].self_attn.w_q.weight.shape == (16, 6)
    resumed = Trainer.resume(tmp_path / "run", steps=3)
    assert resumed.model_cfg == trainer.model_cfg


# ------------------------------------------------------------------ the report
def _study(n: int = 11) -> dict:
    """A made-up study of ``n`` variants whose loss curves end close together."""
    names = ["base", *[f"variant-{i}" for i in range(1, n)]]
    results = [
        dict(name=name, change="-", parameters=1000, train_ppl=3.0, test_ppl=10.0 + i,
             test_bleu=24.02 if i == 3 else 7.7 + i, long_ppl=20.0, long_bleu=float(i),
             train_loss=[1.0 + 0.01 * i + 5 * math.exp(-s / 40) for s in range(200)])
        for i, name in enumerate(names)
    ]  # fmt: skip
    return dict(settings=dict(steps=200, seed=0, batch_size=64), task="toy", results=results)


def test_the_table_says_the_papers_numbers_are_not_comparable():
    table = ablate.markdown_table(_study(2))
    assert "paper PPL / BLEU † |" in table.splitlines()[0]
    caveat = table.strip().splitlines()[-1]
    assert caveat.startswith("† Not comparable with ours") and "200-step runs" in caveat
    assert table.count("\n| ") == 2  # one row per variant (the caveat is no table row)


def test_the_figure_keeps_its_labels_inside_and_its_loss_lines_apart():
    pytest.importorskip("matplotlib")
    fig = ablate.report.figure(_study())
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:3]:  # the bar panels: each value label inside its panel
        box = ax.get_window_extent(renderer)
        for text in ax.texts:
            assert text.get_window_extent(renderer).x1 <= box.x1, (ax.get_title(), text)
    loss = fig.axes[3]
    named = [h.get_label() for h in loss.get_legend().legend_handles]
    assert named == ["the other 7 variants", "variant-10", "variant-9", "variant-8", "base"]
    widths = {line.get_label(): line.get_linewidth() for line in loss.get_lines()}
    assert widths["base"] == max(widths.values())
    assert len({line.get_color() for line in loss.get_lines()}) == 5  # grey, 3 colours, black
