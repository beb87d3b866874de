"""Reference solutions, lesson 13 (dropout and ablations)."""

from minitransformer import ablate


# Exercise 1: y = x / (1 - p) with probability 1 - p, else 0, so E[y] = x and
# E[y^2] = x^2 / (1 - p); Var[y] = x^2 / (1 - p) - x^2 = x^2 p / (1 - p)
def dropout_variance(x, p):
    return x**2 * p / (1 - p)


# Exercise 2: encoder layers have 2 sub-layers, decoder layers 3 (self-attention,
# cross-attention, feed-forward), each with dropout on its output; plus the dropout on the
# embeddings + positions at the input of each stack
def n_dropout_places(N_enc, N_dec):
    return 2 * N_enc + 3 * N_dec + 2


# Exercise 3: one change, e.g. the paper's row C idea (depth): one more layer than the base
def my_variant():
    return ablate.Variant("N-3", "N 3 layers", model={"N": 3})
