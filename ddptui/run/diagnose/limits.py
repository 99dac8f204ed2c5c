"""The bounds on what hosts' text may cost.

Everything diagnosed came from hosts: lines are cut to :data:`MAX_LINE_CHARS`, memory is bounded
(:data:`MAX_GROUPS` groups, :data:`MAX_STREAMS` followed streams, :data:`MAX_OBSERVATIONS`
failures kept for ordering), and text stays raw (sanitise it to show it).

One :class:`~ddptui.run.diagnose.Diagnoser` serves the whole run, and these bound it whatever
the number of hosts (measured with tracemalloc, text in ASCII):

- groups: :data:`MAX_GROUPS`, each with its message, cause and example and up to
  :data:`MAX_RANKS_PER_GROUP` ranks and :data:`MAX_HOSTS_PER_GROUP` hosts: 52 MiB when every
  one is full (a real run's groups name a few ranks each);
- streams in the middle of something: :data:`MAX_STREAMS`, each holding at most one entry of
  torchrun's report, its last :data:`MAX_KEPT_TRACEBACK_LINES` traceback lines of at most
  :data:`MAX_KEPT_TRACEBACK_CHARS` characters (66 KiB): 270 MiB when every one is in such an
  entry. The model lets a host open only its own ranks' streams (three a rank, and its
  torchrun's), so 8 ranks cost 1.6 MiB, and 64 hosts of 8 ranks 105 MiB;
- ranks located (node and local rank → rank), ranks' attempts and the workers torchrun ended:
  :data:`MAX_STREAMS` each, about 2 MiB together; observations: three roles ×
  :data:`MAX_OBSERVATIONS`.
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
