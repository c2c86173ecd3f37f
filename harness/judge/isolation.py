"""The worker process seen from the judge: requests with a case's time limit, replies read as
untrusted, a hang turned into a timeout and a dead process into a crash report; and the judge's
own process kept out of its workers' reach.

A worker leaves the judge's session and gives up every capability before the submission is
imported (harness/runner/worker.py). The judge for its part is not dumpable (its /proc files,
descriptors included, are closed to processes of its user without CAP_SYS_PTRACE) and is a
subreaper: a process a worker started and orphaned (a double fork, a new session) becomes the
judge's child, and is ended with the case.
"""

import contextlib
import ctypes
import multiprocessing
import multiprocessing.resource_tracker
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from harness import wire
from harness.jobs import CRASH, ERROR, FAIL, TIMEOUT, CaseResult
from harness.runner import worker
from harness.runner.files import REPO_ROOT

POLL_S = 0.2
OUTPUT_TAIL_CHARS = 4000


def _exit_description(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name} (exit status {exitcode})"
        except ValueError:
            return f"killed by signal {-exitcode} (exit status {exitcode})"
    return f"exit status {exitcode}"


PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def protect_the_judge() -> list[str]:
    """Close this process's /proc files to its workers and adopt the processes they orphan.
    Returns what the kernel refused (a sandbox may lack either), for the run to warn of."""
    if not sys.platform.startswith("linux"):
        return ["not Linux: the judge's /proc files stay open to its workers and orphans are not adopted"]
    libc = ctypes.CDLL(None, use_errno=True)
    refused = []
    for option, value, what in ((PR_SET_DUMPABLE, 0, "closing its /proc files to its workers"),
                                (PR_SET_CHILD_SUBREAPER, 1, "adopting the processes its workers orphan")):
        if libc.prctl(option, value, 0, 0, 0) != 0:
            refused.append(f"{what} (prctl: {os.strerror(ctypes.get_errno())})")
    return refused


