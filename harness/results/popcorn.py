"""The competition's machine-readable output: `key: value` lines on the descriptor in POPCORN_FD,
written as the run goes, as the competition's eval writes them."""

import base64
import os

from harness.judge.jobs import ERROR
from harness.judge.record import RunListener, RunRecord

STATS_FIELDS = ("runs", "mean", "std", "err", "best", "worst")


def one_line(value) -> str:
    r"""`value` as one line: each line boundary str.splitlines knows (\n, \r, \r\n, \x0b, \x0c,
    \x1c to \x1e, \x85, \u2028, \u2029; a text-mode reader ends lines at the first three) a space,
    so that no message, whatever it holds, adds a `key: value` line of its own."""
    return " ".join(str(value).splitlines())


class PopcornLog:
    """Writes to the descriptor named by POPCORN_FD; does nothing when there is none."""

    def __init__(self, fd: int | None):
        self.fd = fd
        self._file = None
        if fd is not None:
            # Verdicts go through a private duplicate, which worker processes do not inherit
            # (PEP 446). A descriptor of its own (3 and up) is closed at once, so that no worker
            # can write to it and closing the duplicate tells a reader on a pipe that we are done.
            # A standard stream (POPCORN_FD=1 or 2) stays open: workers send theirs to a log.
            private = os.dup(fd)
            if fd > 2:
                os.close(fd)
            # A lone surrogate (a worker's message may hold one) is written escaped, not raised on.
            self._file = os.fdopen(private, "w", encoding="utf-8", errors="backslashreplace")

    @classmethod
    def from_environment(cls) -> "PopcornLog":
        fd = os.environ.get("POPCORN_FD")
        return cls(int(fd) if fd else None)

    @property
    def active(self) -> bool:
        return self._file is not None

    def log(self, key: str, value) -> None:
        if self._file is not None:
            print(f"{key}: {one_line(value)}", file=self._file, flush=True)

    def log_report(self, key: str, report: str) -> None:
        self.log(key, base64.b64encode(report.encode("utf-8"), b"+*").decode("utf-8"))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class PopcornLines(RunListener):
    """A run's lines: the count, each case's spec before it and its verdict after (a timed case's
    statistics, a profile's table), and `check` at the end, where the competition's eval logs one
    (none where its eval stops at an uncaught exception)."""

    def __init__(self, log: PopcornLog):
        self._log = log
        self._record: RunRecord | None = None

    @property
    def _kind(self) -> str:
        return "test" if self._record.mode == "test" else "benchmark"

    def run_started(self, record: RunRecord) -> None:
        self._record = record
        self._log.log(f"{self._kind}-count", len(record.cases))

    def case_started(self, index: int, case) -> None:
        self._log.log(f"{self._kind}.{index}.spec", case.spec)

    def case_judged(self, index: int, case, result) -> None:
        kind = self._kind
        if not result.passed:
            self._failure(kind, index, result)
        elif self._record.mode == "test":
            self._log.log(f"test.{index}.status", "pass")
        elif self._record.mode == "profile":
            self._log.log_report(f"benchmark.{index}.report", result.report)
        else:
            for field in STATS_FIELDS:
                self._log.log(f"benchmark.{index}.{field}", getattr(result.stats, field))

    def run_ended(self, record: RunRecord) -> None:
        if record.eval_stopped is None:
            self._log.log("check", "pass" if record.passed else "fail")

    def _failure(self, kind: str, index: int, result) -> None:
        """`KIND.N.status: fail` and its error line: as the competition words it under --official
        (its check's message, or what the caught OpError says), with our status word otherwise."""
        self._log.log(f"{kind}.{index}.status", "fail")
        if not self._record.options.official:
            error = f"{result.status}: {result.message}"
        elif result.status == ERROR:
            error = result.exception if kind == "test" else f"Encountered {result.exception}"
        else:
            error = result.message
        self._log.log(f"{kind}.{index}.error", error)
