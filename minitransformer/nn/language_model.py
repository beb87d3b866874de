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

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import backend, checks
from ..config import TransformerConfig
from ..tensor import Tensor, no_grad
from .blocks import CausalStack, TokenModel
from .gpt2_llama_weights import read_gpt2_llama, write_gpt2_llama
from .inputs import check_ids
from .kv_cache import KVCache
from .layers import Embedding
from .lm_arguments import (
    DEFAULTS,
    Generation,
    check_cache,
    check_cache_batch,
    check_generation,
    lm_config,
)
from .masks import decoder_mask
from .positional import PositionalEncoding
from .sampling import next_tokens, row_generator
from .transformer import DecoderCache, check_capacity

BATCH_ROWS = 64  # prompts decoded together: memory is one batch's, whatever the count

# Set by fast/gpu/decode_graph.py when it is imported (the fast tier sits above nn):
# graph_stepper(lm, prompt, capacity, use_graph) -> (cache, step) or None, generate's
# cached steps replayed from CUDA graphs on a GPU. None here: every step runs eagerly.
graph_stepper: Callable[..., Any] | None = None


class TransformerLM(TokenModel):
    """TransformerLM(vocab=V, **fields, seed=0) or TransformerLM(config=cfg, seed=0).

    ``fields`` are TransformerConfig's (d_model, h, N, d_ff, dropout, max_len, pre_norm,
    learned_positions, tie_embeddings, activation, norm, rotary, gated_ffn, kv_heads, ...;
    the paper's base sizes where left out; label_smoothing 0), and ``block`` ("paper",
    "gpt2" or "llama": config/blocks.py) sets the layer's switches at once, the fields
    given beside it winning. ``config``: a TransformerConfig with decoder_only=True (the
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
        self.cfg = cfg = lm_config(vocab, config, fields)  # validated when made, frozen since
        seed = checks.non_negative_int("TransformerLM", "seed", seed, "pass e.g. seed=0")
        gen = backend.Generator(seed, "cpu")
        D, V = cfg.d_model, cfg.tgt_vocab
        self.embed = Embedding(V, D, generator=gen, _checked=True)
        self.positions = PositionalEncoding(cfg)
        self.decoder = CausalStack(cfg, generator=gen)  # cfg.N Blocks (EncoderLayers)
        self._build_output(cfg, gen)  # W (unless tied), the logits bias, √d_model

    @classmethod
    def preset(cls, name: str, vocab: int, seed: int = 0, block: str | None = None,
               **overrides: Any) -> TransformerLM:  # fmt: skip
        """A named size ("tiny", "small", "base", "big": TransformerConfig's presets) for a
        vocabulary of ``vocab`` tokens; ``block``: None, "paper", "gpt2" or "llama" (the
        layer's switches, config/blocks.py); ``overrides`` set any other field."""
        cfg = TransformerConfig.preset(
            name, block, src_vocab=vocab, tgt_vocab=vocab, decoder_only=True,
            **{**DEFAULTS, **overrides},
        )  # fmt: skip
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
            check_cache(cache, cfg.N)
        offset = cache.offset if cache is not None else 0
        if not checked:
            ids = check_ids("ids", ids, cfg.tgt_vocab, cfg.max_len, self.device, offset)
            check_cache_batch(cache, ids.shape[0])
        T = ids.shape[1]
        # (1, 1, T, offset + T), or the rule Causal() for attention kinds that never form
        # the scores; no padding mask: padding only ever follows a sequence
        mask = decoder_mask(self.cfg.attention, T, ids.device, offset)
        x = self.embedded(self.embed, ids, offset)  # (B, T, D)
        x = self.decoder(x, mask, None if cache is None else cache.self_attn)
        if cache is not None:
            cache.offset += T
        return self.project(x)

    def new_cache(self, capacity: int | None = None) -> DecoderCache:
        """An empty cache for cached decoding: one self-attention KVCache a layer, its
        buffers allocated for ``capacity`` positions (prompt and new tokens, at most
        cfg.max_len; None: grown as needed, nn/kv_cache.py)."""
        capacity = check_capacity("TransformerLM.new_cache", capacity)
        if capacity is not None:
            capacity = min(capacity, self.cfg.max_len)
        layers = [KVCache(static=False, capacity=capacity) for _ in range(self.cfg.N)]
        return DecoderCache(self_attn=layers)

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
        use_graph: bool | str = "auto",
    ) -> list[list[int]]:
        """Continue each prompt by up to ``max_new_tokens`` tokens: a list of id lists, each
        its prompt followed by the new ids, ending early at cfg.eos_id (left out).

        prompt_ids: a list of at most 10,000 prompts (lm_arguments.MAX_PROMPTS), each a
        non-empty list of ids (this library's own text starts with cfg.bos_id), or one
        prompt as a flat list.
        ``temperature``: 0 is greedy; ``top_k``: sample among the k most likely
        (sampling.py); ``seed``: the draws (None: different each call); prompt i draws from
        its own generator, derived from (seed, i), so its text does not depend on the other
        prompts. ``use_cache=False`` recomputes every position at every step instead of
        keeping keys and values: the same tokens, slower (for comparison). Prompts run
        BATCH_ROWS at a time (those of one length together); eval mode, no autograd graph.
        ``use_graph``: "auto" replays each cached step from a CUDA graph on a GPU with the
        fused kernels on (fast/gpu/decode_graph.py); False never; the CPU never does.
        """
        prompts, how = self.check_generation(
            prompt_ids, max_new_tokens, temperature, top_k, seed, use_cache=use_cache
        )
        auto = "'auto' replays each step from a CUDA graph on a GPU"
        use_graph = checks.auto_or_flag("TransformerLM.generate", "use_graph", use_graph, auto)
        return self.continue_prompts(prompts, how, use_graph=use_graph)

    def check_generation(self, prompt_ids: Any, max_new_tokens: int, *settings: Any,
                         **options: Any) -> tuple[list[list[int]], Generation]:  # fmt: skip
        """``generate``'s arguments checked before any work (lm_arguments.check_generation)."""
        return check_generation(self.cfg, prompt_ids, max_new_tokens, *settings, **options)

    def continue_prompts(
        self, prompts: list[list[int]], how: Generation, first_row: int = 0,
        use_graph: bool | str = "auto",
    ) -> list[list[int]]:  # fmt: skip
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
                        new = self._continue(batch, how, rngs, use_graph)
                        for i, ids in zip(chunk, new, strict=True):
                            out[i] = list(prompts[i]) + ids
        finally:
            self.train(was_training)
        return out

    def _continue(self, batch: list[list[int]], how: Generation, rngs: list[Any],
                  use_graph: bool | str = "auto") -> list[list[int]]:  # fmt: skip
        """New ids for prompts of one length (B, L), each row stopping at EOS. The ids live
        in one (B, L + max_new) device array allocated once, each new token written into
        its column (no concatenation per token), and the cache is allocated for them all."""
        B, L, n = len(batch), len(batch[0]), how.max_new
        prompt = backend.asarray(np.asarray(batch, dtype=np.int64), device=self.device)
        xp = backend.namespace(prompt)
        ids = xp.zeros((B, L + n), dtype=prompt.dtype, device=prompt.device)
        ids[:, :L] = prompt
        cache, step = self.new_cache(capacity=L + n) if how.use_cache else None, None
        if how.use_cache and graph_stepper is not None:  # a GPU: replayed from CUDA graphs
            cache, step = graph_stepper(self, prompt, L + n, use_graph) or (cache, None)
        chosen = np.zeros((B, n), dtype=np.int64)  # the new ids, on the host
        done = np.zeros(B, dtype=bool)
        step_in, made = prompt, 0
        for t in range(n):
            if step is not None and t > 0:  # a graph's step (the prompt runs eagerly)
                last = backend.to_numpy(step(step_in))  # (B, V): one read a token
            else:
                logits = self(step_in, cache, checked=True)  # (B, T, V)
                last = backend.to_numpy(logits.data[:, -1, :])  # (B, V): one read a token
            token = next_tokens(last, how.temperature, how.top_k, rngs)  # (B,)
            chosen[:, t], made = token, t + 1
            done |= token == self.cfg.eos_id
            if done.all():
                break
            ids[:, L + t] = backend.asarray(token, device=self.device)  # in place
            step_in = ids[:, L + t : L + t + 1] if how.use_cache else ids[:, : L + t + 1]
        eos = self.cfg.eos_id
        rows = [[int(tok) for tok in row] for row in chosen[:, :made]]
        return [row[: row.index(eos)] if eos in row else row for row in rows]

    def extra_repr(self) -> str:
        c = self.cfg
        return f"decoder-only, d_model={c.d_model}, h={c.h}, N={c.N}, d_ff={c.d_ff}, " \
            f"vocab={c.tgt_vocab}, tied={c.tie_embeddings}"  # fmt: skip

    # ------------------------------------------------------------------ GPT-2's and Llama's files
    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], dtype: str = "float32") -> TransformerLM:
        """The model of a Hugging Face GPT2LMHeadModel or LlamaForCausalLM folder (config.json
        and model.safetensors), in eval mode; ``lm(ids)`` gives transformers' logits. Every
        field and array is checked first (nn/gpt2_llama_config.py, nn/gpt2_llama_weights.py);
        a pad_token_id of null becomes the smallest id that is neither bos nor eos."""
        cfg, state = read_gpt2_llama(path, dtype)
        model = cls(config=cfg)
        model.load_state_dict(state)
        return model.eval()

    def save_pretrained(self, path: str | os.PathLike[str], overwrite: bool = False) -> Path:
        """Write this model as a GPT-2 folder (block "gpt2": LayerNorm, learned positions) or a
        Llama one (block "llama": RMSNorm, rotary, gated FFN) that
        transformers.AutoModelForCausalLM.from_pretrained reads with the same logits; returns
        the folder. A model of neither shape is refused by field name; existing files need
        ``overwrite``."""
        overwrite = checks.flag("save_pretrained", "overwrite", overwrite)
        return write_gpt2_llama(self, path, overwrite)
