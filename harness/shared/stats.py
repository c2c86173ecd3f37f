"""Timing statistics and the competition's stopping rule."""

import dataclasses
import math
import time
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Stats:
    """Per-call durations in ns over `runs` rounds; std uses n - 1, err = std / sqrt(runs)."""

    runs: int
    mean: float
    std: float
    err: float
    best: float
    worst: float


def calculate_stats(durations_ns: list[float]) -> Stats:
    runs = len(durations_ns)
    if runs < 2:
        raise ValueError(f"need at least 2 durations for a standard deviation, got {runs}")
    mean = sum(durations_ns) / runs
    std = math.sqrt(sum((x - mean) ** 2 for x in durations_ns) / (runs - 1))
    return Stats(runs=runs, mean=mean, std=std, err=std / math.sqrt(runs), best=float(min(durations_ns)), worst=float(max(durations_ns)))


def geomean(values) -> float:
    values = list(values)
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"geometric mean needs positive values, got {values}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


# task.yml's `ranking_by`: how the benchmarks' means make one score, and what the score is called.
RANKINGS = {"geom": ("geomean of means", geomean), "mean": ("mean of means", lambda values: sum(values) / len(values)),
            "last": ("last case's mean", lambda values: values[-1])}


def score(means: list[float], ranking_by: str = "geom") -> float:
    """The benchmarks' score by `ranking_by` (RANKINGS)."""
    if ranking_by not in RANKINGS:
        raise ValueError(f"ranking_by {ranking_by!r} is none of {', '.join(RANKINGS)}")
    return RANKINGS[ranking_by][1](list(means))


MIN_ROUNDS = 3
MIN_TOTAL_NS = 1e8  # 100 ms of wall time before the rule may stop
TARGET_RELATIVE_ERR = 1e-3
WALL_LIMIT_NS = 120e9


@dataclasses.dataclass(frozen=True)
class StoppingRule:
    """Stop after >= 3 rounds and >= min_total_ns (100 ms unless an eval waits less) once err/mean < 0.1%, or mean*runs > max_time, or 120 s wall.

    `clock` returns ns and is injectable so the rule can be tested without waiting.
    """

    max_repeats: int
    max_time_ns: float
    clock: Callable[[], int] = time.perf_counter_ns
    min_total_ns: float = MIN_TOTAL_NS  # an eval's own floor (EvalParameters.min_total_ns)

    def start(self) -> int:
        return self.clock()

    def should_stop(self, durations_ns: list[float], started_ns: int) -> bool:
        if len(durations_ns) >= self.max_repeats:
            return True
        elapsed = self.clock() - started_ns
        if len(durations_ns) < MIN_ROUNDS or elapsed <= self.min_total_ns:
            return False
        stats = calculate_stats(durations_ns)
        # The eval's err / mean < target, multiplied out: a mean of 0 (claims of no time, which
        # the figures' verdict fails) has nothing left to measure.
        return (
            stats.err < TARGET_RELATIVE_ERR * stats.mean or stats.mean == 0
            or stats.mean * stats.runs > self.max_time_ns
            or elapsed > WALL_LIMIT_NS
        )

    def progress(self, durations_ns: list[float], started_ns: int) -> str:
        """`round N of at most CAP, about S s left`: the rounds left within the cap, the time budget
        (never below the rounds the rule always runs) and the wall limit, at the rounds' pace so
        far, which the next rounds may not keep (an estimate, not a bound); the error target may
        stop it sooner. Under a second left reads as such, never as `0 s`."""
        rounds = len(durations_ns)
        elapsed = self.clock() - started_ns
        per_round = elapsed / max(rounds, 1)
        rounds_left = self.max_repeats - rounds
        mean = sum(durations_ns) / rounds if rounds else 0.0
        if mean > 0:
            within_budget = max(int(self.max_time_ns / mean) + 1 - rounds, MIN_ROUNDS - rounds, 0)
            rounds_left = min(rounds_left, within_budget)
        left_ns = min(rounds_left * per_round, max(WALL_LIMIT_NS - elapsed, 0))
        left = "under 1 s left" if left_ns < 1e9 else f"about {left_ns / 1e9:.0f} s left"
        return f"round {rounds} of at most {self.max_repeats}, {left}"

