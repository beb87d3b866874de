"""TransformerLM's arguments, checked where they enter (language_model.py reads as the
model; what a caller can get wrong is here):

- ``lm_config``: TransformerLM(vocab=V, block=None, **fields) or config=cfg -> its
  TransformerConfig (an unknown field named with the closest valid one);
- ``check_cache``, ``check_cache_batch``: forward's cache is this model's, for these rows;
- ``check_generation``: generate's prompts (at most MAX_PROMPTS: their texts are returned at
  once) and settings, as lists of ints and a ``Generation``.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from .. import backend, checks
from ..config import TransformerConfig
from ..config.blocks import block_fields
from ..errors import ArgumentError, ConfigError, ShapeError
from .inputs import check_ids
from .sampling import check_sampling
from .transformer import DecoderCache

DEFAULTS = {"label_smoothing": 0.0}  # where TransformerConfig's differ: an LM's loss is the
# plain cross-entropy, whose exponential is the perplexity
SET_BY_THE_MODEL = ("src_vocab", "tgt_vocab", "decoder_only")  # vocab=V sets these
FIELDS = tuple(
    f.name for f in dataclasses.fields(TransformerConfig) if f.name not in SET_BY_THE_MODEL
)
"""The keyword arguments TransformerLM(vocab=V, ...) takes besides vocab, config and seed
(decoder_N, decoder_h and decoder_d_ff among them: TransformerConfig explains why an LM
leaves them unset)."""
MAX_PROMPTS = 10_000  # prompts one generate call continues: its texts are returned at once


@dataclasses.dataclass(frozen=True)
class Generation:
    """How ``generate`` continues prompts, its arguments checked (``check_generation``)."""

    max_new: int  # the most tokens added to a prompt
    temperature: float  # 0 = greedy
    top_k: int | None  # None = every token
    seed: int  # row i draws from sampling.row_generator(seed, i)
    use_cache: bool


def check_generation(
    cfg: TransformerConfig,
    prompt_ids: Any,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    *,
    use_cache: bool = True,
) -> tuple[list[list[int]], Generation]:
    """TransformerLM.generate's arguments checked, before any work: the prompts as lists
    of ints and the rest as a Generation (a seed of None drawn here, once)."""
    where = "TransformerLM.generate"
    prompts = prompt_lists(where, prompt_ids)
    max_new = checks.non_negative_int(where, "max_new_tokens", max_new_tokens,
                                      "the most tokens to add to each prompt")  # fmt: skip
    longest = max(len(p) for p in prompts)
    if longest + max_new > cfg.max_len:
        raise ArgumentError(
            f"{where}: max_new_tokens = {max_new} is too many: a prompt of {longest} "
            f"tokens plus {max_new} new ones is {longest + max_new} positions, more than "
            f"the model's {cfg.max_len} positions; give max_new_tokens <= "
            f"{max(cfg.max_len - longest, 0)}, or a shorter prompt"
        )
    temperature, top_k, seed = check_sampling(where, temperature, top_k, seed, cfg.tgt_vocab)
    use_cache = checks.flag(where, "use_cache", use_cache)
    by_length: dict[int, list[list[int]]] = {}
    for p in prompts:
        by_length.setdefault(len(p), []).append(p)
    for group in by_length.values():  # the ids checked on the host, once
        checked = check_ids("prompt_ids", group, cfg.tgt_vocab, cfg.max_len, "cpu")
        for p, ids in zip(group, backend.to_numpy(checked).tolist(), strict=True):
            p[:] = ids  # plain ints from here on
    return prompts, Generation(max_new, temperature, top_k, seed, use_cache)


def lm_config(vocab: Any, config: Any, fields: dict[str, Any]) -> TransformerConfig:
    """The model's TransformerConfig: ``config`` as given, or built from vocab and fields."""
    if config is not None:
        if vocab is not None or fields:
            raise ArgumentError(
                "TransformerLM: give either config=TransformerConfig(...) or vocab=V with "
                f"sizes, not both (got vocab={vocab!r} and {sorted(fields)})"
            )
        if not isinstance(config, TransformerConfig) or config.decoder_only is not True:
            raise ArgumentError(
                f"TransformerLM: config must be a TransformerConfig with decoder_only=True, "
                f"got {checks.short(config)}; or pass vocab=V and the sizes"
            )
        return config  # validated when it was made, frozen since
    if vocab is None:
        raise ArgumentError(
            "TransformerLM: vocab is required (the number of token ids), e.g. "
            "TransformerLM(vocab=100, d_model=64, h=4, N=2, d_ff=256)"
        )
    for name in SET_BY_THE_MODEL:
        if name in fields:
            raise ArgumentError(
                f"TransformerLM: {name} is set by the model itself; give vocab=V instead"
            )
    unknown = sorted(set(fields) - set(FIELDS) - {"block"})
    if unknown:
        guess = difflib.get_close_matches(unknown[0], FIELDS, n=1)
        hint = f" (did you mean {guess[0]!r}?)" if guess else ""
        raise ConfigError(
            f"TransformerLM: unknown field(s) {unknown}{hint}; valid fields: "
            f"{sorted(FIELDS)} (and vocab, config, seed)"
        )
    block = fields.pop("block", None)  # the paper's, GPT-2's or Llama's switches, overridable
    switches = {} if block is None else block_fields("TransformerLM", block)
    fields = {**DEFAULTS, **switches, **fields}
    return TransformerConfig(src_vocab=vocab, tgt_vocab=vocab, decoder_only=True, **fields)


