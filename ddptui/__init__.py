"""ddptui: a keyboard-driven terminal console for multi-node PyTorch DDP."""

import time

__version__ = "0.1.0"

STARTED_AT = time.time()
"""When this process began to use ddptui (its first import): where a launch from the command
line starts its timeline, so that the time the command takes to start is in it."""
