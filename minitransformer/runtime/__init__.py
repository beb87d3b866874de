"""What runs around the model: files, locks, checkpoints, processes, a trained model loaded.

    checkpoint/     the checkpoint file: format, reading within bounds, schema checks,
                    ``load_trained`` (``python -m minitransformer.runtime.checkpoint upgrade``)
    runs/           run directories: safe writes, the one-writer lock, the metrics log, resuming
    distributed/    data parallelism over MPI (NCCL on GPUs): ranks, all-reduce, timeouts
    translator.py   ``Translator``: a trained checkpoint that translates text (``mt.Translator``)
    sampler.py      ``TextSampler``: a language model's checkpoint that writes (``mt.TextSampler``)
    pretrained.py   a pretrained model's folder: local, or downloaded from the Hugging Face Hub

Why apart: none of this is the Transformer's math; it is the machinery that keeps a run
safe on disk and brings a trained model back. Each module keeps the floor it had, keyed
``runtime.checkpoint``, ``runtime.runs`` and so on (tests/test_architecture.py):
``runtime.checkpoint`` and ``runtime.runs`` stand low, under ``train`` which writes with
them; ``runtime.translator`` and ``runtime.sampler`` beside ``train``. ``mt.Translator`` and
``mt.TextSampler`` load them on first use.

This file imports nothing: the package is a folder of separate pieces, not a floor.
"""
