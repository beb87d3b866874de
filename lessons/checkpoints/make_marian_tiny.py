"""Write lessons/checkpoints/marian-tiny/: a tiny random MarianMTModel and its own outputs.

Lesson 16 cannot download opus-mt in its tests, so it checks this library's Marian loader
(``mt.nn.Transformer.from_pretrained``) against Hugging Face's ``MarianMTModel`` on a model
small enough to commit. This script needs ``transformers`` and ``torch`` (``pip install -e
".[dev,torch]"``); the lesson does not:

    python lessons/checkpoints/make_marian_tiny.py   # from the repository root

It writes into ``marian-tiny/``:

- ``config.json``, ``generation_config.json``, ``model.safetensors``: what
  ``MarianMTModel.save_pretrained`` writes for a model with opus-mt-en-es's switches (swish,
  sinusoids in halves, embeddings × √d_model, one shared embedding, a logits bias, the pad id
  as the decoder's start, </s> = 0) at toy sizes: d_model 16, 4 heads, 2 + 2 layers, d_ff 32,
  a vocabulary of 48. Every weight, bias, LayerNorm and the logits bias is drawn at random
  (N(0, 0.5²) for matrices, N(0, 1) for vectors), so a transposed, swapped or missing array
  shows in the logits; the sinusoid tables stay Marian's own.
- ``hf_reference.safetensors``: a fixed batch and what transformers computed for it:
  ``src`` (3, 7) source ids with padding in one row, ``tgt_in`` (3, 6) decoder inputs starting
  from the pad id, ``logits`` (3, 6, 48) = MarianMTModel(src, attention_mask = src != pad,
  tgt_in).logits in float32. Its metadata records the transformers and torch versions that
  computed it.

The script is deterministic (torch.manual_seed(0) and a NumPy seed); rerunning it rewrites
the same numbers up to float rounding across torch versions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

FOLDER = Path(__file__).resolve().parent / "marian-tiny"
V, PAD, EOS = 48, 47, 0  # vocabulary; pad = decoder start = the last id; </s> = 0, as opus-mt
FIELDS = dict(  # opus-mt-en-es's config.json switches at toy sizes
    vocab_size=V, decoder_vocab_size=V, d_model=16, encoder_layers=2, decoder_layers=2,
    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,
    decoder_ffn_dim=32, max_position_embeddings=64, activation_function="swish",
    scale_embedding=True, share_encoder_decoder_embeddings=True, pad_token_id=PAD,
    decoder_start_token_id=PAD, eos_token_id=EOS, forced_eos_token_id=EOS, dropout=0.1,
)  # fmt: skip


def batch() -> tuple[np.ndarray, np.ndarray]:
    """src (3, 7) ending in </s>, the second row padded after 4 tokens; tgt_in (3, 6) from pad."""
    rng = np.random.default_rng(16)
    src = rng.integers(1, PAD, (3, 7))
    src[:, -1], src[1, 4:] = EOS, PAD
    src[1, 3] = EOS
    tgt_in = rng.integers(1, PAD, (3, 6))
    tgt_in[:, 0] = PAD
    return src, tgt_in


def main() -> None:
    import torch
    import transformers
    from safetensors.numpy import save_file

    torch.manual_seed(0)
    model = transformers.MarianMTModel(transformers.MarianConfig(**FIELDS)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" not in name:  # the fixed sinusoid tables stay as they are
                p.copy_(torch.randn_like(p) * (0.5 if p.ndim > 1 else 1.0))
        model.final_logits_bias.copy_(torch.randn_like(model.final_logits_bias))
    model.save_pretrained(FOLDER)

    src, tgt_in = batch()
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor(src), attention_mask=torch.tensor(src != PAD),
            decoder_input_ids=torch.tensor(tgt_in),
        ).logits.numpy()  # fmt: skip
    arrays = {
        "src": src.astype(np.int64),
        "tgt_in": tgt_in.astype(np.int64),
        "logits": logits.astype(np.float32),
    }
    meta = {
        "made_by": "lessons/checkpoints/make_marian_tiny.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    save_file(arrays, FOLDER / "hf_reference.safetensors", metadata=meta)
    sizes = {p.name: p.stat().st_size for p in sorted(FOLDER.iterdir())}
    print(f"wrote {FOLDER}: {sizes}")


if __name__ == "__main__":
    main()
