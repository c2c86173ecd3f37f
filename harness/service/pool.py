"""Worker processes started before their candidate is known, in the service's judge process,
and the next candidate's kernelguard process (harness/judge/precheck.py ReaderAhead).

A pre-started worker is a sandboxed process with a folder of its own and nothing of a
candidate in it: it starts Python, makes its device's context (on a GPU), says it is ready and
waits for its first request. When a run asks for a worker, the pool hands one over; the run
copies the candidate's file and the problem's files into its folder (harness/judge/isolation.py
WorkerProcess), and the pool starts the next one at once, so that its start overlaps the run. A
worker serves one run at most: the run closes it, and it is never handed out again.

A pool of one of several lanes on a GPU (harness/service/lanes.py) starts no replacement beside
its run (`replaces_on_take` off): a context made on a GPU slows every run on it while it is made,
so the lanes' front has each lane's pool `replenish`ed together, between runs.

Where the system allows one (harness/judge/sandbox.py `template_refused`), the workers are forked
from a template (harness/judge/templates.py): a sandboxed process that imported torch once, so
that a worker's start costs a fork and its own walls, not an interpreter's start and torch's
import. The pool checks a child's layers against a fresh worker's before it uses the template,
starts a template again where one ended, and starts workers afresh where there is none; the
sandbox's report says which (`layers["template"]`).

The pool's waiting processes (the kernelguard process's and the template's too) are the judge's
children like the run's: a run keeps them from its stray-process sweeps (`PooledWorker._kept`) and
freezes the waiting workers while a timed case measures (`PooledWorker._neighbours`): one still
starting would share the cores and the GPU with the rounds the judge times. An idle template
sleeps until the judge asks it for a child or a child ends.

With a memory limit, the worker's cgroup holds it (harness/judge/cgroups.py: memfds and tmpfs
files count) and a worker over it is killed by the kernel; the case then ends as a crash that
names the limit. Where the system has no memory cgroup, a watchdog kills a handed-out worker
whose resident memory (its descendants' included) goes over it instead, and the worker's /tmp
and /dev/shm (tmpfs) hold no more than the limit either (a write past it fails: no space left on
the device).
"""

import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness.judge import worker_root
from harness.judge.isolation import WorkerProcess, _descendants, _parents, _Spawned, is_running
from harness.judge.jobs import CRASH, CaseResult
from harness.judge.precheck import ReaderAhead
from harness.judge.sandbox import Sandbox
from harness.judge.templates import COMPARED, Template, TemplateFailed

