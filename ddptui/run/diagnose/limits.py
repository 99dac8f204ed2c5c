"""The bounds on what hosts' text may cost.

Everything diagnosed came from hosts: lines are cut to :data:`MAX_LINE_CHARS`, memory is bounded
(:data:`MAX_GROUPS` groups, :data:`MAX_STREAMS` followed streams, :data:`MAX_OBSERVATIONS`
failures kept for ordering), and text stays raw (sanitise it to show it).
"""

from __future__ import annotations

from typing import Final

MAX_LINE_CHARS: Final = 4096
MAX_ERROR_FILE_CHARS: Final = 1 << 20
"""An ``error.json`` longer than this is not read (torch's are a few KiB: message + stack)."""
MAX_GROUPS: Final = 200
MAX_STREAMS: Final = 4096
MAX_OBSERVATIONS: Final = 512
"""Per role (root causes, consequences, reports): the earliest are kept, one per rank and kind."""
MAX_RANKS_PER_GROUP: Final = 4096
MAX_HOSTS_PER_GROUP: Final = 256
MAX_MESSAGE_CHARS: Final = 300
MAX_EXAMPLE_CHARS: Final = 1000
MAX_TRACEBACK_LINES: Final = 2000
"""A traceback (or torchrun block) longer than this is given up on; a later one starts fresh."""
MAX_KEPT_TRACEBACK_LINES: Final = 64
MAX_KEPT_TRACEBACK_CHARS: Final = 1000
"""Of a root cause's traceback in torchrun's block, only the end is kept, cut short: it is read
for its exception, and every followed stream may be in the middle of one."""
