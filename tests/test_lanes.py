"""A GPU's lanes (harness/service/lanes.py): test-mode runs side by side, a timed run alone, and
the lanes' waiting workers started together between runs, never beside one for longer than the
gate's drain bound. Each run here is a thread holding the gate, its interval recorded."""

import threading
import time

import pytest

from harness.service.lanes import DeviceGate, replenished_lanes


class Timeline:
    """When each hold of the gate began and ended, by name."""

    def __init__(self):
        self.spans: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def hold(self, gate: DeviceGate, name: str, seconds: float, mode: str = "test", replenish: bool = False,
             after: threading.Event | None = None) -> threading.Thread:
        def run():
            if after is not None:
                after.wait(10)
            with gate.replenishing() if replenish else gate.held(mode):
                with self._lock:
                    self.spans[name] = [time.monotonic(), None]
                time.sleep(seconds)
                with self._lock:
                    self.spans[name][1] = time.monotonic()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def overlap(self, first: str, second: str) -> bool:
        (a, b), (c, d) = self.spans[first], self.spans[second]
        return a < d and c < b


def wait_until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_a_replenish_waits_for_the_runs_and_holds_up_new_ones_and_other_lanes_replenish_beside_it():
    gate, timeline = DeviceGate(drain_s=10.0), Timeline()
    runs = [timeline.hold(gate, f"run {index}", 0.3) for index in range(2)]
    wait_until(lambda: gate.state()["test_runs"] == 2)
    first = timeline.hold(gate, "replenish a", 0.3, replenish=True)
    wait_until(gate.replenish_wanted)
    late_run = timeline.hold(gate, "late run", 0.1)
    second = timeline.hold(gate, "replenish b", 0.3, replenish=True)
    for thread in (*runs, first, late_run, second):
        thread.join(10)
    for replenish in ("replenish a", "replenish b"):
        assert not any(timeline.overlap(replenish, run) for run in ("run 0", "run 1", "late run"))
    assert timeline.overlap("replenish a", "replenish b")  # the lanes' contexts made together
    assert timeline.spans["late run"][0] >= max(timeline.spans["replenish a"][1], timeline.spans["replenish b"][1])
    assert not gate.replenish_wanted()


def test_a_long_run_holds_up_a_replenish_no_longer_than_the_drain_bound_and_a_timed_run_never_shares_it():
    gate, timeline = DeviceGate(drain_s=0.2), Timeline()
    long_run = timeline.hold(gate, "long run", 0.8)
    wait_until(lambda: gate.state()["test_runs"] == 1)
    began = time.monotonic()
    replenish = timeline.hold(gate, "replenish", 0.2, replenish=True)
    replenish.join(10)
    assert timeline.spans["replenish"][0] - began == pytest.approx(0.2, abs=0.15)
    long_run.join(10)
    assert timeline.overlap("replenish", "long run")

    timed = timeline.hold(gate, "timed", 0.2, mode="benchmark")
    wait_until(lambda: gate.state()["timed_run"])
    beside_timed = timeline.hold(gate, "replenish beside timed", 0.1, replenish=True)
    beside_timed.join(10)
    timed.join(10)
    assert not timeline.overlap("timed", "replenish beside timed")
    replenishing = timeline.hold(gate, "replenish before timed", 0.4, replenish=True)
    wait_until(lambda: gate.state()["replenishing"] == 1)
    timed_after = timeline.hold(gate, "timed after", 0.1, mode="benchmark")
    replenishing.join(10)
    timed_after.join(10)
    assert not timeline.overlap("timed after", "replenish before timed")


def test_only_a_gpus_several_lanes_replenish_between_runs():
    assert replenished_lanes("cuda", 2) and replenished_lanes("cuda:1", 6)
    assert not replenished_lanes("cuda", 1) and not replenished_lanes("cpu", 4)


def test_a_run_a_replenish_did_not_wait_for_shares_the_device_with_it():
    """Past the drain bound the contexts are made beside a run, which may fail for it (its
    memory, its time): the run is marked shared, so that a failure is judged again alone."""
    gate = DeviceGate(drain_s=0.05)
    release, marked = threading.Event(), []

    def long_run():
        with gate.held("test") as hold:
            release.wait(10)
            marked.append(hold.shared)

    runner = threading.Thread(target=long_run)
    runner.start()
    wait_until(lambda: gate.state()["test_runs"] == 1)
    with gate.replenishing():
        pass
    release.set()
    runner.join(10)
    assert marked == [True]
