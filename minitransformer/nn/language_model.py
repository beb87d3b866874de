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

from typing import Any

from .. import backend, checks
from ..config import TransformerConfig
from ..errors import ArgumentError, ShapeError
from ..tensor import Tensor, no_grad
from .attention import KVCache
from .blocks import CausalStack, TokenModel
from .inputs import check_ids
from .layers import Embedding
from .masks import causal_mask
from .positional import PositionalEncoding
from .sampling import check_sampling, next_tokens
from .transformer import DecoderCache

DEFAULTS = {"label_smoothing": 0.0}  # where TransformerConfig's differ: an LM's loss is the
# plain cross-entropy, whose exponential is the perplexity


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
        offset = cache.offset if cache is not None else 0
        if not checked:
            ids = check_ids("ids", ids, cfg.tgt_vocab, cfg.max_len, self.device, offset)
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

        prompt_ids: a list of prompts (each a non-empty list of ids; this library's own
        text starts with cfg.bos_id) or one prompt as a flat list. ``temperature``: 0 is
        greedy; ``top_k``: sample among the k most likely (sampling.py); ``seed``: the
        draws (None: different each call). ``use_cache=False`` recomputes every position
        at every step instead of keeping keys and values: the same tokens, slower (for
        comparison). Prompts of one length run as one batch; eval mode, no graph.
        """
        cfg = self.cfg
        where = "TransformerLM.generate"
        prompts = _prompts(where, prompt_ids)
        max_new = checks.non_negative_int(where, "max_new_tokens", max_new_tokens,
                                          "the most tokens to add to each prompt")  # fmt: skip
        longest = max(len(p) for p in prompts)
        if longest + max_new > cfg.max_len:
            raise ArgumentError(
                f"{where}: a prompt of {longest} tokens plus max_new_tokens = {max_new} is "
                f"{longest + max_new} positions, more than the model's max_len of "
                f"{cfg.max_len}; give max_new_tokens <= {max(cfg.max_len - longest, 0)} or "
                "a shorter prompt"
            )
        temperature, top_k, rng = check_sampling(where, temperature, top_k, seed, cfg.tgt_vocab)
        use_cache = checks.flag(where, "use_cache", use_cache)
        by_length: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            by_length.setdefault(len(p), []).append(i)
        out: list[list[int]] = [[] for _ in prompts]
        was_training = self.training
        self.eval()
        try:
            with no_grad():
                for rows in by_length.values():
                    batch = [prompts[i] for i in rows]
                    new = self._continue(batch, max_new, temperature, top_k, rng, use_cache)
                    for i, ids in zip(rows, new, strict=True):
                        out[i] = list(prompts[i]) + ids
        finally:
            self.train(was_training)
        return out

    def _continue(self, batch: list[list[int]], max_new: int, temperature: float,
                  top_k: int | None, rng: Any, use_cache: bool) -> list[list[int]]:  # fmt: skip
        """New ids for prompts of one length (B, L), each row stopping at EOS."""
        ids = check_ids("prompt_ids", batch, self.cfg.tgt_vocab, self.cfg.max_len, self.device)
        xp = backend.namespace(ids)
        cache = self.new_cache() if use_cache else None
        step_in, chosen = ids, []
        done = [False] * len(batch)
        for _ in range(max_new):
            logits = self(step_in, cache, checked=True)  # (B, T, V)
            last = backend.to_numpy(logits.data[:, -1, :])  # (B, V): one read a token
            token = next_tokens(last, temperature, top_k, rng)  # (B,)
            chosen.append(token)
            done = [d or t == self.cfg.eos_id for d, t in zip(done, token.tolist(), strict=True)]
            if all(done):
                break
            new = backend.asarray(token[:, None], device=self.device)  # (B, 1)
            step_in = new if use_cache else xp.concat([step_in, new], axis=1)
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
    for name in ("src_vocab", "tgt_vocab", "decoder_only"):
        if name in fields:
            raise ArgumentError(
                f"TransformerLM: {name} is set by the model itself; give vocab=V instead"
            )
    fields = {**DEFAULTS, **fields}
    return TransformerConfig(src_vocab=vocab, tgt_vocab=vocab, decoder_only=True, **fields)


def _prompts(where: str, prompt_ids: Any) -> list[list[int]]:
    """One prompt (a flat list of ids) or several, as a list of non-empty lists."""
    rows = backend.to_numpy(prompt_ids).tolist() if backend.is_array(prompt_ids) else prompt_ids
    if isinstance(rows, (list, tuple)) and rows and all(checks.is_int(t) for t in rows):
        rows = [rows]  # one prompt
    if not isinstance(rows, (list, tuple)) or not rows:
        raise ShapeError(
            f"{where}: prompt_ids must be a list of prompts, each a list of token ids (or one "
            f"flat list), got {checks.short(prompt_ids)}"
        )
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
