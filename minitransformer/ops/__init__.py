"""The differentiable ops, one family per file. Use them through ``minitransformer.functional``."""
