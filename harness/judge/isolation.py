"""The worker process seen from the judge: started sandboxed (harness/judge/sandbox.py), sent
requests with a case's time limit, its replies read as untrusted, a hang turned into a timeout
and a dead process into a crash report; and the judge's own process kept out of its workers' reach.

The judge is not dumpable (its /proc files, descriptors included, are closed to processes of its
user without CAP_SYS_PTRACE) and is a subreaper: where a system grants a worker no pid namespace
or cgroup of its own, a process it started and orphaned becomes the judge's child, and is ended
with the case (`end_strays`).
"""

import concurrent.futures
import contextlib
import ctypes
import multiprocessing.connection
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NoReturn

from harness.judge import claims, dev_shm, given_up, judge_user, worker_dev_shm
from harness.judge.jobs import CRASH, ERROR, FAIL, TIMEOUT, CaseResult
from harness.judge.sandbox import Sandbox
from harness.runner.calls import UNDER_COMPUTE_SANITIZER
from harness.shared import cuda_ipc, wire

POLL_S = 0.2
OUTPUT_TAIL_CHARS = 4000
# How long a fresh worker gets for its start (the sandbox, the interpreter, its imports, the
# device's context), until its first message: nothing of the submission runs before that, so a
# start that misses it, or a worker that ends before it, is the machine's failure (load, the
# sandbox, the environment), never the file's, and the case's time limit counts from its end.
START_LIMIT_S = 120.0
# How long the judge waits for cgroups asked to stop (harness/judge/cgroups.py WorkerCgroup.freeze)
# before it stops what is left by signals.
FREEZE_WAIT_S = 2.0


def exit_description(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode > 128 and exitcode - 128 < signal.NSIG:  # bubblewrap reports its command's signal so
        exitcode = 128 - exitcode
    if exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name} (exit status {exitcode})"
        except ValueError:
            return f"killed by signal {-exitcode} (exit status {exitcode})"
    return f"exit status {exitcode}"


PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def output_tail(text: str, characters: int, left_out: bool = False) -> str:
    """The last `characters` of what a process printed, from its first whole line where anything
    before was left out (`left_out`, or the text longer than that), said so on a line of its own."""
    if len(text) > characters:
        text, left_out = text[-characters:], True
    if not left_out:
        return text
    _, newline, whole_lines = text.partition("\n")
    return "(its earlier output left out)\n" + (whole_lines if newline else text)


def protect_the_judge() -> list[str]:
    """Close this process's /proc files to its workers and adopt the processes they orphan; on a
    GPU (where `dev_shm.own_dev_shm` and `judge_user.drop_root` ran), say whether its /dev/shm is its
    own and whether a root judge changed to its own user. Returns what the kernel refused (a
    sandbox may lack any), for the run to warn of."""
    if not sys.platform.startswith("linux"):
        return ["not Linux: the judge's /proc files stay open to its workers and orphans are not adopted"]
    libc = ctypes.CDLL(None, use_errno=True)
    refused = dev_shm.refused() + judge_user.refused()
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
    runs), and reap them: what a finished case's worker left
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


# How often the judge's host looks whether its own event behind a batch has happened.
END_POLL_S = 0.0002
# Where an error the worker raised while the judge waited behind its batch came from: a kernel that
# faults shows it only there, in the worker's wait for its own events, after its calls returned.
AFTER_THE_CALLS = "after the calls returned, waiting for the GPU work they queued: "
# How long the judge's launches behind a batch get to run through once its worker failed or
# ended: where the worker's done event was recorded, they take at most the copies' time.
BEHIND_GRACE_S = 2.0


def ran_through(launched: concurrent.futures.Future, end) -> bool:
    """Whether the judge's launches behind a batch were made without an error and their end event
    has happened (an event never recorded reads as happened, hence the launches first): then
    nothing of the judge's queue behind the batch need be given up."""
    return launched.done() and launched.exception() is None and end.query()


