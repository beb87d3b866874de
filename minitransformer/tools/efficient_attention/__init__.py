"""Attention below n², measured: what the efficient kinds cost, and what they cost in quality.

Two tools, one per question of issue 44:

    cost      ``python -m minitransformer.tools.efficient_attention.cost``: the time and
              peak memory of one attention layer's forward + backward (one head, d = 64,
              float32, CPU) for full, blocked, local, strided and linear attention at
              T = 256 ... 16,384; how fast each grows (the fitted exponent) and from which
              length each beats full attention (cost.py; measure.py, fit.py, report.py)
    quality   full against each kind at equal steps on a task that needs long context
              (quality.py, recall.py, quality_report.py)

What the two commands share (the one-line parser, the flag types, --out checked and
written, the exit statuses) is command.py.

This file imports nothing: each tool loads only what it needs.
"""
