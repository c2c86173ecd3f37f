"""A worker's cgroups: one of its own (v2) to freeze and kill its whole tree at once, and its
memory and process-count limits.

The limits are kept by the kernel's memory and pids controllers, which count what no resident
size shows: memfds never mapped, files on its tmpfs (/tmp, /dev/shm), the page cache it fills.
Where the v2 hierarchy lacks a controller (a host that keeps memory and pids on v1 cgroups), its
v1 hierarchy holds the worker instead; `oom_kill` reads the same in both (v2 `memory.events`,
v1 `memory.oom_control`).
"""

import contextlib
import os
import tempfile
import time
from pathlib import Path

# A worker's processes and threads together: torch's thread pools and torch.compile's compile
# workers are a few per core; a fork bomb is stopped well before the machine's table fills.
MAX_PIDS = 8192


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, type, options) of every cgroup hierarchy."""
    mounts = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
                mounts.append((fields[1], fields[2], set(fields[3].split(","))))
    return mounts


def _own_v1_path(controller: str) -> str:
    """This process's cgroup in the v1 hierarchy of `controller` (/proc/self/cgroup)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    raise OSError(f"no v1 {controller} cgroup")


def _new_judge_folder(parent: Path) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"nvfp4-judge-{os.getpid()}-", dir=parent))


class JudgeCgroups:
    """The judge's cgroups, holding no process, under which each worker gets its own: `v2` for
    freezing and killing (None where cgroup v2 is not writable or lacks freeze and kill), and a
    folder per limit controller (`memory`, `pids`) where the system has one writable."""

    def __init__(self, enabled: bool):
        self.v2: Path | None = None
        self.controllers: dict[str, Path] = {}
        if not enabled:
            return
        mounts = _mounts()
        v2_mount = next((point for point, kind, _ in mounts if kind == "cgroup2"), None)
        if v2_mount is not None:
            with contextlib.suppress(OSError):
                root = _new_judge_folder(Path(v2_mount))
                if (root / "cgroup.freeze").exists() and (root / "cgroup.kill").exists():
                    self.v2 = root
                else:
                    root.rmdir()
        for controller in ("memory", "pids"):
            if self.v2 is not None and controller in (self.v2 / "cgroup.controllers").read_text().split():
                with contextlib.suppress(OSError):
                    (self.v2 / "cgroup.subtree_control").write_text(f"+{controller}")
                    self.controllers[controller] = self.v2
                    continue
            v1_mount = next((point for point, kind, options in mounts if kind == "cgroup" and controller in options), None)
            if v1_mount is None:
                continue
            with contextlib.suppress(OSError):
                self.controllers[controller] = _new_judge_folder(Path(v1_mount + _own_v1_path(controller)))

    def close(self) -> None:
        for folder in {self.v2, *self.controllers.values()} - {None}:
            with contextlib.suppress(OSError):
                folder.rmdir()
        self.v2, self.controllers = None, {}


class WorkerCgroup:
    """A worker's cgroups under the judge's, or nothing where there are none; `memory_bytes` its
    memory limit (swap none) where the judge has a memory controller."""

    def __init__(self, judge: JudgeCgroups, name: str, memory_bytes: int | None = None):
        self.path = None
        self.memory_bytes = None
        self._limited: list[Path] = []
        if judge.v2 is not None:
            with contextlib.suppress(OSError):
                (judge.v2 / name).mkdir()
                self.path = judge.v2 / name
        for controller, parent in judge.controllers.items():
            folder = parent / name
            with contextlib.suppress(OSError):
                folder.mkdir(exist_ok=parent == judge.v2)
                if controller == "pids":
                    (folder / "pids.max").write_text(str(MAX_PIDS))
                elif memory_bytes and parent == judge.v2:
                    (folder / "memory.max").write_text(str(memory_bytes))
                    with contextlib.suppress(FileNotFoundError):  # a kernel without swap accounting
                        (folder / "memory.swap.max").write_text("0")
                elif memory_bytes:
                    (folder / "memory.limit_in_bytes").write_text(str(memory_bytes))
                    with contextlib.suppress(FileNotFoundError):
                        (folder / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
                if folder != self.path:
                    self._limited.append(folder)
                if controller == "memory" and memory_bytes:
                    self.memory_bytes = memory_bytes
        self._memory_events = next((folder / events for folder in [self.path, *self._limited] if folder is not None
                                    for events in ("memory.events", "memory.oom_control")
                                    if (folder / events).exists()), None) if self.memory_bytes else None

    def enter(self) -> None:
        """Called in the new process before it executes anything: it and all it starts belong here."""
        self.place(os.getpid())

    def place(self, pid: int) -> None:
        """The process `pid` moved here (a template's child, by the judge, before its first step)."""
        for folder in [self.path, *self._limited]:
            if folder is not None:
                (folder / "cgroup.procs").write_text(str(pid))

    def members(self) -> list[int]:
        """The processes in it (v2), by their pids in the judge's namespace: those its worker
        started that left its tree (orphans adopted outside it) among them."""
        if self.path is not None:
            with contextlib.suppress(OSError, ValueError):
                return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        return []

    def _write(self, name: str, value: str) -> bool:
        if self.path is None:
            return False
        try:
            (self.path / name).write_text(value)
            return True
        except OSError:
            return False

    def freeze(self, frozen: bool) -> bool:
        """Asks the kernel to stop (or let go) every process in it at once; True where it took the
        request. A stop completes asynchronously (a process inside a system call stops when it
        returns): `frozen` says when it has."""
        return self._write("cgroup.freeze", "1" if frozen else "0")

    @property
    def frozen(self) -> bool:
        if self.path is None:
            return False
        try:
            return "frozen 1" in (self.path / "cgroup.events").read_text()
        except OSError:
            return False

    @property
    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of it for going over its memory limit."""
        if self._memory_events is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            for line in self._memory_events.read_text().splitlines():
                name, _, count = line.partition(" ")
                if name == "oom_kill" and int(count) > 0:
                    return True
        return False

    def kill(self) -> None:
        self._write("cgroup.kill", "1")

    def remove(self) -> None:
        """Everything in it killed, then its cgroups removed once the kernel has emptied them."""
        if self.path is not None:
            self.kill()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    if "populated 0" in (self.path / "cgroup.events").read_text():
                        break
                time.sleep(0.005)
        for folder in [*self._limited, self.path]:
            if folder is None:
                continue
            deadline = time.monotonic() + 5
            while True:  # a v1 cgroup has no kill: its processes, killed with the v2 one, leave it
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.005)
        self.path, self._limited = None, []