def _await(launched: concurrent.futures.Future, end, seconds: float) -> None:
    until = time.monotonic() + seconds
    while not ran_through(launched, end) and time.monotonic() < until:
        time.sleep(END_POLL_S)


class WorkerNotStarted(Exception):
    """A fresh worker did not start: no message within START_LIMIT_S, or it ended before its
    first. The judge's machine failed, not the file; no case has a verdict from it."""


class WorkerLost(WorkerNotStarted):
    """A worker ended with the template that forked it (harness/judge/templates.py), whatever its
    case was doing: the judge's machine failed, not the file; no case has a verdict from it."""


class CaseStopped(Exception):
    """The case cannot go on: the submission raised, the worker died or ran out of time, or it
    sent what no reply holds. `result` is the case's verdict."""

    def __init__(self, result: CaseResult):
        super().__init__(result.message)
        self.result = result


@contextlib.contextmanager
def _frozen(processes: "list[_Spawned]", before_signals=lambda: None):
    """`processes` and everything they started frozen for the block: each by its cgroup where the
    system has one and its stop completes within FREEZE_WAIT_S (the stops asked of all at once,
    then awaited together), else (`before_signals` called first) by SIGSTOP to its tree and to
    every process of its cgroup (a template's child's orphans are adopted outside its tree, and
    kept from the sweep of strays as the template's). Every cgroup asked to stop is let go after
    the block, its stop completed in time or not."""
    asked = [spawned for spawned in processes if spawned.cgroup.freeze(True)]
    deadline = time.monotonic() + FREEZE_WAIT_S
    while not all(spawned.cgroup.frozen for spawned in asked) and time.monotonic() < deadline:
        time.sleep(0.001)
    frozen = [spawned for spawned in asked if spawned.cgroup.frozen]
    stopped = []
    if len(frozen) < len(processes):
        before_signals()
        parents = _parents()
        stopped = list(dict.fromkeys(
            member for spawned in processes if spawned not in frozen
            for member in (spawned.process.pid, *_descendants(spawned.process.pid, parents), *spawned.cgroup.members())))
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for spawned in asked:
            spawned.cgroup.freeze(False)
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)


class _Spawned:
    """One started process: its sandbox launch, its socket, its folder and its log. Started
    afresh, or where `template` is given (harness/judge/templates.py), forked by it: its
    `process` then a ForkedProcess, which behaves as the Popen here does."""

    def __init__(self, sandbox: Sandbox, log_dir: str, echo: bool, rng_seed: int, template=None):
        self.folder = Path(tempfile.mkdtemp(prefix="runner-", dir=log_dir))
        log = tempfile.NamedTemporaryFile(dir=log_dir, prefix="worker-", suffix=".log", delete=False)
        self.log_path = log.name
        judge_end, worker_end = socket.socketpair()
        try:
            if template is None:
                launch = sandbox.launch(self.folder, worker_end.fileno(), log.fileno(), echo, rng_seed)
                try:
                    self.process = subprocess.Popen(
                        launch.argv, pass_fds=launch.pass_fds, preexec_fn=launch.preexec, stdin=subprocess.DEVNULL,
                        stdout=log.fileno(), stderr=log.fileno(), env=sandbox.environment(self.folder),
                        start_new_session=True)
                finally:
                    launch.close()
            else:
                launch, self.process = template.worker(self.folder, judge_end, worker_end.fileno(), log.fileno(), echo,
                                                       rng_seed)
        except BaseException:
            judge_end.close()
            shutil.rmtree(self.folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(self.log_path)
            raise
        finally:
            worker_end.close()
            log.close()
        self.launch = launch
        self.cgroup = launch.cgroup
        self.connection = multiprocessing.connection.Connection(judge_end.detach())
        self.request_socket = socket.socket(fileno=os.dup(self.connection.fileno()))
        self.opened = worker_dev_shm.WorkerOutputs(launch.dev_shm)  # the worker's own outputs, mapped

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        self.cgroup.kill()
        if self.alive:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)

    def close(self) -> None:
        """Everything it left ended, its sockets closed, its folder and its log removed: nothing
        it wrote outlives it, in a judge that serves candidate after candidate (the service's) least
        of all. The judge reads the log before (WorkerProcess.output_of_case)."""
        self.kill()
        self.launch.remove()
        given_up.keep_or(self.opened, self.opened.close)  # a queue given up may still read them
        self.connection.close()
        self.request_socket.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)


