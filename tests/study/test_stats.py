"""Study statistics against hand-computed values (medians, bootstrap intervals, Eq. 2)."""

from __future__ import annotations

import pytest

from greenckpt.study.stats import eq2, median_ci


def test_median_and_its_interval() -> None:
    one = median_ci([4.0])
    assert (one.median, one.low, one.high, one.n) == (4.0, None, None, 1)
    same = median_ci([2.0, 2.0, 2.0])
    assert (same.median, same.low, same.high) == (2.0, 2.0, 2.0)
    spread = median_ci([1.0, 2.0, 3.0, 4.0, 100.0])
    assert spread.median == 3.0
    assert spread.low is not None and spread.high is not None
    assert 1.0 <= spread.low <= 3.0 <= spread.high <= 100.0
    assert median_ci([1.0, 2.0, 3.0, 4.0, 100.0]) == spread  # seeded: reproducible


def test_eq2_of_a_clear_difference() -> None:
    saving = eq2([110.0, 110.0, 110.0], [100.0, 100.0, 100.0])
    assert saving.pct == pytest.approx(10.0)
    assert (saving.low, saving.high) == (pytest.approx(10.0), pytest.approx(10.0))
    assert not saving.undecided and not saving.paired


def test_an_interval_across_zero_is_undecided() -> None:
    saving = eq2([95.0, 100.0, 105.0], [100.0, 100.0, 100.0])
    assert saving.pct == 0.0
    assert saving.low == pytest.approx(-5.0) and saving.high == pytest.approx(5.0)
    assert saving.undecided


def test_paired_blocks_cancel_drift() -> None:
    # the machine got 10 % slower between the blocks: unpaired, the interval is wide; paired
    # by block, every run is exactly 10 % above its block's baseline
    values, base = [110.0, 121.0, 133.1], [100.0, 110.0, 121.0]
    unpaired = eq2(values, base)
    paired = eq2(values, base, pairs=list(zip(values, base, strict=True)))
    assert (
        paired.paired and paired.low == pytest.approx(10.0) and paired.high == pytest.approx(10.0)
    )
    assert unpaired.high is not None and unpaired.low is not None
    assert unpaired.high - unpaired.low > 10.0


def test_one_run_has_no_interval_and_a_zero_baseline_no_percentage() -> None:
    saving = eq2([5.0], [4.0])
    assert saving.pct == pytest.approx(25.0) and saving.low is None and saving.undecided
    with pytest.raises(ValueError, match="baseline's median is 0"):
        eq2([1.0], [0.0])
