"""Scaling laws at toy scale: train the decoder-only LM at several sizes on one token
budget, and fit a power law to its loss against size and against compute.

    minitransformer scale                          # 5 sizes × 2 seeds, about 5 minutes
    minitransformer scale --fast --out runs/scale-fast

Kaplan et al. (2020, "Scaling Laws for Neural Language Models") found that a language model's
test loss falls as a power of its size when data and compute do not limit it,

    L(N) = (N_c / N)^α_N          α_N ≈ 0.076 (their fit; N: non-embedding parameters),

a straight line on log–log axes, over six orders of magnitude; and that training compute is
about C ≈ 6·N·D FLOPs for D training tokens (2·N per token forward, 4·N backward; attention's
own term, 6·n_layer·n_ctx·d_model per token, left out). Hoffmann et al. (2022, "Training
Compute-Optimal Large Language Models") fitted L(N, D) = E + A/N^α + B/D^β with an
irreducible loss E, and found that for a given compute N and D should grow together.

This package measures the first relation at a scale a laptop can afford: models of 3,000 to
335,000 non-embedding parameters (``study.DEFAULT_SIZES``), each trained on the same
budget of D characters of the English verses (the ``lm`` task, character level), and fits

    ln L_i = ln a − α · ln N_i          (least squares over the sizes, one fit per seed)

(fit.py; an assumed floor E fits ln(L − E) instead). Against compute it fits the frontier:
the least validation loss any size reached within C = 6·N·tokens FLOPs, read off every run's
loss curve. The exponent is reported per seed, with its spread: with five points the fit
says how the loss fell over THIS range at THIS budget, not what a larger model would do —
lesson 18 reads it.

One concept per file: study.py (the sizes and settings, one training run per size and seed,
the whole study), fit.py (the least-squares power law, the compute frontier, the spread over
seeds), report.py (the Markdown table, the figure, the files written), command.py (the
``scale`` command's flags and run).
"""

from . import command
from .fit import (
    MIN_POINTS,
    PowerLaw,
    fit_power_law,
    fit_seed,
    fit_study,
    fits_to_json,
    frontier,
    local_exponents,
    spread,
)
from .report import OUTPUTS, check_out, markdown_table, plot, write_study
from .study import (
    DEFAULT_SIZES,
    FAST_SIZES,
    ScalingSettings,
    Size,
    build_trainer,
    curve_marks,
    estimated_steps,
    held_out_loss,
    make_lm_task,
    non_embedding_parameters,
    peak_lr,
    run_size,
    run_study,
    validation,
)

__all__ = [
    "DEFAULT_SIZES", "FAST_SIZES", "MIN_POINTS", "OUTPUTS", "PowerLaw", "ScalingSettings", "Size",
    "build_trainer", "check_out", "command", "curve_marks", "estimated_steps", "fit_power_law",
    "fit_seed", "fit_study", "fits_to_json", "frontier", "held_out_loss", "local_exponents",
    "make_lm_task", "markdown_table", "non_embedding_parameters", "peak_lr", "plot", "run_size",
    "run_study", "spread", "validation", "write_study",
]  # fmt: skip
