"""A template worker seen from the judge: started sandboxed (harness/judge/sandbox.py
`launch_template`), asked for one child per worker (harness/runner/template.py), each child
found by its pid on the host, put in a cgroup of its own and only then let go; its exit status
read from the template, which reaps it.

A child is no child of the judge's: `ForkedProcess` gives it what the judge uses of a Popen
(pid, poll, wait, kill, returncode), its signals sent through a pidfd (a pid the system gave
another process is never signalled). Where the template is gone, so are its children (its pid
namespace ended with it): each then reads as killed.

Anything that goes wrong here is the machine's, never a candidate's: `TemplateFailed`, on which
the pool (harness/service/pool.py) starts a template afresh or a plain worker instead.
"""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from harness.judge import judge_user
from harness.judge.isolation import START_LIMIT_S, _descendants, _parents, is_running
from harness.judge.sandbox import Launch, Sandbox
from harness.runner import template

# The parts of a sandboxed process's report (harness/runner/confine.py `report`) that a
# template's child must show as a worker started afresh does.
COMPARED = ("uid", "gid", "host_uid", "capabilities", "no_new_privs", "seccomp", "landlock", "sockets_reached", "refused")
LOG_TAIL_CHARS = 2000


def _namespace_pids(pid: int) -> list[int]:
    """The process's pid in each pid namespace from the judge's down to its own (NSpid); none
    where it has ended."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        with open(f"/proc/{pid}/status") as status:
            return [int(found) for found in next(line for line in status if line.startswith("NSpid:")).split()[1:]]
    return []


class TemplateFailed(Exception):
    """The template cannot give a worker now: it did not start, it ended, or a child of it did
    not come; nothing of a candidate's has run in it."""


