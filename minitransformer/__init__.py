"""minitransformer: the Transformer of "Attention Is All You Need", from scratch on NumPy."""

__version__ = "0.1.0"
