"""TransformerConfig.attention_block_size: validated, reaches every attention layer, trains
to the same losses as the plain op, and survives (or is absent from) a checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_runs import KNOBS, SIZE, TINY

import minitransformer as mt
from minitransformer.cli import main
from minitransformer.errors import ConfigError
from minitransformer.runtime import checkpoint
from minitransformer.runtime.translator import Translator
from minitransformer.train import TrainConfig, Trainer


def tiny(out, steps=6, **model) -> TrainConfig:
    return TrainConfig(
        task="copy", steps=steps, batch_size=8, warmup=3, peak_lr=3e-3, dropout=0.1,
        out=str(out), progress=False, plots=False, log_every=2, eval_every=1000,
        eval_samples=8, checkpoint_every=1000, final_eval_samples=8,
        task_knobs=dict(KNOBS), model_overrides=dict(SIZE, **model),
    )  # fmt: skip


@pytest.mark.parametrize("bad", [0, -3, 2.0, "8", True])
def test_attention_block_size_validated(bad):
    with pytest.raises(ConfigError, match="attention_block_size must be an int > 0"):
        mt.TransformerConfig(src_vocab=10, tgt_vocab=10, attention_block_size=bad)


def test_the_switch_reaches_every_attention_layer():
    cfg = mt.TransformerConfig.preset("tiny", src_vocab=10, tgt_vocab=10, attention_block_size=4)
    layers = [
        m for m in mt.nn.Transformer(cfg).modules() if isinstance(m, mt.nn.MultiHeadAttention)
    ]
    assert len(layers) == 3 * cfg.N and all(m.block_size == 4 for m in layers)
    plain = mt.nn.Transformer(mt.TransformerConfig.preset("tiny", src_vocab=10, tgt_vocab=10))
    assert all(m.block_size is None for m in plain.modules() if hasattr(m, "block_size"))


def test_training_gives_the_same_losses_with_it_on(tmp_path):
    """Block size 3 (sequences are longer: ragged blocks, padding and causal masks)."""
    off = Trainer(tiny(tmp_path / "off"))
    off.train()
    on = Trainer(tiny(tmp_path / "on", attention_block_size=3))
    on.train()
    assert on.model_cfg.attention_block_size == 3 and len(on.losses) == 6
    np.testing.assert_allclose(on.losses, off.losses, rtol=1e-5)

    loaded = Translator.from_checkpoint(tmp_path / "on")
    assert loaded.model.cfg.attention_block_size == 3
    assert loaded.model.encoder.layers[0].self_attn.block_size == 3
    resumed = Trainer.resume(tmp_path / "on", steps=7)
    assert resumed.model_cfg == on.model_cfg


def test_a_checkpoint_without_the_field_loads_with_the_default(tmp_path):
    Trainer(tiny(tmp_path, steps=2)).train()
    path = tmp_path / "checkpoint.safetensors"
    arrays, meta = checkpoint.load_checkpoint(path)
    del meta["model_config"]["attention_block_size"]  # as a checkpoint from before it
    for key in checkpoint.RESERVED_METADATA_KEYS:
        meta.pop(key)
    checkpoint.save_checkpoint(path, arrays, meta)
    assert Translator.from_checkpoint(tmp_path).model.cfg.attention_block_size is None


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # argparse refuses a flag's value this way
        return stop.code


def test_cli_flag(tmp_path, capsys):
    def flags(value: str, name: str) -> list[str]:
        return ["train", "copy", "--steps", "2", "--out", str(tmp_path / name), *TINY,
                "--model", f"attention_block_size={value}"]  # fmt: skip

    assert main(flags("4", "on")) == 0
    meta = checkpoint.read_metadata(tmp_path / "on" / "checkpoint.safetensors")
    assert meta["model_config"]["attention_block_size"] == 4
    assert main(flags("none", "off")) == 0
    meta = checkpoint.read_metadata(tmp_path / "off" / "checkpoint.safetensors")
    assert meta["model_config"]["attention_block_size"] is None
    for bad, why in (("0", "must be >= 1"), ("2.5", "whole number"), ("x", "whole number")):
        capsys.readouterr()
        assert _exit_code(flags(bad, "bad")) == 2
        assert why in capsys.readouterr().err


def test_a_run_without_the_field_resumes(tmp_path):
    Trainer(tiny(tmp_path, steps=2)).train()
    path = tmp_path / "checkpoint.safetensors"
    arrays, meta = checkpoint.load_checkpoint(path)
    del meta["model_config"]["attention_block_size"]
    for key in checkpoint.RESERVED_METADATA_KEYS:
        meta.pop(key)
    checkpoint.save_checkpoint(path, arrays, meta)
    resumed = Trainer.resume(tmp_path, steps=3)
    assert resumed.model_cfg.attention_block_size is None
    resumed.train()
