"""A failure made now on the test bed (real sshd, real torchrun, gloo) is diagnosed rightly.

The recordings in tests/fixtures/gloo/ were made by the same code; this test makes sure the
diagnosis still holds for what this machine's torch writes today.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.run.diagnose import Category, Diagnoser
from tests.fixtures.gloo.record import record
from tests.helpers import check_first_failure, replay
from tests.testbed import TestBed

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_a_rank_sigkilled_mid_all_reduce_is_named_with_its_node(
    testbed: TestBed, tmp_path: Path
) -> None:
    record("sigkill-mid-allreduce", testbed, tmp_path)
    diagnoser = Diagnoser()
    replayed = replay(diagnoser, tmp_path)
    check_first_failure(diagnoser, replayed)
    failure = diagnoser.first_failure()
    assert failure is not None and failure.host == testbed.hosts[1].hostname
    lost = [d for d in diagnoser.diagnoses() if d.category is Category.PEER_LOST]
    assert {rank for d in lost for rank in d.ranks} >= {0, 1}, "node 0's ranks lost their peer"
