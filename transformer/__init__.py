"""A readable, paper-faithful, fast PyTorch Transformer (Vaswani et al., 2017)."""

__version__ = "0.1.0"
