"""TransformerLM: the decoder-only language model, on the encoder-decoder's own blocks.

Drop the encoder and the cross-attention from the Transformer and what is left predicts the
next token of one sequence (the models after the paper, GPT among them, are this):

    ids (B, T) ─ embed·√d_model + PE ─ dropout ─ N × [masked self-attention, feed-forward]
               ─ (final LayerNorm when pre-LN) ─ h Eᵀ ─► logits (B, T, V)

The LM's stack is made of the same layers as the encoder-decoder's encoder: N EncoderLayers
(blocks.py; ``nn.Block``, the name a GPT reader knows, is that class), each given the
model's config as the encoder's are, and the causal mask: position t attends to positions
0..t only, so logits[:, t] depends on ids[:, :t+1] alone, and one forward pass trains all T
predictions at once (the loss at t is -log p(ids[t+1] | ids[:t+1])). Nothing else tells the
model which way the sequence runs: the mask is the whole story. The embedding E is tied
with the output projection (paper 3.4) unless tie_embeddings=False.

    lm = TransformerLM(vocab=V, d_model=64, h=4, N=2, d_ff=256, max_len=128, dropout=0.0)
    lm = TransformerLM.preset("tiny", vocab=V)          # TransformerConfig's presets
    logits = lm(ids)                                    # (B, T) int ids -> (B, T, V)
    loss = lm.loss(logits, targets)                     # the targets: ids shifted left by one
    lm.generate([[bos, 5, 9]], max_new_tokens=20, temperature=0.8, top_k=10, seed=0)

Its sizes are a TransformerConfig with ``decoder_only=True`` (one vocabulary, no decoder_*
fields), so checkpoints, ``mt.optim.Adam`` and the Trainer treat it as they treat the
Transformer; its default label smoothing is 0 (an LM's loss is the plain cross-entropy,
whose exponential is the perplexity).
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

import numpy as np

from .. import backend, checks
from ..config import TransformerConfig
from ..errors import ArgumentError, ConfigError, ShapeError
from ..tensor import Tensor, no_grad
from .attention import KVCache
from .blocks import CausalStack, TokenModel
from .inputs import check_ids
from .layers import Embedding
from .masks import causal_mask
from .positional import PositionalEncoding
from .sampling import check_sampling, next_tokens, row_generator
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
BATCH_ROWS = 64  # prompts decoded together: memory is one batch's, whatever the count


@dataclasses.dataclass(frozen=True)
class Generation:
    """How ``generate`` continues prompts, its arguments checked (``check_generation``)."""

    max_new: int  # the most tokens added to a prompt
    temperature: float  # 0 = greedy
    top_k: int | None  # None = every token
    seed: int  # row i draws from sampling.row_generator(seed, i)
    use_cache: bool


class TransformerLM(TokenModel):
    """TransformerLM(vocab=V, **fields, seed=0) or TransformerLM(config=cfg, seed=0).

    ``fields`` are TransformerConfig's (d_model, h, N, d_ff, dropout, max_len, pre_norm,
    learned_positions, tie_embeddings, activation, ...; the paper's base sizes where left
    out; label_smoothing 0). ``config``: a TransformerConfig with decoder_only=True (the
    Trainer's and a checkpoint's). Weights drawn from ``seed`` on the host; ``lm.to("cuda")``
    moves them. See the module doc.
    """

    def __init__(
        self,
        vocab: int | None = None,
        *,
        config: TransformerConfig | None = None,
        seed: int = 0,
        **fields: Any,
    ):
        super().__init__()
        self.cfg = cfg = _config(vocab, config, fields)  # validated when made, frozen since
        seed = checks.non_negative_int("TransformerLM", "seed", seed, "pass e.g. seed=0")
        gen = backend.Generator(seed, "cpu")
        D, V = cfg.d_model, cfg.tgt_vocab
        self.embed = Embedding(V, D, generator=gen, _checked=True)
        self.positions = PositionalEncoding(cfg)
        self.decoder = CausalStack(cfg, generator=gen)  # cfg.N Blocks (EncoderLayers)
        self._build_output(cfg, gen)  # W (unless tied), the logits bias, √d_model

    @classmethod
    def preset(cls, name: str, vocab: int, seed: int = 0, **overrides: Any) -> TransformerLM:
        """A named size ("tiny", "small", "base", "big": TransformerConfig's presets) for a
        vocabulary of ``vocab`` tokens; ``overrides`` set any other field."""
        cfg = TransformerConfig.preset(
            name, src_vocab=vocab, tgt_vocab=vocab, decoder_only=True, **{**DEFAULTS, **overrides}
        )
        return cls(config=cfg, seed=seed)

    @property
    def output_embedding(self) -> Embedding:
        """The one embedding E, which a tied model projects with (TokenModel.project)."""
        return self.embed

    # ------------------------------------------------------------------ the forward pass
    def forward(self, ids: Any, cache: DecoderCache | None = None, *,
                checked: bool = False) -> Tensor:  # fmt: skip
        """ids (B, T) int token ids -> logits (B, T, V); logits[:, t] is the model's
        prediction of the token after ids[:, t], from ids[:, :t+1] only.

        With ``cache`` (from ``new_cache()``), ids holds only the NEW positions (usually
        (B, 1)); the earlier positions' keys and values come from the cache, which is
        updated in place. ``checked``: the ids were checked on the host and are on the
        model's device (the Trainer's step).
        """
        cfg = self.cfg
        if checked is not True:
            checks.flag("TransformerLM.forward", "checked", checked)  # True or False
            _check_cache(cache, cfg.N)
        offset = cache.offset if cache is not None else 0
        if not checked:
            ids = check_ids("ids", ids, cfg.tgt_vocab, cfg.max_len, self.device, offset)
            _check_cache_batch(cache, ids.shape[0])
        T = ids.shape[1]
        mask = causal_mask(T, ids.device, offset)  # (1, 1, T, offset + T): no padding mask
        # needed: padding only ever follows a sequence, and no real position looks ahead
        x = self.embedded(self.embed, ids, offset)  # (B, T, D)
        x = self.decoder(x, mask, None if cache is None else cache.self_attn)
        if cache is not None:
            cache.offset += T
        return self.project(x)

    def new_cache(self) -> DecoderCache:
        """An empty cache for cached decoding: one growing self-attention KVCache a layer."""
        return DecoderCache(self_attn=[KVCache(static=False) for _ in range(self.cfg.N)])

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        prompt_ids: Any,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
        *,
        use_cache: bool = True,
    ) -> list[list[int]]:
        """Continue each prompt by up to ``max_new_tokens`` tokens: a list of id lists, each
        its prompt followed by the new ids, ending early at cfg.eos_id (left out).

        prompt_ids: a list of at most MAX_PROMPTS prompts (each a non-empty list of ids; this
        library's own text starts with cfg.bos_id) or one prompt as a flat list.
        ``temperature``: 0 is greedy; ``top_k``: sample among the k most likely
        (sampling.py); ``seed``: the draws (None: different each call); prompt i draws from
        its own generator, derived from (seed, i), so its text does not depend on the other
        prompts. ``use_cache=False`` recomputes every position at every step instead of
        keeping keys and values: the same tokens, slower (for comparison). Prompts run
        BATCH_ROWS at a time (those of one length together); eval mode, no graph.
        """
        prompts, how = self.check_generation(
            prompt_ids, max_new_tokens, temperature, top_k, seed, use_cache=use_cache
        )
        return self.continue_prompts(prompts, how)

    def check_generation(
        self,
        prompt_ids: Any,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
        *,
        use_cache: bool = True,
    ) -> tuple[list[list[int]], Generation]:
        """``generate``'s arguments checked, before any work: the prompts as lists of ints
        and the rest as a Generation (a seed of None drawn here, once)."""
        cfg = self.cfg
        where = "TransformerLM.generate"
        prompts = _prompts(where, prompt_ids)
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

    def continue_prompts(
        self, prompts: list[list[int]], how: Generation, first_row: int = 0
    ) -> list[list[int]]:
        """The work of ``generate`` on prompts and settings ``check_generation`` returned:
        BATCH_ROWS prompts at a time (memory bounded by one batch), prompt i drawing from
        ``row_generator(how.seed, first_row + i)``; ``first_row``: where these prompts
        stand in a longer stream (TextSampler.stream), so a batch's texts are the ones the
        whole stream in one call would give."""
        by_length: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            by_length.setdefault(len(p), []).append(i)
        out: list[list[int]] = [[] for _ in prompts]
        was_training = self.training
        self.eval()
        try:
            with no_grad():
                for rows in by_length.values():
                    for start in range(0, len(rows), BATCH_ROWS):
                        chunk = rows[start : start + BATCH_ROWS]
                        batch = [prompts[i] for i in chunk]
                        rngs = [row_generator(how.seed, first_row + i) for i in chunk]
                        new = self._continue(batch, how, rngs)
                        for i, ids in zip(chunk, new, strict=True):
                            out[i] = list(prompts[i]) + ids
        finally:
            self.train(was_training)
        return out

    def _continue(self, batch: list[list[int]], how: Generation,
                  rngs: list[Any]) -> list[list[int]]:  # fmt: skip
        """New ids for prompts of one length (B, L), each row stopping at EOS."""
        ids = backend.asarray(np.asarray(batch, dtype=np.int64), device=self.device)
        xp = backend.namespace(ids)
        cache = self.new_cache() if how.use_cache else None
        step_in, chosen = ids, []
        done = [False] * len(batch)
        for _ in range(how.max_new):
            logits = self(step_in, cache, checked=True)  # (B, T, V)
            last = backend.to_numpy(logits.data[:, -1, :])  # (B, V): one read a token
            token = next_tokens(last, how.temperature, how.top_k, rngs)  # (B,)
            chosen.append(token)
            done = [d or t == self.cfg.eos_id for d, t in zip(done, token.tolist(), strict=True)]
            if all(done):
                break
            new = backend.asarray(token[:, None], device=self.device)  # (B, 1)
            step_in = new if how.use_cache else xp.concat([step_in, new], axis=1)
        rows = [[int(t[b]) for t in chosen] for b in range(len(batch))]
        eos = self.cfg.eos_id
        return [row[: row.index(eos)] if eos in row else row for row in rows]

    def extra_repr(self) -> str:
        c = self.cfg
        return f"decoder-only, d_model={c.d_model}, h={c.h}, N={c.N}, d_ff={c.d_ff}, " \
            f"vocab={c.tgt_vocab}, tied={c.tie_embeddings}"  # fmt: skip


def _config(vocab: Any, config: Any, fields: dict[str, Any]) -> TransformerConfig:
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
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        guess = difflib.get_close_matches(unknown[0], FIELDS, n=1)
        hint = f" (did you mean {guess[0]!r}?)" if guess else ""
        raise ConfigError(
            f"TransformerLM: unknown field(s) {unknown}{hint}; valid fields: "
            f"{sorted(FIELDS)} (and vocab, config, seed)"
        )
    fields = {**DEFAULTS, **fields}
    return TransformerConfig(src_vocab=vocab, tgt_vocab=vocab, decoder_only=True, **fields)


def _prompts(where: str, prompt_ids: Any) -> list[list[int]]:
    """One prompt (a flat list of ids) or several (at most MAX_PROMPTS), as a list of
    non-empty lists."""
    rows = prompt_ids
    if backend.is_array(prompt_ids):
        _check_count(where, len(prompt_ids) if prompt_ids.ndim >= 2 else 1)  # before tolist
        rows = backend.to_numpy(prompt_ids).tolist()
    if isinstance(rows, (list, tuple)) and rows and all(checks.is_int(t) for t in rows):
        rows = [rows]  # one prompt
    if not isinstance(rows, (list, tuple)) or not rows:
        raise ShapeError(
            f"{where}: prompt_ids must be a list of prompts, each a list of token ids (or one "
            f"flat list), got {checks.short(prompt_ids)}"
        )
    _check_count(where, len(rows))
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


def _check_count(where: str, count: int) -> None:
    """At most MAX_PROMPTS prompts in one call: their texts are held in memory at once."""
    if count > MAX_PROMPTS:
        raise ArgumentError(
            f"{where}: {count:,} prompts are more than the {MAX_PROMPTS:,} one call continues "
            "(their texts are returned at once); pass them a part at a time, or use "
            "TextSampler.stream, which writes any number a batch at a time"
        )


def _check_cache(cache: Any, layers: int) -> None:
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


def _check_cache_batch(cache: DecoderCache | None, batch: int) -> None:
    """The ids continue the cache's rows: the same batch size as its first call."""
    keys = None if cache is None else cache.self_attn[0].k
    if keys is not None and keys.shape[0] != batch:
        raise ShapeError(
            f"TransformerLM.forward: ids have {batch} rows but the cache holds {keys.shape[0]}; "
            "a cache belongs to one batch: make a new one with lm.new_cache()"
        )
