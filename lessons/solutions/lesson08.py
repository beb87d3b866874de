"""Reference solutions, lesson 08 (encoder-decoder)."""

import numpy as np

import minitransformer as mt


# Exercise 1: each row shifted right (reads <bos> + target, predicts target + <eos>), every row
# padded to the longest target + 1
def make_decoder_io(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 1
    tgt_in = np.full((len(targets), T), pad_id)
    tgt_out = np.full((len(targets), T), pad_id)
    for b, t in enumerate(targets):
        tgt_in[b, : len(t) + 1] = [bos_id, *t]
        tgt_out[b, : len(t) + 1] = [*t, eos_id]
    return tgt_in, tgt_out


# Exercise 2: append the new key and value to the caches (positions 0..t, in order), then
# attend with the one new query over all t + 1 keys: no mask, since the new token is the latest
# position and every cached key lies at or before it
def cached_attention_step(q, k, v, k_cache, v_cache):
    k_cache = np.concatenate([k_cache, k], axis=2)  # (B, H, t + 1, d_k)
    v_cache = np.concatenate([v_cache, v], axis=2)  # (B, H, t + 1, d_k)
    scores = q @ np.swapaxes(k_cache, -1, -2) / np.sqrt(q.shape[-1])  # (B, H, 1, t + 1)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    out = (e / e.sum(axis=-1, keepdims=True)) @ v_cache  # (B, H, 1, d_k)
    return out, k_cache, v_cache


# Exercise 3
def greedy_batch(model, src, max_len):
    cfg = model.cfg
    B = src.shape[0]
    with mt.no_grad():
        memory = model.encode(src)  # (B, S, D), once
        cache = model.new_cache()
        last = np.full((B, 1), cfg.bos_id)  # (B, 1): the token fed at this step
        outputs = [[] for _ in range(B)]
        done = np.zeros(B, dtype=bool)
        for _ in range(max_len):
            logits = model.decode(last, memory, src, cache).numpy()[:, -1].copy()  # (B, V)
            logits[:, [cfg.pad_id, cfg.bos_id]] = -np.inf
            nxt = logits.argmax(-1)  # (B,)
            nxt[done] = cfg.pad_id  # finished sentences are fed <pad>
            for b in np.nonzero(~done & (nxt != cfg.eos_id))[0]:
                outputs[b].append(int(nxt[b]))
            done |= nxt == cfg.eos_id
            if done.all():
                break
            last = nxt[:, None]
    return outputs
