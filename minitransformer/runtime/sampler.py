"""TextSampler: a trained language model's checkpoint (``minitransformer train lm``) turned
back into a model that writes text.

    s = TextSampler.from_checkpoint("runs/lm")             # a run directory or a checkpoint
    s.generate("In the beginning", temperature=0.8, top_k=40, seed=0)   # -> one text
    s.generate(["And God said", ""], max_new_tokens=30)   # -> a list; "" starts a new verse
    for text in s.stream(["And God said"], samples=500, seed=0):  # a batch at a time
        print(text)

A prompt is read as the model was trained: BOS + its tokens (case kept as the task kept it),
and the model continues it one token at a time (``nn.TransformerLM.generate``: a KV cache,
``temperature`` 0 = greedy, ``top_k``, ``seed``) until it writes EOS or ``max_new_tokens``
(default: up to the model's positions). The text returned is the prompt and its continuation,
detokenized. Characters or words the tokenizer does not know become UNK, with a warning.

Seeds: text i of a call (prompt i // samples, its sample i % samples) draws from its own
generator, derived from (seed, i) alone (``nn.sampling.row_generator``): the same seed gives
the same texts however they are batched (``generate`` or ``stream``, any BATCH_ROWS), up to
the last bits of the batched arithmetic, which can differ with a batch's size.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import checks
from ..checks import checked_path
from ..data.text import readable_text
from ..errors import ArgumentError, CheckpointError
from ..nn.language_model import BATCH_ROWS
from ..nn.lm_arguments import MAX_PROMPTS, Generation
from . import runs
from .checkpoint.trained import load_trained

MAX_TEXTS = 10_000
"""The most texts one ``minitransformer generate`` writes (prompts × --samples): a stream
needs only one batch's memory, but its time grows with the count (the cap ``scale --tokens``
has for the same reason)."""


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
        path = checked_path("TextSampler.from_checkpoint", path)
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
        """Continue each prompt (one string gives one string; a list of at most
        MAX_PROMPTS gives a list); see the module doc."""
        if isinstance(prompts, str):
            return self.generate([prompts], max_new_tokens, temperature, top_k, seed)[0]
        return list(self.stream(prompts, 1, max_new_tokens, temperature, top_k, seed))

    def stream(
        self,
        prompts: str | list[str],
        samples: int = 1,
        max_new_tokens: int | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
    ) -> Iterator[str]:
        """Each prompt continued ``samples`` times, the texts yielded in order (prompt 0's
        samples first) as each batch of BATCH_ROWS is done: memory is one batch's however
        many texts there are. Every argument is checked here, before the first text; text i
        draws from its own generator (see the module doc)."""
        if isinstance(prompts, str):
            prompts = [prompts]
        if not isinstance(prompts, (list, tuple)) or not prompts:
            raise ArgumentError(
                f"generate: prompts must be a text or a non-empty list of texts, got "
                f"{checks.short(prompts)}"
            )
        if len(prompts) > MAX_PROMPTS:
            raise ArgumentError(
                f"generate: {len(prompts):,} prompts are more than the {MAX_PROMPTS:,} one "
                "call takes; pass them a part at a time"
            )
        samples = checks.positive_int("generate", "samples", samples, "texts per prompt, e.g. 1")
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
        rows, how = self.model.check_generation(rows, max_new_tokens, temperature, top_k, seed)
        return self._texts(rows, samples, how)

    def _texts(self, rows: list[list[int]], samples: int, how: Generation) -> Iterator[str]:
        """The texts of ``stream``, BATCH_ROWS at a time: text i continues rows[i // samples]."""
        total = len(rows) * samples
        for start in range(0, total, BATCH_ROWS):
            batch = [rows[i // samples] for i in range(start, min(start + BATCH_ROWS, total))]
            for ids in self.model.continue_prompts(batch, how, first_row=start):
                yield self.tokenizer.detokenize(ids)

    def prompt_ids(self, text: str) -> list[int]:
        """BOS + the prompt's token ids; refused when the prompt leaves no position to write."""
        if not isinstance(text, str):
            raise ArgumentError(
                f"generate: a prompt must be a text, got {type(text).__name__} "
                f"({checks.short(text)})"
            )
        text = readable_text(text)  # undecodable bytes, lone surrogates: U+FFFD
        ids = [self.tokenizer.bos_id, *self.tokenizer.tokenize(" ".join(text.split()))]
        limit = self.model.cfg.max_len
        if len(ids) >= limit:
            raise ArgumentError(
                f"generate: the prompt is {len(ids) - 1} tokens, and the model has "
                f"{limit} positions (one for the start token): shorten it to at most "
                f"{limit - 2} tokens so that there is room to write"
            )
        return ids
