"""Translator: a trained checkpoint turned back into a model that translates text.

    t = Translator.from_checkpoint("runs/translate")        # a run directory or a checkpoint file
    t.translate(["the small dog sees a cat"], beam_size=4)  # -> list of output texts
    t.evaluate("test", beam_size=4)                         # BLEU / exact match

Decoding defaults (``Translator.defaults``, a ``decode.Decoding``): a checkpoint of this
library decodes greedily up to its max_len positions; a Marian folder (``from_pretrained``)
with its generation config's num_beams, max_length and forced_eos_token_id
(``nn.marian_config.generation_from_marian``). ``beam_size`` and ``max_len`` given to
``translate``/``evaluate`` override them; ``max_len`` may not exceed the model's positions.

Input text is handled gracefully: empty (or blank) strings give empty outputs, a lone
surrogate (an undecodable byte of the command line, U+DC80..U+DCFF, or any other) is read
by the project's rule (``data.text.readable_text``: U+FFFD), unknown
words and characters become the UNK token (with a warning that counts them), and inputs
longer than the model's max_len are truncated with a warning. A single string in gives a
single string out.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from .. import backend, checks
from ..checks import checked_path
from ..data.batching import pad
from ..data.metrics import bleu, exact_match
from ..data.sentencepiece import SentencePieceTokenizer
from ..data.tasks import make_task
from ..data.text import readable_text
from ..decode import Decoding, beam_search, check_beam_size
from ..errors import ArgumentError, CheckpointError
from ..nn import Transformer
from ..nn.marian_config import generation_from_marian
from . import runs
from .checkpoint.trained import load_trained


class Translator:
    """A model plus its tokenizer and its decoding defaults, ready to decode."""

    def __init__(
        self,
        model: Transformer,
        tokenizer: Any,
        meta: dict[str, Any] | None = None,
        defaults: Decoding | None = None,
    ):
        self.model, self.tokenizer, self.meta = model, tokenizer, meta or {}
        self.defaults = defaults or Decoding()
        self.model.eval()

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str = "cpu") -> Translator:
        """The model and tokenizer of a checkpoint (a run directory or a checkpoint file).

        Every field is checked before use (model config, tokenizer, train config, each
        weight's name, shape, dtype and finiteness): a bad one is a CheckpointError naming it.
        A run that stopped before its planned steps gives an UnfinishedRunWarning.
        """
        path = checked_path("Translator.from_checkpoint", path)
        model, tokenizer, meta = load_trained(path, device)
        if model.cfg.decoder_only:
            raise CheckpointError(
                f"{path}: this checkpoint is a language model (train lm): it continues text, "
                "it does not translate; use: minitransformer generate --checkpoint RUN "
                '"some words"'
            )
        runs.warn_if_unfinished(path, meta)
        return cls(model, tokenizer, meta)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str = "cpu") -> Translator:
        """A Hugging Face Marian folder (opus-mt): its model (``Transformer.from_pretrained``),
        its SentencePiece tokenizer (source.spm, target.spm, vocab.json) and its decoding
        defaults (``generation_from_marian``). ``evaluate`` scores it on this library's
        English-Spanish test set. ``path``: a folder (``runtime.pretrained.pretrained_folder``
        turns a Hub id into one)."""
        path = checked_path("Translator.from_pretrained", path, "a Marian folder")
        model = Transformer.from_pretrained(path)
        tokenizer = SentencePieceTokenizer.from_pretrained(path)
        cfg, sizes = model.cfg, (len(tokenizer.vocab), len(tokenizer.target_vocab))
        if sizes[0] > cfg.src_vocab or sizes[1] > cfg.tgt_vocab:
            raise CheckpointError(
                f"{path}: the tokenizer's vocabularies ({sizes[0]:,} and {sizes[1]:,} tokens) "
                f"are larger than the model's ({cfg.src_vocab:,}, {cfg.tgt_vocab:,}); the "
                "folder mixes files of two models"
            )
        ids = (tokenizer.pad_id, tokenizer.eos_id)
        if ids != (cfg.pad_id, cfg.eos_id):
            raise CheckpointError(
                f"{path}: the tokenizer's pad and eos ids {ids} are not config.json's "
                f"{(cfg.pad_id, cfg.eos_id)}; the folder mixes files of two models"
            )
        languages = (tokenizer.source_lang, tokenizer.target_lang)
        meta = {"pretrained": str(path), "languages": languages}
        defaults = Decoding(**generation_from_marian(path, cfg))
        return cls(model.to(device), tokenizer, meta, defaults)

    def decoding(self, beam_size: int | None = None, max_len: int | None = None) -> Decoding:
        """The decoding of a call: ``self.defaults`` where an argument is None. A beam is at
        most the target vocabulary; max_len (the most tokens generated, a forced EOS counted)
        at most the model's positions: else an ArgumentError naming it and the fix."""
        d, beam = self.defaults, self.defaults.beam_size
        if beam_size is not None:
            beam = check_beam_size("translate", beam_size, self.model)
        if max_len is not None:
            limit = self.model.cfg.max_len
            fix = f"the most tokens to generate for a sentence, at most the model's {limit:,}"
            max_len = checks.positive_int("translate", "max_len", max_len, fix)
            if max_len > limit:
                raise ArgumentError(
                    f"translate: max_len {max_len:,} (--max-len) is more than the model's "
                    f"{limit:,} positions. Fix: give at most {limit:,}"
                )
        return Decoding(beam, d.max_len if max_len is None else max_len, d.forced_eos)

    def tokenize(self, text: str) -> list[int]:
        """One text -> ids, cut to the model's max_len (with a warning); blank -> []. The
        text is read by the project's rule (``data.text.readable_text``)."""
        if not isinstance(text, str):
            raise ArgumentError(
                f"translate: sentences must be str, got {type(text).__name__} ({text!r:.40}); "
                "pass a list of texts"
            )
        text = readable_text(text).strip()
        return self.fit(self.tokenizer.tokenize(text) if text else [])

    def fit(self, ids: list[int]) -> list[int]:
        """``ids`` cut to the model's max_len positions: the first ones, with one warning
        when there were more (the model reads no further)."""
        limit = self.model.cfg.max_len
        if len(ids) > limit:
            warnings.warn(
                f"input of {len(ids)} tokens is longer than the model's max_len {limit}; "
                f"it was truncated to its first {limit} tokens",
                stacklevel=5,
            )
        return ids[:limit]

    def encode_batch(self, sentences: list[str]) -> Any:
        """Texts -> a padded (B, S) id array on the model's device (truncating if needed).

        A blank text becomes one PAD (the model needs a position); its output is "".
        """
        pad_id = self.model.cfg.pad_id
        rows = [self.tokenize(text) or [pad_id] for text in sentences]
        return backend.asarray(pad(rows, pad_id=pad_id), device=self.model.device)

    def translate(
        self,
        sentences: list[str] | str,
        beam_size: int | None = None,
        alpha: float = 0.6,
        batch_size: int = 64,
        max_len: int | None = None,
    ) -> list[str] | str:
        """Translate texts (a list, or one string -> one string); blank input -> "".

        ``beam_size`` (1 = greedy) and ``max_len`` (the most tokens generated a sentence):
        None takes ``self.defaults`` (see ``decoding``). Words and characters the tokenizer
        does not know become UNK, with one warning that counts them.
        """
        if isinstance(sentences, str):
            return self.translate([sentences], beam_size, alpha, batch_size, max_len)[0]
        how = self.decoding(beam_size, max_len)
        batch_size = checks.positive_int("translate", "batch_size", batch_size, "e.g. 64")
        sentences = list(sentences)
        outputs: list[str] = []
        unknown = 0
        for start in range(0, len(sentences), batch_size):
            chunk = sentences[start : start + batch_size]
            rows = [self.tokenize(text) for text in chunk]
            unknown += sum(row.count(self.tokenizer.unk_id) for row in rows)
            keep = [i for i, row in enumerate(rows) if row]  # blank inputs are not decoded
            ids: list[list[int]] = [[] for _ in chunk]
            if keep:
                src = pad([rows[i] for i in keep], pad_id=self.model.cfg.pad_id)
                src = backend.asarray(src, device=self.model.device)
                decoded = beam_search(
                    self.model, src, how.beam_size, alpha, how.max_len, how.forced_eos
                )  # beam 1: greedy_decode
                for i, seq in zip(keep, decoded, strict=True):
                    ids[i] = seq
            outputs += [
                self.tokenizer.detokenize(seq) if row else ""
                for row, seq in zip(rows, ids, strict=True)
            ]
        if unknown:
            warnings.warn(
                f"{unknown} token(s) of the input are not in the model's vocabulary of "
                f"{len(self.tokenizer)}; they were read as <unk>",
                stacklevel=2,
            )
        return outputs

    def evaluate(
        self,
        split: str = "test",
        samples: int | None = None,
        beam_size: int | None = None,
        alpha: float = 0.6,
        max_len: int | None = None,
    ) -> dict[str, float]:
        """Exact match (and BLEU for translation tasks) on a held-out split of the run's task;
        a pretrained model (``from_pretrained``) on English-Spanish, with its natural case.
        ``beam_size`` and ``max_len``: as ``translate``'s (checked before any decoding)."""
        self.decoding(beam_size, max_len)
        train_cfg = self.meta.get("train_config") or {}
        if "pretrained" in self.meta:
            train_cfg = _pretrained_task(self.meta)
        if "task" not in train_cfg:
            raise CheckpointError(
                "evaluate: this checkpoint does not say which task it was trained on (no "
                "train_config); translate with it, or evaluate a checkpoint from "
                "`minitransformer train`"
            )
        if str(train_cfg["task"]).startswith("translate"):
            try:
                import sacrebleu  # noqa: F401  (checked before minutes of decoding)
            except ImportError:
                raise ImportError(
                    "evaluate: BLEU needs the package sacrebleu, which is not installed. "
                    "Fix: pip install sacrebleu"
                ) from None
        task = make_task(
            train_cfg["task"], seed=train_cfg.get("seed", 0), **train_cfg.get("task_knobs", {})
        )
        sources = task.sources(split)[:samples]
        refs = task.references(split)[:samples]
        hyps = self.translate(sources, beam_size=beam_size, alpha=alpha, max_len=max_len)
        metrics = {"sentences": len(refs), "exact_match": exact_match(hyps, refs)}
        if task.name.startswith("translate"):
            metrics["bleu"] = bleu(hyps, refs)
        return metrics


def _pretrained_task(meta: dict[str, Any]) -> dict[str, Any]:
    """The test set of a pretrained model: English -> Spanish, when the model says that is
    its pair (tokenizer_config.json's source_lang and target_lang) or says nothing."""
    source, target = meta.get("languages") or (None, None)
    if (source, target) == (None, None):
        warnings.warn(
            f"{meta['pretrained']}: tokenizer_config.json names no languages; evaluating as "
            "English -> Spanish",
            stacklevel=3,
        )
    elif (source, target) != ("en", "es"):
        raise CheckpointError(
            f"evaluate: this library's test set is English -> Spanish, but the model at "
            f"{meta['pretrained']} translates {source} -> {target}; translate with it instead, "
            "or evaluate an opus-mt-en-es folder"
        )
    return {"task": "translate-en-es", "task_knobs": {"lowercase": False}}
