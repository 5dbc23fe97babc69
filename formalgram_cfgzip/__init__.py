"""formalgram_cfgzip: lossless token-space compression for grammar-constrained decoding."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
