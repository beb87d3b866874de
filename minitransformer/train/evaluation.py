"""Evaluating a model on a task's split: how well it predicts each next token (teacher
forcing) and how well it translates a whole sentence (greedy decoding).

    metrics = evaluate(model, task, "valid", samples=200, label_smoothing=0.1)
    # {"loss": 0.41, "token_acc": 0.93, "exact_match": 0.71, "bleu": 64.2}

- ``loss``: the label-smoothed cross-entropy per non-pad target token (smoothed like the
  training loss, so the two compare), summed over the batches, divided by the token count.
- ``token_acc``: the share of non-pad target tokens where argmax(logits) is the reference.
- ``exact_match``: the share of greedily decoded sentences equal to their reference.
- ``bleu``: corpus BLEU of the decoded sentences (translation tasks, when sacrebleu is
  installed; left out otherwise).

A language model (``model.cfg.decoder_only``, the ``lm`` task) has nothing to decode: its
metrics are ``loss``, ``token_acc``, ``perplexity`` (exp of the plain cross-entropy per
token) and the n-gram baselines' loss on the same sequences, ``unigram_loss`` and
``bigram_loss`` (data/ngram.py), in the same nats per token.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from .. import functional as F
from ..data.batching import make_batch
from ..data.metrics import bleu, exact_match
from ..data.ngram import task_baselines
from ..data.tasks import Task
from ..decode import greedy_decode
from ..tensor import no_grad


def evaluate(
    model: Any,
    task: Task,
    split: str = "valid",
    samples: int | None = None,
    *,
    label_smoothing: float = 0.1,
    device: str = "cpu",
) -> dict[str, float]:
    """Loss and token accuracy (teacher forcing) and greedy exact-match / BLEU on the first
    ``samples`` pairs of ``split`` (all when None), in batches of 100.

    Leaves a training run untouched: the model's train/eval mode and the dropout generator's
    state on ``device`` are restored afterwards, so a run with evaluations draws the same
    masks as one without.
    """
    lm = bool(model.cfg.decoder_only)
    pairs = task.splits[split][: samples or None]
    refs = task.references(split)[: len(pairs)]
    pad_id = model.cfg.pad_id
    generator = backend.default_generator(device)
    rng_state = generator.state()
    was_training = model.training
    model.eval()
    total, plain, correct, count, hyps = 0.0, 0.0, 0, 0, []
    try:
        with no_grad():
            for start in range(0, len(pairs), 100):
                batch = make_batch(pairs[start : start + 100])
                src = backend.asarray(batch.src, device=device)
                tgt_in = backend.asarray(batch.tgt_in, device=device)
                logits = model(tgt_in) if lm else model(src, tgt_in)
                target = backend.asarray(batch.tgt_out, device=device)
                total += _summed_loss(logits, target, label_smoothing, pad_id)
                if lm and label_smoothing:  # the perplexity is the plain cross-entropy's
                    plain += _summed_loss(logits, target, 0.0, pad_id)
                pred = backend.to_numpy(logits.data).argmax(-1)
                mask = batch.tgt_out != pad_id
                correct += int(((pred == batch.tgt_out) & mask).sum())
                count += int(mask.sum())
                if not lm:
                    for ids in greedy_decode(model, src, max_len=task.max_len + 1):
                        hyps.append(task.detokenize(ids))
    finally:
        model.train(was_training)
        generator.set_state(rng_state)
    metrics = dict(loss=total / max(count, 1), token_acc=correct / max(count, 1))
    if lm:
        nll = (plain if label_smoothing else total) / max(count, 1)  # plain: total when ε = 0
        metrics["perplexity"] = math.exp(min(nll, 700.0))
        baselines = task_baselines(task, split, samples)
        metrics["unigram_loss"] = baselines["unigram"]
        metrics["bigram_loss"] = baselines["bigram"]
        return metrics
    metrics["exact_match"] = exact_match(hyps, refs)
    if task.name.startswith("translate"):
        try:
            metrics["bleu"] = bleu(hyps, refs)
        except ImportError:  # an optional package: the run goes on without BLEU
            pass
    return metrics


def _summed_loss(logits: Any, target: Any, label_smoothing: float, pad_id: int) -> float:
    """The (label-smoothed) cross-entropy summed over the non-pad targets, as a number."""
    return F.cross_entropy(
        logits, target, label_smoothing=label_smoothing, ignore_index=pad_id, reduction="sum"
    ).item()
