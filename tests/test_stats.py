import math

import pytest

from harness.shared.stats import StoppingRule, calculate_stats, geomean


def test_stats_match_hand_computation():
    stats = calculate_stats([10.0, 12.0, 14.0, 16.0])
    assert stats.runs == 4 and stats.mean == 13.0
    assert stats.std == pytest.approx(math.sqrt(20 / 3))  # n - 1 in the denominator
    assert stats.err == pytest.approx(math.sqrt(20 / 3) / 2)
    assert (stats.best, stats.worst) == (10.0, 16.0)


def test_stats_need_two_durations():
    with pytest.raises(ValueError):
        calculate_stats([5.0])


def test_geomean():
    assert geomean([1.0, 100.0]) == pytest.approx(10.0)
    assert geomean([2.0, 8.0, 4.0]) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        geomean([1.0, 0.0])


class FakeClock:
    def __init__(self):
        self.now = 0

    def __call__(self):
        return self.now


def rule_with_clock(max_repeats=1000, max_time_ns=30e9):
    clock = FakeClock()
    return StoppingRule(max_repeats, max_time_ns, clock), clock


def test_no_stop_before_three_rounds_or_100_ms():
    rule, clock = rule_with_clock()
    started = rule.start()
    steady = [1000.0] * 2
    clock.now = 10**9
    assert not rule.should_stop(steady, started)  # two rounds, however long
    clock.now = 10**8  # exactly 100 ms is not more than 100 ms
    assert not rule.should_stop([1000.0] * 3, started)
    clock.now = 10**8 + 1
    assert rule.should_stop([1000.0] * 3, started)  # zero error: err/mean < 0.1%


def test_stops_when_relative_error_dips_below_a_thousandth():
    rule, clock = rule_with_clock()
    started = rule.start()
    clock.now = 2 * 10**8
    noisy = [1000.0, 1100.0, 900.0, 1050.0]
    assert not rule.should_stop(noisy, started)
    tight = [1000.0, 1001.0, 999.0, 1000.5]
    assert rule.should_stop(tight, started)


def test_stops_on_max_time_max_repeats_and_wall_limit():
    noisy = [1000.0, 1300.0, 700.0]
    rule, clock = rule_with_clock(max_time_ns=2500.0)
    clock.now = 2 * 10**8
    assert rule.should_stop(noisy, 0)  # mean * runs = 3000 ns > 2500 ns
    rule, clock = rule_with_clock(max_repeats=3)
    assert rule.should_stop(noisy, 0)  # the cap holds even before 100 ms
    rule, clock = rule_with_clock()
    clock.now = 120 * 10**9
    assert not rule.should_stop(noisy, 0)
    clock.now = 120 * 10**9 + 1
    assert rule.should_stop(noisy, 0)