WATCH_EVERY_S = 0.1
READY_POLL_S = 0.02
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes(pid: int) -> int:
    """The process's resident memory, 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0


class WorkerPool:
    """Pre-started workers: `depth` submission workers kept waiting, and one calibration partner
    (a run takes one at most)."""

    def __init__(self, device: str, rng_seed: int, depth: int = 1, memory_limit_bytes: int | None = None,
                 replaces_on_take: bool = True):
        self.device, self.rng_seed, self.depth = device, rng_seed, depth
        self.replaces_on_take = replaces_on_take
        self.memory_limit_bytes = memory_limit_bytes
        self.sandbox = Sandbox(device, memory_bytes=memory_limit_bytes)
        self._scratch = tempfile.TemporaryDirectory(prefix="nvfp4-pool-")
        self._waiting: dict[bool, list[_Spawned]] = {}
        self._handed_out: dict[int, _Spawned] = {}  # by pid: the run's workers, until retired
        self.over_limit: set[int] = set()
        self.started = self.handed_out = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.kernelguard = ReaderAhead()
        self.template: Template | None = None
        self.sandbox.layers["template"] = self._start_template()
        if memory_limit_bytes and not self.sandbox.layers.get("memory_limit_bytes"):
            threading.Thread(target=self._watch_memory, name="nvfp4-pool-memory", daemon=True).start()

    def _start_template(self) -> str:
        """A template started and checked (its child's layers a fresh worker's), or why not: the
        sandbox's report of it. Without one every worker starts afresh, as a one-shot run's does."""
        refused = self.sandbox.template_refused()
        if refused:
            return f"not used: {refused}"
        # Crossed, never listed, by the template's user: a child binds its own folder from it.
        os.chmod(self._scratch.name, 0o711)
        try:
            template = Template(self.sandbox, self._scratch.name)
        except TemplateFailed as error:
            return f"not used: {error}"
        try:
            found = template.check(sorted(worker_root.listening_sockets()))
            differing = [key for key in COMPARED if found.get(key) != self.sandbox.checked.get(key)]
            if differing:
                raise TemplateFailed(f"its child's layers differ from a fresh worker's in {', '.join(differing)}")
            if found.get("device_context") != "made":
                raise TemplateFailed(f"its child made no context on {self.device}: {found.get('device_context')}")
        except TemplateFailed as error:
            template.close()
            return f"not used: {error}"
        self.template = template
        return "in use"

    def _spawn(self, echo: bool) -> _Spawned:
        """A worker forked by the template where there is one (started again where it ended),
        else started afresh; a template's failure is the machine's, and never a run's."""
        if self.template is not None and not self.template.alive:
            self.template.close()
            self.template = None
            self.sandbox.layers["template"] = self._start_template()
        if self.template is not None:
            try:
                return _Spawned(self.sandbox, self._scratch.name, echo, self.rng_seed, template=self.template)
            except TemplateFailed as error:
                print(f"judge: a template's worker did not come ({error}); a worker started afresh instead",
                      file=sys.stderr, flush=True)
        return _Spawned(self.sandbox, self._scratch.name, echo, self.rng_seed)

    def waiting(self) -> list[_Spawned]:
        with self._lock:
            return [spawned for kind in self._waiting.values() for spawned in kind]

    @property
    def pids(self) -> frozenset[int]:
        template = {self.template.pid} if self.template is not None else set()
        return frozenset(spawned.process.pid for spawned in self.waiting()) | self.kernelguard.pids | template

    def prime(self, echo: bool = False) -> None:
        """Start the workers of the kind that are not waiting yet, before any run asks for one."""
        while len(self._waiting.get(echo, [])) < (1 if echo else self.depth):
            self._start(echo)

    def _start(self, echo: bool) -> None:
        spawned = self._spawn(echo)
        with self._lock:
            self._waiting.setdefault(echo, []).append(spawned)
            self.started += 1

    def ready_waiting(self) -> int:
        """Submission workers waiting that have made their context (said they are ready)."""
        with self._lock:
            waiting = list(self._waiting.get(False, []))
        return sum(spawned.alive and spawned.connection.poll(0) for spawned in waiting)

    def replenish(self, limit_s: float) -> int:
        """The submission workers that ended dropped, the others started up to `depth`, and all
        waited for until each has made its context, `limit_s` in all at most (no start begins
        after it): the ready ones' count."""
        deadline = time.monotonic() + limit_s
        self._drop_ended(False)
        while len(self._waiting[False]) < self.depth and time.monotonic() < deadline:
            self._start(False)
        while time.monotonic() < deadline and self.ready_waiting() < self._alive_waiting():
            time.sleep(READY_POLL_S)
        return self.ready_waiting()

    def _alive_waiting(self) -> int:
        with self._lock:
            return sum(spawned.alive for spawned in self._waiting.get(False, []))

    def _drop_ended(self, echo: bool) -> None:
        """The waiting workers of the kind that ended closed and dropped."""
        with self._lock:
            waiting = self._waiting.get(echo, [])
            ended = [spawned for spawned in waiting if not spawned.alive]
            self._waiting[echo] = [spawned for spawned in waiting if spawned.alive]
        for gone in ended:
            gone.close()

    def take(self, echo: bool) -> _Spawned:
        """A started worker of the kind, never handed out before; its replacement starts now
        (where `replaces_on_take`: else at the next `replenish`)."""
        self._drop_ended(echo)
        with self._lock:
            waiting = self._waiting.get(echo, [])
            spawned = waiting.pop(0) if waiting else None
        if spawned is None:
            spawned = self._spawn(echo)
            self.started += 1
        with self._lock:
            self._handed_out[spawned.process.pid] = spawned
            self.handed_out += 1
        if self.replaces_on_take or echo:
            self.prime(echo)
        return spawned

    def _watch_memory(self) -> None:
        while not self._closed.wait(WATCH_EVERY_S):
            with self._lock:
                watched = list(self._handed_out)
            parents = _parents()
            for pid in watched:
                if not is_running(pid):  # ended, whoever ended it: its pid may come back as another's
                    self.released(pid)
                    continue
                if pid in self.over_limit:
                    continue
                tree = [pid, *_descendants(pid, parents)]
                if sum(resident_bytes(member) for member in tree) > self.memory_limit_bytes:
                    self.over_limit.add(pid)
                    for member in tree:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(member, signal.SIGKILL)

    def end_handed_out(self) -> None:
        """Every worker handed out and not yet retired killed, with all it started, whatever it
        is doing (a cancelled run's: a judge runs one candidate at a time); the waiting ones kept."""
        with self._lock:
            handed_out = list(self._handed_out.values())
        for spawned in handed_out:
            spawned.kill()

    def released(self, pid: int) -> None:
        with self._lock:
            self._handed_out.pop(pid, None)

    def forget(self, pid: int) -> None:
        """A run's process retired, its crash reported: its pid, which the system gives another
        process in time, no longer marks a worker over the limit (one the watchdog would then
        never watch, whose crash would name a limit it did not pass)."""
        self.released(pid)
        with self._lock:
            self.over_limit.discard(pid)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            waiting = [spawned for kind in self._waiting.values() for spawned in kind]
            self._waiting.clear()
        for spawned in waiting:
            spawned.close()
        self.kernelguard.close()
        if self.template is not None:
            self.template.close()
        self.sandbox.close()
        self._scratch.cleanup()

    def workers(self) -> "PooledWorkers":
        return PooledWorkers(self)

    @property
    def folders_root(self) -> str:
        """Where the pre-started workers' folders are."""
        return self._scratch.name


