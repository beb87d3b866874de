"""Evaluating a model on a task's split: how well it predicts each next token (teacher
forcing) and how well it translates a whole sentence (greedy decoding).

    metrics = evaluate(model, task, "valid", samples=200, label_smoothing=0.1)
    # {"loss": 0.41, "token_acc": 0.93, "exact_match": 0.71, "bleu": 64.2}

- ``loss``: the label-smoothed cross-entropy per non-pad target token (smoothed like the
  training loss, so the two compare), summed over the batches, divided by the token count.
  Under smoothing it cannot reach 0: its floor is ``smoothed_loss_floor(ε, V)``.
- ``token_acc``: the share of non-pad target tokens where argmax(logits) is the reference.
- ``exact_match``: the share of greedily decoded sentences equal to their reference.
- ``bleu``: corpus BLEU of the decoded sentences (translation tasks, when sacrebleu is
  installed; left out otherwise).

``showcase`` picks a held-out example the model gets right (the attention figure's), and
``smoothed_loss_floor`` is the least loss label smoothing allows (what the lines print).

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


SHOWCASE = 16
"""How many held-out examples ``showcase`` looks among for one the model gets right."""


def showcase(
    model: Any, task: Task, split: str, index: int | None = None, *, device: str = "cpu"
) -> tuple[int, list[int], bool, int]:
    """An example of ``split`` to show the model at work: the first of the first SHOWCASE
    (or just ``index``) whose greedy output is the reference, decoded in one batch, else
    the first of them. Returns (its index, the output ids, whether right, how many looked
    at)."""
    pairs, refs = task.splits[split], task.references(split)
    looked = [index] if index is not None else list(range(min(SHOWCASE, len(pairs))))
    src = backend.asarray(make_batch([(pairs[i][0], []) for i in looked]).src, device=device)
    outputs = greedy_decode(model, src, max_len=task.max_len + 1)
    right = [k for k, i in enumerate(looked) if task.detokenize(outputs[k]) == refs[i]]
    k = right[0] if right else 0
    return looked[k], list(outputs[k]), bool(right), len(looked)


def smoothed_loss_floor(label_smoothing: float, vocab: int) -> float:
    """The least label-smoothed cross-entropy a model can reach over ``vocab`` classes.

    The loss op (ops/loss.py) spreads ε over every class, pad included (pad *targets* are
    ignored, the pad *class* is not): q_c = (1 - ε)[c = t] + ε/V. The cross-entropy
    -Σ q_c log p_c is least at p = q (Gibbs), where it is q's entropy

        H(q) = -a log a - (V - 1) b log b,   a = 1 - ε + ε/V,  b = ε/V

    (finite logits reach it: logits = log q). 0 when ε = 0; 0.6163 at ε 0.1, V 24 (copy).
    """
    eps, v = float(label_smoothing), int(vocab)
    if eps <= 0 or v < 2:
        return 0.0
    a, b = 1.0 - eps + eps / v, eps / v
    return -a * math.log(a) - (v - 1) * b * math.log(b)


def _summed_loss(logits: Any, target: Any, label_smoothing: float, pad_id: int) -> float:
    """The (label-smoothed) cross-entropy summed over the non-pad targets, as a number."""
    return F.cross_entropy(
        logits, target, label_smoothing=label_smoothing, ignore_index=pad_id, reduction="sum"
    ).item()
