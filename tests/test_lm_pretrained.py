"""TransformerLM.from_pretrained / save_pretrained against transformers' GPT2LMHeadModel and
LlamaForCausalLM (issue 45, item 3).

Small random-weight models are built with transformers inside the tests (no network), every
weight, bias and norm parameter drawn at random, so a wrong mapping (a transposed or swapped
matrix, q/k/v split in the wrong order, a wrong RoPE layout or base, the key/value heads
repeated the wrong way) shows in the logits.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_api_misuse import LINE_BREAKING, NOT_PATHS

import minitransformer as mt
from minitransformer.errors import ArgumentError, CheckpointError, ConfigError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V = 101
GPT2 = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=V, n_positions=64, bos_token_id=100,
            eos_token_id=100)  # fmt: skip
LLAMA = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=48, vocab_size=V, max_position_embeddings=64, bos_token_id=1,
             eos_token_id=2)  # fmt: skip
CONFIGS = {  # name: (model_type, fields over GPT2 / LLAMA)
    "gpt2-tied": ("gpt2", {}),
    "gpt2-untied-gelu-inner": ("gpt2", dict(n_embd=24, n_layer=3, n_head=2, n_inner=40,
                                            activation_function="gelu",
                                            tie_word_embeddings=False)),
    "gpt2-1layer-1head-silu": ("gpt2", dict(n_layer=1, n_head=1, activation_function="silu",
                                            layer_norm_epsilon=1e-3)),
    "llama-gqa": ("llama", {}),
    "llama-mqa-tied": ("llama", dict(num_key_value_heads=1, tie_word_embeddings=True)),
    "llama-mha-theta500": ("llama", dict(num_key_value_heads=4, rope_theta=500.0,
                                         rms_norm_eps=1e-5)),
    "llama-bias-gelu-3layers": ("llama", dict(num_hidden_layers=3, hidden_size=48,
                                              num_attention_heads=6, num_key_value_heads=3,
                                              attention_bias=True, mlp_bias=True,
                                              hidden_act="gelu_pytorch_tanh",
                                              rope_theta=1e6)),
}  # fmt: skip
REFUSED_CONFIGS = [  # (model_type of the folder, edit of its config.json, what the line says)
    ("llama", {"model_type": "mistral"}, "model_type = 'mistral'"),
    ("llama", {"model_type": "qwen2"}, "model_type = 'qwen2'"),
    ("gpt2", {"model_type": "gpt_neox"}, "model_type = 'gpt_neox'"),
    ("gpt2", {"model_type": "bert"}, "model_type = 'bert'"),
    ("gpt2", {"model_type": "marian"}, "mt.nn.Transformer.from_pretrained"),
    ("gpt2", {"architectures": ["GPT2ForSequenceClassification"]}, "architectures ="),
    ("llama", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
     "rope_parameters = .*default RoPE only"),
    ("llama", {"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope_scaling = "),
    ("llama", {"head_dim": 16}, "head_dim = 16 with hidden_size 32"),
    ("llama", {"attention_bias": True}, "attention_bias = True with mlp_bias = False"),
    ("llama", {"sliding_window": 4096}, "unsupported field 'sliding_window'"),
    ("llama", {"eos_token_id": [2, 3]}, r"eos_token_id must be .*\(several end ids"),
    ("llama", {"rms_norm_eps": 0}, r"rms_norm_eps must be a number in \(0, 1\)"),
    ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx = True"),
    ("gpt2", {"reorder_and_upcast_attn": True}, "reorder_and_upcast_attn = True"),
    ("gpt2", {"add_cross_attention": True}, "add_cross_attention = True"),
    ("gpt2", {"activation_function": "tanh"}, "activation_function 'tanh'"),
    ("gpt2", {"n_inner": "40"}, "n_inner must be null"),
    ("gpt2", {"n_head": 5}, "no valid model: .*d_model .32. must be divisible by h .5."),
]  # fmt: skip


def hf_model(folder, name, seed=0):
    """A random transformers model of CONFIGS[name] (eval mode) saved to ``folder``."""
    kind, fields = CONFIGS[name]
    torch.manual_seed(seed)
    if kind == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**{**GPT2, **fields}))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**LLAMA, **fields}))
    with torch.no_grad():
        for p in model.parameters():  # off the init: biases and norms nonzero
            p.copy_(torch.randn_like(p) * (0.3 if p.ndim > 1 else 1.0))
    model.eval().save_pretrained(folder)
    return model


def ids(seed=0, shape=(3, 11)):
    return np.random.default_rng(seed).integers(0, V, shape)


def torch_logits(model, x):
    with torch.no_grad():
        return model(torch.tensor(x)).logits.numpy()


def differences(got, want):
    """(max |difference|, the same relative to max |logit|)."""
    diff = float(np.abs(got - want).max())
    return diff, diff / float(np.abs(want).max())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logits_equal_transformers(tmp_path, name):
    ref = hf_model(tmp_path, name)
    ours = mt.nn.TransformerLM.from_pretrained(tmp_path)
    assert not ours.training and ours.cfg.dtype == "float32" and ours.cfg.decoder_only
    x = ids()
    got, want = ours(x).numpy(), torch_logits(ref, x)
    assert got.dtype == np.float32 and got.shape == want.shape == (3, 11, V)
    assert differences(got, want)[1] <= 1e-4, differences(got, want)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_greedy_generate_equals_transformers_and_the_cache_changes_nothing(tmp_path, name):
    ref = hf_model(tmp_path, name, seed=2)  # gpt2-tied: one row ends at EOS after 13 tokens
    ours = mt.nn.TransformerLM.from_pretrained(tmp_path)
    prompts, eos = ids(3, (3, 4)), ours.cfg.eos_id
    with torch.no_grad():
        theirs = ref.generate(
            torch.tensor(prompts), attention_mask=torch.ones(prompts.shape, dtype=torch.long),
            do_sample=False, max_new_tokens=14, eos_token_id=eos, pad_token_id=ours.cfg.pad_id,
        ).tolist()  # fmt: skip
    got = ours.generate(prompts.tolist(), max_new_tokens=14, temperature=0, seed=0)
    for row, their_row in zip(got, theirs, strict=True):
        new = their_row[4:]
        assert row == their_row[:4] + (new[: new.index(eos)] if eos in new else new)
    assert all(len(row) > 10 for row in got)  # real continuations, not EOS at once
    assert got == ours.generate(prompts.tolist(), 14, temperature=0, seed=0, use_cache=False)
    cache, x = ours.new_cache(), ids(5, (2, 9))
    steps = [ours(x[:, :4], cache).numpy()] + [ours(x[:, t : t + 1], cache).numpy()
                                               for t in range(4, 9)]  # fmt: skip
    np.testing.assert_allclose(np.concatenate(steps, axis=1), ours(x).numpy(), atol=1e-5)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_round_trip_is_byte_stable_and_transformers_reads_it(tmp_path, name):
    ref = hf_model(tmp_path / "theirs", name)
    first = mt.nn.TransformerLM.from_pretrained(tmp_path / "theirs")
    first.save_pretrained(tmp_path / "a")
    again = mt.nn.TransformerLM.from_pretrained(tmp_path / "a")
    again.save_pretrained(tmp_path / "b")
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == ["config.json", "generation_config.json", "model.safetensors"]
    for file in files:
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "a").eval()
    assert type(back) is type(ref)
    x = ids(7)
    want = torch_logits(ref, x)
    assert differences(torch_logits(back, x), want)[1] <= 1e-6
    assert differences(again(x).numpy(), want)[1] <= 1e-4
    with pytest.raises(CheckpointError, match=r"already holds \['config.json'"):
        again.save_pretrained(tmp_path / "a")
    again.save_pretrained(tmp_path / "a", overwrite=True)


@pytest.mark.parametrize("block, extra", [
    ("gpt2", {}), ("gpt2", dict(tie_embeddings=False, activation="relu")),
    ("llama", dict(kv_heads=2)), ("llama", dict(linear_bias=True, tie_embeddings=True)),
])  # fmt: skip
def test_a_model_made_here_is_saved_for_transformers(tmp_path, block, extra):
    lm = mt.nn.TransformerLM.preset("tiny", vocab=V, block=block, max_len=32, **extra)
    rng = np.random.default_rng(2)
    for p in lm.parameters():  # off the init: biases and norms nonzero
        p.data = (p.data + 0.3 * rng.standard_normal(p.shape)).astype("float32")
    lm.save_pretrained(tmp_path)
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    x = ids(8)
    assert differences(torch_logits(back, x), lm(x).numpy())[1] <= 1e-4


def test_older_files_load_the_same(tmp_path):
    """transformers 4's Llama config (rope_theta, rope_scaling null) and a GPT2Model file
    (no transformer. prefix, the causal-mask buffers stored) give the same logits."""
    from safetensors.numpy import load_file, save_file

    ref = hf_model(tmp_path / "llama", "llama-mha-theta500")
    config = json.loads((tmp_path / "llama" / "config.json").read_text())
    config.pop("rope_parameters")
    (tmp_path / "llama" / "config.json").write_text(
        json.dumps({**config, "rope_theta": 500.0, "rope_scaling": None, "torch_dtype": "float32"})
    )
    got = mt.nn.TransformerLM.from_pretrained(tmp_path / "llama")(ids()).numpy()
    assert differences(got, torch_logits(ref, ids()))[1] <= 1e-4
    ref = hf_model(tmp_path / "gpt2", "gpt2-tied")
    path = tmp_path / "gpt2" / "model.safetensors"
    bare = {k.removeprefix("transformer."): v for k, v in load_file(path).items()}
    for i in range(GPT2["n_layer"]):
        bare[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 64, 64), "float32"))
        bare[f"h.{i}.attn.masked_bias"] = np.array(-1e4, "float32")
    save_file(bare, path)
    got = mt.nn.TransformerLM.from_pretrained(tmp_path / "gpt2")(ids()).numpy()
    assert differences(got, torch_logits(ref, ids()))[1] <= 1e-4


@pytest.mark.parametrize("kind, bos, eos, pad, want", [
    ("gpt2", 100, 100, None, 0), ("gpt2", 0, 0, None, 1), ("llama", 1, 2, None, 0),
    ("llama", 0, 1, None, 2), ("llama", 1, 2, 2, 0), ("llama", 1, 2, 7, 7),
])  # fmt: skip
def test_a_missing_pad_id_is_the_smallest_free_one(tmp_path, kind, bos, eos, pad, want):
    name = "gpt2-tied" if kind == "gpt2" else "llama-gqa"
    hf_model(tmp_path, name)
    config = json.loads((tmp_path / "config.json").read_text())
    edit = dict(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)
    (tmp_path / "config.json").write_text(json.dumps({**config, **edit}))
    cfg = mt.nn.TransformerLM.from_pretrained(tmp_path).cfg
    assert (cfg.bos_id, cfg.eos_id, cfg.pad_id) == (bos, eos, want)


def one_line(err):
    message = str(err.value)
    assert "\n" not in message and len(message) < 700, message
    return message


@pytest.mark.parametrize("kind, edit, words", REFUSED_CONFIGS)
def test_configs_this_library_cannot_compute_are_refused_by_name(tmp_path, kind, edit, words):
    hf_model(tmp_path, "gpt2-tied" if kind == "gpt2" else "llama-gqa")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **edit}))
    with pytest.raises(ConfigError, match=words) as err:
        mt.nn.TransformerLM.from_pretrained(tmp_path)
    one_line(err)


def test_weights_that_do_not_fit_are_refused_by_name(tmp_path):
    from safetensors.numpy import load_file, save_file

    hf_model(tmp_path, "llama-mqa-tied")
    path = tmp_path / "model.safetensors"
    good = load_file(path)
    up = "model.layers.1.mlp.up_proj.weight"
    cases = [
        ({k: v for k, v in good.items() if k != up}, f"missing {up}"),
        ({**good, up: good[up].T.copy()}, rf"{up} is F32\[32, 48\], expected F32\[48, 32\]"),
        ({**good, "model.extra.weight": np.ones(2, "float32")}, "unexpected model.extra"),
        ({**good, "lm_head.weight": good["model.embed_tokens.weight"] + 1},
         "lm_head.weight is not the tied embedding"),
        ({**good, "model.rotary_emb.inv_freq": np.ones(4, "float32")},
         "inv_freq is not RoPE's frequencies"),
        ({**good, up: np.full_like(good[up], np.nan)}, "1 of its arrays hold NaN"),
    ]  # fmt: skip
    for tensors, words in cases:
        save_file(tensors, path)
        with pytest.raises(CheckpointError, match=words) as err:
            mt.nn.TransformerLM.from_pretrained(tmp_path)
        one_line(err)
    from safetensors.torch import save_file as save_torch

    save_torch({k: torch.from_numpy(v).bfloat16() for k, v in good.items()}, path)
    with pytest.raises(CheckpointError, match=r"is BF16\[.*save the model once in float32"):
        mt.nn.TransformerLM.from_pretrained(tmp_path)
    path.unlink()
    (tmp_path / "pytorch_model.bin").write_bytes(b"not even a pickle")
    with pytest.raises(CheckpointError, match=r"found \['pytorch_model.bin'\].*never a pickle"):
        mt.nn.TransformerLM.from_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="not a folder; to download .*snapshot_download"):
        mt.nn.TransformerLM.from_pretrained("openai-community/gpt2-not-here")


@pytest.mark.parametrize("fields, words", [
    (dict(block="paper"), "pre_norm=False"),
    (dict(), "pre_norm=False"),  # TransformerLM's default: the paper's post-LN
    (dict(block="gpt2", attention="local", attention_window=4), "attention='local'"),
    (dict(block="gpt2", logits_bias=True), "logits_bias=True"),
    (dict(block="llama", key_dim=8), "key_dim=8"),
    (dict(block="llama", learned_positions=True, rotary=None), "learned_positions=True"),
    (dict(block="gpt2", norm="rms"), "norm='rms'"),
    (dict(block="gpt2", kv_heads=2), "kv_heads=2"),
    (dict(block="llama", rotary="interleaved"), "rotary='interleaved'"),
    (dict(block="gpt2", scale_embedding=True), "scale_embedding=True"),
])  # fmt: skip
def test_a_model_of_neither_shape_is_not_saved(tmp_path, fields, words):
    lm = mt.nn.TransformerLM.preset("tiny", vocab=V, **fields)
    with pytest.raises(ConfigError, match=f"has a place for .*{words}") as err:
        lm.save_pretrained(tmp_path / "out")
    one_line(err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fields", [
    dict(norm="rms"), dict(norm_eps=1e-6), dict(rotary="halves"), dict(gated_ffn=True),
    dict(kv_heads=2), dict(linear_bias=False), dict(activation="gelu_tanh"),
])  # fmt: skip
def test_marian_refuses_the_switches_it_has_no_place_for(tmp_path, fields):
    cfg = mt.TransformerConfig.preset("tiny", src_vocab=V, tgt_vocab=V, **fields)
    name, value = next(iter(fields.items()))
    with pytest.raises(ConfigError, match=f"no place for {name}={value!r}"):
        mt.nn.Transformer(cfg).save_pretrained(tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", None, 32, np.float32])
@pytest.mark.parametrize("model", ["TransformerLM", "Transformer"])
def test_a_dtype_this_library_cannot_compute_in_is_refused_as_the_argument(tmp_path, dtype, model):
    hf_model(tmp_path, "gpt2-tied")
    with pytest.raises(
        ArgumentError, match="from_pretrained: dtype must be 'float32' or 'float64'"
    ):
        getattr(mt.nn, model).from_pretrained(tmp_path, dtype=dtype)


@pytest.mark.parametrize("name", ["gpt2-tied", "llama-gqa"])
def test_the_translator_loader_sends_a_gpt2_or_llama_folder_to_the_lm(tmp_path, name):
    hf_model(tmp_path, name)
    with pytest.raises(ConfigError, match="mt.nn.TransformerLM.from_pretrained") as err:
        mt.nn.Transformer.from_pretrained(tmp_path)
    assert "unsupported field" not in one_line(err)  # the model_type alone, not every field


@pytest.mark.parametrize(
    "path",
    [*NOT_PATHS, "", *LINE_BREAKING, "n" * 5000],
    ids=lambda p: repr(p)[:20] if isinstance(p, str) else type(p).__name__,
)
def test_the_lm_loader_checks_its_path_as_the_other_loaders_do(path):
    with pytest.raises((ArgumentError, CheckpointError), match="^from_pretrained: ") as err:
        mt.nn.TransformerLM.from_pretrained(path)
    one_line(err)
