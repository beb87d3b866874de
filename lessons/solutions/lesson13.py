"""Reference solutions, lesson 13 (dropout and ablations)."""

import math

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.data.batching import make_batch
from minitransformer.tools import ablate


# Exercise 1: y = x / (1 - p) with probability 1 - p, else 0, so E[y] = x and
# E[y^2] = x^2 / (1 - p); Var[y] = x^2 / (1 - p) - x^2 = x^2 p / (1 - p)
def dropout_variance(x, p):
    return x**2 * p / (1 - p)


# Exercise 2: the paper's metric -- per target token, teacher forcing, no label smoothing --
# in eval mode (or, with eval_mode=False, in training mode: dropout on), putting back the mode
# the model was found in; pads are not targets (ignore_index), and the mean is over all target
# tokens of all sentences (sum of losses / token count), then exp
def perplexity(model, pairs, eval_mode=True):
    was_training = model.training
    model.train(not eval_mode)
    try:
        batch = make_batch(pairs)
        with mt.no_grad():
            logits = model(batch.src, batch.tgt_in)
        loss = F.cross_entropy(
            logits, batch.tgt_out, ignore_index=model.cfg.pad_id, reduction="sum"
        )
        return math.exp(loss.item() / batch.n_tokens)
    finally:
        model.train(was_training)


# Exercise 3: one change, e.g. the paper's row C idea (depth): one more layer than the base
def my_variant():
    return ablate.Variant("N-3", "N 3 layers", model={"N": 3})
