"""Where a case's time went, by the phases its progress lines name: the worker's start (until
it holds the case's inputs), the judge's inputs and references, the submission's import, its first call (a CuTeDSL file compiles
there), warm-up, the calibration, the timed rounds, the checks after them (the recorded round,
the recheck) and the baselines. A phase lasts from its first progress line to the next phase's."""

import time

# The progress lines' beginnings (harness/judge/cases.py, harness/runner/calls.py), by phase.
PHASES = (
    ("generating inputs", "references"),
    ("handing the inputs", "start"),
    ("importing submission", "import"),
    ("calling custom_kernel", "first call"),
    ("checking the first batch", "first call"),
    ("warm-up", "warm-up"),
    ("calibrating", "calibration"),
    ("timing", "rounds"),
    ("recorded round", "checks"),
    ("recheck", "checks"),
    ("baseline", "baselines"),
    ("measuring copy bandwidth", "ceilings"),
)
START = "start"


def phase_of(text: str) -> str | None:
    return next((phase for beginning, phase in PHASES if text.startswith(beginning)), None)


class PhaseTimer:
    """Seconds per phase of one case; the time before its first progress line is `start`."""

    def __init__(self):
        self._phase, self._since = START, time.monotonic()
        self.seconds: dict[str, float] = {}

    def wrap(self, on_progress):
        def timed(text):
            phase = phase_of(text) if text else None
            if phase is not None and phase != self._phase:
                self._switch(phase)
            on_progress(text)
        return timed

    def _switch(self, phase: str) -> None:
        now = time.monotonic()
        self.seconds[self._phase] = self.seconds.get(self._phase, 0.0) + now - self._since
        self._phase, self._since = phase, now

    def finish(self) -> dict[str, float]:
        self._switch(START)
        return {phase: round(seconds, 4) for phase, seconds in self.seconds.items()}
