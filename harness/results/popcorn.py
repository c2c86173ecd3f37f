"""The competition's machine-readable output: `key: value` lines on the descriptor in POPCORN_FD."""

import base64
import os


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
