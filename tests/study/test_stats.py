"""Study statistics against hand-computed values (geometric means, t-intervals on logs, Eq. 2,
noise and repeats)."""

from __future__ import annotations

import math

import pytest

from greenckpt.study.stats import cell_estimate, eq2, repeats_needed, resolvable_pct


def test_a_cells_estimate_and_its_interval() -> None:
    one = cell_estimate([4.0])
    assert (one.median, one.mean, one.low, one.high, one.n) == (4.0, 4.0, None, None, 1)
    same = cell_estimate([2.0, 2.0, 2.0])
    assert same.median == 2.0
    assert same.low == pytest.approx(2.0) and same.high == pytest.approx(2.0)
    est = cell_estimate([10.0, 20.0])
    # logs 2.303, 2.996: mean 2.649, sd 0.490, t(1) = 12.706 -> half 4.403
    assert est.mean == pytest.approx(math.sqrt(200))
    assert est.low == pytest.approx(
        math.sqrt(200) * math.exp(-12.706 * 0.4901 / math.sqrt(2)), rel=1e-3
    )
    assert "t-interval" in est.method


def test_eq2_of_a_clear_difference() -> None:
    saving = eq2([110.0, 110.0, 110.0], [100.0, 100.0, 100.0])
    assert saving.pct == pytest.approx(10.0) and saving.median_pct == pytest.approx(10.0)
    assert saving.low == pytest.approx(10.0) and saving.high == pytest.approx(10.0)
    assert not saving.undecided and not saving.paired and "Welch" in saving.method


def test_an_interval_across_zero_is_undecided() -> None:
    saving = eq2([95.0, 100.0, 105.0], [100.0, 100.0, 100.0])
    assert saving.median_pct == 0.0 and abs(saving.pct) < 0.2
    assert saving.low is not None and saving.high is not None
    assert saving.low < -5.0 and saving.high > 5.0  # t with 2 df: wider than the range
    assert saving.undecided


def test_paired_blocks_cancel_drift() -> None:
    # the machine got 10 % slower between the blocks: unpaired, the interval is wide; paired
    # by block, every run is exactly 10 % above its block's baseline
    values, base = [110.0, 121.0, 133.1], [100.0, 110.0, 121.0]
    unpaired = eq2(values, base)
    paired = eq2(values, base, pairs=list(zip(values, base, strict=True)))
    assert paired.paired and "paired" in paired.method
    assert paired.low == pytest.approx(10.0) and paired.high == pytest.approx(10.0)
    assert unpaired.high is not None and unpaired.low is not None
    assert unpaired.high - unpaired.low > 10.0


def test_three_noisy_pairs_give_an_honest_width() -> None:
    # the wu2018 shape: ratios 0.66, 0.86, 0.70 — the old percentile bootstrap of three
    # ratios gave about their range; the t-interval with 2 df is much wider
    pairs = [(7.1, 10.7), (10.9, 12.7), (9.3, 13.3)]
    saving = eq2([p[0] for p in pairs], [p[1] for p in pairs], pairs=pairs)
    assert saving.low is not None and saving.high is not None
    assert saving.high - saving.low > 2 * (86.0 - 66.0)


def test_one_run_has_no_interval_and_a_zero_baseline_no_percentage() -> None:
    saving = eq2([5.0], [4.0])
    assert saving.pct == pytest.approx(25.0) and saving.low is None and saving.undecided
    with pytest.raises(ValueError, match="baseline's median is 0"):
        eq2([1.0], [0.0])


def test_resolution_and_repeats_from_the_noise() -> None:
    # sd 0.1 of the paired log-ratios: n = 3 resolves t(2) * 0.1 / sqrt(3) = 0.2482 -> 28.2 %
    assert resolvable_pct(0.1, 3) == pytest.approx(28.17, abs=0.05)
    assert resolvable_pct(0.1, 1) is None
    n = repeats_needed(0.1, 5.0)
    assert n is not None
    half = resolvable_pct(0.1, n)
    before = resolvable_pct(0.1, n - 1)
    assert half is not None and before is not None and half <= 5.0 < before
    powered = repeats_needed(0.1, 5.0, power=0.8)
    assert powered is not None and powered > n
    with pytest.raises(ValueError, match="effect must be > 0"):
        repeats_needed(0.1, 0.0)
