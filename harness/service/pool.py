"""Worker processes started before their candidate is known, in the service's judge process.

A pre-started worker has its own runner folder with the problem's files and no submission; it
starts Python, imports torch and the runner, and waits. When a run asks for a worker, the pool
hands one over, copies the candidate's file into its folder (the worker imports it only when the
judge asks it to) and starts the next one at once, so that its start overlaps the run. A worker
serves one run at most: the run closes it, and it is never handed out again.

The pool's waiting processes are the judge's children like the run's: a run keeps them from its
stray-process sweeps and stops them (SIGSTOP) with its own while it times (`pids`).

With a memory limit, a watchdog kills a handed-out worker whose resident memory (its
descendants' included) goes over it; the case then ends as a crash that names the limit.
"""

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

from harness.jobs import CRASH, CaseResult
from harness.judge.isolation import WorkerProcess, _descendants, _parents, is_running
from harness.runner.files import make_runner_folder

WATCH_EVERY_S = 0.1
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes(pid: int) -> int:
    """The process's resident memory, 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0


class _Started:
    """One pre-started worker: (process, connection, log path) as WorkerProcess holds them, and
    its runner folder."""

    def __init__(self, spawned: tuple, folder: Path):
        self.spawned, self.folder = spawned, folder

    @property
    def process(self):
        return self.spawned[0]


class WorkerPool:
    """Pre-started workers per (problem, calibration partner or not), `depth` of each kind kept
    waiting once a run has asked for that kind."""

    def __init__(self, device: str, global_seed: int, depth: int = 1, memory_limit_bytes: int | None = None):
        self.device, self.global_seed, self.depth = device, global_seed, depth
        self.memory_limit_bytes = memory_limit_bytes
        self._scratch = tempfile.TemporaryDirectory(prefix="nvfp4-pool-")
        self._waiting: dict[tuple, list[_Started]] = {}
        self._handed_out: dict[int, int] = {}  # pid -> the memory limit it runs under
        self.over_limit: set[int] = set()
        self.started = self.handed_out = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._watchdog = None
        if memory_limit_bytes:
            self._watchdog = threading.Thread(target=self._watch_memory, name="nvfp4-pool-memory", daemon=True)
            self._watchdog.start()

    @property
    def pids(self) -> frozenset[int]:
        with self._lock:
            return frozenset(started.process.pid for waiting in self._waiting.values() for started in waiting)

    def prime(self, problem, echo: bool = False) -> None:
        """Start `depth` workers of the kind now, before any run asks for one."""
        key = (problem.name, str(problem.folder), echo)
        while len(self._waiting.get(key, [])) < self.depth:
            self._start(problem, echo)

    def _start(self, problem, echo: bool) -> None:
        folder = make_runner_folder(None, self._scratch.name, problem)
        # The seam with the worker's process: WorkerProcess starts one in a given folder.
        spawned = WorkerProcess(self._scratch.name, folder, self.device, self.global_seed, echo=echo)._spawn()
        with self._lock:
            self._waiting.setdefault((problem.name, str(problem.folder), echo), []).append(_Started(spawned, folder))
            self.started += 1

    def take(self, problem, echo: bool, submission: Path | None) -> tuple:
        """A started worker for a run of `submission` (None for the calibration partner, which
        never imports one): (process, connection, log path). Its replacement starts now."""
        key = (problem.name, str(problem.folder), echo)
        with self._lock:
            waiting = [started for started in self._waiting.get(key, []) if started.process.is_alive()]
            started = waiting.pop(0) if waiting else None
            self._waiting[key] = waiting
        if started is None:
            self._start(problem, echo)
            with self._lock:
                started = self._waiting[key].pop(0)
        if submission is not None:
            shutil.copyfile(submission, started.folder / "submission.py")
        with self._lock:
            self._handed_out[started.process.pid] = self.memory_limit_bytes or 0
            self.handed_out += 1
        self.prime(problem, echo)
        return started.spawned

    def _watch_memory(self) -> None:
        while not self._closed.wait(WATCH_EVERY_S):
            with self._lock:
                watched = dict(self._handed_out)
            parents = _parents()
            for pid, limit in watched.items():
                if not is_running(pid):  # ended, whoever ended it: its pid may come back as another's
                    self.released(pid)
                    continue
                if not limit or pid in self.over_limit:
                    continue
                tree = [pid, *_descendants(pid, parents)]
                if sum(resident_bytes(member) for member in tree) > limit:
                    self.over_limit.add(pid)
                    for member in tree:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(member, 9)

    def released(self, pid: int) -> None:
        with self._lock:
            self._handed_out.pop(pid, None)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            waiting = [started for kind in self._waiting.values() for started in kind]
            self._waiting.clear()
        for started in waiting:
            process, connection, _ = started.spawned
            process.kill()
            process.join(timeout=10)
            connection.close()
        self._scratch.cleanup()

    def workers(self) -> "PooledWorkers":
        return PooledWorkers(self)


class PooledWorker(WorkerProcess):
    """A run's worker whose processes come from the pool, each for this run's submission only."""

    def __init__(self, pool: WorkerPool, log_dir: str, runner_folder: Path, options, spares: bool, echo: bool):
        super().__init__(log_dir, runner_folder, options.device, options.global_seed, spares=spares, echo=echo)
        self._pool, self._problem, self._echo = pool, options.problem, echo
        self._submission = None if echo else options.submission

    def _spawn(self) -> tuple:
        return self._pool.take(self._problem, self._echo, self._submission)

    @property
    def pids(self) -> set[int]:
        return super().pids | self._pool.pids

    def _crashed(self) -> CaseResult:
        result = super()._crashed()
        if self._process.pid in self._pool.over_limit:
            limit_mib = self._pool.memory_limit_bytes / 2**20
            return CaseResult(CRASH, f"worker process killed: its resident memory went over the {limit_mib:.0f} MiB limit")
        return result

    def kill(self) -> None:
        super().kill()
        if self._process is not None:
            self._pool.released(self._process.pid)


class PooledWorkers:
    """modes.FreshWorkers' interface over a pool (harness/modes.py Executor)."""

    def __init__(self, pool: WorkerPool):
        self._pool = pool

    @property
    def pids(self) -> frozenset[int]:
        return self._pool.pids

    def worker(self, log_dir: str, runner_folder: Path, options, spares: bool = False, echo: bool = False) -> WorkerProcess:
        if options.device != self._pool.device or options.global_seed != self._pool.global_seed:
            raise ValueError(f"this pool's workers run on {self._pool.device} with seed {self._pool.global_seed}")
        return PooledWorker(self._pool, log_dir, runner_folder, options, spares, echo)
