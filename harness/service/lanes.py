"""Lanes of one GPU (or CPU slot): test-mode candidates run side by side, each in its own
sandboxed worker of its own judge, untimed; a benchmark or leaderboard candidate has the device
alone, from the moment the earlier test-mode runs on it end to its own end. A timed candidate
waiting for the device lets no new test-mode run start on it (it would wait forever behind a
stream of them). A test-mode run that did not pass while another ran beside it is judged again
alone (harness/service/front.py), since what the runs shared (the device's memory, its time) may
have failed it: its verdict is the run alone's.

A lane's waiting workers are started between runs, never beside one: a context made on a GPU
slows every run on it while it is made (docs/service.md, Throughput). A lane whose waiting
workers have run out asks for a replenish; from then no new test-mode run starts on the device,
the runs on it end (REPLENISH_DRAIN_S at most), and every lane that ends a run meanwhile, or
lacks workers, starts its replacements together with the first (contexts made at once cost far
less each than made one by one); then the runs go on."""

import contextlib
import threading

TIMED_MODES = ("benchmark", "leaderboard")
# Submission workers a judge keeps waiting. On a GPU a candidate that fails every case takes a
# fresh one per case, its cases far shorter than a worker's start with its device's context
# (docs/service.md): a lone judge keeps as many as a problem's test set has cases (ten), so
# that such a candidate waits for no start, each holding a context (device memory a one-shot run
# leaves free) while it waits. The lanes of one GPU share out `WAITING_A_GPU` (every context
# waiting costs the cores its start took, and the device its memory), each keeping no fewer than
# a run takes while its next replacements start beside the other lanes' (`WAITING_A_LANE_LEAST`).
# On the CPU, where a start takes the cores a timed call runs on, one.
WAITING_A_JUDGE = 10
WAITING_A_GPU = 20
WAITING_A_LANE_LEAST = 3
# How long a replenish waits for the runs on its device to end before it starts beside them (a
# candidate that runs for minutes holds up no other lane's workers).
REPLENISH_DRAIN_S = 5.0
# How long a replenish waits for its workers' contexts: a worker started afresh (no template)
# imports torch first (docs/figures.md, "a worker's start").
REPLENISH_LIMIT_S = 30.0


def replenished_lanes(device: str, lanes: int) -> bool:
    """Whether the lanes of one `device` start their workers together between runs."""
    return lanes > 1 and device.startswith("cuda")


def waiting_workers(device: str, lanes: int = 1) -> int:
    """Workers each judge of `lanes` on one `device` keeps waiting."""
    if not device.startswith("cuda"):
        return 1
    return min(WAITING_A_JUDGE, max(WAITING_A_LANE_LEAST, WAITING_A_GPU // max(lanes, 1)))


class Held:
    """One run's hold on the device: `shared` once another run has held it beside this one."""

    def __init__(self):
        self.shared = False


class DeviceGate:
    def __init__(self, drain_s: float = REPLENISH_DRAIN_S):
        self._changed = threading.Condition()
        self._holders: set[Held] = set()  # the test-mode runs holding the device now
        self._alone = False
        self._waiting_alone = 0
        self._replenishing = 0  # lanes starting their workers now
        self._waiting_replenish = 0
        self._drain_s = drain_s

    @contextlib.contextmanager
    def held(self, mode: str, alone: bool = False):
        """The device held for a run of `mode`: alone for a timed mode (or where `alone`), shared
        for test mode. Yields the run's `Held`."""
        alone = alone or mode in TIMED_MODES
        hold = Held()
        with self._changed:
            if alone:
                self._waiting_alone += 1
                self._changed.wait_for(lambda: not self._alone and not self._holders and not self._replenishing)
                self._waiting_alone -= 1
                self._alone = True
            else:
                self._changed.wait_for(lambda: not self._alone and self._waiting_alone == 0
                                       and not self._replenishing and not self._waiting_replenish)
                for other in self._holders:
                    other.shared = hold.shared = True
                self._holders.add(hold)
        try:
            yield hold
        finally:
            with self._changed:
                if alone:
                    self._alone = False
                else:
                    self._holders.discard(hold)
                self._changed.notify_all()

    @contextlib.contextmanager
    def replenishing(self):
        """The device held for a lane's workers to start: beside other lanes' starts, once the
        test-mode runs on it have ended or `drain_s` has passed, never beside a timed run; no
        test-mode run starts from the call to the block's end."""
        with self._changed:
            self._waiting_replenish += 1
            self._changed.wait_for(lambda: not self._alone and not self._holders, timeout=self._drain_s)
            self._changed.wait_for(lambda: not self._alone)
            self._waiting_replenish -= 1
            self._replenishing += 1
            for hold in self._holders:  # a run the drain did not wait for shares the device with the new contexts
                hold.shared = True
        try:
            yield
        finally:
            with self._changed:
                self._replenishing -= 1
                self._changed.notify_all()

    def replenish_wanted(self) -> bool:
        """Whether a lane is starting its workers, or waiting to: every lane tops its own up then."""
        with self._changed:
            return bool(self._replenishing or self._waiting_replenish)

    def state(self) -> dict:
        with self._changed:
            return {"test_runs": len(self._holders), "timed_run": self._alone, "timed_waiting": self._waiting_alone,
                    "replenishing": self._replenishing, "replenish_waiting": self._waiting_replenish}