class WorkerProcess:
    """One sandboxed worker at a time, started on the first request after the last one ended.

    Each process has a folder of its own; the judge copies `files` (name -> path: the
    submission, the problem's files) into it when the process becomes the current one, before
    its first request.
    """

    def __init__(self, sandbox: Sandbox, log_dir: str, files: dict[str, Path], device: str, rng_seed: int,
                 describe, echo: bool = False):
        """`describe` is how requests carry the judge's shared tensors (SharedPool.describe). With
        `echo`, the judge's calibration partner: started once, before any worker imports a
        submission, and never again, so that its ending, which only a worker can cause, fails the case."""
        self._sandbox = sandbox
        self._log_dir = log_dir
        self._files = dict(files)
        self._device = device
        self._rng_seed = rng_seed
        self._describe = describe
        self._echo = echo
        self._current: _Spawned | None = None
        self._ended: _Spawned | None = None  # the last process, kept for its exit status
        self._deadline = float("inf")  # the case's, once the current process has started
        self._start_deadline = float("inf")
        self._starting = False  # the current process has sent no message yet
        self._timeout_s = 0.0
        self._on_progress = lambda text: None
        self._log_start = 0

    def _spawn(self) -> _Spawned:
        return _Spawned(self._sandbox, self._log_dir, self._echo, self._rng_seed)

    def _start(self) -> None:
        self._current = self._spawn()
        self._starting = True
        for name, path in self._files.items():
            shutil.copyfile(path, self._current.folder / name)
        self._log_start = 0

    @property
    def log_path(self) -> str | None:
        spawned = self._current or self._ended
        return spawned.log_path if spawned else None

    @property
    def folder(self) -> Path | None:
        spawned = self._current or self._ended
        return spawned.folder if spawned else None

    def _processes(self) -> list[_Spawned]:
        return [self._current] if self._current is not None else []

    def _neighbours(self) -> list[_Spawned]:
        """The judge's other processes beside this worker that a timed case shares the machine
        with: none here; a service's waiting workers (harness/service/pool.py)."""
        return []

    @contextlib.contextmanager
    def paused(self, keep: set[int]):
        """The worker and every process it started frozen for the block: by their
        cgroups where the system has them (at once, and nothing inside can wake them), else by
        SIGSTOP to each after whatever else the judge's children left behind (not in `keep`) is
        ended. None of them can then stop, slow or signal what the judge measures meanwhile."""
        with _frozen(self._processes(), before_signals=lambda: end_strays(keep | self.pids | self._kept())):
            yield

    def _kept(self) -> set[int]:
        """The judge's other processes a sweep of strays keeps: the neighbours."""
        return {spawned.process.pid for spawned in self._neighbours()}

    @contextlib.contextmanager
    def neighbours_frozen(self):
        """The judge's other processes frozen for the block (a timed case's measured part): a
        waiting worker that is still starting imports torch and makes its device's context, work
        on the cores and the GPU that the judge's clock would count as the case's."""
        with _frozen(self._neighbours()):
            yield

    @property
    def alive(self) -> bool:
        return self._current is not None and self._current.alive

    @property
    def pids(self) -> set[int]:
        """The processes the judge runs here: the current one (a pool's adds its waiting ones)."""
        return {spawned.process.pid for spawned in self._processes()}

    def begin_case(self, timeout_s: float, on_progress) -> bool:
        """Ready for a case, whose time limit is `timeout_s` from now, or from the end of the
        process's start where it has not started yet (which gets START_LIMIT_S from now); True
        where that took a new process."""
        started = not self.alive
        if started and self._current is not None and self._echo:
            raise CaseStopped(CaseResult(FAIL, "the judge's calibration partner was ended while a worker ran "
                                               f"({exit_description(self._current.process.returncode)}): a submission's doing"))
        if started:
            self._retire()
            self._start()
        self._timeout_s = timeout_s
        now = time.monotonic()
        self._deadline = now + timeout_s
        self._start_deadline = now + START_LIMIT_S
        self._on_progress = on_progress
        try:
            self._log_start = Path(self.log_path).stat().st_size
        except OSError:
            self._log_start = 0
        return started

    def add_time(self, seconds: float) -> None:
        """The case's time limit moved `seconds` later: time the judge spent on work of its own
        while this process waited for a request (cases.Judging.judges_own_time)."""
        self._deadline += seconds

    def request(self, operation: str, *arguments):
        """The worker's reply to one request (harness/runner/calls.py), or CaseStopped."""
        self.ask(operation, *arguments)
        return self.reply()

    def ask(self, operation: str, *arguments) -> None:
        """Send a request whose reply the judge collects later (`reply`), working meanwhile."""
        try:
            wire.send_request(self._current.connection, self._current.request_socket, (operation, arguments), self._describe)
        except (BrokenPipeError, EOFError, ConnectionResetError, OSError):
            raise CaseStopped(self._crashed()) from None

    def reply(self):
        try:
            return self._wait()
        except (BrokenPipeError, EOFError, ConnectionResetError, OSError):
            raise CaseStopped(self._crashed()) from None

    @property
    def opened(self) -> cuda_ipc.OpenedBlocks:
        """The current process's own outputs the judge has mapped."""
        return self._current.opened

    def _until(self) -> float:
        """The deadline of what the judge waits for now: the process's start, or the case."""
        return self._start_deadline if self._starting else self._deadline

    def _started(self) -> None:
        """The process's first message: its start is over, and the case's time limit counts from now."""
        if self._starting:
            self._starting = False
            self._deadline = time.monotonic() + self._timeout_s

    def _timed_out(self, what: str, killed: str = "worker killed") -> NoReturn:
        """The deadline passed: the worker killed, and the case out of time, or where the process
        had not started yet, no case judged at all."""
        self.kill()
        if self._starting:
            raise WorkerNotStarted(f"a worker sent nothing within the {START_LIMIT_S:g} s its start may take: "
                                   "the judge's machine (load, the sandbox), not the file")
        raise CaseStopped(CaseResult(TIMEOUT, f"{what} within the {self._timeout_s:.0f} s time limit; {killed} "
                                              "(raise it with --timeout)"))

    def _wait(self):
        connection = self._current.connection
        while True:
            remaining = self._until() - time.monotonic()
            if remaining <= 0:
                self._timed_out("no result")
            if connection.poll(min(remaining, POLL_S)):
                replied, reply = self._message()
                if replied:
                    return reply
            elif not self._current.alive:
                raise CaseStopped(self._crashed())
            else:
                self._on_progress(None)

    def _message(self) -> tuple[bool, object]:
        """The worker's next message, read within the case's time limit: (True, its reply), or
        (False, None) for a progress line, shown, or its word that its context is made; its error,
        its end, or anything else stops the case."""
        try:
            message = self._receive(self._remaining_s())
        except (BrokenPipeError, EOFError, ConnectionResetError, OSError):
            raise CaseStopped(self._crashed()) from None
        kind = message[0] if isinstance(message, tuple) and message else None
        if kind == wire.READY and len(message) == 1 and self._starting:
            return False, None  # its context made: its start goes on to its first reply
        self._started()
        if kind == wire.REPLY and len(message) == 2:
            return True, message[1]
        if kind == wire.RAISED and len(message) == 5:
            _, description, exception, caught_officially, origin = message
            raise CaseStopped(CaseResult(ERROR, _text(description, OUTPUT_TAIL_CHARS), exception=_text(exception, OUTPUT_TAIL_CHARS),
                                         uncaught_officially=not caught_officially, origin=_origin(origin)))
        if kind == wire.PROGRESS and len(message) == 2:
            self._on_progress(_line(message[1], 200))
            return False, None
        self.kill()
        raise CaseStopped(CaseResult(ERROR, "the worker sent a message that is no reply: the submission wrote to the judge's pipe"))

    def request_behind(self, operation: str, launched: concurrent.futures.Future, end):
        """The reply to `operation`, asked once `launched` (the judge's launches behind the worker's
        done event, made on a thread of the judge's) has run, and collected, within the case's time
        limit, once `end`, the judge's own event they record last, has happened.
        Work a worker queues need never end, and a launch behind a wait for it can hold its thread
        in the driver for good (the worker's death releases nothing), so no other thread of the
        judge's makes it. At the deadline the worker is killed and the case times out; where the
        launches raised, the worker is killed too (its work may never end either) and the error
        raised here. A worker whose queued work failed (a fault ends its context, which then
        never records done) says so in its reply to `operation` as soon as it waits on that work:
        the case stops with the worker's error then, not at its time limit. How soon the host sees
        `end` bounds only the judge's wall time: the window is the GPU's events'.

        Nothing is asked or read while the launches are made: where the GPU has already finished
        the batch (a host-bound worker's round) they lie in the judge's window, and this thread's
        host work beside them (a message read starts a watchdog and unpickles) would hold the
        interpreter's lock they take between calls, for as long as the worker chose by when it
        answered. A launch held in the driver for good lets the worker be asked after
        BEHIND_GRACE_S all the same."""
        reply, replied = None, False
        try:
            concurrent.futures.wait([launched], timeout=min(BEHIND_GRACE_S, self._remaining_s()))
            self.ask(operation)
            while not ran_through(launched, end):
                if launched.done():
                    launched.result()  # raises what the launches raised
                if not replied and self._current.connection.poll(0):
                    replied, reply = self._message()  # one at a time: a progress line holds nothing up
                elif replied and not self._current.alive:  # answered, then ended: its work may never end
                    raise CaseStopped(self._crashed())
                if time.monotonic() >= self._until():
                    self._timed_out("the batch's GPU work did not end")
                time.sleep(END_POLL_S)
        except CaseStopped as stopped:
            if stopped.result.status == ERROR and stopped.result.exception:  # what the worker raised: where it came from
                stopped.result.message = f"{AFTER_THE_CALLS}{stopped.result.message}"
            if stopped.result.status != TIMEOUT:  # the worker's error or end: its work may have ended all the same
                self.kill()
                _await(launched, end, min(BEHIND_GRACE_S, self._remaining_s()))
            raise
        except BaseException:
            self.kill()
            raise
        return reply if replied else self.reply()

    def _remaining_s(self) -> float:
        return min(max(self._until() - time.monotonic(), 0.0), threading.TIMEOUT_MAX)

    def _receive(self, remaining_s: float):
        """One message, read under a watchdog: a worker that sends part of a message and stalls
        is killed at the case's deadline, which ends the read."""
        fired = threading.Event()
        watchdog = threading.Timer(remaining_s, lambda: (fired.set(), self.kill()))
        watchdog.start()
        try:
            return wire.receive_untrusted(self._current.connection)
        except (EOFError, ConnectionResetError, BrokenPipeError, OSError):
            if fired.is_set():
                self._timed_out("no result", "worker killed in the middle of a message")
            raise
        except Exception as error:  # a forged or unreadable message: never run, never trusted
            self.kill()
            raise CaseStopped(CaseResult(ERROR, f"the judge refused the worker's message: {error}")) from None
        finally:
            watchdog.cancel()

    def _crashed(self) -> CaseResult:
        """The verdict on a process that died; WorkerNotStarted where it died in its start."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._current.process.wait(timeout=5)
        cgroup = self._current.cgroup
        if cgroup.oom_killed:
            return CaseResult(CRASH, f"worker process killed: its memory (memfds and tmpfs files included) went over the "
                                     f"{cgroup.memory_bytes / 2**20:.0f} MiB limit")
        ended = exit_description(self._current.process.poll())
        if getattr(self._current.process, "lost_with_its_template", False):
            raise WorkerLost(f"a worker ended with the template it was forked from ({ended}): the judge's machine, "
                             "not the file")
        if self._starting:
            raise WorkerNotStarted(f"a worker ended before its first message ({ended}), before the submission was imported: "
                                   "the judge's machine (the sandbox, the environment), not the file")
        return CaseResult(CRASH, f"worker process died without a result: {ended}")

    def output_of_case(self) -> str:
        """What the worker printed since the case began (its last OUTPUT_TAIL_CHARS), or why
        that cannot be read."""
        if self.log_path is None:
            return ""
        try:
            with open(self.log_path, "rb") as log:
                size = os.fstat(log.fileno()).st_size
                log.seek(max(self._log_start, size - 4 * OUTPUT_TAIL_CHARS))
                text = log.read(8 * OUTPUT_TAIL_CHARS).decode("utf-8", errors="replace")
        except OSError as error:
            return f"(the worker's output cannot be read: {error})"
        return output_tail(text, OUTPUT_TAIL_CHARS, left_out=size - 4 * OUTPUT_TAIL_CHARS > self._log_start)

    def kill(self) -> None:
        if self._current is not None:
            self._current.kill()

    def _retire(self) -> None:
        """The current process and all it started ended, its folder, log, sockets and cgroup let
        go (its output read already); kept as the last process for its exit status."""
        if self._current is not None:
            self._current.close()
            self._ended, self._current = self._current, None

    def close(self, ask_to_exit: bool = False) -> None:
        """The process ended with all it started. Killed: its output is read by then, and an
        interpreter's exit with torch is slow, which a candidate failing every case would pay
        each case. Asked to exit (`ask_to_exit`, and always under compute-sanitizer)
        where a tool wrapped around the run collects a process's data at its exit, which a kill
        would lose (nsys around `profile --ncu`; compute-sanitizer reports then)."""
        if self.alive and (ask_to_exit or UNDER_COMPUTE_SANITIZER):
            with contextlib.suppress(BrokenPipeError, OSError):
                wire.send_request(self._current.connection, self._current.request_socket, None, self._describe)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._current.process.wait(timeout=10)
        self._retire()


def _text(value, limit: int) -> str:
    """A worker's string, cut to `limit`; anything else by its type's name only (formatting an
    untrusted value could take the judge's time without bound)."""
    return value[:limit] if type(value) is str else f"({type(value).__name__})"


def _line(value, limit: int) -> str:
    """A worker's string as one line of printable characters (`_text`, every other character a
    space): the judge prints it in its report as part of a line of its own, which it can then
    neither end (a newline, a carriage return) to forge a line of the judge's, a case's verdict or
    the run's, nor rewrite through a terminal's control sequences."""
    return "".join(character if character.isprintable() else " " for character in _text(value, limit))


def _origin(origin) -> str:
    """`Type at file:line` from a worker's (type, file, line), checked as plain values."""
    if not (isinstance(origin, tuple) and len(origin) == 3 and all(type(part) is str for part in origin[:2])):
        return ""
    kind, file, line = _line(origin[0], 80), _line(origin[1], 120), claims.line_number(origin[2])
    return f"{kind} at {file}:{line}" if file else kind
