"""A trained checkpoint turned back into its model and tokenizer, every field checked:
what ``Translator.from_checkpoint`` (an encoder-decoder) and ``TextSampler.from_checkpoint``
(a language model) both start from.

    model, tokenizer, meta = load_trained("runs/copy", device="cpu")

The model is ``nn.build_model(cfg)``: a ``Transformer``, or a ``TransformerLM`` when the
stored model config says ``decoder_only``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ... import backend
from ...config import TrainConfig
from ...data.tasks import tokenizer_from_dict
from ...errors import CheckpointError, MiniTransformerError
from ...nn import build_model
from .layout import expect_model_arrays
from .locate import checkpoint_file, section
from .reading import load_checkpoint
from .schema import check_arrays_like, check_model_config, check_tokenizer, check_train_config


def load_trained(path: str | Path, device: str = "cpu") -> tuple[Any, Any, dict[str, Any]]:
    """(model in eval mode on ``device``, tokenizer, metadata) of a run directory or a
    checkpoint file written by ``minitransformer train``.

    Every field is checked before use (model config, tokenizer, train config, each weight's
    name, shape, dtype and finiteness): a bad one is a CheckpointError naming it.
    """
    path = checkpoint_file(path)
    arrays, meta = load_checkpoint(path, expect=expect_model_arrays)
    if "model_config" not in meta or "tokenizer" not in meta:
        raise CheckpointError(
            f"{path}: this checkpoint has no model config or tokenizer; it was not written "
            "by `minitransformer train`"
        )
    cfg = check_model_config(path, meta["model_config"])
    check_tokenizer(path, meta["tokenizer"])
    if "train_config" in meta:
        check_train_config(path, meta["train_config"], TrainConfig)
    try:
        tokenizer = tokenizer_from_dict(meta["tokenizer"])
        model = build_model(cfg)
        state = section(arrays, "model")
        layout = {
            k: (tuple(v.shape), backend.dtype_name(v.dtype)) for k, v in model.state_dict().items()
        }
        check_arrays_like(path, "model", state, layout)
        model.load_state_dict({k: backend.asarray(v) for k, v in state.items()})
    except (CheckpointError, MiniTransformerError, KeyError, TypeError, ValueError) as err:
        raise CheckpointError(
            f"{path}: its weights, model config and tokenizer do not fit together "
            f"({' '.join(str(err).split())}); the file was edited or written by another "
            "version: retrain or use another checkpoint"
        ) from err
    if len(tokenizer) != cfg.src_vocab or len(tokenizer) != cfg.tgt_vocab:
        size = "only " if len(tokenizer) > cfg.src_vocab else ""
        raise CheckpointError(
            f"{path}: the tokenizer has {len(tokenizer)} tokens but the model {size}"
            f"{cfg.src_vocab} embeddings; the checkpoint's parts do not belong together"
        )
    model.to(device)  # weights are loaded on the host: any saving device loads anywhere
    return model.eval(), tokenizer, meta