class ForkedProcess:
    """A template's child as the judge's code uses a Popen: `pid` on the host, `poll`, `wait`,
    `kill`, `returncode` (negative: the signal that ended it)."""

    def __init__(self, template_: "Template", request_id: int, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self.lost_with_its_template = False  # ended by its template's end, not by anything of its own
        self._template = template_
        self._id = request_id
        self._pidfd: int | None = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            status = self._template.exit_status(self._id)
            if status is None and not self._template.alive:  # its pid namespace ends with the template's
                self.kill()
                if not is_running(self.pid):
                    status = -signal.SIGKILL
                    self.lost_with_its_template = True
            if status is not None:
                self.returncode = status
                self._close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def _close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class Template:
    """One started template, its control socket read by a thread of the judge's."""

    def __init__(self, sandbox: Sandbox, folders_root: str):
        """A template whose children's folders are made under `folders_root` (the pool's)."""
        self._sandbox = sandbox
        self._folders_root = folders_root
        self._scratch = tempfile.mkdtemp(prefix="nvfp4-template-")
        self.folder = Path(tempfile.mkdtemp(prefix="template-", dir=self._scratch))
        log = tempfile.NamedTemporaryFile(dir=self._scratch, prefix="template-", suffix=".log", delete=False)
        self.log_path = log.name
        self._control, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        launch = sandbox.launch_template(self.folder, template_end.fileno(), log.fileno(), folders_root)
        try:
            self.process = subprocess.Popen(
                launch.argv, pass_fds=launch.pass_fds, preexec_fn=launch.preexec, stdin=subprocess.DEVNULL,
                stdout=log.fileno(), stderr=log.fileno(), env=sandbox.environment(self.folder), start_new_session=True)
        finally:
            template_end.close()
            log.close()
        self.launch = launch
        self._lock = threading.Lock()  # one request on the socket at a time
        self._changed = threading.Condition()
        self._next_id = 0
        self._forked: dict[int, int] = {}  # request id -> the child's pid in the template's namespace
        self._ended: dict[int, int] = {}  # request id -> exit status
        self._threads: int | None = None  # its threads when it was ready (-1: with a CUDA context)
        self._gone = False
        threading.Thread(target=self._read, name="nvfp4-template", daemon=True).start()
        with self._changed:
            self._changed.wait_for(lambda: self._threads is not None or self._gone, START_LIMIT_S)
        if self._threads != 1:
            said = self.log_tail()
            self.close()
            why = {None: "", -1: "CUDA was initialised before its forks; "}.get(self._threads, f"{self._threads} threads; ")
            raise TemplateFailed(f"the template did not start ({why}its output: {said})")

    @property
    def alive(self) -> bool:
        return not self._gone and self.process.poll() is None

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return Path(self.log_path).read_text(errors="replace")[-LOG_TAIL_CHARS:].strip()
        return ""

    def _read(self) -> None:
        while True:
            try:
                data = self._control.recv(template.MESSAGE_BYTES)
                message = json.loads(data) if data else None
            except (OSError, ValueError):
                message = None
            with self._changed:
                if not isinstance(message, dict):
                    self._gone = True
                    self._changed.notify_all()
                    return
                if "ready" in message:
                    self._threads = int(message.get("threads", 0)) if message.get("cuda") is False else -1
                elif "forked" in message:
                    self._forked[int(message["id"])] = int(message["forked"])
                elif "ended" in message:
                    self._ended[int(message["ended"])] = int(message["status"])
                self._changed.notify_all()

    def exit_status(self, request_id: int) -> int | None:
        with self._changed:
            return self._ended.get(request_id)

    def worker(self, folder: Path, judge_end: socket.socket, worker_fd: int, log_fd: int, echo: bool, rng_seed: int,
               **more_settings) -> tuple[Launch, ForkedProcess]:
        """A child forked to serve as a worker whose folder is `folder`, talking on `worker_fd`
        and printing to `log_fd`, in its own cgroup, let go (sent template.GO on `judge_end`)."""
        launch, settings = self._sandbox.forked(folder, echo, rng_seed, self._folders_root, **more_settings)
        try:
            process = self._fork(settings, worker_fd, log_fd)
            try:
                with judge_user.files_of_root():
                    launch.cgroup.place(process.pid)
                judge_end.sendall(template.GO)
            except OSError as error:
                process.kill()
                raise TemplateFailed(f"a child of the template could not be let go: {error}") from None
        except BaseException:
            launch.remove()
            raise
        return launch, process

    def _fork(self, settings: dict, worker_fd: int, log_fd: int) -> ForkedProcess:
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
            try:
                socket.send_fds(self._control, [json.dumps({"id": request_id, "settings": settings}).encode()],
                                [worker_fd, log_fd])
            except OSError as error:
                raise TemplateFailed(f"the template takes no request: {error}") from None
        with self._changed:
            if not self._changed.wait_for(lambda: request_id in self._forked or self._gone, START_LIMIT_S) or self._gone:
                raise TemplateFailed(f"the template forked no child: {self.log_tail()}")
            inner = self._forked.pop(request_id)
        pid = self._host_pid(inner)
        if pid is None:
            raise TemplateFailed(f"the template's child {inner} is not in sight")
        try:
            return ForkedProcess(self, request_id, pid)
        except OSError as error:
            raise TemplateFailed(f"the template's child {inner} ended at once: {error}") from None

    def _host_pid(self, inner: int) -> int | None:
        """The host's pid of the template's child whose pid in the template's namespace is `inner`:
        of the processes in that namespace itself, one level below bubblewrap's. A running child
        may make a pid namespace of its own below it (clone's flags are no system call the filter
        names), whose processes' last pid it chooses (clone3's set_tid): never one of those."""
        depth = len(_namespace_pids(self.process.pid)) + 1
        for pid in _descendants(self.process.pid, _parents()):
            pids = _namespace_pids(pid)
            if len(pids) == depth and pids[-1] == inner:
                return pid
        return None

    def check(self, sockets: list[str]) -> dict:
        """The layers in force in a child, confined as a worker is (harness/runner/confine.py
        `report`): its report, or TemplateFailed."""
        folder = Path(tempfile.mkdtemp(prefix="runner-check-", dir=self._folders_root))
        judge_end, worker_end = socket.socketpair()
        try:
            with tempfile.TemporaryFile() as log:
                launch, process = self.worker(folder, judge_end, worker_end.fileno(), log.fileno(), False, 0,
                                              check=True, sockets=sockets)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
                finally:
                    launch.remove()
                log.seek(0)
                output = log.read().decode(errors="replace")
        finally:
            judge_end.close()
            worker_end.close()
            with contextlib.suppress(OSError):
                for name in os.listdir(folder):
                    os.unlink(folder / name)
                folder.rmdir()
        found = next((json.loads(line) for line in output.splitlines() if line.startswith("{")), None)
        if found is None:
            raise TemplateFailed(f"the template's child gave no report: {output.strip()[-500:]}")
        return found

    def close(self) -> None:
        """The template ended with its children (their pid namespace ends with it), its cgroup,
        folder and log removed."""
        with contextlib.suppress(OSError):
            self._control.shutdown(socket.SHUT_RDWR)
        self._control.close()
        self.launch.cgroup.kill()
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self.launch.remove()
        shutil.rmtree(self._scratch, ignore_errors=True)
