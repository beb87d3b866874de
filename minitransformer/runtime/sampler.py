"""TextSampler: a trained language model's checkpoint (``minitransformer train lm``) turned
back into a model that writes text.

    s = TextSampler.from_checkpoint("runs/lm")             # a run directory or a checkpoint
    s.generate("In the beginning", temperature=0.8, top_k=40, seed=0)   # -> one text
    s.generate(["And God said", ""], max_new_tokens=30)   # -> a list; "" starts a new verse

A prompt is read as the model was trained: BOS + its tokens (case kept as the task kept it),
and the model continues it one token at a time (``nn.TransformerLM.generate``: a KV cache,
``temperature`` 0 = greedy, ``top_k``, ``seed``) until it writes EOS or ``max_new_tokens``
(default: up to the model's positions). The text returned is the prompt and its continuation,
detokenized. Characters or words the tokenizer does not know become UNK, with a warning.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from .. import checks
from ..errors import ArgumentError, CheckpointError
from . import runs
from .checkpoint.trained import load_trained


class TextSampler:
    """A language model and its tokenizer, ready to continue text."""

    def __init__(self, model: Any, tokenizer: Any, meta: dict[str, Any] | None = None):
        self.model, self.tokenizer, self.meta = model, tokenizer, meta or {}
        self.model.eval()

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str = "cpu") -> TextSampler:
        """The language model and tokenizer of a run of ``train lm`` (every field checked,
        as ``checkpoint.trained.load_trained`` does); a translation checkpoint is refused, and
        a run that stopped before its planned steps gives an UnfinishedRunWarning."""
        model, tokenizer, meta = load_trained(path, device)
        if not model.cfg.decoder_only:
            raise CheckpointError(
                f"{path}: this checkpoint is an encoder-decoder (a translation model): it "
                "translates, it does not continue text; use: minitransformer translate "
                '--checkpoint RUN "a sentence"'
            )
        runs.warn_if_unfinished(path, meta)
        return cls(model, tokenizer, meta)

    def generate(
        self,
        prompts: str | list[str],
        max_new_tokens: int | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
    ) -> str | list[str]:
        """Continue each prompt (one string gives one string); see the module doc."""
        if isinstance(prompts, str):
            return self.generate([prompts], max_new_tokens, temperature, top_k, seed)[0]
        if not isinstance(prompts, (list, tuple)) or not prompts:
            raise ArgumentError(
                f"generate: prompts must be a text or a non-empty list of texts, got "
                f"{checks.short(prompts)}"
            )
        rows = [self.prompt_ids(text) for text in prompts]
        unknown = sum(row.count(self.tokenizer.unk_id) for row in rows)
        if unknown:
            warnings.warn(
                f"{unknown} token(s) of the prompt are unknown to this model's tokenizer and "
                "were read as <unk>",
                stacklevel=2,
            )
        if max_new_tokens is None:  # every position left (prompt_ids leaves at least one)
            max_new_tokens = self.model.cfg.max_len - max(len(row) for row in rows)
        out = self.model.generate(rows, max_new_tokens, temperature, top_k, seed)
        return [self.tokenizer.detokenize(ids) for ids in out]

    def prompt_ids(self, text: str) -> list[int]:
        """BOS + the prompt's token ids; refused when the prompt leaves no position to write."""
        if not isinstance(text, str):
            raise ArgumentError(
                f"generate: a prompt must be a text, got {type(text).__name__} "
                f"({checks.short(text)})"
            )
        ids = [self.tokenizer.bos_id, *self.tokenizer.tokenize(" ".join(text.split()))]
        limit = self.model.cfg.max_len
        if len(ids) >= limit:
            raise ArgumentError(
                f"generate: the prompt is {len(ids) - 1} tokens, and the model has "
                f"{limit} positions (one for the start token): shorten it to at most "
                f"{limit - 2} tokens so that there is room to write"
            )
        return ids
