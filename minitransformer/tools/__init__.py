"""The tools: what measures the library and what studies a trained model, kept apart from it.

Measuring (how fast, how many calls, what the GPU ran):

    bench/        ``minitransformer bench``: training steps beside PyTorch, decoding, data
                  parallelism (``python -m minitransformer.tools.bench``)
    callcount.py  the Python, array and CuPy calls of one training step, and the GPU's kernels
                  (``python -m minitransformer.tools.callcount``)
    cupti.py      CUPTI through ctypes: the kernels and copies a GPU ran inside a block
    gpucheck/     one command that measures the GPU path and writes one report
                  (``python -m minitransformer.tools.gpucheck --out DIR``)
    efficient_attention/
                  attention below n²: one layer's time and memory for full, blocked, local,
                  strided and linear attention, their growth and crossover
                  (``python -m minitransformer.tools.efficient_attention.cost``), and the
                  quality each costs

Studies and figures (what a model learned, how it scales):

    ablate/       the paper's Table 3 at toy scale (``minitransformer ablate``)
    scaling/      the language model's loss against its size (``minitransformer scale``)
    heads/        what the attention heads do: statistics, importance, gates
    explorer/     a translation's attention as a page and a grid (``minitransformer attention``)
    viz/          figures: attention maps, positional encodings, the schedule, training curves

Why apart: a learner opens ``minitransformer/`` to read how the Transformer works (tensor.py,
function.py, ops/, nn/, optim/, train/); these are the instruments around it. They stay in
the same package (one install, one version, the CLI's commands) and on the floors that
tests/test_architecture.py checks: each tool keeps the floor it had, keyed ``tools.bench``,
``tools.viz`` and so on; ``train`` draws its plots with ``tools.viz``, which stands below it.
``import minitransformer`` loads none of them; the command line does.

This file imports nothing: the package is a folder of separate tools, not a floor.
"""
