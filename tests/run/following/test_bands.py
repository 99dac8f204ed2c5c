"""The loss across ranks, step by step (pure): what the chart draws instead of 1,024 lines."""

from __future__ import annotations

import itertools

from ddptui.run.following.bands import BAND_POINTS, LAG_STEPS, Band, LossBands


def test_a_step_closes_once_every_rank_said_its_loss() -> None:
    bands = LossBands()
    for loss in (3.0, 1.0, 2.0):
        bands.add(10, loss, 4)
    assert not bands.bands
    assert bands.points() == [Band(10, 1.0, 2.0, 3.0, 3)]
    bands.add(10, 9.0, 4)
    assert list(bands.bands) == [Band(10, 1.0, 2.5, 9.0, 4)]
    # A loss for a closed step changes nothing drawn.
    bands.add(10, 100.0, 4)
    assert bands.points() == [Band(10, 1.0, 2.5, 9.0, 4)]


def test_a_lagging_rank_is_not_waited_for_past_the_lag() -> None:
    bands = LossBands()
    for step in range(1, LAG_STEPS + 3):
        for rank in range(3):  # rank 3 of 4 says nothing
            bands.add(step, float(rank), 4)
    closed = [band.step for band in bands.bands]
    assert closed == [1, 2]
    assert all(band.ranks == 3 and band.median == 1.0 for band in bands.bands)
    assert [band.step for band in bands.points()] == list(range(1, LAG_STEPS + 3))


def test_the_bands_stay_within_their_points_however_long_the_run() -> None:
    bands = LossBands()
    steps = 5 * BAND_POINTS
    for step in range(1, steps + 1):
        for rank in range(2):
            bands.add(step, 1.0 / step + rank, 2)
    kept = [band.step for band in bands.bands]
    assert len(kept) <= BAND_POINTS
    assert kept[0] == 1 and kept[-1] > steps - 8
    # Evenly thinned: every point as far from the last as the stride.
    gaps = {b - a for a, b in itertools.pairwise(kept)}
    assert len(gaps) == 1, gaps


def test_a_resume_takes_the_steps_after_its_checkpoint_again() -> None:
    bands = LossBands()
    for step in range(1, 31):
        bands.add(step, 5.0, 1)
    bands.rewind(20)
    assert bands.points()[-1].step == 20
    bands.add(21, 1.0, 1)
    assert bands.points()[-1] == Band(21, 1.0, 1.0, 1.0, 1)
