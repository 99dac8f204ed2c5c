"""ddptui: a keyboard-driven terminal console for multi-node PyTorch DDP."""

__version__ = "0.1.0"