def prompt_lists(where: str, prompt_ids: Any) -> list[list[int]]:
    """One prompt (a flat list of ids) or several (at most MAX_PROMPTS), as a list of
    non-empty lists."""
    rows = prompt_ids
    if backend.is_array(prompt_ids):
        check_count(where, len(prompt_ids) if prompt_ids.ndim >= 2 else 1)  # before tolist
        rows = backend.to_numpy(prompt_ids).tolist()
    if isinstance(rows, (list, tuple)) and rows and all(checks.is_int(t) for t in rows):
        rows = [rows]  # one prompt
    if not isinstance(rows, (list, tuple)) or not rows:
        raise ShapeError(
            f"{where}: prompt_ids must be a list of prompts, each a list of token ids (or one "
            f"flat list), got {checks.short(prompt_ids)}"
        )
    check_count(where, len(rows))
    prompts = []
    for k, row in enumerate(rows):
        if not isinstance(row, (list, tuple)) or not row:
            raise ShapeError(
                f"{where}: prompt {k} must be a non-empty list of token ids, got "
                f"{checks.short(row)}; start a prompt with the model's bos_id "
                "to generate from nothing"
            )
        prompts.append(list(row))
    return prompts


def check_count(where: str, count: int) -> None:
    """At most MAX_PROMPTS prompts in one call: their texts are held in memory at once."""
    if count > MAX_PROMPTS:
        raise ArgumentError(
            f"{where}: {count:,} prompts are more than the {MAX_PROMPTS:,} one call continues "
            "(their texts are returned at once); pass them a part at a time (for many samples "
            "of a few prompts, TextSampler.stream yields the texts a batch at a time)"
        )


def check_cache(cache: Any, layers: int) -> None:
    """forward's ``cache``: None, or a DecoderCache of this model (``new_cache()``)."""
    where = "TransformerLM.forward"
    if cache is None:
        return
    if not isinstance(cache, DecoderCache):
        raise ArgumentError(
            f"{where}: cache must be None or the DecoderCache of lm.new_cache(), got "
            f"{type(cache).__name__} ({checks.short(cache)}); the second argument is the "
            "cache, not targets (lm.loss(logits, targets) takes those)"
        )
    if len(cache.self_attn) != layers or cache.cross_attn or not checks.is_int(cache.offset):
        raise ArgumentError(
            f"{where}: this cache was not made by this model's new_cache() (it has "
            f"{len(cache.self_attn)} self-attention layers, the model {layers}); make one "
            "with lm.new_cache() for each new batch of prompts"
        )
    checks.non_negative_int(where, "cache.offset", cache.offset, "the positions decoded so far")


def check_cache_batch(cache: DecoderCache | None, batch: int) -> None:
    """The ids continue the cache's rows: the same batch size as its first call."""
    rows = None if cache is None else cache.self_attn[0].rows
    if rows is not None and rows != batch:
        raise ShapeError(
            f"TransformerLM.forward: ids have {batch} rows but the cache holds {rows}; "
            "a cache belongs to one batch: make a new one with lm.new_cache()"
        )
