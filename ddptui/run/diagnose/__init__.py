"""Why a run failed: log lines and error events sorted into categories with a cause and a fix.

- :mod:`.catalogue`: every :class:`Category` with its role, cause and fix; :class:`Diagnosis`
  and :class:`~.catalogue.Failure`, the values a diagnosis is given as.
- :mod:`.lines`: :class:`LogLine` and what one line says (:func:`marks_error`, :func:`normalise`).
- :mod:`.torchrun`: torchrun's console lines and its ChildFailedError block.
- :mod:`.diagnoser`: :class:`Diagnoser`, which groups findings and names the first failure.
- :mod:`.limits`: the bounds on what hosts' text may cost (:data:`MAX_GROUPS`, …).
"""

from __future__ import annotations

from ddptui.run.diagnose.catalogue import Category, Diagnosis
from ddptui.run.diagnose.diagnoser import Diagnoser
from ddptui.run.diagnose.limits import MAX_GROUPS, MAX_RANKS_PER_GROUP
from ddptui.run.diagnose.lines import LogLine, marks_error, normalise

__all__ = [
    "MAX_GROUPS",
    "MAX_RANKS_PER_GROUP",
    "Category",
    "Diagnoser",
    "Diagnosis",
    "LogLine",
    "marks_error",
    "normalise",
]