class PooledWorker(WorkerProcess):
    """A run's worker whose processes come from the pool, each for this run alone."""

    def __init__(self, pool: WorkerPool, sandbox: Sandbox, log_dir: str, files: dict[str, Path], options, describe,
                 echo: bool):
        super().__init__(sandbox, log_dir, files, options.device, options.rng_seed, describe, echo=echo)
        self._worker_pool = pool

    def _spawn(self) -> _Spawned:
        return self._worker_pool.take(self._echo)

    def _neighbours(self) -> list[_Spawned]:
        """The pool's waiting workers: kept from the run's sweeps of strays, and frozen while a
        timed case measures."""
        return self._worker_pool.waiting()

    def _kept(self) -> set[int]:
        """The pool's processes: its waiting workers, the kernelguard process, the template (whose
        end would end every worker it forked, this run's among them)."""
        return set(self._worker_pool.pids)

    def _retire(self) -> None:
        retired = self._current
        super()._retire()
        if retired is not None:
            self._worker_pool.forget(retired.process.pid)

    def _crashed(self) -> CaseResult:
        result = super()._crashed()
        if self._current.process.pid in self._worker_pool.over_limit:
            limit_mib = self._worker_pool.memory_limit_bytes / 2**20
            return CaseResult(CRASH, f"worker process killed: its resident memory went over the {limit_mib:.0f} MiB limit")
        return result


class PooledWorkers:
    """modes.FreshWorkers' interface over a pool (harness/judge/modes.py Executor)."""

    def __init__(self, pool: WorkerPool):
        self._pool = pool

    @property
    def pids(self) -> frozenset[int]:
        return self._pool.pids

    @property
    def folders_root(self) -> str:
        return self._pool.folders_root

    @property
    def memory_limit_bytes(self) -> int | None:
        return self._pool.memory_limit_bytes

    def worker(self, sandbox: Sandbox, log_dir: str, files: dict[str, Path], options, describe,
               echo: bool = False) -> WorkerProcess:
        if options.device != self._pool.device or options.rng_seed != self._pool.rng_seed:
            raise ValueError(f"this pool's workers run on {self._pool.device} with the generators' seed {self._pool.rng_seed}")
        return PooledWorker(self._pool, sandbox, log_dir, files, options, describe, echo)
