"""Translator: a trained checkpoint turned back into a model that translates text.

    t = Translator.from_checkpoint("runs/translate")        # a run directory or a .npz
    t.translate(["the small dog sees a cat"], beam_size=4)  # -> list of output texts
    t.evaluate("test", beam_size=4)                         # BLEU / exact match

Input text is handled gracefully: empty strings give empty outputs, unknown words become
the UNK token, and inputs longer than the model's max_len are truncated with a warning.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from . import backend, checkpoint
from .config import TransformerConfig
from .data.batching import pad
from .data.metrics import bleu, exact_match
from .data.tasks import make_task, tokenizer_from_dict
from .decode import beam_search, greedy_decode
from .errors import CheckpointError
from .nn import Transformer


class Translator:
    """A model plus its tokenizer, ready to decode."""

    def __init__(self, model: Transformer, tokenizer: Any, meta: dict[str, Any] | None = None):
        self.model, self.tokenizer, self.meta = model, tokenizer, meta or {}
        self.model.eval()

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str = "cpu") -> Translator:
        path = Path(path)
        if path.is_dir():
            path = path / "checkpoint.npz"
        arrays, meta = checkpoint.load_checkpoint(path)
        if "model_config" not in meta or "tokenizer" not in meta:
            raise CheckpointError(
                f"{path}: this checkpoint has no model config or tokenizer; it was not written "
                "by `minitransformer train`"
            )
        cfg = TransformerConfig.from_dict(meta["model_config"])
        model = Transformer(cfg)
        state = {k[6:]: v for k, v in arrays.items() if k.startswith("model.")}
        model.load_state_dict({k: backend.asarray(v) for k, v in state.items()})
        model.to(device)
        return cls(model, tokenizer_from_dict(meta["tokenizer"]), meta)

    def encode_batch(self, sentences: list[str]) -> Any:
        """Texts -> a padded (B, S) id array on the model's device (truncating if needed)."""
        limit = self.model.cfg.max_len
        rows = []
        for text in sentences:
            ids = self.tokenizer.tokenize(text.strip()) if text.strip() else []
            if len(ids) > limit:
                warnings.warn(
                    f"input of {len(ids)} tokens is longer than the model's max_len {limit}; "
                    f"it was truncated to the first {limit} tokens",
                    stacklevel=3,
                )
                ids = ids[:limit]
            rows.append(ids or [self.model.cfg.pad_id])
        return backend.asarray(pad(rows), device=self.model.device)

    def translate(
        self, sentences: list[str], beam_size: int = 1, alpha: float = 0.6, batch_size: int = 64
    ) -> list[str]:
        """Translate texts; an empty input gives an empty output."""
        outputs: list[str] = []
        for start in range(0, len(sentences), batch_size):
            chunk = sentences[start : start + batch_size]
            src = self.encode_batch(chunk)
            if beam_size > 1:
                ids = beam_search(self.model, src, beam_size, alpha)
            else:
                ids = greedy_decode(self.model, src)
            outputs += [
                self.tokenizer.detokenize(seq) if text.strip() else ""
                for text, seq in zip(chunk, ids, strict=True)
            ]
        return outputs

    def evaluate(
        self, split: str = "test", samples: int | None = None, beam_size: int = 1, alpha=0.6
    ) -> dict[str, float]:
        """Exact match (and BLEU for translation tasks) on a held-out split of the run's task."""
        train_cfg = self.meta.get("train_config", {})
        task = make_task(train_cfg["task"], seed=train_cfg["seed"], **train_cfg["task_knobs"])
        sources = task.sources(split)[:samples]
        refs = task.references(split)[:samples]
        hyps = self.translate(sources, beam_size=beam_size, alpha=alpha)
        metrics = {"sentences": len(refs), "exact_match": exact_match(hyps, refs)}
        if task.name.startswith("translate"):
            metrics["bleu"] = bleu(hyps, refs)
        return metrics
