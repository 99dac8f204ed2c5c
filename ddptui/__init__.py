"""ddptui: a keyboard-driven terminal console for multi-node PyTorch DDP."""

import time
import warnings

# cryptography 51 (as CI installs it) deprecates DSA, and asyncssh, which still reads DSA keys,
# names those classes as it is imported: five warnings on the stderr of every command that
# reaches SSH, about asyncssh's code rather than the user's keys; nothing a user can act on.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh\.")

__version__ = "0.1.0"

STARTED_AT = time.time()
"""When this process began to use ddptui (its first import): where a launch from the command
line starts its timeline, so that the time the command takes to start is in it."""
