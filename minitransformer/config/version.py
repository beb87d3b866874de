"""The library's version (written into every checkpoint's metadata)."""

__version__ = "0.1.0"
