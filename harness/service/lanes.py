"""Lanes of one GPU (or CPU slot): test-mode candidates run side by side, each in its own
sandboxed worker of its own judge, untimed; a benchmark or leaderboard candidate has the device
alone, from the moment the earlier test-mode runs on it end to its own end. A timed candidate
waiting for the device lets no new test-mode run start on it (it would wait forever behind a
stream of them)."""

import contextlib
import threading

TIMED_MODES = ("benchmark", "leaderboard")


class DeviceGate:
    def __init__(self):
        self._changed = threading.Condition()
        self._sharing = 0
        self._alone = False
        self._waiting_alone = 0

    @contextlib.contextmanager
    def held(self, mode: str):
        """The device held for a run of `mode`: alone for a timed mode, shared for test mode."""
        alone = mode in TIMED_MODES
        with self._changed:
            if alone:
                self._waiting_alone += 1
                self._changed.wait_for(lambda: not self._alone and self._sharing == 0)
                self._waiting_alone -= 1
                self._alone = True
            else:
                self._changed.wait_for(lambda: not self._alone and self._waiting_alone == 0)
                self._sharing += 1
        try:
            yield
        finally:
            with self._changed:
                if alone:
                    self._alone = False
                else:
                    self._sharing -= 1
                self._changed.notify_all()

    def state(self) -> dict:
        with self._changed:
            return {"test_runs": self._sharing, "timed_run": self._alone, "timed_waiting": self._waiting_alone}
