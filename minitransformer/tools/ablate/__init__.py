"""Ablations: the paper's Table 3 at toy scale — vary one thing, train briefly, measure.

    minitransformer ablate                        # every variant, a few minutes on 2 cores
    minitransformer ablate --fast --only base,no-dropout --out runs/ablate-fast

Task: the synthetic translation pair (``data/toylang.py``), because it needs what the paper's
task needs — alignment, reordering (verb-final), agreement — and has a real BLEU, while one
run is short enough to repeat eleven times. The copy task would not do: it saturates within
a few hundred steps whatever the variant. Training sentences have ``min_words..max_words``
words (3..10 by default); a second held-out set, **long**, has ``long_min_words..
long_max_words`` (12..15): longer than any sentence seen in training, which is where
learned and sinusoidal positions part ways.

Every variant starts from the same seed (same data, same batch order, same initial weights
where the shapes agree) and changes ONE thing of the base config (tiny sizes d_model 64, h 4,
N 2, d_ff 256, with the paper's P_drop 0.1, ε_ls 0.1, warm-up and post-LN):

    base                 the base config
    heads-1/2/8          h at fixed d_model (d_k = d_v = d_model / h)      (Table 3 row A)
    d_k-4                d_k = d_model/(4h) for queries and keys; d_v kept (row B)
    no-scaling           logits q kᵀ instead of q kᵀ/√d_k, in training and decoding
    no-warmup            lr starts at the peak, then the same 1/√step decay (§5.3 without
                         its ramp)
    no-label-smoothing   ε_ls = 0                                          (row D)
    no-dropout           P_drop = 0                                        (row D)
    learned-positions    a learned position table, randomly initialised    (row E)
    pre-ln               x + Sublayer(LN(x)) instead of LN(x + Sublayer(x))

Metrics, as the paper's: **perplexity** per target token, exp(cross-entropy WITHOUT label
smoothing) under teacher forcing, and corpus **BLEU** (sacreBLEU) of greedy translations, both
on the held-out test split; plus the same on the long set, and the perplexity of training
sentences (eval mode) so the train/held-out gap is visible.

The package, one concept per file: variants.py (the variants and the study's settings),
study.py (the data, training and scoring of each variant, the whole study), report.py
(the Markdown table beside the paper's numbers, the figure, the files written).
"""

from .report import OUTPUTS, PAPER, check_out, markdown_table, plot, write_study
from .study import (
    AblationData,
    WarmupFreeSchedule,
    build_trainer,
    make_data,
    run_ablations,
    run_variant,
    score,
)
from .variants import DEFAULT_VARIANTS, AblationSettings, Variant, select, variants

__all__ = [
    "DEFAULT_VARIANTS", "OUTPUTS", "PAPER", "AblationData", "AblationSettings", "Variant",
    "WarmupFreeSchedule", "build_trainer", "check_out", "make_data", "markdown_table", "plot",
    "run_ablations", "run_variant", "score", "select", "variants", "write_study",
]  # fmt: skip