def is_running(pid: int) -> bool:
    """Whether the process exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process this one can see."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
    return parents


def _descendants(root: int, parents: dict[int, int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def end_strays(keep: set[int], rounds: int = 5) -> list[int]:
    """Kill every descendant of this process but `keep` and its descendants (the workers the judge
    runs, multiprocessing's own helpers), and reap them: what a finished case's worker left
    behind, orphaned or not. Repeated while any appear, since a stray may still be forking."""
    ended = []
    for _ in range(rounds):
        parents = _parents()
        kept = set(keep) | {pid for pid in keep for pid in _descendants(pid, parents)}
        strays = [pid for pid in _descendants(os.getpid(), parents) if pid not in kept]
        if not strays:
            break
        for pid in strays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid in strays:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)
        ended.extend(strays)
    return ended


def helper_pids() -> set[int]:
    """multiprocessing's resource tracker, which the judge's shared memory may have started."""
    tracker = getattr(multiprocessing.resource_tracker, "_resource_tracker", None)
    pid = getattr(tracker, "_pid", None)
    return {pid} if pid else set()


class CaseStopped(Exception):
    """The case cannot go on: the submission raised, the worker died or ran out of time, or it
    sent what no reply holds. `result` is the case's verdict."""

    def __init__(self, result: CaseResult):
        super().__init__(result.message)
        self.result = result


class WorkerProcess:
    """One spawned worker at a time, started on the first request after the last one ended.

    With `spares`, a process for the next case is started as a case begins (`start_spare`): its
    start (interpreter, torch: seconds) overlaps that case.
    """

    def __init__(self, log_dir: str, runner_folder: Path, device: str, global_seed: int, spares: bool = False,
                 echo: bool = False):
        """With `echo`, the judge's calibration partner: started once, before any worker imports
        a submission, and never again (a new one would import the harness from files a worker
        can write by then), so that its ending, which only a worker can cause, fails the case."""
        self._context = multiprocessing.get_context("spawn")
        self._log_dir = log_dir
        self._arguments = (str(REPO_ROOT), str(runner_folder), device, global_seed, echo)
        self._process = None
        self._connection = None
        self.log_path = None
        self._deadline = float("inf")
        self._timeout_s = 0.0
        self._on_progress = lambda text: None
        self._log_start = 0
        self._spares = spares
        self._spare = None  # (process, connection, log path) started ahead of the next case
        self._restartable = not echo

    def _spawn(self) -> tuple:
        connection, child_end = self._context.Pipe()
        log = tempfile.NamedTemporaryFile(dir=self._log_dir, prefix="worker-", suffix=".log", delete=False)
        log.close()
        process = self._context.Process(target=worker.serve, args=(child_end, log.name, *self._arguments), name="nvfp4-worker")
        process.start()
        child_end.close()
        return process, connection, log.name

    def _start(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None and not spare[0].is_alive():
            spare = None
        self._process, self._connection, self.log_path = spare or self._spawn()
        self._log_start = 0

    def start_spare(self) -> None:
        """Start the next case's process now, if there will be one. Called as a case begins, so
        that its appearing tells the case's worker nothing of which round comes next; until its
        own case it only starts Python and imports torch."""
        if self._spares and self._spare is None:
            self._spare = self._spawn()

    @contextlib.contextmanager
    def paused(self, keep: set[int]):
        """The worker, the spare and every process either started stopped (SIGSTOP) for the
        block, and whatever else the judge's children left behind (not in `keep`) ended first:
        none of them can then stop, slow or signal what the judge measures meanwhile. The spare
        too: it runs the harness's worker code from files the case's worker can rewrite."""
        end_strays(keep | self.pids)
        parents = _parents()
        stopped = [descendant for pid in self.pids for descendant in (pid, *_descendants(pid, parents))]
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGCONT)

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    @property
    def pids(self) -> set[int]:
        """The processes the judge runs here: the current one and a spare."""
        return {process.pid for process in (self._process, self._spare[0] if self._spare else None)
                if process is not None and process.pid is not None}

    def begin_case(self, timeout_s: float, on_progress) -> bool:
        """Ready for a case; True where that took a new process."""
        started = not self.alive
        if started and self._process is not None and not self._restartable:
            raise CaseStopped(CaseResult(FAIL, "the judge's calibration partner was ended while a worker ran "
                                               f"({_exit_description(self._process.exitcode)}): a submission's doing"))
        if started:
            self._start()
        self._timeout_s = timeout_s
        self._deadline = time.monotonic() + timeout_s
        self._on_progress = on_progress
        self._log_start = Path(self.log_path).stat().st_size
        return started

    def request(self, operation: str, *arguments):
        """The worker's reply to one request (harness/runner/calls.py), or CaseStopped."""
        self.ask(operation, *arguments)
        return self.reply()

    def ask(self, operation: str, *arguments) -> None:
        """Send a request whose reply the judge collects later (`reply`), working meanwhile."""
        try:
            self._connection.send((operation, arguments))
        except (BrokenPipeError, EOFError, ConnectionResetError):
            raise CaseStopped(self._crashed()) from None

    def reply(self):
        try:
            return self._wait()
        except (BrokenPipeError, EOFError, ConnectionResetError):
            raise CaseStopped(self._crashed()) from None

    def _wait(self):
        while True:
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise CaseStopped(CaseResult(
                    TIMEOUT, f"no result within the {self._timeout_s:.0f} s time limit; worker killed (raise it with --timeout)"))
            if self._connection.poll(min(remaining, POLL_S)):
                message = self._receive()
                kind = message[0] if isinstance(message, tuple) and message else None
                if kind == wire.REPLY and len(message) == 2:
                    return message[1]
                if kind == wire.RAISED and len(message) == 5:
                    _, description, exception, caught_officially, origin = message
                    raise CaseStopped(CaseResult(ERROR, str(description), exception=str(exception),
                                                 uncaught_officially=not caught_officially, origin=str(origin)))
                if kind == wire.PROGRESS and len(message) == 2:
                    self._on_progress(str(message[1]))
                    continue
                self.kill()
                raise CaseStopped(CaseResult(ERROR, "the worker sent a message that is no reply: the submission wrote to the judge's pipe"))
            elif not self._process.is_alive():
                raise CaseStopped(self._crashed())
            else:
                self._on_progress(None)

    def _receive(self):
        try:
            return wire.receive_untrusted(self._connection)
        except (EOFError, ConnectionResetError, BrokenPipeError):
            raise
        except Exception as error:  # a forged or unreadable message: never run, never trusted
            self.kill()
            raise CaseStopped(CaseResult(ERROR, f"the judge refused the worker's message: {error}")) from None

    def _crashed(self) -> CaseResult:
        self._process.join(timeout=5)
        return CaseResult(CRASH, f"worker process died without a result: {_exit_description(self._process.exitcode)}")

    def output_of_case(self) -> str:
        """What the worker printed since the case began (its last OUTPUT_TAIL_CHARS)."""
        if self.log_path is None:
            return ""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            text = log.read().decode("utf-8", errors="replace")
        return text[-OUTPUT_TAIL_CHARS:]

    def kill(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=10)

    def close(self) -> None:
        if self.alive:
            try:
                self._connection.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._process.join(timeout=10)
        self.kill()

    def close_spare(self) -> None:
        if self._spare is not None:
            process, connection, _ = self._spare
            process.kill()
            process.join(timeout=10)
            connection.close()
            self._spare = None
